"""sandbox_proxies.py: a test object as the program's process sees it (sandbox.py's docstring has
the threat model), executed inside the sandbox as the module `sandbox_proxies` (sandbox.py's BOOT).
A test object (a callback, a test class or its instance, an iterator) is there a TestObject, whose
every operation is a request the test process answers with the test's own methods (asked,
sandbox_link.py:request), of a subclass made once for each class of the test's (test_object,
proxy_class) from what the test process tells of that class (looks): its name, qualified name and
module (type(x).__name__ is the test's class's), whether its objects are callable (only then has
the subclass a __call__: callable(x) is as in one process), its dataclass fields
(dataclasses.fields, asdict, astuple and replace work; vars(x) is a copy of their values), its
__slots__ and the builtin value type it derives from: an instance of a test's Row(list) is a list
for isinstance (its __class__ a stand-in), one of a W(str) or an IntEnum's member a real str or
int there too, holding its value (reference; str.join and json read it); the proxy class of a
test's own class is a TestClass, whose public names it lacks are that class's (type(x).count).
Where the test process tells nothing of the class ({"x": n}), the subclass is named TestObject and
callable, or made from the program's class of the name the context declares. A proxy holds no
code of the test's, and the test process serves only the handles it gave; its answers to the
program's requests come back through program_answered. A test's object that crosses as a copy
(sandbox_copies.py:copied) is rebuilt there (rebuilt_copy). A tuple of a call's arguments, or an
argument that is a str, int, float, bytes or complex, that the call sends back is the test's own
(given). What the program may read and set of a test object at all (sandbox_verdicts.py:test_ops
does it) is readable and settable. Of the program's own objects: the attributes of one rebuilt in
the test process (state) and those a request reached whose release may run code now (urgent)."""
import sys

from _collections_abc import Mapping, MutableMapping, Sequence

from sandbox_bases import TAKE, finalizing, lasting, value_base  # sandbox.py's BOOT
from sandbox_copies import (LEAVES, NAMESPACE, PATTERN_METHODS, USER, borrowed,
                            refill)
from sandbox_link import (BUILTINS, COMPARISONS, LINK, OPERATORS, TestTimeout, ask, request,
                          taken)
from sandbox_patches import IMPORT, test_made, unpatched
from sandbox_remote import CLASSES, THEIRS, Remote
from sandbox_stdlib import FINDS, user_copy
from sandbox_values import dump, raised


def asked(op):
    """A TestObject's method: op asked of the test process (a comparison, arithmetic, conversion
    or item assignment: test_ops's cmp, special_op); NotImplemented comes back as such."""
    def method(self, *operands):
        if op in PROTOCOL or op == "isinstance":
            return request(op, self.handle, *operands)
        if not self.own and op in ("eq", "ne"):  # object's own: identity, as there
            return getattr(object, "__%s__" % op)(self, *operands)
        found = (request("cmp", self.handle, op, *operands) if op in COMPARISONS
                 else request("special", self.handle, [op, *operands]))
        return found[0] if type(found) is list and len(found) == 1 else NotImplemented
    return method


class TestObject:
    """A test object, by its handle in the test process, an instance of its class's proxy class
    (proxy_class): its calls, attribute reads, writes and deletions, draws, copies, vars() and
    protocol (truth, length, items, iteration, text, comparisons, arithmetic, conversions, hash,
    isinstance with it as the class, `with`) are asked of that process, where the test's own
    methods answer (asked). Its __class__ is the program's class of the name the context declares
    (isinstance(x, ListNode) holds as in one process), else its proxy class or that class's
    stand-in, a subclass of its value type (STANDS)."""
    __slots__ = ()
    __instancecheck__ = asked("isinstance")
    __setattr__ = lambda self, name, value: request("setattr", self.handle, name, value)
    __delattr__ = lambda self, name: request("delattr", self.handle, name)
    __exit__ = lambda self, *exception: request("exit", self.handle, list(exception))
    __copy__ = lambda self: request("copy", self.handle)  # (copy.copy in the test process)
    __deepcopy__ = lambda self, memo: request("deepcopy", self.handle)
    __dict__ = property(lambda self: Attributes(self, request("vars", self.handle)))

    def __init__(self, handle, kind=None, own=False):
        object.__setattr__(self, "handle", handle)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "own", own)  # its class has its own == or hash (asked there)

    @property
    def __class__(self):  # (no request: the harness's isinstance checks ask this too)
        found = declared_class(self.kind)
        return STANDS.get(type(self), type(self)) if found is None else found

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return request("attr", self.handle, name)

    def __hash__(self):
        return request("hash", self.handle) if self.own else object.__hash__(self)


