"""sandbox_overrides.py: what the program's process tells of a program class beside its traits
(sandbox_bases.py): whether it redefines the standard library's own methods that the harness
would answer by, and the answers of those it keeps (sandbox.py's docstring has the threat model).

Executed inside the sandbox as the module `sandbox_overrides` (sandbox.py's BOOT). The program's
own subclass of a value type is judged by its base's methods, but a public method of its base it
redefines (a startswith or count that answers True) is the program's answer, no value: its read
fails the test (overrides). An Enum class of the program's whose metaclass keeps the enum module's
protocol (listed: the bit LISTED of its reference) has that protocol answered in the program's
process by the enum module's own code on the data its class holds (enumerated: `Color['RED']`,
list(Color), len(Color), `Color.RED in Color`), never by a method of the program's; its members
cross as program objects, compared by identity (sandbox_remote.py:identical)."""
from sandbox_bases import (IDENTITY, MRO, SPACE, ancestry, lasting, programs,
                           value_base)  # sandbox.py's BOOT
from sandbox_link import ask, refuse
from sandbox_stdlib import later


def overrides(kind, name):
    """Whether kind, the program's own subclass of a value type (sandbox_bases.py:value_base), or
    a class between it and that base, defines name, a public attribute of the base (count,
    issubset): plain Python's answer is the program's own, no value (read by type's slots:
    ancestry, the nearest class's own); but a NamedTuple's field (its item, read by C) and keys()
    (decided by sandbox_remote.py:Valued: dict(x) and d.update(x) ask it where its class
    overrides __iter__, as plain Python does)."""
    base = value_base(kind)
    if base is None or name.startswith("_") or name not in vars(base) or name == "keys" or (
            not programs(kind)):
        return False
    found = (ancestry(kind) or {}).get(name)  # (unread: None, refused)
    return found is not vars(base)[name] and type(found) is not FIELD


FIELD = __import__("_collections")._tuplegetter  # (a namedtuple's field's type: collections')
# an Enum class's protocol, the enum module's own, and what it reads through (type's): where a
# metaclass keeps them all, its class's reference has the bit LISTED (listed); once enum is
# imported (sandbox_stdlib.py:later: no Enum class exists before)
LISTING = {}
LISTED = 1 << IDENTITY + 3  # (past IDENTITY: its release may run code; always true)
PROTOCOL = ("getitem", "iter", "len", "reversed", "contains")  # (what the test process may ask)


def listing():
    """LISTING, made once enum is imported; empty before."""
    if not LISTING and (found := later("enum", "EnumType")) is not None:
        LISTING.update({name: vars(found).get(name, vars(type).get(name)) for name in (
            "__getitem__", "__iter__", "__len__", "__reversed__", "__contains__",
            "__getattribute__", "__instancecheck__")})
    return LISTING


def listed(kind):
    """The bit LISTED where kind (a metaclass) keeps LISTING's methods: an Enum class's."""
    own = ancestry(kind) if listing() else None
    return LISTED if own is not None and all(
        own.get(name) is found for name, found in LISTING.items()) else 0


def enumerated(value, how, *key):
    """An Enum class's `how` (PROTOCOL's) as the enum module's own method answers it, where its
    metaclass keeps LISTING's (listed) and its class holds its members' names and its map of
    them as an exact list and dict (read by type's slot: no program code reads them; a
    getitem, len or iteration reads nothing else); `in` of a value (the module's TypeError) or
    of an Enum's member whose _name_ is a str of its own and whose class keeps object's
    attribute reads and __class__ (none of its code runs); else the harness refuses the
    question. An iteration is the module's generator, drawn as any stream is."""
    try:
        space, member = SPACE.__get__(value), key[0] if how == "contains" else None
        own, enum = ancestry(type(member)) if how == "contains" else {}, later("enum", "Enum")
        kept = how in PROTOCOL and listed(type(value)) and type(space.get("_member_map_")) is dict
        kept = kept and type(space.get("_member_names_")) is list and (
            how != "contains" or lasting(member) or enum in MRO.__get__(type(member))
            and "_name_" not in own and all(own.get(name) is vars(object)[name] for name in (
                "__getattribute__", "__class__"))
            and type(object.__getattribute__(member, "_name_")) is str)
    except Exception:
        kept = False
    if not kept:
        return refuse("an Enum class's protocol that is not the enum module's")
    return LISTING[f"__{how}__"](value, *key)


# the test process's methods of such a class's proxy (sandbox_remote.py:remote_class): each asks
ENUMERATING = {"__%s__" % how: (lambda how: lambda self, *key: ask(
    "apply", self._Remote__handle, ["enum", how, *key], {}, list(key)))(how) for how in PROTOCOL}
