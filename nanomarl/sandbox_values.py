"""sandbox_values.py: what crosses between the two processes of a sandboxed run (sandbox.py's
docstring has the threat model; sandbox_link.py carries it).

Executed inside the sandbox as the module `sandbox_values` (sandbox.py's BOOT). A value travels as
JSON of exact types, tagged where JSON has none (dump; Decoder and hook read it back, chunked so
that the alarm can interrupt); anything else travels as a reference, made by the `refer` and read by
the `resolve` each side passes in, or as a copy (sandbox_copies.py: a call's arguments, written back
after it; the test's objects of the standard library that hold no test code, a partial, an io
buffer, a Random, a compiled pattern or a match: their JSON text, sandbox_copies.py:copied). A
NamedTuple crosses as the context's class of its name where its fields are that class's (CONTEXT),
else as a namedtuple of its name and fields. An exception travels as [name, message, nearest builtin
ancestor, arguments, whether its class is the context's class of its name (same: one the program
repeats), its own attributes, its class's module, the test's exception it is] (error_payload) and is
raised on the other side as an exception of that name and those arguments (program_error): of the
builtin class only where the program's is that builtin, of the context's class in the test process
where the program's is the same (a fingerprint: same), of a standard library module's class where it
is that module's (sandbox_patches.py:stdlib_error), else of a class of that name derived from its
nearest builtin ancestor; one a test's callback raised is that very object when it comes back
(RAISED). A test's patch of a module attribute crosses with each request (sandbox_patches.py; the
value dumped once, when it is checked: Dumped). A test's class deriving from a type of datetime's (a
frozen clock) is a class of the program's process there: a real subclass of that type whose public
methods are the test's (frozen_class; sandbox_patches.py:stand_in).

The tags, an index (each is described where it is made). A value's: dump. A reference's or a mark's,
read by each side's resolve: {"r": n} a program object, {"g": n} a program's generator or iterator
(a stream), {"x": n} a test object, {"X": [n, class name, own == or hash]} one whose class matters
there, {"M": [module, name]} a module or a function of one (test_refer's), a builtin class or
function (the program's: sandbox_patches.py:by_name), {"Z": [...]} a test's frozen clock
(frozen_class), {"k": handle} a kept container, {"a": k} the k-th argument container of the call
answered, {"A": k} and {"N": [handle, value]} a test object's container lent (sandbox_lending.py),
"P" "B" "U" "p" "H" a copy (sandbox_copies.py:copied), "o" "S" "W" an instance of a class the
context declares (sandbox_verdicts.py:rebuilt), {"G": ...} a member of an Enum it declares,
{"e": payload} an exception the program returned. The keys of a message's extra: with a request of
the test process, what the program's process takes on (sandbox_verdicts.py:mirrored): "s" the time
left, "f" the handles released, "l" the recursion limit, "o" and "e" output redirected, "b"
builtins, "p" module attributes (one that is the k-th argument container: [module, attribute, null,
k]), "i" sys.stdin, "c" warnings caught, "F" (the first) the fingerprints of the classes the context
declares (same); in the program's answer, "o" and "e" the output, "i" sys.stdin's contents, "c" the
warnings; either way "k" the kept containers' news ([handle, contents], or [handle, start, new
items]: sandbox_copies.py:news), "d" and "z" (the program's) the handles forgotten and at rest, "D"
(the test's) those at rest it forgot, "n" (its answer) the argument containers kept from now on, "w"
(an answer) the argument containers changed, "#" (a request) how many containers its arguments hold
and "m" those passed twice (sandbox_link.py:told, taken, ask); in an answer to a test's callback,
"b" and "p" the patches in force (sandbox_verdicts.py:served)."""
import _json, builtins

from sandbox_patches import stdlib_error, unpatched  # sandbox.py's BOOT


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
        name += "" if name not in PRINTS or same(kind) else "_"  # (redefined: not the context's)
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


def with_pairs(text, pairs):
    """A dumped dict's text with more [key, value] pairs (JSON texts) in it."""
    if not pairs:
        return text
    return text[:-2] + ("," if text != '{"d":[]}' else "") + ",".join(pairs) + "]}"


NAMEDTUPLES = {}  # the generic NamedTuple classes hook makes, by name and fields


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
        key, found = (item[0], tuple(item[1])), CONTEXT[0](item[0])  # (the context's class)
        if isinstance(found, type) and issubclass(found, tuple) and type(item[2]) is list and (
                getattr(found, "_fields", None) == key[1] and len(item[2]) == len(key[1])):
            return tuple.__new__(found, item[2])
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
    return error_class(getattr(builtins, name, None) if type(name) is str and name.isidentifier()
                       else None)


