"""sandbox_link.py: the link between the two processes of a sandboxed run: the alarm under which
either runs code, requests and answers both ways, and the proxies of the other side's objects.

Executed inside the sandbox as the module `sandbox_link` (sandbox.py's BOOT). The two processes talk
in lines of JSON, either way: a request [seq, "q", op, target, a, b, extra] or an answer [seq, "a",
status, payload, extra] (the test process numbers its requests upwards, the program's process
downwards). While one side waits for an answer it serves the other's requests (a callback from a
test calling the program again). What travels, and its tags, is sandbox_values.py's (copies and
marks: sandbox_copies.py); an object that is no value travels as a reference whose operations the
other side asks for: in the test process a Remote stands for a program object, in the program's
process a TestObject for a test object. One thread at a time talks (TALKING). LINK holds the state
of this process's side (filled by sandbox_verdicts.py:test_side, sandbox_child.py:program_side)."""
import _signal, _thread, _weakref, builtins, os

from sandbox_copies import (awake, changed, containers, extend, kept_entry, news, pairs, refill,
                            shared, unrest)
from sandbox_patches import IMPORT
from sandbox_values import (VALUE_TYPES, Abort, ProgramError, describe, dump, error_payload,
                            raised, with_pairs)  # sandbox.py's BOOT

READ, WRITE, EXIT = os.read, os.write, os._exit  # before any program code (it may replace them)


class TestTimeout(BaseException):  # not an Exception: `except Exception` does not swallow it
    pass


ALARM = [False]  # armed: the alarm raises TestTimeout only inside attempt()
MAIN = _thread.get_ident()  # the thread the alarm interrupts (Python runs signal handlers there)
RING_AGAIN = 0.05  # seconds between rings once the alarm has gone off


def on_alarm(signum, frame):
    """In the test process the timeout is noted first (LINK["failed"], which only the harness
    reads and clears), so a test that swallows the TestTimeout (a bare `except:`) still fails as
    timed out; the alarm rings again every RING_AGAIN s until attempt() ends."""
    if ALARM[0]:
        if LINK.get("side") == "test":
            LINK["failed"] = LINK["failed"] or "Timeout: test timed out"
        raise TestTimeout()


def attempt(fn, seconds):
    """fn() under a wall-clock alarm -> ("v", its value) | ("t", None) | ("e", the exception).
    Inside another attempt (a request served while waiting for an answer) and in any thread but
    the main one (a test's or a program's) the outer alarm goes on and its TestTimeout passes
    through."""
    if ALARM[0] or _thread.get_ident() != MAIN:
        try:
            return "v", fn()
        except (TestTimeout, Abort):
            raise
        except BaseException as e:
            return "e", e
    _signal.signal(_signal.SIGALRM, on_alarm)
    _signal.setitimer(_signal.ITIMER_REAL, max(seconds, 0.001), RING_AGAIN)
    try:
        try:
            ALARM[0] = True
            return "v", fn()
        finally:  # (a ring in this block still ends in the outer one: the alarm is off after it)
            ALARM[0] = False
            _signal.setitimer(_signal.ITIMER_REAL, 0)
    except TestTimeout:
        return "t", None
    except BaseException as e:
        return "e", e
    finally:
        ALARM[0] = False
        _signal.setitimer(_signal.ITIMER_REAL, 0)


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
    """The next line (without its newline) from fd; None at the end or past limit bytes."""
    start = 0
    while (end := buffer.find(b"\n", start)) < 0:
        if len(buffer) > limit or not (chunk := READ(fd, 1 << 16)):
            return None
        start = len(buffer)
        buffer += chunk
    line = bytes(buffer[:end])
    del buffer[:end + 1]
    return line


def read_exactly(fd, size):
    """size bytes from fd (fewer if it ends first)."""
    data = bytearray()
    while len(data) < size and (chunk := os.read(fd, min(size - len(data), 1 << 16))):
        data += chunk
    return bytes(data)