class Handled(TestObject):
    """The base of a proxy class that holds no value: its handle, kind and own in slots."""
    __slots__ = ("handle", "kind", "own")


del TestObject.__slots__, Handled.__slots__  # (a proxy class's __slots__ are the test's class's)


class Attributes(MutableMapping):
    """vars() of a test's instance (the test process's op "vars": vars_of): a copy of its
    attributes (their containers the test's own), whose writes and deletions are the instance's
    (setattr, delattr: asked, the test's rules; a refusal fails the test), not a dict's storage
    that no request would see."""
    __slots__ = ("owner", "found")

    def __init__(self, owner, found):
        self.owner, self.found = owner, found

    def __setitem__(self, name, value):
        setattr(self.owner, name, value)
        self.found[name] = value

    def __delitem__(self, name):
        delattr(self.owner, name)
        del self.found[name]

    __getitem__ = lambda self, name: self.found[name]
    __iter__ = lambda self: iter(self.found)
    __len__ = lambda self: len(self.found)
    __repr__ = lambda self: repr(self.found)


def declared_class(kind):
    """The program's class of a name the context declares (in the program's process), else None."""
    found = LINK["scope"].get(kind) if type(kind) is str else None
    return found if isinstance(found, type) and found.__module__ == "__main__" else None


PROTOCOL = ("iter", "next", "len", "bool", "getitem", "contains", "str", "repr", "format", "enter")
for name in (*PROTOCOL, *COMPARISONS, *OPERATORS, *BUILTINS):
    setattr(TestObject, "__%s__" % name, asked(name))


def call(self, *args, **kwargs):  # (the __call__ of a callable test object's proxy class)
    return ask("call", self.handle, list(args), kwargs, [*args, *kwargs.values()])


TEXTS = ("__name__", "__qualname__", "__doc__", "__module__")  # (readable)


def texts(self, name):  # (the __getattribute__ of a callable test object's proxy class)
    """A test's function's, method's or class's __name__, __qualname__, __doc__ and __module__ are
    the test's (functools.wraps copies them); its other attributes and those the test process
    refuses (a callable instance's) are TestObject's."""
    if name in TEXTS:
        try:
            return request("attr", object.__getattribute__(self, "handle"), name)
        except Exception:
            pass
    return object.__getattribute__(self, name)


def field_values(self):  # (the __dict__ of a test's dataclass's proxy class: a copy)
    return {f.name: getattr(self, f.name) for f in IMPORT("dataclasses").fields(self)}