def error_class(kind):
    """kind if it is an exception class, but StopIteration and StopAsyncIteration; else None."""
    if isinstance(kind, type) and issubclass(kind, BaseException) and not issubclass(
            kind, (StopIteration, StopAsyncIteration)):
        return kind
    return None


# the types whose instances cross as values (a subclass's as its base's, an exception as itself)
VALUE_TYPES = (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset,
               range, type(None), BaseException)
EXCEPTIONS = {}
RAISED, RAISES = {}, [0]  # the test process's exceptions its callbacks raised, by handle; the next
# the classes the context declares, by name (sandbox_verdicts.py:test_side fills it in the test
# process), and in the program's process their fingerprints (PRINTS: the test process's first
# request brings them): a program's class that is the same (same) crosses as the context's class
DECLARED, PRINTS = {}, {}
CONTEXT = [DECLARED.get]  # a declared name's class (the program's own in its process): hook's "n"


def builtin_ancestor(kind, default=Exception):  # (bound before a program can replace builtins)
    """The nearest class in kind's ancestry that is a builtin (default where none is)."""
    return next((k for k in kind.__mro__ if getattr(builtins, k.__name__, None) is k), default)


def module_level(kind):
    """Whether kind is a class defined at the top of the program (or of the context)."""
    return kind.__module__ == "__main__" and kind.__qualname__ == kind.__name__


def same(kind):
    """Whether a program's class is the context's class of its name as plain Python sees it (one
    the program repeats; never one it redefines otherwise): a module-level class of the same
    ancestry whose own attributes include the context's class's, each alike; any more it defines
    are names the context's class lacks (a helper method), or its text (__repr__, __str__): the
    test process never runs them, and a test reading them fails there as it could in plain Python.
    (A forged fingerprint only claims the context's class.)"""
    context, mine = PRINTS.get(kind.__name__), module_level(kind) and fingerprint(kind)
    if type(context) is not list or len(context) != 3 or not mine or mine[0] != context[0]:
        return False
    own, names = context[1], context[2]
    return type(own) is dict and type(names) is list and all(
        mine[1].get(key) == value for key, value in own.items()) and all(
        key in own or key in TEXT or key not in names for key in mine[1])


def fingerprint(kind):
    """Numbers the same for classes defined alike, whatever their docstrings and lines: [the hash
    of its metaclass's name and, for each class of its ancestry, its module and name and, for one
    of __main__'s above it, the shape of what its own __dict__ holds; {name: the hash of its
    shape} of its own __dict__; the names it has (dir)], None where they cannot be taken."""
    try:
        return [hash((type(kind).__qualname__, *[
            (k.__module__, k.__qualname__, k.__module__ == "__main__" and shape(
                [item for item in vars(k).items() if item[0] not in SKIPPED]))
            for k in kind.__mro__[1:]])),
            {key: hash(shape(value)) for key, value in vars(kind).items() if key not in SKIPPED},
            sorted(dir(kind))]
    except Exception:
        return None


TEXT = ("__repr__", "__str__")
SKIPPED = ("__doc__", "__module__", "__qualname__", "__dict__", "__weakref__", "__firstlineno__")
CODES = {}  # a code object's shape, by id: {id: (code object, shape)} (a code object never changes)


