"""sandbox_verdicts.py: the test process of a sandboxed run, which decides every verdict and never
runs the program's code (sandbox.py's docstring has the threat model).

Executed inside the sandbox as the module `sandbox_verdicts` (sandbox.py's BOOT), from test_side:
what the program's process may ask of a test object (test_ops), be sent (test_refer) and take on
of the test process's state (mirrored, served)."""
import _signal, _thread, builtins, marshal, os, sys, time

from sandbox_caught import displayed, levels, warnings_state, watched  # sandbox.py's BOOT
from sandbox_layers import confine, read_exactly, reap, watchdog
from sandbox_link import (LINK, OPS, TestTimeout, abort, answer, arrived, ask, attempt, called,
                          compiled, gone, read_line, refilled, request, run,
                          settle, taken, talk, unnumbered)
from sandbox_bases import lasting
from sandbox_copies import BUFFERS, KEPT_ITEMS, KEPT_OBJECTS, copied, kept_entry, rooms
from sandbox_lending import lending, let_go, received
from sandbox_patches import (IMPORT, PATCHED, SETS, builtin_named, fingerprint, module,
                             quiet_null, test_made, watch_modules)
from sandbox_errors import MADE, SOURCES, crossed, crossing, direct
from sandbox_proxies import (TEXTS, compared, harness_class, looks, readable, reference,
                             settable, vars_of)
from sandbox_remote import URGENT, Remote, remote
from sandbox_stdlib import member_named
from sandbox_values import (DECLARED, RAISES, REFUSE, Abort, Decoder, Dumped, ProgramError,
                            datetime_base, describe, dump, error_payload, raised)


def test_next():
    """The next well-formed message from the program's process (malformed lines are skipped)."""
    while True:
        line = read_line(LINK["in"], LINK["buffer"], LINK["limit"])
        if line is None:
            raise abort(gone("has ended or sent an over-long answer"))
        LINK["made"] = ({}, {})  # the objects rebuilt from this line (rebuilt)
        try:
            message = arrived(line, LINK["buffer"])  # (its decimal context taken: a late one's too)
        except RecursionError:  # (nested deeper than the program's process dumps: forged)
            raise abort(ProgramError("an answer nested too deep")) from None
        except Exception:
            message = None
        if type(message) is not list or message[1:2] != ["q"]:  # (an answer, or maybe one)
            LINK["resting"].clear()  # (each ends every rest: sandbox_lending.py:let_go)
        if (type(message) is list and message[1:2] in (["q"], ["a"]) and type(message[-1]) is dict
                and len(message) == (7 if message[1] == "q" else 5) and type(message[0]) is int):
            for late in [k for k in LINK["waiting"] if message[1] == "a" and k > message[0]]:
                del LINK["waiting"][late]  # (asked inside this answer's call: unanswered, ended)
            return message


def test_answered(message):
    """An answer of the program's process: its write-backs applied to the call's arguments, its
    output printed where the test's is going; its value, or its exception raised."""
    seq, _, status, payload, extra = message
    kept_up(extra, LINK["args"][-1] if LINK["args"] else [])
    if type(extra.get("u")) is list:  # (released at once from now on: a finalizer attached since)
        URGENT.update(handle for handle in extra["u"] if type(handle) is int)
    if "i" in extra and type(sys.stdin).__name__ in BUFFERS and sys.stdin is not LINK["stdin"]:
        refilled(sys.stdin, extra["i"])
    displayed(extra)  # (its output, warnings and log records)
    if status == "v":
        return payload
    if status == "h":  # (its harness refused: sandbox_link.py:refuse; forged, it fails its own)
        raise abort(ProgramError("the harness refused: " + str(payload)[:200]))
    if status == "t":
        if seq >= LINK["first"]:  # (a request of this test's; not of an earlier test's thread)
            LINK["failed"] = LINK["failed"] or "Timeout: test timed out"
        raise TestTimeout()
    if status == "e" and (error := raised(payload, lambda: direct(  # (a StopIteration's)
            test_answered.__code__, Remote._Remote__call.__code__, LINKED))) is not None:
        raise error
    raise abort(ProgramError("a malformed answer"))


LINKED = (talk.__code__, request.__code__, ask.__code__)  # (a call's frames: direct skips them)


