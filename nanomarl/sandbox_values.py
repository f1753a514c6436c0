"""sandbox_values.py: what crosses between the two processes of a sandboxed run (sandbox.py's
docstring has the threat model; sandbox_link.py carries it).

Executed inside the sandbox as the module `sandbox_values` (sandbox.py's BOOT). A value travels as
JSON of exact types, tagged where JSON has none (dump; Decoder and hook read it back, refusing
colliding keys: filled); anything else travels as a reference, made by the `refer` and read by the
`resolve` each side passes in, or as a copy (sandbox_copies.py: a call's arguments, written back
after it; the test's objects of the standard library that hold no test code, a partial, an io
buffer, a Random, a compiled pattern or a match: their JSON text, sandbox_copies.py:copied). A
NamedTuple crosses as the context's class of its name where its fields are that class's (CONTEXT),
or, where its class is the one the sending side's hook made of the receiving side's (marked), as
that class (TUPLES: a test's Q comes back a Q; a program's own is none of the test's), else as a
namedtuple of its name and fields; but the program's own with methods of its own (own_ways) is a
program object that keeps its tuple's value (sandbox_remote.py:Valued). An exception travels as
[name, message, nearest builtin ancestor, arguments, whether its class is the context's class of its
name (same: one the program repeats), its own attributes, its class's module, the other side's
exception it is, its __cause__ and __context__, its class] (error_payload, chain) and is raised on
the other side as an exception of that class (one of a side's own crosses as one class:
sandbox_errors.py) and those arguments (program_error; a StopIteration only where the test called
the program directly: sandbox_errors.py:direct; else the harness refuses it: REFUSE; an OSError's
errno picks no subclass: made), else of that name: of the builtin class only where the program's is
that builtin, of the context's class in the test process where the program's is the same (a
fingerprint: same), of a standard library module's class where it is that module's own
(sandbox_stdlib.py:own_module), else of a class of that name derived from its nearest builtin
ancestor; one a side sent is that very object when it comes back (RAISED, while it holds it). A
test's patch of a module attribute crosses with each request (sandbox_patches.py; the value dumped
once, when it is checked: Dumped). A test's class deriving from a type of datetime's (a frozen
clock) is a class of the program's process there: a real subclass of that type whose public methods
are the test's (sandbox_verdicts.py:frozen_class; sandbox_patches.py:stand_in).

The tags, an index (each is described where it is made). A value's: dump. A reference's or a mark's,
read by each side's resolve: {"r": [n, kind, traits, names]} a program object (sandbox_remote.py; a
Valued's with its base after them: sandbox_bases.py:valued), {"r": n} one sent back, {"x": n} a
test object sent back, {"X": [n, class name, own == or hash, how its class looks:
sandbox_proxies.py:looks]} one sent to the program, {"M": [module, name]} a module or a
function of one (test_refer's), a builtin class or function or math's (the program's:
sandbox_patches.py:by_name), {"Z": [...]} a test's frozen clock (sandbox_verdicts.py:frozen_class),
{"k": handle} a kept container, {"a": k} the k-th argument container of the call answered, {"g": k}
its k-th leaf argument or tuple (sandbox_proxies.py:given), {"A": k} and {"N": [handle, value]} a
test object's container lent, or, its handle from 0 up, a program's own (sandbox_lending.py), "P"
"B" "U" "p" "H" "j" "u" a copy (sandbox_copies.py:copied), "o" "S" "W" an instance of a class the
context declares (sandbox_verdicts.py:rebuilt), {"G": ...} a member of an Enum it declares, {"e":
payload} an exception (one side's argument or value), {"h": [...]} an exception class of one
side's own (sandbox_errors.py:crossing). The keys of a message's extra:
with a request of the test process, what the program's process takes on
(sandbox_verdicts.py:mirrored): "s" the time left, "f" the handles released, "l" the recursion
limit, "o" and "e" output redirected, "b" builtins, "p" module attributes (one that is the k-th
argument container: [module, attribute, null, k]), "i" sys.stdin, "c" warnings caught, "g" log
records noted (the test's logger levels: sandbox_caught.py:watched), "F" (the first) the
fingerprints of the classes the context declares (same); in the program's answer, "o" and "e" the
output, "i" sys.stdin's contents, "c" the warnings, "g" the log records, "u" the handles whose
release may now run code (sandbox_proxies.py:urgent); either way "C" this side's decimal context
where it changed (sandbox_link.py:state_told), "k" the kept containers' news ([handle, contents] or
[handle, start, new items, a dict's pairs flat]: sandbox_copies.py:news), "d" and "z" (the
program's) those forgotten and at rest, "D" the test's, "n" (its answer) the argument containers
kept from now on, "w" (an answer) the argument containers changed, "#" (a request) how many
containers its arguments hold, "m" those passed twice and "t" how many leaves and tuples
(sandbox_link.py:told, taken, ask); in an answer to a test's callback, "b" and "p" the patches in
force (sandbox_verdicts.py:served)."""
import _json, builtins, sys
from gc import get_referents

