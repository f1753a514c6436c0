"""sandbox_remote.py: a program object as the test process sees it (sandbox.py's docstring has the
threat model), executed inside the sandbox as the module `sandbox_remote` (sandbox.py's BOOT): the
mirror of sandbox_proxies.py. The program's process sends an object that is no value as a reference
{"r": [its handle, its kind, its traits, its class's names]} (sandbox_child.py:program_side's
refer), the first two decided by the harness from its type, never from a name the program can set:
its kind, the name of its builtin type (a function, a generator, a bound method, a module: KINDS,
found by that type's identity, taken before the program runs) or re.Match, else null; its traits,
which of the protocol's methods (TRAITS: __call__, __iter__, __len__, ...) its type has; its class's
names (named: program text, never looked up; a dataclass's fields' names too). In the test process
it is a Remote of the subclass made once for those traits and names (remote_class), which defines
those methods only: callable(x), hasattr(x, "__iter__") and the ABCs say what plain Python says (an
Enum class's protocol: sandbox_overrides.py). One of a builtin kind has that type's traits, names
and __class__ (isinstance(g, types.GeneratorType)), whatever the claim: a forged one makes it no
more than a real one. The program's instance of its own subclass of a value type keeps its base's
value (its reference says which base, which of its methods its class overrides and, where it cannot
change, the value): of str, float or complex it is a Held, an instance of that type here holding the
value (held: C functions take it), of another (a Stack(list), an IntEnum's member) a Valued."""
import _operator, _weakref, builtins

from sandbox_bases import (CLASS_CAP, FLAG, FLAGGED, IDENTITY, KEYS, LASTING, NAMED, NAMES, OWN,
                           STREAM_IDS, SUBCLASSED, TAKE, TRAITS, TYPE, counted, dataclass_fields,
                           lasting, signed, standing, told, traits)
from sandbox_overrides import ENUMERATING, LISTED
from sandbox_alarm import armed
from sandbox_link import (ARITHMETIC, BUILTINS, COMPARISONS, LINK, OPERATORS, TALKING, TestTimeout,
                          abort, ask)