def kept_up(extra, numbered):
    """The news of the kept containers (sandbox_copies.py) in an answer or a request of the
    program's process ("k", "w", "n", "d", "z": sandbox_values.py's index), put in place
    (numbered: the call's argument containers; those its value lent, "N", are kept already:
    sandbox_lending.py:received); the test process keeps at most twice what the program's process
    does (an honest program's choices fit; it chooses)."""
    kept, ids, tags = LINK["kept"], LINK["kept_ids"], LINK["kept_tags"]
    taken(extra, numbered)
    for handle in LINK["received"]:  # (its value's: made anew after the write-backs, as there)
        if handle in kept:
            kept[handle] = kept_entry(kept[handle]["object"], ids)
    LINK["received"].clear()
    room = rooms(kept, LINK["own"], False)  # (not the program's own returned: their room)
    for pair in extra["n"] if type(extra.get("n")) is list else ():
        if type(pair) is list and len(pair) == 2 and all(type(k) is int for k in pair) and (
                0 <= pair[0] < len(numbered) and 0 <= pair[1] not in kept
                and id(numbered[pair[0]]) not in ids and room[0] < 2 * KEPT_OBJECTS):
            entry = kept_entry(numbered[pair[0]], ids)
            if room[1] + entry["weight"] <= 2 * KEPT_ITEMS:
                room[0], room[1] = room[0] + 1, room[1] + entry["weight"]
                kept[pair[1]], ids[id(entry["object"])] = entry, pair[1]
                tags[id(entry["object"])] = '{"k":%d}' % pair[1]
    let_go(extra, LINK)  # ("d" and "z")


def mirrored(numbered):
    """What the program's process takes on for a request of the test process (sandbox_link.py:ask;
    numbered: its argument containers); its keys: sandbox_values.py's docstring."""
    extra = {"s": _signal.getitimer(_signal.ITIMER_REAL)[0] or LINK["timeout"]}
    if LINK["released"]:
        extra["f"] = list(LINK["released"])
    if sys.getrecursionlimit() != LINK["limit_sent"]:
        extra["l"] = sys.getrecursionlimit()
    for key, stream in (("o", "stdout"), ("e", "stderr")):  # (output redirected)
        if getattr(sys, stream) is not LINK[stream]:
            extra[key] = 1
    extra.update((key, found) for key, found in in_force(numbered).items() if found)
    if sys.stdin is not LINK["stdin"]:
        extra["i"] = sys.stdin
    extra.update(watched())  # (warnings and log records caught)
    if LINK["prints"]:  # (until a request is out with them: sent)
        extra["F"] = LINK["prints"]
    return extra


def in_force(numbered=None):
    """{"b": the builtins the test replaced, "p": the other module attributes it set (sys.argv
    too, by identity: sys is no watched module)}."""
    start = LINK["builtins"]
    if sys.argv is not LINK["argv"]:  # (module_patches forgets it once it is restored)
        PATCHED.setdefault((sys, "argv"), [LINK["argv"]])
    return {"b": {name: value for name, value in vars(builtins).items()
                  if start.get(name, start) is not value},
            "p": module_patches(numbered) if PATCHED else []}


def serving(extra):
    """Before a request of the program's process is served: its news taken; the count of module
    attributes set (sandbox_patches.py:SETS) and the builtins noted, for served."""
    kept_up(extra, ())
    extra["patching"] = [SETS[0], list(vars(builtins).items())]


def served(extra):
    """The extra of its answer (sandbox_link.py:answer adds the kept containers' news): where a
    callback started, stopped or set a patch, the patches in force for the rest of the request
    (sandbox_child.py:retake)."""
    was = extra["patching"]  # (the builtins compared by identity: no test's == runs here)
    same = [(k, id(v)) for k, v in was[1]] == [(k, id(v)) for k, v in vars(builtins).items()]
    return in_force() if SETS[0] != was[0] or not same else {}


def module_patches(numbered=None):
    """[module name, attribute, value] of each module attribute set from outside
    (sandbox_patches.py:noted) that is not as it was (a deleted one stays deleted in the test only)
    and can be sent as an argument can (else it stays the test's: doctest's pdb.set_trace), checked
    each time (a patched list may come to hold an unsendable object); those restored are forgotten.
    For a request (numbered: its argument containers), the value as its JSON text (Dumped once);
    one of those containers as [module name, attribute, null, k] (sandbox_patches.py:on_arguments);
    a lasting one the program's process took on last (sent) only named, [module name, attribute]."""
    found, taken_on = [], LINK["taken_on"]
    first = {id(c): k for k, c in reversed([*enumerate(numbered or ())])}  # (an object's first k)
    for key, entry in list(PATCHED.items()):
        value, name = vars(key[0]).get(key[1], PATCHED), vars(key[0]).get("__name__")
        if value is entry[0]:
            del PATCHED[key]
        elif value is not PATCHED and type(name) is str:
            if id(value) in first:
                found.append([name, key[1], None, first[id(value)]])
            elif numbered is not None and taken_on.get((name, key[1]), PATCHED) is value:
                found.append([name, key[1]])
            elif (text := dumped(value)) is not None:
                found.append([name, key[1], value if numbered is None else Dumped(text, value)])
    return found


