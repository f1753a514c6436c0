"""sandbox_remote.py: a program object as the test process sees it (sandbox.py's docstring has the
threat model), executed inside the sandbox as the module `sandbox_remote` (sandbox.py's BOOT): the
mirror of sandbox_proxies.py. The program's process sends an object that is no value as a reference
{"r": [its handle, its kind, its traits, its class's names]} (sandbox_child.py:program_side's
refer), the first two decided by the harness from its type, never from a name the program can set:
its kind, the name of the builtin type it is an instance of (a function, a generator, a bound
method, a module: KINDS, found by that type's identity, taken before the program runs) or
re.Match, else null; its traits, which of the protocol's methods (TRAITS: __call__, __iter__,
__next__, __len__, __hash__, __enter__, ...) its type has; its class's names (named: program text,
never looked up). In the test process it is a Remote of the subclass made once for those traits
and names (remote_class: type(x).__name__ is its class's), which defines those methods only (and
__bool__: a program object's truth fails the test, but a stream's and a re.Match's): callable(x),
hasattr(x, "__iter__") and the ABCs (Iterator, Sized, Callable, Hashable) say what plain Python
says. One of a builtin kind has that type's traits and names (as the test process reads them,
whatever the claim) and that type as its __class__ (isinstance(g, types.GeneratorType)): a forged
claim makes it no more than a real object of that kind, or of a class the program could define,
would be. The program's instance of its own subclass of a value type (a Stack(list), an IntEnum's
member) is a Valued: a program object that keeps its base's value (its reference says which base,
which of the base's methods its class overrides, and, where that value cannot change, the value:
sandbox_bases.py:overridden)."""
import _operator, _weakref, builtins, sys

from sandbox_bases import (FLAG, FLAGGED, KEYS, LASTING, OWN, TAKE, TRAITS, overridden,
                           traits)
from sandbox_link import (ARITHMETIC, BUILTINS, COMPARISONS, LINK, OPERATORS, TALKING, TestTimeout,
                          abort, ask)
from sandbox_patches import unpatched
from sandbox_values import (VALUE_TYPES, Abort, ProgramError, dump, error_payload,
                            raised)  # sandbox.py's BOOT


def stream_types():
    """The types of generators and of builtin and itertools iterators, taken before the program
    runs: their objects travel as streams (Remote), drawn once, item by item."""
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


def refused(self, *other):
    """A program object is no value: what its methods would answer anew at each question (a
    length 1 then 2, equal to everything, a float()) fails the test, never asking the program."""
    raise abort(TypeError("a program object compared, measured or combined: it is no value"))


