"""Right programs that plain Python passes, and the sandbox with them: a test's UserList or
UserDict argument (a copy rebuilt in the program's process and written back after the call:
nanomarl/sandbox_copies.py), an array.array either way (a value, numbered for write-back as a
bytearray is: nanomarl/sandbox_stdlib.py:stdlib_state) and dataclasses.asdict, astuple and fields
of a program's dataclass instance (its fields' names told with its class:
nanomarl/sandbox_bases.py:named, nanomarl/sandbox_remote.py:remote_class). Each case is compared
with plain Python; beside each, a wrong program shows the fix credits nothing plain Python would
not (and no value the program's own code could answer for)."""

import textwrap

from test_sandbox_semantics import plain, run

CONTAINERS = """\
    import array
    from collections import UserDict, UserList
    def take(xs, i):
        return xs[i]
    def push(xs, x):
        xs.append(x)
        return xs
    def kinds(*xs):
        return all(isinstance(x, (UserList, UserDict, array.array)) for x in xs)
    def bump(d, k):
        d[k] = d.get(k, 0) + 1
    def keep(xs):
        global KEPT
        KEPT = xs
    def grow():
        KEPT.append(len(KEPT))
    def make_array():
        return array.array('i', [1, 2])
    def apply(xs, callback):
        return callback(xs)
    """


def test_a_userlist_userdict_or_array_argument_crosses_as_a_copy_written_back():
    """The program gets a real UserList, UserDict or array.array (isinstance holds), its changes
    reach the test's object after the call, a returned argument is the test's own, and one the
    program keeps stays the test's object across calls; the program's own array is a value (it
    compares, and a test's callback gets the program's copy of the test's as one)."""
    tests = ["from collections import UserList; assert take(UserList([1, 2, 3]), 0) == 1",
             "import array; assert take(array.array('i', [5, 6]), 1) == 6",
             "import array; a = array.array('i', [5]); r = push(a, 7)\n"
             "assert a == array.array('i', [5, 7]) and r is a",
             "from collections import UserList; u = UserList([[1]]); first = u[0]; push(u, 2)\n"
             "assert u == [[1], 2] and u[0] is first",
             "from collections import UserDict; d = UserDict(); bump(d, 'a'); bump(d, 'a')\n"
             "assert d == {'a': 2}",
             "import array; from collections import UserDict, UserList\n"
             "assert kinds(array.array('d', [0.5]), UserList(), UserDict())",
             "import array; a = array.array('q', [2 ** 40]); keep(a); grow(); grow()\n"
             "assert a.tolist() == [2 ** 40, 1, 2]",
             "import array; assert take(array.array('u', 'hi'), 1) == 'i'",
             "import array; assert make_array() == array.array('i', [1, 2])",
             "import array; assert apply(array.array('d', [1.5, 2.5]), lambda v: v[1]) == 2.5"]
    assert plain(CONTAINERS, tests) == [True] * len(tests)
    result = run(CONTAINERS, tests)
    assert result["passed"] == [True] * len(tests), result["errors"]


def test_a_copied_container_credits_no_wrong_change():
    """A program that changes the test's array or UserList where it must not fails as in plain
    Python; one that puts an object whose __eq__ always answers True into the test's UserDict, or
    returns an array of its own class whose __eq__ does (plain Python credits both), fails the
    test: each crosses as the program's object."""
    program = """\
    import array
    class Liar(array.array):
        def __eq__(self, other):
            return True
    def liar():
        return Liar('i', [0])
    def total(xs):
        xs.append(99)
        return sum(xs[:-1])
    class Anything:
        def __eq__(self, other):
            return True
    def fill(d):
        d["k"] = Anything()
    """
    tests = ["import array; a = array.array('i', [1, 2]); assert total(a) == 3 and len(a) == 2",
             "from collections import UserList; u = UserList([1, 2])\n"
             "assert total(u) == 3 and u == [1, 2]",
             "from collections import UserDict; d = UserDict(); fill(d); assert d == {'k': 5}",
             "import array; assert liar() == array.array('i', [9])"]
    assert plain(program, tests) == [False, False, True, True]
    result = run(program, tests)
    assert result["passed"] == [False] * 4, result["errors"]


DATACLASSES = """\
    from dataclasses import dataclass, field
    @dataclass
    class Item:
        name: str
        price: float
        tags: list = field(default_factory=list)
    @dataclass(frozen=True)
    class Order:
        item: Item
        qty: int
    class Plain:
        pass
    def make(name, price):
        return Item(name, price)
    def order():
        return Order(Item('a', 1.0, ['x']), 2)
    def plain_object():
        return Plain()
    """


