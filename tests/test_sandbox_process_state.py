"""The state of its process that a program shares with the tests in plain Python, as the sandbox
gives it: an open() of os.devnull for writing (a file that discards what it is given, on a
duplicate of the program's process's write-only /dev/null stdin: nanomarl/sandbox_patches.py:
quiet_null) and the test's decimal context (its precision, rounding, limits and traps, taken on
by the program's process where the test changed it: sandbox_patches.py:take_decimal). Each right
program is compared with plain Python, each allowance beside a wrong or hostile program that it
must not let pass."""
import decimal

from test_sandbox_semantics import plain, run


def both(program, tests):
    """(plain Python's verdicts, the sandbox's run), plain Python's decimal context put back."""
    try:
        return plain(program, tests), run(program, tests)
    finally:
        decimal.setcontext(decimal.Context())


SILENT = """\
    import contextlib, io, os, pathlib, sys
    def quiet_sum(xs):
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            print("debug", xs)
            return sum(xs)
    def appended(text):
        with open(os.devnull, "a") as null:
            return null.write(text)
    def binary(data):
        with open(os.devnull, "wb", buffering=0) as null:
            return null.write(data), null.name, null.mode
    def by_path(text):
        with pathlib.Path(os.devnull).open("w") as null:
            print(text, file=null)
            return null.name
    def io_open(text):
        with io.open(os.devnull, "w") as null:
            return null.write(text), null.writable(), null.readable()
    """


def test_a_program_silences_its_prints_with_devnull():
    """open(os.devnull, "w"), "a" and "wb", pathlib's open and io.open give a real file on
    /dev/null: what it writes is discarded (none of it reaches the output) and each is closed."""
    tests = ["assert quiet_sum([1, 2]) == 3",
             "assert appended('abc') == 3",
             "assert binary(b'xyz') == (3, '/dev/null', 'wb')",
             "import os; assert str(by_path('hi')) == os.devnull",
             "assert io_open('hello') == (5, True, False)"]
    expected, result = both(SILENT, tests)
    assert expected == [True] * 5
    assert result["passed"] == expected, result["errors"]
    assert "debug" not in result["stdout"] and "hi" not in result["stdout"]


HOSTILE_NULL = """\
    import os
    def flood(n):
        with open(os.devnull, "w") as null:
            for _ in range(n):
                null.write("x" * 65536)
        return n
    def read_back():
        with open(os.devnull, "w") as null:
            null.write("secret")
            return os.read(null.fileno(), 10)
    def open_to_read():
        return open(os.devnull).read()
    def open_both():
        with open(os.devnull, "w+") as null:
            return null.read()
    def elsewhere(path):
        with open(path, "w") as f:
            return f.write("x")
    def swapped():
        os.close(0)
        os.open("/usr", os.O_RDONLY)  # (descriptor 0 is no /dev/null now)
        with open(os.devnull, "w") as null:
            return null.write("x")
    """


def test_the_devnull_stand_in_opens_nothing_else():
    """The stand-in only discards: a program that writes 64 MB to it passes within its time and
    its output stays empty; one that reads it back, opens os.devnull for reading or both ways, or
    opens any other path for writing (one through /dev/null, one beside it) fails as without it
    (the seccomp filter refuses what writes, no /dev is mounted), and where descriptor 0 is no
    longer /dev/null, open(os.devnull, "w") is open's own (refused)."""
    tests = ["assert flood(1024) == 1024",
             "assert read_back() == b''",
             "assert open_to_read() == ''",
             "assert open_both() == ''",
             "assert elsewhere('/dev/null/../x') == 1",
             "assert elsewhere('/dev/null2') == 1",
             "assert elsewhere('/tmp/x') == 1",
             "assert swapped() == 1"]
    result = run(HOSTILE_NULL, tests, timeout=10.0)
    assert result["passed"] == [True] + [False] * 7, result["errors"]
    assert result["stdout"] == "" and "x" * 100 not in result["stderr"]
    assert "Bad file descriptor" in result["errors"][1]
    assert "FileNotFoundError" in result["errors"][2]
    assert "Operation not permitted" in result["errors"][7]


THIRD = """\
    from decimal import Decimal, getcontext, localcontext
    ORIGINAL = getcontext()
    def third():
        return Decimal(1) / Decimal(3)
    def same_context():
        return getcontext() is ORIGINAL
    def precision():
        return getcontext().prec
    def power(n):
        return Decimal(10) ** n
    def text(x):
        return str(Decimal(x))
    """


