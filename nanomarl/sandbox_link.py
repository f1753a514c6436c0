"""sandbox_link.py: the link between the two processes of a sandboxed run: requests and answers
both ways, under the alarm of sandbox_alarm.py.

Executed inside the sandbox as the module `sandbox_link` (sandbox.py's BOOT). The two processes talk
in lines of JSON, either way: a request [seq, "q", op, target, a, b, extra] or an answer [seq, "a",
status, payload, extra] (the test process numbers its requests upwards, the program's process
downwards). While one side waits for an answer it serves the other's requests (a callback from a
test calling the program again). What travels, and its tags, is sandbox_values.py's (copies and
marks: sandbox_copies.py); an object that is no value travels as a reference whose operations the
other side asks for: in the test process a Remote for a program object (of the subclass for what
its type has: sandbox_remote.py), in the program's process a TestObject for a test object (of its
class's proxy class: sandbox_proxies.py). One thread at a time talks (TALKING). LINK holds this
side's state (filled by sandbox_verdicts.py:test_side, sandbox_child.py:program_side). Either
side's message tells the other its decimal context where it changed (state_told, unpacked): the
two processes share one, as a program and its tests do in plain Python."""
import _operator, _thread, math, os, select, sys

from sandbox_alarm import LINK, TestTimeout, attempt, due, held  # (the first three: for the others)
from sandbox_copies import (changed, containers, extend, kept_entry, leaves, news, pairs, refill,
                            shared)
from sandbox_lending import awake, unrest
from sandbox_patches import DECIMAL, current_decimal, decimal_now, take_decimal
from sandbox_values import (Abort, ProgramError, describe, dump,
                            error_payload)  # sandbox.py's BOOT

READ, WRITE, EXIT, SELECT = os.read, os.write, os._exit, select.select  # (before any program code)
GET_LIMIT, SET_LIMIT = sys.getrecursionlimit, sys.setrecursionlimit
ROOM, LEVEL = 100, dict(test=10, program=8)  # frames over the limit for the harness (room)
LIMIT = [0, 0]  # the recursion limit room() set last, the frames it added
DEEP = 20000  # the recursion limit under which a value is read (deep): json's scanner, ~130 bytes
# of C stack a level, stays within 3 MB; one is numbered and dumped under 2/3 of it (deep): a
# dict's level is three of JSON's