def test_asdict_astuple_and_fields_of_a_program_dataclass():
    """A program's dataclass instance is a dataclass instance for dataclasses.asdict, astuple,
    fields and is_dataclass (its fields' names, read as attributes from the program's process),
    nested ones too; a program's plain instance is none."""
    tests = ["from dataclasses import asdict\n"
             "assert asdict(make('a', 1.0)) == {'name': 'a', 'price': 1.0, 'tags': []}",
             "from dataclasses import astuple; assert astuple(order()) == (('a', 1.0, ['x']), 2)",
             "from dataclasses import fields, is_dataclass; x = make('a', 1)\n"
             "assert is_dataclass(x) and [f.name for f in fields(x)] == ['name', 'price', 'tags']",
             "from dataclasses import asdict\n"
             "assert asdict(order()) == {'item': {'name': 'a', 'price': 1.0, 'tags': ['x']}, "
             "'qty': 2}",
             "from dataclasses import is_dataclass; assert not is_dataclass(plain_object())",
             "from dataclasses import asdict; asdict(plain_object())"]
    expected = [True, True, True, True, True, False]
    assert plain(DATACLASSES, tests) == expected
    result = run(DATACLASSES, tests)
    assert result["passed"] == expected, result["errors"]


def test_asdict_of_a_program_dataclass_credits_no_program_value():
    """asdict's values are read from the program as attributes are: a field holding an object
    whose __eq__ always answers True (plain Python credits it) fails the test, and a wrong field
    fails as in plain Python; a class whose __dataclass_fields__ is no dict of fields is none, and
    a field's name the harness reads without asking (a forged answer's) makes none either."""
    program = """\
    from dataclasses import dataclass
    class Anything:
        def __eq__(self, other):
            return True
    @dataclass
    class Point:
        x: object
        y: int
    def cheat():
        return Point(Anything(), 2)
    def wrong():
        return Point(1, 3)
    class Fake:
        __dataclass_fields__ = {"x": "not a field"}
        x = 1
    def fake():
        return Fake()
    class Forged:
        pass
    def forged():
        import gc
        for f in gc.get_objects():  # (the harness's own module, patched as a hostile program can)
            if type(f).__name__ == "function" and "fields_of" in f.__globals__:
                f.__globals__["fields_of"] = lambda kind: ["_Remote__handle"]
        return Forged()
    """
    tests = ["from dataclasses import asdict; assert asdict(cheat()) == {'x': 1, 'y': 2}",
             "from dataclasses import asdict; assert asdict(wrong()) == {'x': 1, 'y': 2}",
             "from dataclasses import asdict; assert asdict(fake()) == {'x': 1}",
             "from dataclasses import fields; assert fields(forged())[0].name == '_Remote__handle'"]
    assert plain(program, tests[:2]) == [True, False]
    result = run(program, tests)
    assert result["passed"] == [False] * 4, result["errors"]


USER_CHANGES = """\
    def to_tuple(u):
        u.data = (1, 2)
    def rebind(d):
        d.data = {'a': 1}
    def same_items(u):
        u.data = list(u.data)
    def mark(x):
        x.seen = True
    def keep(x):
        global KEPT
        KEPT = x
    def later():
        KEPT.data = {'a': 1}
    """


def test_a_userlist_whose_data_the_program_makes_a_tuple_is_no_list_written_back():
    """A program that makes a test's UserList's data a tuple: plain Python's UserList then
    compares with no list. Writing its items back into the test's list would credit it; its
    write-back is refused (sandbox_stdlib.py:intact): the test fails, as in plain Python."""
    tests = ["from collections import UserList; u = UserList([0]); to_tuple(u)\n"
             "assert u == [1, 2]"]
    assert plain(USER_CHANGES, tests) == [False]
    result = run(USER_CHANGES, tests)
    assert result["passed"] == [False], result["errors"]
    assert "refused" in result["errors"][0], result["errors"]


def test_a_userdict_whose_data_the_program_rebinds_leaves_the_old_data_as_it_was():
    """A program that rebinds a test's UserDict's (or UserList's) data, in the call or a later one
    (kept), or to a new list of the same items: plain Python leaves the test's old data as it was,
    which a write-back into it would change (or, for the same items, would leave the UserList's
    data). Each fails the test."""
    tests = ["from collections import UserDict; d = UserDict(); inner = d.data; rebind(d)\n"
             "assert inner == {'a': 1}",
             "from collections import UserDict; d = UserDict(); inner = d.data; keep(d); later()\n"
             "assert inner == {'a': 1}",
             "from collections import UserList; u = UserList([1]); inner = u.data; same_items(u)\n"
             "assert inner is u.data"]
    assert plain(USER_CHANGES, tests) == [False] * 3
    result = run(USER_CHANGES, tests)
    assert result["passed"] == [False] * 3, result["errors"]


def test_an_attribute_the_program_sets_on_a_userlist_is_not_lost():
    """An attribute the program sets on a test's UserList or UserDict is the test's object's in
    plain Python; a copy that lost it would credit `not hasattr`. The call fails."""
    tests = ["from collections import UserList; u = UserList(); mark(u)\n"
             "assert not hasattr(u, 'seen')",
             "from collections import UserDict; d = UserDict(); mark(d)\n"
             "assert not hasattr(d, 'seen')"]
    assert plain(USER_CHANGES, tests) == [False, False]
    result = run(USER_CHANGES, tests)
    assert result["passed"] == [False, False], result["errors"]


