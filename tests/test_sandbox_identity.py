"""A program object whose class keeps object's equality compares and hashes by its identity in the
test process (an Enum's member is one), an int Flag's member holds another of its class, a program
object whose class derives from a class the context declares is an instance of it for isinstance,
issubclass of program classes (never through a metaclass's __bases__) and inspect.signature of a
program's callable are plain Python's, a NamedTuple of the program's with methods of its own keeps
them and its value follows the lists it holds, a test's weak reference to a program object keeps
it alive for the rest of the run, and a tuple of leaves, or a str, int, float or bytes, the test
passes comes back from that call as the test's own object (nanomarl/sandbox_remote.py,
nanomarl/sandbox_bases.py, nanomarl/sandbox_proxies.py:given).
Each case is compared with plain Python; beside each, a wrong program shows the allowance credits
no object whose own code could answer for it."""
from textwrap import dedent

from test_sandbox_semantics import plain, run

LIGHTS = """\
    from enum import Enum, Flag, IntFlag, auto
    class Light(Enum):
        RED = auto()
        GREEN = auto()
    def nxt(c):
        return {Light.RED: Light.GREEN, Light.GREEN: Light.RED}[c]
    class Box:
        pass
    def boxes():
        b = Box()
        return b, b, Box()
    class Perm(IntFlag):
        R = 4
        W = 2
        X = 1
    def rw():
        return Perm.R | Perm.W
    """


def test_an_enum_member_and_a_plain_object_compare_and_hash_by_identity():
    """==, != and hash of an Enum's member or an instance of a class without __eq__ are its
    identity, decided in the test process: dict keys, set members, `in` and `== None` work, a
    value is never equal to it; an IntFlag's member holds the members whose bits it has."""
    tests = ["assert nxt(Light.RED) == Light.GREEN and nxt(Light.RED) != Light.RED",
             "assert {nxt(Light.RED): 1}[Light.GREEN] == 1 and Light.RED in {nxt(Light.GREEN)}",
             "a, b, c = boxes(); assert a == b and a != c and len({a, b, c}) == 2",
             "a, b, c = boxes(); assert a != 1 and not (a == [a]) and a != None and a in [c, b]",
             "assert Light.RED.__eq__(1) is NotImplemented",
             "assert Perm.W in rw() and Perm.X not in rw()",
             "1 in rw()"]
    expected = [True, True, True, True, True, True, False]
    assert plain(LIGHTS, tests) == expected
    result = run(LIGHTS, tests)
    assert result["passed"] == [True, True, True, True, False, True, False], result["errors"]


def test_identity_credits_no_object_whose_own_code_could_answer():
    """A class given an always-true __eq__ after its object first crossed, one whose __class__
    claims a plain class, one whose __contains__ is its own, and the program's copy of the
    context's class or the class made for type(x): each fails the test where plain Python would
    credit it (or judges it by identity, never by the program's code)."""
    context = "class Shape:\n    pass\n"
    program = context + dedent("""\
    class Eq:
        pass
    def make():
        return Eq()
    def cheat():
        Eq.__eq__ = lambda self, other: True
        Eq.__hash__ = lambda self: 0
    class Liar:
        __eq__ = lambda self, other: True
        __hash__ = object.__hash__
        __class__ = property(lambda self: object)
    def liar():
        return Liar()
    from enum import IntFlag
    class Loose(IntFlag):
        A = 1
        B = 2
        def __contains__(self, other):
            return True
    def shape_class():
        return Shape
    """)
    tests = ["x = make(); cheat(); assert x == [1, 2]",
             "assert liar() == [1, 2]",
             "assert Loose.B in Loose.A",
             "assert shape_class() != Shape",
             "assert type(make()) != Eq",
             "x = liar(); assert x.__eq__([1, 2]) or x == x"]
    assert plain(program, tests) == [True, True, True, False, False, True]
    result = run(program, tests, context=context, names=["make", "cheat", "liar", "Loose",
                                                         "shape_class", "Eq"])
    assert result["passed"] == [False, False, False, False, False, False], result["errors"]


