"""sandbox_bases.py: what the program's process tells of a program object's class (sandbox.py's
docstring has the threat model; sandbox_remote.py is the test process's side), executed inside the
sandbox as the module `sandbox_bases` (sandbox.py's BOOT): which of the protocol's methods its type
has (traits), and, for the program's own subclass of a value type (a Stack(list), an IntEnum's
member, an LRUCache(OrderedDict)), its base (the nearest value type of TAKE's in its ancestry), its
base's value (taken by that type's own C methods, which no method of the subclass's intercepts:
TAKE) and which of the base's operations its class overrides (overridden); whether its objects
compare by identity (IDENTITY); its class's names and the context's classes among its ancestors
(named, declared: the test process's stand-in of such a class is standing's); what
inspect.signature tells of it (described, signed); what issubclass asks of it (subclassed, bases).
A class is read through type's own descriptors (ancestry): a metaclass whose __mro__, __dict__,
__module__ or __bases__ lies answers nothing here."""
import _operator, _weakref, builtins, gc, sys
from _collections import OrderedDict, defaultdict, deque  # (collections': Counter, counted)

from sandbox_link import ARITHMETIC, BUILTINS, COMPARISONS, OPERATORS, abort, refuse
from sandbox_patches import IMPORT, same, unpatched
from sandbox_stdlib import FLAGGED, dated, defined, enum_ways, later
from sandbox_values import DECLARED, VALUE_TYPES, ProgramError, dump  # sandbox.py's BOOT

DATETIME = __import__("_datetime")  # (datetime's types: its C module's; copy: imported where asked)
# a class's ancestry, namespaces, names and bases, read by type's own slots (no metaclass's code)
MRO, SPACE, MODULE, QUALNAME, BASES = (vars(type)[name] for name in (
    "__mro__", "__dict__", "__module__", "__qualname__", "__bases__"))
# the protocol's methods a Remote has only where the program object's type has them (a bit each)
TRAITS = ("call", "iter", "next", "hash", "enter", "exit", "instancecheck", "subclasscheck", "len",
          "bool", "contains", "getitem", "reversed", *sorted(OPERATORS), *sorted(BUILTINS))

# identity's methods: object's ==, != and hash, or an Enum member's hash (two members are never
# equal: enum_ways); where a class's ancestry keeps them, traits' IDENTITY (compared by identity)
SAME = {"__eq__": (vars(object)["__eq__"],), "__ne__": (vars(object)["__ne__"],),
        "__hash__": (vars(object)["__hash__"],)}
IDENTITY = len(TRAITS)


def ancestry(kind):
    """{name: the nearest class's own} of kind's names, as Python looks a method up; None where
    they cannot be read."""
    try:
        found = {}
        for owner in reversed(MRO.__get__(kind)):
            found.update(SPACE.__get__(owner))
        return found
    except Exception:
        return None


def traits(kind):
    """The bits of TRAITS whose method kind has (the nearest class's own, where not None), and
    IDENTITY where its equality and hash are identity's (SAME's); 0 where its ancestry is unread."""
    own = ancestry(kind)
    if own is None:
        return 0
    ways = enum_ways()
    same = SAME if ways is None else dict(SAME, __hash__=(*SAME["__hash__"], ways["hash"]))
    identity = all(any(own.get(name) is found for found in kept) for name, kept in same.items())
    return sum(1 << i for i, name in enumerate(TRAITS) if own.get(f"__{name}__") is not None) | (
        identity << IDENTITY)


def finalizing(value, opaque=(type(ancestry), type(sys))):
    """The bit past IDENTITY where value's release may run code (sandbox_remote.py:URGENT): it or
    what it holds up to two steps on (a __dict__ or a tuple read through, a function's free
    variables; no class, no function's globals, nothing in a module) has a finalizer (its type's
    __del__) or a weak reference (a weakref.finalize's)."""
    level = [value]
    for step in range(3):
        if any(_weakref.getweakrefcount(found) or any("__del__" in SPACE.__get__(owner) for owner
               in MRO.__get__(type(found))) for found in level[:256]):
            return 1 << IDENTITY + 1
        held = [item for found in level[:256] if step < 2 for item in (
            gc.get_referents(found) if type(found) not in opaque else gc.get_referents(
                *opaque[0].__closure__.__get__(found) or ()) if type(found) is opaque[0] else ())]
        held += gc.get_referents(*[d for d in held if type(d) in (dict, tuple)])  # (read through)
        level = [item for item in held if not isinstance(item, type)]
    return 0


