"""sandbox.py against plain Python's semantics for exceptions and the values they carry: a
program's StopIteration out of a call the test makes directly (never one that a C iteration
between would take for its end), an exception's __cause__ and __context__ (a bounded chain),
OSError's errno, strerror and file names, and a NamedTuple class the test itself defines, which a
value the program makes from it crosses back as (never one of the program's own of that name). Each right program is checked beside the
wrong one or the forged answer it must not credit."""
from test_sandbox_semantics import plain, run


def test_a_programs_stop_iteration_reaches_a_direct_call_of_the_test_as_itself():
    """A program's StopIteration out of a call the test's code makes directly (at its top level,
    in its own function called by name, or in a generator, which makes it a RuntimeError) is a
    StopIteration there, its value kept; where a C iteration is between (map, iter(f, end), a test
    iterator's __next__ that next() or list() calls) it would end that iteration early, deciding
    the verdict (all() of nothing is True), so there the harness refuses it."""
    program = """\
        def first(it):
            return next(iter(it))
        def stop(v):
            raise StopIteration(v)
        """
    right = ["try:\n    first([])\n    assert False\nexcept StopIteration:\n    pass",
             "try:\n    stop(5)\nexcept StopIteration as e:\n"
             "    assert e.value == 5 and e.args == (5,)",
             "def check(candidate):\n    try:\n        candidate([])\n    except StopIteration:\n"
             "        return True\nassert check(first)",
             "try:\n    list(first(x) for x in [[]])\nexcept RuntimeError as e:\n"
             "    assert isinstance(e.__cause__, StopIteration)",
             "import unittest\nwith unittest.TestCase().assertRaises(StopIteration):\n"
             "    first([])",
             "assert first([7]) == 7"]
    assert plain(program, right) == [True] * 6
    assert run(program, right)["passed"] == [True] * 6
    # plain Python credits each of these (the StopIteration ends the iteration): never here
    ended = ["assert all(map(first, [[], []]))",
             "assert all(map(lambda x: first(x), [[]]))",
             "assert list(iter(lambda: first([]), 1)) == []",
             "class It:\n    def __iter__(self):\n        return self\n    def __next__(self):\n"
             "        return first([])\nassert list(It()) == []",
             "def check(x):\n    return first(x)\nassert all(map(check, [[]]))",
             "assert [*map(first, [[]])] == []"]
    assert plain(program, ended) == [True] * 6
    result = run(program, ended)
    assert result["passed"] == [False] * 6
    assert result["errors"] == ["StopIteration: "] * 6  # (a ProgramError, as the program said)


def test_an_exceptions_cause_and_context_cross_with_it():
    """`raise X from e` gives the test an X whose __cause__ is e's crossing (suppressed context),
    an exception raised while handling another has it as __context__, `from None` suppresses it;
    a test's callback's chain reaches the program; a chain is cut 3 levels down (a cycle ends
    there too), also when the program forges a deeper one."""
    program = """\
        def chained(s):
            try:
                return int(s)
            except ValueError as e:
                raise TypeError("not a number") from e
        def during(d):
            try:
                return d["k"]
            except KeyError:
                raise ValueError("no k")
        def hidden(d):
            try:
                return d["k"]
            except KeyError:
                raise ValueError("no k") from None
        def deep(n):
            error = None
            for i in range(n):
                try:
                    raise ValueError(i) from error
                except ValueError as e:
                    error = e
            raise error
        def looped():
            a, b = ValueError("a"), KeyError("b")
            a.__cause__, b.__cause__ = b, a
            raise a
        def causes(cb):
            try:
                cb()
            except LookupError as e:
                return [type(e).__name__, type(e.__cause__).__name__, str(e.__cause__)]
        """
    tests = ["try:\n    chained('x')\nexcept TypeError as e:\n"
             "    assert isinstance(e.__cause__, ValueError) and e.__suppress_context__\n"
             "    assert 'invalid literal' in str(e.__cause__) and e.__context__ is e.__cause__",
             "try:\n    during({})\nexcept ValueError as e:\n"
             "    assert e.__cause__ is None and not e.__suppress_context__\n"
             "    assert isinstance(e.__context__, KeyError) and e.__context__.args == ('k',)",
             "try:\n    hidden({})\nexcept ValueError as e:\n"
             "    assert e.__cause__ is None and e.__suppress_context__\n"
             "    assert isinstance(e.__context__, KeyError)",
             "try:\n    deep(3)\nexcept ValueError as e:\n    assert e.args == (2,)\n"
             "    assert e.__cause__.args == (1,) and e.__cause__.__cause__.args == (0,)",
             "def cb():\n    try:\n        {}['k']\n    except KeyError as e:\n"
             "        raise IndexError('i') from ValueError('inner')\n"
             "assert causes(cb) == ['IndexError', 'ValueError', 'inner']"]
    assert plain(program, tests) == [True] * 5
    assert run(program, tests)["passed"] == [True] * 5
    cut = ["def depth(e):\n    n = 0\n    while e.__cause__ is not None:\n"
           "        e, n = e.__cause__, n + 1\n    return n\n"
           "try:\n    deep(8)\nexcept ValueError as e:\n    assert depth(e) == 3, depth(e)",
           "try:\n    looped()\nexcept ValueError as e:\n"
           "    c = e.__cause__\n    assert isinstance(c, KeyError) and isinstance(c.__cause__,"
           " ValueError)\n    assert c.__cause__.__cause__.__cause__ is None"]
    assert run(program, cut)["passed"] == [True] * 2
    forged = """\
        import gc
        def forge():
            def payload(error, keep=False):
                p = ["ValueError", "0", "ValueError", ["0"], False, {}, "builtins", None]
                for i in range(1, 60):
                    p = ["ValueError", str(i), "ValueError", [str(i)], False, {}, "builtins",
                         None, [p, True, True]]
                return p
            for f in gc.get_objects():
                if type(f).__name__ == "function" and f.__name__ == "answer" and (
                        "error_payload" in f.__globals__):
                    f.__globals__["error_payload"] = payload
            raise ValueError("top")
        """
    probe = ("def chain(e):\n    n = 0\n    while e is not None:\n"
             "        e, n = e.__cause__ or e.__context__, n + 1\n    return n\n"
             "try:\n    forge()\nexcept ValueError as e:\n    assert chain(e) == 4, chain(e)")
    assert run(forged, [probe])["passed"] == [True]


