"""sandbox.py against plain Python for a program object as the test process sees it
(sandbox_remote.py): its builtin type decided by the identity of that type, never by a name the
program sets; only the protocol methods its type has (callable(), hasattr, the ABCs, truth, hash);
its own __enter__ and __exit__ run by a test's `with`. And the values that cross: nested some
thousands deep (arguments, results, kept ones) and a NamedTuple the context makes by assignment.
Each right program is checked beside the wrong one it must not credit."""
import textwrap

from test_sandbox_semantics import plain, run


def test_a_program_object_is_of_a_builtin_type_only_where_its_type_is_that_type():
    """A program's own class named `generator` or `function` in module builtins, or `Match` in
    module re (or whose metaclass claims equality with the generator type) is no generator,
    function or re.Match: isinstance, inspect and callable() say so, as in plain Python; a real
    generator, closure and re.Match are (a re.Match is true, as each one is)."""
    program = """\
        class generator:
            pass
        generator.__module__ = "builtins"
        class function:
            pass
        function.__module__ = "builtins"
        class Meta(type):
            def __eq__(cls, other):
                return True
            def __hash__(cls):
                return hash(type((lambda: (yield))()))
        class Forged(metaclass=Meta):
            pass
        class Match:
            pass
        Match.__module__ = "re"
        import re
        def find(s):
            return re.search(r"[0-9]+", s)
        def fake_find(s):
            return Match()
        def fake_squares(n):
            return generator()
        def fake_adder(n):
            return function()
        def forged(n):
            return Forged()
        def squares(n):
            for i in range(n):
                yield i * i
        def make_adder(n):
            def add(x):
                return x + n
            return add
        """
    wrong = ["import types; assert isinstance(fake_squares(3), types.GeneratorType)",
             "import inspect; assert inspect.isgenerator(fake_squares(3))",
             "import inspect; assert inspect.isfunction(fake_adder(1))",
             "assert callable(fake_adder(1))",
             "import types; assert isinstance(forged(3), types.GeneratorType)",
             "import re; assert isinstance(fake_find('a1'), re.Match)"]
    right = ["import types, inspect\ng = squares(3)\n"
             "assert isinstance(g, types.GeneratorType) and inspect.isgenerator(g)\n"
             "assert list(g) == [0, 1, 4]",
             "import inspect\nf = make_adder(1)\n"
             "assert inspect.isfunction(f) and callable(f) and f(2) == 3",
             "import inspect; assert not inspect.isgenerator(forged(3))",
             "import re\nm = find('a12')\n"
             "assert isinstance(m, re.Match) and m and m.group() == '12'"]
    assert plain(program, wrong + right) == [False] * 6 + [True] * 4
    result = run(program, wrong + right)
    assert result["passed"] == [False] * 6 + [True] * 4, result["errors"]


def test_a_program_object_has_only_the_protocol_methods_its_type_has():
    """callable(), hasattr and the ABCs (Iterator, Sized, Callable, Hashable) answer as in plain
    Python: a plain instance is none of them, a closure is callable, a class with __len__ is Sized;
    len() and hash() of one whose type has none are plain Python's TypeError. A method its type has
    is still never asked (len()), nor is its truth decided (it is no value)."""
    program = """\
        class Plain:
            pass
        class Measured:
            def __len__(self):
                return 2
        class Counter:
            def __init__(self, n):
                self.i, self.n = 0, n
            def __iter__(self):
                return self
            def __next__(self):
                self.i += 1
                if self.i > self.n:
                    raise StopIteration
                return self.i
        class Keyed:
            def __eq__(self, other):
                return self is other
        def plain_object():
            return Plain()
        def make_adder(n):
            def add(x):
                return x + n
            return add
        def squares(n):
            yield from (i * i for i in range(n))
        """
    wrong = ["assert callable(plain_object())",
             "import collections.abc as c; assert isinstance(plain_object(), c.Iterator)",
             "import collections.abc as c; assert isinstance(plain_object(), c.Sized)",
             "import collections.abc as c; assert isinstance(plain_object(), c.Callable)",
             "assert hasattr(plain_object(), '__iter__') or hasattr(plain_object(), '__next__')",
             "assert hasattr(plain_object(), '__len__') or hasattr(plain_object(), '__enter__')",
             "import collections.abc as c; assert isinstance(Keyed(), c.Hashable)"]
    right = ["f = make_adder(1)\nassert callable(f) and f(2) == 3",
             "import collections.abc as c\n"
             "assert isinstance(Measured(), c.Sized) and not callable(Measured())",
             "import collections.abc as c\nr = Counter(2)\n"
             "assert isinstance(r, c.Iterator) and hasattr(r, '__next__') and not callable(r)",
             "import collections.abc as c\ng = squares(3)\n"
             "assert isinstance(g, c.Iterator) and list(g) == [0, 1, 4]",
             "assert not callable(plain_object())",
             "try:\n    hash(Keyed())\n    assert False\nexcept TypeError:\n    pass",
             "try:\n    len(plain_object())\n    assert False\nexcept TypeError:\n    pass",
             "assert plain_object()"]  # (neither __bool__ nor __len__: true, as in one process)
    refused = ["assert len(Measured()) == 2"]  # (its own __len__: never asked)
    tests = wrong + right + refused
    assert plain(program, tests) == [False] * 7 + [True] * 9
    result = run(program, tests)
    assert result["passed"] == [False] * 7 + [True] * 8 + [False], result["errors"]
    assert "program object" in result["errors"][-1], result["errors"]


