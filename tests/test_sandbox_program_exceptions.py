"""sandbox.py against plain Python's semantics for exception classes of one side that reach the
other: a program's exception class is one real class in the test process (named by the test,
returned, raised, an attribute), of its name, qualified name, module and bases, that `except`,
assertRaises, issubclass, isinstance and `type(e) is` see as plain Python does; an exception of it
that crosses back is the program's own (its very object where the program's process still holds
it: its own __exit__ sees what it raised); a test's exception class reaches the program as one
class there (`except exc_cls:`). No program code runs in the test process, and no base a class
crosses with is anything but an exception class."""
from test_sandbox_semantics import plain, run

ERRORS = """\
    class AppError(Exception):
        pass
    class ValidationError(AppError, ValueError):
        def __init__(self, field, msg):
            super().__init__(f"{field}: {msg}")
            self.field = field
    class NotFound(AppError, KeyError):
        pass
    class Mixin:
        pass
    class Mixed(Mixin, LookupError):
        pass
    def parse_age(s):
        n = int(s)
        if n > 150:
            raise ValidationError("age", "too large")
        return n
    def find(key):
        raise NotFound(key)
    def classes():
        return [AppError, ValidationError]
    def make(field):
        return ValidationError(field, "made")
    class Parser:
        error = ValidationError
    def describe(e):
        return [type(e).__name__, isinstance(e, ValidationError), e.args, e is SAVED[-1]]
    SAVED = [None]
    def saved_error():
        SAVED.append(ValidationError("kept", "here"))
        raise SAVED[-1]
    def calling(callback):
        try:
            callback()
        except ValidationError as e:
            return "caught", e.field, str(e)
    """


def test_a_programs_exception_class_is_one_class_in_the_test():
    """The program's class, named by the test, is a real class: `except` and assertRaises catch its
    exception, issubclass and isinstance follow its bases (a program base the same way, a base that
    is no exception left out), `type(e) is` holds; the test calls it (the program's __init__ runs
    in the program's process), one class for every path it crosses by."""
    tests = ["try:\n    parse_age('200')\nexcept ValidationError as e:\n"
             "    assert str(e) == 'age: too large' and e.field == 'age'\nelse:\n    assert False",
             "import unittest\nunittest.TestCase().assertRaises(ValidationError, parse_age, '200')",
             "assert issubclass(ValidationError, ValueError) and issubclass(ValidationError, "
             "AppError)\nassert not issubclass(ValidationError, KeyError)",
             "assert isinstance(ValidationError('f', 'x'), ValueError)",
             "e = ValidationError('f', 'x')\nassert (e.args, e.field, str(e)) == (('f: x',), 'f', "
             "'f: x')",
             "try:\n    parse_age('200')\nexcept ValueError as e:\n"
             "    assert type(e) is ValidationError and e.__class__.__name__ == 'ValidationError'",
             "assert (ValidationError.__name__, ValidationError.__qualname__, "
             "ValidationError.__module__) == ('ValidationError', 'ValidationError', "
             "parse_age.__module__)",
             "assert classes() == [AppError, ValidationError] and Parser().error is "
             "ValidationError",
             "assert type(make('g')) is ValidationError and make('g').field == 'g'",
             "try:\n    find('k')\nexcept AppError as e:\n    assert type(e) is NotFound and "
             "isinstance(e, KeyError) and e.args == ('k',)",
             "assert NotFound.__mro__ == (NotFound, AppError, KeyError, LookupError, Exception, "
             "BaseException, object)",
             "assert issubclass(Mixed, LookupError) and not issubclass(Mixed, ValueError)",
             "class Sub(NotFound):\n    pass\ne = Sub('only')\n"
             "assert isinstance(e, AppError) and e.args == ('only',) and str(e) == \"'only'\""]
    assert plain(ERRORS, tests) == [True] * 13
    result = run(ERRORS, tests)
    assert result["passed"] == [True] * 13, result["errors"]


def test_a_programs_exception_crosses_back_as_its_own():
    """An exception of the program's class that the test passes back (one the program made, one
    the test made by calling the class) or raises through a callback reaches the program as an
    instance of its own class: the very object where it came from the program."""
    tests = ["try:\n    saved_error()\nexcept ValidationError as e:\n"
             "    assert describe(e) == ['ValidationError', True, ('kept: here',), True]",
             "assert describe(ValidationError('f', 'x')) == ['ValidationError', True, ('f: x',), "
             "False]",
             "def boom():\n    raise ValidationError('g', 'y')\n"
             "assert calling(boom) == ('caught', 'g', 'g: y')",
             "assert describe(ValueError('v')) == ['ValueError', False, ('v',), False]"]
    assert plain(ERRORS, tests) == [True] * 4
    result = run(ERRORS, tests)
    assert result["passed"] == [True] * 4, result["errors"]


