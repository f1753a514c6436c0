"""A program's instance of its own subclass of a value type (a Stack(list), an IntEnum's member)
crosses the sandbox as a program object whose methods are its own (nanomarl/sandbox_remote.py:
Valued), yet compares, hashes, measures, iterates and converts as its base's value, taken in the
program's process by the base's own C methods and judged in the test process; where its class
overrides one of those methods, that operation fails the test. Each case is compared with plain
Python."""
import textwrap

from nanomarl.sandbox import run_tests_in_sandbox

LIMITS = dict(timeout=1.0, memory_mb=256)


def run(program: str, tests: list[str], **kwargs) -> dict:
    return run_tests_in_sandbox(textwrap.dedent(program), [textwrap.dedent(t) for t in tests],
                                **{**LIMITS, **kwargs})


def plain(program: str, tests: list[str]) -> list[bool]:
    """The verdicts of plain Python: the program and the tests in one scope of this process."""
    scope = {"__name__": "plain"}
    exec(textwrap.dedent(program), scope)
    verdicts = []
    for test in tests:
        try:
            exec(textwrap.dedent(test), scope)
            verdicts.append(True)
        except Exception:
            verdicts.append(False)
    return verdicts


STACKS = """\
    class Stack(list):
        def push(self, x):
            self.append(x)
        def peek(self):
            return self[-1]
        def is_empty(self):
            return len(self) == 0
    class Graph(dict):
        def add_edge(self, a, b):
            self.setdefault(a, []).append(b)
    class Buggy(list):
        def pop(self):
            return self[0]
    def new_stack():
        return Stack()
    def make_buggy(xs):
        return Buggy(xs)
    def is_stack(s):
        return type(s) is Stack
    """


def test_a_programs_list_subclass_keeps_its_methods_and_its_lists_value():
    """Its own methods run in the program (a buggy pop fails as in plain Python, push works), its
    value is the list's as it is at each question (==, len, iteration, `in`, truth, slices,
    concatenation), item assignment and `+=` change the program's object, isinstance with list
    holds, `type(s) is list` does not, and passed back it is the program's own Stack."""
    tests = ["s = new_stack(); s.push(3); assert s == [3] and not s.is_empty()",
             "s = Stack(); s.push(1); s.push(2); assert s.peek() == 2 and len(s) == 2",
             "g = Graph(); g.add_edge(1, 2); assert g == {1: [2]} and 1 in g and g[1] == [2]",
             "s = Stack([1]); assert isinstance(s, list) and type(s) is not list and is_stack(s)",
             "s = make_buggy([1, 2, 3]); assert s.pop() == 3",
             "s = Stack([3, 1, 2]); assert sorted(s) == [1, 2, 3] and s[1:] == [1, 2] and 2 in s"
             "\nassert s and [0] + s + [4] == [0, 3, 1, 2, 4] and list(reversed(s)) == [2, 1, 3]",
             "s = Stack([1]); s += [2]; s[0] = 0; del s[1]; s.push(5)\n"
             "assert s == [0, 5] and s.peek() == 5 and is_stack(s)",
             "s = Stack([1, 2]); n = len(s); s.push(3); assert len(s) == n + 1 and s == [1, 2, 3]",
             "assert repr(Stack([1, 'a'])) == \"[1, 'a']\" and str(new_stack()) == '[]'"]
    expected = [True, True, True, True, False, True, True, True, True]
    assert plain(STACKS, tests) == expected
    result = run(STACKS, tests)
    assert result["passed"] == expected, result["errors"]