from sandbox_patches import unpatched
from sandbox_values import (VALUE_TYPES, Abort, ProgramError, error_payload,
                            raised)  # sandbox.py's BOOT


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
    at a time, then some read ahead: sandbox_ahead.py; iter() of it itself, equality and hash its
    identity), the program's own iterator (its class has __next__) at each next(), iter() of it
    itself where its own __iter__ gives it back (asked); copy.copy and copy.deepcopy of it copy it
    in the program's process (a new object; a deepcopy copies each program object it reaches on
    its own: two that hold one share no copy). Its other methods fail the test (refused),
    pickling too; a test's weak reference to it keeps it alive for the rest of the run (__del__);
    `== None` is decided here (it is not None). issubclass with it is the program's answer, its
    __bases__ type's slots (sandbox_bases.py:bases). A result crosses as a value, a declared
    class's instance rebuilt from its state (sandbox_verdicts.py:rebuilt)."""
    __slots__ = ()  # (its state: STATE, the slots of each class made of it, a Held's too)
    __str__ = lambda self: ask("op", self.__handle, "str", [])  # its text: asked
    __repr__ = lambda self: ask("op", self.__handle, "repr", [])
    __format__ = lambda self, spec: ask("op", self.__handle, "format", [spec])
    __hash__ = None  # (a stream's, where its type has one: its identity)
    __reduce_ex__ = __reduce__ = refused  # (pickled: no object of either process)
    __copy__ = lambda self: self.__copied("copy")
    __deepcopy__ = lambda self, memo: self.__copied("deepcopy")
    __class = None  # (its class as isinstance sees it, where the context declares a base: standing)

    def __init__(self, token, handle, kind=None, /):  # (made by remote alone)
        if token is not TOKEN:  # (type(x)(**fields), dataclasses.replace(x): no program's choice)
            raise TypeError("a program object is made in the program's process")
        self.__handle, self.__kind, self.__buffer, self.__drawn, self.__end = (
            handle, kind, [], 0, None)
        self.__stream = kind is not None and id(kind) in STREAM_IDS

    def __eq__(self, other):  # not None; a stream is equal to itself only
        return self is other if other is None or self.__stream else refused(self)

    def __getattribute__(self, name):  # (TOLD: its data, which Remote's own would answer)
        if name == "__bases__":  # (as issubclass reads them: sandbox_bases.py:bases)
            return ask("apply", object.__getattribute__(self, "_Remote__handle"), ["bases"], {})
        if name in TOLD or not str.startswith(name, ("__", "_Remote__")):  # (its value: a Held's)
            found = ask("attr", object.__getattribute__(self, "_Remote__handle"), name)
            return MAPPING(found) if name in COPIES and type(found) is dict else found
        return object.__getattribute__(self, name)  # (a slot not set yet: no attribute to ask)

    def __setattr__(self, name, value):
        if str.startswith(name, "_Remote__"):
            return object.__setattr__(self, name, value)
        ask("setattr", self.__handle, name, value, [value])

    @property
    def __class__(self):  # isinstance(x, types.GeneratorType) asks this of a Remote
        """Its builtin kind (KINDS), else its own class (never a value's: values cross as such),
        or, where the context declares some of its class's bases, its stand-in (standing)."""
        return self.__kind if self.__kind is not None else type(self).__class or type(self)

    @property
    def __signature__(self):  # (inspect.signature asks it)
        """Its signature, made here of what inspect.signature tells in the program's process
        (signed); none where it is not callable."""
        if not callable(self):
            raise AttributeError("__signature__")
        return signed(ask("apply", self.__handle, ["signature"], {}))

    def __copied(self, how):
        """A copy made in the program's process (copy.copy or copy.deepcopy there: its own
        __copy__ or __deepcopy__ runs); a stream's, once items are drawn ahead, fails the test."""
        if self.__buffer:
            refused(self)
        return ask("apply", self.__handle, [how], {})

    __call = lambda self, *args, **kwargs: ask("call", self.__handle, list(args), kwargs,
                                                [*args, *kwargs.values()])
    __hash = lambda self: object.__hash__(self) if self.__stream else refused(self)
    __enter = lambda self: ask("enter", self.__handle)

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

    def __subclasscheck(self, derived):  # (the program's answer: sandbox_bases.py:subclassed)
        return ask("apply", self.__handle, ["issubclass", derived], {}, [derived])

    def __iter(self):  # (a stream's: itself; an own iterator's: itself, if its __iter__ says)
        if self.__stream or hasattr(type(self), "__next__") and ask(
                "op", self.__handle, "iter", []) is self:
            return self
        refused(self)

    def __next(self):
        if not self.__buffer and (self.__end is None or not self.__stream):
            got = ask("next", self.__handle, 1 if self.__drawn < 8 else min(self.__drawn, 256))
            if type(got) is not list or len(got) != 2 or type(got[0]) is not list:
                raise abort(ProgramError("a malformed answer"))
            self.__buffer, self.__end = got[0][::-1], got[1]
            self.__drawn += len(got[0]) if self.__stream else 0  # (an own iterator's: by one)
        if self.__buffer:
            return self.__buffer.pop()
        if (error := raised(self.__end)) is not None:
            raise error
        raise StopIteration

    def __del__(self):
        """Its handle released; where a weak reference of the test's to it is alive (the
        harness's aside), it lives on instead, its handle kept, held by the harness for the rest
        of the run (KEPT): that reference answers it still, as in one process while the program
        holds the object (a leaking program never passes `r() is None`); past KEPT_CAP of them,
        the test fails. Where its release may run code (URGENT) and the test's own code drops it
        (the main thread under the test's alarm, no request under way in any thread), a request
        of its own ("free") releases it now, as in one process, after the test's changes are
        told, under its redirections; else the release goes with the next request."""
        handle = getattr(self, "_Remote__handle", None)  # (None: its __init__ failed)
        if handle is None:
            return
        own = LINK["remotes"].get(handle)
        if any(found is not own for found in _weakref.getweakrefs(self)):
            if len(KEPT) < KEPT_CAP:
                return KEPT.append(self)  # (alive again: its weak references live on)
            LINK["released"].append(handle)
            abort(TypeError("a weak reference to a program object: it dies with its proxy"))
        LINK["released"].append(handle)
        if handle not in URGENT:
            return
        URGENT.discard(handle)
        if (self.__end is None and armed() and not LINK["failed"] and not LINK["gone"]
                and not TALKING._is_owned() and TALKING.acquire(False)):
            try:  # (the lock held by a test's thread: the release goes with the next request)
                if handle in LINK["released"]:  # (not sent meanwhile by a test thread's request)
                    LINK["released"].remove(handle)
                    ask("free", handle)
            except BaseException:  # (a timeout or the harness's failure: noted, LINK["failed"])
                LINK["released"].append(handle)  # (released twice: the second does nothing)
            finally:
                TALKING.release()