SHAPES = dedent("""\
    import abc
    REGISTRY = []
    class Shape:
        def __init_subclass__(cls):
            REGISTRY.append(cls.__name__)
        def area(self):
            raise NotImplementedError
    class Drawable(abc.ABC):
        @abc.abstractmethod
        def draw(self):
            pass
    """)
CIRCLES = dedent("""\
    class Circle(Shape, Drawable):
        def __init__(self, r):
            self.r = r
        def area(self):
            return 3 * self.r ** 2
        def draw(self):
            return "o"
    class Animal:
        pass
    class Dog(Animal):
        pass
    class Fake:
        __class__ = property(lambda self: Shape)
    def fake():
        return Fake()
    """)


def test_a_program_object_is_an_instance_of_the_contexts_class_it_derives_from():
    """isinstance with the context's classes among its class's ancestry holds (an ABC's too), its
    methods stay the program's, no code of the context's class runs for it in the test process
    (its __init_subclass__ registers nothing in the test's registry, where plain Python's one
    process registers the program's class); issubclass of program classes is Python's."""
    tests = ["c = Circle(2); assert isinstance(c, Shape) and isinstance(c, Drawable)",
             "c = Circle(2); assert c.area() == 12 and c.draw() == 'o'",
             "assert type(Circle(1)).__name__ == 'Circle' and not isinstance(Dog(), Shape)",
             "assert issubclass(Dog, Animal) and not issubclass(Animal, Dog)",
             "assert issubclass(Dog, object) and not issubclass(Dog, int)",
             "assert 'Circle' not in REGISTRY"]
    program = SHAPES + CIRCLES
    assert plain(program, tests) == [True, True, True, True, True, False]
    result = run(program, tests, context=SHAPES, names=["Circle", "Animal", "Dog"])
    assert result["passed"] == [True] * 6, result["errors"]


def test_isinstance_credits_no_lying_class_nor_a_redefined_context_class():
    """An object whose __class__ claims the context's class (its type does not derive from it),
    and the instance of a program class deriving from the program's own redefinition of the
    context's class, are no instances of the context's class in the test process."""
    program = SHAPES + CIRCLES + "class Shape:\n    pass\nclass Square(Shape):\n    pass\n"
    tests = ["assert isinstance(fake(), Shape)", "assert isinstance(Square(), Shape)"]
    assert plain(program, tests) == [True, True]
    result = run(program, tests, context=SHAPES, names=["fake", "Square"])
    assert result["passed"] == [False, False], result["errors"]


SIGNED = """\
    import functools
    def greet(name: str, punct: str = "!", *rest, key=None, **kw) -> str:
        return name
    class Dog:
        def __init__(self, name, age=3):
            self.name = name
        def speak(self, loud=False):
            return "woof"
    def deco(f):
        @functools.wraps(f)
        def inner(*a, **k):
            return f(*a, **k)
        return inner
    @deco
    def wrapped(a, b=2):
        return a + b
    MARK = object()
    def odd(x=MARK, y=[1]):
        return x
    """


def test_inspect_signature_of_a_program_callable_is_plain_pythons():
    """Its parameters' names, kinds, defaults and annotations, as inspect.signature finds them in
    the program's process (a class's __init__, a bound method, a functools.wraps wrapper); a
    default that is no value is the program's object."""
    tests = ["import inspect\nassert str(inspect.signature(greet)) == "
             "\"(name: str, punct: str = '!', *rest, key=None, **kw) -> str\"",
             "import inspect; assert list(inspect.signature(Dog).parameters) == ['name', 'age']",
             "import inspect; assert str(inspect.signature(Dog('a').speak)) == '(loud=False)'",
             "import inspect; assert list(inspect.signature(wrapped).parameters) == ['a', 'b']",
             "import inspect; p = inspect.signature(odd).parameters\n"
             "assert p['y'].default == [1] and p['x'].default is MARK",
             "import inspect\n"
             "assert inspect.signature(greet).bind('a', punct='?').arguments == "
             "{'name': 'a', 'punct': '?'}"]
    assert plain(SIGNED, tests) == [True] * 6
    result = run(SIGNED, tests, names=["greet", "Dog", "wrapped", "odd", "MARK"])
    assert result["passed"] == [True] * 6, result["errors"]