class TestClass(type):
    """The metaclass of the proxy class of a test's class (its module __main__): a public name it
    lacks is the test's class's, read, set and deleted there (that class: its instance's
    __class__, asked once; the test process's rules, readable and settable), so
    `type(x).count += 1` counts in the test's class; its other names are its own."""

    def __getattr__(cls, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(tested(cls), name)

    def __setattr__(cls, name, value):
        if name.startswith("_") or "__handle__" not in vars(cls):  # (a subclass's: its own)
            return type.__setattr__(cls, name, value)
        setattr(tested(cls), name, value)

    def __delattr__(cls, name):
        if name.startswith("_") or "__handle__" not in vars(cls):
            return type.__delattr__(cls, name)
        delattr(tested(cls), name)


def tested(cls):
    """The test's class (a TestObject) a TestClass stands for, asked of its first instance."""
    if "__tested__" not in vars(cls):
        type.__setattr__(cls, "__tested__", request("attr", cls.__handle__, "__class__"))
    return vars(cls)["__tested__"]


PROXIES = {}  # the program's process's proxy classes, by (declared name, the class's number)
LOOKS = {}  # the test process's account of each class it told of, by id: (class, its JSON text)
STANDS = {}  # the stand-in (its __class__) of a proxy class of a test's subclass of a value type
# the value types whose subclasses' instances a proxy stands for as such (proxy_class): those
# whose value cannot change hold it (HOLDS: str.join, json and the base's C methods read it)
HOLDS = {kind.__name__: kind for kind in (str, int, float, complex, bytes, tuple, frozenset)}
BASES = {**HOLDS, "list": list, "dict": dict, "set": set, "bytearray": bytearray}


def looks(value):
    """What the test process tells the program's process of a test object's class, for its proxy
    class (test_object): the JSON text of [a number of its own, its __name__, __qualname__ and
    __module__, whether its objects are callable, its dataclass fields ([name, init] each) or
    null, its __slots__ (a str, a tuple or list of them) or null, the name of the value type of
    BASES' it derives from (sandbox_bases.py:value_base) or null], made once for each class
    (kept: its number stays its own)."""
    kind = type(value)
    if id(kind) not in LOOKS:
        module, fields, dataclasses = getattr(kind, "__module__", None), None, sys.modules.get(
            "dataclasses")
        try:
            if dataclasses is not None and dataclasses.is_dataclass(kind):
                fields = [[f.name, bool(f.init)] for f in dataclasses.fields(kind)]
        except Exception:  # (a class's own __dataclass_fields__ of another kind: none)
            pass
        slots, base = getattr(kind, "__slots__", None), value_base(kind)
        if not (type(slots) is str or type(slots) in (tuple, list) and all(
                type(slot) is str for slot in slots)):
            slots = None
        LOOKS[id(kind)] = kind, dump([len(LOOKS), kind.__name__, kind.__qualname__, module if type(
            module) is str else None, callable(value), fields, slots, base and BASES.get(
                base.__name__) and base.__name__], None)
    return LOOKS[id(kind)][1]


def reference(value, handle, declared):
    """The JSON text of a test object for the program's process (sandbox_verdicts.py:test_refer):
    {"X": [its handle, its class's name where the context declares it (declared), whether its
    class has its own == or hash (else compared by identity there), looks' text, and, for an
    instance of a subclass of a value type of HOLDS', its base's value where nothing in it can
    change (sandbox_bases.py:lasting; else none: a proxy of its base's stand-in)]}."""
    kind, base, held = type(value), value_base(type(value)), ""
    if base in HOLDS.values() and lasting(found := TAKE[base](value)):  # (no test code runs)
        held = "," + dump(found, None)
    return '{"X":[%d,%s,%s,%s%s]}' % (handle, dump(kind.__name__ if declared else None, None),
                                      compared(kind), looks(value), held)


def compared(kind):
    """Whether a test object's class has its own == or hash (else it is compared by identity in
    the program's process: TestObject's), as JSON."""
    return "true" if (kind.__eq__ is not object.__eq__ or kind.__ne__ is not object.__ne__
                      or kind.__hash__ is not object.__hash__) else "false"


def harness_class(value):
    """Whether value is a class the test process made for a program object's type or __class__
    (sandbox_remote.py:remote_class): no test object, never sent to the program."""
    return issubclass(value, Remote) or any(vars(kind).get("_Remote__class") is value
                                            for kind in (*THEIRS.values(), *CLASSES.values()))


def state(value):
    """An object's attributes: its __dict__ and the slots set."""
    found = dict(getattr(value, "__dict__", None) or {})
    for kind in type(value).__mro__:
        slots = vars(kind).get("__slots__", ())
        for name in [slots] if type(slots) is str else slots:
            if type(name) is str and name not in found and hasattr(value, name) and (
                    name not in ("__dict__", "__weakref__")):
                found[name] = getattr(value, name)
    return found


def urgent(reached, refs, ids):
    """The handles of the program objects a request reached (its target, those it passed back,
    a bound method's instance) whose release may run code now (sandbox_bases.py:finalizing: a
    finalizer attached after they crossed), for the test process to release at once (the
    answer's "u": sandbox_remote.py:URGENT)."""
    found = set()
    for handle in set(reached):
        value = refs.get(handle)
        owner = ids.get(id(value.__self__)) if type(value) is METHOD else None
        found.update(h for h in (handle, owner) if h in refs and finalizing(refs[h]))
    reached.clear()
    return sorted(found)


METHOD = type((lambda: None).__get__(0))  # types.MethodType: a bound method


def vars_of(value):
    """vars() of a test object, in the test process (its op "vars"): a copy of a test's instance's
    own attributes (no dunder; its containers the test's own, lent), where the classes of its
    ancestry are the test's or builtins (never a mock's records); else AttributeError, as for an
    object of no __dict__."""
    kind = type(value)
    if not test_made(value) or isinstance(value, type) or any(owner.__module__ not in (
            "__main__", "builtins") for owner in kind.__mro__) or not hasattr(value, "__dict__"):
        raise AttributeError("__dict__")
    return {name: found for name, found in vars(value).items()
            if type(name) is str and not name[:2] == name[-2:] == "__"}


def settable(value, name, deleting=False):
    """Whether the program may set this attribute of a test object: an attribute (no dunder) of
    an instance of a test's class which its class does not define, or defines as a slot, a
    property with a setter (which runs), or plain data (a default the instance's own shadows: no
    callable, no descriptor); of a test's class, a name its metaclass lacks, that its ancestry
    defines as plain data or not at all; never a method or other object a test's later call
    would find there. Deleting, any such attribute of an instance (a method of its class stays:
    AttributeError), a class's own plain data."""
    if type(name) is not str or name[:2] == name[-2:] == "__" or not test_made(value):
        return False
    kind = value if isinstance(value, type) else type(value)
    if kind is value and (hasattr(type(value), name) or deleting and name not in vars(value)):
        return False
    for owner in () if deleting and kind is not value else kind.__mro__:
        if name in vars(owner):
            found = vars(owner)[name]
            return (kind is not value and (type(found).__name__ == "member_descriptor" or type(
                found) is property and found.fset is not None)
                or not callable(found) and not hasattr(type(found), "__get__"))
    return True


def readable(value, name):
    """Whether the program may read this attribute of a test object: one (no dunder) of a test's
    class or instance, or of a unittest.mock object one its mock class does not define (what the
    mock stands for, a mock_open's read, never the mock's records, resets or configuration); a
    test's function's, method's or class's __name__, __qualname__, __doc__ or __module__ where it
    is a str or None (texts); a test's instance's __class__ (TestClass)."""
    if name in ("__name__", "__qualname__", "__doc__", "__module__"):
        return (type(value).__module__ == "builtins" and type(value).__name__ in (
            "function", "method") or isinstance(value, type) and test_made(value)) and type(
            getattr(value, name, None)) in (str, type(None))
    if name == "__class__":
        return test_made(value) and not isinstance(value, type)
    if type(name) is not str or name[:2] == name[-2:] == "__":
        return False
    if type(value).__module__ == "unittest.mock":
        return not name.startswith("_") and not hasattr(type(value), name)
    return test_made(value)


def test_object(item, made, declared):
    """The program's proxy of a test object, {"X": [its handle, the name of its class where the
    context declares it (declared: those names), whether its class has its own == or hash, what
    looks tells of its class (where the test process tells), its base's value (reference)]}: the
    one made for that handle (made), else an instance of its class's proxy class (proxy_class,
    made the first time; holding that value); None if malformed."""
    if not (type(item) is list and len(item) in (3, 4, 5) and type(item[0]) is int and (
            item[1] is None or item[1] in declared) and type(item[2]) is bool):
        return None
    if item[0] not in made:
        told = item[3] if len(item) >= 4 and type(item[3]) is list and len(item[3]) == 8 and type(
            item[3][0]) is int else None
        base = BASES.get(told[7]) if told is not None and type(told[7]) is str else None
        if len(item) == 5 and (base not in HOLDS.values() or type(item[4]) is not base):
            return None
        key = (item[1], None if told is None else told[0], len(item) == 5)
        if key not in PROXIES:
            try:
                PROXIES[key] = proxy_class(item[1], told, len(item) == 5, item[0])
            except Exception:  # (a name type() refuses: a proxy class of no name of the test's)
                PROXIES[key] = proxy_class(None, None)
        if len(item) == 5 and issubclass(PROXIES[key], base):  # (by its base's constructor)
            made[item[0]] = base.__new__(PROXIES[key], item[4])
            TestObject.__init__(made[item[0]], *item[:3])
        else:
            made[item[0]] = PROXIES[key](*item[:3])
    return made[item[0]]


def held_attribute(self, name):  # (the __getattribute__ of a proxy class that holds a value)
    """Its data and methods are the test object's, asked (its base's would answer for its copy
    of the value); its dunders and the harness's names are its class's."""
    if name[:2] == "__" or name in ("handle", "kind", "own"):
        return object.__getattribute__(self, name)
    return request("attr", object.__getattribute__(self, "handle"), name)


def proxy_class(kind, told, holds=False, handle=None):
    """A test object's proxy class, a subclass of TestObject: as the test process tells of its
    class (looks); where it tells nothing, of the program's class of a name the context declares
    (kind: its name, a __call__ where that class has one, its dataclass fields), else TestObject
    by name, callable (a callback's). Of a test's subclass of a value type of BASES', it is a
    subclass of that type too where it holds the value (holds: one of HOLDS'), else its stand-in
    is (its __class__: isinstance with that type holds; `match` takes it as a sequence or a
    mapping as its type's, asking it for its items). Its __slots__ are the test's class's; of a
    test's own class (its module __main__), it is a TestClass, handle its first instance's."""
    declared, fields, slots, base = declared_class(kind), None, None, None
    if told is not None:
        _, name, qualname, module, calls, fields, slots, base = told
    elif declared is not None:
        name, qualname, module = declared.__name__, declared.__qualname__, "__main__"
        calls = any("__call__" in vars(k) for k in declared.__mro__[:-1])
    else:
        name, qualname, module, calls = "TestObject", "TestObject", __name__, True
    namespace = {"__module__": module, "__qualname__": qualname, "__dict__": vars(TestObject)[
        "__dict__"]}  # (its own: a class that holds a value would have the instances' dict's)
    base = BASES.get(base) if type(base) is str else None
    if calls is True:
        namespace.update(__call__=call, __getattribute__=texts)
    if holds:
        namespace["__getattribute__"] = held_attribute
    made = None  # (the dataclass whose fields its instances have)
    if hasattr(declared, "__dataclass_fields__") and (fields is not None or told is None):
        made = declared  # (replace() makes an instance of it: its __class__)
    elif type(fields) is list and all(
            type(f) is list and len(f) == 2 and type(f[0]) is str for f in fields):
        dataclasses = IMPORT("dataclasses")
        made = dataclasses.make_dataclass(name, [(f[0], "typing.Any", dataclasses.field(
            init=f[1] is True)) for f in fields])
    if made is not None:
        namespace.update(__dataclass_fields__=made.__dataclass_fields__, __dict__=property(
            field_values), __dataclass_params__=made.__dataclass_params__)
    if not holds:
        namespace["__slots__"] = ()  # (no instance dict: its handle in Handled's slots)
    if module == "__main__" and told is not None and type(handle) is int:
        namespace["__handle__"] = handle
    found = (TestClass if "__handle__" in namespace else type)(
        name, (TestObject, base) if holds else (Handled,), namespace)
    if base is not None and not holds:
        STANDS[found] = type(name, (base,), {"__module__": module, "__qualname__": qualname})
        if base in (list, tuple, dict):  # (its type's flag, which `match` reads)
            (Mapping if base is dict else Sequence).register(found)
    if type(slots) in (str, tuple, list):  # (read only: the layout is the class's own)
        for owner in (found, STANDS.get(found, found)):
            owner.__slots__ = slots
    elif "__slots__" in vars(found):  # (a class of none has none)
        del found.__slots__
    return found


def program_answered(message):
    """The test process's answer to a program's request (a callback's value): its news of the
    containers taken, the patches in force where the callback changed them (retake)."""
    _, _, status, payload, extra = message
    taken(extra, LINK["args"][-1] if LINK["args"] else ())
    LINK["retake"](extra)  # (a patch the callback started, stopped or set)
    if status == "v":
        return payload
    if status == "e" and type(payload) is list and payload[:1] == ["StopIteration"]:
        raise StopIteration
    if status == "e" and (error := raised(payload)) is not None:
        raise error
    raise TestTimeout()


def given(tuples, extra):
    """Marks (sandbox_values.py:dump's aliases) of a call's leaf arguments and arguments' tuples
    that are the test's own objects, for its answer's value and write-backs: the k-th of tuples
    (the leaves, sandbox_copies.py:leaves, then the tuples of their walk outside kept containers:
    sandbox_copies.py:containers; alive while the marks are used) is {"g": k} where it is a leaf
    or a tuple of immutable leaves alone (numbers, strings, bytes, None, tuples of them: the
    test's equal tuple can hold nothing the program changed), and only where the test process
    numbered as many of each (extra's "t": both walks meet the same tuples, a test's subclass of
    list or tuple crossing as a reference that neither walks; a check that marks none where they
    differ). A str or tuple the program built is another object: a copy."""
    if not tuples or [sum([type(x) is not tuple for x in tuples]), len(tuples)] != extra.get("t"):
        return {}
    leaf, found = {}, {}
    for k in reversed(range(len(tuples))):  # (inner ones first: the walk met them after)
        value = tuples[k]
        if type(value) is not tuple:  # (an argument that is a str, an int, ...: leaves)
            found[id(value)] = '{"g":%d}' % k
            continue
        leaf[id(value)] = all([type(item) in LEAVES or type(item) is tuple and leaf.get(
            id(item), False) for item in value])
        if leaf[id(value)]:
            found[id(value)] = '{"g":%d}' % k
    return found


def rebuilt_copy(tag, item, lent=()):
    """The program's copy of a test's object (copied's JSON, decoded), or its lent object (lent:
    the kept, their ids and tags and the calls borrowed takes); None if the tag is neither's or a
    lent one is malformed; ValueError if a copy is malformed."""
    if tag == "N" or tag == "A":
        return borrowed(tag, item, *lent) if lent else None
    if tag not in ("P", "B", "U", "p", "H", "j", "u"):
        return None
    kind = type(item)
    if tag == "P" and kind is list and len(item) == 3 and callable(item[0]) and (
            type(item[1]) is list and type(item[2]) is dict and all(
                type(key) is str for key in item[2])):
        return unpatched("functools", "partial")(item[0], *item[1], **item[2])
    if tag == "U" and item is None:
        return unpatched("random", "SystemRandom")()
    if tag == "U" or tag == "j" and kind is dict or tag == "B" and kind is list and len(
            item) == 3 and item[0] in ("s", "b"):  # (filled as a write-back fills one)
        made = (unpatched("random", "Random")() if tag == "U" else NAMESPACE() if tag == "j"
                else unpatched("io", "StringIO" if item[0] == "s" else "BytesIO")())
        refill(made, item)
        return made
    if tag == "u" and kind is list and len(item) == 2 and item[0] in USER:
        made = user_copy(unpatched("collections", item[0])())
        refill(made, item[1])  # (a UserDict's a dict: filled as a write-back fills one)
        return made
    if tag == "p" and kind is list and len(item) == 3 and type(item[1]) is int and (
            item[2] is None or item[2] in PATTERN_METHODS):
        pattern = unpatched("re", "compile")(item[0], item[1])
        return pattern if item[2] is None else getattr(pattern, item[2])
    if tag == "H" and kind is list and len(item) == 6 and type(item[5]) is list and len(
            item[5]) == 2 and item[5][0] in FINDS + ("finditer",) and type(item[5][1]) is int:
        pattern = unpatched("re", "compile")(item[0], item[1])
        how, n = item[5]
        if how != "finditer":
            return getattr(pattern, how)(item[2], item[3], item[4])
        for k, found in enumerate(pattern.finditer(item[2], item[3], item[4])):
            if k == n:
                return found
    raise ValueError("malformed value")