def ordered(value, items=dict.items, order=OrderedDict.__iter__):
    """An OrderedDict subclass's value: its keys in its own order (OrderedDict's C iterator), each
    with the value its storage holds."""
    stored = {id(key): item for key, item in items(value)}
    return OrderedDict([(key, stored[id(key)]) for key in order(value)])


DATED = [DATETIME.date, DATETIME.datetime, DATETIME.time, DATETIME.timedelta]
SUBCLASSED = tuple(DATED[:2])  # (whose + and - give an instance of the subclass in plain Python)
# the value types whose subclasses' instances keep their base's value, each with what takes that
# value in the program's process: the base's own C methods, which no method of a subclass's
# intercepts (a dict subclass's keys() or __iter__, a tuple subclass's __iter__, a date's state)
TAKE = {str: str.__str__, int: int.__int__, float: float.__float__, complex: complex.__complex__,
        bytes: bytes.__bytes__, frozenset: frozenset.copy, bytearray: bytearray.copy,
        list: list.copy, set: set.copy,
        tuple: lambda value, items=tuple.__getitem__, every=slice(None): items(value, every),
        dict: lambda value, made=dict, items=dict.items: made(items(value)),
        OrderedDict: ordered,  # (Counter's: counted)
        defaultdict: lambda value, items=dict.items, factory=vars(defaultdict)[
            "default_factory"]: defaultdict(factory.__get__(value), items(value)),
        deque: lambda value, items=deque.__iter__, most=vars(deque)["maxlen"]: deque(
            items(value), most.__get__(value)), **{kind: dated(kind) for kind in DATED}}
BY_ID = {id(kind): kind for kind in TAKE}
LASTING = (str, int, float, complex, bytes, tuple, frozenset, *DATED)  # (one that cannot change)
# (and what a tuple's or frozenset's items must be, all the way down, for theirs: lasting)
UNCHANGING = {str, int, float, complex, bytes, bool, type(None), tuple, frozenset, *DATED}
OWN = (*COMPARISONS, *TRAITS)  # the methods whose override by a subclass a Valued's bits note
# and two bits more: its keys() fails the test (where dict(x) would not ask it: KEYED); a negative
# result of its |, & or ^ does (an int Flag's: flagged)
KEYS, FLAG = len(OWN), len(OWN) + 1
# the base types' operations that ask the object's class for other methods (a Counter's
# comparisons its __getitem__, a deque's its __iter__, an OrderedDict's | its constructor): where
# the class overrides one of those, they fail the test too
MERGED = ("keys", "__getitem__", "__iter__")  # (what dict(x) or {} | x asks of a dict subclass)
BUILT = (*MERGED, "__new__", "__init__", "__setitem__", "update", "__ior__")  # (type(x)(x) |= y)
LEANS = {dict: [(("or", "ror"), MERGED)], OrderedDict: [(("or", "ror"), BUILT)],
         defaultdict: [(("or", "ror"), BUILT)],
         deque: [(COMPARISONS, ("__iter__",)), (("add", "mul", "rmul"), (
             "__iter__", "__new__", "__init__"))]}
KEYED = [dict, defaultdict]  # (dict(x) copies their storage where __iter__ is theirs; a Counter's)


def counted(importing=False):
    """collections' Counter, with its entries of TAKE, BY_ID, LEANS and KEYED, once collections
    is imported (later; `importing`: now, where it is not); else None."""
    counter = later("collections", "Counter", importing)
    if counter is not None and id(counter) not in BY_ID:
        TAKE[counter] = lambda value, made=dict, items=dict.items: counter(made(items(value)))
        LEANS[counter] = [((*COMPARISONS, "add", "sub", "or", "ror", "and", "pos", "neg"), (
            *MERGED, "__missing__", "__contains__", "items",
            *["__%s__" % name for name in COMPARISONS]))]
        KEYED.append(counter)
        BY_ID[id(counter)] = counter
    return counter