def test_an_oserror_keeps_its_errno_strerror_and_file_names():
    """A program's OSError crosses with errno, strerror, filename and filename2, as the subclass
    its errno makes (OSError(errno, strerror, filename, None, filename2)); a test's callback's
    reaches the program alike."""
    program = """\
        import errno
        def read_config(path):
            with open(path) as f:
                return f.read()
        def both(a, b):
            raise OSError(errno.EEXIST, "exists", a, None, b)
        def named(opener):
            try:
                opener("x.txt")
            except FileNotFoundError as e:
                return [e.errno, e.strerror, e.filename, str(e)]
        """
    tests = ["try:\n    read_config('missing.txt')\n    assert False\n"
             "except FileNotFoundError as e:\n    assert e.filename == 'missing.txt' "
             "and 'missing.txt' in str(e) and e.errno == 2 and e.filename2 is None\n"
             "    assert e.strerror == 'No such file or directory'\n"
             "    assert e.args == (2, 'No such file or directory')",
             "try:\n    both('a', 'b')\nexcept FileExistsError as e:\n"
             "    assert (e.filename, e.filename2) == ('a', 'b')\n"
             "    assert str(e) == \"[Errno 17] exists: 'a' -> 'b'\"",
             "def opener(name):\n    raise FileNotFoundError(2, 'gone', name)\n"
             "assert named(opener) == [2, 'gone', 'x.txt', \"[Errno 2] gone: 'x.txt'\"]"]
    assert plain(program, tests) == [True] * 3
    assert run(program, tests)["passed"] == [True] * 3


def test_a_tests_own_namedtuple_crosses_back_as_its_class():
    """A NamedTuple class the test defines (typing's or collections') is a namedtuple of its name
    and fields in the program's process, and a value made from it crosses back as the
    test's class: _replace works there, isinstance and type() hold here; one of other fields is
    not the test's class."""
    program = """\
        import collections
        def origin_shift(p, dx):
            return p._replace(x=p.x + dx)
        def swap(p):
            return p._replace(a=p.b, b=p.a)
        def other():
            return collections.namedtuple("Q", "x y")(1, 2)
        """
    tests = ["from typing import NamedTuple\nclass Q(NamedTuple):\n    x: int\n    z: int\n"
             "r = origin_shift(Q(1, 9), 1)\n"
             "assert r == Q(2, 9) and isinstance(r, Q) and r.z == 9 and type(r) is Q",
             "import collections\nP = collections.namedtuple('P', 'a b')\nr = swap(P(1, 2))\n"
             "assert type(r) is P and r == P(2, 1) and r._asdict() == {'a': 2, 'b': 1}",
             "from typing import NamedTuple\nclass Q(NamedTuple):\n    x: int\n    z: int\n"
             "origin_shift(Q(1, 9), 1)\nassert not isinstance(other(), Q) and other() == (1, 2)"]
    assert plain(program, tests) == [True] * 3
    assert run(program, tests)["passed"] == [True] * 3


