"""sandbox.py against plain Python's semantics for what a program's exception holds: in the test
its attributes (its own, its class's, a property's, a method), its str and repr are those of the
program's object behind it, read, set and called in the program's process (the program's own code
there, never in the test process; each answer a value or a program object, which fails the test
where it is compared), and a test's subclass of a program's exception class is made by the
program's class. A wrong program gains nothing: a lying object, a hostile __getattr__ or __repr__,
an attribute it changes after raising, one it no longer holds, a __str__ or __getattr__ whose side
effect would run as the exception crosses, or one exception object raised twice never passes what
plain Python fails."""
from test_sandbox_semantics import plain, run

BANK = """\
    import os
    class Mixin:
        region = "eu"
    class BankError(Mixin, Exception):
        code = 400
        status = "open"
        def describe(self):
            return "bank: " + str(self)
        @property
        def pid(self):
            return os.getpid()
        @classmethod
        def kind(cls):
            return cls.__name__
    class InsufficientFunds(BankError):
        def __init__(self, balance, amount):
            super().__init__(f"need {amount}, have {balance}")
            self.balance, self.amount = balance, amount
            self.status = "short"
            self.history = [balance]
        def __repr__(self):
            return f"InsufficientFunds({self.balance}, {self.amount})"
        def spend(self, n):
            self.balance -= n
            self.history.append(self.balance)
            return self.balance
    KEPT = []
    def withdraw(balance, amount):
        if amount > balance:
            KEPT.append(InsufficientFunds(balance, amount))
            raise KEPT[-1]
        return balance - amount
    def program_pid():
        return os.getpid()
    def refund(n):
        KEPT[-1].amount -= n
        return KEPT[-1].amount
    def seen_amount():
        return KEPT[-1].amount
    def fail():
        raise BankError("plain")
    """


def caught(call, kind, *lines):
    """A test that catches call's exception as kind (e) and runs lines in the `except`."""
    return "try:\n    %s\nexcept %s as e:\n" % (call, kind) + "".join(
        "    " + line + "\n" for line in "\n".join(lines).split("\n"))


def banked(*lines):
    return caught("withdraw(5, 9)", "BankError", *lines)


def test_a_programs_exception_holds_its_attributes_and_its_classes():
    """Its own attributes, its class's (an instance's own before its class's, a base's and a
    mixin's after), a property (computed in the program's process), a classmethod, a method,
    str, repr and args, as plain Python gives them; an attribute it lacks is its AttributeError
    (many asked: the program's process still holds it)."""
    tests = [banked("assert (e.code, e.amount, e.balance) == (400, 9, 5)"),
             banked("assert (e.status, e.region) == ('short', 'eu')"),
             banked("assert e.describe() == 'bank: need 9, have 5' and e.kind() == "
                    "'InsufficientFunds'"),
             banked("assert repr(e) == 'InsufficientFunds(5, 9)' and str(e) == "
                    "'need 9, have 5' and e.args == ('need 9, have 5',)"),
             banked("assert e.pid == program_pid()"),
             banked("assert not hasattr(e, 'missing') and getattr(e, 'missing', 3) == 3",
                    "assert not any(hasattr(e, 'x%d' % i) for i in range(70)) and e.code == 400",
                    "try:\n    e.missing\nexcept AttributeError as error:\n"
                    "    assert str(error) == \"'InsufficientFunds' object has no attribute "
                    "'missing'\""),
             banked("assert e.history == [5] and isinstance(e, InsufficientFunds)")]
    assert plain(BANK, tests) == [True] * 7
    result = run(BANK, tests + [banked("import os", "assert e.pid != os.getpid()")])
    assert result["passed"] == [True] * 8, result["errors"]  # (the property ran there)