def shape(value, depth=0):
    """What a class's attribute is, for fingerprint: a function by its code, defaults and closure;
    a static or class method or a property by its functions; a code object by the hash of its
    names and instructions, each constant it loads by its shape (a docstring, never loaded,
    counts for nothing; line numbers are not in them); a value of a builtin type by itself (a
    container by its items'); a class by its module and name; anything else by its type's."""
    kind = type(value)
    if depth > 20:
        raise RecursionError("too deep")
    if kind is type(shape):
        value = [value.__code__, value.__defaults__, value.__kwdefaults__,
                 [cell.cell_contents for cell in value.__closure__ or ()]]
    elif kind is staticmethod or kind is classmethod or kind is property:
        value = [value.__func__] if kind is not property else [value.fget, value.fset, value.fdel]
    if type(value) in (list, tuple, set, frozenset, dict):
        items = value.items() if type(value) is dict else value
        if len(items) > 1000:
            return kind.__name__, len(items)
        found = [shape(item, depth + 1) for item in items]
        return kind.__name__, frozenset(found) if kind in (set, frozenset) else tuple(found)
    if kind is type(shape.__code__) and id(value) not in CODES:
        if len(CODES) > 1000:
            CODES.clear()
        ops, loads, arg, steps = value.co_code, unpatched("opcode", "hasconst"), 0, []
        extended = unpatched("opcode", "EXTENDED_ARG")  # (its argument: the next one's high bits)
        for i in range(0, len(ops), 2):
            arg = arg << 8 | ops[i + 1]
            if ops[i] != extended:
                steps.append((ops[i], shape(value.co_consts[arg]) if ops[i] in loads else arg))
                arg = 0
        CODES[id(value)] = value, hash((tuple(steps), value.co_names, value.co_varnames,
                                        value.co_argcount, value.co_kwonlyargcount, value.co_flags))
    if kind is type(shape.__code__):
        return CODES[id(value)][1]
    if kind in (int, float, complex, str, bytes, bool, type(None)):
        return kind.__name__, value
    owner = value if issubclass(kind, type) else kind
    return owner.__module__, owner.__qualname__


def made(kind, args):
    """kind(*args) as plain Python makes it where kind's own classes define no __new__ or
    __init__: by its nearest builtin ancestor's. A context's class is made so too, its code never
    run (its __init__ takes the parameters the program passed, not the args they became)."""
    builtin = builtin_ancestor(kind)
    error = builtin.__new__(kind, *args)
    builtin.__init__(error, *args)
    return error


def program_error(name, message, base="", args=None, declared=False, state=None, module="",
                  handle=None):
    """The exception of that name (a context's class where `declared` says the program's is the
    same (same) and DECLARED has it; the builtin one, but StopIteration, where it is its own
    nearest builtin ancestor, `base`: the program's class is that builtin; that of a module of
    STDLIB's where the class is that module's (sandbox_patches.py:stdlib_error); else a class of
    that name derived from `base`: a ValueError subclass is caught by `except ValueError`, a
    program's own KeyError(Exception) by no `except LookupError`; else a ProgramError), made from
    its arguments where they crossed (KeyError.args is the key, a UnicodeDecodeError has its
    five), with its own public attributes (state: an InsufficientFunds's amount), described as the
    other process described it; `handle`: the test's exception it is, kept on it (raised)."""
    kind = (error_class(declared is True and DECLARED.get(name))
            or name == base and builtin_exception(name) or stdlib_error(module, name) or None)
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
    if type(handle) is int:  # (the test's exception: the program's re-raise of it is the test's)
        error.program_handle = handle
    return error


def raised(payload):
    """The exception an error payload (error_payload's; [name, message, base] at least)
    describes: in the test process, one its callback raised (a handle of RAISED's) is that very
    object, whatever the rest says; None if it is malformed."""
    if type(payload) is list and 3 <= len(payload) <= 8 and all(
            type(p) is str for p in payload[:3]):
        if len(payload) == 8 and type(payload[7]) is int and payload[7] in RAISED:
            return RAISED[payload[7]]
        return program_error(*payload)
    return None


def refuse(value, aliases=None):
    raise TypeError("not a value")


def error_payload(error, keep=False):
    """[name, message, nearest builtin ancestor's name, its arguments (a tuple of values, or None
    where one is not a value), whether its class is the context's class of its name (same), its
    own public attributes that are values, its class's module, the handle of the test's exception
    it is (keep: a test's callback raised it, RAISED keeps it; else program_error's, or None)]."""
    kind, handle = type(error), getattr(error, "program_handle", None)
    if keep and error_class(kind):  # (never a StopIteration: it would end a test's loop)
        if len(RAISED) > 256:
            RAISED.clear()
        RAISED[RAISES[0]], handle, RAISES[0] = error, RAISES[0], RAISES[0] + 1
    base = builtin_ancestor(kind).__name__
    args = getattr(error, "args", None)
    state = getattr(error, "__dict__", None)
    state = {key: value for key, value in (state.items() if type(state) is dict else ())
             if type(key) is str and not key.startswith(("_", "program_")) and sendable(value)}
    return [kind.__name__, describe(error).partition(": ")[2][:300], base,
            args if type(args) is tuple and sendable(args) else None, same(kind), state,
            kind.__module__, handle if type(handle) is int else None]


def sendable(value):
    """Whether value is a value (no reference: dump needs no refer)."""
    try:
        dump(value, refuse)
        return True
    except BaseException:
        return False