from sandbox_layers import crowded  # sandbox.py's BOOT
from sandbox_patches import (DATETIMES, PRINTS, datetime_base, of_class, own_dated, same,
                             stdlib_error, unpatched)  # sandbox.py's BOOT
from sandbox_stdlib import (UNKEPT_VIEW, WALK, datetime_made, datetime_state, held_elsewhere,
                            named_stock, nan_made, nan_text, own_module, stdlib_made, stdlib_state)


BIG = 1 << 8000  # ints from here on travel as hex (decimal text of over 4300 digits is refused)
COLLECTIONS = ("Counter", "OrderedDict", "defaultdict", "deque")
VIEWS = {"dict_keys": "K", "dict_values": "V", "dict_items": "I", "mappingproxy": "q"}
VIEWED = {"K": dict.keys, "V": dict.values, "I": dict.items, "q": type(type.__dict__)}
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
    """value as JSON text: None, bool, float (a NaN "nan": sandbox_stdlib.py:nan_text), str, small
    ints and lists as JSON; tuples "t", sets "s", frozensets "f", dicts "d" (a list of pairs),
    big ints "i" (hex), bytes "b", bytearrays "y" (hex), complex "c", Counter "C", OrderedDict
    "O", defaultdict "D", deque "Q", NamedTuple "n" (marked true where hook made its class),
    Fraction "F", Decimal "E", range "R", dict views "K" "V" "I" and a mappingproxy of a dict "q"
    (their items, its dict: the test's a copy; the program's of a dict something else holds: that
    dict's mark, a view of the test's argument or of a kept dict there; refused in an answer's value
    where the walk of that value never met it: sandbox_stdlib.py:held_elsewhere), datetime's
    date, datetime, time, timedelta and timezone "T" (a subclass's as its base's, a test's marked
    with its class, the program's own with names of its own a reference: own_dated;
    sandbox_stdlib.py:datetime_state), the standard library's pathlib paths "L", slice "l",
    ZoneInfo "J", Enum members "Y", array.array "v", time.struct_time "z", the program's
    memoryview of bytes "m" and ChainMap "w" (sandbox_stdlib.py:stdlib_state); anything else is
    refer(value) (a reference, or Abort).
    aliases {id: JSON text}: the objects sent as a mark the other side reads as its own (a call's
    k-th argument container {"a": k}, its k-th leaf argument or tuple {"g": k}, a kept one {"k":
    handle}), each alive meanwhile."""
    kind = type(value)
    if aliases and id(value) in aliases:  # (a mark: a leaf too, a call's argument: given)
        return aliases[id(value)]
    if kind is str:
        return _json.encode_basestring_ascii(value)
    if kind is int:
        return repr(value) if -BIG < value < BIG else '{"i":"%x"}' % value
    if value is None or kind is bool:
        return "null" if value is None else "true" if value else "false"
    if kind is float:  # (a NaN with its sign and payload, each one its own object: nan_text)
        return nan_text(value) if value != value else {"inf": "Infinity", "-inf": "-Infinity"}.get(
            text := repr(value), text)
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
    if (found := stdlib_state(value, kind, REFUSE[0] is not None, aliases)) is not None:
        return '{"%s":%s}' % (found[0], dump(found[1], refer, aliases))
    module, name = kind.__module__, kind.__name__
    if module == "builtins" and name in VIEWS and (name != "mappingproxy" or type(
            get_referents(value)[0]) is dict):  # (a mappingproxy of a dict: the test's a copy)
        owner, proxy = id(get_referents(value)[0]), name == "mappingproxy"  # (no reference kept)
        mark = aliases.get(owner) if REFUSE[0] is None and aliases else None
        if mark is None and aliases is not None and aliases is WALK["aliases"] and owner not in (
                WALK["met"]) and REFUSE[0] is None and held_elsewhere(value):  # (no walk met it)
            raise ValueError(UNKEPT_VIEW)
        return '{"%s":%s}' % (VIEWS[name], mark or dump(get_referents(value)[0] if proxy else list(
            value), refer, aliases))
    if module == "collections" and name in COLLECTIONS:  # (a deque's maxlen, a factory)
        state = [list(value), value.maxlen] if name == "deque" else [
            value.default_factory, dict(value)] if name == "defaultdict" else dict(value)
        return '{"%s":%s}' % ("CODQ"[COLLECTIONS.index(name)], dump(state, refer, aliases))
    if issubclass(kind, tuple) and type(getattr(kind, "_fields", None)) is tuple:  # NamedTuple
        if REFUSE[0] is None and module == "__main__" and not same(kind) and own_ways(kind):
            return refer(value, aliases)  # (the program's, with methods: sandbox_remote.py:Valued)
        named = all(type(field) is str for field in kind._fields)  # (a class hook's "n" made)
        theirs = named and NAMEDTUPLES.get((name, kind._fields)) is kind
        name += "" if name not in PRINTS or same(kind) else "_"  # (redefined: not the context's)
        if module == "__main__" and named:
            if len(TUPLES) > 100:  # (this side's own class of the name and fields: hook's "n")
                TUPLES.clear()
            TUPLES[name, kind._fields] = kind
        return ('{"n":[' + dump(name, refer) + "," + dump(list(kind._fields), refer) + ","
                + dump(list(value), refer, aliases) + (",true]}" if theirs else "]}"))
    if module == "fractions" and name == "Fraction":
        return '{"F":[' + dump(value.numerator, refer) + "," + dump(value.denominator, refer) + "]}"
    if module == "decimal" and name == "Decimal":
        return '{"E":' + dump(str(value), refer) + "}"
    base = datetime_base(kind)  # (a subclass's: by its base's methods, marked with its class)
    if base is not None and REFUSE[0] is None and kind is not base and own_dated(kind, base):
        return refer(value, aliases)  # (the program's, with names: sandbox_remote.py:Valued)
    if base is not None:
        state = (list(base.__reduce__(value)[1]) if base.__name__ in BY_ARGUMENTS
                 else datetime_state(base, value))
        marked = kind is not base and kind.__module__ == "__main__"  # (a test's: of_class)
        return '{"T":[%s,%s%s]}' % (dump(base.__name__, None), dump(state, refer),
                                    "," + refer(kind, aliases) if marked else "")
    return refer(value, aliases)