def test_a_programs_exception_is_one_object_on_both_sides():
    """What the test sets on it the program's methods see, what its methods or the program's
    later calls change the test sees, a list it holds is the program's own, and its copy
    (copy.copy) is another object."""
    tests = [banked("e.amount = 2\nassert repr(e) == 'InsufficientFunds(5, 2)' and "
                    "seen_amount() == 2"),
             banked("assert e.spend(3) == 2 and e.balance == 2 and e.history == [5, 2]"),
             banked("assert refund(4) == 5 and e.amount == 5"),
             banked("e.history.append(7)\nassert e.spend(1) == 4 and e.history == [5, 7, 4]"),
             banked("del e.status\nassert e.status == 'open'"),
             caught("fail()", "BankError", "import copy", "e.note = 5\nc = copy.copy(e)",
                    "c.note = 1\nassert (e.note, c.note, c.code, str(c)) == (5, 1, 400, 'plain')")]
    assert plain(BANK, tests) == [True] * 6
    result = run(BANK, tests)
    assert result["passed"] == [True] * 6, result["errors"]


def test_a_tests_subclass_of_a_programs_exception_class_is_made_by_it():
    """A test's subclass (its own __init__ and method or none) is made by the program's class's
    constructor: its attributes, args, text and methods are the program's object's; `except`
    catches it as the program's class; the test's own attributes stay its own."""
    tests = ["class Mine(InsufficientFunds):\n    pass\n"
             "m = Mine(1, 2)\nassert (m.amount, m.balance, m.code) == (2, 1, 400)\n"
             "assert m.args == ('need 2, have 1',) and str(m) == 'need 2, have 1'",
             "class Mine(InsufficientFunds):\n    pass\n"
             "assert Mine(1, 2).describe() == 'bank: need 2, have 1'\n"
             "assert repr(Mine(1, 2)) == 'InsufficientFunds(1, 2)'",
             "class Mine(InsufficientFunds):\n    label = 'mine'\n"
             "    def __init__(self, amount):\n        self.note = 'n'\n"
             "        super().__init__(0, amount)\n    def twice(self):\n"
             "        return 2 * self.amount\n"
             "m = Mine(4)\nassert (m.twice(), m.label, m.note, m.balance) == (8, 'mine', 'n', 0)",
             "class Mine(InsufficientFunds):\n    pass\n"
             "try:\n    raise Mine(1, 2)\nexcept BankError as e:\n"
             "    assert type(e) is Mine and e.amount == 2"]
    assert plain(BANK, tests) == [True] * 4
    result = run(BANK, tests)
    assert result["passed"] == [True] * 4, result["errors"]


LIARS = """\
    class Liar:
        def __eq__(self, other):
            return True
        __hash__ = object.__hash__
    class LiarText(str):
        def __eq__(self, other):
            return True
        __hash__ = str.__hash__
    class Lying(Exception):
        code = Liar()
        def __init__(self):
            super().__init__("x")
            self.amount = Liar()
        def __repr__(self):
            return LiarText("?")
        def __str__(self):
            return LiarText("?")
    class Missing(Exception):
        def __getattr__(self, name):
            if name.startswith(("_", "program")):
                raise AttributeError(name)
            return Liar()
    class Every(Exception):
        def __getattribute__(self, name):
            if name.startswith(("_", "program", "args")):
                return object.__getattribute__(self, name)
            return Liar()
    def boom(kind=Lying):
        raise kind()
    """


def test_a_lying_object_an_exception_holds_passes_nothing():
    """Its attribute (its own, its class's, its __getattr__'s or __getattribute__'s) that is a
    program object with an __eq__ always true, its str or repr that is a str subclass with one,
    fails the test where plain Python passes it."""
    def catching(call, line):
        return caught(call, "Exception", line)
    tests = [catching("boom()", "assert e.code == 400"),
             catching("boom()", "assert e.amount == 9"),
             catching("boom()", "assert repr(e) == 'R(1)'"),
             catching("boom()", "assert str(e) == 'right'"),
             catching("boom(Missing)", "assert e.anything == 'right'"),
             catching("boom(Every)", "assert e.code == 400")]
    assert plain(LIARS, tests) == [True] * 6
    result = run(LIARS, tests)
    assert result["passed"] == [False] * 6, result["errors"]
    assert all("cannot be sent" not in error for error in result["errors"]), result["errors"]