# a Remote's state, the slots of each class made (a Valued's: its class's; no __dict__)
STATE = ("_Remote__handle", "_Remote__kind", "_Remote__stream", "_Remote__buffer", "_Remote__drawn",
         "_Remote__end", "__weakref__")
KEPT, KEPT_CAP = [], 4096  # the proxies a test's weak reference keeps alive (Remote.__del__)
URGENT = set()  # the handles whose release may run code (sandbox_bases.py:finalizing's bit)
TOKEN = object()  # (what remote alone passes Remote.__init__: no test's call makes one)


def identical(self, other):
    """== of a program object whose type keeps object's (!= is object's): its identity, decided
    here, with None, a value or another such program object (one proxy per handle: remote); another
    program object's own == answers next (NotImplemented), as in one process; anything else fails
    the test (in one process it could be this very object: a class made here for a program
    class, sandbox_proxies.py:harness_class; the context's class, whose copy the program has)."""
    if self is other:
        return True
    if issubclass(type(other), Remote) and type(other).__eq__ is not identical:
        return NotImplemented
    if not (other is None or issubclass(type(other), Remote) or isinstance(other, VALUE_TYPES)):
        refused(self)
    return False


for name in COMPARISONS[2:]:  # (every object has them: refused)
    setattr(Remote, "__%s__" % name, refused)
METHODS = {name: vars(Remote)["_Remote__" + name] for name in (
    "call", "iter", "next", "hash", "enter", "exit", "instancecheck", "subclasscheck")}
CLASSES = {}  # the subclasses of Remote made: by traits, base and a builtin kind's names
# a program object's data read as values (its __wrapped__, __code__: program objects; __dict__,
# __annotations__, an Enum class's __members__: read-only snapshots, whose change is no change)
COPIES = ("__dict__", "__annotations__", "__members__")
TOLD = {"__name__", "__qualname__", "__doc__", "__module__", "__defaults__", "__kwdefaults__",
        "__wrapped__", "__func__", "__self__", "__code__", *COPIES}
MAPPING = type(type.__dict__)  # types.MappingProxyType
THEIRS = {}  # the test process's classes for the program's classes: by traits, base and names