def sent(extra):
    """A request is out: what it carries is the program's process's now (one that does not go out
    leaves it for the next): the handles released, the recursion limit, the fingerprints, the
    patched values (LINK["taken_on"]: a lasting one only named from now on; a container is sent
    anew each time)."""
    del LINK["released"][:len(extra.get("f", ()))]  # (those released since stay, after them)
    LINK["limit_sent"] = extra.get("l", LINK["limit_sent"])
    if "F" in extra:
        LINK["prints"] = {}
    for patch in extra.get("p", ()):
        if len(patch) == 3:
            value = patch[2].value
            LINK["taken_on"][patch[0], patch[1]] = value if lasting(value) else PATCHED


def dumped(value):
    """value's JSON text as a request sends it, or None where it cannot be sent: a check, whose
    refusal is no failure of the test's (abort notes none for this thread meanwhile; the alarm's
    mark and another thread's failure stand)."""
    LINK["probe"], count = _thread.get_ident(), len(LINK["mine"])
    try:
        return dump(value, test_refer, LINK["kept_tags"])
    except (Abort, Exception):
        unnumbered(count)
        return None
    finally:
        LINK["probe"] = None


def shared_state():
    """The test process's state mirrored() compares with: as it is once the context has run."""
    return dict(builtins=dict(vars(builtins)), stdin=sys.stdin, argv=sys.argv, registry={},
                warnings=warnings_state())


def test_resolve(tag, item):
    if tag == "r" and (found := remote(item)) is not None:  # (a program object)
        return found
    if tag in ("o", "S", "W"):
        return rebuilt(tag, item)
    if tag in ("e", "h"):  # an exception the program returned, an exception class of its own
        return crossed(tag, item)
    if tag == "x" and type(item) is int and item in LINK["mine"]:
        return LINK["mine"][item]
    if tag == "a" and type(item) is int and 0 <= item < len(numbered := called()):
        return numbered[item]  # (of the call it answers: a late answer's too)
    if tag == "g" and type(item) is int and 0 <= item < len(found := called("tuples")):
        return found[item]  # (a tuple of its arguments': sandbox_proxies.py:given)
    if tag == "k" and type(item) is int and item in LINK["kept"]:
        return LINK["kept"][item]["object"]
    if tag == "N" and (found := received(item, LINK)) is not None:  # (a program's, kept now)
        return found
    if tag == "M" and type(item) is list and len(item) == 2 and item[0] in ("builtins", "math"):
        return builtin_named(item[1], item[0])  # (a builtin class, PURE or math function)
    if tag == "G" and type(item) is list and len(item) == 2 and all(type(p) is str for p in item):
        found = member_named(DECLARED.get(item[0]), item[1])
        if enum_member(found):  # a declared Enum's member, by its name (a Flag's: its members')
            return found
    raise ValueError("malformed value")


