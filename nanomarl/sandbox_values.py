"""sandbox_values.py: what crosses between the two processes of a sandboxed run (sandbox.py's
docstring has the threat model; sandbox_link.py carries it).

Executed inside the sandbox as the module `sandbox_values` (sandbox.py's BOOT). A value travels as
JSON of exact types, tagged where JSON has none (dump; Decoder and hook read it back, chunked so
that the alarm can interrupt); anything else travels as a reference, made by the `refer` and read
by the `resolve` each side passes in, or as a copy (sandbox_copies.py: a call's arguments, written
back after it; the test's objects of the standard library that hold no test code, a partial, an io
buffer, a Random, a compiled pattern or a match: their JSON text here, copied, rebuilt in the
program's process by sandbox_copies.py:rebuilt_copy). An exception
travels as [name, message, nearest builtin ancestor, arguments, whether its class is a module-level
class of __main__] (error_payload) and is raised on the other side as an exception of that name and
those arguments (program_error): in the test process, of the context's class of that name where
the context declares one. A test's patch of a module attribute crosses with each request
(sandbox_patches.py; the value dumped once, when it is checked: Dumped). A test's class deriving
from a type of datetime's (a frozen clock) is a class of the program's process there: a real
subclass of that type whose public methods are the test's (frozen_class, stand_in).

The tags, an index (each is described where it is made). A value's: dump. A reference's or a
mark's, read by each side's resolve: {"r": n} a program object, {"g": n} a program's generator
or iterator (a stream), {"x": n} a test object, {"X": [n, class name, own == or hash]} one whose
class matters there, {"M": [module, name]} a module or a function of one (both test_refer's),
{"Z": [...]} a test's frozen clock (frozen_class), {"k": handle} a kept container, {"a": k} the
k-th argument container of the call answered, {"A": k} and {"N": [handle, value]} a test
object's container lent (sandbox_lending.py), "P" "B" "U" "p" "H" a copy (copied), "o" "S" "W" an
instance of a class the context declares (sandbox_verdicts.py:rebuilt), {"e": payload} an
exception the program returned. The keys of a message's extra: with a request of the test
process, what the program's process takes on (sandbox_verdicts.py:mirrored): "s" the time left,
"f" the handles released, "l" the recursion limit, "o" and "e" output redirected, "b" builtins,
"p" module attributes (one that is the k-th argument container: [module, attribute, null, k]),
"i" sys.stdin, "c" warnings caught; in the program's answer, "o" and "e" the output, "i"
sys.stdin's contents, "c" the warnings; either way "k" the kept containers' news ([handle,
contents], or [handle, start, new items]: sandbox_copies.py:news), "d" and "z" (the program's) the
handles forgotten and at rest, "D" (the test's) those at rest it forgot, "n" (its answer) the
argument containers kept from now on, "w" (an answer) the argument containers changed, "#" (a
request) how many containers its arguments hold and "m" those passed twice (sandbox_link.py:told,
taken, ask); in an answer to a test's callback, "b" and "p" the patches in force
(sandbox_verdicts.py:served)."""
import _json, builtins

from sandbox_patches import unpatched  # sandbox.py's BOOT


BIG = 1 << 8000  # ints from here on travel as hex (decimal text of over 4300 digits is refused)
IMMUTABLE = {str, int, float, bool, type(None), tuple, frozenset, bytes, complex}
COLLECTIONS = ("Counter", "OrderedDict", "defaultdict", "deque")
VIEWS = {"dict_keys": "K", "dict_values": "V", "dict_items": "I"}
DATETIMES = ("date", "datetime", "time", "timedelta", "timezone")  # datetime's value types
BY_ARGUMENTS = ("timedelta", "timezone")  # (those that cross by their arguments, not ISO text)


class Dumped(str):
    """JSON text that dump() writes as it is: a value dumped ahead of its request, as it was
    checked (sandbox_verdicts.py:module_patches), with the value it was dumped from (`value`:
    sandbox_verdicts.py:sent notes it once the request is out)."""

    def __new__(cls, text, value):
        made = super().__new__(cls, text)
        made.value = value
        return made