class Remote:
    """A program object, by its handle in the program's process: the test may read and set its
    attributes (TOLD: its data too), ask its text (str, repr, format) and, where its type has
    them (its subclass's traits), call it, use it in `with` (its own __enter__ and __exit__ run
    there, the exception crossing as one of the test's callbacks does), ask isinstance of it (a
    class); a stream (a generator or builtin iterator) is drawn lazily, each item asked once (one
    at a time, then up to 256 ahead; iter() of it is itself, its equality and hash are its
    identity); copy.copy and copy.deepcopy of it copy it in the program's process (a new object;
    a deepcopy copies each program object it reaches on its own: two that hold one share no copy).
    Its other methods fail the test (refused), pickling too; `== None` is decided here (it is not
    None). A result crosses as a value, a declared class's instance rebuilt from its state
    (sandbox_verdicts.py:rebuilt)."""
    __slots__ = ("__handle", "__kind", "__stream", "__buffer", "__drawn", "__end", "__weakref__")
    __str__ = lambda self: ask("op", self.__handle, "str", [])  # its text: asked
    __repr__ = lambda self: ask("op", self.__handle, "repr", [])
    __format__ = lambda self, spec: ask("op", self.__handle, "format", [spec])
    __ne__ = lambda self, other: not self.__eq__(other)
    __hash__ = None  # (a stream's, where its type has one: its identity)
    __reduce_ex__ = __reduce__ = refused  # (pickled: no object of either process)
    __copy__ = lambda self: self.__copied("copy")
    __deepcopy__ = lambda self, memo: self.__copied("deepcopy")

    def __init__(self, handle, kind=None):
        self.__handle, self.__kind, self.__buffer, self.__drawn, self.__end = (
            handle, kind, [], 0, None)
        self.__stream = kind is not None and id(kind) in STREAM_IDS

    def __eq__(self, other):  # not None; a stream is equal to itself only
        return self is other if other is None or self.__stream else refused(self)

    def __getattribute__(self, name):  # (TOLD: its data, which Remote's own would answer)
        if name in TOLD or not name.startswith(("__", "_Remote__")):
            found = ask("attr", object.__getattribute__(self, "_Remote__handle"), name)
            return MAPPING(found) if name in COPIES and type(found) is dict else found
        return object.__getattribute__(self, name)  # (a slot not set yet: no attribute to ask)

    def __setattr__(self, name, value):
        if name.startswith("_Remote__"):
            return object.__setattr__(self, name, value)
        ask("setattr", self.__handle, name, value, [value])

    @property
    def __class__(self):  # isinstance(x, types.GeneratorType) asks this of a Remote
        """Its builtin kind (KINDS), else its own class (never a value's: values cross as such)."""
        return type(self) if self.__kind is None else self.__kind

    def __copied(self, how):
        """A copy made in the program's process (copy.copy or copy.deepcopy there: its own
        __copy__ or __deepcopy__ runs); a stream's, once items are drawn ahead, fails the test."""
        if self.__buffer:
            refused(self)
        return ask("apply", self.__handle, [how], {})

    def __call(self, *args, **kwargs):
        return ask("call", self.__handle, list(args), kwargs, [*args, *kwargs.values()])

    def __iter(self):
        return self if self.__stream else refused(self)

    def __hashed(self):
        return object.__hash__(self) if self.__stream else refused(self)

    def __enter(self):
        return ask("enter", self.__handle)

    def __exit(self, kind, error, traceback):
        """The program's __exit__ with the exception as a test's callback's crosses (its type
        and value there; no traceback), none where the harness fails the test; its result's
        truth, decided here, suppresses the exception."""
        if isinstance(error, (Abort, TestTimeout)):
            return False
        if error is None:
            return ask("exit", self.__handle)
        payload = error_payload(error, True)
        if "program_text" not in getattr(error, "__dict__", {}):  # the test's own: no value of it
            payload[1], payload[3], payload[5], payload[8] = "", (), {}, None
        return ask("exit", self.__handle, payload)

    def __instancecheck(self, instance):  # a test's value is no instance of a program class
        return issubclass(type(instance), Remote) and ask("op", self.__handle, "isinstance",
                                                          instance)

    def __next(self):
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

    def __del__(self):
        handle = getattr(self, "_Remote__handle", None)  # (None: its __init__ failed)
        if handle is not None:
            LINK["released"].append(handle)


for name in COMPARISONS[2:]:  # (every object has them: refused)
    setattr(Remote, "__%s__" % name, refused)
METHODS = dict(call=Remote._Remote__call, iter=Remote._Remote__iter, next=Remote._Remote__next,
               hash=Remote._Remote__hashed, enter=Remote._Remote__enter,
               exit=Remote._Remote__exit, instancecheck=Remote._Remote__instancecheck)
CLASSES = {}  # the subclasses of Remote made: by traits, base and a builtin kind's names
# a program object's data whose values are values (its __wrapped__: a program object; its
# __dict__ and __annotations__: read-only snapshots, as a change to a copy never reaches the object)
COPIES = ("__dict__", "__annotations__")
TOLD = {"__name__", "__qualname__", "__doc__", "__module__", "__defaults__", "__kwdefaults__",
        "__wrapped__", *COPIES}
MAPPING = type(type.__dict__)  # types.MappingProxyType
TYPE = vars(type)  # (a class's names as its type's slots hold them: no metaclass's code runs)
NAMES = ("__name__", "__qualname__", "__module__")
NAME_CAP, CLASS_CAP = 200, 1024  # the longest name told of a program's class; the most classes
NUMBERS = {}  # the program's process's numbers of its classes told of: {id: (number, class)}
THEIRS = {}  # the test process's classes for the program's classes: by traits, base and names