def test_refer(value, aliases):
    """What the program's process gets for a test's object that is no value: a program object's
    reference back; an exception as a raised one crosses; a copy (sandbox_copies.py); a frozen
    clock's class (frozen_class); a builtin or module function, or a module, by name; an exception
    class of the test's (sandbox_errors.py:crossing); a reference to a test object (one the tests
    made, a bound method of a test's container (a deque's too), Random or io stream, an
    itemgetter, attrgetter, methodcaller, mock, iterator or bare object(): "X" with what looks
    tells of its class and a value it holds, sandbox_proxies.py:reference; "G" a declared Enum's
    member); else the test fails (Abort), as for a program object's type
    (sandbox_proxies.py:harness_class: the program's class is none here)."""
    kind = type(value)
    if issubclass(kind, Remote):
        return '{"r":%d}' % value._Remote__handle
    if issubclass(kind, type) and harness_class(value):
        raise abort(ProgramError("this argument cannot be sent to the program: type"))
    if isinstance(value, BaseException):  # (as a raised one crosses: the test's, kept)
        return '{"e":%s}' % dump(error_payload(value, True), None)
    try:
        text = copied(value, test_refer)  # (a partial, buffer, Random, Pattern or Match)
    except ValueError as e:
        raise abort(ProgramError("this argument cannot be sent to the program: " + str(e)))
    if text is not None:
        return text
    if issubclass(type(value), type) and test_made(value) and datetime_base(value):
        handle = held(value)  # a frozen clock: the program's process makes its stand-in
        if handle not in LINK["clocks"]:  # (once: its methods keep their handles)
            LINK["clocks"][handle] = frozen_class(value, handle, test_refer)
        return LINK["clocks"][handle]
    name = getattr(value, "__qualname__", None)
    owner = getattr(value, "__module__", None) or "builtins"
    if type(name) is str and owner in sys.modules and callable(value) and owner != "__main__":
        found = sys.modules[owner]
        for part in name.split("."):
            found = getattr(found, part, None)
        if found is value:
            return '{"M":[%s,%s]}' % (dump(owner, None), dump(name, None))
    if kind in (type(sys), module) and sys.modules.get(value.__name__) is value:
        return '{"M":[%s,""]}' % dump(value.__name__, None)
    if issubclass(kind, type) and issubclass(value, BaseException):  # (one class there)
        return crossing(value, lambda: '{"X":[%d,null,false,%s]}' % (held(value), looks(value)),
                        test_refer)
    self = getattr(value, "__self__", None)
    if (test_made(value) or kind.__name__ in ("generator", "function") and test_code(value)
            or kind.__name__ in ("builtin_function_or_method", "method") and (
                test_made(self) or type(self) in (list, dict, set, str, bytes, bytearray)
                or type(self).__module__ in ("random", "_io", "collections"))
            or kind.__module__ == "operator" and kind.__name__.endswith(("getter", "caller"))
            or kind.__module__ == "unittest.mock" and callable(value)
            or hasattr(kind, "__next__") and hasattr(kind, "__iter__") or kind is object):
        handle, declared = held(value), DECLARED.get(kind.__name__) is kind  # (the program's)
        if declared and enum_member(value):  # the program's own member of its class
            return '{"G":[%d,%s,%s,%s]}' % (handle, dump(kind.__name__, None), dump(
                value._name_, None), compared(kind))
        return reference(value, handle, declared)
    raise abort(ProgramError("this argument cannot be sent to the program: " + kind.__name__))


def frozen_class(kind, handle, refer):
    """The JSON text of a test's class that derives from a type of datetime's (a frozen clock:
    class Frozen(datetime.datetime) with a now() of its own), for the program's process to make
    its stand-in: {"Z": [handle, the type's name, the class's name, {name: a class or static
    method}, {name: an instance method}]}, the public methods its classes define (the test's)."""
    base, methods = datetime_base(kind), {}
    for owner in reversed(kind.__mro__[:kind.__mro__.index(base)]):  # (the nearest one wins)
        methods.update((name, type(found).__name__) for name, found in vars(owner).items()
                       if not name.startswith("_"))
    texts = [dump({name: getattr(kind, name) for name, how in methods.items() if how in hows},
                  refer) for hows in (("classmethod", "staticmethod"), ("function",))]
    return '{"Z":[%d,%s,%s,%s,%s]}' % (handle, dump(base.__name__, None),
                                       dump(kind.__name__, None), *texts)


def enum_member(value):
    """Whether value is an Enum's member."""
    enum = sys.modules.get("enum")
    return enum is not None and isinstance(value, enum.Enum)


def held(value):
    """The handle of a test object the program's process may use (the object kept alive)."""
    if id(value) not in LINK["ids"]:
        LINK["ids"][id(value)] = len(LINK["mine"])
        LINK["mine"][len(LINK["mine"])] = value
    return LINK["ids"][id(value)]