def test_a_program_object_is_a_context_manager_with_its_own_enter_and_exit():
    """A test's `with` on a program's context manager (its class, a contextlib.contextmanager)
    runs its __enter__ and __exit__ in the program's process: __exit__ gets the test's exception
    (its class, without its arguments; a test's own exception as a class of that name) and its
    result's truth,
    decided in the test process, suppresses it; an exception the program re-raises is the test's
    own object. A manager that does not suppress it, or a failing body, fails the test."""
    program = """\
        import contextlib
        class Timer:
            def __init__(self):
                self.entered = self.exited = False
            def __enter__(self):
                self.entered = True
                return self
            def __exit__(self, kind, error, traceback):
                self.exited = True
                self.kind = None if kind is None else kind.__name__
                return False
        class Suppress:
            def __init__(self, name):
                self.name = name
            def __enter__(self):
                return self
            def __exit__(self, kind, error, traceback):
                return kind is not None and kind.__name__ == self.name
        @contextlib.contextmanager
        def collecting(log):
            log.append("start")
            try:
                yield log
            finally:
                log.append("end")
        @contextlib.contextmanager
        def ignoring(name):
            try:
                yield
            except Exception as e:
                if type(e).__name__ != name:
                    raise
        """
    right = ["with Timer() as t:\n    pass\nassert t.entered and t.exited and t.kind is None",
             "t = Timer()\ntry:\n    with t:\n        raise KeyError('k')\nexcept KeyError:\n"
             "    pass\nassert t.exited and t.kind == 'KeyError'",
             "log = []\nwith collecting(log) as l:\n    l.append('mid')\n"
             "assert l is log and log == ['start', 'mid', 'end']",
             "with Suppress('ValueError'):\n    raise ValueError('boom')",
             "try:\n    with Suppress('KeyError'):\n        raise ValueError('other')\n"
             "except ValueError as e:\n    assert str(e) == 'other'",
             "with ignoring('ZeroDivisionError'):\n    1 / 0",
             "class Mine(Exception):\n    pass\ne = Mine('x')\ntry:\n"
             "    with ignoring('Mine'):\n        raise e\nexcept Mine:\n    assert False",
             "class Mine(Exception):\n    pass\ne = Mine('x')\ntry:\n"
             "    with ignoring('ValueError'):\n        raise e\nexcept Mine as caught:\n"
             "    assert caught is e"]
    wrong = ["with Suppress('ValueError'):\n    raise KeyError('boom')",
             "with Timer():\n    assert False",
             "log = []\nwith collecting(log):\n    pass\nassert log == ['start']"]
    assert plain(program, right + wrong) == [True] * 8 + [False] * 3
    result = run(program, right + wrong)
    assert result["passed"] == [True] * 8 + [False] * 3, result["errors"]