def deep(fn, *args, limit=DEEP * 2 // 3):
    """fn(*args) under the recursion limit `limit` (the harness's walk of a value, whatever the
    test's or the program's own limit: a value nested some 6,000 deep crosses, a deeper one fails),
    the limit as it was after; under the limit as it is where the stack is deeper already."""
    now = GET_LIMIT()
    try:
        SET_LIMIT(limit)
    except RecursionError:
        return fn(*args)
    try:
        return fn(*args)
    finally:
        SET_LIMIT(now)


def compiled(source, name):
    """The code object, compiled before anything runs (no flag changed later applies), or the
    compiler's error (SyntaxError, ValueError for a null byte, ...)."""
    try:
        return compile(source, name, "exec", dont_inherit=True, optimize=0)
    except BaseException as e:
        return e


def run(code, scope):
    if isinstance(code, BaseException):
        raise code
    exec(code, scope, scope)


def read_line(fd, buffer, limit):
    """The next line (without its newline) from fd, left in buffer (arrived takes it out); None at
    the end or past limit bytes. A ring of the alarm raises while it waits for bytes, never once
    some are read (they are in buffer first: poured); one that came while the alarm was held off
    (a flood of lines keeps it so) raises on each pass (sandbox_alarm.py:due)."""
    start = 0
    due()
    while (end := buffer.find(b"\n", start)) < 0:
        due()
        start = len(buffer)
        if start > limit or not (SELECT([fd], [], []) and held(poured, fd, buffer)):
            return None
    return bytes(buffer[:end])


def poured(fd, buffer):
    """The bytes fd holds now (select found some, or its end) added to buffer -> how many."""
    chunk = READ(fd, 1 << 16)
    buffer += chunk
    return len(chunk)


# what one may ask of the other's object: a program object's text; a test object's protocol
OPS = dict(len=len, bool=bool, str=str, repr=repr, iter=iter, format=format,
           getitem=lambda a, b: a[b], contains=lambda a, b: b in a,
           isinstance=lambda a, b: isinstance(b, a),
           special=lambda a, asked: special_op(a, asked))
BINARY = {"contains", "isinstance"}
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
ARITHMETIC = "add sub mul matmul truediv floordiv mod pow lshift rshift and xor or".split()
OPERATORS = {prefix + n for prefix in ("", "r", "i") for n in ARITHMETIC} | {"divmod", "rdivmod"}
BUILTINS = dict(int=int, float=float, complex=complex, bytes=bytes, round=round,
                trunc=math.trunc, floor=math.floor, ceil=math.ceil, **{
                    n: getattr(_operator, n) for n in (
                        "neg", "pos", "invert", "abs", "index", "setitem", "delitem")})


def special_op(value, asked):
    """A test object's arithmetic, conversion or item assignment ([name, operands...]) -> [its
    class's method's result], or [] for none or NotImplemented; a unary one's by the builtin."""
    name, *operands = asked
    if type(name) is str and name in BUILTINS:
        return [BUILTINS[name](value, *operands)]
    method = getattr(type(value), "__%s__" % name, None) if name in OPERATORS else None
    found = NotImplemented if method is None else method(value, *operands)
    return [] if found is NotImplemented else [found]


def with_pairs(text, pairs):
    """A dumped dict's text with more [key, value] pairs (JSON texts) in it."""
    if not pairs:
        return text
    return text[:-2] + ("," if text != '{"d":[]}' else "") + ",".join(pairs) + "]}"


def write_all(fd, data):
    sent = 0
    try:
        while sent < len(data):
            sent += WRITE(fd, data[sent:])
    except OSError:
        if LINK.get("side") == "test":
            raise abort(gone("has ended")) from None
        EXIT(0)  # the program's process: the test process is gone
    finally:
        if 0 < sent < len(data) and LINK.get("side") == "test":
            gone("stopped reading")  # interrupted mid-request: the stream is out of step


# one request at a time: a thread's request, its answer and the requests served meanwhile
TALKING = _thread.RLock()


def request(op, target, a=None, b=None, extra=None):
    """Sends a request and returns the answer (a value, or the exception the other side reported
    raised here), serving its requests meanwhile; kept containers cross as marks, news first."""
    LINK["ahead"](None)  # (a stream's item read ahead is suspended first: sandbox_ahead.py)
    with TALKING:
        caller = room(LIMIT[1] + ROOM)
        try:
            return talk(op, target, a, b, extra or {}, caller)
        finally:
            room(caller)


def talk(op, target, a, b, extra, caller):
    if LINK["gone"]:
        raise abort(gone(""))
    if LINK["failed"] and LINK["side"] == "test":  # the test has failed: its program is not asked
        raise TestTimeout() if LINK["failed"].startswith("Timeout") else Abort(LINK["failed"])
    step, count = 1 if LINK["side"] == "test" else -1, len(LINK.get("mine", ()))
    try:
        refer, aliases = LINK["refer"], LINK["kept_tags"]
        line = "[%d,\"q\",%s,%s,%s,%s," % (LINK["seq"] + step, dump(op, None), dump(target, None),
                                         *[deep(dump, v, refer, aliases) for v in (a, b)])
        # (told last, once all else is dumped: a request that cannot be sent tells nothing)
        args = {id(c) for c in LINK["args"][-1]} if LINK["args"] else ()
        line += with_pairs(dump(extra, refer, aliases), told(args) + state_told()) + "]\n"
    except BaseException as e:  # (a cyclic or too deep argument): the harness's failure
        if LINK["side"] == "test":
            unnumbered(count)  # (one it cannot send: Abort)
        if LINK["side"] != "test" or not isinstance(e, Exception):
            raise
        raise unsendable(e) from None
    LINK["seq"] = seq = LINK["seq"] + step
    write_all(LINK["out"], line.encode())
    state_out()
    LINK["sent"](extra)  # (out: what it carries is the other side's now; not before)
    try:
        while True:
            try:
                if (message := LINK["next"]())[1] == "q":
                    serve(message, caller + LEVEL[LINK["side"]])
                    continue
            except Exception as e:  # the harness's own failure (no TestTimeout), unanswered:
                if LINK["side"] != "test":  # the test process reads the end (its test fails)
                    EXIT(0)
                raise abort(e) from None
            if message[0] == seq:  # (another is late: its wait ended; its news taken: overdue)
                break
            overdue(message)
    except TestTimeout:  # (its wait ended: its answer comes late, to overdue)
        LINK["waiting"][seq] = (held(current_decimal, LINK["side"] == "test"), *[
            LINK[key][-1] if LINK[key] else [] for key in ("args", "tuples")])
        if (read := LINK.get("read")) and read[0] in LINK["waiting"]:
            held(overdue, read)  # (an answer read as the alarm rang, its own or a late one)
        if LINK.get("heard") == seq:  # (its own, read but malformed: no other comes)
            LINK["waiting"].pop(seq, None)
        raise
    LINK["read"] = None  # (taken: what it holds lives where its caller keeps it, no longer)
    return LINK["answered"](message)


def serve(message, frames=0):
    """Answers one request of the other process (LINK["ops"], under its alarm; frames: room's)."""
    seq, _, op, target, a, b, extra = message
    LINK["before"](extra)
    caller = room(frames)
    try:
        status, payload = attempt(lambda: LINK["ops"](op, target, a, b, extra), extra.get("s", 1.0))
    finally:
        room(caller)
    LINK["answer"](seq, status, payload, LINK["after"](extra))


def room(frames):
    """Sets the recursion limit to the one the test or the program set last (any but room's last)
    plus `frames` -> the frames added before. A request's harness code runs ROOM over its caller's
    limit, the code it runs LEVEL (the harness's frames between, as the limit counts them): their
    calls of each other nest as deep as in one process, the test's or program's own no deeper."""
    now = GET_LIMIT()
    own, before = now - LIMIT[1] if now == LIMIT[0] else now, LIMIT[1]
    try:
        SET_LIMIT(own + frames)
    except RecursionError:  # (not below the depth it runs at: it stays higher)
        pass
    if LINK.get("limit_sent") == now:  # (the test process's, which mirrored compares with)
        LINK["limit_sent"] = GET_LIMIT()
    LIMIT[:] = GET_LIMIT(), GET_LIMIT() - own
    return before


def told(args=()):
    """The pairs (JSON texts) a request or an answer carries for the kept containers: "k" the news
    of those this side changed since the two sides last agreed on them (tidings), LINK["drop"]'s
    ("d", "z": unheld; the test's "D": sandbox_lending.py) and those whose news cannot be sent,
    forgotten on both sides (the test's "D", the program's "d"), but one among args (the ids of
    the argument containers of the call it asks for: that request cannot be sent). Called last,
    once all else the line holds is dumped: what it renews and forgets goes out."""
    texts, dropped = tidings(args=args)
    found = LINK["drop"]()
    if dropped:
        key = "D" if LINK["side"] == "test" else "d"
        found[key] = found.get(key, []) + dropped
    return (['["k",[%s]]' % ",".join(texts)] if texts else []) + [
        dump([key, handles], None) for key, handles in found.items()]


def tidings(marks=None, skip=(), args=()):
    """The news (JSON texts) of the kept containers this side changed (sandbox_copies.py:changed;
    but those of skip, ids whose changes go otherwise; marks: more aliases than the kept ones'),
    each dumped under deep's limit, and the handles of those whose news cannot be sent (nested
    deeper than that limit, holding what cannot be sent: no failure of the test's; but one among
    args: its error raised) -> (texts, handles): once all are dumped, the entries of those sent
    renewed (the two sides agree on them again), those not sent forgotten (a copy from then on)."""
    kept, ids, tags = LINK["kept"], LINK["kept_ids"], LINK["kept_tags"]
    found = changed(kept, ids) if kept else ()
    aliases = {**tags, **marks} if found and marks else tags
    texts, dropped, renewed = [], [], []
    LINK["probe"], count = _thread.get_ident(), len(LINK.get("mine", ()))
    try:
        for handle, start, entry in found:
            if id(entry["object"]) not in skip:
                try:
                    texts.append(deep(dump, news(handle, entry["object"], start), LINK["refer"],
                                      aliases))
                except (Abort, Exception):
                    unnumbered(count)  # (the test objects its dump numbered: none went out)
                    if id(entry["object"]) in args:
                        raise
                    dropped.append(handle)
                    continue
                count = len(LINK.get("mine", ()))
            renewed.append((handle, entry))
    finally:
        LINK["probe"] = None
    for handle, entry in renewed:
        kept[handle] = entry
    if dropped and LINK["side"] == "program":  # (the program's change: the test may not miss it)
        refuse("a change the program made cannot be sent")
    for handle in dropped:
        key = id(kept.pop(handle)["object"])
        del ids[key]
        tags.pop(key, None)
    return texts, dropped


def taken(extra, numbered=()):
    """The other side's changes put into this side's containers: told's "k" (refilled, extended,
    woken), "D" and, in an answer, "w" [k, contents] of its call's numbered arguments."""
    kept, ids, tags, dormant = LINK["kept"], LINK["kept_ids"], LINK["kept_tags"], LINK["dormant"]
    for item in pairs(extra.get("k"), (2, 3)):
        target = awake(item[0], kept, ids, tags, dormant)
        if target is not None and len(item) == 2:
            refilled(target, item[1])
        elif target is not None:
            extend(kept, *item, ids)
    unrest(extra.get("D"), kept, ids, tags, dormant)  # (in the program's: the test's forgot)
    for k, content in pairs(extra.get("w")):
        if 0 <= k < len(numbered):
            refilled(numbered[k], content)


def state_told():
    """The pairs (JSON texts) of a message this side sends for the state the two processes share
    as one in plain Python: ["C", its thread's decimal context] (sandbox_patches.py:decimal_now)
    where it is not the one they agreed on last (DECIMAL, renewed once the message is out:
    state_out), as the test's change (a localcontext, a setcontext) or the program's (its
    `getcontext().prec = 6` at load, in a call) left it; none where this side never imported
    decimal (the other side's is as agreed)."""
    found = decimal_now()
    LINK["telling"] = None if found == DECIMAL[0] else found
    return [] if LINK["telling"] is None else [dump(["C", found], None)]


def state_out():
    """A message with state_told's pairs is out: what it told is agreed."""
    if LINK.get("telling") is not None:
        DECIMAL[0], LINK["telling"] = LINK["telling"], None


def arrived(line, buffer):
    """The message of a line read_line found (sandbox_verdicts.py:test_next's, sandbox_child.py's
    next_message), the alarm held off (held: a ring before leaves the line in buffer, none
    meanwhile loses it; the next ring raises): unpacked."""
    return held(unpacked, line, buffer)


def unpacked(line, buffer):
    """line taken out of buffer and decoded under deep's limit; where it is a message, the decimal
    context it tells (state_told's) set on this side's thread's (a late answer's, whose wait
    ended, on the one its asking thread had then, LINK["waiting"]: as in plain Python, the other
    side's change during that request stays) and agreed (sandbox_patches.py:take_decimal). A
    malformed one (forged) fails the test in the test process, and is ignored in the program's.
    An answer's number is read from its bytes (LINK["heard"], for called); one they hide: None."""
    del buffer[:len(line) + 1]
    number, _, rest = bytes(line[1:32]).partition(b",")  # (an answer's, before it is decoded)
    number, rest = number.strip(b" \t\r"), rest.lstrip(b" \t\r")  # (JSON's white space)
    answered = rest.startswith(b'"a"') and number.removeprefix(b"-").isdigit()  # (program's: < 0)
    LINK["heard"] = int(number) if answered else None
    message = deep(LINK["decode"], line, limit=DEEP)
    if type(message) is list and message[1:2] == ["a"] and (
            type(message[0]) is not int or message[0] != LINK["heard"]):
        message = None  # (an answer whose number the bytes hid, "\u0061" or 2.0: forged, skipped)
    if type(message) is list and len(message) in (5, 7) and type(message[-1]) is dict:
        late = len(message) == 5 and type(message[0]) is int
        context = LINK["waiting"].get(message[0], (None,))[0] if late else None
        if "C" in message[-1] and not take_decimal(message[-1]["C"], context) and (
                LINK["side"] == "test"):
            raise abort(ProgramError("a malformed decimal context"))
        LINK["read"] = message if late and message[1] == "a" else None  # (until taken: talk)
    return message


def overdue(message):
    """A late answer (to a request whose wait ended, a timeout: LINK["waiting"]) taken as its
    asker would have taken it but for its value: its news of the kept containers and write-backs
    of its call's arguments (LINK["late"]: the test process's sandbox_verdicts.py:kept_up; taken),
    as in plain Python a call's changes before its timeout stay; any other message dropped."""
    if message[1] == "a" and (entry := LINK["waiting"].pop(message[0], None)) is not None:
        LINK.get("late", taken)(message[-1], entry[1])
    LINK["read"] = None  # (taken)


def called(key="args"):
    """The argument containers the {"a": k} marks of the message being read name, or (key
    "tuples") the tuples its {"g": k} marks name: a late answer's (LINK["heard"] in
    LINK["waiting"]) those its call numbered, kept with its wait (the call, popped since, is not
    the one out now); any other message's those of the call out now."""
    entry = LINK["waiting"].get(LINK.get("heard"))
    if entry is not None:
        return entry[1 if key == "args" else 2]
    return LINK[key][-1] if LINK[key] else []


def settle(seconds):
    """The test process, before a test: the late answers still out (LINK["waiting"]) awaited, for
    at most `seconds` (what the tests' budget has left), and taken (overdue), the program's
    requests meanwhile served, so that no test starts while an earlier call of the program runs,
    as in plain Python, and each starts with what that call changed (the program's own alarm ends
    it at about its test's timeout; but not a C call or a program that swallows its alarm). True
    where none is still out (or the program's process is gone: none will come)."""
    def wait():
        with TALKING:
            while LINK["waiting"] and not LINK["gone"]:
                if (message := LINK["next"]())[1] == "q":
                    serve(message)
                else:
                    overdue(message)
    if LINK["waiting"] and not LINK["gone"]:
        attempt(wait, seconds)
    return not LINK["waiting"] or bool(LINK["gone"])


def refilled(target, content):
    """target's contents replaced by the other side's (refill; a malformed one ignored), a kept
    one's snapshot renewed (the two sides agree on it again)."""
    try:
        refill(target, content)
    except Exception:
        return
    ids = LINK["kept_ids"]
    if id(target) in ids:
        LINK["kept"][ids[id(target)]] = kept_entry(target, ids)


def answer(seq, status, payload, extra, pairs=None, state=None):
    """Writes an answer line (status "v" value, "e" exception, "t" timed out, the program's "h"
    the harness refused: refuse; True if a value went out); pairs: with_pairs' for its extra
    (None: told's), also when what else it holds cannot be sent (what told renewed and forgot goes
    out); state: state_told's (None: taken now), in whatever line goes out."""
    pairs = told() if pairs is None else pairs
    state = state_told() if state is None else state
    refer, tags, count, whole = LINK["refer"], LINK["kept_tags"], len(LINK.get("mine", ())), None
    empty, program = with_pairs('{"d":[]}', pairs + state), LINK["side"] == "program"
    try:
        if status == "e":  # (kept, to come back as itself: sandbox_values.py:error_payload)
            payload = error_payload(payload, True)
        data = whole = '[%d,"a",%s,%s,%s]' % (seq, dump(status, None), deep(
            dump, payload, refer, tags), with_pairs(dump(extra, refer, tags), pairs + state))
    except TestTimeout:
        data = '[%d,"a","t",null,%s]' % (seq, empty)
    except BaseException as e:
        if program:
            refuse("the program's answer cannot be sent: " + type(e).__name__)
        data = '[%d,"a","e",%s,%s]' % (seq, dump(error_payload(e), None), empty)
    over = f"an answer of {len(data)} bytes, over the limit of {LINK['limit']} bytes"
    if program and len(data) > LINK["limit"]:
        refuse(over)
    if program and LINK.get("refused"):  # the harness's failure, no program's exception
        data = '[%d,"a","h",%s,%s]' % (seq, dump(LINK.pop("refused")[:200], None), empty)
    failure = '"e",' + dump(["ValueError", over, "ValueError"], None)
    if program:  # (the program's process: the harness refuses)
        failure = '"h",' + dump(over, None)
    for tail in (empty, with_pairs('{"d":[]}', state)) if len(data) > LINK["limit"] else ():
        data = '[%d,"a",%s,%s]' % (seq, failure, tail)
        if len(data) <= LINK["limit"]:
            break
    if data is not whole:
        unnumbered(count)  # (what it numbered did not go out)
    write_all(LINK["out"], b"\n" + data.encode() + b"\n")  # a line of its own, after any output
    state_out()
    return data.startswith('[%d,"a","v"' % seq)


def refuse(why):
    """In the program's process: what the harness must send (a result, a change of a kept or
    argument container) cannot be; its next answer is "h" (sandbox_verdicts.py:test_answered: the
    test fails whatever it catches), never the program's exception or a silent loss."""
    LINK["refused"] = LINK.get("refused") or why


def unnumbered(count):
    """Forgets the test objects the test process numbered since there were `count` (a dump that
    failed: none of them went out, so no handle the program could guess reaches one)."""
    mine = LINK.get("mine")
    while mine and len(mine) > count:
        LINK["ids"].pop(id(mine.pop(len(mine) - 1)), None)


def abort(error):
    """The harness's failure of the test, noted (LINK["failed"]) but by a thread that only checks
    whether a value can be sent (LINK["probe"]: sandbox_verdicts.py:dumped) -> its Abort."""
    if LINK.get("probe") != _thread.get_ident():
        LINK["failed"] = LINK["failed"] or describe(error)
    return Abort(LINK["failed"] or describe(error))


def unsendable(error):
    """The harness's failure for a test's argument it cannot send (no error a test catches)."""
    return abort(ProgramError("this argument cannot be sent to the program: "
                              + type(error).__name__))


def gone(why):
    LINK["gone"] = LINK["gone"] or why
    return ProgramError("the program's process " + LINK["gone"])


def ask(op, target, a=None, b=None, args=None):
    """A request whose `args` (a call's arguments, as it sends them) are numbered for the
    answer's write-backs and identity (sandbox_copies.py; its leaves and tuples outside kept ones
    too, LINK["tuples"], "t" how many: the answer's {"g": k}, sandbox_proxies.py:given), with this
    side's changes to the kept containers (told) and, from the test process, what the program's
    process takes on for it once they are numbered (sandbox_verdicts.py:mirrored)."""
    with TALKING:
        sent = LINK["kept_ids"] if LINK["side"] == "program" else None  # (kept: sent as marks)
        tuples = leaves(args) if args else []  # (then the tuples: sandbox_proxies.py:given)
        try:
            numbered = deep(containers, args, [], sent, tuples, LINK["kept_tags"]) if args else []
        except Exception as e:  # a cyclic argument (a test's fails the test)
            raise (unsendable(e) if LINK["side"] == "test" else e) from None
        extra = LINK["mirrored"](numbered)
        extra["#"] = len(numbered)  # (how many it numbered: sandbox_lending.py:handed checks)
        if len(numbered) > 1 and (same := shared(numbered)):
            extra["m"] = same
        if tuples:  # (how many of them are leaves, how many in all)
            extra["t"] = [sum([type(found) is not tuple for found in tuples]), len(tuples)]
        LINK["args"].append(numbered)
        LINK["tuples"].append(tuples)
        try:
            return request(op, target, a, b, extra)
        finally:
            LINK["args"].pop()
            LINK["tuples"].pop()