def named(kind):
    """The JSON text of what a reference tells of a program object's class, for its type in the
    test process: [a number of the class's own, its __name__, __qualname__ and __module__ as its
    type's slots hold them]; null for a builtin kind (the test process names it) and where told
    refuses the names or CLASS_CAP classes are told of already."""
    if kind_of(kind) is not None:
        return "null"
    try:
        names = told([TYPE[name].__get__(kind) for name in NAMES])
    except Exception:
        return "null"
    if names is None or id(kind) not in NUMBERS and len(NUMBERS) >= CLASS_CAP:
        return "null"
    number = NUMBERS.setdefault(id(kind), (len(NUMBERS), kind))[0]
    return dump([number, *names], None)


def told(names):
    """A class's names as a tuple where each is a str of at most NAME_CAP characters and its
    module none of the standard library's (whose classes the harness reads by their names:
    sandbox_values.py:dump), else None: the harness never treats a program object by them."""
    if len(names) == 3 and all(type(name) is str and len(name) <= NAME_CAP for name in names) and (
            names[2].partition(".")[0] not in sys.stdlib_module_names):
        return tuple(names)
    return None


def remote_class(bits, base=None, names=None):
    """The subclass of Remote (of Valued for a value type base) whose methods are those of TRAITS'
    bits (refused, but METHODS' and a Valued's VALUED's), of names: a program class's (its number,
    name, qualified name and module: one class for each, up to CLASS_CAP, then the harness's), a
    builtin kind's (number None), else Remote. A Valued's __class__ is a subclass of its base of
    those names (isinstance with the base holds)."""
    made = CLASSES if names is None or names[0] is None else THEIRS
    if (bits, base, names) not in made:
        if made is THEIRS and len(THEIRS) >= CLASS_CAP:
            return remote_class(bits, base)
        if len(CLASSES) > 256:  # (a forged answer's many: made anew)
            CLASSES.clear()
        name, qualname, module = names[1:] if names else ("Remote", "Remote", __name__)
        space = {"__slots__": (), "__module__": module, "__qualname__": qualname}
        space.update(("__%s__" % trait, base and VALUED.get(trait) or METHODS.get(trait, refused))
                     for i, trait in enumerate(TRAITS) if bits >> i & 1)
        try:
            if base is not None:
                space["_Remote__class"] = STAND_INS[base] if names is None else type(
                    name, (base,), {"__slots__": (), "__module__": module,
                                    "__qualname__": qualname})
            made[bits, base, names] = type(name, (Remote if base is None else Valued,), space)
        except Exception:  # (a name type() refuses: a NUL, a lone surrogate)
            return remote_class(bits, base)
    return made[bits, base, names]


def harness_class(value):
    """Whether value is a class made here for a program object's type or __class__."""
    return issubclass(value, Remote) or value in STAND_INS.values() or any(
        vars(kind).get("_Remote__class") is value for kind in THEIRS.values())


def kind_of(kind):
    """The name of a program object's type where it is a builtin type (KINDS) or re.Match (true,
    as each one is), else None."""
    if id(kind) in KINDS:
        return KINDS[id(kind)][1]
    return "re.Match" if kind is getattr(sys.modules.get("re"), "Match", ()) else None


