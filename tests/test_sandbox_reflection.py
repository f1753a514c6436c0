"""sandbox.py against plain Python for what a test reads of a program object's class
(sandbox_remote.py: its type's name, qualified name and module are the program class's own, one
class of the harness's for each program class, up to a bound) and for a test's bare object(), a
sentinel that crosses as a test object and comes back as itself."""
from test_sandbox_semantics import plain, run

CLASSES = """\
    import enum
    class Animal:
        def speak(self):
            return "..."
    class Dog(Animal):
        def __init__(self, name="rex"):
            self.name = name
    class BankAccount:
        def __init__(self, owner):
            self.owner = owner
    class Outer:
        class Inner:
            pass
    class Stack(list):
        pass
    class Color(enum.IntEnum):
        RED = 1
    def make(kind):
        return {"dog": Dog, "animal": Animal}[kind]()
    def inner():
        return Outer.Inner()
    def pair():
        return Dog(), Dog()
    def factory():
        class Node:
            pass
        return Node()
    def stack():
        return Stack([1, 2])
    def red():
        return Color.RED
    def adder(n):
        def add(x):
            return x + n
        return add
    def squares(n):
        yield from range(n)
    """


def test_a_program_objects_type_has_its_classs_names():
    """type(x).__name__, __qualname__ and __module__ of a program object (and x.__class__'s) are
    its class's, as in plain Python; two instances of one class have one type, two classes of one
    name (a factory's) two; a function's and a generator's type is the builtin one's; a program's
    subclass of a value type is named its own and keeps its base's isinstance and value."""
    tests = ["assert type(make('dog')).__name__ == 'Dog'",
             "assert make('dog').__class__.__name__ == 'Dog'",
             "a = BankAccount('n')\na.owner = 'm'\n"
             "assert a.owner == 'm' and a.__class__.__name__ == 'BankAccount'",
             "assert type(inner()).__qualname__ == 'Outer.Inner'\n"
             "assert type(inner()).__name__ == 'Inner'",
             "assert type(make('dog')).__module__ == Dog.__module__",
             "a, b = pair()\nassert type(a) == type(b) and type(a) is type(b)",
             "assert type(make('dog')) != type(make('animal'))",
             "assert type(factory()) != type(factory())\n"
             "assert type(factory()).__qualname__ == 'factory.<locals>.Node'",
             "assert type(adder(1)).__name__ == 'function' and type(squares(2)).__name__ == "
             "'generator'",
             "s = stack()\nassert type(s).__name__ == 'Stack' and s.__class__.__name__ == 'Stack'\n"
             "assert isinstance(s, list) and s == [1, 2]",
             "assert type(red()).__name__ == 'Color' and red() == 1 and isinstance(red(), int)",
             "assert make('dog').speak() == '...' and make('dog').name == 'rex'"]
    assert plain(CLASSES, tests) == [True] * len(tests)
    result = run(CLASSES, tests)
    assert result["passed"] == [True] * len(tests), result["errors"]


def test_a_program_objects_type_stays_the_harnesss_class():
    """What already holds: `type(x) is Dog` does not (a program class is no class in the test
    process, and the harness's class for it, a Remote's type or a Valued's __class__, cannot be
    sent to the program), isinstance with a builtin type holds only where the object is of that
    type, and two classes of one name are no one type (a wrong program's pair is no one class)."""
    program = CLASSES.rstrip(" ") + """\
    class Cat(Animal):
        pass
    Cat.__name__ = Cat.__qualname__ = "Dog"
    def mixed():
        return Dog(), Cat()
    def echo(x):
        return x
    """
    tests = ["assert type(make('dog')) is Dog",
             "assert echo(type(make('dog'))) is Dog",
             "assert echo(stack().__class__) is Stack",
             "assert isinstance(make('dog'), list)",
             "a, b = mixed()\nassert type(a) == type(b)",
             "a, b = mixed()\nassert type(b).__name__ == 'Dog' and type(a) != type(b)"]
    assert plain(program, tests) == [True, True, True, False, False, True]
    result = run(program, tests)
    assert result["passed"] == [False, False, False, False, False, True], result["errors"]
    assert result["errors"][1:3] == ["ProgramError: this argument cannot be sent to the "
                                     "program: type"] * 2


