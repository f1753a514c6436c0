"""sandbox_stdlib.py: the standard library's values that cross as themselves (sandbox.py's
docstring has the threat model; sandbox_values.py:dump sends them, sandbox_values.py:hook reads).

Executed inside the sandbox as the module `sandbox_stdlib` (sandbox.py's BOOT). A member of an Enum
class of a standard library module (re.RegexFlag, http.HTTPStatus, signal.Signals; found again by
its module and qualified name, so a program's class named like one is none) crosses as {"Y":
[module, qualified name, the member's name, or a Flag's value]}, made again as that class's member
(a combined flag too, of its members' bits only: enum keeps each one made for good, so a
program's flag of other bits is its object, as below, and a forged one fails the test: flag_value;
a plain Enum's value is one of its members): in the program's process, the test's value may name
any module of the standard library, imported there if need be; in the test process, the program's
value names one already imported or one of ENUMS, whose import does nothing else (the program
sends a member so only where its module is one of those or was imported before the fork; else it
is the program's object, as one of its own Enum's is). A slice crosses as {"l": [start, stop,
step]}, each a value; a zoneinfo.ZoneInfo made from a key as {"J": key}, loaded again by its
key (from /usr/share/zoneinfo, which both processes read: ZoneInfo's cache makes it the same
object); a datetime or time as its ISO text, or, where that would lose its fold or its tzinfo's
name or rules, as [its ISO text, fold, tzinfo] (datetime_state, datetime_made). pathlib's pure and
posix paths cross as {"L": [class name, text]}, an array.array as {"v": [typecode, items]}
(numbered for write-back as a bytearray is: sandbox_copies.py:numbered), a time.struct_time as
{"z": its nine fields, zone and offset} (timed), a type hint made of builtin classes (List[int],
Optional[int], list[int], int | None) as {"hint": [its head, its arguments]} (hint_state,
hint_made); a test's mappingproxy of a dict as a read-only
one of a copy of its dict (sandbox_values.py:dump), which no write reaches; the program's memoryview
of bytes (whose value cannot change) as {"m": [format, shape, its bytes]}, a read-only view of
those bytes cast so (viewed), its ChainMap as {"w": its maps}, a ChainMap of them, where each is a
dict that is the test's own (a mark: chained), so that no copy falls behind (else each stays a
program object); a test's re.Match as a
copy found again in the program's process (found_again; sandbox_copies.py:copied sends it); a
test's UserList or UserDict as a copy rebuilt there, noted (user_copy) so that a write-back refuses
one whose data or attributes the program changed (intact). A class is a module's own where that
module, as loaded, holds it under its name (own_module: a standard library module's exception class
crosses so as that module's, sandbox_errors.py:crossing). A NaN crosses as {"nan": [its 8
bytes, its number]} (nan_text, nan_made): its sign and payload kept, and each NaN object one float
of its own on the other side."""
import sys
from _struct import pack, unpack
from _weakref import ref
from itertools import count
from gc import get_referents

from sandbox_patches import IMPORT, by_name, unpatched  # sandbox.py's BOOT

TIMEZONE = unpatched("_datetime", "timezone")  # (datetime's own: the C module's)
STDLIB_NAMES = sys.stdlib_module_names
# the modules of the standard library whose Enums a program's value may name in the test process
# where the tests have not imported them
ENUMS = frozenset("enum re http signal socket ssl uuid inspect pstats plistlib calendar".split())
LOADED = frozenset(sys.modules)  # (the modules imported before the fork: in both processes)
PATHS = ("PurePosixPath", "PureWindowsPath", "PosixPath")  # pathlib's (no WindowsPath here)
# a class's and a module's own dicts, read by their descriptors (no metaclass's or module's code)
DICTS = (vars(type)["__dict__"], vars(type(sys))["__dict__"])
TYPE = vars(type)  # (a class's name and module as its type holds them)
LATER = {}  # enum's and collections' classes the harness reads, found once imported (later)
# an int Flag's |, & and ^ (and reflected), the enum module's own (enum_ways): its member of the
# base int's result (a negative one aside) where its class keeps these of the module's
FLAGGED = ("and", "or", "xor", "rand", "ror", "rxor")