def dump(value, refer, aliases=None):
    """value as JSON text: None, bool, float, str, small ints and lists as JSON; tuples "t",
    sets "s", frozensets "f", dicts "d" (a list of pairs), big ints "i" (hex), bytes "b",
    bytearrays "y" (hex), complex "c", Counter "C", OrderedDict "O", defaultdict "D", deque "Q",
    NamedTuple "n", Fraction "F", Decimal "E", range "R", dict views "K" "V" "I", datetime's
    date, datetime, time, timedelta and timezone "T" (a subclass's as its base's, a test's
    marked with its class); anything else is refer(value) (a reference, or Abort). aliases {id:
    JSON text}: the objects sent as a mark the other side reads as its own (a call's k-th
    argument container {"a": k}, a kept one {"k": handle}), each alive meanwhile."""
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
        return aliases[id(value)]
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
    if kind is Dumped:
        return value
    module, name = kind.__module__, kind.__name__
    if module == "builtins" and name in VIEWS:
        return '{"%s":%s}' % (VIEWS[name], dump(list(value), refer, aliases))
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
    base = datetime_base(kind)  # (a subclass's: by its base's methods, marked with its class)
    if base is not None:
        state = (list(base.__reduce__(value)[1]) if base.__name__ in BY_ARGUMENTS
                 else base.isoformat(value))
        marked = kind is not base and kind.__module__ == "__main__"  # (a test's: of_class)
        return '{"T":[%s,%s%s]}' % (dump(base.__name__, None), dump(state, refer),
                                    "," + refer(kind, aliases) if marked else "")
    return refer(value, aliases)


def datetime_base(kind):
    """The type of datetime's (DATETIMES) that kind is or derives from, else None."""
    for found in kind.__mro__:
        if found.__module__ == "datetime" and found.__name__ in DATETIMES:
            return found
    return None


def of_class(value, kind):
    """value as an instance of kind where kind derives from value's type (a test's frozen clock,
    its stand-in), made by that type's own constructor from value's state (no code of kind's
    runs); else value, whatever kind is."""
    base = type(value)
    if issubclass(type(kind), type) and kind is not base and datetime_base(kind) is base:
        return base.__new__(kind, *base.__reduce__(value)[1])
    return value


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


def stand_in(base, name, on_class, on_instance):
    """The program's process's class for a test's frozen clock (frozen_class): a real subclass of
    the type of datetime's (its constructor, isinstance and inherited methods are datetime's, its
    instances values, marked with the test's class when they cross); the test's methods called in
    the test process (an instance method with the instance, as an instance of the test's class)."""
    def on(method):
        return lambda self, *args, **kwargs: method(self, *args, **kwargs)
    space = {key: staticmethod(method) for key, method in on_class.items()}
    space.update({key: on(method) for key, method in on_instance.items()}, __module__="__main__")
    return type(name, (unpatched("datetime", base),), space)


def with_pairs(text, pairs):
    """A dumped dict's text with more [key, value] pairs (JSON texts) in it."""
    if not pairs:
        return text
    return text[:-2] + ("," if text != '{"d":[]}' else "") + ",".join(pairs) + "]}"


BUFFERS = ("StringIO", "BytesIO")
PATTERN_METHODS = ("match", "search", "fullmatch", "findall", "finditer", "split", "sub", "subn")
FINDS = ("match", "search", "fullmatch")


def buffer_state(buffer):
    """[kind, value (None: closed), position] of an io.StringIO ("s") or io.BytesIO ("b")."""
    kind = "s" if type(buffer).__name__ == "StringIO" else "b"
    return [kind, None, 0] if buffer.closed else [kind, buffer.getvalue(), buffer.tell()]


def found_again(match):
    """How its pattern finds this re.Match again, with the same spans, pos and endpos: [one of
    FINDS, 0], or ["finditer", n] for the n-th match of finditer; None if none does."""
    pattern, args, regs = match.re, (match.string, match.pos, match.endpos), match.regs
    for how in FINDS:
        found = getattr(pattern, how)(*args)
        if found is not None and found.regs == regs:
            return [how, 0]
    for n, found in enumerate(pattern.finditer(*args)):
        if found.regs == regs:
            return ["finditer", n]
        if found.start() > match.start():
            break
    return None