POINTS = """\
    import json
    from collections import namedtuple
    from typing import NamedTuple
    class Point(NamedTuple):
        x: int
        y: int
        def norm1(self):
            return abs(self.x) + abs(self.y)
        @property
        def flipped(self):
            return Point(self.y, self.x)
    class Pair(namedtuple("Pair", "a b")):
        __slots__ = ()
        def total(self):
            return self.a + self.b
    Plain = namedtuple("Plain", "a b")
    class Always(NamedTuple):
        x: int
        def __eq__(self, other):
            return True
    def point():
        return Point(3, -4)
    def pair():
        return Pair(1, 2)
    def bare():
        return Plain(1, 2)
    def always():
        return Always(0)
    """


def test_a_programs_namedtuple_with_methods_keeps_them():
    """Its methods and properties are the program's, its value its tuple's (==, indexing,
    unpacking, isinstance with tuple); one without methods of its own still crosses as a
    namedtuple (json.dumps takes it); one whose __eq__ is its own fails a test comparing it."""
    tests = ["assert point() == (3, -4) and point().x == 3 and point().norm1() == 7",
             "assert point().flipped == (-4, 3) and point()[1] == -4",
             "x, y = point(); assert (x, y) == (3, -4) and isinstance(point(), tuple)",
             "assert pair().total() == 3 and pair() == (1, 2) and pair()._asdict() == "
             "{'a': 1, 'b': 2}",
             "import json; assert json.dumps(bare()) == '[1, 2]' and bare().a == 1",
             "assert always() == (5, 5)"]
    assert plain(POINTS, tests) == [True] * 6
    result = run(POINTS, tests)
    assert result["passed"] == [True] * 5 + [False], result["errors"]


CLASSES = """\
    from abc import ABC
    class Shape:
        pass
    class Liar(type):
        @property
        def __bases__(cls):
            return (Shape, int)
    class Square(metaclass=Liar):
        pass
    class Base(ABC):
        pass
    class Circle:
        pass
    Base.register(Circle)
    class Dog(Shape):
        pass
    """


def test_issubclass_of_program_classes_reads_their_ancestry_not_their_metaclass():
    """issubclass of program classes is the program's process's own (its ABC's register holds),
    read from type's slots where the test's class is the second argument: a metaclass whose
    __bases__ lies credits nothing (plain Python reads the class's __mro__), and its __bases__
    read in the test fails the test (a read in one process would be the lie)."""
    tests = ["assert issubclass(Square, Shape)", "assert issubclass(Square, int)",
             "assert issubclass(Circle, Base) and not issubclass(Dog, Base)",
             "assert issubclass(Dog, Shape) and issubclass(Dog, object) and "
             "not issubclass(Dog, int) and Dog.__bases__ == (Shape,)",
             "assert isinstance(Circle(), Base) and not issubclass(int, Shape)",
             "assert Square.__bases__ == (Shape, int)"]
    assert plain(CLASSES, tests) == [False, False, True, True, True, True]
    result = run(CLASSES, tests)
    assert result["passed"] == [False, False, True, True, True, False], result["errors"]


BAGS = """\
    from typing import NamedTuple
    class Bag(NamedTuple):
        items: list
        def add(self, x):
            self.items.append(x)
    class Stack(NamedTuple):
        items: list
        def peek(self):
            return self.items.pop()
    class Row(tuple):
        def grow(self):
            self[0].append(0)
    def bag():
        return Bag([])
    def stack():
        return Stack([1])
    def row():
        return Row(([], 1))
    """


def test_a_namedtuple_of_lists_keeps_the_value_it_has_now():
    """A tuple subclass's value holding a list is taken anew at each question (the list
    changes): its own method's change (a right add, a wrong peek that pops) and the test's own
    change through its field are seen, as in one process."""
    tests = ["b = bag(); b.add(1); assert b == ([1],) and b[0] == [1] and b.items == [1]",
             "b = bag(); b.items.append(2); assert b.items == [2] and b == ([2],)",
             "s = stack(); assert s.peek() == 1 and s == ([1],)",
             "s = stack(); assert s.peek() == 1 and list(s) == [[1]]",
             "r = row(); r.grow(); assert r == ([0], 1) and len(r[0]) == 1",
             "b = bag(); b[0].append(3); assert b == ([3],)"]
    assert plain(BAGS, tests) == [True, True, False, False, True, True]
    result = run(BAGS, tests)
    assert result["passed"] == [True, True, False, False, True, True], result["errors"]