# (mirrored, sent: the test process's hooks, sandbox_verdicts.py; none in the program's process)
LINK = dict(seq=0, gone="has not started", buffer=bytearray(), failed="", args=[], released=[],
            kept={}, kept_ids={}, kept_tags={}, dormant={}, mirrored=lambda numbered: {},
            sent=lambda extra: None, drop=dict)
# what one process may ask of the other's object: of a program object (Remote) its text, type and
# classes; of a test object (test_ops) its protocol (but comparisons and hash: test_ops's own)
OPS = dict(len=len, bool=bool, str=str, repr=repr, iter=iter, format=format,
           getitem=lambda a, b: a[b], contains=lambda a, b: b in a,
           isinstance=lambda a, b: isinstance(b, a),
           type=lambda a: [type(a).__module__, type(a).__qualname__])
BINARY = {"contains", "isinstance"}


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


# one request at a time: a thread's request and its answer (and the requests served meanwhile)
# are not interleaved with another thread's (a test's calling the program, a program's a callback)
TALKING = _thread.RLock()


def request(op, target, a=None, b=None, extra=None):
    """Sends a request and returns the answer (a value, or the exception the other side reported
    raised here), serving its requests meanwhile; kept containers cross as marks, news first."""
    with TALKING:
        return talk(op, target, a, b, extra or {})


def talk(op, target, a, b, extra):
    if LINK["gone"]:
        raise abort(gone(""))
    if LINK["failed"] and LINK["side"] == "test":  # the test has failed: its program is not asked
        raise TestTimeout() if LINK["failed"].startswith("Timeout") else Abort(LINK["failed"])
    step = 1 if LINK["side"] == "test" else -1
    try:
        refer, aliases = LINK["refer"], LINK["kept_tags"]
        line = "[%d,\"q\",%s,%s,%s,%s," % (LINK["seq"] + step, dump(op, None), dump(target, None),
                                         dump(a, refer, aliases), dump(b, refer, aliases))
        extra = told(extra)  # (after a and b: a request that cannot be sent tells nothing)
        line += dump(extra, refer, aliases) + "]\n"
    except (TestTimeout, Abort):
        raise
    except BaseException as e:  # (a cyclic or too deep argument): the harness's failure
        if LINK["side"] != "test":
            raise
        raise unsendable(e) from None
    LINK["seq"] = seq = LINK["seq"] + step
    write_all(LINK["out"], line.encode())
    LINK["sent"](extra)  # (out: what it carries is the other side's now; not before)
    while True:
        message = LINK["next"]()
        if message[1] == "q":
            serve(message)
        elif message[0] == seq:
            return LINK["answered"](message)


def serve(message):
    """Answers one request of the other process (its op run by LINK["ops"], under the alarm the
    request's time gives, or the one already running)."""
    seq, _, op, target, a, b, extra = message
    LINK["before"](extra)
    status, payload = attempt(lambda: LINK["ops"](op, target, a, b, extra), extra.get("s", 1.0))
    LINK["answer"](seq, status, payload, LINK["after"](extra))


def told(extra):
    """extra with "k": the news (sandbox_copies.py:news) of the kept containers this side changed
    since the two sides last agreed on them (as one process would see them) and LINK["drop"]'s:
    the program's "d" and "z" (sandbox_copies.py:unheld), the test's "D" (sandbox_lending.py)."""
    kept = LINK["kept"]
    if kept and (found := changed(kept, LINK["kept_ids"])):
        extra = dict(extra, k=[news(handle, kept[handle]["object"], start)
                               for handle, start in found])
    if dropped := LINK["drop"]():
        extra = dict(extra, **dropped)
    return extra