def test_a_programs_own_exception_reaches_its_exit_as_itself():
    """A program's context manager whose `with` block calls the program, which raises: its
    __exit__ (and a contextlib.contextmanager's `except`) gets that very exception, of its own
    class, so `except NotFound`, isinstance and `is` hold there as in one process."""
    program = """\
        import contextlib
        class NotFound(KeyError):
            pass
        LAST = []
        def lookup(key):
            LAST.append(NotFound(key))
            raise LAST[-1]
        class Ignoring:
            def __enter__(self):
                return self
            def __exit__(self, kind, error, traceback):
                self.seen = (kind is NotFound, isinstance(error, NotFound), error is LAST[-1])
                return self.seen == (True, True, True)
        @contextlib.contextmanager
        def missing_ok():
            try:
                yield
            except NotFound as e:
                if e is not LAST[-1]:
                    raise
        """
    tests = ["with Ignoring() as m:\n    lookup('a')\nassert m.seen == (True, True, True)",
             "with missing_ok():\n    lookup('b')",
             "try:\n    with missing_ok():\n        raise KeyError('c')\nexcept KeyError as e:\n"
             "    assert e.args == ('c',)"]
    assert plain(program, tests) == [True] * 3
    result = run(program, tests)
    assert result["passed"] == [True] * 3, result["errors"]


def test_a_tests_exception_class_reaches_the_program_as_one_class():
    """A test's exception class passed to the program (`retry(f, E)`) is one class there: the
    program's `except exc_cls` catches the test's exception of it, an exception the program makes
    of it (by the test's own constructor, run in the test process) or raises is the test's class
    again, and a test's exception passed as an argument is one of its class there."""
    program = """\
        def retry(f, exc_cls):
            try:
                return f()
            except exc_cls as e:
                return "caught " + type(e).__name__
        def make(exc_cls, *args):
            return exc_cls(*args)
        def fail(exc_cls):
            raise exc_cls("program")
        def seen(e):
            return type(e).__name__, e.args, e
        """
    tests = ["def f():\n    raise ValueError('v')\n"
             "assert retry(f, ValueError) == 'caught ValueError'",
             "class E(Exception):\n    pass\ndef f():\n    raise E('v')\n"
             "assert retry(f, E) == 'caught E'",
             "class E(Exception):\n    def __init__(self, code):\n"
             "        super().__init__(f'code {code}')\n        self.code = code\n"
             "e = make(E, 5)\nassert type(e) is E and e.code == 5 and e.args == ('code 5',)",
             "class E(LookupError):\n    pass\ntry:\n    fail(E)\nexcept E as e:\n"
             "    assert type(e) is E and e.args == ('program',)",
             "class E(Exception):\n    pass\ne = E(1)\nassert seen(e)[:2] == ('E', (1,)) and "
             "seen(e)[2] is e"]
    assert plain(program, tests) == [True] * 5
    result = run(program, tests)
    assert result["passed"] == [True] * 5, result["errors"]


def test_no_program_code_runs_in_the_test_process_through_its_exception_class():
    """The test process's class runs none of the program's methods: its metaclass, its
    __init_subclass__ and __str__ are the program's alone (a raised one's text is the program's,
    made in its process); a wrong program whose class is no ValueError is none in the test
    either."""
    program = """\
        class Yes(type):
            def __instancecheck__(cls, other):
                return True
        class Loud(Exception, metaclass=Yes):
            def __init_subclass__(cls):
                print("SUBCLASSED")
            def __str__(self):
                print("STR")
                return "loud"
        class NotValue(KeyError):
            pass
        def boom():
            raise Loud("x")
        def wrong(s):
            raise NotValue(s)
        """
    tests = ["assert isinstance(Loud('y'), Loud) and not isinstance(5, Exception)",
             "class Sub(Loud):\n    pass\nassert issubclass(Sub, Exception)",
             "try:\n    boom()\nexcept Loud as e:\n"
             "    assert str(e) == 'loud' and e.args == ('x',)",
             "try:\n    wrong('s')\nexcept ValueError:\n    pass\nexcept KeyError:\n"
             "    assert False"]
    result = run(program, tests)
    assert result["passed"] == [True, True, True, False], result["errors"]
    assert "SUBCLASSED" not in result["stdout"] and "STR" in result["stdout"]