def copied(value, refer):
    """The JSON text of a test's object that crosses as a copy (sandbox_copies.py's docstring
    lists how each is rebuilt), else None; raises ValueError for a re.Match its pattern does not
    find again."""
    kind = type(value)
    module, name = kind.__module__, kind.__name__
    if module == "functools" and name == "partial":
        return '{"P":[%s,%s,%s]}' % (dump(value.func, refer), dump(list(value.args), refer),
                                     dump(dict(value.keywords), refer))
    if module == "_io" and name in BUFFERS:
        return '{"B":%s}' % dump(buffer_state(value), refer)
    if module == "random" and name in ("Random", "SystemRandom"):
        return '{"U":%s}' % dump(value.getstate() if name == "Random" else None, refer)
    owner = getattr(value, "__self__", None)
    if module == "re" and name == "Pattern" or type(owner).__name__ == "Pattern" and (
            type(owner).__module__ == "re" and getattr(value, "__name__", "") in PATTERN_METHODS):
        pattern = value if name == "Pattern" else owner
        return '{"p":%s}' % dump([pattern.pattern, pattern.flags,
                                  None if name == "Pattern" else value.__name__], refer)
    if module == "re" and name == "Match":
        how = found_again(value)
        if how is None:
            raise ValueError("a re.Match its pattern does not find again")
        return '{"H":%s}' % dump([value.re.pattern, value.re.flags, value.string, value.pos,
                                  value.endpos, how], refer)
    return None


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
        if tag == "T" and len(item) in (2, 3) and item[0] in DATETIMES:
            kind = unpatched("datetime", item[0])
            value = kind(*item[1]) if item[0] in BY_ARGUMENTS else kind.fromisoformat(item[1])
            return value if len(item) == 2 else of_class(value, item[2])
    if kind is str:
        if tag == "i":
            return int(item, 16)
        if tag == "b" or tag == "y":
            return (bytes if tag == "b" else bytearray).fromhex(item)
        if tag == "E":
            return unpatched("decimal", "Decimal")(item)
    if tag in ("C", "O", "D", "Q"):
        made = unpatched("collections", COLLECTIONS[("C", "O", "D", "Q").index(tag)])
        if (tag == "C" or tag == "O") and kind is dict:
            return made(item)
        if tag == "D" and kind is list and len(item) == 2 and type(item[1]) is dict:
            return made(item[0], item[1])
        if tag == "Q" and kind is list and len(item) == 2 and type(item[0]) is list:
            return made(item[0], item[1])
    if tag == "n" and kind is list and len(item) == 3 and type(item[0]) is str and (
            type(item[1]) is list and len(item[1]) <= 256):
        key = (item[0], tuple(item[1]))
        if key not in NAMEDTUPLES:
            if len(NAMEDTUPLES) > 100:
                NAMEDTUPLES.clear()
            NAMEDTUPLES[key] = unpatched("collections", "namedtuple")(*key)
        return NAMEDTUPLES[key]._make(item[2])
    if tag == "F" and kind is list and len(item) == 2 and all(type(x) is int for x in item):
        return unpatched("fractions", "Fraction")(*item)
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


class Abort(BaseException):
    """The harness refused something (an argument it cannot send, a program object compared with a
    test value, the program's process gone): the test fails whatever it catches (the failure is
    noted in LINK["failed"], sandbox_link.py)."""


def describe(error):
    """'Name: message' of an exception (an answer's as the other process gave it)."""
    if type(error) is Abort:
        return str(error)
    for arg in getattr(error, "args", ()):  # (an object's text would ask the other process)
        if type(arg).__name__ in ("Remote", "TestObject"):
            return type(error).__name__ + (": <program object>" if type(arg).__name__ == "Remote"
                                           else ": <test object>")
    try:
        return getattr(error, "program_text", None) or type(error).__name__ + ": " + str(error)
    except BaseException:
        return type(error).__name__


class ProgramError(Exception):
    """The program's exception (or the end of its process), raised in the test process."""


def builtin_exception(name):
    """The builtin exception class of that name (SystemExit too: it crosses as itself), but
    StopIteration and StopAsyncIteration (a generator's end, the link's own)."""
    kind = getattr(builtins, name, None) if type(name) is str and name.isidentifier() else None
    if isinstance(kind, type) and issubclass(kind, BaseException) and not issubclass(
            kind, (StopIteration, StopAsyncIteration)):
        return kind
    return None