def test_an_attribute_the_program_changes_after_raising_is_seen_changed():
    """A method that changes its exception, a later call that changes it, and one the program's
    process no longer holds once read through (the program sent 70 more exceptions: its numbers
    are dropped) fail the test as plain Python fails it, never read as it first crossed; one
    counted up at each read is read anew as plain Python reads it."""
    program = """\
        class Buggy(Exception):
            def __init__(self, amount):
                super().__init__(amount)
                self.amount = amount
                self.reads = 0
            def describe(self):
                self.amount = 0
                return "ok"
            def flood(self):
                self.amount = 0
                return [Buggy(i) for i in range(70)]
            @property
            def counted(self):
                self.reads += 1
                return self.reads
        KEPT = []
        def boom():
            KEPT.append(Buggy(9))
            raise KEPT[-1]
        def spoil():
            KEPT[-1].amount = 0
        """
    def catching(*lines):
        return caught("boom()", "Buggy", *lines)
    tests = [catching("e.describe()\nassert e.amount == 9"),
             catching("spoil()\nassert e.amount == 9"),
             catching("assert e.amount == 9\ne.flood()\nassert e.amount == 9"),
             catching("assert e.counted == 1 and e.counted == 1"),
             catching("assert e.amount == 9 and e.counted == 1 and e.counted == 2")]
    assert plain(program, tests) == [False, False, False, False, True]
    result = run(program, tests)
    assert result["passed"] == [False, False, False, False, True], result["errors"]
    assert "no longer holds this exception" in result["errors"][2]


def test_a_tests_subclass_gains_nothing_from_a_hostile_program_class():
    """A program class whose __new__ returns no instance of it, or whose constructor raises,
    fails the test's subclass as plain Python would not credit it; one of two program classes is
    refused (its object would be one class's alone)."""
    program = """\
        class Odd(Exception):
            def __new__(cls, *args):
                return 5
        class Strict(Exception):
            def __init__(self, n):
                raise ValueError("no")
        class Other(Exception):
            code = 1
        """
    tests = ["class Mine(Odd):\n    pass\nassert Mine() == 5",
             "class Mine(Strict):\n    pass\nMine(1)",
             "class Both(Other, Strict):\n    pass\ntry:\n    Both(1)\nexcept ValueError:\n"
             "    pass"]
    result = run(program, tests)
    assert result["passed"] == [False, False, False], result["errors"]


def test_a_self_holding_exception_reads_through_and_a_cyclic_attribute_is_refused():
    """An exception that holds itself is read through to it at each level; an attribute that is
    a cyclic list cannot be sent: the test fails whatever it catches (no answer made up)."""
    program = """\
        class Loop(Exception):
            def __init__(self):
                super().__init__("loop")
                self.me, self.ring, self.amount = self, [1], 9
                self.ring.append(self.ring)
        def boom():
            raise Loop()
        """
    tests = [caught("boom()", "Loop", "assert e.me.me.amount == 9"),
             caught("boom()", "Loop", "try:\n    e.ring\nexcept BaseException:\n    pass")]
    assert plain(program, tests) == [True, True]
    result = run(program, tests)
    assert result["passed"] == [True, False], result["errors"]
    assert "cannot be sent" in result["errors"][1]


def test_a_program_that_forges_its_answers_gains_nothing():
    """A program that patches its copy of the harness (its `answered`, or the function its class
    crosses with) gets no more than a program object: a lying answer fails where it is compared,
    one that is no program function fails the test whatever it catches."""
    program = """\
        import gc
        class Liar:
            def __eq__(self, other):
                return True
            __hash__ = object.__hash__
        class Forged(Exception):
            pass
        def harness(key):
            return next(found for found in gc.get_objects()
                        if type(found) is dict and key in found and "crossing" in found)
        def lie():
            errors = harness("answered")
            errors["Liar"] = Liar
            errors["answered"].__code__ = (lambda handle, how, name, value: (Liar(),)).__code__
            raise Forged()
        def forge():
            child, link = harness("program_side"), harness("answered")["LINK"]
            real = child["crossing"]
            def crossing(value, inner, refer):
                if value is not Forged:
                    return real(value, inner, refer)
                link["side"] = "neither"  # (the item without answered, then 5 in its place)
                text = real(value, inner, refer)
                link["side"] = "program"
                return text[:-2] + ",5]}"
            child["crossing"] = crossing
            raise Forged()
        """
    tests = [caught("lie()", "Forged", "assert e.code == 400"),
             caught("forge()", "BaseException", "pass")]
    result = run(program, tests)
    assert result["passed"] == [False, False], result["errors"]
    assert "no value" in result["errors"][0], result["errors"]
    assert "malformed exception class" in result["errors"][1], result["errors"]


