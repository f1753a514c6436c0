"""The state of its process that a program shares with the tests in plain Python, as the sandbox
gives it: an open() of os.devnull for writing, in either process (a file that discards what it is
given, on a duplicate of the write-only /dev/null stdin both inherit: nanomarl/sandbox_patches.py:
quiet_null), and decimal's context, one for both processes (each message tells the other side its
context where it changed: sandbox_link.py:state_told, unpacked). Each right program is compared
with plain Python, each allowance beside a wrong or hostile program that it must not let pass."""
import decimal

import pytest

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


def test_a_programs_change_of_the_decimal_context_is_the_tests_too():
    """A program that sets the context while it loads or in a call sets the test's, as in plain
    Python: an expected value the test computes before the call is at the program's precision of
    the load (plain Python fails the program here too), one after it at the precision the call
    left, until the test changes the context (then the test's, for both)."""
    tests = ["from decimal import Decimal\ne = Decimal(1) / Decimal(3)\nassert third() == e",
             "from decimal import Decimal\nassert loose() == Decimal('0.333')",
             "from decimal import Decimal, getcontext\ngetcontext().prec = 6\n"
             "assert loose() == Decimal('0.333333')"]
    expected, result = both(CHANGER, tests)
    assert expected == [False, True, True]
    assert result["passed"] == expected, result["errors"]


SEVENTH = """\
    import decimal
    decimal.getcontext().prec = 6  # (wrong: the task wants 28 digits)
    def one_seventh():
        return decimal.Decimal(1) / decimal.Decimal(7)
    """
WITH_SIX = ("import decimal\nwith decimal.localcontext() as c:\n    c.prec = 6\n"
            "    assert str(one_seventh()) == '0.142857'\n")
DIGITS_28 = "assert str(one_seventh()) == '0.1428571428571428571428571429'"


def test_a_programs_load_time_precision_stays_after_a_tests_localcontext():
    """The program's `prec = 6` at load is the test's too: a test's localcontext of that precision
    ends back at 6, so a test that wants 28 digits afterwards fails the wrong program (in the same
    test or the next), as plain Python does; a test reads 6 and computes its expected value at 6."""
    tests = [WITH_SIX + DIGITS_28, WITH_SIX, DIGITS_28,
             "import decimal\nassert decimal.getcontext().prec == 6\n"
             "assert one_seventh() == decimal.Decimal(1) / 7"]
    expected, result = both(SEVENTH, tests)
    assert expected == [False, True, False, True]
    assert result["passed"] == expected, result["errors"]


QUIET = """\
    import decimal
    class Quiet(decimal.Context):  # (its precision reads 28, whatever it is)
        prec = property(lambda self: 28, decimal.Context.prec.__set__)
    decimal.setcontext(Quiet(prec=6))  # (wrong: the task wants 28 digits)
    def one_seventh():
        return decimal.Decimal(1) / decimal.Decimal(7)
    """


def test_a_context_subclass_hides_none_of_its_fields():
    """The program's process reads its context by decimal.Context's own descriptors: a subclass
    whose precision reads 28 tells its real 6 all the same, so a test's localcontext ends back at
    6 as in plain Python."""
    tests = [WITH_SIX + DIGITS_28, WITH_SIX, DIGITS_28]
    expected, result = both(QUIET, tests)
    assert expected == [False, True, False]
    assert result["passed"] == expected, result["errors"]


FIFTY = """\
    import decimal
    decimal.getcontext().prec = 50
    def third():
        return decimal.Decimal(1) / decimal.Decimal(3)
    """


def test_a_programs_precision_outlasts_a_tests_change_of_another_field():
    """A test's localcontext that changes the rounding alone sends the program its precision of
    50 as it found it, and after the localcontext the program computes at 50 digits again; the
    test's own arithmetic is at 50 too."""
    tests = ["import decimal\nwith decimal.localcontext() as c:\n"
             "    c.rounding = decimal.ROUND_DOWN\n    x = third()\n"
             "assert str(third()) == '0.' + '3' * 50",
             "import decimal\nassert third() * 3 == decimal.Decimal('0.' + '9' * 50)"]
    expected, result = both(FIFTY, tests)
    assert expected == [True, True]
    assert result["passed"] == expected, result["errors"]


CALLS = """\
    from decimal import Decimal, getcontext
    def set_precision(n):
        getcontext().prec = n
    def third():
        return Decimal(1) / Decimal(3)
    def through(callback):
        getcontext().prec = 4
        seen = callback()
        return seen, str(Decimal(1) / Decimal(3))
    def imported():
        import decimal
        return decimal.getcontext().prec
    """