def taken(extra, numbered=()):
    """The other side's changes put into this side's containers: told's "k" news of the kept ones
    (refilled, or new items added: sandbox_copies.py:extend; one at rest woken: awake), its "D"
    and, in an answer, "w" [k, contents] of its call's argument containers (numbered:
    LINK["args"][-1], as ask numbered them); a malformed one is ignored."""
    kept, ids, tags, dormant = LINK["kept"], LINK["kept_ids"], LINK["kept_tags"], LINK["dormant"]
    for item in pairs(extra.get("k"), (2, 3)):
        target = awake(item[0], kept, ids, tags, dormant)
        if target is not None and len(item) == 2:
            refilled(target, item[1])
        elif target is not None:
            extend(kept, *item, ids)
    unrest(extra.get("D"), dormant)  # (in the program's process: those the test's forgot)
    for k, content in pairs(extra.get("w")):
        if 0 <= k < len(numbered):
            refilled(numbered[k], content)


def refilled(target, content):
    """target's contents replaced by the other side's (sandbox_copies.py:refill; a malformed
    content is ignored); a kept one's snapshot renewed (the two sides agree on it again)."""
    try:
        refill(target, content)
    except Exception:
        return
    ids = LINK["kept_ids"]
    if id(target) in ids:
        LINK["kept"][ids[id(target)]] = kept_entry(target, ids)


def answer(seq, status, payload, extra, pairs=()):
    """Writes an answer line (status "v" value, "e" exception, "t" timed out; True if a value
    went out); pairs: with_pairs' for its extra."""
    try:
        if status == "e":
            payload = error_payload(payload)
        data = '[%d,"a",%s,%s,%s]' % (seq, dump(status, None),
                                      dump(payload, LINK["refer"], LINK["kept_tags"]),
                                      with_pairs(dump(extra, LINK["refer"], LINK["kept_tags"]),
                                                 pairs))
    except TestTimeout:
        data = '[%d,"a","t",null,{"d":[]}]' % seq
    except BaseException as e:
        data = '[%d,"a","e",%s,{"d":[]}]' % (seq, dump(error_payload(e), None))
    if len(data) > LINK["limit"]:
        data = '[%d,"a","e",%s,{"d":[]}]' % (seq, dump(["ValueError", f"an answer of {len(data)}"
                                                         " bytes", "ValueError"], None))
    write_all(LINK["out"], b"\n" + data.encode() + b"\n")  # a line of its own, after any output
    return data.startswith('[%d,"a","v"' % seq)


def abort(error):
    """The harness's failure of the test, noted (LINK["failed"]) but by a thread that only checks
    whether a value can be sent (LINK["probe"]: sandbox_verdicts.py:dumped) -> its Abort."""
    if LINK.get("probe") != _thread.get_ident():
        LINK["failed"] = LINK["failed"] or describe(error)
    return Abort(LINK["failed"] or describe(error))


def unsendable(error):
    """The harness's failure for a test's argument it cannot send (never a TypeError or
    RecursionError a test could catch)."""
    return abort(ProgramError("this argument cannot be sent to the program: "
                              + type(error).__name__))


def gone(why):
    LINK["gone"] = LINK["gone"] or why
    return ProgramError("the program's process " + LINK["gone"])


def ask(op, target, a=None, b=None, args=None):
    """A request whose `args` (a call's arguments: a test's to the program, the program's to a
    test's callback, as it sends them) are numbered for the answer's write-backs and identity
    (sandbox_copies.py), with this side's changes to the kept containers (told) and, from the test
    process, what the program's process takes on for it, once they are numbered (a patched value
    that is one of them: sandbox_verdicts.py:mirrored; not random's state, whose draws would tell
    the test's)."""
    with TALKING:
        sent = LINK["kept_ids"] if LINK["side"] == "program" else None  # (kept: sent as marks)
        try:
            numbered = containers(args, [], sent) if args else []
        except (TestTimeout, Abort):
            raise
        except BaseException as e:  # a cyclic argument (a test's fails the test)
            raise (unsendable(e) if LINK["side"] == "test" else e) from None
        extra = LINK["mirrored"](numbered)
        extra["#"] = len(numbered)  # (how many it numbered: sandbox_lending.py:handed checks)
        if len(numbered) > 1 and (same := shared(numbered)):
            extra["m"] = same
        LINK["args"].append(numbered)
        try:
            return request(op, target, a, b, extra)
        finally:
            LINK["args"].pop()