def test_an_enum_member_of_the_programs_is_its_member_with_its_bases_value():
    """An IntEnum's member is no int (`type(x) is int` fails as in plain Python) but compares,
    hashes, indexes and adds as one; its name, repr and str are its class's; a (str, Enum)
    member equals its str and its str() is its class's text; members in a set or as dict keys
    arrive whole."""
    program = """\
        from enum import Enum, IntEnum
        class N(IntEnum):
            ONE = 1
            TWO = 2
        class Color(str, Enum):
            RED = "red"
        def two():
            return N.TWO
        def red():
            return Color.RED
        def members():
            return list(N)
        def table():
            return {N.ONE: "one", N.TWO: "two"}, {N.ONE}
        """
    tests = ["assert type(two()) is int and two() == 2",
             "assert two() == 2 and 2 == two() and two() + 1 == 3 and 1 + two() == 3\n"
             "assert -two() == -2 and two() * 'ab' == 'abab' and two() < 3 and not two() > 2",
             "assert isinstance(two(), int) and {two(): 'x'}[2] == 'x' and [0, 1, 2][two()] == 2"
             "\nassert int(two()) == 2 and float(two()) == 2.0 and hash(two()) == hash(2)",
             "assert repr(two()) == '<N.TWO: 2>' and two().name == 'TWO' and two() is two()",
             "assert red() == 'red' and red() in {'red'} and str(red()) == 'Color.RED'\n"
             "assert red().value == 'red' and 'a ' + red() == 'a red'",
             "assert sorted(members(), reverse=True) == [2, 1] and sum(members()) == 3",
             "names, ones = table(); assert names == {1: 'one', 2: 'two'} and ones == {1}"]
    expected = [False, True, True, True, True, True, True]
    assert plain(program, tests) == expected
    result = run(program, tests)
    assert result["passed"] == expected, result["errors"]


def test_a_subclass_that_overrides_an_operation_is_refused_it():
    """Where the program's class has its own __eq__, __len__ or __iter__, that operation fails
    the test (its own method could answer anything, its base's would not be plain Python's
    answer), whatever plain Python says; the others are its base's, on the value its base's C
    methods take (a dict subclass's keys() or __iter__, a tuple subclass's __iter__, are not
    asked)."""
    program = """\
        class Always(list):
            def __eq__(self, other):
                return True
            __hash__ = None
        class Short(list):
            def __len__(self):
                return 0
        class Backwards(tuple):
            def __iter__(self):
                return iter(tuple.__getitem__(self, slice(None, None, -1)))
        class Fake(dict):
            def keys(self):
                return ["fake"]
            def __iter__(self):
                return iter(["fake"])
        class Loose(int):
            def __eq__(self, other):
                return abs(int(self) - other) <= 1
            __hash__ = int.__hash__
        def always():
            return Always([0])
        def short():
            return Short([1, 2])
        def backwards():
            return Backwards((1, 2, 3))
        def fake():
            return Fake(a=1)
        def loose():
            return Loose(3)
        """
    tests = ["assert always() == [1, 2]",
             "assert len(short()) == 2",
             "assert short() == [1, 2] and short()[1] == 2",
             "assert list(backwards()) == [1, 2, 3]",
             "assert backwards() == (1, 2, 3) and backwards()[0] == 1",
             "assert fake() == {'a': 1} and 'a' in fake() and fake()['a'] == 1",
             "assert loose() == 4",
             "assert loose() != 9 and loose() + 1 == 4 and hash(loose()) == 3"]
    assert plain(program, tests) == [True, False, True, False, True, True, True, True]
    result = run(program, tests, max_timeouts=8)
    assert result["passed"] == [False, False, True, False, True, True, False, True], (
        result["errors"])


def test_a_dict_subclass_reads_items_as_the_program_does():
    """An item read runs in the program (a dict subclass's __missing__ too), its value is the
    dict's; a context's (prompt's) subclass of a value type still crosses as its base's value."""
    program = """\
        class Tally(dict):
            def __missing__(self, key):
                return 0
        def tally(xs):
            t = Tally()
            for x in xs:
                t[x] += 1
            return t
        """
    tests = ["t = tally('aab'); assert t['a'] == 2 and t['z'] == 0 and len(t) == 2",
             "t = tally('aab'); assert t == {'a': 2, 'b': 1} and sorted(t) == ['a', 'b']"]
    assert plain(program, tests) == [True, True]
    result = run(program, tests)
    assert result["passed"] == [True, True], result["errors"]
    context = "class Row(list):\n    pass\n"
    declared = run(context + "def row():\n    return Row([1, 2])\n",
                   ["assert row() == [1, 2] and type(row()) is list"], context=context,
                   names=["row"])
    assert declared["passed"] == [True], declared["errors"]
