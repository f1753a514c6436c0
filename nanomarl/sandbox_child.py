"""sandbox_child.py: the two processes of a sandboxed run (sandbox.py's docstring has the threat
model).

Executed by sandbox.py's BOOT in a fresh `python -I -S -B`: main() reads the program's part of the
job, puts up the isolation layers (sandbox_layers.py), imports the context's modules and forks the
program's process (program_side: runs the program, answers requests), then reads the tests, runs
the context and the tests (test_side: decides every verdict, never runs the program's code, writes
the report). It imports only modules that are built in or cheap to load (no json, signal or site:
their imports would cost each run more than the fork).

The two processes talk in lines of JSON, either way: a request [seq, "q", op, target, a, b,
extra] or an answer [seq, "a", status, payload, extra] (the test process numbers its requests
upwards, the program's process downwards). While one side waits for an answer it serves the
other's requests (a callback from a test calling the program again). A value travels as JSON of
exact types (tagged where JSON has none, see dump); an object that is not a value travels as a
reference (a program object {"r": n}, a test object {"x": n}) whose operations the other side
asks for."""
import _json, _signal, _sitebuiltins, _weakref, builtins, marshal, os, select, sys, time

from sandbox_layers import confine, die_with_parent, drop_privileges, isolate  # sandbox.py's BOOT

READ, WRITE, EXIT = os.read, os.write, os._exit  # before any program code (it may replace them)


class TestTimeout(BaseException):  # not an Exception: `except Exception` does not swallow it
    pass


class Abort(BaseException):
    """The harness refused something (an argument it cannot send, a program object compared with a
    test value, the program's process gone): the test fails whatever it catches (LINK["failed"])."""


ALARM = [False]  # armed: the alarm raises TestTimeout only inside attempt()


def on_alarm(signum, frame):
    if ALARM[0]:
        raise TestTimeout()