# what the test process may ask of a program's Valued object: an item read, set or deleted, an
# in-place operator (as Python runs them there: its class's own method where it has one), a
# date's + or - that gives an instance of its class (SUBCLASSED)
APPLIED = {name: getattr(_operator, name) for name in (
    "getitem", "setitem", "delitem", "add", "sub", *["i" + name for name in ARITHMETIC])}
APPLIED["radd"] = lambda value, other: other + value


def value_base(kind):
    """The nearest value type of TAKE's in kind's ancestry (an LRUCache(OrderedDict)'s is
    OrderedDict), else None."""
    try:
        counted()
        return next((BY_ID[id(found)] for found in MRO.__get__(kind) if id(found) in BY_ID), None)
    except Exception:
        return None


def programs(kind):
    """Whether kind is a class of the program's own: none that a standard library module holds under
    its qualified name (time.struct_time is not; one whose __module__ only names such a module is):
    its instances are Valued, a module's or the context's cross as their base's value."""
    module = MODULE.__get__(kind)
    return type(module) is not str or module.partition(".")[0] not in sys.stdlib_module_names or (
        defined(module, QUALNAME.__get__(kind)) is not kind)


def flagged(own, base, value):
    """The dunders of FLAGGED and __contains__ that value's class (own: its ancestry) has of the
    enum module's Flag, where each answers the member of the class whose value is the base int's
    answer (but for a negative one: FLAG), or whether its bits hold another member's: its class
    keeps the module's _missing_ and __new__ and a KEEP or EJECT boundary, and value's _value_ is
    its int; else none."""
    ways = enum_ways()
    if base is not int or ways is None or any(own.get(name) is not found for name, found in ways[
            "standard"].items()) or not any(own.get("_boundary_") is found for found in ways[
                "boundaries"]):
        return ()
    try:
        found = object.__getattribute__(value, "_value_")
    except Exception:
        return ()
    if type(found) is not int or found != int.__int__(value):
        return ()
    return [name for name, method in ways["flags"].items() if own.get(name) is method]


def overridden(kind, base, value):
    """The bits of OWN whose method kind has otherwise than base (its own, a mixin's before base;
    not the enum module's Flag operators where flagged keeps them), and those of LEANS' whose base
    method asks one its class overrides; KEYS where dict(x) of a KEYED base copies storage that
    its keys() or __getitem__ would not answer; FLAG; all where its ancestry cannot be read."""
    own, theirs = ancestry(kind), ancestry(base)
    if own is None or theirs is None:
        return (1 << FLAG) - 1
    changed = {name for name, found in own.items() if found is not theirs.get(name, OWN)}
    kept = flagged(own, base, value)
    changed.difference_update(kept)
    bits = sum(1 << i for i, name in enumerate(OWN) if f"__{name}__" in changed)
    for operations, methods in LEANS.get(base, ()):
        if not changed.isdisjoint(methods):
            bits |= sum(1 << OWN.index(name) for name in operations)
    if base in KEYED and "__iter__" not in changed and not changed.isdisjoint(MERGED[:2]):
        bits |= 1 << KEYS
    return bits | (1 << FLAG if kept else 0)


def applied(value, name):
    """What the test process's request "apply" runs on a program object: for "copy" and
    "deepcopy", the copy module's (its own __copy__ or __deepcopy__ runs, as in one process), for
    "signature" what inspect.signature tells of it (described), for "bases" and "issubclass" what
    issubclass asks of it (bases, subclassed), for "fields" its dataclass fields' names where a
    read of them on it finds its class's (fields_of; else None); on a Valued one, for "value" its
    base's value (TAKE's; refused where its class overrides other methods than as it crossed, the
    test's `changed`: its __class__ set, its class patched), else the operation of APPLIED's."""
    if type(name) is str and name in ("copy", "deepcopy"):
        return lambda: getattr(IMPORT("copy"), name)(value)
    if name in ("signature", "bases"):
        return lambda: (described if name == "signature" else bases)(value)
    if name == "issubclass":
        return lambda derived: subclassed(derived, value)
    if name == "fields":  # (its fields, where a read of them on it finds its class's: fields_of)
        own = (ancestry(type(value)) or {}).get("__dataclass_fields__")
        return lambda: fields_of(type(value)) if getattr(
            value, "__dataclass_fields__", None) is own else None
    base = value_base(type(value))
    if base is not None and name == "value":
        return lambda changed: TAKE[base](value) if changed == overridden(
            type(value), base, value) else refuse("a program object whose class changed")
    if base is not None and type(name) is str and name in APPLIED:
        return lambda *operands: APPLIED[name](value, *operands)
    raise TypeError("no such operation")