def test_one_decimal_context_through_calls_callbacks_and_threads():
    """A call's change is the test's when it returns; a test's callback sees the program's context
    and its change is the program's; a test's thread has a context of its own (the program called
    from it changes that one, not the main thread's); a program that imports decimal only after a
    test changed its context finds the test's; a test process that never imported decimal gets the
    program's change all the same."""
    tests = ["from decimal import Decimal, getcontext\nset_precision(5)\n"
             "assert getcontext().prec == 5 and Decimal(2) / 3 == Decimal('0.66667')",
             "from decimal import getcontext\ndef cb():\n    p = getcontext().prec\n"
             "    getcontext().prec = 2\n    return p\n"
             "assert through(cb) == (4, '0.33') and getcontext().prec == 2",
             "import threading\nfrom decimal import getcontext\ngetcontext().prec = 28\nout = []\n"
             "def work():\n    set_precision(3)\n"
             "    out.append((getcontext().prec, str(third())))\n"
             "t = threading.Thread(target=work)\nt.start()\nt.join()\n"
             "assert out == [(3, '0.333')]\n"
             "assert getcontext().prec == 28 and str(third()) == '0.' + '3' * 28"]
    expected, result = both(CALLS, tests)
    assert expected == [True] * 3
    assert result["passed"] == expected, result["errors"]
    fresh = "def imported():\n    import decimal\n    return decimal.getcontext().prec\n"
    tests = ["import decimal\ndecimal.getcontext().prec = 9\nassert imported() == 9"]
    expected, result = both(fresh, tests)
    assert result["passed"] == expected == [True], result["errors"]
    loader = "import decimal\ndecimal.getcontext().prec = 7\ndef f():\n    return 1\n"
    tests = ["assert f() == 1", "import decimal\nassert decimal.getcontext().prec == 7"]
    expected, result = both(loader, tests)
    assert result["passed"] == expected == [True, True], result["errors"]


HANG = """\
    import decimal, time
    def hang(seconds=None):
        decimal.getcontext().prec = 6  # (wrong)
        while seconds is None:  # (its own alarm ends it: its answer may come in time)
            pass
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                while time.monotonic() < end:
                    pass
            except BaseException:  # (its own alarm: it answers after the test's timeout)
                pass
    def one_seventh():
        return decimal.Decimal(1) / decimal.Decimal(7)
    """


@pytest.mark.parametrize("seconds", [None, 1.5], ids=["interrupted", "late"])
def test_a_precision_set_in_a_call_that_times_out_stays(seconds):
    """A call that sets prec 6 and times out leaves 6 in plain Python (the alarm interrupts it
    after the change): the next test's localcontext ends back at 6 and 28 digits fail, whether its
    answer comes before the test's alarm or after it (a late answer, set on the context the test
    had when it asked: sandbox_link.py:unpacked; no ring loses it: sandbox_link.py:read_line).
    Plain Python's verdicts: the first test times out."""
    loop = "hang(%r)" % seconds
    result = run(HANG, [loop, WITH_SIX + DIGITS_28,
                        "import decimal\nassert one_seventh() == decimal.Decimal(1) / 7\n"
                        "assert decimal.getcontext().prec == 6"], max_timeouts=4)
    assert result["passed"] == [False, False, True], result["errors"]


FORGED = """\
    import gc
    def _module(name):
        for found in gc.get_objects():
            if type(found) is dict and found.get("__name__") == name and "__builtins__" in found:
                return found
    def forge(context):  # (what the program's process tells of its decimal context from now on)
        _module("sandbox_link")["decimal_now"] = lambda context=None, found=context: found
        return 1
    """


def test_a_forged_decimal_context_fails_the_test():
    """What the program's process tells of its decimal context is a decimal.Context's fields or
    fails the test: a rounding decimal has not, bools, a precision out of range, a flag field, an
    unknown trap; a well-formed one is taken on (the program could set it in plain Python)."""
    bad = [[6, "ROUND_NOPE", -9, 9, 1, 0, []], [True, "ROUND_DOWN", -9, 9, 1, 0, []],
           [10 ** 20, "ROUND_DOWN", -9, 9, 1, 0, []], [6, "ROUND_DOWN", -9, 9, 1, 0, [], []],
           [6, "ROUND_DOWN", -9, 9, 1, 0, ["Evil"]], [6, "ROUND_DOWN", -9, 9, 5, 0, []], "6"]
    tests = ["assert forge(%r) == 1" % (found,) for found in bad]
    tests.append("import decimal\nassert forge([7, 'ROUND_DOWN', -9, 9, 1, 0, ['Inexact']]) == 1\n"
                 "c = decimal.getcontext()\nassert (c.prec, c.rounding, c.Emax) == "
                 "(7, decimal.ROUND_DOWN, 9) and c.traps[decimal.Inexact]\n"
                 "assert not c.traps[decimal.Overflow]")
    result = run(FORGED, tests)
    assert result["passed"] == [False] * len(bad) + [True], result["errors"]
    assert all("malformed decimal context" in error for error in result["errors"][:-1])


def test_the_test_process_opens_devnull_for_writing():
    """A test's unittest.TextTestRunner(stream=open(os.devnull, "w")) and a test's own
    redirect_stdout to os.devnull work, as in plain Python: the runner's report and the test's
    prints are discarded."""
    program = "def add(a, b):\n    return a + b\n"
    tests = ["import os, unittest\nclass T(unittest.TestCase):\n    def test(self):\n"
             "        self.assertEqual(add(1, 2), 3)\n"
             "runner = unittest.TextTestRunner(stream=open(os.devnull, 'w'))\n"
             "suite = unittest.defaultTestLoader.loadTestsFromTestCase(T)\n"
             "assert runner.run(suite).wasSuccessful()",
             "import contextlib, os\nwith open(os.devnull, 'w') as null, "
             "contextlib.redirect_stdout(null):\n"
             "    print('noise', add(2, 2))\nassert add(2, 2) == 4"]
    expected, result = both(program, tests)
    assert result["passed"] == expected == [True, True], result["errors"]
    assert "noise" not in result["stdout"] and "Ran 1 test" not in result["stderr"]


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