def remote(item):
    """The one Remote of a handle (so `is` holds between two answers naming the same object), of
    the reference's kind and traits (a builtin kind's: its type's) and its class's names (told; a
    builtin kind's: its type's); its truth fails the test but for a stream's and a re.Match's (the
    program's type's __bool__ or __len__ could answer anew, and one with neither, always true, is
    no value either); a Valued where the reference ends with its base (valued), true as its base's
    value is; None if malformed."""
    if not (type(item) is list and len(item) in (4, 5) and type(item[0]) is int and (
            item[1] is None or item[1] == "re.Match" or type(item[1]) is str and item[1] in NAMED)
            and type(item[2]) is int and item[2] >= 0 and (item[3] is None or type(
                item[3]) is list and len(item[3]) == 4 and type(item[3][0]) is int
                and item[3][0] >= 0 and told(item[3][1:]) is not None)):
        return None
    handle, name, spec = item[0], item[1], valued_spec(item[4]) if len(item) == 5 else None
    kind = unpatched("re", "Match") if name == "re.Match" else NAMED.get(name)
    if len(item) == 5 and (spec is None or kind is not None):
        return None
    found = LINK["remotes"].get(handle, lambda: None)()
    if found is None:
        names = None if item[3] is None else tuple(item[3])
        if kind is not None:  # (its type's, whatever the claim)
            names = (None, *[TYPE[slot].__get__(kind) for slot in NAMES])
        bits = traits(kind) if kind is not None else item[2] & ((1 << len(TRAITS)) - 1)
        if spec is not None:  # (`[0] + s`: a sequence's own concatenation, reflected)
            bits |= (1 << TRAITS.index("radd")) if spec[0] in SEQUENCES else 0
            found = remote_class(bits, spec[0], names)(handle, *spec)
        else:
            if name != "re.Match" and id(kind) not in STREAM_IDS:
                bits |= 1 << TRAITS.index("bool")
            found = remote_class(bits, None, names)(handle, kind)
        LINK["remotes"][handle] = _weakref.ref(found)
        if handle in LINK["released"]:  # collected, but the program still holds it: keep it
            LINK["released"].remove(handle)
    return found


# (the value types whose subclasses' instances keep their base's value: sandbox_bases.py:TAKE)
VALUE_BASES = {kind.__name__: kind for kind in TAKE}
STAND_INS = {kind: type("Remote", (kind,), {"__slots__": (), "__module__": __name__,
                                            "__qualname__": "Remote"}) for kind in TAKE}
SEQUENCES = (str, bytes, bytearray, list, tuple)  # (`[0] + s`: their __radd__, which they lack)
# each request of the test process's that only took a Valued's value (it runs no program code)
FETCHED = [0]


def valued(value, base, refer, aliases):
    """The end of the reference to a program's instance of its subclass of a value type (base;
    "" for none): [its base's name, overridden's bits, its value where it cannot change (LASTING),
    else null]."""
    if base is None:
        return ""
    taken = dump(TAKE[base](value), refer, aliases) if base in LASTING else "null"
    return ",[%s,%d,%s]" % (dump(base.__name__, None), overridden(type(value), base, value), taken)


def valued_spec(spec):
    """(base, overridden's bits, its lasting value or None) of a reference's end (valued's);
    None if malformed."""
    if not (type(spec) is list and len(spec) == 3 and type(spec[0]) is str
            and type(spec[1]) is int and spec[1] >= 0):
        return None
    base = VALUE_BASES.get(spec[0])
    if base is not None and (type(spec[2]) is base if base in LASTING else spec[2] is None):
        return base, spec[1], spec[2]
    return None


class Valued(Remote):
    """A program's instance of its own subclass of a value type (a Stack(list), an IntEnum's
    member): a program object, whose attributes, methods, text, items read, set or deleted and
    in-place operators are the program's (asked), that keeps its base's value: its comparisons,
    hash, length, truth, iteration, `in`, arithmetic and conversions are Python's on that value,
    here (VALUED), on the one it crossed with where it cannot change, else on one taken anew
    after each request that may run program code (based); where its class overrides one of them
    (OWN, and what its base's own asks: sandbox_bases.py:overridden), that one fails the test
    (its own method could answer anything, its base's is not plain Python's answer), and so does
    keys() where dict(x) would copy its storage instead (KEYS). isinstance with its base type
    holds (its __class__: a subclass of that type's of the harness's, named as its class:
    remote_class), `type(x) is` and `x.__class__ is` do not."""
    __slots__ = ("_Remote__base", "_Remote__changed", "_Remote__value", "_Remote__taken")

    def __init__(self, handle, base, changed, value):
        Remote.__init__(self, handle)
        self._Remote__base, self._Remote__changed, self._Remote__value = base, changed, value
        self._Remote__taken = None  # (the value taken last, and when: based)

    def __getattribute__(self, name):  # (dict(x), {**x} and d.update(x) ask keys(): KEYS)
        if name == "keys" and object.__getattribute__(self, "_Remote__changed") >> KEYS & 1:
            refused(self)
        return Remote.__getattribute__(self, name)

    @property
    def __class__(self):
        return type(self)._Remote__class