def bases(value):
    """The __bases__ that the test process's issubclass reads of a program object (its walk, where
    the second argument is a class of the test's: no __subclasscheck__ of the program's is asked)
    and a test's read of them: a class's as type's slot holds them, where they say what plain
    Python's issubclass says (its __mro__: C reads no __bases__ of a class) and a read of
    __bases__ in one process would answer them: its metaclass keeps type's __bases__ and
    __getattribute__, and the classes its bases reach are its __mro__'s (a metaclass's mro() may
    make it otherwise); else the harness refuses the question. Another object's: its attribute
    (plain Python's walk reads it)."""
    try:
        found = BASES.__get__(value)
    except TypeError:  # (no class)
        return getattr(value, "__bases__")
    meta = ancestry(type(value))
    try:
        agree = meta is not None and all(meta.get(name) is vars(type)[name] for name in (
            "__bases__", "__getattribute__")) and spanned(value)
    except Exception:
        agree = False
    if not agree:
        refuse("a class whose __bases__ are not what issubclass reads")
        return ()
    return found


def spanned(kind):
    """Whether the classes that kind's bases reach (type's slots) are its __mro__'s."""
    seen, todo = {}, [kind]
    while todo:
        found = todo.pop()
        if id(found) not in seen:
            seen[id(found)] = found
            todo.extend(BASES.__get__(found))
    return seen.keys() == {id(found) for found in MRO.__get__(kind)}


def subclassed(derived, value):
    """issubclass(derived, value) as the program's process answers it, value's class's own
    __subclasscheck__ running as in one process, where derived is a class here (the program's, a
    builtin one); a test's class (a TestObject here: no class) is refused, as the program's
    __subclasscheck__ would answer for another object than plain Python's (and type's would
    fail)."""
    try:
        MRO.__get__(derived)
    except TypeError:
        refuse("issubclass of a test's class or an object that is no class")
        return False
    return issubclass(derived, value)


def described(value):
    """What inspect.signature tells of a program's callable (in its process, as plain Python
    answers it: __wrapped__, __signature__, a class's __init__): [[name, kind, whether it has a
    default, the default, whether it has an annotation, the annotation] of each parameter,
    [whether it has a return annotation, the annotation]] (None for none; a default that is no
    value crosses as a program object: signed makes the signature of it)."""
    inspect = sys.modules.get("inspect") or __import__("inspect")
    found, empty = inspect.signature(value), inspect.Parameter.empty
    told = lambda item: [item is not empty, None if item is empty else item]
    return [[[p.name, int(p.kind), *told(p.default), *told(p.annotation)]
             for p in found.parameters.values()], told(found.return_annotation)]


# what a reference tells of a program object's type (sandbox_remote.py reads it)
def stream_types():
    """The types of generators and of builtin and itertools iterators, taken before the program
    runs: their objects travel as streams (sandbox_remote.py:Remote), drawn once, item by item."""
    itertools = __import__("itertools")
    samples = ([], (), "", "\u0100", b"", bytearray(), range(0), range(1 << 70), set(), {},
               {}.values(), {}.items())
    kinds = {type(iter(sample)) for sample in samples} | {
        type(reversed([])), type(reversed(range(0))), type(reversed({})), type(iter(int, 1)),
        type((lambda: (yield))()), type(iter(type("Items", (), {"__getitem__": len})()))}
    return frozenset(kinds | {kind for module in (builtins, itertools)
                              for kind in vars(module).values()
                              if isinstance(kind, type) and hasattr(kind, "__next__")})


STREAMS = stream_types()