def test_values_nested_thousands_deep_cross_at_the_default_recursion_limit():
    """An argument, a result (a list, a cons-tuple chain, a dict), a generator's item, an
    attribute, and a container the program keeps, each nested 3,000 deep, cross both ways at the
    default recursion limit (the harness walks them under its own: sandbox_link.py:deep)."""
    program = """\
        def depth(x):
            d = 0
            while isinstance(x, (list, tuple, dict)) and x:
                x = x["k"] if isinstance(x, dict) else x[0]
                d += 1
            return d
        def nest(n):
            x = []
            for _ in range(n):
                x = [x]
            return x
        def cons(n):
            out = None
            for i in range(n):
                out = (i, out)
            return out
        def dicts(n):
            x = {}
            for _ in range(n):
                x = {"k": x}
            return x
        def items(n):
            yield nest(n)
        class Box:
            def __init__(self, n):
                self.v = nest(n)
        KEPT = []
        def kept(n):
            KEPT.append(nest(n))
            return KEPT[-1]
        def wrap(x):
            x.append(nest(3000))
        """
    walk = "k = 0\nwhile r:\n    r = r[0]\n    k += 1\nassert k == 3000"
    tests = ["x = []\nfor _ in range(3000):\n    x = [x]\nassert depth(x) == 3000",
             "r = nest(3000)\n" + walk,
             "r = cons(3000)\nk = 0\nwhile r is not None:\n    r = r[1]\n    k += 1\n"
             "assert k == 3000",
             "r = dicts(3000)\nk = 0\nwhile r:\n    r = r['k']\n    k += 1\nassert k == 3000",
             "r = next(items(3000))\n" + walk,
             "r = Box(3000).v\n" + walk,
             "r = kept(3000)\n" + walk,
             "a = []\nwrap(a)\nassert len(a) == 1 and depth(a) == 3001"]
    assert plain(program, tests) == [True] * 8
    result = run(program, tests, timeout=5.0)
    assert result["passed"] == [True] * 8, result["errors"]


def test_a_namedtuple_the_context_makes_by_assignment_is_declared():
    """`Point = namedtuple("Point", ...)` (collections', typing's functional NamedTuple) in the
    context declares its class as a class statement does: a program's instance crosses as it
    (isinstance, `type(r) is Point`), both ways; a plain tuple stays none, and a program's class
    of that name whose method differs is not the context's (a generic namedtuple in the test)."""
    context = textwrap.dedent("""\
        import collections, typing
        from collections import namedtuple
        Point = namedtuple("Point", ["x", "y"])
        Pair = typing.NamedTuple("Pair", [("a", int), ("b", int)])
        Cell = collections.namedtuple("Cell", "row col")
        Cell.total = lambda self: self.row + self.col
        """)
    body = textwrap.dedent("""\
        def midpoint(a, b):
            return Point((a.x + b.x) / 2, (a.y + b.y) / 2)
        def pair(a, b):
            return Pair(a, b)
        def cell(r, c):
            return Cell(r, c)
        def tuple_of(a, b):
            return (a, b)
        def is_point(p):
            return isinstance(p, Point)
        """)
    tests = ["r = midpoint(Point(0, 0), Point(2, 4))\n"
             "assert r == Point(1.0, 2.0) and isinstance(r, Point) and type(r) is Point",
             "assert type(pair(1, 2)) is Pair and pair(1, 2).b == 2",
             "assert isinstance(cell(1, 2), Cell) and cell(1, 2).total() == 3",
             "assert is_point(Point(1, 2)) and not is_point((1, 2))",
             "assert not isinstance(tuple_of(1, 2), Point) and tuple_of(1, 2) == (1, 2)"]
    names = ["midpoint", "pair", "cell", "tuple_of", "is_point"]
    redefined = context.replace("self.row + self.col", "self.row - self.col")
    for program, verdicts in ((context + body, [True] * 5),
                              (redefined + body, [True, True, False, True, True])):
        assert plain(program, tests) == verdicts
        result = run(program, tests, context=context, names=names)
        assert result["passed"] == verdicts, result["errors"]