def refused(self, *other):
    """A program object is no value: what its methods would answer anew at each question (a
    length 1 then 2, equal to everything) fails the test, never asking the program."""
    raise abort(TypeError("a program object compared, measured or combined: it is no value"))


def not_a_number(self, *other):
    """A program object is no number (math.pow would ask its float() anew at each term)."""
    raise abort(TypeError("a program object converted to a number"))


def equals(name):
    def method(self, other):
        if other is None or self._Remote__stream:  # not None; a stream is equal to itself only
            return (self is other) != (name == "ne")
        refused(self)
    return method


def unary(name):
    return lambda self, *a: ask("op", self._Remote__handle, name, list(a))


class Remote:
    """A program object, by its handle in the program's process: the test may read and set its
    attributes, call it, ask its text (str, repr, format) and its type; a stream (a generator or
    builtin iterator: its reference says so) is drawn lazily, each item asked once (one at a time,
    then up to 256 ahead; iter() of it is itself, it is true, its equality and hash are its
    identity). Every other question fails the test (refused, not_a_number); `== None` is decided
    here (it is not None). A result crosses as a value, a declared class's instance rebuilt from
    its state (sandbox_verdicts.py:rebuilt): what a verdict compares is a value."""
    __slots__ = ("__handle", "__buffer", "__drawn", "__end", "__stream", "__weakref__")
    __getitem__ = __setitem__ = __reversed__ = __neg__ = __pos__ = __invert__ = refused
    __index__ = __int__ = __float__ = __complex__ = __abs__ = __round__ = not_a_number
    __str__, __format__, __repr__ = unary("str"), unary("format"), unary("repr")
    __eq__, __ne__ = equals("eq"), equals("ne")
    __lt__ = __le__ = __gt__ = __ge__ = __add__ = __sub__ = __mul__ = __truediv__ = refused
    __floordiv__ = __mod__ = __pow__ = __and__ = __or__ = __xor__ = __lshift__ = refused
    __rshift__ = __matmul__ = __radd__ = __rsub__ = __rmul__ = __rtruediv__ = refused
    __rfloordiv__ = __rmod__ = __rpow__ = __rand__ = __ror__ = __rxor__ = __rmatmul__ = refused

    def __init__(self, handle, stream=False):
        self.__handle, self.__buffer, self.__drawn, self.__end = handle, [], 0, None
        self.__stream = stream

    def __bool__(self):
        return self.__stream or refused(self)

    def __hash__(self):  # (a stream's: its identity, as in plain Python)
        return object.__hash__(self) if self.__stream else refused(self)

    def __getattr__(self, name):
        if name.startswith(("__", "_Remote__")):  # (a slot not set yet is no attribute to ask)
            raise AttributeError(name)
        return ask("attr", self.__handle, name)

    def __setattr__(self, name, value):
        if name.startswith("_Remote__"):
            return object.__setattr__(self, name, value)
        ask("setattr", self.__handle, name, value, [value])

    def __call__(self, *args, **kwargs):
        return ask("call", self.__handle, list(args), kwargs, [*args, *kwargs.values()])

    def __iter__(self):
        return self if self.__stream else refused(self)

    def __len__(self):  # (a stream has none, as in plain Python: list() asks, then draws)
        if self.__stream:
            raise TypeError("a stream has no len()")
        refused(self)

    def __instancecheck__(self, instance):  # a test's value is no instance of a program class
        return type(instance) is Remote and ask("op", self.__handle, "isinstance", instance)

    def __contains__(self, item):  # a stream's: drawn and compared here, as plain Python does
        return any(x is item or x == item for x in iter(self))

    def __next__(self):
        if not self.__stream:
            refused(self)
        if not self.__buffer and self.__end is None:
            got = ask("next", self.__handle, 1 if self.__drawn < 8 else min(self.__drawn, 256))
            if type(got) is not list or len(got) != 2 or type(got[0]) is not list:
                raise abort(ProgramError("a malformed answer"))
            self.__buffer, self.__end = got[0][::-1], got[1]
            self.__drawn += len(got[0])
        if self.__buffer:
            return self.__buffer.pop()
        if (error := raised(self.__end)) is not None:
            raise error
        raise StopIteration

    @property
    def __class__(self):  # isinstance(x, types.GeneratorType) asks this of a Remote
        """The builtin type the program's process names, never a value's (a value crosses as one:
        a reference naming int is a program object of its own class called int)."""
        found = ask("op", self.__handle, "type", [])
        if type(found) is not list or len(found) != 2 or not all(type(p) is str for p in found):
            raise abort(ProgramError("a malformed answer"))
        module, name = found
        if module == "builtins":
            types = IMPORT("types")
            for kind in [getattr(builtins, name, None)] + list(vars(types).values()):
                if isinstance(kind, type) and kind.__module__ == "builtins" and (
                        kind.__qualname__ == name) and not issubclass(kind, VALUE_TYPES):
                    return kind
        return Remote

    def __del__(self):
        handle = getattr(self, "_Remote__handle", None)  # (None: its __init__ failed)
        if handle is not None:
            LINK["released"].append(handle)