def rebuilt(tag, item):
    """An instance of a class the context declares, from the program's state (sandbox_child.py's
    rebuilt sends it): "o" the answer's k-th such object, made blank where first met, "S" its
    attributes set, "W" the value once every state is set; anything else fails the test (Abort)."""
    made, ids = LINK["made"]  # this answer's objects: by k, by id
    if tag == "o" and type(item) is list and len(item) == 2 and type(item[0]) is int and (
            item[1] in DECLARED):
        if item[0] not in made:
            kind = DECLARED[item[1]]
            try:
                made[item[0]] = kind.__new__(kind)
            except Exception as e:  # (a __new__ that wants the constructor's arguments)
                try:
                    made[item[0]] = object.__new__(kind)
                except Exception:
                    raise abort(ProgramError("cannot rebuild a %s: %s" % (item[1], describe(e))))
            ids[id(made[item[0]])] = made[item[0]]  # (what {"S": ...} may set)
        return made[item[0]]
    if tag == "S" and type(item) is list and len(item) == 2 and id(item[0]) in ids and (
            type(item[1]) is dict):
        for key, value in item[1].items():
            if type(key) is not str or key.startswith("__") and key.endswith("__"):
                raise abort(ProgramError("a malformed object"))
            try:
                object.__setattr__(item[0], key, value)
            except Exception as e:
                raise abort(ProgramError("cannot rebuild an object: " + describe(e)))
        return None
    if tag == "W" and type(item) is list and len(item) == 2:
        return item[1]
    raise abort(ProgramError("a malformed object"))


def test_code(function):
    code = getattr(function, "__code__", None) or getattr(function, "gi_code", None)
    return code is not None and code.co_filename.startswith(("<test", "<context>"))


def test_ops(op, target, a, b, extra):
    """The program's requests of a test object (sandbox_proxies.py:TestObject's), done by the
    test's own methods; one sandbox_proxies.py:readable or settable refuses fails the test."""
    value = LINK["mine"].get(target) if type(target) is int else None
    if value is None:
        raise TypeError("no such test object")
    if op == "call" and callable(value) and type(a) is list and type(b) is dict:
        return value(*a, **{str(k): v for k, v in b.items()})
    if op == "attr" and readable(value, a):
        return getattr(value, a)
    if op in ("setattr", "delattr") and settable(value, a, op == "delattr"):
        return setattr(value, a, b) if op == "setattr" else delattr(value, a)
    if op == "next" and hasattr(type(value), "__next__"):
        return next(value)
    if op == "cmp" and a in ("eq", "ne", "lt", "le", "gt", "ge"):
        method = getattr(type(value), "__%s__" % a, None)
        found = NotImplemented if method is None else method(value, b)
        return [] if found is NotImplemented else [found]
    if op == "hash":
        return hash(value)
    if op in ("copy", "deepcopy", "vars"):  # (a test's instance's vars(): a copy, vars_of)
        return vars_of(value) if op == "vars" else getattr(IMPORT("copy"), op)(value)
    if op == "enter":  # a `with` in the program (a test's context manager, a mock_open's file)
        return type(value).__enter__(value)
    if op == "exit" and type(a) is list and len(a) == 3:
        return type(value).__exit__(value, *a)
    if op in OPS:  # (its protocol: with the request's a, but for the unary ones)
        return OPS[op](value, *([] if op in ("len", "iter", "bool", "str", "repr") else [a]))
    error = TypeError("the program may not " + str(op)[:20] + " a test object")
    if op != "attr" or a not in TEXTS:  # (but a callable's text: sandbox_proxies.py:texts)
        abort(error)  # (noted: the test fails whatever it catches, as for every refusal)
    raise error


# a message's line breaks as spaces, its other control characters (escapes, NUL, DEL, C1) dropped
PRINTABLE = dict.fromkeys([*range(9), *range(11, 32), *range(127, 160)]) | {10: " ", 13: " "}


class Scope(dict):
    """The tests' globals: a name in `names` is the program's, before the builtins (kept as its
    Remote); any other the tests do not define is a builtin or a NameError, never the program's."""

    def __missing__(self, name):
        if name not in LINK["names"]:
            raise KeyError(name)
        value = ask("get", name)
        if issubclass(type(value), Remote) or id(value) in MADE:  # (a program's class, kept)
            self[name] = value
        return value