def remote_class(bits, base=None, names=None, changed=0):
    """The subclass of Remote whose methods are those of TRAITS' bits (refused, but METHODS'), of
    names: a program class's (its number, name, qualified name and module: one class for each, up
    to CLASS_CAP, then the harness's), a builtin kind's (number None), else Remote's; a
    dataclass's has the Fields of its fields' names (sandbox_bases.py:dataclass_fields); for a
    value type base a Valued's (VALUED's; its __class__ a subclass of its base of those names:
    isinstance with the base holds), or, a subclass of its base too, a Held's (held: changed)."""
    made = CLASSES if names is None or names[0] is None else THEIRS
    if (bits, base, names, changed) not in made:
        if made is THEIRS and len(THEIRS) >= CLASS_CAP:
            return remote_class(bits, base, None, changed)
        if len(CLASSES) > 256:  # (a forged answer's many: made anew)
            CLASSES.clear()
        name, qualname, module = names[1:4] if names else ("Remote", "Remote", __name__)
        space = {"__slots__": () if base else STATE, "__module__": module, "__qualname__": qualname}
        space.update(held(bits, base, changed) if base in HELD else (("__%s__" % trait, base and (
            VALUED.get(trait)) or METHODS.get(trait, refused)) for i, trait in enumerate(
                TRAITS) if bits >> i & 1))
        if bits >> IDENTITY & 1:  # (its type keeps object's == and hash: sandbox_bases.py:traits)
            space.update(__eq__=identical, __hash__=vars(object)["__hash__"])
        space.update(ENUMERATING if base is None and bits & LISTED else ())  # (an Enum class's)
        if base is None and names and len(names) > 4:  # (the context's classes among its bases)
            space["_Remote__class"] = standing(name, qualname, module, names[4])
        fields = dataclass_fields(names[5]) if base is None and len(names or "") > 5 and names[
            5] else None  # (not a Valued's: replace() would build its base of its fields)
        if fields is not None:  # (a dataclass's: asdict, astuple and fields read them)
            space["__dataclass_fields__"] = Fields(fields)
        try:
            if base is not None and base not in HELD:  # (isinstance with its base holds)
                space["_Remote__class"] = type(name, (base,), {
                    "__slots__": (), "__module__": module, "__qualname__": qualname})
            made[bits, base, names, changed] = type(name, (
                Remote,) if base is None else (base, Remote) if base in HELD else (Valued,), space)
        except Exception:  # (a name type() refuses: a NUL, a lone surrogate)
            return remote_class(bits, base, None, changed)
    return made[bits, base, names, changed]


def held(bits, base, changed):
    """The methods of a Held's class (HELD's subclass): its base's own, on the value it holds
    (which cannot change), but Remote's for its text, attributes and pickling (OWNED: the
    program's) and METHODS' its base lacks (a __call__); of OWN's its class overrides (changed),
    an item read or in-place operator is asked of the program (ASKED), any other refused."""
    found = dict(__slots__=STATE, __hash__=vars(base)["__hash__"], **{
        name: vars(Remote)[name] for name in OWNED})
    found["__new__"] = lambda kind, *spec: base.__new__(kind, *spec[-1:])  # (the value: remote's)
    found["__init__"] = lambda self, token=0, handle=0, *_: Remote.__init__(self, token, handle)
    found.update(("__%s__" % trait, METHODS.get(trait, refused)) for i, trait in enumerate(
        TRAITS) if bits >> i & 1 and "__%s__" % trait not in vars(base))
    found.update(("__%s__" % trait, applying(trait) if trait in ASKED else refused)
                 for i, trait in enumerate(OWN) if changed >> i & 1 and trait not in METHODS)
    return found


class Fields:
    """A program dataclass's __dataclass_fields__ in the test process (remote_class): its Fields
    made here, read on its class as they are (dataclasses.is_dataclass); read on its object
    (fields, asdict, astuple, replace), they are its where the program's process reads its
    class's own there and finds them the same fields still (sandbox_bases.py:applied's "fields":
    an instance's own __dataclass_fields__, its class's __getattribute__ may answer otherwise),
    else the test fails."""
    __slots__ = ("fields",)

    def __init__(self, fields):
        self.fields = fields

    def __get__(self, instance, owner=None):
        if instance is not None and ask("apply", instance._Remote__handle, ["fields"], {}) != [
                *self.fields]:
            raise abort(TypeError("a program dataclass's object tells other fields"))
        return self.fields