def own_ways(kind):
    """Whether a NamedTuple class of the program's has what a namedtuple of its fields lacks (a
    method, a property, a constant, its own __repr__): its instances then cross as program
    objects that keep their tuple's value, not as a namedtuple of that name and fields."""
    try:
        made, stock_code = named_stock()
        fields = set(kind._fields)
        for owner in kind.__mro__[:kind.__mro__.index(tuple)]:
            for name, found in vars(owner).items():
                if name not in made and name not in fields or name in stock_code and getattr(
                        found, "__code__", None) is not stock_code[name]:
                    return True
    except Exception:
        return False
    return False


NAMEDTUPLES = {}  # the generic NamedTuple classes hook makes, by name and fields
TUPLES = {}  # the NamedTuple classes of this side's own (a test's, the program's) sent, likewise


def filled(out, items, pairs=False):
    """out (a set or dict) filled with items (pairs: a dict's), refused in the test process where
    its keys share a hash (sandbox_layers.py:crowded): the harness's refusal, the test fails."""
    if REFUSE[0] is not None and crowded(items, pairs):
        raise REFUSE[0](ProgramError("the harness refused: a set or dict whose keys share a hash"))
    out.update(items)
    return out


def hook(tagged, resolve):
    """The JSON decoder's object hook: a tagged value (see dump), or resolve(tag, payload) for a
    reference; ValueError for anything else."""
    if len(tagged) != 1:
        raise ValueError("malformed value")
    (tag, item), = tagged.items()
    kind = type(item)
    if tag == "nan":
        return nan_made(item)
    if tag in VIEWED and issubclass(kind, dict):  # (a view of that very dict: dump)
        return VIEWED[tag](item)
    if kind is list:
        if tag == "t":
            return tuple(item)
        if tag == "s" or tag == "f":
            return filled(set(), item) if tag == "s" else frozenset(filled(set(), item))
        if tag == "d":
            return filled({}, item, True)
        if tag == "c" and len(item) == 2:
            return complex(*[float(x) for x in item])
        if tag == "R" and len(item) == 3 and all(type(x) is int for x in item):
            return range(*item)
        if tag == "K" or tag == "I":
            pairs = item if tag == "I" else [(k, None) for k in item]
            return (filled({}, pairs, True).keys if tag == "K" else filled({}, pairs, True).items)()
        if tag == "V":
            return dict(enumerate(item)).values()
        if tag == "T" and len(item) in (2, 3) and item[0] in DATETIMES:
            kind = unpatched("datetime", item[0])
            value = kind(*item[1]) if item[0] in BY_ARGUMENTS else datetime_made(kind, item[1])
            return value if len(item) == 2 else of_class(value, item[2])
    if kind is str:
        if tag == "i":
            return int(item, 16)
        if tag == "b" or tag == "y":
            return (bytes if tag == "b" else bytearray).fromhex(item)
        if tag == "E":
            return unpatched("decimal", "Decimal")(item)
    if tag in ("C", "O", "D", "Q"):
        made = unpatched("collections", COLLECTIONS["CODQ".index(tag)])
        if (tag == "C" or tag == "O") and kind is dict:
            return made(item)
        if tag == "D" and kind is list and len(item) == 2 and type(item[1]) is dict:
            return made(item[0], item[1])
        if tag == "Q" and kind is list and len(item) == 2 and type(item[0]) is list:
            return made(item[0], item[1])
    if tag == "n" and kind is list and len(item) in (3, 4) and type(item[0]) is str and (
            type(item[1]) is list and len(item[1]) <= 256 and type(item[2]) is list
            and len(item[2]) == len(item[1]) and all(type(field) is str for field in item[1])):
        key, found = (item[0], tuple(item[1])), CONTEXT[0](item[0])  # (the context's class)
        if not (isinstance(found, type) and issubclass(found, tuple)
                and getattr(found, "_fields", None) == key[1]):
            found = len(item) == 4 and item[3] is True and TUPLES.get(key) or None  # (marked)
        if found is not None:
            return tuple.__new__(found, item[2])
        if key not in NAMEDTUPLES:
            if len(NAMEDTUPLES) > 100:
                NAMEDTUPLES.clear()
            NAMEDTUPLES[key] = unpatched("collections", "namedtuple")(*key)
        return NAMEDTUPLES[key]._make(item[2])
    if tag == "F" and kind is list and len(item) == 2 and all(type(x) is int for x in item):
        return unpatched("fractions", "Fraction")(*item)
    return stdlib_made(tag, item, REFUSE[0] is None, resolve)  # (the program's process: imports)