def builtin_kinds():
    """{id: (type, its module.qualname)} of the builtin types whose instances cross as program
    objects: the streams', builtins' and module types' types (types is loaded already: ctypes),
    but the value types'. Held here, none of their ids is ever another object's."""
    types = sys.modules.get("types") or __import__("types")
    found = {}
    for kind in [*STREAMS, *vars(builtins).values(), *vars(types).values()]:
        if isinstance(kind, type) and not issubclass(kind, VALUE_TYPES):
            found[id(kind)] = kind, "%s.%s" % (kind.__module__, kind.__qualname__)
    return found


KINDS = builtin_kinds()
NAMED = {name: kind for kind, name in KINDS.values()}
STREAM_IDS = frozenset(map(id, STREAMS))


TYPE = vars(type)  # (a class's names as its type's slots hold them: no metaclass's code runs)
NAMES = ("__name__", "__qualname__", "__module__")
NAME_CAP, CLASS_CAP = 200, 1024  # the longest name told of a program's class; the most classes
NUMBERS = {}  # the program's process's numbers of its classes told of: {id: (number, class)}


def kind_of(kind):
    """The name of a program object's type where it is a builtin type (KINDS) or re.Match (true,
    as each one is), else None."""
    if id(kind) in KINDS:
        return KINDS[id(kind)][1]
    return "re.Match" if kind is getattr(sys.modules.get("re"), "Match", ()) else None


def named(kind):
    """The JSON text of what a reference tells of a program object's class, for its type in the
    test process: [a number of the class's own, its __name__, __qualname__ and __module__ as its
    type's slots hold them, the names of its ancestors that are the context's classes (declared),
    its dataclass fields' names (fields_of)]; null for a builtin kind (the test process names
    it) and where told refuses the names or CLASS_CAP classes are told of already."""
    if kind_of(kind) is not None:
        return "null"
    try:
        names = told([TYPE[name].__get__(kind) for name in NAMES])
    except Exception:
        return "null"
    if names is None or id(kind) not in NUMBERS and len(NUMBERS) >= CLASS_CAP:
        return "null"
    number = NUMBERS.setdefault(id(kind), (len(NUMBERS), kind))[0]
    return dump([number, *names, declared(kind), fields_of(kind)], None)


def declared(kind):
    """The names of the classes of kind's ancestry (itself aside) that are the context's classes
    of their names (sandbox_patches.py:same), up to 16: isinstance with those holds in the test
    process (standing)."""
    try:
        return [TYPE["__name__"].__get__(found) for found in MRO.__get__(kind)[1:]
                if same(found)][:16]
    except Exception:
        return []


def fields_of(kind):
    """The names of a dataclass's fields, as dataclasses.fields lists them (each a Field of the
    module's own class and kind _FIELD in the __dataclass_fields__ its ancestry holds), up to 64,
    each a field_name; [] for another class, where one is not so, or where its metaclass (its
    ancestry but type and object) defines one of HIDING (a read on the class may answer else)."""
    try:
        if any(name in SPACE.__get__(owner) for owner in MRO.__get__(type(kind))
               if owner is not type and owner is not object for name in HIDING):
            return []
    except Exception:
        return []
    found, module = (ancestry(kind) or {}).get("__dataclass_fields__"), sys.modules.get(
        "dataclasses")
    space = vars(module) if type(module) is type(sys) else {}
    if type(found) is not dict or len(found) > 64 or not all(
            type(field) is space.get("Field") for field in found.values()):
        return []
    try:
        names = [field.name for field in found.values() if field._field_type is space["_FIELD"]]
    except Exception:  # (a module of the program's)
        return []
    return names if all(map(field_name, names)) else []


HIDING = ("__dataclass_fields__", "__getattribute__", "__getattr__")


def field_name(name):
    """Whether name may be told as a dataclass field's: an identifier of at most NAME_CAP
    characters, neither a dunder nor a Remote's own (which a Remote reads without asking)."""
    return type(name) is str and len(name) <= NAME_CAP and name.isidentifier() and (
        not name.startswith(("__", "_Remote__")))