HIDDEN_FIELDS = """\
    from dataclasses import dataclass
    class Meta(type):
        @property
        def __dataclass_fields__(cls):
            raise AttributeError("no")
    @dataclass
    class P:
        x: int
        y: int = 2
    class Q(metaclass=Meta):
        __dataclass_fields__ = P.__dataclass_fields__
        x = 1
        y = 2
    def hidden():
        return Q()
    def forged():
        p = P(1)
        p.__dataclass_fields__ = {}
        return p
    class R(P):
        def __getattribute__(self, name):
            return {} if name == "__dataclass_fields__" else object.__getattribute__(self, name)
    def answered():
        return R(1)
    def made():
        return P(1)
    def drop_y():
        del P.__dataclass_fields__['y']
    """


def test_a_metaclass_that_hides_dataclass_fields_makes_no_dataclass():
    """A class whose metaclass hides __dataclass_fields__ is no dataclass in plain Python (asdict
    raises TypeError); its class's fields told would credit it. It has none in the test
    (sandbox_bases.py:fields_of): asdict raises TypeError there too."""
    tests = ["from dataclasses import asdict; assert asdict(hidden()) == {'x': 1, 'y': 2}",
             "from dataclasses import is_dataclass; assert is_dataclass(hidden())"]
    assert plain(HIDDEN_FIELDS, tests) == [False, False]
    result = run(HIDDEN_FIELDS, tests)
    assert result["passed"] == [False, False], result["errors"]


def test_fields_an_object_tells_otherwise_than_its_class_fail_the_test():
    """An instance's own __dataclass_fields__, its class's __getattribute__, or its class's fields
    changed after it crossed: plain Python's asdict reads those, not the fields told when its
    class crossed. Its object is asked (sandbox_remote.py:Fields): the test fails where they
    differ, and passes where they do not."""
    tests = ["from dataclasses import asdict; assert asdict(forged()) == {'x': 1, 'y': 2}",
             "from dataclasses import asdict; assert asdict(answered()) == {'x': 1, 'y': 2}",
             "from dataclasses import asdict; p = made(); drop_y()\n"
             "assert asdict(p) == {'x': 1, 'y': 2}"]
    assert plain(HIDDEN_FIELDS, tests) == [False] * 3
    result = run(HIDDEN_FIELDS, tests)
    assert result["passed"] == [False] * 3, result["errors"]
    tests = ["from dataclasses import asdict, fields; p = made()\n"
             "assert asdict(p) == {'x': 1, 'y': 2} and [f.name for f in fields(p)] == ['x', 'y']"]
    assert plain(HIDDEN_FIELDS, tests) == [True]
    assert run(HIDDEN_FIELDS, tests)["passed"] == [True]


def test_no_program_object_is_made_in_the_test_process_from_its_fields():
    """dataclasses.replace(p) calls p.__class__(**fields), and P(*astuple(p)) its class with them:
    with fields named handle and kind, they would make a Remote of the handle and type the
    program chose (isinstance(..., int) credited). A Remote's class, and a stand-in of one (a
    program class with a base the context declares), raises TypeError instead: no program object
    is made in the test process (sandbox_remote.py:remote, sandbox_bases.py:Standing)."""
    context = "class Base:\n    handle = 7\n    def __init__(self, *args, **kwargs):\n" + (
        "        pass\n")
    program = context + textwrap.dedent("""\
        from dataclasses import dataclass
        @dataclass
        class P:
            handle: int
            kind: object
        @dataclass
        class S(Base):
            kind: object
            handle: int
        def mk():
            return P(0, int)
        def based():
            return S(int, 0)
        """)
    tests = ["import dataclasses; assert dataclasses.replace(based()).handle == 7",
             "import dataclasses; assert isinstance(dataclasses.replace(mk()), int)",
             "from dataclasses import astuple; p = mk()\n"
             "assert isinstance(type(p)(*astuple(p)), int)"]
    assert plain(program, tests) == [False] * 3
    result = run(program, tests, context=context, names=["mk", "based"])
    assert result["passed"] == [False] * 3, result["errors"]


def test_a_program_dataclass_of_a_value_type_is_no_dataclass_in_the_test():
    """A program's dataclass that subclasses dict is a Valued in the test process: its __class__
    would build a plain dict of its fields (replace() == {'a': 1}, where plain Python builds a Row,
    an empty dict), so it has no fields there: replace() and asdict() of it fail the test."""
    program = """\
        from dataclasses import dataclass
        @dataclass
        class Row(dict):
            a: int
        def make():
            return Row(1)
        """
    tests = ["import dataclasses; assert dataclasses.replace(make()) == {'a': 1}",
             "import dataclasses; assert dataclasses.asdict(make()) == {'a': 2}"]
    assert plain(program, tests) == [False, False]
    result = run(program, tests)
    assert result["passed"] == [False, False], result["errors"]