class Decoder:
    """JSON text -> values (json.loads with `object_hook`, on json's own C scanner)."""
    strict, object_pairs_hook, parse_float, parse_int = True, None, float, int
    parse_constant = float  # ("NaN", "Infinity", "-Infinity": a fresh float each)

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


DESCRIBED = [lambda error: type(error).__name__]  # (sandbox_errors.py:described sets it)


def describe(error):
    """'Name: message' of an exception (an answer's as the other process gave it), read by
    BaseException's own slots: no code of the program's runs (sandbox_errors.py:described)."""
    return str(error) if type(error) is Abort else DESCRIBED[0](error)


class ProgramError(Exception):
    """The program's exception (or the end of its process), raised in the test process."""


def error_class(kind, stop=False):
    """kind (or the builtin of that name) if it is an exception class (SystemExit too: it crosses
    as itself), but StopIteration (a generator's end, the link's own; unless `stop`: raised's) and
    StopAsyncIteration; else None."""
    if type(kind) is str:
        kind = getattr(builtins, kind, None) if kind.isidentifier() else None
    if isinstance(kind, type) and issubclass(kind, BaseException) and not issubclass(
            kind, StopAsyncIteration) and (stop is True or not issubclass(kind, StopIteration)):
        return kind
    return None


# the types whose instances cross as values (a subclass's as its base's, an exception as itself)
VALUE_TYPES = (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset,
               range, type(None), BaseException)