def dataclass_fields(names):
    """The __dataclass_fields__ of the test process's class for a program's dataclass (fields_of's
    names): a dataclasses.Field made here for each, so that fields, asdict and astuple of its
    objects read those attributes (asked of the program, values as any read) and nothing else;
    None where one is no field_name (a forged answer)."""
    if not all(map(field_name, names)):
        return None
    found = {}
    for name in names:
        found[name] = unpatched("dataclasses", "field")()
        found[name].name, found[name]._field_type = name, unpatched("dataclasses", "_FIELD")
    return found


def told(names):
    """A class's names as a tuple where each is a str of at most NAME_CAP characters and its
    module none of the standard library's (whose classes the harness reads by their names:
    sandbox_values.py:dump), else None: the harness never treats a program object by them."""
    if len(names) == 3 and all(type(name) is str and len(name) <= NAME_CAP for name in names) and (
            names[2].partition(".")[0] not in sys.stdlib_module_names):
        return tuple(names)
    return None


def signed(told):
    """The inspect.Signature of what described tells: its parameters' names, kinds, defaults and
    annotations (a default or annotation that is a program object: its proxy), made here by
    inspect's own classes; a malformed answer fails the test."""
    parameter = unpatched("inspect", "Parameter")
    given = lambda has, item: item if has is True else parameter.empty
    try:
        parameters, (returns, returned) = told
        return unpatched("inspect", "Signature")([
            parameter(name, kind, default=given(has, default), annotation=given(noted, note))
            for name, kind, has, default, noted, note in parameters],
            return_annotation=given(returns, returned))
    except Exception:
        raise abort(ProgramError("a malformed answer")) from None


def valued(value, base, refer, aliases):
    """The end of the reference to a program's instance of its subclass of a value type (base;
    "" for none): [its base's name, overridden's bits, its value where it cannot change (LASTING),
    else null]. A tuple's value crosses whatever it holds (the containers in it that the program
    reaches are kept from this answer on: sandbox_lending.py:lent_back marks them for it); the
    test process keeps it only where nothing in it can change (lasting)."""
    if base is None:
        return ""
    taken = dump(TAKE[base](value), refer, aliases) if base in LASTING else "null"
    return ",[%s,%d,%s]" % (dump(base.__name__, None), overridden(type(value), base, value), taken)


def lasting(value, depth=0):
    """Whether value cannot change: of UNCHANGING's types exactly, and a tuple's or frozenset's
    items so, all the way down (a tuple of lists changes as they do), up to 32 levels."""
    if type(value) not in UNCHANGING:
        return False
    if type(value) is tuple or type(value) is frozenset:
        return depth < 32 and all(lasting(item, depth + 1) for item in value)
    return True


class Standing(type):
    """The metaclass of a program class's stand-in (standing): its ancestry (mro) is itself, its
    declared bases' and object, though its bases are object alone; a call of it (x.__class__(),
    dataclasses.replace(x)) raises TypeError, as a Remote's class's does."""

    def __call__(cls, *args, **kwargs):
        raise TypeError("a program object is made in the program's process")

    def mro(cls):
        found = [cls]
        for base in SPACE.__get__(cls).get("_Remote__declared", ()):
            found += [kind for kind in MRO.__get__(base) if kind is not object and not any(
                kind is other for other in found)]
        return [*found, object]


def standing(name, qualname, module, bases):
    """The stand-in of a program class that isinstance asks of its objects (their __class__:
    sandbox_remote.py:Remote) where bases name classes the context declares (DECLARED): a class
    of its names whose ancestry holds them, made with no bases and then given that ancestry
    (Standing), so that no code of theirs runs (their __init_subclass__, their metaclass's) and
    none lists it among its subclasses; its methods are theirs, but the program object's own are
    asked of the program. None where none is declared or their layout refuses it (a base with
    __slots__)."""
    found = [DECLARED.get(base) for base in bases]
    found = tuple(kind for kind in found if isinstance(kind, type))
    if not found:
        return None
    try:
        made = Standing(name, (), {"__slots__": (), "__module__": module, "__qualname__": qualname})
        made._Remote__declared = found
        made.__bases__ = (object,)  # (its ancestry made anew: theirs too)
        return made
    except Exception:
        return None