def test_a_result_the_harness_cannot_send_is_no_exception_a_test_catches():
    """A result too long for an answer, cyclic or nested too deep is the harness refusing (the
    test fails whatever it catches), not the program raising: plain Python returns it; a
    program's own exception (its RecursionError) stays one the test catches."""
    program = """\
        def sqrt_int(x):
            return "x" * (1 << 26) if x < 0 else int(x ** 0.5)
        def f(x):
            a = []
            a.append(a)
            return a
        def deep(x):
            a = []
            for _ in range(100000):
                a = [a]
            return a
        def loop(x):
            return loop(x)
        """
    tests = ["try:\n    sqrt_int(-4)\n    assert False\nexcept ValueError:\n    pass",
             "import unittest\nunittest.TestCase().assertRaises(ValueError, sqrt_int, -1)",
             "try:\n    f(-1)\n    ok = False\nexcept Exception:\n    ok = True\nassert ok",
             "import unittest\nwith unittest.TestCase().assertRaises(Exception):\n    f(1)",
             "try:\n    deep(1)\n    ok = False\nexcept Exception:\n    ok = True\nassert ok",
             "try:\n    loop(1)\nexcept RecursionError:\n    pass\nelse:\n    assert False",
             "assert sqrt_int(16) == 4"]
    assert plain(program, tests[:4] + tests[5:]) == [False] * 4 + [True] * 2
    result = run(program, tests)
    assert result["passed"] == [False] * 5 + [True] * 2, result["errors"]


def test_a_tests_own_exception_reaches_exit_as_its_class_alone():
    """A program's __exit__ gets a test's own exception as an instance of its class without
    arguments, attributes or chain (an assertion's message may hold an expected value, which never
    enters the program's process); its class still decides the suppression; an exception that
    came from the program reaches it as it was."""
    program = """\
        SEEN = []
        class Spy:
            def __enter__(self):
                return self
            def __exit__(self, kind, error, traceback):
                SEEN.append((kind.__name__, repr(error), repr(vars(error)),
                             repr(error.__context__), repr(error.__cause__)))
                return kind.__name__ == "KeyError"
        def seen():
            return SEEN[-1]
        def boom():
            raise ValueError("mine")
        """
    tests = ["try:\n    with Spy():\n        raise AssertionError('want EXPECTED-42')\n"
             "except AssertionError:\n    pass\nassert 'EXPECTED' not in str(seen())",
             "e = KeyError('k')\ne.note = 'EXPECTED'\ntry:\n    with Spy():\n        try:\n"
             "            1 / 0\n        except ZeroDivisionError as z:\n"
             "            raise e from ValueError('EXPECTED')\nfinally:\n"
             "    assert 'EXPECTED' not in str(seen()) and seen()[0] == 'KeyError'",
             "try:\n    with Spy():\n        boom()\nexcept ValueError as e:\n"
             "    assert str(e) == 'mine'\nassert 'mine' in seen()[1]"]
    result = run(program, tests)
    assert result["passed"] == [True] * 3, result["errors"]


def test_a_program_object_with_neither_bool_nor_len_is_true():
    """bool() of a program object whose class (its ancestry, read by type's own slots) defines
    neither __bool__ nor __len__ is True, as in plain Python (a `while node:` walk works); one
    whose class defines either (through a base too, or as None) still fails the test, whatever a
    metaclass or a __class__ claims."""
    program = """\
        class Node:
            def __init__(self, val, next=None):
                self.val, self.next = val, next
        class Empty:
            def __len__(self):
                return 0
        class Falsy:
            def __bool__(self):
                return False
        class Child(Empty):
            pass
        class Meta(type):
            def __bool__(cls):
                return False
        class Lying(metaclass=Meta):
            __class__ = Node
            def __getattr__(self, name):
                return lambda: False
        class NoBool:
            __bool__ = None
        def build(vals):
            head = None
            for v in reversed(vals):
                head = Node(v, head)
            return head
        def empty():
            return Empty()
        def falsy():
            return Falsy()
        def child():
            return Child()
        def lying():
            return Lying()
        def no_bool():
            return NoBool()
        """
    walk = "out, node = [], build([1, 2, 3])\nwhile node:\n    out.append(node.val)\n" \
           "    node = node.next\nassert out == [1, 2, 3]"
    tests = [walk, "assert not empty()", "assert not falsy()", "assert not child()",
             "assert lying() and (build([1]) or None) is not None",
             "try:\n    bool(no_bool())\nexcept TypeError:\n    pass"]
    assert plain(program, tests) == [True] * 6
    result = run(program, tests, max_timeouts=8)
    assert result["passed"] == [True, False, False, False, True, False], result["errors"]