def remote(item):
    """The one Remote of a handle (so `is` holds between two answers naming the same object), of
    the reference's kind, traits and class's names (a builtin kind's: its type's); its truth fails
    the test but for a stream's and a re.Match's (the program's type's __bool__ or __len__ could
    answer anew, and one with neither, always true, is no value either); a Valued where the
    reference ends with its base (valued), or a Held (held); else None. Where the
    reference says its release may run code (the bit past IDENTITY), its handle is URGENT."""
    if not (type(item) is list and len(item) in (4, 5) and type(item[0]) is int and (
            item[1] is None or item[1] == "re.Match" or type(item[1]) is str and item[1] in NAMED)
            and type(item[2]) is int and item[2] >= 0 and (item[3] is None or type(
                item[3]) is list and len(item[3]) in (4, 5, 6) and type(item[3][0]) is int
                and item[3][0] >= 0 and told(item[3][1:4]) is not None
                and all(type(names) is list and len(names) <= cap and all(
                    type(name) is str for name in names) for names, cap in zip(
                        item[3][4:], (16, 64))))):
        return None
    handle, name, spec = item[0], item[1], valued_spec(item[4]) if len(item) == 5 else None
    kind = unpatched("re", "Match") if name == "re.Match" else NAMED.get(name)
    if len(item) == 5 and (spec is None or kind is not None):
        return None
    found = LINK["remotes"].get(handle, lambda: None)()
    if found is None:
        names = None if item[3] is None else (
            *item[3][:4], *[tuple(item[3][k] if len(item[3]) > k else ()) for k in (4, 5)])
        if kind is not None:  # (its type's, whatever the claim)
            names = (None, *[TYPE[slot].__get__(kind) for slot in NAMES])
        bits = traits(kind) if kind is not None else item[2] & ((1 << IDENTITY + 1) - 1 | LISTED)
        if spec is not None:  # (`[0] + s`: a sequence's own concatenation, reflected)
            bits &= ~(1 << IDENTITY)  # (its comparisons are its value's)
            bits |= (1 << TRAITS.index("radd")) if spec[0] in SEQUENCES else 0
            found = remote_class(bits, spec[0], names, spec[1])(TOKEN, handle, *spec)
        else:
            if name != "re.Match" and id(kind) not in STREAM_IDS and (
                    kind is not None or not item[2] >> IDENTITY + 2 & 1):  # (always true: true)
                bits |= 1 << TRAITS.index("bool")
            found = remote_class(bits, None, names)(TOKEN, handle, kind)
        LINK["remotes"][handle] = _weakref.ref(found, noted)  # (no test's: noted)
        if item[2] >> IDENTITY + 1 & 1:  # (a reference's bit, not its class's: any kind's)
            URGENT.add(handle)
        if handle in LINK["released"]:  # collected, but the program still holds it: keep it
            LINK["released"].remove(handle)
    return found


def noted(reference):
    """The callback of the harness's weak reference to a Remote, which makes that reference its
    own: the test's weakref.ref(x) is then another, which Remote.__del__ finds."""


# (the value types whose subclasses' instances keep their base's value: sandbox_bases.py:TAKE)
VALUE_BASES = {kind.__name__: kind for kind in TAKE}  # (and Counter: valued_spec, counted)
SEQUENCES = (bytes, bytearray, list, tuple)  # (`[0] + s`: their __radd__, which they lack)
# each request of the test process's that only took a Valued's value (it runs no program code)
FETCHED = [0]


def valued_spec(spec):
    """(base, overridden's bits, its value where nothing in it can change (lasting), else None)
    of a reference's end (valued's); None if malformed."""
    if not (type(spec) is list and len(spec) == 3 and type(spec[0]) is str
            and type(spec[1]) is int and spec[1] >= 0):
        return None
    base = VALUE_BASES.get(spec[0]) or (counted(True) if spec[0] == "Counter" else None)
    if base is not None and (spec[2] is None and base not in HELD or base in LASTING and type(
            spec[2]) is base):  # (a Held's: its value)
        return base, spec[1], spec[2] if lasting(spec[2]) else None
    return None