def later(module, name, importing=False):
    """enum's or collections' class of that name (Enum, Flag, EnumType, FlagBoundary; Counter,
    ChainMap, namedtuple) as the module held it when the harness first found it imported
    (unpatched), else None: the harness imports neither (each run would pay for them; re and
    typing bring both), and before either is imported no instance of its classes exists;
    `importing`: imported now where it is not (a Counter or ChainMap to make)."""
    found = LATER.get((module, name))
    if found is None and (importing or sys.modules.get(module) is not None):
        found = LATER[module, name] = unpatched(module, name)
    return found


def dated(kind):
    """What takes the value of an instance of a subclass of datetime's type kind (sandbox_bases.py:
    TAKE): kind's own C reduction (its fold and tzinfo too), made again as kind."""
    own = vars(kind)
    if "__reduce_ex__" in own:
        return lambda value: kind(*own["__reduce_ex__"](value, 4)[1])
    return lambda value: kind(*own["__reduce__"](value)[1])


def named_stock():
    """(what collections.namedtuple and typing.NamedTuple put in a class (its fields aside), or
    Python in a subclass of one; the methods among them whose code is the same in every such
    class: {name: code}), made once, collections imported (later: sandbox_values.py:own_ways)."""
    if "stock" not in LATER:
        stock = later("collections", "namedtuple", True)("Stock", "a")
        LATER["stock"] = ({*vars(stock), "__annotations__", "__orig_bases__", "__dict__",
                           "__weakref__", "__parameters__", "__firstlineno__",
                           "__static_attributes__", "__annotate__"}, {
            name: vars(stock)[name].__code__ for name in ("__repr__", "_asdict", "_replace")})
    return LATER["stock"]


def enum_ways():
    """The enum module's own methods that the harness compares a class's with (Enum's hash: an
    Enum member's identity, sandbox_bases.py:traits; an int Flag's, sandbox_bases.py:flagged),
    once enum is imported (later); None before."""
    if "ways" not in LATER and (enum := later("enum", "Enum")) is not None:
        flag, boundary = later("enum", "Flag"), later("enum", "FlagBoundary")
        LATER["ways"] = dict(hash=vars(enum)["__hash__"], flags={
            "__%s__" % name: vars(flag).get("__%s__" % name) for name in (*FLAGGED, "contains")},
            standard={"_missing_": vars(flag)["_missing_"], "__new__": enum.__new__,
                      "_new_member_": vars(int)["__new__"], "_member_type_": int, "_value_": None},
            boundaries=(boundary.KEEP, boundary.EJECT))
    return LATER.get("ways")


def stdlib_state(value, kind, anywhere, aliases=None):
    """(tag, state) of a value of the standard library's that crosses as itself (see above; the
    state a value sandbox_values.py:dump sends), else None; `anywhere`: an Enum of any module (the
    test process's), else only of one the test process has too (ENUMS, or one imported before the
    fork: the program's member of another is one of its objects), and the program's memoryview
    or ChainMap (viewed, chained; aliases: dump's)."""
    if not anywhere and kind is memoryview and viewed(value):
        return "m", [value.format, list(value.shape), value.tobytes()]
    if not anywhere and kind is later("collections", "ChainMap") and chained(
            value.maps, aliases or {}):
        return "w", list(value.maps)
    if kind is slice:
        return "l", [value.start, value.stop, value.step]
    if kind.__module__ == "pathlib" and kind.__name__ in PATHS:
        return "L", [kind.__name__, str(value)]
    if zone_key(value) is not None:
        return "J", value.key
    if kind.__name__ == "array" and kind is getattr(sys.modules.get("array"), "array", None):
        return "v", [value.typecode, value.tolist()]
    if kind is STRUCT_TIME and timed(fields := [*value, value.tm_zone, value.tm_gmtoff]):
        return "z", fields
    if (found := hint_state(value, kind)) is not None:
        return "hint", found
    enum = later("enum", "Enum")
    if enum is None or not issubclass(kind, enum) or enum_class(
            kind.__module__, kind.__qualname__) is not kind or (
                not anywhere and kind.__module__ not in ENUMS and kind.__module__ not in LOADED):
        return None
    key = value._value_ if issubclass(kind, later("enum", "Flag")) else value._name_
    if flag_value(kind, key) or type(key) is str and kind.__members__.get(key) is value:
        return "Y", [kind.__module__, kind.__qualname__, key]
    return None