def test_a_weak_reference_to_a_program_object_keeps_it_alive():
    """A proxy dies when the test holds it no more, where the program's object may live on: a
    test's weak reference to it keeps it alive for the rest of the run, so that reference reads
    it still, in a later test too (a leaking program never passes `r() is None`; a failure before
    is no other test's)."""
    program = dedent("""\
    class Node:
        pass
    LEAK = []
    def make():
        LEAK.append(Node())
        return LEAK[-1]
    def other():
        return 1
    """)
    tests = ["import weakref, gc\nr = weakref.ref(make())\ngc.collect()\nassert r() is None",
             "import weakref\nx = make()\nr = weakref.ref(x)\nassert r() is x",
             "import weakref\ns = weakref.WeakSet([make()])\nassert len(s) == 0",
             "import weakref\nn = make()\nw = weakref.ref(n)", "del n\nassert other() == 2",
             "import gc\ngc.collect()\nassert w() is None", "assert w() is not None"]
    assert plain(program, tests) == [False, True, False, True, False, False, True]
    result = run(program, tests)
    assert result["passed"] == [False, True, False, True, False, False, True], result["errors"]


def test_a_namedtuple_whose_fields_are_named_as_methods_is_its_value():
    """A NamedTuple with methods of its own whose fields are named as its base's methods (items,
    keys, values, count, index, copy), held by the program, holding a list: its value and its
    fields are plain Python's, and follow the list."""
    program = dedent("""\
    from typing import NamedTuple
    class Row(NamedTuple):
        items: list
        keys: list
        values: int
        count: int
        index: str
        copy: tuple
        def size(self):
            return len(self.items)
    ROW = Row([1], [2], 3, 4, "i", (5,))
    def get_row():
        return ROW
    def grow():
        ROW.items.append(2)
    """)
    tests = ["assert get_row() == ([1], [2], 3, 4, 'i', (5,))",
             "r = get_row()\nassert r.items == [1] and r.keys == [2] and r.count == 4",
             "r = get_row()\ngrow()\nassert r == ([1, 2], [2], 3, 4, 'i', (5,))",
             "assert get_row().size() == 2 and get_row().index == 'i'",
             "assert get_row() == ([1], [2], 3, 4, 'i', (5,))"]
    assert plain(program, tests) == [True, True, True, True, False]
    result = run(program, tests)
    assert result["passed"] == [True, True, True, True, False], result["errors"]


TUPLES = dedent("""\
    def same(t):
        return t
    def first(rows):
        return rows[0]
    def pair(t):
        return t, t
    def keyed(*, key):
        return key
    def looked_up(d):
        return d["k"]
    def inner(t):
        return t[0]
    def sliced(t):
        return t[:], tuple(t), t + ()
    def rebuilt(t):
        return tuple(list(t))
    def unpacked(t):
        return (*t,)
    def push(rows, t):
        rows.append(t)
    def swap(rows):
        rows.reverse()
    def add_then_raise(seen, t):
        seen.add(t)
        raise ValueError(t)
    def outer(t, cb):
        return t, cb()
    """)


