"""sandbox_bases.py: what the program's process tells of a program object's class (sandbox.py's
docstring has the threat model; sandbox_remote.py is the test process's side), executed inside the
sandbox as the module `sandbox_bases` (sandbox.py's BOOT): which of the protocol's methods its type
has (traits), and, for the program's own subclass of a value type (a Stack(list), an IntEnum's
member, an LRUCache(OrderedDict)), its base (the nearest value type of TAKE's in its ancestry), its
base's value (taken by that type's own C methods, which no method of the subclass's intercepts:
TAKE) and which of the base's operations its class overrides (overridden). A class is read through
type's own descriptors (ancestry): a metaclass whose __mro__, __dict__ or __module__ lies answers
nothing here."""
import _operator, sys
from collections import Counter, OrderedDict, defaultdict, deque

from sandbox_link import ARITHMETIC, BUILTINS, COMPARISONS, OPERATORS
from sandbox_stdlib import defined  # sandbox.py's BOOT

ENUM, COPY = __import__("enum"), __import__("copy")
# a class's ancestry, namespaces and names as type's own slots hold them (no metaclass's code runs)
MRO, SPACE, MODULE, QUALNAME = (vars(type)[name] for name in (
    "__mro__", "__dict__", "__module__", "__qualname__"))
# the protocol's methods a Remote has only where the program object's type has them (a bit each)
TRAITS = ("call", "iter", "next", "hash", "enter", "exit", "instancecheck", "len", "bool",
          "contains", "getitem", "reversed", *sorted(OPERATORS), *sorted(BUILTINS))


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
    """The bits of TRAITS whose method kind has (the nearest class's own, where not None); 0
    where its ancestry cannot be read."""
    own = ancestry(kind)
    if own is None:
        return 0
    return sum(1 << i for i, name in enumerate(TRAITS) if own.get(f"__{name}__") is not None)


def ordered(value, items=dict.items, order=OrderedDict.__iter__):
    """An OrderedDict subclass's value: its keys in its own order (OrderedDict's C iterator), each
    with the value its storage holds."""
    stored = {id(key): item for key, item in items(value)}
    return OrderedDict([(key, stored[id(key)]) for key in order(value)])


# the value types whose subclasses' instances keep their base's value, each with what takes that
# value in the program's process: the base's own C methods, which no method of a subclass's
# intercepts (a dict subclass's keys() or __iter__, a tuple subclass's __iter__)
TAKE = {str: str.__str__, int: int.__int__, float: float.__float__, complex: complex.__complex__,
        bytes: bytes.__bytes__, frozenset: frozenset.copy, bytearray: bytearray.copy,
        list: list.copy, set: set.copy,
        tuple: lambda value, items=tuple.__getitem__, every=slice(None): items(value, every),
        dict: lambda value, made=dict, items=dict.items: made(items(value)),
        OrderedDict: ordered,
        Counter: lambda value, made=dict, items=dict.items: Counter(made(items(value))),
        defaultdict: lambda value, items=dict.items, factory=vars(defaultdict)[
            "default_factory"]: defaultdict(factory.__get__(value), items(value)),
        deque: lambda value, items=deque.__iter__, most=vars(deque)["maxlen"]: deque(
            items(value), most.__get__(value))}
BY_ID = {id(kind): kind for kind in TAKE}
LASTING = (str, int, float, complex, bytes, tuple, frozenset)  # (a value that cannot change)
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
         Counter: [((*COMPARISONS, "add", "sub", "or", "ror", "and", "pos", "neg"), (
             *MERGED, "__missing__", "__contains__", "items",
             *["__%s__" % name for name in COMPARISONS]))],
         deque: [(COMPARISONS, ("__iter__",)), (("add", "mul", "rmul"), (
             "__iter__", "__new__", "__init__"))]}
KEYED = (dict, Counter, defaultdict)  # (dict(x) copies their storage where __iter__ is theirs)
# an int Flag's |, & and ^ (and reflected), the enum module's own: its member of the base int's
# result (a negative one aside) where its class keeps these of the module's (and its _value_)
FLAGGED = ("and", "or", "xor", "rand", "ror", "rxor")
FLAGS = {"__%s__" % name: vars(ENUM.Flag).get("__%s__" % name) for name in FLAGGED}
STANDARD = {"_missing_": vars(ENUM.Flag)["_missing_"], "__new__": ENUM.Enum.__new__,
            "_new_member_": vars(int)["__new__"], "_member_type_": int, "_value_": None}
BOUNDARIES = (ENUM.FlagBoundary.KEEP, ENUM.FlagBoundary.EJECT)
# what the test process may ask of a program's Valued object: an item read, set or deleted, an
# in-place operator (as Python runs them there: its class's own method where it has one)
APPLIED = {name: getattr(_operator, name) for name in (
    "getitem", "setitem", "delitem", *["i" + name for name in ARITHMETIC])}


def value_base(kind):
    """The nearest value type of TAKE's in kind's ancestry (an LRUCache(OrderedDict)'s is
    OrderedDict), else None."""
    try:
        return next((BY_ID[id(found)] for found in MRO.__get__(kind) if id(found) in BY_ID), None)
    except Exception:
        return None


def programs(kind):
    """Whether kind is a class of the program's own: none that a standard library module holds
    under its qualified name (time.struct_time is not; one whose __module__ only names such a
    module is): its instances are Valued, a module's or the context's cross as their base's
    value."""
    module = MODULE.__get__(kind)
    return type(module) is not str or module.partition(".")[0] not in sys.stdlib_module_names or (
        defined(module, QUALNAME.__get__(kind)) is not kind)


def flagged(own, base, value):
    """The dunders of FLAGGED that value's class (own: its ancestry) has of the enum module's
    Flag, where each answers the member of the class whose value is the base int's answer (but
    for a negative one: FLAG): its class keeps the module's _missing_ and __new__ and a KEEP or
    EJECT boundary, and value's _value_ is its int; else none."""
    if base is not int or any(own.get(name) is not found for name, found in STANDARD.items()) or (
            not any(own.get("_boundary_") is found for found in BOUNDARIES)):
        return ()
    try:
        found = object.__getattribute__(value, "_value_")
    except Exception:
        return ()
    if type(found) is not int or found != int.__int__(value):
        return ()
    return [name for name, method in FLAGS.items() if own.get(name) is method]


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
    "deepcopy", the copy module's (its own __copy__ or __deepcopy__ runs, as in one process); on
    a Valued one, for "value" its base's value (TAKE's), else the operation of APPLIED's of that
    name."""
    if type(name) is str and name in ("copy", "deepcopy"):
        return lambda: getattr(COPY, name)(value)
    base = value_base(type(value))
    if base is not None and name == "value":
        return lambda: TAKE[base](value)
    if base is not None and type(name) is str and name in APPLIED:
        return lambda *operands: APPLIED[name](value, *operands)
    raise TypeError("no such operation")