EXCEPTIONS, CLASS_TEXT = {}, [lambda kind: None]  # (sandbox_errors.py:class_text sets it)
RAISED, RAISES = {}, [-1, -1, 64]  # this side's exceptions sent, by number; the next, step, most
# the classes the context declares, by name (sandbox_verdicts.py:test_side fills it in the test
# process): a program's class that is the same (sandbox_patches.py:same) crosses as the context's
DECLARED = {}
CONTEXT = [DECLARED.get]  # a declared name's class (the program's own in its process): hook's "n"
REFUSE = [None]  # the test process's sandbox_link.py:abort (raised; none in the program's process)


def builtin_ancestor(kind, default=Exception):  # (bound before a program can replace builtins)
    """The nearest class in kind's ancestry that is a builtin (default where none is)."""
    return next((k for k in kind.__mro__ if getattr(builtins, k.__name__, None) is k), default)


def made(kind, args):
    """kind(*args) as plain Python makes it where kind's own classes define no __new__ or
    __init__: by its nearest builtin ancestor's, of that very class (an OSError's errno picks no
    subclass). A context's class is made so too, its code never run (its __init__ takes the
    parameters the program passed, not the args they became)."""
    builtin = builtin_ancestor(kind)
    error = builtin.__new__(kind, *args)
    builtin.__init__(error, *args)
    if type(error) is not kind:  # (OSError's __new__ picks a subclass by errno: never here)
        parsed, error = error, builtin.__new__(kind)
        for key in ("args", "errno", "strerror", "filename", "filename2"):
            setattr(error, key, getattr(parsed, key))
    return error