def test_a_tuple_the_test_passes_comes_back_as_the_tests_object():
    """A tuple of leaves (numbers, strings, bytes, None, tuples of them) among a call's arguments
    (an argument, a keyword, inside a list, a dict or another tuple) that the call returns,
    returns inside a new tuple, or puts into an argument container (also where it then raises)
    is the test's own object, as in one process, however often it comes back and where CPython
    hands back the same tuple (t[:], tuple(t), t + ()); one the program builds anew with equal
    items ((*t,), tuple(list(t))) is a new object, as in one process. A nested call's tuple is
    its own call's (the outer call's answer names the outer call's)."""
    tests = ["t = (1, 'a', None, 2.5, b'x', True)\nassert same(t) is t",
             "t = (1, 2)\nassert first([t]) is t and first([[t]])[0] is t",
             "t = (1, 2)\nassert same(t) is same(t)",
             "t = (3,)\nr = pair(t)\nassert r[0] is t and r[1] is t and r is not t",
             "t = (4, 5)\nassert keyed(key=t) is t and looked_up({'k': t}) is t",
             "t = ((1,), (2, 'x'))\nassert inner(t) is t[0] and same(t) is t",
             "t = (6, 7)\nassert all(x is t for x in sliced(t))",
             "t = (8, 9)\nassert rebuilt(t) is t",
             "t = (8, 9)\nassert unpacked(t) is t",
             "t = (8, 9)\nassert rebuilt(t) == t and unpacked(t) == t",
             "rows, t = [], (1, 2)\npush(rows, t)\nassert rows[0] is t",
             "a, b = (1,), (2,)\nrows = [a, b]\nswap(rows)\nassert rows[0] is b and rows[1] is a",
             "seen, t = set(), (1, 2)\ntry:\n    add_then_raise(seen, t)\nexcept ValueError:\n"
             "    pass\nassert next(iter(seen)) is t",
             "a, b = (1,), (2,)\nr = outer(a, lambda: same(b))\nassert r[0] is a and r[1] == b"]
    expected = [True] * 7 + [False, False] + [True] * 5
    assert plain(TUPLES, tests) == expected
    result = run(TUPLES, tests)
    assert result["passed"] == expected, result["errors"]


def test_a_list_inside_an_argument_tuple_is_not_kept_for_that_tuple():
    """A list inside a tuple among a call's arguments (f((L,))) is no more held by the program
    after the call than in plain Python (the call's tuples are let go once its answer is out):
    passed again later, it is walked as the test's list, and the tuple of leaves inside it comes
    back as the test's own object."""
    program = dedent("""\
    def f(x):
        pass
    def g(L):
        return L[0]
    """)
    tests = ["t = (1, 2)\nL = [t]\nf((L,))\nassert g(L) is t",
             "t = (1, 2)\nL = [t]\nf(x=((L,), 3))\nassert g(L) is t and g(L) is t"]
    assert plain(program, tests) == [True, True]
    result = run(program, tests)
    assert result["passed"] == [True, True], result["errors"]


KEPT_TUPLES = dedent("""\
    def same(t):
        return t
    def first(rows):
        return rows[0]
    def remember(rows):
        global ROWS
        ROWS = rows
    def recall():
        return ROWS[0]
    def hold(t):
        global HELD
        HELD = t
    def held():
        return HELD
    def pick(s, t):
        return s[0]
    """)


def test_gap_a_tuple_comes_back_as_the_tests_object_only_from_its_own_call_holding_leaves():
    """A tuple that holds a list, one inside a container the program keeps (the test's list
    passed again, or read back in a later call), one the program holds past its call (a global),
    and one the program reads through a test's object (an item of a subclass of list the context
    declares, which crosses as a reference that neither side walks) come back as copies: equal,
    their lists the test's own, but not the test's tuple (plain Python: the test's); a tuple
    beside such a subclass among the arguments is the test's own; a wrong program that returns
    another argument's tuple is not credited with the tuple it should have returned."""
    tests = ["t = ([1], 2)\nassert same(t) is t",
             "t = ([1], 2)\nr = same(t)\nassert r == t and r[0] is t[0]",
             "rows = [(1, 2)]\nremember(rows)\nassert recall() is rows[0]",
             "assert first(rows) is rows[0]",
             "assert recall() == first(rows) == (1, 2)",
             "t = (7, 8)\nhold(t)\nassert held() is t",
             "assert held() == t",
             "t = (3, 4)\nassert same(Stack([(1, 2)])) == [(1, 2)] and pick(Stack([(1, 2)]), t) "
             "== (1, 2)",
             "t = (3, 4)\nassert pick(Stack([t]), (1, 2)) is t",
             "t = (3, 4)\nassert same((Stack([1]), t))[1] is t"]
    context = "class Stack(list):\n    pass\n"
    assert plain(context + KEPT_TUPLES, tests) == [True] * 10
    result = run(KEPT_TUPLES, tests, context=context)
    expected = [False, True, False, False, True, False, True, True, False, True]
    assert result["passed"] == expected, result["errors"]