def test_a_program_class_name_never_changes_how_the_harness_treats_it():
    """A class's names are the program's text: a forged reference whose class claims a module of
    the standard library's (pathlib's PosixPath, which the test process would send back as a
    path) or whose name is no str or too long is malformed (ignored: the test fails at its
    timeout, whatever it catches); a name longer than the bound keeps the harness's; beyond the
    bound on classes a program object's type is the harness's, and the test process makes no more
    classes."""
    program = """\
        import gc
        HARNESS = {d["__name__"]: d for d in gc.get_objects()
                   if type(d) is dict and str(d.get("__name__")).startswith("sandbox_")}
        RAW = HARNESS["sandbox_values"]["Dumped"]
        def forged(names):
            return RAW('{"r":[999999,null,0,%s]}' % names, None)
        Long = type("L" * 5000, (), {})
        def echo(x):
            return x
        def long():
            return Long()
        def many(n):
            return [type("C%d" % i, (), {})() for i in range(n)]
        """
    forgeries = ["x = forged('[0,\"Dog\",\"Dog\",\"__main__\"]')\n"
                 "assert type(x).__name__ == 'Dog'",
                 "try:\n    forged('[0,\"PosixPath\",\"PosixPath\",\"pathlib\"]')\n"
                 "except BaseException:\n    pass",
                 "try:\n    forged('[0,\"Dog\",\"Dog\",7]')\nexcept BaseException:\n    pass",
                 "try:\n    forged('[0,\"%s\",\"Dog\",\"__main__\"]' % ('D' * 5000))\n"
                 "except BaseException:\n    pass"]
    result = run(program, forgeries, timeout=0.5, names=["forged"])
    assert result["passed"] == [True, False, False, False], result["errors"]
    tests = ["x = long()\nassert type(x).__name__ != 'L' * 5000 and echo(x) is x",
             "import gc\nremote = next(d for d in gc.get_objects() if type(d) is dict\n"
             "              and d.get('__name__') == 'sandbox_remote')\nfound = many(3000)\n"
             "assert type(found[0]).__name__ == 'C0' and type(found[500]).__name__ == 'C500'\n"
             "assert len(remote['THEIRS']) <= remote['CLASS_CAP'] < 3000\n"
             "assert type(found[-1]).__name__ == 'Remote'"]
    result = run(program, tests, names=["echo", "long", "many"])
    assert result["passed"] == [True, True], result["errors"]


def test_a_tests_bare_object_crosses_as_itself():
    """A test's sentinel, object(), passed to the program crosses as a test object: the program
    holds it, compares it by identity, puts it in containers, uses it as a dict key across calls
    and returns it; it comes back as that very object."""
    program = """\
        SEEN = {}
        def first_or(xs, default):
            return xs[0] if xs else default
        def same(a, b):
            return a is b and a == b
        def remember(key, value):
            SEEN[key] = value
            return len(SEEN)
        def lookup(key):
            return SEEN.get(key)
        def box(x):
            return [x, (x,), {x: 1}, {x}]
        def kind(x):
            return type(x).__name__, isinstance(x, object), x is None
        """
    tests = ["S = object()\nassert first_or([], S) is S and first_or([1], S) == 1",
             "S = object()\nassert same(S, S) and not same(S, object())",
             "S, T = object(), object()\nremember(S, 1)\nremember(T, 2)\n"
             "assert lookup(S) == 1 and lookup(T) == 2 and lookup(object()) is None",
             "S = object()\nb = box(S)\n"
             "assert b[0] is S and b[1][0] is S and list(b[2]) == [S] and S in b[3]",
             "assert kind(object()) == ('object', True, False)"]
    assert plain(program, tests) == [True] * len(tests)
    result = run(program, tests)
    assert result["passed"] == [True] * len(tests), result["errors"]