def program_error(name, message, base="", args=None, declared=False, state=None, module="",
                  handle=None, stop=False, known=None):
    """The exception of its class (`known`: sandbox_errors.py:class_of's, but a StopIteration's
    unless `stop`), else of that name (a context's class where `declared` says the program's is the
    same (same) and DECLARED has it; the builtin one, but StopIteration (unless `stop`), where it is
    its own nearest builtin ancestor, `base`, of module builtins: the program's class is that
    builtin; that of a module of STDLIB's where the class is that module's own (`module` is sent
    so only: sandbox_stdlib.py:own_module; sandbox_patches.py:stdlib_error); else a class of
    that name derived from `base`: a ValueError subclass is caught by `except ValueError`, a
    program's own KeyError(Exception) or OSError(OSError) by no `except LookupError` or `except
    FileNotFoundError`; else a ProgramError), made from its arguments where they crossed
    (KeyError.args is the key, a UnicodeDecodeError has its five), with its own public attributes
    (state: an InsufficientFunds's amount), described as the other process described it;
    `handle`: the other side's number of it, kept on it (raised)."""
    kind = (issubclass(type(known), type) and error_class(known, stop)
            or error_class(declared is True and DECLARED.get(name), stop)
            or name == base and module in ("builtins", "") and error_class(name, stop)
            or stdlib_error(module, name) or None)
    if kind is None and error_class(base, stop) and name.isidentifier():
        if (name, base) not in EXCEPTIONS:
            if len(EXCEPTIONS) > 100:
                EXCEPTIONS.clear()
            EXCEPTIONS[name, base] = type(name, (error_class(base, stop),), {
                "__module__": "program",
                "__str__": lambda self: getattr(self, "program_str", "")})
        kind = EXCEPTIONS[name, base]
    error = ProgramError(message)  # (where neither its arguments nor its message make it)
    for tried in ([args] if kind is not None and type(args) is tuple else []) + [(message,)]:
        try:
            error = made(kind or ProgramError, tried)
            break
        except Exception:
            pass
    for key, value in state.items() if type(state) is dict else ():  # its own attributes
        if type(key) is str and (key == "__notes__" or not key.startswith("_")) and not hasattr(
                type(error), key):
            object.__setattr__(error, key, value)  # (never its class's: args, errno, a method)
    error.program_text, error.program_str = name[:100] + ": " + message[:300], message
    if type(handle) is int:  # (the test's exception: the program's re-raise of it is the test's)
        error.program_handle = handle
    return error


def raised(payload, stop=None, depth=0):
    """The exception an error payload (error_payload's; [name, message, base] at least)
    describes: one this side sent (a number of RAISED's) is that very object, whatever the rest
    says; a StopIteration only where stop() says so (the test called the program directly:
    sandbox_errors.py:direct) or it is a link of a chain (stop True: no loop ever sees it
    raised), else the harness refuses it there (REFUSE: an Abort, the test fails whatever it
    catches); a group with its exceptions made so; with the __cause__ and __context__ that
    crossed with it, down to DEPTH levels, each made as it is; None if it is malformed."""
    if type(payload) is not list or not 3 <= len(payload) <= 10 or not all(
            type(p) is str for p in payload[:3]):
        return None
    if len(payload) >= 8 and type(payload[7]) is int and payload[7] in RAISED:
        return RAISED[payload[7]]
    try:  # (a StopIteration only where stop says so; a stop that fails says no)
        stop = payload[2] == "StopIteration" and (stop is True or stop is not None and stop())
    except Exception:
        stop = False
    group = payload[3] if len(payload) > 3 and payload[2].endswith("ExceptionGroup") else None
    if type(group) is tuple and len(group) == 2 and type(group[1]) is list and depth < DEPTH:
        payload[3] = (group[0], [raised(p, True, depth + 1) for p in group[1][:1000]])
    error = program_error(*payload[:8], stop=stop is True, known=payload[9:] and payload[9])
    if payload[2] == "StopIteration" and stop is not True and REFUSE[0] is not None:
        raise REFUSE[0](error)  # (no `except` of the test's catches it)
    links = payload[8] if len(payload) >= 9 and depth < DEPTH else None
    if type(links) is list and len(links) == 3:  # (set as the exception's own: no class's code)
        cause, context = [raised(link, True, depth + 1) for link in links[:2]]
        object.__setattr__(error, "__cause__", cause)
        object.__setattr__(error, "__context__", cause if links[1] is True else context)
        object.__setattr__(error, "__suppress_context__", links[2] is True)
    return error