STRUCT_TIME = unpatched("time", "struct_time")


def timed(fields):
    """Whether fields are a time.struct_time's as time makes them (its nine ints, its zone's name
    and offset, each maybe None): it crosses as them ("z"), made again with all eleven."""
    return type(fields) is list and len(fields) == 11 and all(
        [type(found) is int for found in fields[:9]]) and type(fields[9]) in (str, type(None)) and (
            type(fields[10]) in (int, type(None)))
CASTS = frozenset("bBchHiIlLqQnNfd?")  # (the formats a memoryview of bytes is cast to again)


def viewed(view):
    """Whether the program's memoryview crosses as a value: a view of bytes (its exporter, whose
    value cannot change), not released, of a format a cast makes again ("m": the test process
    casts a view of its bytes to that format and shape)."""
    try:
        return type(view.obj) is bytes and view.format in CASTS and 0 < view.ndim <= 8
    except ValueError:  # (released)
        return False


def chained(maps, aliases):
    """Whether a ChainMap's maps cross as a value ("w": a ChainMap of them made again): a list
    of dicts, each the other side's own (a mark of dump's aliases: a call's argument, a kept one),
    which its changes reach; a fresh one's copy would fall behind where the program keeps its
    ChainMap and writes through it (which nothing here can tell)."""
    return type(maps) is list and 0 < len(maps) <= 256 and all([
        type(found) is dict and id(found) in aliases for found in maps])


def flag_value(kind, key):
    """Whether key is a value of the Flag class kind within its members' bits (its mask): enum
    caches each value made for good, and so at most 2**bits of them (re.RegexFlag's 512)."""
    flag = later("enum", "Flag")
    return flag is not None and issubclass(kind, flag) and type(key) is int and key >= 0 and (
        not key & ~kind._flag_mask_)


def member_named(kind, name):
    """The member of the Enum class kind of this name, or the Flag's members of the names a
    combined one's name joins with "|" (`Perm.R|W`), combined by its class's own `|` and holding
    the bits of its parts (not a cached one whose value was rewritten); None where kind has none
    such, or where looking it up raises (a program object's __members__)."""
    try:
        members = getattr(kind, "__members__", None)
        if type(name) is not str or members is None:
            return None
        if name in members:
            return members[name]
        names = name.split("|")
        if len(names) < 2 or not all([part in members for part in names]):
            return None
        found, bits = members[names[0]], members[names[0]]._value_
        for part in names[1:]:
            found, bits = found | members[part], bits | members[part]._value_
        return found if type(found._value_) is type(bits) and found._value_ == bits else None
    except Exception:  # (no Flag: its members do not combine)
        return None


def holders(view):
    """How many references a dict view's dict has (the view's alone: a fresh dict's)."""
    return sys.getrefcount(get_referents(view)[0])


def held_elsewhere(view, alone=holders({}.keys())):
    """Whether a dict view's dict is a dict, Counter or defaultdict (one that can be kept:
    sandbox_lending.py:walked) that something else holds too (a global, an argument): a snapshot
    of its view would not follow its changes, so sandbox_values.py:dump sends a view of it as the
    dict's mark where the dict is kept, and refuses one in an answer's value that the walk of that
    value never met (WALK); else its snapshot (where the walk could not keep the dict: beyond the
    room, inside a kept container, an outer call's argument; an exception's, a request's)."""
    kind = type(get_referents(view)[0])
    return (kind is dict or kind.__module__ == "collections") and holders(view) > alone


# the aliases of the last answer whose value was walked (sandbox_lending.py:lent_back) and the
# ids of the dicts of the views held elsewhere that its walk met; the refusal of one it never met
WALK = {"aliases": None, "met": set()}
UNKEPT_VIEW = "a view of a dict held elsewhere that is not kept"