def test_side(job, fds, layers):
    """The test process: reads the tests, runs the context, waits for the program to load, runs
    each test, writes the report, and reaps the program's process."""
    job_fd, report_fd, requests, answers = fds
    layers.append(b"seccomp " + (b"1" if confine(job) else b"0"))
    quiet_null()  # (open(os.devnull, "w"), as the program's process has it; before the baseline)
    tests_job, timeout = marshal.loads(read_exactly(job_fd, 1 << 40)), job["timeout"]
    end = time.monotonic() + timeout * (len(tests_job["tests"]) + 1) + 0.5  # (the trainer's is +2)
    os.close(job_fd)
    nonce = tests_job["nonce"].encode()
    LINK.update(side="test", out=requests, **{"in": answers}, timeout=timeout,
                limit=job["answer_bytes"], decode=Decoder(test_resolve), gone="", refer=test_refer,
                ops=test_ops, next=test_next, answered=test_answered, mine={}, ids={},
                clocks={}, before=serving, after=served, taken_on={}, sent=sent,
                remotes={}, names=set(job["names"]), prints={}, made=({}, {}), late=kept_up,
                kept={}, kept_ids={}, kept_tags={}, answer=answer, first=0,
                limit_sent=sys.getrecursionlimit(), stdout=sys.stdout, stderr=sys.stderr,
                mirrored=mirrored, logs=levels(), **shared_state())
    REFUSE[0] = abort  # (a StopIteration no test code may catch: sandbox_values.py:raised)
    RAISES[:] = [0, 1, 256]  # (the test's exceptions sent: numbered from 0 up)
    lending(LINK, test_refer)  # (what test_ops gives: a test object's containers, lent)
    if "random" in sys.modules:  # imported before the fork: its state is the program's too
        sys.modules["random"].seed()
    scope = Scope(__name__="__main__", __builtins__=builtins)
    SOURCES.update({"<test %d>" % i: test for i, test in enumerate(tests_job["tests"])})
    SOURCES["<context>"] = job["context"]  # (what sandbox_errors.py:direct reads)
    context = attempt(lambda: run(compiled(job["context"], "<context>"), scope), timeout)
    DECLARED.update((name, scope[name]) for name in job["classes"] if isinstance(
        scope.get(name), type))  # (and their fingerprints, for the program's process: mirrored)
    LINK["prints"] = {name: found for name, kind in DECLARED.items()
                      if (found := fingerprint(kind)) is not None}
    for name in LINK["names"]:  # the program's names are the program's, not the context's
        scope.pop(name, None)
    LINK.update(shared_state())
    watch_modules()  # (the context's own changes to modules are the baseline)
    tests = [compiled(test, "<test %d>" % i) for i, test in enumerate(tests_job["tests"])]
    verdicts = {"v": b"1", "e": b"0", "t": b"T"}

    def message(status, error):
        text = describe(error) if status == "e" else "Timeout: test timed out" * (status == "t")
        text = text[:300].translate(PRINTABLE)
        return text.encode("utf-8", "backslashreplace")[:tests_job["message_bytes"]]

    def loaded():  # the program's load: its answer 0
        while (message := test_next())[1] != "a" or message[0] != 0:
            pass
        return test_answered(message)

    lines = [nonce + b" " + layer for layer in layers]
    watchdog(timeout)
    status, error = attempt(loaded, timeout)
    LINK["failed"] = ""
    lines.append(nonce + b" load %s %s" % (verdicts[status], message(status, error)))
    if status == "v":
        watchdog(timeout)
        attempt(lambda: prefetch(scope, job["later"]), timeout)
        budget = min(tests_job["max_timeouts"] * timeout, end - time.monotonic())  # (all tests')
        for i, test in enumerate(tests):
            budget = min(budget, end - time.monotonic())  # (the trainer's deadline first)
            LINK["failed"], LINK["first"] = "", LINK["seq"] + 1  # (a callback meanwhile calls it)
            watchdog(max(budget, 0.0))  # (an earlier call's late answer awaited first, on it)
            start, settled = time.monotonic(), budget > 0 and settle(budget)
            budget -= time.monotonic() - start
            if budget <= 0 or not settled:  # (the tests left fail, not run)
                break
            if context[0] != "v":
                test = ProgramError("context: " + message(*context).decode())
            watchdog(timeout)
            LINK["failed"], LINK["first"], start = "", LINK["seq"] + 1, time.monotonic()
            status, error = attempt(lambda: run(test, scope), min(timeout, budget))
            if LINK["failed"]:  # the harness's own failure, whatever the test caught
                status, error = ("t", None) if LINK["failed"].startswith("Timeout") else (
                    "e", Abort(LINK["failed"]))
            budget -= timeout if status == "t" else time.monotonic() - start
            lines.append(nonce + b" test %d %s %s" % (i, verdicts[status], message(status, error)))
    report = b"\n".join(lines) + b"\n" + nonce + b" done\n"
    while report:
        report = report[os.write(report_fd, report):]
    os.close(requests)  # the program's process reads the end of its requests and exits
    reap(0.5)
    os._exit(0)


def prefetch(scope, later):
    """The program's names in the tests' globals before the first test: a test's class body reads
    a name there directly, never through Scope.__missing__."""
    for name in sorted(LINK["names"].difference(later)):
        try:
            scope[name]
        except Exception:  # (not defined: a NameError wherever a test uses it)
            pass