def error_payload(error, keep=False, depth=0):
    """[name, message, nearest builtin ancestor's name, its arguments (a tuple of values, or None
    where one is not a value; an OSError's with its file names, as OSError(errno, strerror,
    filename, None, filename2) makes it again; a group's exceptions as their payloads), whether
    its class is the context's class of its name (same), its own public attributes and notes that
    are values, its class's module where it is that module's own (sandbox_stdlib.py:own_module;
    else None), the number of the exception it is (the other side's, program_error's, where it
    came from there; else with keep this side's, RAISED keeping it: the test's from 0 up, the
    program's from -1 down, one object one number while it holds it, its last RAISES[2] sent; or
    None), its links (chain), its class (sandbox_errors.py:class_text)], read by BaseException's
    and OSError's own slots (no __getattr__ or __getattribute__ of the program's runs; its
    message: describe)."""
    kind, slot, files = type(error), vars(BaseException), vars(OSError)
    own = slot["__dict__"].__get__(error)
    handle = own.get("program_handle")
    if keep and handle is None and error_class(kind):  # (no StopIteration: it ends a loop)
        handle = next((number for number, kept in RAISED.items() if kept is error), None)
        if handle is None:
            handle, RAISES[0] = RAISES[0], RAISES[0] + RAISES[1]
        RAISED.pop(handle, None)  # (the newest again; the other side's numbers are not counted)
        RAISED[handle] = error
        mine = [number for number in RAISED if (number >= 0) is (RAISES[1] > 0)]
        if len(mine) > RAISES[2]:
            del RAISED[mine[0]]
    args = slot["args"].__get__(error)
    names = (files["filename"].__get__(error), files["filename2"].__get__(error)) if issubclass(
        kind, OSError) else (None, None)
    if names[0] is not None and len(args) == 2:  # (errno, strerror)
        args += (names[0],) if names[1] is None else (names[0], None, names[1])
    if issubclass(kind, BaseExceptionGroup) and depth < DEPTH and len(args) == 2:
        group = vars(BaseExceptionGroup)["exceptions"].__get__(error)
        args = (args[0], [error_payload(e, keep, depth + 1) for e in group])
    state = {key: value for key, value in own.items() if type(key) is str and sendable(value)
             and (key == "__notes__" or not key.startswith(("_", "program_")))}
    return [vars(type)["__name__"].__get__(kind), describe(error).partition(": ")[2][:300],
            builtin_ancestor(kind).__name__, args if sendable(args) else None, same(kind), state,
            own_module(kind), handle if type(handle) is int else None, chain(error, depth),
            CLASS_TEXT[0](kind)]


DEPTH = 3  # the links of a chain sent and made: its __cause__ and __context__, 3 levels down


def chain(error, depth):
    """[its __cause__'s payload, its __context__'s (true: its cause), whether its context is
    suppressed] while depth < DEPTH (a cycle ends there too); else None, as where it has neither."""
    slot = vars(BaseException)  # (its slots as it holds them: no __getattribute__ of its class's)
    cause, context = slot["__cause__"].__get__(error), slot["__context__"].__get__(error)
    if depth >= DEPTH or cause is None and context is None:
        return None
    return [error_payload(cause, False, depth + 1) if isinstance(cause, BaseException) else None,
            True if context is cause else error_payload(context, False, depth + 1)
            if isinstance(context, BaseException) else None,
            slot["__suppress_context__"].__get__(error) is True]


def sendable(value):
    """Whether value is a value (no reference: dump needs no refer)."""
    try:
        dump(value, None)  # (no refer: a reference fails)
        return True
    except BaseException:
        return False