def remote(handle, stream=False):
    """The one Remote of a handle (so `is` holds between two answers naming the same object)."""
    ref = LINK["remotes"].get(handle)
    found = ref() if ref is not None else None
    if found is None:
        found = Remote(handle, stream)
        LINK["remotes"][handle] = _weakref.ref(found)
        if handle in LINK["released"]:  # collected, but the program still holds it: keep it
            LINK["released"].remove(handle)
    return found


def asked(op):
    """A TestObject's method: op asked of the test process, with the method's argument if any."""
    return lambda self, *argument: request(op, self.handle, *argument)


def compare(name):
    def method(self, other):  # (the test's method's NotImplemented: [], then Python reflects)
        if not self.own and name in ("eq", "ne"):  # object's own: identity, as there
            return getattr(object, "__%s__" % name)(self, other)
        found = request("cmp", self.handle, name, other)
        return found[0] if type(found) is list and len(found) == 1 else NotImplemented
    return method


class TestObject:
    """A test object (a callback, a test class or its instance, an iterator), by its handle in
    the test process: calls, attribute reads and writes, draws and the protocol (truth, length,
    items, iteration, text, comparisons, hash, isinstance with it as the class, `with`) are asked
    of that process, where the test's own methods answer. An instance of a class the context
    declares (the prompt's ListNode) has the program's class of that name as its __class__:
    isinstance(x, ListNode) holds in the program as in one process (type(x) is TestObject)."""
    __slots__ = ("handle", "kind", "own")
    __eq__, __ne__, __lt__ = compare("eq"), compare("ne"), compare("lt")
    __le__, __gt__, __ge__ = compare("le"), compare("gt"), compare("ge")
    __iter__ = asked("iter")
    __next__ = asked("next")
    __len__ = asked("len")
    __bool__ = asked("bool")
    __getitem__ = asked("getitem")
    __contains__ = asked("contains")
    __instancecheck__ = asked("isinstance")
    __str__ = asked("str")
    __repr__ = asked("repr")
    __format__ = asked("format")
    __enter__ = asked("enter")

    def __init__(self, handle, kind=None, own=False):
        object.__setattr__(self, "handle", handle)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "own", own)  # its class has its own == or hash (asked there)

    def __call__(self, *args, **kwargs):
        return ask("call", self.handle, list(args), kwargs, [*args, *kwargs.values()])

    @property
    def __class__(self):  # (no request: the harness's isinstance checks ask this too)
        found = LINK["scope"].get(self.kind) if self.kind else None
        return found if isinstance(found, type) and found.__module__ == "__main__" else TestObject

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return request("attr", self.handle, name)

    def __setattr__(self, name, value):
        request("setattr", self.handle, name, value)

    def __hash__(self):
        return request("hash", self.handle) if self.own else object.__hash__(self)

    def __exit__(self, *exception):
        return request("exit", self.handle, list(exception))