SIDE_EFFECTS = """\
    state = {"ready": False, "reads": 0}
    class NotReady(Exception):
        def __str__(self):
            state["ready"] = True
            return "not ready"
    class Counted(Exception):
        def __getattr__(self, name):
            state["reads"] += 1
            raise AttributeError(name)
    class Watched(Exception):
        def __getattribute__(self, name):
            state["reads"] += 1
            return object.__getattribute__(self, name)
    class Token:
        def __str__(self):
            state["ready"] = True
            return "token"
        __repr__ = __str__
    def check(kind="NotReady"):
        if not state["ready"]:
            raise NotReady() if kind == "NotReady" else ValueError(Token())
        return "ok"
    def boom(kind):
        raise {"Counted": Counted, "Watched": Watched}[kind]("x")
    def reads():
        return state["reads"]
    def ready():
        return state["ready"]
    def reset():
        state["ready"], state["reads"] = False, 0
    """


def test_a_programs_exception_runs_none_of_its_code_as_it_crosses():
    """Its class's __str__, __getattr__ or __getattribute__, or the __str__ of an object among a
    builtin exception's arguments, runs only where the test asks its text or an attribute, as
    in plain Python: a wrong program whose exception's text flips its state fails (the test that
    expects the state unchanged passes); its str asked later is its __str__'s."""
    def first(call, *lines):
        return "reset()\n" + caught(call, "Exception", "pass") + "\n".join(lines)
    tests = [first("check()", "assert check() == 'ok'"),
             first("check()", "assert not ready()"),
             first("check('Token')", "assert check() == 'ok'"),
             first("check('Token')", "assert not ready()"),
             first("boom('Counted')", "assert reads() > 0"),
             first("boom('Counted')", "assert reads() == 0"),
             first("boom('Watched')", "assert reads() == 0"),
             "reset()\n" + caught("check()", "NotReady", "assert str(e) == 'not ready'",
                                  "assert check() == 'ok'")]
    expected = [False, True, False, True, False, True, True, True]
    assert plain(SIDE_EFFECTS, tests) == expected
    result = run(SIDE_EFFECTS, tests)
    assert result["passed"] == expected, result["errors"]


REUSED = """\
    class Failure(OSError):
        pass
    _E = Failure()
    def fail(i):
        _E.args, _E.code = (i,), i
        raise _E
    def spoil():
        _E.args, _E.errno = ("spoiled",), 7
    def same(error):
        return error is _E
    def other():
        raise ValueError("other")
    """


def test_a_reused_exception_object_is_one_object_in_the_test():
    """An exception object the program raises again (or changes after raising) is one object in
    the test while the program's process holds it: `is` holds between the two catches, and its
    args, errno and attributes are those it holds now, also after other exceptions crossed; back
    in the program it is its own object again."""
    def twice(*lines):
        return (caught("fail(1)", "Failure", "e1 = e") + caught("fail(2)", "Failure", "e2 = e")
                + "\n".join(lines))
    loop = ("errs = []\nfor i in range(100):\n    try:\n        fail(i)\n"
            "    except Failure as e:\n        errs.append(e)\n")
    tests = [twice("assert e1.args == (1,)"),
             twice("assert e1 is not e2"),
             twice("assert e1 is e2 and e1.args == (2,) and e1.code == 2 and str(e1) == '2'"),
             loop + "assert errs[0].code == 0",
             loop + "assert errs[0] is errs[99] and errs[0].code == 99",
             caught("fail(3)", "Failure", "spoil()", "assert e.args == (3,)"),
             caught("fail(3)", "Failure", "spoil()",
                    "assert (e.args, e.errno) == (('spoiled',), 7) and same(e)"),
             caught("fail(4)", "Failure", "for _ in range(40):\n    try:\n        other()\n"
                    "    except ValueError:\n        pass", "assert e.code == 4 and same(e)")]
    expected = [False, False, True, False, True, False, True, True]
    assert plain(REUSED, tests) == expected
    result = run(REUSED, tests)
    assert result["passed"] == expected, result["errors"]