def test_a_stop_iteration_the_harness_refuses_fails_the_test_whatever_it_catches():
    """A program's StopIteration out of a call the test does not make directly (a method, a call
    inside a C iteration) is the harness's refusal: no `except` of the test's takes it for another
    exception (a wrong pop() that raises StopIteration is no IndexError) or swallows it."""
    program = """\
        class Stack:
            def pop(self):
                raise StopIteration
        def pop_empty():
            raise StopIteration
        """
    wrong = ["try:\n    Stack().pop()\nexcept StopIteration:\n    assert False\n"
             "except Exception:\n    pass",
             "try:\n    Stack().pop()\nexcept StopIteration:\n    assert False\nexcept:\n    pass",
             "try:\n    Stack().pop()\nexcept BaseException as e:\n"
             "    assert not isinstance(e, StopIteration)"]
    right = ["try:\n    pop_empty()\nexcept StopIteration:\n    pass"]
    assert plain(program, wrong + right) == [False] * 3 + [True]
    result = run(program, wrong + right)
    assert result["passed"] == [False] * 3 + [True]
    assert result["errors"][:3] == ["StopIteration: "] * 3
    forged = """\
        import gc
        def gen():
            yield 1
            for f in gc.get_objects():  # (a StopIteration as the stream's end: never the end)
                if type(f).__name__ == "function" and "error_payload" in f.__globals__:
                    f.__globals__["error_payload"] = lambda *a: ["StopIteration"] * 3
            raise ValueError("not the end")
        """
    ended = ["items = []\nfor x in gen():\n    items.append(x)\nassert items == [1]",
             "items = []\ntry:\n    for x in gen():\n        items.append(x)\n"
             "except BaseException:\n    pass\nassert items == [1]"]
    assert run(forged, ended)["passed"] == [False] * 2


def test_a_star_call_never_takes_a_stop_iteration_for_the_end_of_its_unpacking():
    """`f(*map(g, xs))` runs map inside the call's own instruction: a StopIteration of g's would
    end map early there, so it is no direct call's and fails the test (a plain f(*args) too)."""
    program = """\
        def f(*xs):
            if xs == (2,):
                raise StopIteration
            return sum(xs) if xs else 100
        """
    ended = ["r = f(*map(f, [1, 2, 3]))\nassert r == 1, r",
             "try:\n    r = f(*map(f, [1, 2, 3]))\nexcept BaseException:\n    r = 1\nassert r == 1"]
    assert plain(program, ended) == [True] * 2
    result = run(program, ended + ["try:\n    f(2)\nexcept StopIteration:\n    pass",
                                   "assert f(*[1, 3]) == 4"])
    assert result["passed"] == [False] * 2 + [True] * 2


def test_a_programs_own_namedtuple_crosses_as_a_namedtuple_not_the_tests_class():
    """A value of the program's own NamedTuple class reaches the test as a namedtuple of its name
    and fields, never the test's class of that name (it is none in plain Python); the test's own
    values, changed by the program, come back as the test's class, and the program's own values
    the test hands back are the program's class again."""
    program = """\
        from collections import namedtuple
        _P = namedtuple('Point', ['x', 'y'])
        def shift(p):
            return _P(p.x + 1, p.y)
        def moved(p):
            return p._replace(x=p.x + 1)
        def origin():
            return _P(0, 0)
        def mine(p):
            return type(p) is _P
        """
    wrong = ["from collections import namedtuple\nPoint = namedtuple('Point', 'x y')\n"
             "r = shift(Point(1, 2))\nassert r == (2, 2) and isinstance(r, Point)",
             "from typing import NamedTuple\nclass Point(NamedTuple):\n    x: int\n    y: int\n"
             "shift(Point(1, 2))\nassert type(origin()) is Point"]
    right = ["from collections import namedtuple\nPoint = namedtuple('Point', 'x y')\n"
             "r = moved(Point(1, 2))\nassert type(r) is Point and r == Point(2, 2)",
             "from collections import namedtuple\nPoint = namedtuple('Point', 'x y')\n"
             "r = shift(Point(1, 2))\nassert r == (2, 2) and r.x == 2 and type(r) is not Point\n"
             "assert mine(r) and mine(origin()) and not mine(Point(0, 0))"]
    assert plain(program, wrong + right) == [False] * 2 + [True] * 2
    assert run(program, wrong + right)["passed"] == [False] * 2 + [True] * 2


def test_an_oserror_is_of_its_own_class_whatever_its_name_or_errno():
    """A program's own class named OSError is no builtin OSError in the test (it makes no
    FileNotFoundError of errno 2), and a builtin OSError whose args the program set stays an
    OSError: its errno picks no subclass."""
    program = """\
        import builtins
        def openit(name):
            class OSError(builtins.OSError):
                pass
            raise OSError(2, 'No such file or directory', name)
        def reset(name):
            e = OSError('cannot')
            e.args = (2, 'No such file')
            raise e
        def named(name):
            e = OSError()
            e.filename = name
            e.args = (13, 'x')
            raise e
        """
    wrong = ["try:\n    openit('f')\nexcept FileNotFoundError:\n    pass",
             "try:\n    reset('f')\nexcept FileNotFoundError:\n    pass",
             "try:\n    named('f')\nexcept PermissionError:\n    pass"]
    right = ["try:\n    openit('f')\nexcept OSError as e:\n"
             "    assert type(e) is not OSError and type(e).__name__ == 'OSError'\n"
             "    assert e.errno == 2 and e.filename == 'f'",
             "try:\n    reset('f')\nexcept OSError as e:\n"
             "    assert type(e) is OSError and e.args == (2, 'No such file')",
             "try:\n    named('f')\nexcept OSError as e:\n"
             "    assert type(e) is OSError and e.filename == 'f' and e.args == (13, 'x')"]
    assert plain(program, wrong + right) == [False] * 3 + [True] * 3
    assert run(program, wrong + right)["passed"] == [False] * 3 + [True] * 3