HELD = (str, float, complex)  # (a subclass's instance of these may have slots and weak references)
ASKED = ("getitem", *["i" + name for name in ARITHMETIC])  # (a Held's own: asked of the program)
OWNED = ("__getattribute__", "__str__", "__repr__", "__format__", "__reduce_ex__", "__reduce__")


class Valued(Remote):
    """A program's instance of its own subclass of a value type (a Stack(list), an IntEnum's
    member; not HELD's): a program object, whose attributes, methods, text, items read, set or
    deleted and in-place operators are the program's (asked), that keeps its base's value: its
    comparisons, hash, length, truth, iteration, `in`, arithmetic and conversions are Python's on
    that value, here (VALUED), on the one it crossed with where it cannot change, else on one
    taken anew after each request that may run program code (based); where its class overrides
    one of them (OWN, and what its base's own asks: sandbox_bases.py:overridden), that one fails
    the test (its own method could answer anything, its base's is not plain Python's answer), as
    does keys() where dict(x) would copy its storage instead (KEYS). isinstance with its base
    holds (its __class__: remote_class), `type(x) is` and `x.__class__ is` do not."""
    __slots__ = (*STATE, "_Remote__base", "_Remote__changed", "_Remote__value", "_Remote__taken")

    def __init__(self, token, handle, base, changed, value, /):
        Remote.__init__(self, token, handle)
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
            found = ask("apply", self._Remote__handle, ["value", self._Remote__changed], {})
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
    the enum module's answer is no member of that int); a date's that gives a date (SUBCLASSED)
    asked too: plain Python's is an instance of its class, made by its class's code."""
    if name not in FUNCTIONS and not (name[0] == "r" and name[1:] in FUNCTIONS):
        return applying(name)

    def method(self, other, *modulo):
        if name in FUNCTIONS:
            found = FUNCTIONS[name](based(self, name), operand(other, "r" + name), *modulo)
        else:
            found = FUNCTIONS[name[1:]](operand(other, name[1:]), based(self, name), *modulo)
        if name in FLAGGED and self._Remote__changed >> FLAG & 1 and found < 0:
            refused(self)
        if type(found) is self._Remote__base and type(found) in SUBCLASSED:
            return ask("apply", self._Remote__handle, [name, other], {}, [other])
        return found
    return method


def applying(name):
    """A Valued's operation asked of the program (APPLIED's)."""
    return lambda self, *operands: ask("apply", self._Remote__handle, [name, *operands], {},
                                       list(operands))


def on_value(name, function):
    """A Valued's operation `name`: function of its base value (and the operands)."""
    return lambda self, *operands: function(based(self, name), *operands)


def contains(self, other):
    """`other in` a Valued: Python's on its value; an int Flag's member whose class keeps the
    enum module's __contains__ (FLAG) holds another member of its class (of the same class made
    here) whose bits its own hold, and raises TypeError for anything else, as that method does."""
    if not self._Remote__changed >> FLAG & 1:
        return _operator.contains(based(self, "contains"), other)
    if type(other) is not type(self):
        raise TypeError("unsupported operand type(s) for 'in'")
    found = based(other, "contains")
    return found & based(self, "contains") == found


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
          **{name: on_value(name, function) for name, function in dict(
              BUILTINS, hash=builtins.hash, len=builtins.len, iter=builtins.iter,
              bool=builtins.bool, reversed=builtins.reversed).items()},
          "contains": contains, "getitem": item, "setitem": applying("setitem"),
          "delitem": applying("delitem")}
for name in COMPARISONS:
    setattr(Valued, "__%s__" % name, VALUED[name])