def stdlib_made(tag, item, importing, resolve):
    """The value a tag of stdlib_state's describes (ValueError where it is malformed), else
    resolve(tag, item); `importing`: a module named may be imported whatever it is (the program's
    process: the test's value)."""
    if tag == "l" and type(item) is list and len(item) == 3:
        return slice(*item)
    if tag == "L" and type(item) is list and len(item) == 2 and item[0] in PATHS and type(
            item[1]) is str:
        return unpatched("pathlib", item[0])(item[1])
    if tag == "J" and type(item) is str and 0 < len(item) <= 64 and item.isascii() and (
            item[0].isalpha() and all(c.isalnum() or c in "/_-+" for c in item)):
        return unpatched("zoneinfo", "ZoneInfo")(item)  # (its own checks too: a path is none)
    if tag == "Y" and type(item) is list and len(item) == 3:
        kind, key = enum_class(item[0], item[1], importing), item[2]
        if kind is not None and type(key) is str:
            return kind.__members__[key]  # (a KeyError: malformed)
        if kind is not None and flag_value(kind, key):
            return kind(key)
    if tag == "v" and type(item) is list and len(item) == 2 and type(item[1]) is list:
        try:  # (a typecode of one character, its items of that type; else malformed)
            return unpatched("array", "array")(item[0], item[1])
        except (TypeError, OverflowError):
            pass
    if tag == "m" and type(item) is list and len(item) == 3 and type(item[2]) is bytes and (
            item[0] in CASTS and type(item[1]) is list and 0 < len(item[1]) <= 8):
        try:  # (a shape that its bytes fill; else malformed)
            return memoryview(item[2]).cast(item[0], item[1])
        except (TypeError, ValueError):
            pass
    if tag == "w" and type(item) is list and item and all(type(found) is dict for found in item):
        return later("collections", "ChainMap", True)(*item)
    if tag == "z" and timed(item):
        return STRUCT_TIME(item)
    if tag == "hint" and type(item) is list and len(item) == 2 and type(item[1]) is list:
        return hint_made(*item)
    if tag in ("l", "L", "J", "Y", "v", "m", "w", "z", "hint"):
        raise ValueError("malformed value")
    return resolve(tag, item)


GENERIC, UNION = type(list[int]), type(int | None)  # types.GenericAlias, types.UnionType
# typing's kinds of hints made of arguments: by name, one of typing's own generics (List[int])
ALIASES = ("_GenericAlias", "_CallableGenericAlias", "_UnionGenericAlias", "_LiteralGenericAlias")
LITERALS = (str, int, bytes, bool, type(None))  # (a Literal's arguments that cross as its)
OWN_HINTS = ("_SpecialForm", "_AnyMeta", "_SpecialGenericAlias", "_CallableType", "_TupleType")


def hint_state(value, kind, depth=0):
    """[head, arguments] of a type hint that crosses as a value, "hint" (a function's annotations:
    plain Python's are typing's objects), else None (a program object): list[int] ("[": its origin
    first), int | None ("|"), a ForwardRef (its text), typing's List[int], Dict[str, int],
    Tuple[int, ...] or Callable[[int], str] (its generic's name, as typing holds it), Union and
    Optional ("Union"), Literal, and typing's own List, Any, Union (["=", its name]); where each
    argument is a builtin class, None, Ellipsis or such a hint (a Literal's: a str, int, bytes,
    bool or None), found by their types' identity, read in their own dicts (no program code)."""
    typing = sys.modules.get("typing")
    if kind is not GENERIC and kind is not UNION and (
            typing is None or TYPE["__module__"].__get__(kind) != "typing" or depth > 16):
        return None
    space = vars(typing) if typing is not None else {}
    if kind is space.get("ForwardRef"):
        text, module = value.__forward_arg__, value.__forward_module__  # (its slots)
        return ["ForwardRef", [text]] if type(text) is str and module is None else None
    name = TYPE["__name__"].__get__(kind)
    if any(kind is space.get(own) for own in OWN_HINTS):  # (typing's own: Union, Any, List)
        own = value._name if kind is not space.get("_AnyMeta") else TYPE["__name__"].__get__(value)
        return ["=", [own]] if type(own) is str and space.get(own) is value else None
    if kind is GENERIC:
        head, args = "[", [value.__origin__, *value.__args__]
    elif kind is UNION:
        head, args = "|", list(value.__args__)
    elif name in ALIASES and kind is space.get(name):
        head, args = vars(value).get("_name"), vars(value).get("__args__")
        head = "Union" if name == ALIASES[2] else "Literal" if name == ALIASES[3] else head
        if type(args) is not tuple or type(head) is not str or not isinstance(
                space.get(head), (space["_SpecialGenericAlias"], space["_SpecialForm"])):
            return None
        args = list(args)
    else:
        return None
    literal = head == "Literal"
    if all(type(arg) is type and by_name(arg) or arg is ... or literal and type(arg) in LITERALS
           or hint_state(arg, type(arg), depth + 1) is not None for arg in args):
        return [head, args]
    return None