def based(self, name):
    """A Valued's base value for its operation `name`, refused where its class overrides it: the
    one it crossed with where it cannot change, else the one taken at its first question since
    the test process last made a request that may run program code (any but these: FETCHED), so
    that every question between two runs of the program's code sees one value, as in one
    process (a program that patches the harness in its process cannot answer each anew)."""
    if self._Remote__changed >> OWN.index(name) & 1:
        refused(self)
    found, taken = self._Remote__value, self._Remote__taken
    if found is None and taken is not None and taken[0] == LINK["seq"] - FETCHED[0]:
        return taken[1]
    if found is None:
        with TALKING:  # (another thread's request meanwhile may run program code)
            found = ask("apply", self._Remote__handle, ["value"], {})
            FETCHED[0] += 1
            if type(found) is not self._Remote__base:
                raise abort(ProgramError("a malformed answer"))
            self._Remote__taken = LINK["seq"] - FETCHED[0], found
    return found


def operand(other, name):
    """The other operand of a Valued's operation: its base value where it is a Valued too (for
    its operation `name`, the reflected one), else itself."""
    return based(other, name) if issubclass(type(other), Valued) else other


def compared(name):
    """A Valued's comparison (`== None` decided here: False, as for any program object)."""
    function, reflected = getattr(_operator, name), REFLECTED[name]

    def method(self, other):
        if other is None and name in ("eq", "ne"):
            return name == "ne"
        return function(based(self, name), operand(other, reflected))
    return method


def arithmetic(name):
    """A Valued's operator of OPERATORS': `name` on its value, its reflection ("radd"), or in
    place (asked: its object changes); an int Flag's negative |, & or ^ fails the test (FLAG:
    the enum module's answer is no member of that int)."""
    if name not in FUNCTIONS and not (name[0] == "r" and name[1:] in FUNCTIONS):
        return applying(name)

    def method(self, other, *modulo):
        if name in FUNCTIONS:
            found = FUNCTIONS[name](based(self, name), operand(other, "r" + name), *modulo)
        else:
            found = FUNCTIONS[name[1:]](operand(other, name[1:]), based(self, name), *modulo)
        if name in FLAGGED and self._Remote__changed >> FLAG & 1 and found < 0:
            refused(self)
        return found
    return method


def applying(name):
    """A Valued's operation asked of the program (APPLIED's)."""
    return lambda self, *operands: ask("apply", self._Remote__handle, [name, *operands], {},
                                       list(operands))


def on_value(name, function):
    """A Valued's operation `name`: function of its base value (and the operands)."""
    return lambda self, *operands: function(based(self, name), *operands)


def item(self, key):
    """A Valued's item, of a class that keeps its base's __getitem__: Python's on the value it
    crossed with (one that cannot change), a slice on its value now; else asked of the program
    (its own __getitem__, a dict's __missing__)."""
    if not self._Remote__changed >> OWN.index("getitem") & 1 and (
            self._Remote__value is not None or type(key) is slice):
        return based(self, "getitem")[key]
    return ask("apply", self._Remote__handle, ["getitem", key], {}, [key])


REFLECTED = dict(eq="eq", ne="ne", lt="gt", gt="lt", le="ge", ge="le")
FUNCTIONS = {name: getattr(_operator, name + "_" if name in ("and", "or") else name)
             for name in ARITHMETIC} | {"pow": builtins.pow, "divmod": builtins.divmod}
VALUED = {**{name: compared(name) for name in COMPARISONS},
          **{name: arithmetic(name) for name in OPERATORS},
          **{name: on_value(name, function) for name, function in BUILTINS.items()},
          **{name: on_value(name, function) for name, function in dict(
              hash=builtins.hash, len=builtins.len, iter=builtins.iter, bool=builtins.bool,
              reversed=builtins.reversed, contains=_operator.contains).items()},
          "getitem": item, "setitem": applying("setitem"), "delitem": applying("delitem")}
for name in COMPARISONS:
    setattr(Valued, "__%s__" % name, VALUED[name])