LEAVES = dedent("""\
    def same(x):
        return x
    def second(a, b):
        return b
    def first(rows):
        return rows[0]
    def pair(s):
        return s, [s]
    def keyed(*, key):
        return key
    def push(rows, s):
        rows.append(s)
    def joined(s):
        return ''.join(list(s))
    def reparsed(n):
        return int(str(n))
    def hold(s):
        global HELD
        HELD = s
    def held():
        return HELD
    """)


def test_a_str_or_int_the_test_passes_comes_back_as_the_tests_object():
    """A str, int, float or bytes among a call's arguments (not inside a container) that the call
    returns, returns inside a new tuple or list, or puts into an argument container is the test's
    own object, as in one process (`f(s) is s`, a NaN's too). A wrong program is credited with no
    identity plain Python denies it: one that returns an equal copy (''.join(list(s)),
    int(str(n))), another argument equal to the one asked for, an item of an argument container
    or an argument of an earlier call gives an object that is not the test's (the last two also
    where plain Python would hold: a gap, as for a tuple the program holds past its call)."""
    tests = ["s = ''.join(['hello', ' world'])\nassert same(s) is s",
             "n = 10 ** 30 + 7\nassert same(n) is n and same(-n) == -n",
             "x, b = 1.5 + 0.25, bytes([1, 2]) * 3\nassert same(x) is x and same(b) is b",
             "x = float('nan')\nassert same(x) is x",
             "a, b = ''.join(['a', 'b']), ''.join(['a', 'b'])\nassert second(a, b) is b",
             "s = ''.join(['x', 'y'])\nr = pair(s)\nassert r[0] is s and r[1][0] is s",
             "s = ''.join(['x', 'y'])\nassert keyed(key=s) is s",
             "rows, s = [], ''.join(['x', 'y'])\npush(rows, s)\nassert rows[0] is s",
             "s = ''.join(['x', 'y'])\nassert joined(s) == s and joined(s) is not s",
             "n = 10 ** 30 + 7\nassert reparsed(n) == n and reparsed(n) is not n",
             "a, b = ''.join(['a', 'b']), ''.join(['a', 'b'])\nassert second(b, a) is b",
             "n = 10 ** 30 + 7\nassert reparsed(n) is n",
             "s = ''.join(['x', 'y'])\nassert first([s]) == s and first([s]) is s",
             "s = ''.join(['x', 'y'])\nhold(s)\nassert held() == s and held() is s"]
    expected = [True] * 10 + [False, False, True, True]
    assert plain(LEAVES, tests) == expected
    result = run(LEAVES, tests)
    assert result["passed"] == expected[:12] + [False, False], result["errors"]


def test_a_forged_argument_mark_names_no_object_but_that_calls_argument():
    """The mark a program's process sends for an argument it hands back ({"g": k}) names only the
    k-th argument of the call it answers: one forged past them, or in a call that has none, fails
    the test (the harness's refusal), never naming another object of the test's; one naming an
    argument is what plain Python gives a program that returns it."""
    program = dedent("""\
        import gc
        for found in gc.get_objects():
            if type(found) is dict and "Dumped" in found and "hook" in found:
                Dumped = found["Dumped"]
        def forged(k, *args):
            return Dumped('{"g":%d}' % k, None)
        def unasked():
            return Dumped('{"g":0}', None)
        def same(s):
            return s
        """)
    tests = ["s = ''.join(['x', 'y'])\nassert forged(1, s) is s",
             "s = ''.join(['x', 'y'])\nassert same(s) is s and forged(5, s) is s",
             "s = ''.join(['x', 'y'])\nassert same(s) is s\nunasked()",
             "s = ''.join(['x', 'y'])\nassert forged(3, s) == s"]
    assert plain(program.replace('"Dumped" in found', "False"), ["assert same(1) == 1"]) == [True]
    result = run(program, tests, max_timeouts=5)
    assert result["passed"] == [True, False, False, False], result["errors"]