def hint_made(head, args):
    """The type hint hint_state describes, made by typing's and types' own constructors, of
    arguments each None, Ellipsis, a class, a str, int, bytes or bool, or a hint already made;
    ValueError where it is malformed."""
    typing = IMPORT("typing")
    space, special = vars(typing), (typing._SpecialGenericAlias, typing._SpecialForm)
    if type(head) is not str or not all(arg is None or arg is ... or type(arg) in (
            type, str, int, bytes, bool, GENERIC, UNION) or TYPE["__module__"].__get__(
                type(arg)) == "typing" for arg in args):
        raise ValueError("malformed value")
    try:
        if head == "=" and len(args) == 1 and (isinstance(found := space.get(
                args[0]), special) or found is typing.Any):
            return found
        if head == "[" and args and type(args[0]) is type:
            return GENERIC(args[0], tuple(args[1:]))
        if head == "|" and len(args) > 1:
            made = args[0]
            for arg in args[1:]:
                made = made | arg  # (int | None: types.UnionType's own operator)
            return made
        if head == "ForwardRef" and len(args) == 1 and type(args[0]) is str:
            return typing.ForwardRef(args[0])
        found = space.get(head) if head != "=" else None
        if type(found) is typing._CallableType and args:  # (Callable[[int], str]: its arguments)
            return found[... if args[:-1] == [...] else args[:-1], args[-1]]
        if isinstance(found, special) and args:
            return found[tuple(args)]
    except Exception:
        pass
    raise ValueError("malformed value")


def enum_class(module, qualname, importing=False):
    """The Enum class of that module of the standard library and qualified name (defined); the
    module imported where it is not yet only if `importing` or it is one of ENUMS; else None."""
    if type(module) is not str or type(qualname) is not str or module.partition(".")[
            0] not in STDLIB_NAMES:
        return None
    if sys.modules.get(module) is None and (importing or module in ENUMS):
        try:
            IMPORT(module)
        except Exception:
            return None
    found = defined(module, qualname)
    enum = later("enum", "Enum")
    if isinstance(found, type) and enum is not None and issubclass(found, enum) and (
            found.__module__ == module and found.__qualname__ == qualname):
        return found
    return None


def defined(module, qualname):
    """What the loaded module of that name holds at that qualified name, looked up through the
    dicts of the module and its classes (no code runs), else None."""
    found = sys.modules.get(module) if type(module) is str and type(qualname) is str else None
    for part in qualname.split(".") if found is not None else ():  # (a module's, a class's)
        space = issubclass(type(found), type) and DICTS[0].__get__(found) or issubclass(
            type(found), type(sys)) and DICTS[1].__get__(found)
        found = space.get(part) if space else None
    return found


def own_module(kind):
    """The name of the module of a class that is that module's, as its process has it loaded:
    the class the module holds at its top level under the class's name (defined); else None (a
    class that only names a module as its own, a program's `class StatisticsError(ValueError)`
    whose __module__ is "statistics", is none of it)."""
    module, name = TYPE["__module__"].__get__(kind), TYPE["__name__"].__get__(kind)
    if TYPE["__qualname__"].__get__(kind) == name and defined(module, name) is kind:
        return module
    return None


def zone_key(value):
    """The key of a zoneinfo.ZoneInfo made from one (the test's or the program's), else None."""
    if type(value).__name__ != "ZoneInfo" or "zoneinfo" not in sys.modules or type(
            value) is not unpatched("zoneinfo", "ZoneInfo"):  # (none made where not imported)
        return None
    return value.key if type(value.key) is str else None