def test_a_forged_exception_class_is_no_more_than_one_the_program_could_define():
    """A program that patches its copy of the harness to describe its class otherwise gets at
    most a class it could define: bases that are no exception classes are left out (an int, an
    object); a reference that is no program object fails the test whatever it catches."""
    program = """\
        import gc
        TEXTS = dict(
            bases=('{"h":[INNER,"Local","Local","__main__",[{"M":["builtins","int"]},'
                   '{"M":["builtins","ValueError"]},{"M":["builtins","object"]}],false,false]}'),
            alien='{"h":[{"M":["builtins","len"]},"Local","Local","__main__",[],false,false]}')
        def forged(name):
            text = TEXTS.get(name)
            class Local(KeyError):
                pass
            for found in gc.get_objects():
                if type(found) is dict and "program_side" in found and "crossing" in found:
                    real = found["crossing"]
                    def crossing(value, inner, refer):
                        if value is Local and text:
                            return text.replace("INNER", inner())
                        return real(value, inner, refer)
                    found["crossing"] = crossing
            return Local
        """
    tests = ["K = forged('bases')\n"
             "assert issubclass(K, ValueError) and K.__bases__ == (ValueError,)",
             "try:\n    forged('alien')\nexcept BaseException:\n    pass",
             "K = forged('honest')\nassert issubclass(K, KeyError) and K.__name__ == 'Local'"]
    result = run(program, tests)
    assert result["passed"] == [True, False, True], result["errors"]
    assert "malformed exception class" in result["errors"][1]


def test_a_lookalike_of_a_standard_library_exception_class_is_the_programs_own():
    """A program's class that only names a standard library module (statistics, json.decoder) as
    its own is its class in the test, as in plain Python: `except statistics.StatisticsError`
    does not catch its exception (a ValueError does; its name and module are the program's), and
    it is no statistics.StatisticsError, also where the class cannot be sent and the exception
    crosses by its name alone; statistics' own class raised by the program is statistics'."""
    program = """\
        import gc, json, statistics
        class StatisticsError(ValueError):
            __module__ = "statistics"
        class JSONDecodeError(ValueError):
            __module__ = "json.decoder"
        def mean(xs):
            if not xs:
                raise StatisticsError("empty")
            return sum(xs) / len(xs)
        def parse(text):
            raise JSONDecodeError(text)
        def lookalike():
            return StatisticsError
        def real_mean(xs):
            return statistics.mean(xs)
        def nameless():
            for found in gc.get_objects():
                if type(found) is dict and "CLASS_TEXT" in found and "error_payload" in found:
                    found["CLASS_TEXT"][0] = lambda kind: None
            return mean([])
        """
    caught = ("try:\n    CALL\nexcept statistics.StatisticsError:\n    assert False\n"
              "except ValueError as e:\n    assert (type(e).__module__, type(e).__name__, "
              "e.args) == ('statistics', 'StatisticsError', ('empty',))\nelse:\n    assert False")
    tests = ["import statistics\n" + caught.replace("CALL", "mean([])"),
             "import json\ntry:\n    parse('{')\nexcept json.JSONDecodeError:\n    assert False\n"
             "except ValueError as e:\n    assert type(e).__name__ == 'JSONDecodeError'",
             "import statistics\nK = lookalike()\n"
             "assert K is not statistics.StatisticsError and issubclass(K, ValueError)\n"
             "assert not issubclass(K, statistics.StatisticsError)",
             "import statistics\ntry:\n    real_mean([])\nexcept statistics.StatisticsError as e:\n"
             "    assert type(e) is statistics.StatisticsError",
             "import statistics\ntry:\n    nameless()\nexcept statistics.StatisticsError:\n"
             "    assert False\nexcept ValueError as e:\n    assert type(e).__name__ == "
             "'StatisticsError'"]
    assert plain(program.replace('"CLASS_TEXT" in found', "False"), tests) == [True] * 5
    result = run(program, tests)
    assert result["passed"] == [True] * 5, result["errors"]


def test_an_exception_group_and_an_exceptions_notes_cross_as_in_plain_python():
    """A program's ExceptionGroup reaches the test with its exceptions, each of its own class and
    arguments (`except*` splits it; a group of the program's own class too), and an exception's
    notes (add_note) cross with it: both ways, a test's group raised in a callback reaches the
    program's `except*`."""
    program = """\
        class Failed(ExceptionGroup):
            pass
        def validate(items):
            errors = [ValueError(x) for x in items if x < 0] + [KeyError("k")]
            raise Failed("bad items", errors)
        def noted():
            e = ValueError("x")
            e.add_note("while parsing line 3")
            raise e
        def caught(callback):
            names = []
            try:
                callback()
            except* TypeError as group:
                names = [type(e).__name__ for e in group.exceptions]
            return names
        """
    tests = ["try:\n    validate([1, -2, -3])\nexcept* ValueError as g:\n"
             "    assert [e.args for e in g.exceptions] == [(-2,), (-3,)]\n"
             "except* KeyError as g:\n    assert g.exceptions[0].args == ('k',)",
             "try:\n    validate([-1])\nexcept Failed as g:\n"
             "    assert g.message == 'bad items' and len(g.exceptions) == 2",
             "try:\n    noted()\nexcept ValueError as e:\n"
             "    assert e.__notes__ == ['while parsing line 3'] and e.args == ('x',)",
             "def fail():\n    raise ExceptionGroup('two', [TypeError('a'), TypeError('b')])\n"
             "assert caught(fail) == ['TypeError', 'TypeError']"]
    assert plain(program, tests) == [True] * 4
    result = run(program, tests)
    assert result["passed"] == [True] * 4, result["errors"]