# the types whose instances cross as values (a subclass's as its base's, an exception as itself)
VALUE_TYPES = (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset,
               range, type(None), BaseException)
EXCEPTIONS = {}
# the exception classes the context declares, by name (test_side fills it in the test process: a
# program's exception of its module-level class of that name is made of the context's class there)
DECLARED = {}


def builtin_ancestor(kind, default=Exception):  # (bound before a program can replace builtins)
    """The nearest class in kind's ancestry that is a builtin (default where none is)."""
    return next((k for k in kind.__mro__ if getattr(builtins, k.__name__, None) is k), default)


def module_level(kind):
    """Whether kind is a class defined at the top of the program (or of the context)."""
    return kind.__module__ == "__main__" and kind.__qualname__ == kind.__name__


def made(kind, args):
    """kind(*args) as plain Python makes it where kind's own classes define no __new__ or
    __init__: by its nearest builtin ancestor's. A context's class is made so too, its code never
    run (its __init__ takes the parameters the program passed, not the args they became)."""
    builtin = builtin_ancestor(kind)
    error = builtin.__new__(kind, *args)
    builtin.__init__(error, *args)
    return error


def program_error(name, message, base="", args=None, declared=False, state=None):
    """The exception of that name (a context's class where `declared` says the program's is a
    module-level one and DECLARED has it; a builtin one but StopIteration; else a class of that
    name derived from `base`, its nearest builtin ancestor: a ValueError subclass is caught by
    `except ValueError`; else a ProgramError), made from its arguments where they crossed
    (KeyError.args is the key, a UnicodeDecodeError has its five), with its own public attributes
    (state: an InsufficientFunds's amount), described as the other process described it."""
    kind = declared is True and DECLARED.get(name) or builtin_exception(name)
    if kind is None and builtin_exception(base) and name.isidentifier():
        if (name, base) not in EXCEPTIONS:
            if len(EXCEPTIONS) > 100:
                EXCEPTIONS.clear()
            EXCEPTIONS[name, base] = type(name, (builtin_exception(base),), {
                "__module__": "program",
                "__str__": lambda self: getattr(self, "program_str", "")})
        kind = EXCEPTIONS[name, base]
    error = None
    if kind is not None and type(args) is tuple:
        try:
            error = made(kind, args)
        except Exception:
            pass
    if error is None:
        try:
            error = made(kind or ProgramError, (message,))
        except Exception:
            error = ProgramError(message)
    for key, value in state.items() if type(state) is dict else ():  # its own attributes
        if type(key) is str and not key.startswith("_") and not hasattr(type(error), key):
            object.__setattr__(error, key, value)  # (never its class's: args, errno, a method)
    error.program_text, error.program_str = name[:100] + ": " + message[:300], message
    return error


def raised(payload):
    """The exception an error payload ([name, message, base], with args and declared or not)
    describes; None if it is malformed."""
    if type(payload) is list and len(payload) in (3, 4, 5, 6) and all(
            type(p) is str for p in payload[:3]):
        return program_error(*payload)
    return None


def refuse(value, aliases=None):
    raise TypeError("not a value")


def error_payload(error):
    """[name, message, nearest builtin ancestor's name, its arguments (a tuple of values, or None
    where one is not a value), whether its class is a module-level class of __main__ (a class the
    context declares is one), its own public attributes that are values] of an exception."""
    kind = type(error)
    base = builtin_ancestor(kind).__name__
    args = getattr(error, "args", None)
    try:
        dump(args, refuse)
    except BaseException:
        args = None
    state = getattr(error, "__dict__", None)
    state = {key: value for key, value in (state.items() if type(state) is dict else ())
             if type(key) is str and not key.startswith(("_", "program_")) and sendable(value)}
    return [kind.__name__, describe(error).partition(": ")[2][:300], base,
            args if type(args) is tuple else None, module_level(kind), state]


def sendable(value):
    """Whether value is a value (no reference: dump needs no refer)."""
    try:
        dump(value, refuse)
        return True
    except BaseException:
        return False