def attempt(fn, seconds):
    """fn() under a wall-clock alarm -> ("v", its value) | ("t", None) | ("e", the exception).
    Inside another attempt (a request served while waiting for an answer) the outer alarm goes on
    and its TestTimeout passes through."""
    if ALARM[0]:
        try:
            return "v", fn()
        except (TestTimeout, Abort):
            raise
        except BaseException as e:
            return "e", e
    _signal.signal(_signal.SIGALRM, on_alarm)
    _signal.setitimer(_signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        ALARM[0] = True
        value = fn()
        ALARM[0] = False
        return "v", value
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


# ---- values on the wire ----------------------------------------------------------------------

BIG = 1 << 8000  # ints from here on travel as hex (decimal text of over 4300 digits is refused)
IMMUTABLE = {str, int, float, bool, type(None), tuple, frozenset, bytes, complex}
COLLECTIONS = ("Counter", "OrderedDict", "defaultdict", "deque")
VIEWS = {"dict_keys": "K", "dict_values": "V", "dict_items": "I"}


def dump(value, refer, aliases=None):
    """value as JSON text: None, bool, float, str, small ints and lists as JSON; tuples "t",
    sets "s", frozensets "f", dicts "d" (a list of pairs), big ints "i" (hex), bytes "b",
    bytearrays "y" (hex), complex "c", Counter "C", OrderedDict "O", defaultdict "D", deque "Q",
    NamedTuple "n", Fraction "F", Decimal "E", range "R", dict views "K" "V" "I", datetime's
    date, datetime, time and timedelta "T"; anything else is refer(value) (a reference, or
    Abort). aliases {id: (k, object)}: the call's argument containers, sent as {"a": k}."""
    kind = type(value)
    if kind is str:
        return _json.encode_basestring_ascii(value)
    if kind is int:
        return repr(value) if -BIG < value < BIG else '{"i":"%x"}' % value
    if value is None or kind is bool:
        return "null" if value is None else "true" if value else "false"
    if kind is float:
        text = repr(value)
        return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(text, text)
    if aliases and kind not in IMMUTABLE and id(value) in aliases:
        return '{"a":%d}' % aliases[id(value)][0]
    if kind is list:
        return "[" + ",".join([dump(v, refer, aliases) for v in value]) + "]"
    if kind is tuple or kind is set or kind is frozenset:
        return ('{"%s":[' % ("t" if kind is tuple else "s" if kind is set else "f")
                + ",".join([dump(v, refer, aliases) for v in value]) + "]}")
    if kind is dict:
        return '{"d":[' + ",".join(["[" + dump(k, refer, aliases) + "," + dump(v, refer, aliases)
                                    + "]" for k, v in value.items()]) + "]}"
    if kind is bytes or kind is bytearray:
        return '{"%s":"%s"}' % ("b" if kind is bytes else "y", value.hex())
    if kind is complex:
        return '{"c":[' + dump(value.real, refer) + "," + dump(value.imag, refer) + "]}"
    if kind is range:
        return '{"R":[%s,%s,%s]}' % (dump(value.start, refer), dump(value.stop, refer),
                                     dump(value.step, refer))
    module, name = kind.__module__, kind.__name__
    if module == "builtins" and name in VIEWS:
        return '{"%s":%s}' % (VIEWS[name], dump(list(value), refer, aliases))
    if module == "datetime" and name in ("date", "datetime", "time", "timedelta"):
        text = value.isoformat() if name != "timedelta" else [value.days, value.seconds,
                                                             value.microseconds]
        return '{"T":[%s,%s]}' % (dump(name, refer), dump(text, refer))
    if module == "collections" and name in COLLECTIONS:
        if name == "deque":
            inner = "[" + dump(list(value), refer, aliases) + "," + dump(value.maxlen, refer) + "]"
        elif name == "defaultdict":
            inner = ("[" + dump(value.default_factory, refer, aliases) + ","
                     + dump(dict(value), refer, aliases) + "]")
        else:
            inner = dump(dict(value), refer, aliases)
        return '{"%s":%s}' % ({"Counter": "C", "OrderedDict": "O", "defaultdict": "D",
                               "deque": "Q"}[name], inner)
    if issubclass(kind, tuple) and type(getattr(kind, "_fields", None)) is tuple:  # NamedTuple
        return ('{"n":[' + dump(name, refer) + "," + dump(list(kind._fields), refer) + ","
                + dump(list(value), refer, aliases) + "]}")
    if module == "fractions" and name == "Fraction":
        return '{"F":[' + dump(value.numerator, refer) + "," + dump(value.denominator, refer) + "]}"
    if module == "decimal" and name == "Decimal":
        return '{"E":' + dump(str(value), refer) + "}"
    return refer(value, aliases)


NAMEDTUPLES = {}


def chunked(out, items):
    """out (a set or dict) filled 32 items at a time: the alarm can interrupt between chunks (a
    set of colliding hashes costs quadratic time inside one update)."""
    for i in range(0, len(items), 32):
        out.update(items[i:i + 32])
    return out


def hook(tagged, resolve):
    """The JSON decoder's object hook: a tagged value (see dump), or resolve(tag, payload) for a
    reference; ValueError for anything else."""
    if len(tagged) != 1:
        raise ValueError("malformed value")
    (tag, item), = tagged.items()
    kind = type(item)
    if kind is list:
        if tag == "t":
            return tuple(item)
        if tag == "s" or tag == "f":
            out = chunked(set(), item)
            return out if tag == "s" else frozenset(out)
        if tag == "d":
            return chunked({}, item)
        if tag == "c" and len(item) == 2:
            return complex(*[float(x) for x in item])
        if tag == "R" and len(item) == 3 and all(type(x) is int for x in item):
            return range(*item)
        if tag == "K" or tag == "I":
            pairs = item if tag == "I" else [(k, None) for k in item]
            return (chunked({}, pairs).keys if tag == "K" else chunked({}, pairs).items)()
        if tag == "V":
            return dict(enumerate(item)).values()
        if tag == "T" and len(item) == 2 and item[0] in ("date", "datetime", "time", "timedelta"):
            kind = getattr(__import__("datetime"), item[0])
            return kind(*item[1]) if item[0] == "timedelta" else kind.fromisoformat(item[1])
    if kind is str:
        if tag == "i":
            return int(item, 16)
        if tag == "b" or tag == "y":
            return (bytes if tag == "b" else bytearray).fromhex(item)
        if tag == "E":
            return __import__("decimal").Decimal(item)
    if tag in ("C", "O", "D", "Q"):
        collections = __import__("collections")
        if tag == "C" and kind is dict:
            return collections.Counter(item)
        if tag == "O" and kind is dict:
            return collections.OrderedDict(item)
        if tag == "D" and kind is list and len(item) == 2 and type(item[1]) is dict:
            return collections.defaultdict(item[0], item[1])
        if tag == "Q" and kind is list and len(item) == 2 and type(item[0]) is list:
            return collections.deque(item[0], item[1])
    if tag == "n" and kind is list and len(item) == 3 and type(item[0]) is str and (
            type(item[1]) is list and len(item[1]) <= 256):
        key = (item[0], tuple(item[1]))
        if key not in NAMEDTUPLES:
            if len(NAMEDTUPLES) > 100:
                NAMEDTUPLES.clear()
            NAMEDTUPLES[key] = __import__("collections").namedtuple(*key)
        return NAMEDTUPLES[key]._make(item[2])
    if tag == "F" and kind is list and len(item) == 2 and all(type(x) is int for x in item):
        return __import__("fractions").Fraction(*item)
    return resolve(tag, item)


class Decoder:
    """JSON text -> values (json.loads with `object_hook`, on json's own C scanner)."""
    strict, object_pairs_hook, parse_float, parse_int = True, None, float, int
    parse_constant = {"NaN": float("nan"), "Infinity": float("inf"),
                      "-Infinity": float("-inf")}.__getitem__

    def __init__(self, resolve):
        self.object_hook = lambda tagged: hook(tagged, resolve)
        self.scan = _json.make_scanner(self)

    def __call__(self, line):
        text = line.decode()
        value, end = self.scan(text, 0)
        if end != len(text):
            raise ValueError("extra data")
        return value


def containers(values, out):
    """The mutable containers in values (lists, dicts, sets, bytearrays, Counters, deques, ...),
    depth first: both processes number a call's arguments alike, for write-back and identity."""
    for value in values:
        kind = type(value)
        if kind is list or kind is dict or kind is set or kind is bytearray or (
                kind.__module__ == "collections" and kind.__name__ in COLLECTIONS):
            out.append(value)
            if kind is not set and kind is not bytearray:
                containers(value.values() if isinstance(value, dict) else value, out)
        elif kind is tuple or (issubclass(kind, tuple) and hasattr(kind, "_fields")):
            containers(value, out)
    return out


def snapshot(value):
    """What a container holds now, to tell later whether a call changed it."""
    return list(value.items()) if isinstance(value, dict) else (
        bytes(value) if type(value) is bytearray else set(value) if type(value) is set
        else list(value))


def refill(container, content):
    """container's contents replaced in place by content (the program's copy after a call)."""
    if isinstance(container, (dict, set)) or type(container).__name__ == "deque":
        container.clear()
        (container.extend if type(container).__name__ == "deque" else container.update)(content)
    else:
        container[:] = content


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


def describe(error):
    """'Name: message' of an exception (an answer's as the other process gave it)."""
    if type(error) is Abort:
        return str(error)
    if any(type(arg).__name__ == "Remote" for arg in getattr(error, "args", ())):
        return type(error).__name__ + ": <program object>"  # (its text would ask the program)
    try:
        return getattr(error, "program_text", None) or type(error).__name__ + ": " + str(error)
    except BaseException:
        return type(error).__name__


class ProgramError(Exception):
    """The program's exception (or the end of its process), raised in the test process."""


def builtin_exception(name):
    kind = getattr(builtins, name, None) if type(name) is str and name.isidentifier() else None
    if isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(
            kind, (StopIteration, StopAsyncIteration)):
        return kind
    return None


EXCEPTIONS = {}


def program_error(name, message, base=""):
    """The exception of that name (a builtin Exception but StopIteration; else a class of that
    name derived from `base`, its nearest builtin ancestor: a ValueError subclass is caught by
    `except ValueError`; else a ProgramError), described as the other process described it."""
    kind = builtin_exception(name)
    if kind is None and builtin_exception(base) and name.isidentifier():
        if (name, base) not in EXCEPTIONS:
            if len(EXCEPTIONS) > 100:
                EXCEPTIONS.clear()
            EXCEPTIONS[name, base] = type(name, (builtin_exception(base),),
                                          {"__module__": "program"})
        kind = EXCEPTIONS[name, base]
    try:
        error = (kind or ProgramError)(message)
    except Exception:
        error = ProgramError(message)
    error.program_text = name[:100] + ": " + message[:300]
    return error


def error_payload(error):
    """[name, message, nearest builtin ancestor's name] of an exception."""
    base = next((k.__name__ for k in type(error).__mro__ if getattr(builtins, k.__name__, None)
                 is k), "Exception")
    return [type(error).__name__, describe(error).partition(": ")[2][:300], base]


# ---- the link: requests and answers, both ways -----------------------------------------------

LINK = dict(seq=0, gone="has not started", buffer=bytearray(), failed="", args=[], released=[])
OPS = dict(len=len, bool=bool, str=str, repr=repr, hash=hash, iter=iter, int=int, float=float,
           index=lambda a: a.__index__(), abs=abs, neg=lambda a: -a, pos=lambda a: +a,
           invert=lambda a: ~a, format=format, round=round, reversed=reversed,
           getitem=lambda a, b: a[b], contains=lambda a, b: b in a,
           isinstance=lambda a, b: isinstance(b, a),
           eq=lambda a, b: a == b, ne=lambda a, b: a != b, lt=lambda a, b: a < b,
           le=lambda a, b: a <= b, gt=lambda a, b: a > b, ge=lambda a, b: a >= b,
           add=lambda a, b: a + b, sub=lambda a, b: a - b, mul=lambda a, b: a * b,
           truediv=lambda a, b: a / b, floordiv=lambda a, b: a // b, mod=lambda a, b: a % b,
           pow=lambda a, b: a ** b, and_=lambda a, b: a & b, or_=lambda a, b: a | b,
           xor=lambda a, b: a ^ b, lshift=lambda a, b: a << b, rshift=lambda a, b: a >> b,
           matmul=lambda a, b: a @ b,
           type=lambda a: [type(a).__module__, type(a).__qualname__])
BINARY = {"eq", "ne", "lt", "le", "gt", "ge", "add", "sub", "mul", "truediv", "floordiv", "mod",
          "pow", "and_", "or_", "xor", "lshift", "rshift", "matmul", "contains", "isinstance"}


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


def request(op, target, a=None, b=None, extra=None):
    """Sends a request to the other process and returns its answer (a value, or the exception it
    reported raised here); serves the other process's requests meanwhile."""
    if LINK["gone"]:
        raise abort(gone(""))
    step = 1 if LINK["side"] == "test" else -1
    LINK["seq"] = seq = LINK["seq"] + step
    line = "[%d,\"q\",%s,%s,%s,%s,%s]\n" % (seq, dump(op, None), dump(target, None),
                                           dump(a, LINK["refer"]), dump(b, LINK["refer"]),
                                           dump(extra or {}, LINK["refer"]))
    write_all(LINK["out"], line.encode())
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


def answer(seq, status, payload, extra):
    """Writes an answer line (status "v" value, "e" exception, "t" timed out)."""
    try:
        if status == "e":
            payload = error_payload(payload)
        data = '[%d,"a",%s,%s,%s]' % (seq, dump(status, None),
                                      dump(payload, LINK["refer"]),
                                      dump(extra, LINK["refer"]))
    except TestTimeout:
        data = '[%d,"a","t",null,{"d":[]}]' % seq
    except BaseException as e:
        data = '[%d,"a","e",%s,{"d":[]}]' % (seq, dump(error_payload(e), None))
    if len(data) > LINK["limit"]:
        data = '[%d,"a","e",%s,{"d":[]}]' % (seq, dump(["ValueError", f"an answer of {len(data)}"
                                                         " bytes", "ValueError"], None))
    write_all(LINK["out"], b"\n" + data.encode() + b"\n")  # a line of its own, after any output


# ---- the test process's side -----------------------------------------------------------------

def abort(error):
    LINK["failed"] = LINK["failed"] or describe(error)
    return Abort(LINK["failed"])


def gone(why):
    LINK["gone"] = LINK["gone"] or why
    return ProgramError("the program's process " + LINK["gone"])


def test_next():
    """The next well-formed message from the program's process (malformed lines are skipped)."""
    while True:
        line = read_line(LINK["in"], LINK["buffer"], LINK["limit"])
        if line is None:
            raise abort(gone("has ended or sent an over-long answer"))
        try:
            message = LINK["decode"](line)
        except Exception:
            continue
        if (type(message) is list and len(message) in (5, 7) and type(message[0]) is int
                and message[1] in ("q", "a") and len(message) == (7 if message[1] == "q" else 5)
                and type(message[-1]) is dict):
            return message


def test_answered(message):
    """An answer of the program's process: its write-backs applied to the call's arguments, its
    output printed where the test's is going; its value, or its exception raised."""
    _, _, status, payload, extra = message
    numbered = LINK["args"][-1] if LINK["args"] else []
    for write in extra.get("w", ()):
        if type(write) is list and len(write) == 2 and type(write[0]) is int and (
                0 <= write[0] < len(numbered)):
            try:
                refill(numbered[write[0]], write[1])
            except Exception:
                pass
    for key, stream in (("o", "stdout"), ("e", "stderr")):  # only into a test's redirection
        if type(extra.get(key)) is str and getattr(sys, stream) is not LINK[stream]:
            getattr(sys, stream).write(extra[key])
    if LINK["seeded"] and type(extra.get("rs")) is tuple:  # only once a test has seeded
        random = sys.modules.get("random")
        try:
            random.setstate(extra["rs"])
            LINK["rs"] = extra["rs"]
        except Exception:
            pass
    if status == "v":
        return payload
    if status == "t":
        LINK["failed"] = LINK["failed"] or "Timeout: test timed out"
        raise TestTimeout()
    if status == "e" and type(payload) is list and len(payload) == 3 and all(
            type(p) is str for p in payload):
        raise program_error(*payload)
    raise abort(ProgramError("a malformed answer"))


def test_resolve(tag, item):
    if tag == "r" and type(item) is int:
        return remote(item)
    if tag == "x" and type(item) is int and item in LINK["mine"]:
        return LINK["mine"][item]
    if tag == "a" and type(item) is int and LINK["args"] and 0 <= item < len(LINK["args"][-1]):
        return LINK["args"][-1][item]
    raise ValueError("malformed value")


def test_refer(value, aliases):
    """A test object the program's process may use: a program object back as its reference, a
    builtin or module function by name, a function, class, instance or iterator the tests made, a
    bound method of a test list, dict or set, an itemgetter, attrgetter or unittest.mock object, as
    a reference; else the test fails (Abort)."""
    kind = type(value)
    if kind is Remote:
        return '{"r":%d}' % value._Remote__handle
    name = getattr(value, "__qualname__", None)
    module = getattr(value, "__module__", None) or "builtins"
    if type(name) is str and module in sys.modules and callable(value) and module != "__main__":
        try:
            found = sys.modules[module]
            for part in name.split("."):
                found = getattr(found, part)
        except AttributeError:
            found = None
        if found is value:
            return '{"M":[%s,%s]}' % (dump(module, None), dump(name, None))
    if kind is type(sys) and sys.modules.get(value.__name__) is value:
        return '{"M":[%s,""]}' % dump(value.__name__, None)
    self = getattr(value, "__self__", None)
    if (test_made(value) or kind.__name__ in ("generator", "function") and test_code(value)
            or kind.__name__ == "method" and test_made(self)
            or kind.__name__ == "builtin_function_or_method" and type(self) in (list, dict, set)
            or kind.__module__ == "operator" and kind.__name__ in ("itemgetter", "attrgetter")
            or kind.__module__ == "unittest.mock" and callable(value)
            or hasattr(kind, "__next__") and hasattr(kind, "__iter__")):
        if id(value) not in LINK["ids"]:
            LINK["ids"][id(value)] = len(LINK["mine"])
            LINK["mine"][len(LINK["mine"])] = value
        return '{"x":%d}' % LINK["ids"][id(value)]
    raise abort(ProgramError("this argument cannot be sent to the program: " + kind.__name__))


def test_code(function):
    code = getattr(function, "__code__", None) or getattr(function, "gi_code", None)
    return code is not None and code.co_filename.startswith(("<test", "<context>"))


def test_made(value):
    """A class the tests (or the context) define, or an instance of one."""
    kind = value if issubclass(type(value), type) else type(value)
    return kind.__module__ == "__main__" and not issubclass(kind, BaseException)


def test_ops(op, target, a, b, extra):
    """What the program's process may do with a test object: call it, read or set its public
    attributes (an instance or class the tests define), draw from it (an iterator)."""
    value = LINK["mine"].get(target) if type(target) is int else None
    if value is None:
        raise TypeError("no such test object")
    if op == "call" and callable(value) and type(a) is list and type(b) is dict:
        return value(*a, **{str(k): v for k, v in b.items()})
    if op == "attr" and type(a) is str and not a.startswith("_") and test_made(value):
        return getattr(value, a)
    if (op == "setattr" and type(a) is str and not a.startswith("_") and test_made(value)
            and not hasattr(type(value), a)):  # data, never a method or property of the class
        return setattr(value, a, b)
    if op == "next" and hasattr(type(value), "__next__"):
        return next(value)
    if op in ("len", "iter", "bool", "str", "repr", "getitem", "contains") and test_made(value):
        return OPS[op](value, *([a] if op in ("getitem", "contains") else []))
    raise TypeError("the program may not " + str(op)[:20] + " a test object")


def ask(op, target, a=None, b=None, args=None):
    """A request of the test process: `args` (a call's arguments) are numbered for the answer's
    write-backs and identity; the program's process gets the time this test has left, the
    recursion limit, random's state once a test has seeded it, and whether output is redirected."""
    extra = {"s": _signal.getitimer(_signal.ITIMER_REAL)[0] or LINK["timeout"]}
    if LINK["released"]:
        extra["f"], LINK["released"] = LINK["released"], []
    if sys.getrecursionlimit() != LINK["limit_sent"]:
        extra["l"] = LINK["limit_sent"] = sys.getrecursionlimit()
    if sys.stdout is not LINK["stdout"]:
        extra["o"] = 1
    if sys.stderr is not LINK["stderr"]:
        extra["e"] = 1
    if LINK["seeded"]:
        state = sys.modules["random"].getstate()
        if state != LINK["rs"]:
            extra["rs"] = LINK["rs"] = state
    numbered = containers(args, []) if args else []
    LINK["args"].append(numbered)
    try:
        return request(op, target, a, b, extra)
    finally:
        LINK["args"].pop()


def refused(self, *other):
    raise abort(TypeError("a program object compared or combined with a test value"))


def binary(name):
    def method(self, other):
        if type(other) is not Remote and not (other is None and name in ("eq", "ne")):
            refused(self)  # the test's value (maybe an expected one) never reaches the program
        return ask("op", self._Remote__handle, name, other)
    return method


def unary(name):
    return lambda self, *a: ask("op", self._Remote__handle, name, list(a))


class Remote:
    """A program object, by its handle in the program's process: the test asks that process for
    its attributes, calls, items, length, truth, text, iteration (drawn lazily: one item at a time,
    then up to 256 ahead) and its comparisons and arithmetic with other program objects; one with
    a test value is refused (it would let an object equal to everything decide a verdict), but for
    `in`, which draws its items and compares them here (Python's way without __contains__)."""
    __slots__ = ("__handle", "__buffer", "__drawn", "__end", "__weakref__")
    __hash__ = unary("hash")
    __bool__, __len__, __str__ = unary("bool"), unary("len"), unary("str")
    __index__ = unary("index")
    __int__, __float__, __abs__, __neg__ = unary("int"), unary("float"), unary("abs"), unary("neg")
    __pos__, __invert__, __round__ = unary("pos"), unary("invert"), unary("round")
    __reversed__, __format__ = unary("reversed"), unary("format")
    __eq__, __ne__, __lt__, __le__ = binary("eq"), binary("ne"), binary("lt"), binary("le")
    __gt__, __ge__, __add__, __sub__ = binary("gt"), binary("ge"), binary("add"), binary("sub")
    __mul__, __truediv__, __floordiv__ = binary("mul"), binary("truediv"), binary("floordiv")
    __mod__, __pow__, __and__, __or__ = binary("mod"), binary("pow"), binary("and_"), binary("or_")
    __xor__, __lshift__, __rshift__ = binary("xor"), binary("lshift"), binary("rshift")
    __matmul__ = binary("matmul")
    __radd__ = __rsub__ = __rmul__ = __rtruediv__ = __rfloordiv__ = __rmod__ = __rpow__ = refused

    def __init__(self, handle):
        self.__handle, self.__buffer, self.__drawn, self.__end = handle, [], 0, None

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

    def __getitem__(self, key):
        return ask("op", self.__handle, "getitem", key)

    def __setitem__(self, key, value):
        ask("op", self.__handle, "setitem", [key, value], [key, value])

    def __iter__(self):
        return ask("op", self.__handle, "iter", [])

    def __instancecheck__(self, instance):  # a test's value is no instance of a program class
        return type(instance) is Remote and ask("op", self.__handle, "isinstance", instance)

    def __contains__(self, item):  # as Python does without __contains__: by iteration, here
        if type(item) is Remote:
            return ask("op", self.__handle, "contains", item)
        return any(x is item or x == item for x in self)

    def __next__(self):
        if not self.__buffer and self.__end is None:
            got = ask("next", self.__handle, 1 if self.__drawn < 8 else min(self.__drawn, 256))
            if type(got) is not list or len(got) != 2 or type(got[0]) is not list:
                raise abort(ProgramError("a malformed answer"))
            self.__buffer, self.__end = got[0][::-1], got[1]
            self.__drawn += len(got[0])
        if self.__buffer:
            return self.__buffer.pop()
        end = self.__end
        if type(end) is list and len(end) == 3 and all(type(p) is str for p in end):
            raise program_error(*end)
        raise StopIteration

    def __repr__(self):
        return ask("op", self.__handle, "repr", [])

    @property
    def __class__(self):  # isinstance(x, types.GeneratorType) asks this of a Remote
        module, name = ask("op", self.__handle, "type", [])
        if module == "builtins":
            types = __import__("types")
            for kind in [getattr(builtins, name, None)] + list(vars(types).values()):
                if isinstance(kind, type) and kind.__module__ == "builtins" and (
                        kind.__qualname__ == name):
                    return kind
        return Remote

    def __del__(self):
        handle = getattr(self, "_Remote__handle", None)  # (None: its __init__ failed)
        if handle is not None:
            LINK["released"].append(handle)


def remote(handle):
    """The one Remote of a handle (so `is` holds between two answers naming the same object)."""
    ref = LINK["remotes"].get(handle)
    found = ref() if ref is not None else None
    if found is None:
        found = Remote(handle)
        LINK["remotes"][handle] = _weakref.ref(found)
        if handle in LINK["released"]:  # collected, but the program still holds it: keep it
            LINK["released"].remove(handle)
    return found


class Scope(dict):
    """The tests' globals: a name in `names` (the entry point, aux, a problem's declared names) is
    the program's, before the builtins (a program object kept as its Remote); any other name the
    tests and the context do not define is a builtin or a NameError, never the program's."""

    def __missing__(self, name):
        if name not in LINK["names"]:
            raise KeyError(name)
        value = ask("get", name)
        if type(value) is Remote:
            self[name] = value
        return value


# ---- the program's process's side ------------------------------------------------------------

def program_side(job, requests, answers):
    """The program's process: runs the program, then answers requests until their pipe closes."""
    die_with_parent(lambda: not select.select([requests], [], [], 0)[0])  # (its pipe is not closed)
    confine(job)
    scope = {"__name__": "__main__", "__builtins__": builtins}
    refs, ids, tests, buffer = {}, {}, {}, bytearray()
    outputs, random_sent = (sys.stdout, sys.stderr), [None]

    class TestObject:
        """A test object (a callback, a test class or its instance, an iterator), by its handle in
        the test process: calls, attribute reads and writes and draws are asked of that process."""
        __slots__ = ("handle",)

        def __init__(self, handle):
            object.__setattr__(self, "handle", handle)

        def __call__(self, *args, **kwargs):
            return request("call", self.handle, list(args), kwargs)

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return request("attr", self.handle, name)

        def __setattr__(self, name, value):
            request("setattr", self.handle, name, value)

        def __iter__(self):
            return self

        def __next__(self):
            return request("next", self.handle)

        def __len__(self):
            return request("len", self.handle)

        def __getitem__(self, key):
            return request("getitem", self.handle, key)

        def __repr__(self):
            return "<test object %d>" % self.handle

    def resolve(tag, item):
        if tag == "r" and type(item) is int and item in refs:
            return refs[item]
        if tag == "x" and type(item) is int:
            if item not in tests:
                tests[item] = TestObject(item)
            return tests[item]
        if tag == "M" and type(item) is list and len(item) == 2 and all(
                type(p) is str for p in item):
            found = sys.modules.get(item[0]) or __import__(item[0])
            for part in item[1].split(".") if item[1] else ():
                found = getattr(found, part)
            return found
        raise ValueError("malformed value")

    def refer(value, aliases):
        """A program object that is not a value: its reference (a subclass of a value's type
        travels as that type's value: its overridden methods stay here)."""
        if type(value) is TestObject:
            return '{"x":%d}' % value.handle
        for base in (str, int, float, bytes, complex, list, tuple, dict, set, frozenset):
            if isinstance(value, base):
                return dump(base(value), refer, aliases)
        if id(value) not in ids:
            refs[LINK["handles"]], ids[id(value)] = value, LINK["handles"]
            LINK["handles"] += 1
        return '{"r":%d}' % ids[id(value)]

    def next_message():
        while True:
            line = read_line(requests, buffer, 1 << 40)
            if line is None:
                EXIT(0)
            try:
                message = LINK["decode"](line)
            except Exception:
                continue
            if type(message) is list and len(message) in (5, 7) and type(message[-1]) is dict:
                return message

    def before(extra):
        for handle in extra.get("f", ()):
            if handle in refs:
                del ids[id(refs.pop(handle))]
        if type(extra.get("l")) is int:
            sys.setrecursionlimit(max(extra["l"], 100) + 50)
        if type(extra.get("rs")) is tuple:
            random = __import__("random")
            random.setstate(extra["rs"])
            random_sent[0] = extra["rs"]
        if extra.get("o"):
            sys.stdout = __import__("io").StringIO()
        if extra.get("e"):
            sys.stderr = __import__("io").StringIO()

    def after(extra):
        reply = {}
        if extra.get("o") and type(sys.stdout).__name__ == "StringIO":
            reply["o"], sys.stdout = sys.stdout.getvalue(), outputs[0]
        if extra.get("e") and type(sys.stderr).__name__ == "StringIO":
            reply["e"], sys.stderr = sys.stderr.getvalue(), outputs[1]
        if random_sent[0] is not None and "random" in sys.modules:
            state = sys.modules["random"].getstate()
            if state != random_sent[0]:
                reply["rs"] = random_sent[0] = state
        for stream in outputs:
            try:
                stream.flush()
            except BaseException:
                pass
        return reply

    def content(container):
        return (dict(container) if isinstance(container, dict) else set(container)
                if type(container) is set else bytes(container) if type(container) is bytearray
                else list(container))

    def ops(op, target, a, b, extra):
        """-> (the answer's value as JSON text, its write-backs: [[k, the new contents of the
        call's k-th argument container], ...] for those the call changed)."""
        if op == "get":
            if type(target) is not str or target not in scope:
                raise NameError(f"name {target!r} is not defined")
            return dump(scope[target], refer), ""
        if type(target) is not int or target not in refs:
            raise TypeError("a stale or malformed reference")
        value = refs[target]
        if op == "attr" and type(a) is str:
            return dump(getattr(value, a), refer), ""
        if op == "setattr" and type(a) is str:
            return dump(setattr(value, a, b), refer), ""
        if op == "next" and type(a) is int:
            items, end = [], None
            try:
                for _ in range(max(1, min(a, 256))):
                    items.append(next(value))
            except StopIteration:
                end = "stop"
            except Exception as e:
                end = error_payload(e)
            return dump([items, end], refer), ""
        if op == "op" and a == "setitem" and type(b) is list and len(b) == 2:
            value[b[0]] = b[1]
            return "null", ""
        if op == "op" and a in OPS:
            args = [b] if a in BINARY or a == "getitem" else b if type(b) is list else []
            return dump(OPS[a](value, *args), refer), ""
        if op == "call" and type(a) is list and type(b) is dict:
            numbered = containers(a + list(b.values()), [])
            before_call = [snapshot(c) for c in numbered]
            result = value(*a, **{str(k): v for k, v in b.items()})
            aliases = {id(c): (k, c) for k, c in enumerate(numbered)}
            writes = ",".join("[%d,%s]" % (k, dump(content(c), refer, aliases))
                              for k, c in enumerate(numbered) if snapshot(c) != before_call[k])
            return dump(result, refer, aliases), writes
        raise TypeError("no such operation: " + str(op)[:20])

    def answer_with(seq, status, payload, extra):
        if status != "v":
            return answer(seq, status, payload, extra)
        text, writes = payload
        reply = dump(extra, refer)
        if writes:
            reply = reply[:-2] + ("," if extra else "") + '["w",[' + writes + "]]]}"
        data = '[%d,"a","v",%s,%s]' % (seq, text, reply)
        if len(data) > LINK["limit"]:
            return answer(seq, "e", ValueError(f"an answer of {len(data)} bytes"), {})
        write_all(answers, b"\n" + data.encode() + b"\n")

    LINK.update(side="program", out=answers, refer=refer, ops=ops, before=before, after=after,
                next=next_message, answered=program_answered, gone="", handles=0,
                limit=job["answer_bytes"], decode=Decoder(resolve), answer=answer_with)
    code = compiled(job["program"], "<program>")
    status, payload = attempt(lambda: run(code, scope), job["timeout"])
    answer(0, status, None if status == "v" else payload, after({}))
    while True:
        message = next_message()
        if message[1] == "q":
            serve(message)


def program_answered(message):
    """The test process's answer to a request of the program's (a callback's value)."""
    _, _, status, payload, _ = message
    if status == "v":
        return payload
    if status == "e" and type(payload) is list and len(payload) == 3:
        if payload[0] == "StopIteration":
            raise StopIteration
        raise program_error(*payload)
    raise TestTimeout()


# ---- the test process ------------------------------------------------------------------------

def test_side(job, fds, layers, child):
    """The test process: reads the tests, runs the context, waits for the program to load, runs
    each test, writes the report, and reaps the program's process."""
    job_fd, report_fd, requests, answers = fds
    layers.append(b"seccomp " + (b"1" if confine(job) else b"0"))
    tests_job, timeout = marshal.loads(read_exactly(job_fd, 1 << 40)), job["timeout"]
    os.close(job_fd)
    nonce = tests_job["nonce"].encode()
    LINK.update(side="test", out=requests, **{"in": answers}, timeout=timeout,
                limit=job["answer_bytes"], decode=Decoder(test_resolve), gone="", refer=test_refer,
                ops=test_ops, next=test_next, answered=test_answered, mine={}, ids={},
                answer=answer, before=lambda extra: None, after=lambda extra: {},
                remotes={}, names=set(job["names"]),
                limit_sent=sys.getrecursionlimit(), stdout=sys.stdout, stderr=sys.stderr,
                seeded=False, rs=None)
    if "random" in sys.modules:  # imported before the fork: its state is the program's too
        sys.modules["random"].seed()
    scope = Scope(__name__="__main__", __builtins__=test_builtins())
    context = attempt(lambda: run(compiled(job["context"], "<context>"), scope), timeout)
    for name in LINK["names"]:  # the program's names are the program's, not the context's
        scope.pop(name, None)
    tests = [compiled(test, "<test %d>" % i) for i, test in enumerate(tests_job["tests"])]
    verdicts = {"v": b"1", "e": b"0", "t": b"T"}

    def message(status, error):
        text = describe(error) if status == "e" else "Timeout: test timed out" * (status == "t")
        text = text[:300].encode("utf-8", "backslashreplace")[:tests_job["message_bytes"]]
        return text.replace(b"\n", b" ").replace(b"\r", b" ")

    def loaded():  # the program's load: its answer 0
        while (message := test_next())[1] != "a" or message[0] != 0:
            pass
        return test_answered(message)

    lines = [nonce + b" " + layer for layer in layers]
    status, error = attempt(loaded, timeout)
    LINK["failed"] = ""
    lines.append(nonce + b" load %s %s" % (verdicts[status], message(status, error)))
    if status == "v":
        budget = tests_job["max_timeouts"] * timeout  # wall time of all tests together
        cpu = __import__("resource")
        for i, test in enumerate(tests):
            if budget <= 0:
                break
            if context[0] != "v":
                test = ProgramError("context: " + message(*context).decode())
            used = sum(os.times()[:2])
            hard = cpu.getrlimit(cpu.RLIMIT_CPU)[1]
            try:  # a watchdog for C code the alarm cannot interrupt (a set of colliding hashes)
                cpu.setrlimit(cpu.RLIMIT_CPU, (min(hard, int(used + timeout) + 1), hard))
            except (ValueError, OSError):
                pass
            LINK["failed"], start = "", time.monotonic()
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
    reap(child, 0.5)
    os._exit(0)


def test_builtins():
    """The builtins of the tests, whose __import__ notes a test's random.seed (from then on the
    program's random follows the test's: one generator, as in one process)."""
    names = dict(builtins.__dict__)
    real = builtins.__import__

    def seeding(*args):
        if LINK["seeded"]:
            return
        LINK["seeded"] = True

    def importing(name, *args, **kwargs):
        module = real(name, *args, **kwargs)
        random = sys.modules.get("random")
        if random is not None and not getattr(random, "_nanomarl_watched", False):
            for method in ("seed", "setstate"):
                original = getattr(random, method)
                setattr(random, method, lambda *a, _original=original, **k: (
                    seeding(), _original(*a, **k))[1])
            random._nanomarl_watched = True
        return module

    names["__import__"] = importing
    return names


def reap(child, seconds):
    """Wait, at most `seconds`, for the program's process to end, so that no zombie is left to an
    init that does not reap (a trainer that is pid 1 of a container); one still running then
    (a program that ignores the end of its requests) is killed with the group by the trainer,
    which reaps it."""
    deadline = time.monotonic() + seconds
    while child > 0 and time.monotonic() < deadline:
        try:
            if os.waitpid(child, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.002)


def read_exactly(fd, size):
    """size bytes from fd (fewer if it ends first)."""
    data = bytearray()
    while len(data) < size and (chunk := os.read(fd, min(size - len(data), 1 << 16))):
        data += chunk
    return bytes(data)


def main():
    job_fd, report_fd, parent = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    size = int.from_bytes(read_exactly(job_fd, 8), "big")
    job = marshal.loads(read_exactly(job_fd, size))  # the program's part; the tests after the fork
    for name in ("exit", "quit"):  # as a normal interpreter's site module (-S skipped it)
        setattr(builtins, name, _sitebuiltins.Quitter(name, "Ctrl-D (i.e. EOF)"))
    try:
        isolate()
        isolated = b"1"
    except OSError as e:
        isolated = b"0 " + str(e).encode()[:200]
        os.chdir("/")
    unprivileged = drop_privileges(isolated == b"1")
    die_with_parent(lambda: os.getppid() == parent)
    # the context's modules are imported before the fork (the program's process inherits them);
    # the context itself runs in the test process only, after the fork, so none of its objects
    # (a random.Random() of a helper) exists in the program's process
    for module in job["preload"]:
        attempt(lambda: __import__(module), job["timeout"])
    requests, answers = os.pipe(), os.pipe()
    try:
        child = os.fork()
    except OSError:  # no program's process: the test process reads the end of its answers
        child = -1
    if child == 0:  # the program's process: pid 1 of the new PID namespace
        for fd in (job_fd, report_fd, requests[1], answers[0]):
            os.close(fd)
        try:
            program_side(job, requests[0], answers[1])
        finally:  # never back into the test process's code
            os._exit(1)
    os.close(requests[0])
    os.close(answers[1])
    layers = [b"namespaces " + isolated, b"unprivileged " + (b"1" if unprivileged else b"0")]
    test_side(job, (job_fd, report_fd, requests[1], answers[0]), layers, child)