def datetime_state(base, value):
    """What a value of datetime's type `base` (date, datetime or time) crosses as in
    sandbox_values.py:dump's "T": its ISO text, or, where that loses its fold or its tzinfo's name
    (a timezone's) or rules (a ZoneInfo's), [its ISO text, its fold, its tzinfo]."""
    text = base.isoformat(value)
    if base.__name__ not in ("datetime", "time"):
        return text
    fold, zone = base.fold.__get__(value), base.tzinfo.__get__(value)
    if fold or type(zone) is TIMEZONE and len(zone.__getinitargs__()) == 2 or zone_key(zone):
        return [text, fold, zone]
    return text


def datetime_made(kind, state):
    """The value of datetime's type `kind` that datetime_state sent; ValueError where it is
    malformed."""
    if type(state) is str:
        return kind.fromisoformat(state)
    if type(state) is list and len(state) == 3 and kind.__name__ in ("datetime", "time") and (
            type(state[0]) is str and state[1] in (0, 1) and type(state[1]) is int) and (
            state[2] is None or type(state[2]) is TIMEZONE or zone_key(state[2]) is not None):
        return kind.fromisoformat(state[0]).replace(tzinfo=state[2], fold=state[1])
    raise ValueError("malformed value")


FINDS = ("match", "search", "fullmatch")  # (how a re.Match is found again)


def found_again(match):
    """How its pattern finds this re.Match again, with the same spans, pos and endpos: [one of
    FINDS, 0], or ["finditer", n] for the n-th match of finditer; None if none does."""
    pattern, args, regs = match.re, (match.string, match.pos, match.endpos), match.regs
    for how in FINDS:
        if (found := getattr(pattern, how)(*args)) is not None and found.regs == regs:
            return [how, 0]
    for n, found in enumerate(pattern.finditer(*args)):
        if found.regs == regs:
            return ["finditer", n]
        if found.start() > match.start():
            break
    return None


USER_COPIES = {}  # {id: (a weak reference, its data, its class)} of user_copy's


def user_copy(made):
    """made, a UserList or UserDict rebuilt in the program's process as a test's object's copy
    (sandbox_proxies.py:rebuilt_copy), noted with the list or dict it holds as its data (intact)
    while it lives."""
    key = id(made)
    USER_COPIES[key] = (ref(made, lambda _: USER_COPIES.pop(key, None)), made.data, type(made))
    return made


def intact(value):
    """Whether a write-back may send what a numbered object holds: not for a UserList or UserDict
    copy (user_copy) whose class, data (then no list or dict, or one the test's object does not
    hold) or attributes (its data alone) the program changed, which the test's would hold in
    plain Python (sandbox_copies.py:contents refuses the call)."""
    found = USER_COPIES.get(id(value))
    if found is None or found[0]() is not value:
        return True
    own = object.__getattribute__(value, "__dict__") if type(value) is found[2] else None
    return type(own) is dict and tuple(map(type, own)) == (str,) and own.get("data") is found[1]


# the NaN objects sent, by id: (their number, the object, held: its id is no other's meanwhile);
# those made of each number received; the next number (one C call: no two threads share one)
SENT_NANS, MADE_NANS, NAN_NUMBER = {}, {}, count().__next__


def nan_text(value):
    """A NaN as JSON text: its 8 bytes (sign and payload) and its number, the same for the same
    object while it is held here (one object twice in what is sent is one object there too)."""
    found = SENT_NANS.get(id(value))
    if found is None or found[1] is not value:
        if len(SENT_NANS) >= 4096:
            SENT_NANS.clear()
        found = SENT_NANS[id(value)] = NAN_NUMBER(), value
    return '{"nan":["%s",%d]}' % (pack(">d", value).hex(), found[0])


def nan_made(item):
    """The NaN of a received {"nan": [8 bytes, number]}: a float of those bytes, one for each
    number (another number is another object, as the other side's NaNs are); ValueError where
    malformed."""
    if not (type(item) is list and len(item) == 2 and type(item[0]) is str and len(
            item[0]) == 16 and type(item[1]) is int):
        raise ValueError("malformed value")
    value = unpack(">d", bytes.fromhex(item[0]))[0]
    found = MADE_NANS.get(item[1])
    if value == value:
        raise ValueError("malformed value")
    if found is None or pack(">d", found) != pack(">d", value):
        if len(MADE_NANS) >= 4096:
            MADE_NANS.clear()
        found = MADE_NANS[item[1]] = value
    return found