def test_the_program_uses_the_tests_decimal_context():
    """A test's change of its decimal context (precision, rounding, limits, traps; a localcontext
    too, and back) is the program's for its calls, on the program's own context object, as in one
    plain Python thread; a later test that does not change it keeps it."""
    tests = ["from decimal import Decimal, getcontext\ngetcontext().prec = 5\n"
             "assert third() == Decimal('0.33333') and same_context()",
             "assert precision() == 5",
             "from decimal import Decimal, getcontext, ROUND_UP\ngetcontext().rounding = ROUND_UP\n"
             "assert third() == Decimal('0.33334')",
             "import decimal\ndecimal.getcontext().traps[decimal.Inexact] = True\ntry:\n"
             "    third()\n    raise AssertionError('no trap')\nexcept decimal.Inexact:\n    pass",
             "import decimal\ndecimal.setcontext(decimal.Context())\n"
             "with decimal.localcontext() as c:\n    c.prec = 3\n"
             "    assert third() == decimal.Decimal('0.333')\n"
             "assert third() == decimal.Decimal(1) / 3 and precision() == 28",
             "import decimal\ndecimal.getcontext().Emax = 10\ntry:\n    power(20)\n"
             "    raise AssertionError('no overflow')\nexcept decimal.Overflow:\n    pass",
             "from decimal import getcontext\ngetcontext().capitals = 0\n"
             "assert text('1E+30') == '1e+30'"]
    expected, result = both(THIRD, tests)
    assert expected == [True] * len(tests)
    assert result["passed"] == expected, result["errors"]


CHANGER = """\
    from decimal import Decimal, getcontext
    def third():
        getcontext().prec = 3
        return Decimal(1) / Decimal(3)
    def loose():
        return Decimal(1) / Decimal(3)
    getcontext().prec = 4
    """


def test_a_programs_own_decimal_context_stays_its_own():
    """A program that sets its own context cannot set the test's: an expected value the test
    computes first stays its own (plain Python fails the program too), the program's setting
    holds until the test changes its context (then the test's, as in plain Python), and what a
    test computes after a call is at the test's precision."""
    tests = ["from decimal import Decimal\ne = Decimal(1) / Decimal(3)\nassert third() == e",
             "from decimal import Decimal\nassert loose() == Decimal('0.333')",
             "from decimal import Decimal, getcontext\ngetcontext().prec = 6\n"
             "assert loose() == Decimal('0.333333')"]
    expected, result = both(CHANGER, tests)
    assert expected == [False, True, True]
    assert result["passed"] == expected, result["errors"]


VIEWED = """\
    def append_to_all(rows, x):
        for r in rows:
            r.append(x)
    def add_to_values(pairs, x):
        for key, r in pairs:
            r.append(key + x)
    def both_ways(a, rows):
        a.append(0)
        for r in rows:
            r.append(1)
        return a
    def hold(rows):
        global HELD
        HELD = rows
    def later(x):
        for r in HELD:
            r.append(x)
    def peek(rows):
        found = list(rows)
        found[0].append("oops")
        return len(found)
    """


def test_a_dict_views_lists_are_the_tests_own():
    """The lists inside a test's d.values() or d.items() are numbered as a call's argument
    containers are: the program's changes reach the test's own lists (also when the list is passed
    beside the view, one object then, or the view is held for a later call), and a program that
    changes one it should leave as it was fails as in plain Python."""
    tests = ["d = {'k': []}; append_to_all(d.values(), 5); assert d == {'k': [5]}",
             "d = {'a': [], 'b': [1]}; add_to_values(d.items(), 'x')\n"
             "assert d == {'a': ['ax'], 'b': [1, 'bx']}",
             "a = []; d = {'k': a}; r = both_ways(a, d.values())\n"
             "assert a == [0, 1] and r is a and d['k'] is a",
             "d = {'k': []}; hold(d.values()); later(3); assert d == {'k': [3]}",
             "d = {'k': [1]}; assert peek(d.values()) == 1 and d == {'k': [1]}"]
    expected, result = both(VIEWED, tests)
    assert expected == [True, True, True, True, False]
    assert result["passed"] == expected, result["errors"]
