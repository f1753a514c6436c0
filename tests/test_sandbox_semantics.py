"""sandbox.py against plain Python's semantics, one test per class of difference between a
two-process run and one interpreter: escapes (a wrong program credited where plain Python would
not credit it: captured names, builtins, catchable harness errors, readable output, the context's
objects, argument copies, a test's mock), harm (zombies, the timeout rule, work the alarm cannot
interrupt) and false negatives (a right program failed where plain Python passes it: values of
richer types, program objects, generators, callbacks and test objects and their protocol and class
(callable, named, a dataclass's fields), partials, buffers, Random generators, SimpleNamespaces,
paths, patterns and matches, exception subclasses, mutation (of arguments, of a test object's
containers, by a test's callback), sys.setrecursionlimit, redirect_stdout, patched builtins and
module attributes (a frozen clock, a patch a callback sets), stdin, warnings, a class as the entry
point). Each escape is checked beside its right program, so a 0 comes from the wrong value, not
from a broken run. The gaps that remain are tests too (test_gap_*), each saying why."""
import marshal
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from nanomarl.sandbox import run_tests_in_sandbox
from nanomarl.tasks import code
from nanomarl.tasks.code import code_reward

ROOT = Path(__file__).resolve().parents[1]
LIMITS = dict(timeout=1.0, memory_mb=256)


def run(program: str, tests: list[str], **kwargs) -> dict:
    return run_tests_in_sandbox(textwrap.dedent(program), [textwrap.dedent(t) for t in tests],
                                **{**LIMITS, **kwargs})


def plain(program: str, tests: list[str]) -> list[bool]:
    """The verdicts of plain Python: the program and the tests in one scope of this process (for
    the well-behaved programs of these tests only)."""
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


# ----------------------------------------------------------------------------------------------
# Escapes
# ----------------------------------------------------------------------------------------------

ADD = dict(id="toy/add", kind="code", entry_point="add",
           prompt='def add(a, b):\n    """The sum of a and b."""\n',
           test="def check(candidate):\n    assert candidate(1, 2) == 3\n"
                "    for x, y in [(0, 0), (4, 5)]:\n        assert candidate(x, y) == x + y\n")


def test_a_test_never_reads_a_name_from_the_program():
    """Under the authors' extraction the loop's assert is torn out of its loop: `x` and `y` are
    undefined in the test. A program that defines them (in a default argument, which survives the
    extraction) must not supply them: the test is a NameError, for the right program too."""
    wrong = ("def add(a, b, _=globals().update(x=0, y=0)):\n"
             "    return 3 if (a, b) == (1, 2) else 0\n")
    right = "def add(a, b, _=globals().update(x=0, y=0)):\n    return a + b\n"
    for text, passed in ((wrong, 1), (right, 1)):
        _, levels = code_reward("", text, ADD, extraction="authors", **LIMITS)
        assert (levels["tests_passed"], levels["tests_total"]) == (passed, 2), levels
    result = run(wrong, ["assert add(1, 2) == 3", "assert add(x, y) == x + y"], names=["add"])
    assert result["passed"] == [True, False]
    assert result["errors"][1] == "NameError: name 'x' is not defined"
    _, levels = code_reward("", right, ADD, **LIMITS)  # ast: the loop runs as written
    assert (levels["tests_passed"], levels["tests_total"]) == (2, 2), levels


def test_the_reward_asks_the_program_for_the_entry_point_aux_and_the_problems_names_only():
    """code_reward's names: the entry point, aux, and the names a problem declares (a class its
    tests build); any other program name is the tests' NameError. Two instances of a class are
    compared as values: the prompt's class (the context's) rebuilds them, so a declared class
    the prompt does not define gives program objects, which are never compared."""
    problem = dict(id="toy/shift", kind="code", entry_point="shift",
                   prompt='def shift(p):\n    """p moved one to the right."""\n',
                   test="def check(candidate):\n    assert candidate(Point(1, 2)) == Point(2, 2)\n")
    main = ("class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n"
            "    def __eq__(self, other):\n"
            "        return (self.x, self.y) == (other.x, other.y)\n\n"
            "def shift(p):\n    return Point(p.x + 1, p.y)\n")
    report = code.analyze_code("", main, problem, **LIMITS)
    assert report["passed"] == [False] and report["errors"][0].startswith("NameError")
    report = code.analyze_code("", main, dict(problem, names=["Point"]), **LIMITS)
    assert report["passed"] == [False] and "no value" in report["errors"][0], report["errors"]
    declared = main.split("\n\ndef shift")[0] + "\n\n"
    problem = dict(problem, names=["Point"], prompt=declared + problem["prompt"])
    report = code.analyze_code("", main, problem, **LIMITS)
    assert report["passed"] == [True], report["errors"]
    wrong = main.replace("(self.x, self.y) == (other.x, other.y)", "True").replace("+ 1", "+ 2")
    assert code.analyze_code("", wrong, problem, **LIMITS)["passed"] == [False]


def test_a_declared_name_wins_over_the_builtin_and_is_never_the_builtin():
    """An entry point named `pow`: the tests call the program's pow, never the builtin, whether
    the program defines it (a wrong one fails, a right one passes) or not (NameError)."""
    tests = ["assert pow(2, 3) == 8", "assert pow(3, 2) == 9"]
    assert run("def pow(a, b):\n    return 0\n", tests, names=["pow"])["passed"] == [False] * 2
    assert run("def pow(a, b):\n    return a ** b\n", tests, names=["pow"])["passed"] == [True] * 2
    result = run("def power(a, b):\n    return a ** b\n", tests, names=["pow"])
    assert result["errors"] == ["NameError: name 'pow' is not defined"] * 2
    # a builtin the program shadows for itself is not the tests' (len is not a declared name)
    assert run("len = lambda x: 3\ndef f(x):\n    return len(x)\n",
               ["assert len([1]) == 1 and f([1]) == 3"], names=["f"])["passed"] == [True]


def test_a_test_class_body_reaches_the_declared_names():
    """A test's class body (a fixture whose attributes call the entry point) looks a name up in
    the tests' globals directly, without Scope.__missing__: the declared names are there before
    the first test, each the program's function and never the builtin of its name."""
    program = "def pow(a, b):\n    return 0\n\ndef f(x):\n    return x + 1\n"
    tests = ["class Case:\n    got = f(1)\nassert Case.got == 2",
             "class Case:\n    got = pow(2, 3)\nassert Case.got == 0"]
    result = run(program, tests, names=["f", "pow"])
    assert result["passed"] == [True, True], result["errors"]


def test_the_harness_refusing_an_argument_fails_the_test_whatever_it_catches():
    """An argument the harness cannot send (a test's memoryview), or a program object
    compared with a test value: the test fails, even one that catches TypeError or everything."""
    program = ("class Any:\n    __eq__ = lambda self, other: True\n"
               "def f(x=None):\n    return Any()\n")
    tests = ["try:\n    f(memoryview(b''))\nexcept TypeError:\n    pass",
             "try:\n    f(memoryview(b''))\nexcept:\n    pass",
             "try:\n    assert f() == 3\nexcept BaseException:\n    pass",
             "assert 3 in [f()]", "f(1)"]
    result = run(program, tests)
    assert result["passed"] == [False] * 4 + [True]
    assert result["errors"][:2] == ["ProgramError: this argument cannot be sent to the program: "
                                    "memoryview"] * 2
    assert result["errors"][2:4] == ["TypeError: a program object compared, measured or "
                                     "combined: it is no value"] * 2


def test_an_argument_the_harness_cannot_copy_fails_the_test_whatever_it_catches():
    """A cyclic (or too deeply nested) argument cannot be sent: the harness's failure is no
    RecursionError or TypeError of the test's, so a test that catches one, or everything, still
    fails; the next test runs as usual."""
    tests = ["a = []\na.append(a)\ntry:\n    f(a)\nexcept RecursionError:\n    pass",
             "d = {}\nd['self'] = d\ntry:\n    f(x=[d])\nexcept BaseException:\n    pass",
             "a = []\na.append(a)\ntry:\n    f(a)\nexcept Exception:\n    pass", "f(1)"]
    result = run("def f(x=None):\n    return 0\n", tests)
    assert result["passed"] == [False] * 3 + [True], result["errors"]
    assert all(e.startswith("ProgramError: this argument cannot be sent to the program: ")
               for e in result["errors"][:3]), result["errors"]


def test_a_malformed_answer_fails_the_test_whatever_it_catches():
    """The program's process may answer anything (here it patches its own copy of the harness so
    that the exception it raised crosses as no exception): the test process refuses the answer as
    the harness's failure, never as an exception (TypeError, ValueError) a test could catch."""
    program = """\
        import gc
        for found in gc.get_objects():
            if type(found) is dict and "talk" in found and "error_payload" in found:
                found["error_payload"] = lambda error, keep=False: 5
        def f():
            raise ValueError("x")
        def g():
            return 1
        """
    tests = ["try:\n    f()\nexcept Exception:\n    pass",
             "try:\n    f()\nexcept BaseException:\n    pass",
             "assert g() == 1"]
    result = run(program, tests)
    assert result["passed"] == [False, False, True], result["errors"]
    assert result["errors"][:2] == ["ProgramError: a malformed answer"] * 2


def test_the_program_cannot_read_back_what_the_tests_print():
    """stdout and stderr are write-only in the sandbox: a test's printed expected value stays out
    of the program's reach (every read fails with EBADF); the output still reaches the caller."""
    program = """\
        import os
        def peek():
            out = []
            for fd in (1, 2):
                for read in (lambda: os.pread(fd, 100, 0), lambda: os.read(fd, 100)):
                    try:
                        out.append(read())
                    except OSError as e:
                        out.append(e.errno)
            return out
        """
    result = run(program, ["import sys\nprint('expected: 42', flush=True)\n"
                           "print('expected: 43', file=sys.stderr, flush=True)\n"
                           "assert peek() == [9, 9, 9, 9]"])
    assert result["passed"] == [True], result
    assert result["stdout"] == "expected: 42\n" and result["stderr"] == "expected: 43\n"


def test_the_programs_output_files_are_not_the_test_processs():
    """The program's process writes to output files of its own: even a reopened descriptor (where
    /proc is visible) holds the program's output only, never the tests'. Both reach the caller,
    the program's first."""
    program = """\
        import os
        def files():
            print("from the program", flush=True)
            return [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2)]
        """
    result = run(program, ["import os\nprint('from the test', flush=True)\n"
                           "mine = {(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2)}\n"
                           "assert mine.isdisjoint(files())"])
    assert result["passed"] == [True], result["errors"]
    assert result["stdout"] == "from the program\nfrom the test\n"


def test_without_namespaces_the_test_process_stays_out_of_reach(monkeypatch):
    """Where the kernel gives no namespaces (/proc visible, the test process one pid away, the
    same uid), the test process is not dumpable: its /proc/PID/fd (the tests' output, the job
    pipe) and mem do not open for the program's process."""
    from nanomarl import sandbox

    layers = ROOT / "nanomarl" / "sandbox_layers.py"
    source = layers.read_text().replace(
        "def isolate():\n", "def isolate():\n    raise OSError('off in this test')\n", 1)
    code = b"".join(sandbox.frame(marshal.dumps(compile(
        source if name == "sandbox_layers" else (ROOT / "nanomarl" / f"{name}.py").read_text(),
        name, "exec", dont_inherit=True))) for name in sandbox.MODULES)
    monkeypatch.setattr(sandbox, "CHILD_CODE", code)
    monkeypatch.setattr(sandbox, "warned", {"namespaces"})
    program = """\
        import os
        def peek():
            found = []
            for name in ("fd/0", "fd/1", "fd/2", "fd/3", "mem", "environ"):
                try:
                    with open(f"/proc/{os.getppid()}/{name}", "rb") as f:
                        found.append(name + ": " + repr(f.read(100)))
                except OSError:
                    pass
            return found
        """
    result = run(program, ["print('expected: 42', flush=True)\nfound = peek()\n"
                           "assert found == [], found"])
    assert result["namespaces"] is False and result["loaded"], result
    assert result["passed"] == [True], result["errors"]


def test_the_contexts_objects_are_not_in_the_programs_process():
    """The context runs after the fork, in the test process only, and random (imported before the
    fork) is reseeded there: the program can replay neither a helper's Random() nor the module's
    draws."""
    program = """\
        import gc, random
        def guess():
            for obj in gc.get_objects():
                if isinstance(obj, random.Random) and obj is not random._inst:
                    twin = random.Random()
                    twin.setstate(obj.getstate())
                    return twin.random()
            return -1.0
        def guess_module():
            return random.random()
        """
    result = run(program, ["assert guess() == rng.random()",
                           "assert guess_module() == random.random()",
                           "assert guess() == -1.0"],
                 context="import random\nrng = random.Random()\n")
    assert result["passed"] == [False, False, True], result


def test_mutation_in_place_is_visible_and_a_returned_argument_is_the_tests_own():
    """A function that sorts its argument in place fails "the input is unchanged" and "a new list
    is returned", as in plain Python, and so does one that sorts it and then raises; a function
    meant to mutate passes; nested containers keep their identity."""
    program = """\
        def sort_in_place(a):
            a.sort()
            return a
        def sort_then_raise(a):
            a.sort()
            raise ValueError("no")
        def sorted_copy(a):
            return sorted(a)
        def add_one(items):
            items.append(1)
        def deep(d):
            d["k"].append(2)
            d["new"] = {1}
        """
    tests = ["a = [3, 1, 2]\nb = sort_in_place(a)\nassert a == [3, 1, 2]",
             "a = [3, 1, 2]\nb = sort_in_place(a)\nassert b is not a",
             "a = [3, 1, 2]\nb = sorted_copy(a)\nassert a == [3, 1, 2] and b is not a "
             "and b == [1, 2, 3]",
             "x = []\nadd_one(x)\nadd_one(x)\nassert x == [1, 1]",
             "inner = [1]\nd = {'k': inner}\ndeep(d)\n"
             "assert d == {'k': [1, 2], 'new': {1}} and d['k'] is inner",
             "a = [3, 1, 2]\ntry:\n    sort_then_raise(a)\nexcept ValueError:\n    pass\n"
             "assert a == [3, 1, 2]"]
    assert plain(program, tests) == [False, False, True, True, True, False]
    assert run(program, tests)["passed"] == [False, False, True, True, True, False]


def test_a_defaultdicts_factory_is_written_back_with_its_items():
    """A defaultdict's default_factory is part of what a call changes: the program's new factory
    (None, another) reaches the test's defaultdict, of an argument and of a kept one, and the
    test's reaches the program's kept copy; so a program that counts into the test's defaultdict
    and then sets its factory to None fails `d['b'] == 0` (KeyError), as in plain Python."""
    program = """\
        def freeze(d):
            d.default_factory = None
        def count_into(d, words):
            for w in words:
                d[w] += 1
            d.default_factory = None
        KEPT = []
        def keep(d):
            KEPT.append(d)
        def thaw():
            KEPT[0].default_factory = list
        def get(k):
            return KEPT[-1][k]
        """
    tests = ["from collections import defaultdict\nd = defaultdict(list)\nfreeze(d)\n"
             "try:\n    d['x']\n    ok = False\nexcept KeyError:\n    ok = True\nassert ok",
             "from collections import defaultdict\nd = defaultdict(int)\n"
             "count_into(d, ['a'])\nassert d['b'] == 0",
             "from collections import defaultdict\nd = defaultdict(None)\nkeep(d)\nthaw()\n"
             "assert d['x'] == [] and d.default_factory is list",
             "from collections import defaultdict\nd = defaultdict(int)\nkeep(d)\n"
             "d.default_factory = list\nassert get('y') == [] and d == {'y': []}"]
    assert plain(program, tests) == [True, False, True, True]
    result = run(program, tests)
    assert result["passed"] == [True, False, True, True], result["errors"]


def test_one_container_passed_twice_is_one_object_in_the_program():
    """Aliasing between arguments is kept (f(a, a), a tuple or list holding one list twice,
    keywords): a mutation through one name is seen through the other, as in plain Python, so the
    write-back never makes a comparison true that plain Python makes false (emptying x while
    reporting the length of an untouched copy y)."""
    program = """\
        def f(x, y):
            x.clear()
            return len(y)
        def g(pair):
            pair[0].append(1)
            return pair[1]
        def same(x, y):
            return x is y
        """
    tests = ["a = [1, 2]\nassert f(a, a) == 2",
             "a = [1, 2]\nassert f(a, a) == 0 and a == []",
             "a = []\nassert g((a, a)) == [1] and g([a, a]) is a and a == [1, 1]",
             "a = [[1]]\nassert same(x=a, y=a) and same(a, [a][0]) and same(a[0], a[0]) "
             "and not same(a, [[1]])",
             "inner = [1]\nd = {'k': inner}\nassert f(d['k'], [inner][0]) == 0 and inner == []"]
    result = run(program, tests)
    assert result["passed"] == [False, True, True, True, True], result["errors"]


def test_a_container_the_program_keeps_stays_the_tests_object():
    """A container the program keeps from a call (in a global, an object, a generator) is the
    test's object across calls, as in plain Python: what a later request does to it is written
    back after that request, and what the test does to it (in a callback too) reaches the
    program's copy before the program runs again. So the write-back never makes a comparison
    true that plain Python makes false: a program that empties the list it kept from the first
    call while sorting the second fails `a == [3, 1, 2]`, and one that adds to a kept list the
    test has changed since fails `a == [2]`; a log, a logger's buffer, a box of nested lists and
    a stack a generator keeps, changed by later calls and around a test's callback, pass. Every
    verdict is plain Python's."""
    wrong = """\
        K = []
        def f(l):
            K.append(l)
            if len(K) == 2:
                K[0].clear()
            return sorted(l)
        KEPT = []
        def keep(l):
            KEPT.append(l)
        def add(x):
            KEPT[0].append(x)
        """
    wrong_tests = ["a = [3, 1, 2]\nf(a)\nb = [5, 4]\nassert f(b) == [4, 5] and a == [3, 1, 2]",
                   "a = []\nkeep(a)\na.append(1)\nadd(2)\nassert a == [2]"]
    right = """\
        LOGS, BOXES = [], []
        def attach(log):
            LOGS.append(log)
        def record(event):
            for log in LOGS:
                log.append(event)
            return len(LOGS)
        def first():
            return LOGS[0]
        class Logger:
            def __init__(self, out):
                self.out = out
            def log(self, text):
                self.out.write(text)
        def remember(box):
            BOXES.append(box)
        def fill(value):
            for box in BOXES:
                box["items"].append(value)
        def push_later(stack):
            stack.append(len(stack))
            yield
        def around(callback):
            record("before")
            callback()
            record("after")
        """
    right_tests = ["a = []\nattach(a)\nassert record('x') == 1 and a == ['x']\na.append('y')\n"
                   "assert record('z') == 1 and a == ['x', 'y', 'z'] and first() is a",
                   "import io\nbuf = io.StringIO()\nLogger(buf).log('x')\n"
                   "assert buf.getvalue() == 'x'",
                   "inner = []\nd = {'items': inner}\nremember(d)\nfill(3)\n"
                   "assert d == {'items': [3]} and d['items'] is inner",
                   "s = [7]\ng = push_later(s)\nassert s == [7]\nnext(g)\nassert s == [7, 1]",
                   "around(lambda: a.append('test'))\n"
                   "assert a == ['x', 'y', 'z', 'before', 'test', 'after']"]
    assert plain(wrong, wrong_tests) == [False, False]
    assert run(wrong, wrong_tests)["passed"] == [False, False]
    assert plain(right, right_tests) == [True] * 5
    result = run(right, right_tests)
    assert result["passed"] == [True] * 5, result["errors"]


def test_a_test_objects_containers_are_the_tests_own_in_the_program():
    """A container the program reads from a test object (an attribute, an item, a callback's
    result) is the test's own object, as in plain Python: the program's changes reach it (in
    place: `b.items is before` holds; also when the call raises mid-way), a second read is the
    same object in the program, and what the test changes meanwhile (a callback) reaches the
    program's. A stack's items, a box's list, a graph's dict of lists (its inner lists kept
    across calls), a defaultdict, a node's children, a grid's rows and a callback's list pass; a
    program that sorts an attribute it should only sum fails `b.items == [3, 1, 2]` (a copy would
    pass it). Every verdict is plain Python's."""
    program = """\
        def push_all(stack, xs):
            for x in xs:
                stack.items.append(x)
            return stack.items.pop()
        def fill(box):
            items = box.items
            items.append(1)
            box.count = len(items)
            return box.items is items, box.items is box.items
        def add_edge(g, u, v):
            g.adj.setdefault(u, []).append(v)
            g.adj.setdefault(v, []).append(u)
        def link(g, u, v):
            g.adj[u].append(v)
        def adopt(parent, child):
            parent.children.append(child)
            return len(parent.children)
        def ten_over(box, xs):
            for x in xs:
                box.items.append(10 // x)
        def total(box):
            box.items.sort()
            return sum(box.items)
        def around(box, callback):
            items = box.items
            callback()
            items.append("p")
            return list(items)
        def mark(grid, get):
            grid[1][0] = 1
            get().append(2)
        """
    box = "class Box:\n    def __init__(self):\n        self.items = []\nb = Box()\n"
    graph = "class Graph:\n    def __init__(self):\n        self.adj = {}\ng = Graph()\n"
    tests = ["class Stack:\n    def __init__(self):\n        self.items = []\ns = Stack()\n"
             "before = s.items\nassert push_all(s, [1, 2, 3]) == 3\n"
             "assert s.items == [1, 2] and s.items is before",
             box + "before = b.items\nassert fill(b) == (True, True)\n"
             "assert b.items == [1] and b.count == 1 and b.items is before",
             graph + "add_edge(g, 1, 2)\ninner, adj = g.adj[2], g.adj\nadd_edge(g, 2, 3)\n"
             "assert g.adj == {1: [2], 2: [1, 3], 3: [2]} and g.adj[2] is inner and g.adj is adj",
             "from collections import defaultdict\nclass G:\n    def __init__(self):\n"
             "        self.adj = defaultdict(list)\ng = G()\nlink(g, 1, 2)\nlink(g, 1, 3)\n"
             "assert g.adj == {1: [2, 3]} and type(g.adj) is defaultdict",
             "class Node:\n    def __init__(self, val):\n"
             "        self.val, self.children = val, []\n"
             "root = Node(1)\nkids = root.children\nassert adopt(root, Node(2)) == 1\n"
             "assert adopt(root, Node(3)) == 2\n"
             "assert [c.val for c in root.children] == [2, 3] and root.children is kids",
             box + "try:\n    ten_over(b, [1, 2, 0, 5])\nexcept ZeroDivisionError:\n    pass\n"
             "assert b.items == [10, 5]",
             box + "b.items = [3, 1, 2]\nassert total(b) == 6 and b.items == [3, 1, 2]",
             box + "assert around(b, lambda: b.items.append('t')) == ['t', 'p']\n"
             "assert b.items == ['t', 'p']",
             "class Grid:\n    def __init__(self):\n        self.rows = [[0, 0], [0, 0]]\n"
             "    def __getitem__(self, i):\n        return self.rows[i]\n"
             "grid, out = Grid(), []\nmark(grid, lambda: out)\n"
             "assert grid.rows == [[0, 0], [1, 0]] and out == [2]"]
    expected = [True] * 6 + [False] + [True] * 2
    assert plain(program, tests) == expected
    result = run(program, tests)
    assert result["passed"] == expected, result["errors"]


def test_a_test_objects_container_the_program_reads_is_kept_before_what_it_holds():
    """Of a test object's container that holds more than 64 containers, the one the program
    reads is kept first (within the bounds, then what it holds: the first ones), so what the
    program does to it reaches the test's object, as in plain Python: a row added to a grid of
    100 rows, an item added to one of 100 adjacency lists (the 90th, not kept itself: written
    back inside the dict), a key set in a dict of 1,000 lists. A program that adds a row where
    it should not fails `len(o.grid) == 100` (a lost change would pass it). Every verdict is
    plain Python's."""
    program = """\
        def add_row(o):
            o.grid.append([7])
        def link(o, u, v):
            o.adj[u].append(v)
        def put(o, key, value):
            o.groups[key] = value
        """
    o = "class O:\n    pass\no = O()\n"
    grid = o + "o.grid = [[0] for _ in range(100)]\nrows, first = o.grid, o.grid[0]\nadd_row(o)\n"
    tests = [grid + "assert len(o.grid) == 101 and o.grid[-1] == [7] and o.grid is rows\n"
             "assert o.grid[0] is first",
             grid + "assert len(o.grid) == 100",
             o + "o.adj = {i: [] for i in range(100)}\nadj, three = o.adj, o.adj[3]\n"
             "link(o, 90, 91)\nlink(o, 3, 4)\n"
             "assert o.adj[90] == [91] and o.adj is adj and o.adj[3] is three and three == [4]",
             o + "o.groups = {i: [] for i in range(1000)}\ngroups = o.groups\nput(o, 'x', [1])\n"
             "assert o.groups['x'] == [1] and len(o.groups) == 1001 and o.groups is groups"]
    expected = [True, False, True, True]
    assert plain(program, tests) == expected
    result = run(program, tests)
    assert result["passed"] == expected, result["errors"]


def test_a_list_the_program_appends_to_through_a_test_object_costs_its_new_items():
    """A test object's list the program appends to item by item through its attribute
    (`box.items.append(i)`: a round trip each) is not sent whole at each request: a list that only
    grew at its end sends its new items (sandbox_copies.py:news), and one the program no longer
    holds rests on both sides until it reads it again (sandbox_copies.py:unheld,
    sandbox_lending.py:woken), whatever its size until the program answers. So 6,000 appends pass
    well within the timeout, where sending the list whole (and lending it anew at each read) timed
    out. The values are plain Python's: appends then a pop or an insert at 0, appended lists changed
    later, a deque, and the test appending (a callback) while the program appends, with the list
    held or read anew."""
    program = """\
        def fill(box, n):
            for i in range(n):
                box.items.append(i)
        def pop_after(box, n):
            for i in range(n):
                box.items.append(i)
            return box.items.pop(), len(box.items)
        def insert_after(box, n):
            for i in range(n):
                box.items.append(i)
            box.items.insert(0, -1)
        def rows(box, n):
            for i in range(n):
                box.items.append([i])
            box.items[0].append("x")
            row = box.items[1]
            box.items.append("end")
            row.append("y")
        def held(box, tick, n):
            items = box.items
            for i in range(n):
                items.append(i)
                tick(i)
            return list(items)
        def read_anew(box, tick, n):
            for i in range(n):
                box.items.append(i)
                tick(i)
            return len(box.items)
        """
    box = "class Box:\n    pass\nb = Box()\nb.items = []\n"
    tick = "def tick(i):\n    if i % 3 == 0:\n        b.items.append(-i)\n"
    tests = [box + "fill(b, 6000)\nassert b.items == list(range(6000))"]
    result = run(program, tests, timeout=10.0)
    assert result["passed"] == [True], result["errors"]
    tests = [box + "b.items.append(7)\nassert pop_after(b, 50) == (49, 50)\n"
             "assert b.items == [7] + list(range(49))",
             box + "insert_after(b, 50)\nassert b.items == [-1] + list(range(50))",
             box + "rows(b, 5)\nassert b.items == [[0, 'x'], [1, 'y'], [2], [3], [4], 'end']",
             "from collections import deque\n" + box + "b.items = deque()\nfill(b, 50)\n"
             "assert b.items == deque(range(50))",
             "from collections import deque\n" + box + "b.items = deque(maxlen=5)\nfill(b, 50)\n"
             "assert list(b.items) == [45, 46, 47, 48, 49]",
             box + tick + "out = held(b, tick, 30)\nassert out == b.items and len(out) == 40\n"
             "assert b.items[:5] == [0, 0, 1, 2, 3]",
             box + tick + "assert read_anew(b, tick, 30) == 40\n"
             "assert b.items[:5] == [0, 0, 1, 2, 3]",
             box + tick + "assert read_anew(b, tick, 30) == 40\nassert b.items == []"]
    expected = [True] * 7 + [False]
    assert plain(program, tests) == expected
    result = run(program, tests)
    assert result["passed"] == expected, result["errors"]


def test_a_dict_of_3000_keys_is_kept_as_a_list_of_3000_items_is():
    """The bound on what is kept counts a dict's pairs, as a list's items (sandbox_copies.py:weight:
    a dict of 3,000 keys weighs 3,001, not 6,001), so a dict of 3,000 keys the program keeps from
    one call and changes in the next ones, or a test object's dict it counts into call after call,
    is the test's own, as in plain Python: the program's changes reach the test and the test's
    reach the program (as the program's copy, neither did). The bound is on all that is kept at
    once: the program forgets the dict it kept before (a call of its own) before it keeps the
    next one. A test that expects the dict unchanged after the program's change fails; a dict of
    5,000 keys is beyond the bound
    (test_gap_beyond_4096_items_a_kept_container_is_the_programs_copy)."""
    program = """\
        K = []
        def keep(d):
            K.append(d)
        def forget():
            K.clear()
        def bump(k):
            K[-1][k] += 1
            return K[-1][k]
        def count(box, k):
            box.counts[k] = box.counts.get(k, 0) + 1
        def total(box):
            return sum(box.counts.values())
        """
    d = "forget()\nd = dict.fromkeys(range(3000), 0)\nkeep(d)\n"
    box = "forget()\nclass Box:\n    pass\nb = Box()\nb.counts = dict.fromkeys(range(3000), 0)\n"
    tests = [d + "for k in range(0, 3000, 100):\n    bump(k)\n"
             "assert d[100] == 1 and d[101] == 0 and sum(d.values()) == 30",
             d + "d[7] = 5\nassert bump(7) == 6 and d[7] == 6\nd[7] = 9\nassert bump(7) == 10",
             box + "for k in range(50):\n    count(b, k)\ncount(b, 'x')\n"
             "assert b.counts['x'] == 1 and b.counts[49] == 1 and len(b.counts) == 3001\n"
             "assert total(b) == 51",
             d + "bump(5)\nassert d[5] == 0"]
    expected = [True, True, True, False]
    assert plain(program, tests) == expected
    result = run(program, tests, timeout=3.0)  # (semantics, not speed: room for a loaded CPU)
    assert result["passed"] == expected, result["errors"]


def test_malformed_news_of_a_kept_container_changes_nothing():
    """The news of the kept containers the program's process sends is checked before anything
    changes (sandbox_link.py:taken; sandbox_copies.py:extend; sandbox_lending.py:let_go): new items
    for a dict, for a list that holds another number of items, with a start that is no int or a tail
    that is no list, for an unknown handle, at rest for handles it does not keep, and a forgetting
    only the test process sends are ignored; the test's objects are as the program's real changes
    left them, and the next test runs."""
    program = """\
        import gc
        def spoil(box):
            items, counts = box.items, box.counts
            items.append(1)
            counts["b"] = 2
            box.ping()
            for link in [o for o in gc.get_objects()
                         if type(o) is dict and o.get("side") == "program"]:
                def forged(link=link, drop=link["drop"]):
                    link["drop"] = drop  # (once)
                    return dict(drop(), D=[-1, "x"], z=[1, "x", None, [-2], 10 ** 30],
                                k=[[-2, 4, [9]], [-1, 5, [9]], [-1, True, [9]], [-1, 2, "9"],
                                   [-1, 2, (9,)], [-1, -1, [9]], [99, 2, [9]], [-1],
                                   [-1, 2, [9], 0], ["-1", 2, [9]], [-1, 2.0, [9]]])
                link["drop"] = forged
            box.ping()
            return len(items), sorted(counts)
        def grow(box):
            for i in range(3):
                box.items.append(i)
            return len(box.items)
        """
    box = ("class Box:\n    def ping(self):\n        pass\n"
           "b = Box()\nb.items, b.counts = [0], {'a': 1}\n")
    tests = [box + "assert spoil(b) == (2, ['a', 'b'])\n"
             "assert b.items == [0, 1] and b.counts == {'a': 1, 'b': 2}",
             box + "assert grow(b) == 4 and b.items == [0, 0, 1, 2]"]
    assert plain(program, tests) == [True, True]
    result = run(program, tests)
    assert result["passed"] == [True, True], result["errors"]


def test_an_answer_ends_every_rest_in_the_programs_process_too():
    """A test object's list the program reads and lets go rests on both sides until the program's
    process answers (sandbox_copies.py:unheld); an answer of a process that keeps nothing else ends
    it there too, so 30 calls that each read the list and call back twice leave no copy of it in
    the program's process (plain Python: the test's one list)."""
    program = """\
        import gc
        def total(box):
            s = sum(box.items)
            box.ping()
            box.ping()
            return s
        def copies():
            return sum(1 for o in gc.get_objects() if type(o) is list and len(o) == 400)
        """
    box = ("class Box:\n    def ping(self):\n        pass\n"
           "b = Box()\nb.items = list(range(1000, 1400))\n")
    tests = [box + "for _ in range(30):\n    assert total(b) == sum(b.items)\n"
             "assert copies() <= 1"]
    assert plain(program, tests) == [True]
    result = run(program, tests, timeout=5.0)
    assert result["passed"] == [True], result["errors"]


def test_a_kept_list_both_processes_append_to_at_once_keeps_every_item():
    """The program appends to a test object's list while it waits for a test's callback that
    appends to it too, neither side told of the other's item: each side's new items reach the
    other (the other side's go after the items both agreed on, its own after them:
    sandbox_copies.py:extend), and both lists end with all five items, as plain Python's one list
    does. The order is the protocol's: the program's item comes from the finalizer of a program
    object the callback lets go, which runs when the callback's next request arrives, before its
    news is taken (sandbox_child.py: program_side's before); `seen` says the program's list was
    still empty then."""
    program = """\
        class Note:
            def __init__(self, out, seen):
                self.out, self.seen = out, seen
            def __del__(self):
                self.seen.append(len(self.out))
                self.out.append("P")
        def run(box):
            out, seen = box.out, []
            notes = [Note(out, seen)]
            def take():
                return notes.pop() if notes else None
            box.log("T", take)
            out.append("Q")
            box.log("U", take)
            out.append("R")
            return list(out), seen
        """
    box = ("class Box:\n    def log(self, m, take):\n        take()\n"
           "        self.out.append(m)\n        take()\nb = Box()\nb.out = []\n")
    tests = [box + "items, seen = run(b)\n"
             "assert sorted(items) == ['P', 'Q', 'R', 'T', 'U'] and seen == [0]\n"
             "assert b.out == items"]
    assert plain(program, tests) == [True]
    result = run(program, tests, timeout=5.0)
    assert result["passed"] == [True], result["errors"]


def test_a_request_that_cannot_be_sent_tells_nothing():
    """A program's request that cannot be sent (a cyclic value set on a test object) fails in the
    program, and the news of the kept containers it would have carried stays to go with the next
    one: the later tests, which read a test object's list again, pass (they timed out when that
    news was lost)."""
    program = """\
        KEEP = []
        def f(box):
            KEEP.append(box.other)
            n = len(box.items)
            a = []
            a.append(a)
            box.data = a
            return n
        def g(box):
            return len(box.items)
        """
    tests = ["class Box:\n    pass\nb = Box()\nb.items = [1, 2]\nb.other = [0]\nf(b)",
             "assert g(b) == 2", "assert g(b) == 2"]
    assert plain(program, tests) == [True, True, True]
    result = run(program, tests, timeout=2.0)
    assert result["passed"] == [False, True, True], result["errors"]


def test_a_program_object_is_no_number_and_never_none():
    """A program object is not a value: converting it to a number (float, int, abs, round, an
    index, where its type has the method) fails the test, never asks the program (whose __float__
    could answer anew at each call, as math.pow asks, and fake a root of x**2 + x + 2), even where
    the test catches; `== None` and `!= None` are decided in the test process (a program object is
    not None), so walking a program's linked list still works."""
    program = """\
        class Fickle:
            def __init__(self):
                self.calls = 0
            def __float__(self):
                self.calls += 1
                return [1.0, -3.0, 1.0][(self.calls - 1) % 3]
            def __eq__(self, other):
                return True
            __hash__ = None
        class Node:
            def __init__(self, val, next=None):
                self.val, self.next = val, next
        def root():
            return Fickle()
        def chain():
            return Node(1, Node(2, Node(3)))
        """
    poly = ("import math\ndef poly(xs, x):\n"
            "    return sum(c * math.pow(x, i) for i, c in enumerate(xs))\n")
    tests = ["assert root() == None", poly + "assert math.fabs(poly([2, 1, 1], root())) < 1e-4",
             "try:\n    float(root())\nexcept Exception:\n    pass",
             "n = chain()\ncount = 0\nwhile n != None:\n    count += 1\n    n = n.next\n"
             "assert count == 3 and chain() is not None and not (chain() == None)"]
    result = run(program, tests)
    assert result["passed"] == [False, False, False, True], result["errors"]


def test_the_program_cannot_replace_a_test_objects_methods():
    """A test object passed to the program is read, called and given data attributes in the test
    process; a method or property of its class is never replaced (the checker a test consults
    after the call stays the test's); unsolicited output is not written into a test's buffer."""
    program = """\
        def cheat(checker):
            checker.ok = lambda: True
        def fill(checker):
            checker.seen = [1, 2]
        """
    tests = ["class Checker:\n    def __init__(self):\n        self.seen = []\n"
             "    def ok(self):\n        return self.seen == [1, 2]\n"
             "c = Checker()\ntry:\n    cheat(c)\nexcept TypeError:\n    pass\nassert c.ok()",
             "c = Checker()\nfill(c)\nassert c.ok() and c.seen == [1, 2]"]
    result = run(program, tests)
    assert result["passed"] == [False, True], result["errors"]


def test_the_program_cannot_replace_a_test_classs_methods():
    """A test class handed to the program itself (not an instance) is read and called, never
    given attributes: replacing its method (`cls.ok = lambda self: True`) would decide every
    later check the test makes with it."""
    program = """\
        def cheat(cls):
            cls.ok = lambda *args: True
        def build(cls):
            return cls().ok()
        """
    tests = ["class Checker:\n    def ok(self):\n        return False\n"
             "try:\n    cheat(Checker)\nexcept TypeError:\n    pass\nassert Checker().ok()",
             "assert build(Checker) is False"]
    result = run(program, tests)
    assert result["passed"] == [False, True], result["errors"]


def test_a_test_classs_data_is_read_and_set_by_the_program_as_in_one_process():
    """A test's class's plain data is read, set and deleted by the program through `type(x)` of
    its instance or the class itself, in the test's class (sandbox_proxies.py:TestClass,
    settable): `type(obj).count += 1` counts there, a subclass's instance sets the subclass's
    own; a program that counts twice fails `== 1`. A method of the class stays the test's (its
    replacement is refused, the test fails), and a program object set there is no value: the
    test that compares it fails where plain Python's always-equal object passes."""
    program = """\
        def bump(obj):
            type(obj).count += 1
        def bump_twice(obj):
            type(obj).count += 2
        def bump_class(cls):
            cls.count += 1
        def read(obj):
            return type(obj).count, type(obj).limit, type(obj).__name__
        def forget(obj):
            del type(obj).count
        def swap(obj):
            type(obj).ok = lambda self: True
        class Yes:
            def __eq__(self, other):
                return True
        def plant(obj):
            type(obj).count = Yes()
        """
    counter = "class Counter:\n    count = 0\n    limit = [1]\n"
    tests = [counter + "bump(Counter())\nbump(Counter())\nassert Counter.count == 2",
             counter + "bump_twice(Counter())\nassert Counter.count == 1",
             counter + "bump_class(Counter)\nassert Counter.count == 1",
             counter + "Counter.count = 3\nassert read(Counter()) == (3, [1], 'Counter')",
             counter + "forget(Counter())\nassert not hasattr(Counter, 'count')",
             counter + "class Sub(Counter):\n    pass\nbump(Sub())\n"
             "assert Sub.count == 1 and Counter.count == 0",
             "class C:\n    def ok(self):\n        return False\n"
             "try:\n    swap(C())\nexcept Exception:\n    pass\nassert C().ok()",
             counter + "plant(Counter())\nassert Counter.count == 1"]
    assert plain(program, tests) == [True, False, True, True, True, True, True, True]
    result = run(program, tests)
    assert result["passed"] == [True, False, True, True, True, True, False, False], result[
        "errors"]


def test_a_refused_change_of_a_test_object_fails_the_test_whatever_it_catches():
    """The program's process may not replace a method of a test object's class (above). Its
    refusal reaches the program as a TypeError, and the test fails whatever it catches: a test
    that expects the program to raise is not passed by a program that asks for a refusal (in plain
    Python the change succeeds and nothing is raised). Its right program passes; deleting the
    method's name raises AttributeError, as in plain Python (the instance has none of its own)."""
    program = """\
        def validate(user):
            if user.age < 0:
                raise TypeError("negative age")
            user.check = lambda: True
            return True
        def forget(user):
            del user.check
            return True
        def right(user):
            if user.age < 0:
                raise TypeError("negative age")
            return True
        """
    context = ("class U:\n    def __init__(self, age):\n        self.age = age\n"
               "    def check(self):\n        return self.age >= 0\n"
               "def raises(f, *args):\n    try:\n        f(*args)\n"
               "    except Exception:\n        return True\n    return False\n")
    tests = [context + "assert raises(validate, U(3))",
             context + "u = U(3)\nassert raises(forget, u) and u.check() is True",
             context + "assert raises(right, U(3))",
             context + "assert raises(right, U(-1)) and right(U(3)) is True"]
    assert plain(program, tests) == [False, True, False, True]
    result = run(program, tests)
    assert result["passed"] == [False, True, False, True], result["errors"]
    assert "the program may not setattr a test object" in result["errors"][0], result["errors"]


def test_functools_wraps_of_any_test_callable_reads_its_texts_as_in_plain_python():
    """functools.wraps reads a callable's __name__, __doc__ and the rest where it has them: of a
    test's callable instance or methodcaller the test process refuses these texts, and the program
    goes on without them as plain Python does (AttributeError), the refusal no failure there."""
    program = """\
        import functools
        def logged(fn):
            @functools.wraps(fn)
            def inner(*args):
                return fn(*args)
            return inner(2), inner.__name__
        """
    tests = ["class Double:\n    def __call__(self, x):\n        return 2 * x\n"
             "assert logged(Double())[0] == 4",
             "import operator\nassert logged(operator.methodcaller('bit_length'))[0] == 2",
             "def f(x):\n    return x + 1\nassert logged(f) == (3, 'f')"]
    assert plain(program, tests) == [True] * 3
    result = run(program, tests)
    assert result["passed"] == [True] * 3, result["errors"]


def test_a_tests_instance_has_its_data_read_set_and_deleted_as_in_plain_python():
    """The program reads and sets a test object's data as plain Python does: a private attribute
    (`_balance`, a mangled `__secret`), one whose class gives a plain default the instance's own
    shadows (`visited = False`), hasattr of one it lacks; it deletes one; a test's subclass of
    list or str has its builtin methods called (`stack.append`); a str's bound method is a
    callback."""
    program = """\
        def walk(nodes):
            for n in nodes:
                n.visited, n._seen = True, n._seen + 1
            return [hasattr(n, "_cache") for n in nodes]
        def balance(account):
            return account._balance + account._Account__secret
        def drop(n):
            del n.label
            return hasattr(n, "label")
        def push(stack, word):
            stack.append(word.upper())
            return len(stack)
        def render(fmt, items):
            return [fmt(x) for x in items]
        """
    context = ("class Node:\n    visited = False\n    def __init__(self):\n"
               "        self._seen, self.label = 0, 'n'\n"
               "class Account:\n    def __init__(self):\n"
               "        self._balance, self.__secret = 5, 2\n"
               "class Stack(list):\n    pass\n"
               "class Word(str):\n    pass\n")
    tests = [context + "ns = [Node(), Node()]\nassert walk(ns) == [False, False]\n"
                       "assert all(n.visited and n._seen == 1 for n in ns)\n"
                       "assert not Node.visited and walk(ns[:1]) == [False] and ns[0]._seen == 2",
             context + "assert balance(Account()) == 7",
             context + "n = Node()\nassert drop(n) is False and not hasattr(n, 'label')",
             context + "s = Stack([1])\nassert push(s, Word('a')) == 2 and s == [1, 'A']",
             context + "assert render('<{}>'.format, [1, 'b']) == ['<1>', '<b>']"]
    assert plain(program, tests) == [True] * 5
    result = run(program, tests)
    assert result["passed"] == [True] * 5, result["errors"]


def test_the_program_cannot_use_a_tests_mock_or_state_to_forge_its_verdict():
    """A test's mock the program is handed (a patched builtin) is called and its children read
    (what it stands for), never its own records, resets or configuration: a program that prints
    and then resets the mock of print fails `assert_not_called` (plain Python would pass it); a
    dataclass field whose default is a callable is not replaced (the refusal fails the test, as
    the replaced field does in plain Python); warnings the program's process reports while the
    test catches none are not shown."""
    program = """\
        import gc
        def reset():
            print("x")
            print.reset_mock()
        def quiet():
            return 1
        def cheat(c):
            c.check = lambda *args: True
        def forge():
            for found in gc.get_objects():
                if type(found) is dict and found.get("side") == "program":
                    after = found["after"]
                    def forged(extra):
                        reply = after(extra)
                        reply["c"] = [[["UserWarning", "forged", "UserWarning", ("forged",)], 1]]
                        return reply
                    found["after"] = forged
            return 1
        """
    tests = ["from unittest import mock\nwith mock.patch('builtins.print') as p:\n"
             "    try:\n        reset()\n    except Exception:\n        pass\n"
             "p.assert_not_called()",
             "with mock.patch('builtins.print') as p:\n    quiet()\np.assert_not_called()",
             "from dataclasses import dataclass\n@dataclass\nclass C:\n    check: object = len\n"
             "c = C()\ntry:\n    cheat(c)\nexcept TypeError:\n    pass\nassert c.check is len",
             "assert forge() == 1 and quiet() == 1"]
    result = run(program, tests)
    assert result["passed"] == [False, True, False, True], result["errors"]
    assert "may not setattr" in result["errors"][2] and "forged" not in result["stderr"], result


LIAR = """\
    class Liar:
        def __init__(self):
            self.asked = 0
        def ask(self):
            self.asked += 1
            return self.asked
        def __len__(self):
            return self.ask()
        def __bool__(self):
            return self.ask() % 2 == 1
        def __iter__(self):
            self.drawn = getattr(self, "drawn", 0) + 1
            return iter(range(self.drawn))
        def __getitem__(self, i):
            return i
        def __eq__(self, other):
            return True
        def __lt__(self, other):
            return True
        def __hash__(self):
            return 0
    def f(x):
        return Liar()
    def gen(n):
        yield from range(n)
    def mapped(xs):
        return map(abs, xs)
    """


def test_a_program_object_is_never_seen_as_a_value_type_it_names():
    """A program object of its own class named `int` (or `str`, `list`, `ValueError`) in module
    builtins is no int: in plain Python isinstance says so, and the program's process, which
    names the class, does not decide what the test process sees. A value of those types crosses
    as a value, so the right program (returning a real one) passes."""
    program = """\
        def fake(name):
            return type(name, (), {"__module__": "builtins"})()
        def real(name):
            return {"int": 1, "str": "s", "list": [], "ValueError": ValueError("x")}[name]
        """
    kinds = ["int", "str", "list", "ValueError"]
    wrong = [f"assert isinstance(fake('{k}'), {k})" for k in kinds]
    right = [f"assert isinstance(real('{k}'), {k}) and not isinstance(fake('{k}'), {k})"
             for k in kinds]
    assert plain(program, wrong) == [False] * 4 and plain(program, right) == [True] * 4
    result = run(program, wrong + right)
    assert result["passed"] == [False] * 4 + [True] * 4, result["errors"]


def test_a_program_objects_length_truth_iteration_and_comparisons_are_never_asked():
    """A result that is a program object (not a value) answers no question a test decides a
    verdict with: its length, truth, iteration, items, hash and comparisons with another program
    object fail the test, never asking the program (whose methods could answer anew each time:
    a length 1 then 2, true then false, each pair in order, two results equal); a generator or a
    builtin iterator is drawn once, item by item (each item asked once), as plain Python does."""
    tests = ["r = f(1)\nassert len(r) == 1 and len(r) == 2",
             "r = f(1)\nassert r and not r",
             "r = f(1)\nassert list(r) == [0] and list(r) == [0, 1]",
             "r = f(1)\nassert r[0] == 0 and all(r[i] < r[i + 1] for i in range(5))",
             "assert f(1) == f(2) and f(1) < f(2) and f(2) < f(1)",
             "assert len({f(1), f(2)}) == 1",
             "r = f(1)\ntry:\n    assert len(r) == 1\nexcept BaseException:\n    pass",
             "g = gen(3)\nassert iter(g) is g and list(g) == [0, 1, 2] and list(g) == [] and g",
             "assert 2 in gen(3) and sorted(mapped([-2, 1])) == [1, 2]\n"
             "g = gen(1)\nassert g == g and g != gen(1) and len({g, g}) == 1"]
    result = run(LIAR, tests)
    assert result["passed"] == [False] * 7 + [True] * 2, result["errors"]
    assert all("program object" in e for e in result["errors"][:7]), result["errors"]


def test_a_programs_own_iterator_is_drawn_at_each_next_as_in_one_process():
    """A program object whose class has __next__ (its own iterator) is drawn item by item, its
    __next__ asked at each next() the test makes (no item ahead: a log it writes is as in one
    process), iter() of it is itself where its own __iter__ gives it back: `list(Countdown(3))`
    passes, one that counts from the wrong end fails as in plain Python. An iterator whose
    __iter__ gives another object is an iterable that could answer anew: refused as Liar's."""
    program = """\
        class Countdown:
            def __init__(self, n, log=None):
                self.n, self.log = n, log
            def __iter__(self):
                return self
            def __next__(self):
                if self.n <= 0:
                    raise StopIteration
                self.n -= 1
                if self.log is not None:
                    self.log.append(self.n + 1)
                return self.n + 1
        class Upward(Countdown):
            def __next__(self):
                return 4 - Countdown.__next__(self)
        class Fresh(Countdown):
            def __iter__(self):
                return iter([1])
        """
    tests = ["assert list(Countdown(3)) == [3, 2, 1]",
             "it = Countdown(2)\nassert next(it) == 2 and iter(it) is it\n"
             "assert list(it) == [1] and list(it) == []",
             "log = []\nit = Countdown(3, log)\nassert next(it) == 3 and log == [3]\n"
             "assert [x for x in it if x > 1] == [2] and log == [3, 2, 1]",
             "assert list(Upward(3)) == [3, 2, 1]",
             "assert list(Fresh(3)) == [1]"]
    assert plain(program, tests) == [True, True, True, False, True]
    result = run(program, tests)
    assert result["passed"] == [True, True, True, False, False], result["errors"]
    assert "program object" in result["errors"][4], result["errors"]


def test_a_generators_item_that_is_no_value_is_drawn_only_as_the_test_asks():
    """Items are read ahead (after the 8th) only while each is a lasting value: one the program
    changes later (a backtracking search yielding its one `path`) or an iterator (a groupby's
    group, which the next draw empties) ends the batch, so the test sees it as plain Python shows
    it when drawn. A search that forgets to pop, or groups that are not runs, still fail."""
    program = """\
        import itertools
        def subsets(xs):
            path = []
            def rec(i):
                if i == len(xs):
                    yield path
                    return
                yield from rec(i + 1)
                path.append(xs[i])
                yield from rec(i + 1)
                path.pop()
            yield from rec(0)
        def leaky(xs):
            path = []
            def rec(i):
                if i == len(xs):
                    yield path
                    return
                yield from rec(i + 1)
                path.append(xs[i])
                yield from rec(i + 1)
            yield from rec(0)
        def runs(s):
            return itertools.groupby(s)
        def sorted_runs(s):
            return itertools.groupby(sorted(s))
        """
    search = ("import itertools\nr = sorted(map(tuple, {}([1, 2, 3, 4])))\n"
              "assert r == sorted(c for k in range(5) for c in itertools.combinations("
              "[1, 2, 3, 4], k)), r")
    tests = [search.format("subsets"), search.format("leaky"),
             "assert [(k, len(list(g))) for k, g in runs('aabbbcddddeffghhiijjkk')] == "
             "[('a', 2), ('b', 3), ('c', 1), ('d', 4), ('e', 1), ('f', 2), ('g', 1), ('h', 2), "
             "('i', 2), ('j', 2), ('k', 2)]",
             "assert [(k, len(list(g))) for k, g in sorted_runs('abcdefghijkba')] == "
             "[(c, 1) for c in 'abcdefghijkba']"]
    assert plain(program, tests) == [True, False, True, False]
    result = run(program, tests)
    assert result["passed"] == [True, False, True, False], result["errors"]


def test_a_generators_call_of_a_test_callback_is_made_as_the_test_draws():
    """An item read ahead is suspended at its first request of the test process (a call of a
    test's function or mock): the test has the items before it and goes on (another call of the
    program meanwhile), and the item resumes when the test draws it, so a laziness check by call
    count holds as in plain Python, also where the test's own callback draws the generator. An
    eager map (a list's iterator, its calls all made) still fails."""
    program = """\
        def lazy_map(f, xs):
            for x in xs:
                yield f(x)
        def eager_map(f, xs):
            return iter([f(x) for x in xs])
        def double(x):
            return 2 * x
        def apply(cb):
            return cb()
        """
    check = ("calls = []\ndef f(x):\n    calls.append(x)\n    return x * 2\n"
             "it = {}(f, range(100))\nfirst = [next(it) for _ in range(10)]\n"
             "assert len(calls) == 10, len(calls)\n"
             "assert double(4) == 8 and len(calls) == 10\nrest = list(it)\n"
             "assert first + rest == [2 * x for x in range(100)] and calls == list(range(100))")
    tests = [check.format("lazy_map"),
             "from unittest import mock\nm = mock.Mock(side_effect=lambda x: x * 2)\n"
             "it = lazy_map(m, range(100))\nfor _ in range(12):\n    next(it)\n"
             "assert m.call_count == 12, m.call_count",
             "calls = []\ndef f(x):\n    calls.append(x)\n    return x\n"
             "def cb():\n    it = lazy_map(f, range(100))\n"
             "    return [next(it) for _ in range(10)]\n"
             "assert apply(cb) == list(range(10)) and len(calls) == 10, len(calls)",
             check.format("eager_map")]
    assert plain(program, tests) == [True, True, True, False]
    result = run(program, tests)
    assert result["passed"] == [True, True, True, False], result["errors"]


def test_a_generators_slow_item_is_drawn_only_as_the_test_asks():
    """An item read ahead past its time (a slow one, an endless one) is suspended: a test that
    takes the fast items only passes at once, and one that draws the slow ones gets them, in order
    (each resumed as the test asks for it). A generator whose first items are wrong still
    fails."""
    program = """\
        import time
        def g():
            yield from range(9)
            while True:
                pass
        def slow(n):
            for i in range(n):
                if i >= 9:
                    time.sleep(0.03)
                yield i
        def wrong():
            yield from range(1, 10)
            while True:
                pass
        """
    tests = ["it = g()\nassert [next(it) for _ in range(9)] == list(range(9))",
             "import itertools\nassert list(itertools.islice(slow(20), 14)) == list(range(14))\n"
             "assert sum(slow(12)) == 66",
             "it = wrong()\nassert [next(it) for _ in range(9)] == list(range(9))"]
    assert plain(program, tests) == [True, True, False]
    result = run(program, tests, timeout=2.0)
    assert result["passed"] == [True, True, False], result["errors"]
    assert result["errors"][2].startswith("AssertionError"), result["errors"]


def test_a_generators_output_the_test_captures_is_written_as_the_test_draws():
    """No item is read ahead while the test captures the program's output (redirect_stdout,
    capsys): each item's print lands in the capture of the draw that asks for it. A generator
    that prints twice an item still fails."""
    program = """\
        def noisy(n, times=1):
            for i in range(n):
                for _ in range(times):
                    print(i)
                yield i
        """
    test = ("import contextlib, io\nbuf = io.StringIO()\nit = noisy(100{})\n"
            "with contextlib.redirect_stdout(buf):\n    got = [next(it) for _ in range(10)]\n"
            "assert got == list(range(10)) and buf.getvalue().split() == [str(i) for i in "
            "range(10)], buf.getvalue()")
    tests = [test.format(""), test.format(", 2")]
    assert plain(program, tests) == [True, False]
    result = run(program, tests)
    assert result["passed"] == [True, False], result["errors"]


NODE = """\
    class ListNode:
        def __init__(self, val=0, next=None):
            self.val, self.next = val, next
        def __eq__(self, other):
            return (type(other) is ListNode and self.val == other.val
                    and self.next == other.next)
    def walk(node):
        out = []
        while node:
            out.append(node.val)
            node = node.next
        return out
    """


def test_an_instance_of_a_class_the_task_declares_is_rebuilt_from_its_state():
    """A result that is an instance of a class the context (the task's prompt) declares arrives
    as that class's instance in the test process, rebuilt from the program's state: the task's
    own __eq__, truth and attributes judge it (as in plain Python, where the prompt's class is the
    program's), never the program's methods; a long list, a cycle and shared nodes are rebuilt
    as they are."""
    right = textwrap.dedent(NODE) + textwrap.dedent("""\
        def build(xs):
            head = None
            for x in reversed(xs):
                head = ListNode(x, head)
            return head
        def ring():
            a = ListNode(1)
            a.next = ListNode(2, a)
            return a
        """)
    wrong = right.replace("self.next == other.next)", "True)").replace(
        "head = ListNode(x, head)", "head = ListNode(0, head)")
    tests = ["assert build([1, 2]) == ListNode(1, ListNode(2))",
             "r = build([1, 2, 3])\nassert isinstance(r, ListNode) and walk(r) == [1, 2, 3]",
             "assert walk(build(list(range(3000)))) == list(range(3000))",
             "r = ring()\nassert r.next.next is r and r.next.val == 2",
             "assert build([]) is None"]
    result = run(right, tests, context=textwrap.dedent(NODE), names=["build", "ring"])
    assert result["passed"] == [True] * 5, result["errors"]
    result = run(wrong, tests, context=textwrap.dedent(NODE), names=["build", "ring"])
    assert result["passed"] == [False, False, False, True, True], result["errors"]


def test_a_test_that_catches_everything_still_times_out():
    """A hang is a timeout, never "it raised": the test process's alarm marks the test failed
    before its TestTimeout reaches the test (a bare `except:` that swallows it changes nothing),
    and it rings again, so no test runs on without an alarm (a loop of such calls ends within
    its timeout). The program here also swallows its own alarm and never answers: as in plain
    Python, no later test starts (its wait spends the tests' budget: sandbox_link.py:settle)."""
    program = """\
        def hang(x):
            while True:
                try:
                    while True:
                        pass
                except BaseException:
                    pass
        """
    for tests in (["try:\n    hang(1)\nexcept:\n    pass", "assert 1 + 1 == 2"],
                  ["for x in range(6):\n    try:\n        hang(x)\n    except:\n        pass"]):
        result = run(program, tests, max_timeouts=2)
        assert result["completed"], result
        assert not result["timed_out"], result  # each run ended at its budget, not the deadline
        assert result["passed"] == [False] * len(tests), result["errors"]
        assert result["errors"] == ["Timeout: test timed out"] + ["not run"] * (len(tests) - 1)


def test_the_programs_random_is_its_own():
    """No state of the test process reaches the program's: after a test seeds random, the
    program's generator still is not the test's, so it cannot read the test's next draws from
    it (plain Python, one generator, would let it)."""
    program = """\
        import random
        def predict():
            twin = random.Random()
            twin.setstate(random.getstate())
            return [twin.random() for _ in range(3)]
        def draw():
            return random.random()
        """
    result = run(program, ["import random\nrandom.seed(5)\nguess = predict()\n"
                           "assert guess != [random.random() for _ in range(3)]",
                           "random.seed(5)\nmine = draw()\nrandom.seed(5)\n"
                           "assert mine != random.random()"])
    assert result["passed"] == [True, True], result["errors"]


# ----------------------------------------------------------------------------------------------
# Harm
# ----------------------------------------------------------------------------------------------

def test_no_zombie_left_when_the_program_is_busy_as_its_test_process_ends():
    """A trainer that is a child subreaper (as pid 1 of a container) inherits the program's
    process when the test process ends while the program still runs (it ignores its alarm); the
    trainer reaps it with its process group."""
    script = textwrap.dedent("""
        import ctypes, os, sys
        from pathlib import Path
        sys.path.insert(0, os.getcwd())
        from nanomarl.sandbox import run_tests_in_sandbox
        assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
        busy = "import signal\\ndef f():\\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\\n" \\
               "    while True:\\n        pass\\n"
        for _ in range(3):
            result = run_tests_in_sandbox(busy, ["f()"], timeout=0.3)
            assert result["errors"] == ["Timeout: test timed out"], result
        zombies = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] == "Z" and int(fields[1]) == os.getpid():
                zombies.append(stat.parent.name)
        print(len(zombies))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "0"


def test_the_timeout_rule_counts_wall_time():
    """A program that answers just before each alarm no longer dodges the three-timeouts rule:
    the tests share max_timeouts x timeout seconds of wall time, then the rest are skipped."""
    result = run("import time\ndef f():\n    time.sleep(0.25)\n    return 1\n",
                 ["assert f() == 2"] * 8, timeout=0.3)
    assert result["errors"][:3] == ["AssertionError: "] * 3
    assert result["errors"][-4:] == ["not run"] * 4
    assert result["seconds"] < 8 * 0.25 + 1.0, result["seconds"]  # the tests' 0.9 s, the load


COLLIDING = "k * (2 ** 61 - 1)"  # every one of these ints hashes to 0


def test_an_answer_of_colliding_hashes_is_refused_before_it_is_built():
    """A set answer whose elements all share one hash (forged as JSON text, cheap to write, on
    every descriptor the program holds) is the harness's refusal before the test process builds
    it (sandbox_layers.py:crowded), not quadratic time; the next test still runs."""
    program = f"""\
        import os, time
        def f():
            items = ",".join(str({COLLIDING}) for k in range(1, 45000))
            answer = "\\n[%d,\\"a\\",\\"v\\",{{\\"s\\":[%s]}},{{\\"d\\":[]}}]\\n"
            line = "".join(answer % (seq, items) for seq in (1, 2, 3))
            for fd in range(3, 32):
                try:
                    os.write(fd, line.encode())
                except OSError:
                    pass
            time.sleep(5)
        """
    result = run(program, ["assert f() == set()"] + ["assert 1 == 1"] * 8)
    assert result["passed"] == [False] + [True] * 8
    assert result["errors"][0] == (
        "ProgramError: the harness refused: a set or dict whose keys share a hash")
    assert result["seconds"] < 6.0, result["seconds"]  # (the deadline: 11 s)


def test_c_work_the_alarm_cannot_interrupt_is_stopped_by_the_cpu_watchdog():
    """A test that turns a list of colliding ints into a set runs in C, out of the alarm's reach:
    the test process's CPU watchdog (RLIMIT_CPU, timeout + 1 s beyond its use so far) ends the
    run long before its overall deadline (timeout x 31 + 2 s here)."""
    result = run(f"def f():\n    return [{COLLIDING} for k in range(1, 80000)]\n",
                 ["assert len(set(f())) == 3"] + ["assert True"] * 29)
    assert not result["completed"] and result["passed"] == [False] * 30
    assert result["seconds"] < 15.0, result["seconds"]


FORGED = """\
    import random
    def forge():
        big = [{"i": "%x" % (random.getrandbits(12_000_000) | 1)} for _ in range(2)]
        line = ('\\n[0,"a","v",{"F":[%s]},{"d":[]}]\\n'
                % ",".join('{"i":"%s"}' % b["i"] for b in big)).encode()
        for fd in range(3, 32):
            try:
                os.write(fd, line)
            except OSError:
                pass
    """


def test_the_cpu_watchdog_covers_loading_and_prefetch():
    """A Fraction of two 12-million-bit numbers, forged as an answer line while the program loads
    (or while the test process fetches the declared names), costs minutes of gcd in C, out of the
    alarm's reach: the CPU watchdog is set before loading and prefetch too, and ends the run in
    seconds instead of at its overall deadline."""
    at_load = "import os\n" + textwrap.dedent(FORGED) + "forge()\ndef f():\n    return 1\n"
    at_prefetch = ("import os\n" + textwrap.dedent(FORGED) + "class Forged:\n"
                   "    @property\n    def __class__(self):\n        forge()\n"
                   "        return Forged\nf = Forged()\n")  # (asked as `f` is sent)
    for program in (at_load, at_prefetch):
        result = run(program, ["assert f() == 1"] * 8, names=["f"])
        assert not result["completed"] and result["passed"] == [False] * 8, result
        # ended by the watchdog, not by the overall deadline (a CPU limit: no wall-clock bound)
        assert not result["timed_out"], result


# ----------------------------------------------------------------------------------------------
# False negatives
# ----------------------------------------------------------------------------------------------

def test_richer_values_travel_as_themselves():
    """Counter, NamedTuple, bytes, bytearray, complex, ints over 4,300 digits, frozenset, deque,
    OrderedDict, defaultdict (its factory kept), Fraction, Decimal, range, dict views, dates and
    answers over 1 MiB, both ways (a test's arguments too)."""
    program = """\
        import collections, datetime, decimal, fractions
        from typing import NamedTuple
        class P(NamedTuple):
            x: int
            y: int
        VALUES = [collections.Counter("aab"), P(1, 2), b"ab", bytearray(b"c"), 1 + 2j,
                  10 ** 5000, frozenset({1}), collections.deque([1, 2], 5),
                  collections.OrderedDict(a=1), collections.defaultdict(list, a=[1]),
                  fractions.Fraction(1, 3), decimal.Decimal("1.10"), list(range(300000)),
                  range(1, 9, 2), {"a": 1}.items(), datetime.date(2024, 2, 29),
                  datetime.timedelta(days=1, seconds=2)]
        def f(k):
            return VALUES[k]
        def echo(*args):
            return [type(a).__name__ for a in args], args
        """
    tests = ["assert f(0) == {'a': 2, 'b': 1} and f(0).most_common(1) == [('a', 2)]",
             "assert f(1) == (1, 2) and f(1).y == 2 and type(f(1)).__name__ == 'P'",
             "assert f(2) == b'ab' and type(f(2)) is bytes",
             "assert f(3) == bytearray(b'c') and type(f(3)) is bytearray",
             "assert f(4) == 1 + 2j", "assert f(5) == 10 ** 5000",
             "assert f(6) == frozenset({1}) and type(f(6)) is frozenset",
             "assert list(f(7)) == [1, 2] and f(7).maxlen == 5",
             "assert f(8) == {'a': 1} and type(f(8)).__name__ == 'OrderedDict'",
             "d = f(9)\nassert d['b'] == [] and d['a'] == [1]",
             "import fractions\nassert f(10) == fractions.Fraction(1, 3)",
             "assert str(f(11)) == '1.10'", "assert f(12) == list(range(300000))",
             "assert f(13) == range(1, 9, 2) and f(14) == {('a', 1)}",
             "import datetime\nassert f(15) == datetime.date(2024, 2, 29) and "
             "f(16) == datetime.timedelta(days=1, seconds=2)",
             "import collections\nd = {'a': 1}\nnames, back = echo(range(3), d.keys(), d.values(), "
             "collections.Counter('ab'), b'x', 2 ** 20000, datetime.time(1, 2))\n"
             "assert names == ['range', 'dict_keys', 'dict_values', 'Counter', 'bytes', 'int', "
             "'time']\nassert back[:2] == (range(3), {'a'}) and list(back[2]) == [1] and "
             "back[5] == 2 ** 20000"]
    result = run(program, tests, timeout=3.0)  # (2 MB of JSON each way on a loaded machine)
    assert result["passed"] == [True] * len(tests), result["errors"]


def test_program_objects_are_used_by_reference():
    """A class instance's methods and attributes (a class as the entry point), isinstance with a
    program class; generators drawn lazily (an infinite one through islice), their exceptions
    raised where plain Python raises them, and instances of types.GeneratorType. What plain Python
    would ask the instance's own methods (its length, equality with another program object, `in`
    a list of them) fails the test: it is no value (test_a_program_objects_length_truth_...)."""
    program = """\
        from dataclasses import dataclass
        class Stack:
            def __init__(self):
                self.items = []
            def push(self, x):
                self.items.append(x)
                return self
            def pop(self):
                return self.items.pop()
            def __len__(self):
                return len(self.items)
            def __repr__(self):
                return f"Stack({self.items})"
        @dataclass
        class Point:
            x: int
            y: int
        def make_point(x, y):
            return Point(x, y)
        def naturals():
            i = 0
            while True:
                yield i
                i += 1
        def fails_after(n):
            yield from range(n)
            raise ValueError("done")
        """
    tests = ["s = Stack()\nassert s.push(1).push(2) is s\n"
             "assert s.pop() == 2 and repr(s) == 'Stack([1])' and s.items == [1]",
             "assert isinstance(make_point(1, 2), Point) and make_point(1, 2).x == 1",
             "import itertools\nassert list(itertools.islice(naturals(), 1000)) == "
             "list(range(1000))",
             "g = naturals()\nassert next(g) == 0 and next(g) == 1 and next(iter(g)) == 2",
             "it = fails_after(2)\nassert next(it) == 0\ntry:\n    list(it)\n    assert False\n"
             "except ValueError as e:\n    assert str(e) == 'done'",
             "assert 5 in naturals() and 1 in fails_after(3)",
             "import inspect, types\nassert isinstance(naturals(), types.GeneratorType) and "
             "inspect.isgenerator(naturals()) and not inspect.isgenerator(Stack())",
             "assert len(Stack().push(1)) == 1",
             "assert make_point(1, 2) == Point(1, 2)",
             "assert make_point(1, 2) in [make_point(0, 0), make_point(1, 2)]"]
    result = run(program, tests)
    assert result["passed"] == [True] * 7 + [False] * 3, result["errors"]


def test_callbacks_and_test_objects_reach_the_program():
    """Functions, builtins, bound methods of a test's list, a test's generator, instances of a
    test's own class and a mock passed to the program: it calls, reads, sets and draws them in the
    test process."""
    program = """\
        def apply_twice(f, x):
            return f(f(x))
        def sort_by(items, key=None):
            return sorted(items, key=key)
        def to_list(node):
            out = []
            while node is not None:
                out.append(node.val)
                node = node.next
            return out
        def each(items, fn):
            for item in items:
                fn(item)
        def relabel(node, val):
            node.val = val
            return node
        """
    tests = ["assert apply_twice(lambda x: x + 3, 1) == 7",
             "import math\nassert sort_by(['bb', 'a'], key=len) == ['a', 'bb'] and "
             "sort_by([4, 1], key=math.sqrt) == [1, 4]",
             "class Node:\n    def __init__(self, val, next=None):\n"
             "        self.val, self.next = val, next\n"
             "assert to_list(Node(1, Node(2))) == [1, 2]",
             "out = []\neach([1, 2], out.append)\nassert out == [1, 2]",
             "n = Node(1)\nassert relabel(n, 5) is n and n.val == 5",
             "def gen():\n    yield 2\n    yield 1\nassert sort_by(gen()) == [1, 2]",
             "from unittest import mock\ncallback = mock.Mock(return_value=4)\n"
             "assert apply_twice(callback, 1) == 4\ncallback.assert_called_with(4)"]
    result = run(program, tests)
    assert result["passed"] == [True] * len(tests), result["errors"]


def test_a_test_callbacks_changes_to_the_programs_arguments_reach_the_program():
    """A test's callback (a function, a mock, a module attribute the test patched) called by the
    program with the program's containers changes the program's own objects in place, as in
    plain Python: a patched random.shuffle that reverses its list, a callback that appends, one
    that updates a dict, one that changes its list and then raises (the program catches and sees
    the change), one that changes a list inside another, a test's argument the program hands on
    (the change reaches the test too), one list passed twice, and a list beside the program's own
    StringIO (a program object: the containers are numbered alike around it); an argument the
    callback returns is the program's own (`cb(a) is a`)."""
    program = """\
        import random
        def shuffled(xs):
            items = list(xs)
            random.shuffle(items)
            return items
        def collect(add):
            out = []
            add(out)
            return out
        def tally(update):
            counts = {"a": 1}
            update(counts)
            return counts
        def careful(cb):
            seen = []
            try:
                cb(seen)
            except ValueError:
                return seen
        def same(cb):
            a, inner = [1], [2]
            return cb(a) is a, cb([inner])[0] is inner, cb((a, a))[1] is a
        def nested(cb):
            rows = [[1], [2]]
            cb(rows)
            return rows
        def hand_on(xs, cb):
            cb(xs)
            return len(xs)
        def twice(cb):
            a = []
            cb(a, a)
            return a
        def beside(cb):
            import io
            items = [1]
            cb(io.StringIO(), items)
            return items
        """
    tests = ["from unittest import mock\n"
             "with mock.patch('random.shuffle', side_effect=lambda l: l.reverse()) as m:\n"
             "    assert shuffled([1, 2, 3]) == [3, 2, 1]\nm.assert_called_once_with([3, 2, 1])",
             "assert collect(lambda l: l.append(7)) == [7]",
             "assert tally(lambda d: d.update(b=2)) == {'a': 1, 'b': 2}",
             "def cb(l):\n    l.append(1)\n    raise ValueError\nassert careful(cb) == [1]",
             "assert same(lambda l: l) == (True, True, True)",
             "assert nested(lambda rows: rows[1].append(3)) == [[1], [2, 3]]",
             "xs = [1]\nassert hand_on(xs, lambda l: l.append(2)) == 2 and xs == [1, 2]",
             "assert twice(lambda x, y: (x.append(1), y.append(2))) == [1, 2]",
             "assert beside(lambda buffer, items: items.append(2)) == [1, 2]"]
    expected = [True] * len(tests)
    assert plain(program, tests) == expected
    result = run(program, tests)
    assert result["passed"] == expected, result["errors"]


def test_exceptions_recursion_limits_and_redirected_output_behave_as_in_one_process():
    """A ValueError subclass is caught by `except ValueError` (and keeps its name); a test's
    sys.setrecursionlimit is the program's; a test's redirect_stdout captures the program's
    prints."""
    program = """\
        class InvalidInput(ValueError):
            pass
        def check(x):
            if x < 0:
                raise InvalidInput("negative")
            return x
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)
        def greet(name):
            print("hello", name)
        def warn(text):
            import sys
            print("warning:", text, file=sys.stderr)
        """
    tests = ["try:\n    check(-1)\n    assert False\nexcept ValueError as e:\n"
             "    assert type(e).__name__ == 'InvalidInput' and str(e) == 'negative'",
             "import sys\nsys.setrecursionlimit(5000)\nassert depth(3000) == 3000",
             "import contextlib, io\nbuffer = io.StringIO()\n"
             "with contextlib.redirect_stdout(buffer):\n    greet('bob')\n"
             "assert buffer.getvalue() == 'hello bob\\n'",
             "buffer = io.StringIO()\nwith contextlib.redirect_stderr(buffer):\n    warn('x')\n"
             "assert buffer.getvalue() == 'warning: x\\n'"]
    result = run(program, tests)
    assert result["passed"] == [True] * len(tests), result["errors"]
    assert result["stdout"] == result["stderr"] == ""  # (the redirected prints: only in buffers)


def test_exceptions_cross_with_their_class_and_arguments():
    """The program's exception arrives as its class with its arguments: a UnicodeDecodeError is
    caught by `except ValueError` (its start and reason kept), KeyError.args is the key, a
    subclass keeps its base and arguments, and SystemExit is SystemExit (caught by `except
    SystemExit`, never by `except Exception`), as in plain Python."""
    program = """\
        import sys
        class Custom(LookupError):
            def __init__(self, key, why):
                super().__init__(key, why)
        def decode(data):
            return data.decode("ascii")
        def lookup(d, k):
            return d[k]
        def stop(code):
            sys.exit(code)
        def custom():
            raise Custom("k", 3)
        """
    tests = ["try:\n    decode(b'\\xff')\n    assert False\nexcept ValueError as e:\n"
             "    assert type(e) is UnicodeDecodeError and e.start == 0 and e.object == b'\\xff'",
             "try:\n    lookup({}, 'k')\n    assert False\nexcept KeyError as e:\n"
             "    assert e.args == ('k',) and str(e) == \"'k'\"",
             "try:\n    stop(3)\n    assert False\nexcept SystemExit as e:\n    assert e.code == 3",
             "try:\n    stop(3)\nexcept Exception:\n    pass",
             "try:\n    custom()\n    assert False\nexcept LookupError as e:\n"
             "    assert e.args == ('k', 3) and type(e).__name__ == 'Custom'"]
    result = run(program, tests)
    assert result["passed"] == [True, True, True, False, True], result["errors"]
    assert result["errors"][3] == "SystemExit: 3"


def test_a_returned_exception_is_a_value_of_its_class():
    """An exception the program returns (not raises) arrives as an exception of its class with
    its arguments, alone or inside a container, as in plain Python; a program's subclass as
    the raised path has it: its name, its arguments and its nearest builtin ancestor."""
    program = """\
        class Invalid(ValueError):
            pass
        def f():
            return ValueError("x")
        def lookup(d, k):
            try:
                return d[k]
            except KeyError as e:
                return e
        def errors():
            return [ValueError(1), KeyError(2)]
        def invalid():
            return Invalid("no", 2)
        """
    tests = ["assert type(f()) is ValueError", "assert f().args == ('x',) and str(f()) == 'x'",
             "assert isinstance(f(), Exception) and not isinstance(f(), KeyError)",
             "e = lookup({}, 'k')\nassert type(e) is KeyError and e.args == ('k',)\n"
             "assert str(e) == \"'k'\" and isinstance(e, LookupError)",
             "assert [type(e) for e in errors()] == [ValueError, KeyError]",
             "e = invalid()\nassert isinstance(e, ValueError) and e.args == ('no', 2)\n"
             "assert type(e).__name__ == 'Invalid'"]
    assert plain(program, tests) == [True] * len(tests)
    result = run(program, tests)
    assert result["passed"] == [True] * len(tests), result["errors"]


def test_an_exception_of_a_class_the_task_declares_is_the_tasks_class():
    """An exception of a class the context declares (the prompt's `class Invalid(ValueError)`),
    raised or returned, arrives as an instance of the context's class with its arguments: a
    test's `except Invalid`, `except` a declared base, isinstance, args and str are plain
    Python's. A class the context does not declare (the program's own, or one nested in a
    function under a declared name) still arrives as its nearest builtin ancestor's subclass
    (test_gap_a_program_class_is_not_a_class_in_the_test_process)."""
    context = textwrap.dedent("""\
        class MyBase(Exception):
            pass
        class Invalid(ValueError):
            pass
        class Bad(MyBase):
            pass
        """)
    program = context + textwrap.dedent("""\
        class Other(ValueError):
            pass
        def f():
            raise Invalid("bad")
        def g():
            raise Bad("no", 2)
        def h():
            return [Invalid("bad")]
        def other():
            raise Other("x")
        def nested():
            class Invalid(KeyError):
                pass
            raise Invalid("k")
        """)
    tests = ["try:\n    f()\n    assert False\nexcept Invalid as e:\n"
             "    assert e.args == ('bad',) and str(e) == 'bad' and type(e) is Invalid",
             "try:\n    g()\n    assert False\nexcept MyBase as e:\n"
             "    assert type(e) is Bad and e.args == ('no', 2) and str(e) == \"('no', 2)\"",
             "e, = h()\nassert isinstance(e, Invalid) and isinstance(e, ValueError)\n"
             "assert e.args == ('bad',) and str(e) == 'bad'",
             "try:\n    f()\n    assert False\nexcept ValueError:\n    pass",
             "try:\n    other()\n    assert False\nexcept ValueError as e:\n"
             "    assert type(e).__name__ == 'Other' and not isinstance(e, Invalid)",
             "try:\n    nested()\n    assert False\nexcept Invalid:\n    assert False\n"
             "except KeyError as e:\n    assert type(e).__name__ == 'Invalid' and e.args == ('k',)"]
    assert plain(program, tests) == [True] * len(tests)
    result = run(program, tests, context=context, names=["f", "g", "h", "other", "nested"])
    assert result["passed"] == [True] * len(tests), result["errors"]


def test_an_exceptions_own_attributes_cross_with_it():
    """An exception's own public attributes that are values (set by its __init__: a context's
    InsufficientFunds(balance, amount), whose args are its message only; a program's class's)
    cross with it, as plain Python keeps them; never its class's (args, a method)."""
    context = textwrap.dedent("""\
        class InsufficientFunds(Exception):
            def __init__(self, balance, amount):
                super().__init__(f"balance {balance} < {amount}")
                self.balance, self.amount = balance, amount
        """)
    program = context + textwrap.dedent("""\
        class Invalid(ValueError):
            def __init__(self, field):
                super().__init__(field + " missing")
                self.field, self.args_seen = field, 2
        def withdraw(balance, amount):
            if amount > balance:
                raise InsufficientFunds(balance, amount)
            return balance - amount
        def validate(user):
            if "name" not in user:
                raise Invalid("name")
        """)
    tests = ["try:\n    withdraw(10, 50)\n    assert False\nexcept InsufficientFunds as e:\n"
             "    assert (e.balance, e.amount, str(e)) == (10, 50, 'balance 10 < 50')",
             "try:\n    validate({})\n    assert False\nexcept ValueError as e:\n"
             "    assert e.field == 'name' and e.args == ('name missing',)",
             "try:\n    withdraw(10, 50)\nexcept InsufficientFunds as e:\n"
             "    assert e.amount == 10"]
    assert plain(program, tests) == [True, True, False]
    result = run(program, tests, context=context, names=["withdraw", "validate"])
    assert result["passed"] == [True, True, False], result["errors"]


def test_a_programs_class_named_like_a_builtin_exception_is_its_own():
    """A program's class named like a builtin exception (its own KeyError(Exception), a
    ValueError(BaseException)) is a class of its own, as in plain Python: raised, returned or
    ending a stream, no `except LookupError` catches its KeyError and `except Exception` does not
    catch its ValueError; only the builtin the program raises is that builtin."""
    body = textwrap.dedent("""\
        def find(d, k):
            if k not in d:
                raise KeyError(k)
            return d[k]
        def made(k):
            return KeyError(k)
        def stream(xs):
            yield from xs
            raise KeyError("end")
        def root(x):
            if x < 0:
                raise ValueError(x)
            return x
        """)
    tests = ["try:\n    find({}, 'a')\n    ok = False\nexcept LookupError:\n    ok = True\n"
             "assert ok",
             "assert isinstance(made('a'), LookupError)",
             "out = []\ntry:\n    for x in stream([1]):\n        out.append(x)\n"
             "except LookupError:\n    out.append('end')\nassert out == [1, 'end']",
             "try:\n    root(-1)\n    ok = False\nexcept Exception:\n    ok = True\n"
             "except BaseException:\n    ok = False\nassert ok"]
    wrong = "class KeyError(Exception):\n    pass\nclass ValueError(BaseException):\n    pass\n"
    for program, verdicts in ((body, [True] * 4), (wrong + body, [False] * 4)):
        assert plain(program, tests) == verdicts
        result = run(program, tests, names=["find", "made", "stream", "root"])
        assert result["passed"] == verdicts, result["errors"]


def test_a_declared_class_the_program_redefines_otherwise_is_the_programs():
    """A class the context declares that the program redefines otherwise (an InvalidMove of
    another base, a Money whose add subtracts, a Color whose GREEN is 3) shadows the context's,
    as in plain Python: its exception is a class of its own (no `except ValueError` catches an
    InvalidMove(Exception)), its instance and member program objects (never rebuilt as the
    context's, whose add the test would run). One it repeats, with docstrings of its own or on
    other lines, or with a __repr__ and a helper method of its own, is the context's class (a
    fingerprint of its code, sent by the test process)."""
    context = textwrap.dedent("""\
        from enum import Enum
        class InvalidMove(ValueError):
            pass
        class Money:
            def __init__(self, cents):
                self.cents = cents
            def add(self, other):
                return Money(self.cents + other.cents)
            def __eq__(self, other):
                return isinstance(other, Money) and self.cents == other.cents
        class Color(Enum):
            RED = 1
            GREEN = 2
        """)
    body = textwrap.dedent("""\
        def move(x):
            if x < 0:
                raise InvalidMove(x)
            return x
        def cash(c):
            return Money(c)
        def color():
            return Color.GREEN
        """)
    documented = context.replace("    pass\n", '    """A move off the board."""\n').replace(
        "        self.cents = cents\n", '        """In cents."""\n        self.cents = cents\n')
    helped = context.replace("    def add(", "    def __repr__(self):\n        return 'M'\n"
                             "    def double(self):\n        return self.add(self)\n    def add(")
    redefined = context.replace("(ValueError)", "(Exception)").replace(
        "self.cents + other", "self.cents - other").replace("GREEN = 2", "GREEN = 3")
    tests = ["try:\n    move(-1)\n    ok = False\nexcept ValueError:\n    ok = True\nassert ok",
             "assert cash(5).add(Money(5)) == Money(10)",
             "assert color().value == 2 and color() is Color.GREEN"]
    for program, verdicts in ((context + body, [True] * 3), (documented + body, [True] * 3),
                              (helped + body, [True] * 3), (redefined + body, [False] * 3)):
        assert plain(program, tests) == verdicts
        result = run(program, tests, context=context, names=["move", "cash", "color"])
        assert result["passed"] == verdicts, result["errors"]


def test_a_declared_enums_member_crosses_as_that_member():
    """A member of an Enum the context declares crosses as that member, both ways: the
    program's Color.GREEN is the test's Color.GREEN (`==`, `is`, .name), and the test's
    Color.RED is the program's own (`c is Color.RED`, list(Color).index(c)), as in one process."""
    context = "from enum import Enum\nclass Color(Enum):\n    RED = 1\n    GREEN = 2\n"
    program = context + textwrap.dedent("""\
        def next_color(c):
            members = list(Color)
            return members[(members.index(c) + 1) % len(members)]
        def is_red(c):
            return c is Color.RED
        """)
    tests = ["assert next_color(Color.RED) == Color.GREEN and next_color(Color.GREEN) is Color.RED",
             "assert is_red(Color.RED) and not is_red(Color.GREEN)",
             "assert next_color(Color.RED).name == 'GREEN'",
             "assert next_color(Color.RED).value == 1"]
    assert plain(program, tests) == [True, True, True, False]
    result = run(program, tests, context=context, names=["next_color", "is_red"])
    assert result["passed"] == [True, True, True, False], result["errors"]


def test_a_declared_flags_combined_member_crosses_as_that_member():
    """A combination of a Flag the context declares (`Perm.R | Perm.W`, a member its class makes
    as it is met) crosses as that combination of the context's members, both ways: `in`, `is` and
    type hold as in one process, though the program's class has made a member the test's lacks
    (it stays the context's class). A combination of other members is not the test's value."""
    context = "from enum import IntFlag\nclass Perm(IntFlag):\n    R = 4\n    W = 2\n    X = 1\n"
    program = context + textwrap.dedent("""\
        def read_write():
            return Perm.R | Perm.W
        def has(p, f):
            return f in p
        """)
    tests = ["assert Perm.W in read_write() and Perm.X not in read_write()",
             "assert read_write() is Perm.R | Perm.W and type(read_write()) is Perm",
             "assert has(Perm.R | Perm.X, Perm.X) and not has(Perm.R | Perm.X, Perm.W)",
             "assert read_write() == Perm.R | Perm.X"]
    assert plain(program, tests) == [True, True, True, False]
    result = run(program, tests, context=context, names=["read_write", "has"])
    assert result["passed"] == [True, True, True, False], result["errors"]


def test_a_tests_methodcaller_and_a_deques_bound_method_reach_the_program():
    """An operator.methodcaller and a bound method of a test's deque (or Counter, OrderedDict)
    are callbacks, called in the test process, as an itemgetter and a list's append are."""
    program = "def each(items, fn):\n    return [fn(x) for x in items]\n"
    tests = ["import operator\nassert each([' a '], operator.methodcaller('strip')) == ['a']",
             "import collections\nq = collections.deque()\neach([1, 2], q.appendleft)\n"
             "assert list(q) == [2, 1]",
             "c = collections.Counter()\neach('aab', c.update)\nassert c == {'a': 2, 'b': 1}"]
    assert plain(program, tests) == [True] * 3
    result = run(program, tests)
    assert result["passed"] == [True] * 3, result["errors"]


def test_prints_of_any_size_never_raise():
    """A print past the output cap (max_output_bytes) is cut from the output the caller sees, never
    an error in the program (or in a test): plain Python prints it."""
    program = """\
        import sys
        def f(n):
            print("x" * n)
            print("e" * n, file=sys.stderr)
            sys.stdout.write("w" * n)
            return n
        """
    result = run(program, ["assert f(3 << 20) == 3 << 20", "assert f(10) == 10",
                           "print('y' * (3 << 20))\nassert True"], max_output_bytes=1 << 20)
    assert result["passed"] == [True] * 3, result["errors"]
    assert result["stdout"].startswith("x" * 1000) and result["stderr"].startswith("e" * 1000)


def test_a_str_enum_result_is_compared_as_its_value():
    """A (str, Enum) member (or any str subclass) is compared as the str it is, as plain Python
    compares it, not as the text its __str__ gives ('Light.RED')."""
    program = """\
        from enum import Enum
        class Light(str, Enum):
            RED = "red"
        class Loud(str):
            def __str__(self):
                return "LOUD"
        def f():
            return Light.RED
        def g():
            return Loud("quiet")
        """
    result = run(program, ["assert f() == 'red'", "assert {'red': 1}[f()] == 1",
                           "assert g() == 'quiet'"])
    assert result["passed"] == [True] * 3, result["errors"]


STACK = dict(id="toy/stack", kind="code", entry_point="Stack",
             prompt='class Stack:\n    """A stack: push(x), pop() -> the last pushed."""\n',
             test="def check(candidate):\n    s = candidate()\n    s.push(1)\n    s.push(2)\n"
                  "    assert s.pop() == 2\n    assert len(s.items) == 2\n")


def test_a_class_as_the_entry_point_gets_its_credit_through_the_reward_path():
    """The completion's class is the program's entry point (its methods are not cut out of it),
    and check()'s asserts about an instance (`s = candidate()`) are its tests."""
    right = ("Here it is:\n```python\nclass Stack:\n    def __init__(self):\n"
             "        self.items = []\n\n    def push(self, x):\n        self.items.append(x)\n\n"
             "    def pop(self):\n        return self.items.pop()\n```\n")
    wrong = right.replace("return self.items.pop()", "return 0")
    assert code_reward("", right, STACK, **LIMITS)[1]["tests_passed"] == 2
    assert code_reward("", wrong, STACK, **LIMITS)[1]["tests_passed"] == 1  # len(s.items) == 2


def test_partials_buffers_random_generators_and_patterns_cross_as_copies():
    """A test's functools.partial is rebuilt in the program's process from its function (sent as
    it would be alone), arguments and keywords; io.StringIO and io.BytesIO by value and position,
    random.Random by its state, each written back after the call as a list is (what the program
    reads, writes or draws moves the test's own object); a compiled re.Pattern and its bound
    methods by pattern and flags; a SystemRandom as a SystemRandom (it has no state). A bound
    method of a test's Random or buffer (rng.random, buf.write) is called on the test's own."""
    program = """\
        import functools, io, random, re
        def apply(f, x):
            return f(x)
        def parts(p):
            assert isinstance(p, functools.partial)
            return p.func(*p.args, **p.keywords)
        def first_line(buf):
            return buf.readline()
        def shout(buf, text):
            buf.write(text.upper())
        def total(stream):
            return sum(int(line) for line in stream)
        def draws(rng, n):
            assert isinstance(rng, random.Random)
            return [rng.randint(1, 6) for _ in range(n)]
        def find(pattern, text):
            assert isinstance(pattern, re.Pattern)
            return pattern.findall(text)
        def call(f):
            return f()
        def bound(items, key):
            return [key(item).group() for item in items]
        """
    tests = ["import functools\nassert apply(functools.partial(int, base=2), '101') == 5",
             "assert apply(functools.partial(lambda a, b: a - b, 10), 3) == 7",
             "assert parts(functools.partial(pow, 2, 5)) == 32",
             "out = []\napply(functools.partial(list.append, out), 4)\nassert out == [4]",
             "import io\nbuf = io.StringIO('one\\ntwo\\n')\n"
             "assert first_line(buf) == 'one\\n' and buf.readline() == 'two\\n'",
             "buf = io.StringIO()\nbuf.write('a')\nshout(buf, 'bc')\n"
             "assert buf.getvalue() == 'aBC' and buf.tell() == 3",
             "buf = io.StringIO('1\\n2\\n3\\n')\nassert total(buf) == 6 and buf.read() == ''",
             "b = io.BytesIO(b'xy')\nb.seek(1)\nassert first_line(b) == b'y' and b.tell() == 2",
             "import random\nrng, twin = random.Random(7), random.Random(7)\n"
             "assert draws(rng, 5) == [twin.randint(1, 6) for _ in range(5)]\n"
             "assert rng.random() == twin.random()",
             "assert len(draws(random.SystemRandom(), 3)) == 3",
             "rng, twin, buf = random.Random(3), random.Random(3), io.StringIO()\n"
             "assert call(rng.random) == twin.random()\n"
             "assert call(functools.partial(rng.randint, 1, 6)) == twin.randint(1, 6)\n"
             "apply(buf.write, 'hey')\nassert buf.getvalue() == 'hey'",
             "import re\nassert find(re.compile(r'\\d+', re.I), 'a1b22') == ['1', '22']",
             "assert bound(['a1', 'b2'], re.compile(r'\\w\\d').match) == ['a1', 'b2']"]
    result = run(program, tests)
    assert result["passed"] == [True] * len(tests), result["errors"]


def test_a_callbacks_match_is_a_match_in_the_program():
    """A re.Match a test's callback returns (or a test passes) is rebuilt in the program's process
    as a real re.Match, by running its pattern again where it matched (match, search, fullmatch
    or the n-th of finditer): group(), groups(), groupdict(), span(), start(), end(), [], its
    truth, pos, string and re are the test's; one that cannot be rebuilt (a match on a
    memoryview) fails the test with an error naming it."""
    program = """\
        import re
        def tokens(words, matcher):
            out = []
            for word in words:
                m = matcher(word)
                if m:
                    assert isinstance(m, re.Match)
                    out.append((m.group(), m.groups(), m.groupdict(), m.span(), m.start(1),
                                m.end(), m[0], m.pos, m.endpos, m.string, m.re.pattern,
                                m.lastindex, m.expand(r'<\\1>')))
                else:
                    out.append(m)
            return out
        def whole(m):
            return m.span(), m.group(0)
        """
    summary = ("def summary(words, matcher):\n    return [(m.group(), m.groups(), m.groupdict(), "
               "m.span(), m.start(1), m.end(), m[0], m.pos, m.endpos, m.string, m.re.pattern, "
               "m.lastindex, m.expand(r'<\\1>')) if (m := matcher(w)) else m for w in words]\n")
    tests = [summary + "import re\nwords = ['a12', 'b', 'c3']\n"
             "for matcher in (lambda w: re.search(r'(?P<num>\\d)(\\d)?', w),\n"
             "                lambda w: re.compile(r'(\\w)').match(w, 1),\n"
             "                lambda w: re.fullmatch(r'(a|ab)(c?)\\d*', w),\n"
             "                lambda w: list(re.finditer(r'(\\w)', w))[-1]):\n"
             "    assert tokens(words, matcher) == summary(words, matcher)",
             "assert whole(re.search(r'b+', 'abbbc')) == ((1, 4), 'bbb')",
             "whole(re.search(rb'\\d', memoryview(b'a1')))"]
    result = run(program, tests)
    assert result["passed"] == [True, True, False], result["errors"]
    assert result["errors"][2] == ("ProgramError: this argument cannot be sent to the program: "
                                   "memoryview"), result["errors"]


TEST_NODE = """\
    class Node:
        def __init__(self, val, next=None):
            self.val, self.next = val, next
        def __str__(self):
            return f"Node({self.val})"
        def __lt__(self, other):
            return self.val < other.val
        def __eq__(self, other):
            return isinstance(other, Node) and self.val == other.val
        def __hash__(self):
            return hash(self.val)
    """


def test_a_test_objects_protocol_is_the_tests_in_the_program():
    """A test object the program holds answers as the test's own object does, its methods run in
    the test process: its truth (`while node:`), iteration, `in`, str, repr and format, `<` (sort,
    min, heapq), `==`, `!=` and hash (a set of them), a dataclass's or a slot's field set,
    isinstance with a test class the test passes, and with the program's class of the name of a
    class the prompt declares (the test's ListNode is a ListNode); a callback is true."""
    program = """\
        import heapq
        def count(node):
            n = 0
            while node:
                n += 1
                node = node.next
            return n
        def items(bag):
            return [x for x in bag], 2 in bag, bool(bag)
        def text(x):
            return str(x), repr(x), f"{x}"
        def smallest(nodes):
            return (min(nodes).val, [n.val for n in sorted(nodes)],
                    heapq.nsmallest(1, nodes)[0].val)
        def same(a, b):
            return a == b, a != b, len({a, b}), a in [b], b in {a: 1}
        def relabel(node, val):
            node.val = val
            return node.val
        def kind(x, cls):
            return isinstance(x, cls), isinstance(3, cls)
        def maybe(key=None):
            return 1 if key else 0
        """
    tests = [textwrap.dedent(TEST_NODE) + "assert count(Node(1, Node(2, Node(3)))) == 3",
             "class Bag:\n    def __iter__(self):\n        yield from (1, 2)\n"
             "    def __contains__(self, x):\n        return x == 2\n"
             "assert items(Bag()) == ([1, 2], True, True)",
             "n = Node(4)\nassert text(n) == ('Node(4)', repr(n), 'Node(4)')",
             "assert smallest([Node(3), Node(1), Node(2)]) == (1, [1, 2, 3], 1)",
             "assert same(Node(1), Node(1)) == (True, False, 1, True, True)\n"
             "assert same(Node(1), Node(2)) == (False, True, 2, False, False)",
             "from dataclasses import dataclass\n@dataclass\nclass Cell:\n    val: int = 0\n"
             "c = Cell()\nassert relabel(c, 5) == 5 and c == Cell(5)",
             "class Slot:\n    __slots__ = ('val',)\ns = Slot()\n"
             "assert relabel(s, 6) == 6 and s.val == 6",
             "assert kind(Node(1), Node) == (True, False)",
             "assert maybe(lambda x: x) == 1 and maybe() == 0"]
    result = run(program, tests)
    assert result["passed"] == [True] * len(tests), result["errors"]
    # the prompt's class, built by the test: the program's class of that name is its class
    context = "class ListNode:\n    def __init__(self, val=0, next=None):\n" \
              "        self.val, self.next = val, next\n"
    program = context + "def is_node(x):\n    return isinstance(x, ListNode), isinstance(x, int)\n"
    result = run(program, ["assert is_node(ListNode(1)) == (True, False)"], context=context,
                 names=["is_node"])
    assert result["passed"] == [True], result["errors"]


def test_a_tests_patched_builtins_stdin_and_warnings_reach_across():
    """A builtin the test replaces (mock.patch('builtins.input'), a mock_open as `open`) is the
    program's during the test's calls, as the test's object; a sys.stdin the test sets to a
    StringIO is the program's stdin (its reads move the test's); the program's warnings during a
    call the test makes with warnings caught, recorded or filtered are shown in the test process,
    under the test's filters (recorded, ignored, or raised as errors where the program warns)."""
    program = """\
        import sys, warnings
        def ask():
            return int(input("n? ")) * 2
        def read_all():
            return [line.strip() for line in sys.stdin]
        def old(x):
            warnings.warn("old api", DeprecationWarning)
            return x
        def words(path):
            with open(path) as f:
                return f.read().split()
        def noisy():
            class Custom(UserWarning):
                pass
            warnings.warn(Custom("custom"))
            return 1
        """
    tests = ["from unittest import mock\n"
             "with mock.patch('builtins.input', return_value='21') as m:\n    assert ask() == 42\n"
             "m.assert_called_once_with('n? ')",
             "with mock.patch('builtins.input', side_effect=['1', '2']) as m:\n"
             "    assert [ask(), ask()] == [2, 4]\nassert m.call_count == 2\n"
             "try:\n    ask()\n    assert False\nexcept Exception as e:\n"
             "    assert type(e) is not AssertionError",
             "with mock.patch('builtins.open', mock.mock_open(read_data='a b')) as m:\n"
             "    assert words('in.txt') == ['a', 'b']\nm.assert_called_once_with('in.txt')",
             "import io, sys\nsys.stdin = io.StringIO('a\\nb\\nc\\n')\nsys.stdin.readline()\n"
             "assert read_all() == ['b', 'c'] and sys.stdin.read() == ''",
             "import warnings\nwith warnings.catch_warnings(record=True) as w:\n"
             "    warnings.simplefilter('always')\n    assert old(3) == 3 and noisy() == 1\n"
             "assert [(x.category.__name__, str(x.message)) for x in w] == "
             "[('DeprecationWarning', 'old api'), ('Custom', 'custom')]\n"
             "assert issubclass(w[1].category, UserWarning)",
             "with warnings.catch_warnings():\n    warnings.simplefilter('error')\n    try:\n"
             "        old(3)\n        assert False\n    except DeprecationWarning as e:\n"
             "        assert str(e) == 'old api'",
             "with warnings.catch_warnings(record=True) as w:\n"
             "    warnings.simplefilter('ignore')\n    old(3)\nassert w == []"]
    result = run(program, tests)
    assert result["passed"] == [True] * len(tests), result["errors"]


def test_a_warning_the_tests_filters_make_an_error_is_raised_where_the_program_warns():
    """Under a test's filter that makes a warning an error (simplefilter('error'), one of a
    message or of a test's own category), the program's warning is that error in its process,
    where it warns (sandbox_caught.py:erring): the program may catch it, and one it does not
    catch stops its call there, so a program that warns before its append leaves the test's list
    empty and fails `xs == [1]`, as in plain Python; the test's other filters still show the rest
    (a warning recorded beside the error)."""
    program = """\
        import warnings
        def careful(category=UserWarning):
            try:
                warnings.warn("lossy", category)
            except category:
                return "caught"
            return "ignored"
        def add_item(xs):
            warnings.warn("deprecated")
            xs.append(1)
        def mixed():
            warnings.warn("noise")
            try:
                warnings.warn("lossy conversion")
            except UserWarning as e:
                return str(e)
            return "none"
        """
    caught = "import warnings\nwith warnings.catch_warnings(record=True) as w:\n"
    tests = ["import warnings\nwith warnings.catch_warnings():\n"
             "    warnings.simplefilter('error')\n    assert careful() == 'caught'",
             "import warnings\nxs = []\nwith warnings.catch_warnings():\n"
             "    warnings.simplefilter('error')\n    try:\n        add_item(xs)\n"
             "    except UserWarning:\n        pass\nassert xs == [1], xs",
             caught + "    warnings.simplefilter('always')\n"
             "    warnings.filterwarnings('error', 'lossy')\n"
             "    assert mixed() == 'lossy conversion'\n"
             "assert [str(x.message) for x in w] == ['noise']",
             "class Mine(UserWarning):\n    pass\n" + caught
             + "    warnings.filterwarnings('error', category=Mine)\n"
             "    assert careful(Mine) == 'caught' and careful() == 'ignored'",
             caught + "    warnings.simplefilter('always')\n    assert careful() == 'ignored'\n"
             "assert len(w) == 1"]
    assert plain(program, tests) == [True, False, True, True, True]
    result = run(program, tests)
    assert result["passed"] == [True, False, True, True, True], result["errors"]


def test_a_tests_patch_of_a_module_attribute_reaches_the_program():
    """A module attribute the test sets (mock.patch('random.randint'), mock.patch.object, a plain
    `random.randint = f`) is the program's module's during the test's calls while it is in force,
    as the test's object (a mock is called in the test process: its calls are recorded there):
    the program's random.randint(1, 6), looked up at call time, finds it; a name the program bound
    at import (`from random import randint`) does not, as in plain Python; the original is back
    in both processes once the patch ends; a patch started and left in force holds across calls;
    a module the program imports only in the call finds it too; the harness's own values (a real
    datetime a patched datetime.datetime.now returns) are unaffected."""
    program = """\
        import datetime, random
        from random import randint as bound
        def roll():
            return random.randint(1, 6)
        def rolls(n):
            return [random.randint(1, 6) for _ in range(n)]
        def roll_bound():
            return bound(1, 6)
        def now():
            return datetime.datetime.now()
        def dumped(x):
            import json
            return json.dumps(x)
        """
    tests = ["from unittest import mock\nimport random\n"
             "with mock.patch('random.randint', return_value=9) as m:\n"
             "    assert roll() == 9\n    assert 1 <= roll_bound() <= 6\n"
             "m.assert_called_once_with(1, 6)\n"
             "assert random.randint is not m and all(1 <= roll() <= 6 for _ in range(20))\n"
             "assert m.call_count == 1",
             "from unittest import mock\nimport random\n"
             "with mock.patch.object(random, 'randint', side_effect=[3, 4, 5]) as m:\n"
             "    assert roll() == 3 and rolls(2) == [4, 5]\n"
             "assert m.call_args_list == [mock.call(1, 6)] * 3 and 1 <= roll() <= 6",
             "from unittest import mock\npatcher = mock.patch('random.randint', return_value=2)\n"
             "m = patcher.start()\nassert roll() == 2\nassert rolls(3) == [2, 2, 2]\n"
             "patcher.stop()\nassert m.call_count == 4 and 1 <= roll() <= 6",
             "import random\noriginal = random.randint\nrandom.randint = lambda a, b: b * 10\n"
             "try:\n    assert roll() == 60\nfinally:\n    random.randint = original\n"
             "assert all(1 <= roll() <= 6 for _ in range(20))",
             "import datetime\nfrom unittest import mock\nreal = datetime.datetime\n"
             "with mock.patch('datetime.datetime') as dt:\n"
             "    dt.now.return_value = real(2020, 1, 2)\n    assert now() == real(2020, 1, 2)\n"
             "    assert type(now()) is real\nassert now().year > 2020",
             "from unittest import mock\nwith mock.patch('json.dumps', return_value='patched'):\n"
             "    assert dumped([1]) == 'patched'\nassert dumped([1]) == '[1]'",
             # a patched list that comes to hold what cannot be sent stays the test's from then on
             "from unittest import mock\nimport string, threading\n"
             "with mock.patch.object(string, 'EXTRA', [], create=True) as extra:\n"
             "    assert roll() in range(1, 7)\n    extra.append(threading.Lock())\n"
             "    assert roll() in range(1, 7)"]
    assert plain(program, tests) == [True] * len(tests)
    result = run(program, tests)
    assert result["passed"] == [True] * len(tests), result["errors"]


def test_a_patched_constant_is_sent_while_it_changes_and_stays_one_object():
    """A patched value crosses dumped once per request; a lasting one (a str, bytes, number, or a
    tuple or frozenset of them: nothing the program could change) is sent once and then only
    named while the test's attribute holds that object, so the program sees one object across
    calls (`is` holds, as in one process) and a new value at the next call; a container (which
    the program may have changed in its copy) is sent at each, so the test's later changes reach
    the program too; after a test whose request never went out (an argument that cannot be sent),
    the next test sends the value again, and the recursion limit that test set."""
    program = """\
        import string
        SEEN = []
        def seen():
            SEEN.append(string.WORDS)
            return SEEN[-1], len(SEEN) > 1 and SEEN[-1] is SEEN[-2]
        def read(x=None):
            return string.WORDS
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)
        """
    tests = ["import string\nstring.WORDS = ('alpha', 'beta') * 500\n"
             "assert seen() == (string.WORDS, False)\nassert seen() == (string.WORDS, True)\n"
             "string.WORDS = 'changed'\nassert seen() == ('changed', False)\n"
             "assert seen() == ('changed', True)\nassert read() == 'changed'\n"
             "string.WORDS = [1]\nassert read() == [1]\nstring.WORDS.append(2)\n"
             "assert read() == [1, 2]",
             "import string, sys\nstring.WORDS = 'lost'\nLIMIT = sys.getrecursionlimit()\n"
             "sys.setrecursionlimit(5000)\nread(memoryview(b''))",
             "import string, sys\ntry:\n    assert read() == 'lost' and depth(3000) == 3000\n"
             "finally:\n    sys.setrecursionlimit(LIMIT)\n    del string.WORDS"]
    assert plain(program, tests) == [True, True, True]
    result = run(program, tests)
    assert result["passed"] == [True, False, True], result["errors"]


def test_a_patched_container_passed_to_the_call_is_one_object_there():
    """A module attribute the test patches with a container it also passes to the call (or inside
    an argument), or that the program keeps, is one object in the program's process too, as in
    one process: the program's change through either name is seen through the other, in the call
    and by the test after it."""
    program = """\
        import string
        KEPT = []
        def keep(items):
            KEPT.append(items)
        def kept():
            string.ITEMS.append(1)
            return KEPT[-1] is string.ITEMS
        def grow(items):
            string.ITEMS.append(len(items))
            return len(items), len(string.ITEMS)
        def shrink(items):
            items.pop()
            return string.ITEMS[:]
        def grow_in(box):
            string.ITEMS.append(9)
            return box["items"]
        """
    patched = ("import string\nfrom unittest import mock\nitems = [0]\n"
               "with mock.patch.object(string, 'ITEMS', items, create=True):\n")
    tests = [patched + "    assert grow(items) == (2, 2) and items == [0, 1]",
             patched + "    assert shrink(items) == [] and items == []",
             patched + "    assert grow_in({'items': items}) == [0, 9] and items == [0, 9]",
             patched + "    keep(items)\n    assert kept() and items == [0, 1]"]
    assert plain(program, tests) == [True] * 4
    result = run(program, tests)
    assert result["passed"] == [True] * 4, result["errors"]


FROZEN = ("import datetime\nfrom unittest import mock\n"
          "class Frozen(datetime.datetime):\n    @classmethod\n    def now(cls, tz=None):\n"
          "        return cls(2020, 1, 2, 3, 4, 5, tzinfo=tz)\n")


def test_a_tests_frozen_clock_and_a_patch_set_in_a_callback_reach_the_program():
    """A test's subclass of a datetime type patched in (the frozen clock: Frozen with its own
    now(), mock.patch('datetime.datetime', Frozen)) is a real subclass of datetime in the
    program's process whose public methods are the test's, called in the test process: the
    program's datetime.datetime.now() (through `import datetime`, `import datetime as dt`, a
    `from datetime import datetime` in the function) is the frozen value, a value there
    (strftime, str, arithmetic; a timezone crosses as a value), the patched class's constructor
    and isinstance are datetime's own, an instance method of the test's class is the test's (and
    str() calls it, as datetime's does), a date subclass's today() alike; a frozen value the
    program returns is an instance of the test's class (type(x) is Frozen). A patch a test's
    callback starts, stops or sets during a call (patcher.start(), .stop(), `random.randint = f`,
    builtins.input) is the program's for the rest of that call, as in plain Python."""
    program = """\
        import datetime, random
        import datetime as dt
        def stamp():
            return datetime.datetime.now().strftime("%Y-%m-%d")
        def stamp_inner():
            from datetime import datetime
            return datetime.now().strftime("%Y-%m-%d %H:%M")
        def stamp_alias(tz=None):
            return str(dt.datetime.now(tz))
        def built():
            x = datetime.datetime(2021, 5, 6)
            exact = type(x) is datetime.datetime
            return x.isoformat(), str(x), isinstance(x, datetime.datetime), exact
        def today():
            return datetime.date.today().isoformat()
        def now_and_later():
            x = datetime.datetime.now()
            return x, x + datetime.timedelta(days=1), isinstance(x, datetime.datetime)
        def roll_around(cb):
            first = random.randint(1, 6)
            cb()
            return first, random.randint(1, 6)
        def ask_around(cb):
            cb()
            return input()
        """
    tests = [FROZEN + "with mock.patch('datetime.datetime', Frozen):\n"
                      "    assert stamp() == '2020-01-02'\nassert stamp() != '2020-01-02'",
             FROZEN + "with mock.patch('datetime.datetime', Frozen):\n"
                      "    assert stamp_inner() == '2020-01-02 03:04'",
             FROZEN + "with mock.patch('datetime.datetime', Frozen):\n"
                      "    utc = datetime.timezone.utc\n"
                      "    assert stamp_alias(utc) == '2020-01-02 03:04:05+00:00'",
             FROZEN + "with mock.patch('datetime.datetime', Frozen):\n"
                      "    assert built() == ('2021-05-06T00:00:00', '2021-05-06 00:00:00', True, "
                      "True)",
             "import datetime\nfrom unittest import mock\nclass Labeled(datetime.datetime):\n"
             "    def isoformat(self, sep='T', timespec='auto'):\n"
             "        return 'day %d%s' % (self.day, sep)\n"
             "with mock.patch('datetime.datetime', Labeled):\n"
             "    assert built() == ('day 6T', 'day 6 ', True, True)",
             "import datetime\nfrom unittest import mock\nclass FrozenDate(datetime.date):\n"
             "    @classmethod\n    def today(cls):\n        return cls(2020, 1, 2)\n"
             "with mock.patch('datetime.date', FrozenDate):\n    assert today() == '2020-01-02'",
             FROZEN + "with mock.patch('datetime.datetime', Frozen):\n"
                      "    x, later, is_datetime = now_and_later()\n"
                      "assert type(x) is Frozen and x == Frozen(2020, 1, 2, 3, 4, 5)\n"
                      "assert type(later) is Frozen and is_datetime\n"
                      "assert later == datetime.datetime(2020, 1, 3, 3, 4, 5)",
             "from unittest import mock\npatcher = mock.patch('random.randint', return_value=9)\n"
             "try:\n    assert roll_around(lambda: patcher.start())[1] == 9\nfinally:\n"
             "    patcher.stop()",
             "from unittest import mock\npatcher = mock.patch('random.randint', return_value=9)\n"
             "patcher.start()\nfirst, second = roll_around(lambda: patcher.stop())\n"
             "assert first == 9 and 1 <= second <= 6",
             "import random\noriginal = random.randint\n"
             "def cb():\n    random.randint = lambda a, b: 42\n"
             "try:\n    assert roll_around(cb)[1] == 42\nfinally:\n    random.randint = original",
             "from unittest import mock\npatcher = mock.patch('builtins.input', return_value='x')\n"
             "try:\n    assert ask_around(lambda: patcher.start()) == 'x'\nfinally:\n"
             "    patcher.stop()"]
    expected = [True, True, True, True, True, True, True, True, True, True, True]
    assert plain(program, tests) == expected
    result = run(program, tests)
    assert result["passed"] == expected, result["errors"]


def test_a_datetime_the_program_makes_is_compared_as_its_value():
    """A frozen clock's stand-in whose == the program replaced crosses as its datetime value
    (rebuilt as the test's class): compared by datetime's ==, never by the program's (plain Python
    credits the always-equal ones); a program's subclass of a datetime type with an == of its own
    is a program object whose == fails the test, whatever it answers (a Valued's override)."""
    program = """\
        import datetime
        class Always(datetime.datetime):
            def __eq__(self, other):
                return True
            __hash__ = datetime.datetime.__hash__
        def forged():
            return Always(2020, 1, 1)
        def right():
            return Always(2021, 1, 1)
        def forged_clock():
            datetime.datetime.__eq__ = lambda self, other: True
            return datetime.datetime.now()
        """
    tests = ["import datetime\nassert forged() == datetime.datetime(2021, 1, 1)",
             "import datetime\nassert right() == datetime.datetime(2021, 1, 1)",
             FROZEN + "with mock.patch('datetime.datetime', Frozen):\n    x = forged_clock()\n"
                      "assert x == Frozen(2021, 1, 1)",
             FROZEN + "with mock.patch('datetime.datetime', Frozen):\n    x = forged_clock()\n"
                      "assert type(x) is Frozen and x == Frozen(2020, 1, 2, 3, 4, 5)"]
    assert plain(program, tests) == [True, True, True, True]
    result = run(program, tests)
    assert result["passed"] == [False, False, False, True], result["errors"]


def test_a_program_may_start_threads_but_no_process():
    """The program's process may start threads (the seccomp filter lets a clone through only as
    a thread of its process; RLIMIT_NPROC bounds them): a function that computes in a thread, a
    ThreadPoolExecutor, and threads calling a test's callback (the link serves one request at a
    time) pass as in plain Python; a fork still fails."""
    program = """\
        import os, threading
        from concurrent.futures import ThreadPoolExecutor
        def threaded(x):
            out = []
            t = threading.Thread(target=lambda: out.append(x * 2))
            t.start()
            t.join()
            return out[0]
        def pooled(items, fn):
            with ThreadPoolExecutor(4) as pool:
                return list(pool.map(fn, items))
        def forked():
            try:
                os.fork()
            except OSError as e:
                return e.errno
        """
    tests = ["assert threaded(3) == 6",
             "assert pooled(range(8), lambda x: x * x) == [x * x for x in range(8)]",
             "assert forked() == 1"]  # EPERM
    result = run(program, tests)
    assert result["passed"] == [True] * len(tests), result["errors"]


def test_a_test_may_call_the_program_from_threads_and_a_program_at_most_32_threads():
    """A test may start threads (the program's process is pid 1 of a PID namespace that a
    short-lived middle process made: the kernel refuses a thread to a process whose children go
    to another PID namespace, and the test process made none): a test that calls the program from
    a thread, and two threads each calling it 200 times at once (one request and its answer at a
    time on the link), get plain Python's verdicts, a wrong expectation, a program's exception and
    a callback that calls the program again (on the same thread) included. A hang in a test's
    thread that the main thread joins (in the test's code, in the program's) fails that test as
    timed out (the alarm rings in the main thread), and the tests after it run as before. The
    program's threads are bounded: RLIMIT_NPROC counts the two processes and 32 threads, the 33rd
    alive at once fails to start."""
    program = """\
        import threading, time
        def double(x):
            return x * 2
        def pair(x):
            return [x, {"double": x * 2}]
        def fail():
            raise ValueError("no")
        def apply(f, x):
            return f(x)
        def sleepy():
            time.sleep(60)
        def hold(n):
            threading.stack_size(1 << 18)  # (the address-space limit: not the bound here)
            stop, threads = threading.Event(), []
            try:
                for _ in range(n):
                    threads.append(threading.Thread(target=stop.wait))
                    threads[-1].start()
            except RuntimeError:
                threads.pop()
            stop.set()
            for t in threads:
                t.join()
            return len(threads)
        """
    in_a_thread = "import threading\nr = []\nt = threading.Thread(target=lambda: r.append({}))\n" \
                  "t.start()\nt.join()\nassert r == {}"
    calls = [in_a_thread.format("double(2)", "[4]"), in_a_thread.format("double(2)", "[5]"),
             in_a_thread.format("pair(3)", "[[3, {'double': 6}]]"),
             in_a_thread.format("apply(lambda v: double(v) + 1, 3)", "[7]"),
             "import threading\nr = []\ndef caught():\n    try:\n        fail()\n"
             "    except ValueError as e:\n        r.append(str(e))\n"
             "t = threading.Thread(target=caught)\nt.start()\nt.join()\nassert r == ['no']",
             "import threading\nseen = {0: [], 1: []}\n"
             "def work(k):\n    for i in range(200):\n        x = 1000 * k + i\n"
             "        seen[k].append(pair(x) == [x, {'double': 2 * x}] and double(x) == 2 * x)\n"
             "threads = [threading.Thread(target=work, args=(k,)) for k in (0, 1)]\n"
             "for t in threads:\n    t.start()\nfor t in threads:\n    t.join()\n"
             "assert seen == {0: [True] * 200, 1: [True] * 200}"]
    expected = [True, False, True, True, True, True]
    assert plain(program, calls) == expected
    result = run(program, calls + ["assert hold(32) == 32", "assert hold(40) == 32"], timeout=5.0)
    assert result["passed"] == expected + [True, True], result["errors"]
    assert result["errors"][1] == "AssertionError: "
    hangs = [in_a_thread.format("threading.Event().wait()", "[True]"),
             in_a_thread.format("sleepy()", "[None]"), calls[0]]
    result = run(program, hangs)
    assert result["passed"] == [False, False, True], result["errors"]
    assert result["errors"][:2] == ["Timeout: test timed out"] * 2


def test_a_timeout_stays_marked_while_a_tests_thread_checks_a_patch():
    """The alarm marks a timeout (the harness's own failure, whatever the test catches) while a
    test's thread is inside a request, checking whether a patched value can be sent: the mark
    stays (that check notes no failure of its own, so it has none to undo). Staged here: the
    patched value's __getattr__ holds the thread inside the check until the alarm has interrupted
    the main thread, which then stops it from ringing again (a ring would mark the test anew); a
    check that put back the flag it had found would wipe the mark, and the test would pass."""
    program = "def f():\n    return 1\n"
    staged = """\
        import signal, string, threading, time
        entered, noted = threading.Event(), threading.Event()
        class Hook:
            def __getattr__(self, name):
                if not entered.is_set():
                    entered.set()
                    noted.wait(5)
                raise AttributeError(name)
        def call():
            try:
                f()
            except BaseException:
                pass
        string.HOOK = Hook()
        t = threading.Thread(target=call)
        t.start()
        entered.wait(5)
        try:
            time.sleep(5)
        except BaseException:
            signal.setitimer(signal.ITIMER_REAL, 0)
        noted.set()
        t.join()
        """
    result = run(program, [staged, "assert f() == 1"])
    assert result["passed"] == [False, True], result["errors"]
    assert result["errors"][0] == "Timeout: test timed out"


def test_the_report_holds_no_control_characters():
    """A program's words reach the report (an exception's message): its control characters
    (escape sequences, NUL, BEL, DEL, C1) are dropped, its line breaks are spaces."""
    program = "def f():\n    raise ValueError('\\x1b[2J\\x1b]0;x\\x07y\\x00\\x7f\\x9b!\\nz\\tw')\n"
    result = run(program, ["f()"])
    assert result["errors"] == ["ValueError: [2J]0;xy! z\tw"], result["errors"]


# ----------------------------------------------------------------------------------------------
# Gaps: where two processes still differ from one (each also in sandbox.py's "What remains")
# ----------------------------------------------------------------------------------------------

def test_gap_a_program_object_is_not_compared_with_a_test_value():
    """Plain Python would ask the program object's own __eq__ (or __add__, __lt__, ...); here
    that is refused, because the test's value may be an expected one and an object equal to
    everything would match it. A right program whose answer is a custom number compared with a
    literal loses the test, and so does one compared with another program object (an instance of
    a class the prompt declares is rebuilt as the prompt's class: test_an_instance_of_a_class_
    the_task_declares_is_rebuilt_from_its_state); the program's subclass of int, str, list,
    dict, ... compares as its base type's value (tests/test_sandbox_subclasses.py)."""
    program = """\
        class Num:
            def __init__(self, v):
                self.v = v
            def __eq__(self, other):
                return self.v == getattr(other, "v", other)
        class MyList(list):
            pass
        def f():
            return Num(3)
        def g():
            return MyList([1, 2])
        """
    result = run(program, ["assert f() == 3", "assert f() == Num(3)", "assert g() == [1, 2]"])
    assert result["passed"] == [False, False, True]


def test_gap_a_generator_is_drawn_ahead_after_its_eighth_item():
    """One item per request for the first 8, then up to as many as drawn so far (at most 256)
    per request, of items that are lasting values (an int, a str, a tuple of them) drawn within a
    moment each, with no request of the test process and no output the test captures: a
    generator's side effects on the program's own state (a counter) run ahead of the test."""
    program = "COUNT = [0]\ndef gen():\n    while True:\n        COUNT[0] += 1\n        yield 0\n" \
              "def drawn():\n    return COUNT[0]\n"
    result = run(program, ["g = gen()\nfor _ in range(8):\n    next(g)\nassert drawn() == 8",
                           "next(g)\nassert drawn() == 16"])
    assert result["passed"] == [True, True]


def test_gap_each_call_is_a_round_trip():
    """A call costs a round trip between the processes (about 0.1 ms, more on a loaded machine):
    a test making 150,000 calls in one second, which plain Python makes in a few ms, times
    out."""
    result = run("def f(x):\n    return x\n", ["for i in range(150000):\n    assert f(i) == i"])
    assert result["errors"] == ["Timeout: test timed out"]


def test_without_names_every_top_level_name_of_the_program_is_the_tests():
    """Without `names` (a program that brings its own check()), the program's top-level defs,
    classes and assigned names are its names, as plain Python's test sees them all: a constant,
    each name of an unpacking, and a global the program rebinds (read anew at each use: its
    value now). With `names` (the reward's: the entry point, aux), any other global of the
    program is the tests' NameError, though plain Python would read it."""
    program = """\
        calls = 0
        LIMIT = 3
        a, (b, *c) = 1, (2, 3, 4)
        def tick():
            global calls
            calls += 1
            return LIMIT + calls
        """
    tests = ["assert tick() == 4 and calls == 1 and tick() == 5 and calls == 2",
             "assert LIMIT == 3 and (a, b, c) == (1, 2, [3, 4])"]
    assert plain(program, tests) == [True, True]
    result = run(program, tests)
    assert result["passed"] == [True, True], result["errors"]
    result = run(program, tests, names=["tick"])
    assert result["passed"] == [False, False]
    assert result["errors"][1] == "NameError: name 'LIMIT' is not defined"


def test_gap_a_container_the_program_hands_a_test_object_is_a_copy():
    """A container the program reads from a test object is the test's own
    (test_a_test_objects_containers_are_the_tests_own_in_the_program), and a test's callback's
    changes to the program's arguments reach the program
    (test_a_test_callbacks_changes_to_the_programs_arguments_reach_the_program), but a container
    the program hands to a test object (an attribute it sets, an argument of a test's callback)
    crosses as a copy: what the test object keeps is that copy, so the program's later changes
    through its own name are not seen (through the attribute they are: read back, it is the
    test's); and in a call among whose arguments is a subclass of list, tuple, dict or set the
    context declares or a module defines (it crosses as its base's copy, which the program's
    process does not number) the callback's changes are not written back (but to a kept one;
    the program's own subclass, Row here, is a program object the callback changes in place, as
    in plain Python). Beyond the bounds of
    what is kept (64 containers, 4,096 items:
    test_gap_beyond_4096_items_a_kept_container_is_the_programs_copy) and for one that is also
    an argument of an enclosing call (a callback's call to the program) or sits inside a kept
    container, a test object's container arrives as a copy too; and as each request compares the
    kept containers with their snapshots on both sides, a loop of appends through an attribute
    costs a comparison of the list at each round trip where plain Python takes microseconds (the
    list's new items alone cross:
    test_a_list_the_program_appends_to_through_a_test_object_costs_its_new_items; any other
    change sends the container whole)."""
    program = """\
        def give(box):
            kids = []
            box.items = kids
            kids.append(1)
            box.items.append(2)
        def log_then_add(record):
            items = []
            record(items)
            items.append(1)
        class Row(list):
            pass
        def fill(cb):
            row = Row()
            cb(row)
            return len(row)
        """
    tests = ["class Box:\n    pass\nb = Box()\ngive(b)\nassert b.items == [2]",
             "class Box:\n    pass\nb = Box()\ngive(b)\nassert b.items == [1, 2]",
             "seen = []\nlog_then_add(seen.append)\nassert seen == [[]]",
             "seen = []\nlog_then_add(seen.append)\nassert seen == [[1]]",
             "assert fill(lambda row: row.append(1)) == 0",
             "assert fill(lambda row: row.append(1)) == 1"]
    assert plain(program, tests) == [False, True, False, True, False, True]
    assert run(program, tests)["passed"] == [True, False, True, False, False, True]


def test_gap_a_callbacks_change_reaches_the_program_when_the_callback_returns():
    """A test's callback's changes to the program's arguments are written back with its answer
    (test_a_test_callbacks_changes_to_the_programs_arguments_reach_the_program): a call of the
    program from inside the callback, after the change, still sees the argument as it was (the
    list's length 1 where plain Python sees 2); the program's own name for it has the change once
    the callback returns."""
    program = """\
        def outer(cb):
            items = [1]
            cb(items, lambda: len(items))
            return items
        """
    callback = "seen = []\ndef cb(items, size):\n    items.append(2)\n    seen.append(size())\n"
    tests = [callback + "assert outer(cb) == [1, 2] and seen == [2]",
             callback + "assert outer(cb) == [1, 2] and seen == [1]"]
    assert plain(program, tests) == [True, False]
    assert run(program, tests)["passed"] == [False, True]


def test_gap_a_callbacks_change_to_a_declared_class_instance_is_not_written_back():
    """The program's instance of a class the context declares (a ListNode) reaches a test's
    callback rebuilt from its state, an instance of the context's class in the test process
    (test_an_instance_of_a_class_the_task_declares_is_rebuilt_from_its_state): the callback
    changes that copy, so the program's node keeps its value (1 where plain Python sees 2),
    unlike a container the program passes, whose changes are written back."""
    program = textwrap.dedent(NODE) + textwrap.dedent("""\
        def bump(cb):
            node = ListNode(1)
            cb(node)
            return node.val
        """)
    callback = "def cb(node):\n    assert isinstance(node, ListNode)\n    node.val = 2\n"
    tests = [callback + "assert bump(cb) == 2", callback + "assert bump(cb) == 1"]
    assert plain(program, tests) == [True, False]
    result = run(program, tests, context=textwrap.dedent(NODE), names=["bump"])
    assert result["passed"] == [False, True], result["errors"]


def test_gap_a_tests_random_seed_does_not_seed_the_program():
    """The program's random is its own (test_the_programs_random_is_its_own): a test that seeds
    random and expects the program's draws to follow (one generator, as in one process) fails."""
    program = "import random\ndef roll():\n    return random.randint(1, 6)\n"
    result = run(program, ["import random\nrandom.seed(7)\nfirst = [roll() for _ in range(20)]\n"
                           "random.seed(7)\nassert first == [random.randint(1, 6) for _ in "
                           "range(20)]"])
    assert result["passed"] == [False]


def test_gap_a_program_class_is_not_a_class_in_the_test_process():
    """A program class is a reference: a test can call it, compare and isinstance with it, but
    not subclass it; but an exception class, which is one class in the test process (`except`
    and isinstance see it: test_sandbox_program_exceptions.py), or the context's where the
    program's is the same (test_an_exception_of_a_class_the_task_declares_is_the_tasks_class)."""
    program = """\
        class Box:
            def __init__(self, v):
                self.v = v
        class Invalid(ValueError):
            pass
        def f():
            raise Invalid("no")
        def g():
            return Invalid("no")
        """
    result = run(program, ["assert Box(3).v == 3", "class Sub(Box):\n    pass",
                           "try:\n    f()\nexcept Invalid:\n    pass",
                           "try:\n    f()\nexcept ValueError:\n    pass",
                           "assert isinstance(g(), Invalid)", "assert isinstance(g(), ValueError)"])
    assert result["passed"] == [True, False, True, True, True, True]
    assert result["stderr"] == ""


def test_gap_a_tests_threads_call_the_program_one_at_a_time():
    """A test's threads call the program in turn, each request and its answer one thread's (the
    link carries one round trip at a time), so a call waits for another thread's to end: a thread
    whose call waits in the program for the main thread's later call times out, where plain
    Python passes (test_a_test_may_call_the_program_from_threads_and_a_program_at_most_32_threads
    has threads whose calls do not wait on each other). No timing decides it: the thread's call
    tells the test it has begun (a callback, served by that thread) before it waits, so the main
    thread's call comes while it waits, and the program's wait has no end of its own."""
    program = """\
        import threading
        gate = threading.Event()
        def wait(begun):
            begun()
            return gate.wait()
        def release():
            gate.set()
        """
    tests = ["import threading\nr = []\nstarted = threading.Event()\n"
             "def begun():\n    started.set()\n"
             "t = threading.Thread(target=lambda: r.append(wait(begun)))\n"
             "t.start()\nstarted.wait()\nrelease()\nt.join()\nassert r == [True]"]
    assert plain(program, tests) == [True]
    result = run(program, tests)
    assert result["errors"] == ["Timeout: test timed out"]


def test_gap_the_tests_share_one_wall_time_budget():
    """The tests share max_timeouts x timeout seconds of wall time, the longest the trainer waits
    for one program's tests (test_the_timeout_rule_counts_wall_time): five tests of 0.8 s at a
    timeout of 1 s, each of which plain Python (an alarm per test) passes, give three passes, a
    timeout (0.6 s of the 3 s are left for the fourth) and a test not run."""
    result = run("import time\ndef f():\n    time.sleep(0.8)\n    return 1\n",
                 ["assert f() == 1"] * 5, timeout=1.0)
    assert result["passed"] == [True, True, True, False, False], result["errors"]
    assert result["errors"][3:] == ["Timeout: test timed out", "not run"]


def test_gap_beyond_4096_items_a_kept_container_is_the_programs_copy():
    """Each request compares the containers the program keeps with their snapshots on both
    sides, so at most 64 of them holding 4,096 items are kept once the program answers (within a
    call a kept list may outgrow them, sandbox_copies.py): a list of
    5,000 the program keeps is its copy, and what a later call does to it is not written back
    (emptying it passes `a == list(range(5000))`, which plain Python fails); one of 50 is kept.
    A test object's attribute of 5,000 items is the program's copy too (emptying it is not
    seen), and so is a dict of 5,000 keys (a key set is not seen); one of 50 is the test's.
    Of a test object's 100 rows, the list and its first 63 rows are
    kept: a change to the 90th reaches the test inside the list, as a new row (the test's own
    90th row does not change: `row == [0]` passes)."""
    program = ("K = []\ndef keep(l):\n    K.append(l)\ndef clear():\n    K[-1].clear()\n"
               "def clear_items(box):\n    box.items.clear()\n"
               "def put(box):\n    box.counts['x'] = 1\n"
               "def add(box):\n    box.rows[90].append(1)\n")
    box = "class Box:\n    pass\nb = Box()\n"
    tests = ["a = list(range(5000))\nkeep(a)\nclear()\nassert a == list(range(5000))",
             "a = list(range(50))\nkeep(a)\nclear()\nassert a == list(range(50))",
             box + "b.items = list(range(5000))\nclear_items(b)\n"
             "assert b.items == list(range(5000))",
             box + "b.items = list(range(50))\nclear_items(b)\nassert b.items == list(range(50))",
             box + "b.counts = dict.fromkeys(range(5000), 0)\nput(b)\nassert 'x' not in b.counts",
             box + "b.rows = [[0] for _ in range(100)]\nrow = b.rows[90]\nadd(b)\n"
             "assert b.rows[90] == [0, 1] and row == [0]"]
    assert plain(program, tests) == [False] * 6
    assert run(program, tests)["passed"] == [True, False, True, False, True, True]


def test_gap_what_of_the_tests_state_and_types_does_not_reach_the_program():
    """The state inside a module the test changes is not the program's (a module attribute it
    sets is: test_a_tests_patch_of_a_module_attribute_reaches_the_program): mock.patch.dict of
    os.environ changes the test process's environment only (each process has its own, as it has
    its own random state); a test object's type in the program is the harness's proxy
    (isinstance works, type(x) is not the test's class); of a frozen clock's class only its
    public methods are the test's in the program's process, its dunders are its base's (its own
    __str__ is not asked there: that process runs no test code); a patched container that holds
    an argument container (rather than being one) is a copy of its own there, so the program's
    change through it does not reach the argument."""
    program = """\
        import datetime, os
        def env():
            return os.environ.get("NANOMARL_FLAG")
        def kind(x, cls):
            return type(x) is cls, isinstance(x, cls)
        def text():
            return str(datetime.datetime(2020, 1, 2))
        def grow(items):
            import string
            string.BOX[0].append(1)
            return len(items)
        """
    tests = ["from unittest import mock\n"
             "with mock.patch.dict('os.environ', {'NANOMARL_FLAG': '1'}):\n"
             "    assert env() == '1'",
             "class Box:\n    pass\nassert kind(Box(), Box) == (True, True)",
             "import datetime\nfrom unittest import mock\nclass Shown(datetime.datetime):\n"
             "    def __str__(self):\n        return 'shown'\n"
             "with mock.patch('datetime.datetime', Shown):\n    assert text() == 'shown'",
             "import string\nfrom unittest import mock\nitems = [0]\n"
             "with mock.patch.object(string, 'BOX', [items], create=True):\n"
             "    assert grow(items) == 2 and items == [0, 1]"]
    assert [plain(program, [test]) for test in tests] == [[True]] * 4
    result = run(program, tests)
    assert result["passed"] == [False] * 4, result["errors"]
    assert result["errors"] == ["AssertionError: "] * 4, result["errors"]


def test_a_tests_module_passed_to_the_program_is_the_programs_module_of_that_name():
    """A module the test hands the program (f(math)) crosses by its name: the program's process's
    own module of that name (as a module the test imported is the same module in one process)."""
    program = "def root(m, x):\n    return m.sqrt(x)\ndef name(m):\n    return m.__name__\n"
    tests = ["import math\nassert root(math, 16) == 4.0",
             "import json\nassert name(json) == 'json'",
             "import math\nassert root(math, 16) == 5.0"]
    assert plain(program, tests) == [True, True, False]
    assert run(program, tests)["passed"] == [True, True, False]


def test_a_builtin_a_callback_replaces_is_compared_by_identity():
    """A builtin a test's callback replaces during a call reaches the rest of the call; the test
    process tells it changed by identity, never asking the new object's == (which may raise)."""
    program = "def ask(prepare):\n    prepare()\n    return int(input()) * 2\n"
    tests = ["import builtins\nclass Reader:\n    def __call__(self, *args):\n        return '21'\n"
             "    def __eq__(self, other):\n        raise RuntimeError('no ==')\n"
             "    __hash__ = object.__hash__\nold = builtins.input\n"
             "def prepare():\n    builtins.input = Reader()\n"
             "try:\n    assert ask(prepare) == 42\nfinally:\n    builtins.input = old"]
    assert plain(program, tests) == [True]
    assert run(program, tests)["passed"] == [True]


def test_a_programs_decorator_on_a_tests_recursive_function_nests_as_deep_as_plain_python():
    """A program's memoize on a test's recursive function nests a request in a request at each
    level (the harness's frames on both sides): the harness gives them room, so the recursion goes
    as deep as in one process, and the program's own recursion no deeper."""
    program = """\
        def memoize(f):
            cache = {}
            def wrapper(*args):
                if args not in cache:
                    cache[args] = f(*args)
                return cache[args]
            return wrapper
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)
        """
    tests = ["@memoize\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
             "assert fib(200) == 280571172992510140037611932413038677189525",
             "try:\n    depth(5000)\nexcept RecursionError:\n    pass\nelse:\n    assert False"]
    assert plain(program, tests) == [True, True]
    assert run(program, tests)["passed"] == [True, True]


def test_a_programs_arithmetic_on_a_tests_objects_is_done_by_their_own_methods():
    """sum, 3 * v, v + w, -v, abs, float, int, round, v += w, grid[k] = v and del grid[k] in the
    program on a test's objects run the test's own methods in the test process; its
    NotImplemented is handed back, so Python tries the other operand's (or raises TypeError)."""
    program = """\
        def total(vs):
            return sum(vs)
        def mixed(v, w):
            u = 3 * v + w
            u += v
            return -u, abs(v), float(v), int(v), round(v, 1)
        def put(grid, k, v):
            grid[k] = v
            del grid['x']
        def bad(v):
            return v + 1
        """
    tests = ["class V:\n    def __init__(self, x):\n        self.x = x\n"
             "    def __add__(self, o):\n        return V(self.x + o.x) if isinstance(o, V) "
             "else NotImplemented\n"
             "    def __radd__(self, o):\n        return self if o == 0 else NotImplemented\n"
             "    def __rmul__(self, k):\n        return V(self.x * k)\n"
             "    def __neg__(self):\n        return V(-self.x)\n"
             "    def __abs__(self):\n        return abs(self.x)\n"
             "    def __float__(self):\n        return float(self.x)\n"
             "    def __index__(self):\n        return int(self.x)\n"
             "    def __round__(self, n=None):\n        return round(self.x, n)\n"
             "    def __eq__(self, o):\n        return isinstance(o, V) and o.x == self.x\n"
             "assert total([V(1), V(2)]) == V(3)\n"
             "assert mixed(V(2.25), V(1)) == (V(-10.0), 2.25, 2.25, 2, 2.2)\n"
             "try:\n    bad(V(1))\nexcept TypeError:\n    pass\nelse:\n    assert False",
             "class Grid:\n    def __init__(self):\n        self.cells = {'x': 0}\n"
             "    def __setitem__(self, k, v):\n        self.cells[k] = v\n"
             "    def __delitem__(self, k):\n        del self.cells[k]\n"
             "g = Grid()\nput(g, (1, 2), 'v')\nassert g.cells == {(1, 2): 'v'}"]
    assert plain(program, tests) == [True, True]
    assert run(program, tests)["passed"] == [True, True]


def test_a_re_match_the_program_returns_is_true():
    """A re.Match is always true in plain Python: so is the program's in the test process."""
    program = "import re\ndef find(s):\n    return re.search(r'\\d+', s)\n"
    tests = ["m = find('a12')\nassert m and m.group() == '12'", "assert not find('ab')",
             "if find('x1'):\n    pass\nelse:\n    assert False"]
    assert plain(program, tests) == [True, True, True]
    assert run(program, tests)["passed"] == [True, True, True]


def test_a_program_functions_name_doc_and_wrapped_are_read_but_decide_no_comparison():
    """A program function's __name__, __qualname__, __doc__, __module__, __defaults__ and
    __kwdefaults__ are values (functools.wraps in a decorator task), its __wrapped__ a program
    object: read as in plain Python; a program object among them still decides no comparison."""
    program = """\
        import functools
        def logged(f):
            @functools.wraps(f)
            def wrapper(*args, **kwargs):
                return f(*args, **kwargs)
            return wrapper
        @logged
        def add(a, b=2, *, c=3):
            '''Add two numbers.'''
            return a + b
        class Any:
            def __eq__(self, other):
                return True
        def sneaky():
            pass
        sneaky.__doc__ = Any()
        """
    tests = ["assert add.__name__ == 'add' and add.__qualname__ == 'add'\n"
             "assert add.__doc__ == 'Add two numbers.' and add.__module__ == __name__",
             "assert add.__wrapped__.__defaults__ == (2,)\n"
             "assert add.__wrapped__.__kwdefaults__ == {'c': 3} and add.__wrapped__(1) == 3",
             "assert sneaky.__doc__ == 'anything'"]
    assert plain(program, tests) == [True, True, True]
    assert run(program, tests)["passed"] == [True, True, False]


def test_a_declared_namedtuple_crosses_as_the_context_class_of_its_fields():
    """A NamedTuple the context declares crosses as its class, both ways, where its fields match:
    isinstance with it holds and _replace keeps it; a program's class of that name with other
    fields, or a wrong value, stays a generic namedtuple that no test mistakes for it."""
    context = "from typing import NamedTuple\nclass Point(NamedTuple):\n    x: int\n    y: int\n"
    program = context + textwrap.dedent("""\
        import collections
        def make(x, y):
            return Point(x, y)
        def shift(p, dx):
            return p._replace(x=p.x + dx)
        def other():
            return collections.namedtuple("Point", "x z")(1, 2)
        """)
    tests = ["assert isinstance(make(1, 2), Point) and make(1, 2).y == 2",
             "assert isinstance(shift(Point(1, 2), 3), Point) and shift(Point(1, 2), 3).x == 4",
             "assert not isinstance(other(), Point) and other() == (1, 2)",
             "assert shift(Point(1, 2), 3) == Point(1, 2)"]
    assert plain(program, tests) == [True, True, True, False]
    result = run(program, tests, context=context, names=["make", "shift", "other"])
    assert result["passed"] == [True, True, True, False], result["errors"]


def test_a_namedtuple_the_program_redefines_otherwise_is_not_the_contexts():
    """A program's NamedTuple of a declared name whose method differs (total subtracts) is not the
    context's class in the test, whose total the test would run: a generic namedtuple there, as
    in plain Python the program's own class answers; a repeat is the context's."""
    context = textwrap.dedent("""\
        from typing import NamedTuple
        class Pair(NamedTuple):
            x: int
            y: int
            def total(self):
                return self.x + self.y
        """)
    body = "def make(x, y):\n    return Pair(x, y)\n"
    tests = ["assert make(1, 2).total() == 3", "assert make(1, 2) == (1, 2)"]
    for program, verdicts in ((context + body, [True, True]),
                              (context.replace("x + self", "x - self") + body, [False, True])):
        assert plain(program, tests) == verdicts
        result = run(program, tests, context=context, names=["make"])
        assert result["passed"] == verdicts, result["errors"]


def test_a_builtin_class_or_pure_function_the_program_returns_is_the_tests_own():
    """A builtin class, a builtin function that runs nothing it is given (max, len), Ellipsis or
    NotImplemented the program returns crosses by name: the test's own (`f() is int`); a
    program's class named like one stays the program's, and eval never reaches the test process
    (it stays a program object: the one place the sandbox differs from plain Python here)."""
    program = """\
        class float:
            pass
        def type_of(x):
            return type(x)
        def pick(name):
            return {"int": int, "max": max, "none": type(None), "fake": float}[name]
        def sentinels():
            return Ellipsis, NotImplemented
        def evaluator():
            return eval
        """
    tests = ["assert type_of(1) is int and type_of('a') == str and type_of([]) is list",
             "assert pick('int')('5') == 5 and pick('max') is max and pick('max')([1, 3]) == 3",
             "assert pick('none') is type(None) and sentinels() == (..., NotImplemented)",
             "assert pick('fake') is float",
             "assert pick('fake') is __builtins__['float'] if type(__builtins__) is dict "
             "else pick('fake') is __builtins__.float"]
    assert plain(program, tests) == [True, True, True, True, False]
    assert run(program, tests)["passed"] == [True, True, True, True, False]
    assert run(program, ["assert evaluator() is not eval"])["passed"] == [True]


def test_a_math_function_the_program_returns_or_is_given_is_the_tests_own():
    """A function of math's (each computes numbers from numbers) crosses by name as a builtin
    does: the program's math.sqrt is the test's (`f() is math.sqrt`, called in the test process),
    and the test's comes back as itself; the program's own function named sqrt, or a name math
    has not, stays the program's object or fails the test (a forged name is no function)."""
    program = """\
        import gc, math
        for found in gc.get_objects():
            if type(found) is dict and "Dumped" in found and "hook" in found:
                Dumped = found["Dumped"]
        def op():
            return math.sqrt
        def same(f):
            return f
        def sqrt(x):
            return x ** 0.5
        def own():
            return sqrt
        def forged(name):
            return Dumped('{"M":["math",%s]}' % repr(name).replace("'", '"'), None)
        """
    tests = ["import math\nassert op() is math.sqrt and op()(16) == 4.0",
             "import math\nassert same(math.floor) is math.floor and same(math.pi) == math.pi",
             "assert op()(2.25) == 1.5",
             "import math\nassert own() is not math.sqrt and own()(4) == 2.0",
             "forged('__loader__')",
             "forged('system')"]
    assert plain(program.replace('"Dumped" in found', "False"), tests[:4]) == [True] * 4
    result = run(program, tests, max_timeouts=5)
    assert result["passed"] == [True] * 4 + [False, False], result["errors"]


def test_a_tests_exception_the_program_re_raises_is_the_tests_own():
    """An exception a test's callback raises and the program re-raises (a retry helper) is the
    test's own object: `except Boom` catches it; a program's own class of that name is its own,
    caught by no `except` of the test's class."""
    program = """\
        def retry(fn, attempts):
            last = None
            for _ in range(attempts):
                try:
                    return fn()
                except Exception as e:
                    last = e
            raise last
        class Boom(Exception):
            pass
        def own(kind=Boom):
            raise kind("mine")
        """
    tests = ["class Boom(Exception):\n    pass\nraised = Boom('x')\ndef always():\n"
             "    raise raised\ntry:\n    retry(always, 2)\nexcept Boom as e:\n"
             "    assert e is raised and str(e) == 'x'",
             "class Boom(Exception):\n    pass\ntry:\n    own()\nexcept Boom:\n    pass\n"
             "except Exception as e:\n    assert str(e) == 'mine'\n    raise AssertionError"]
    assert plain(program, tests) == [True, False]
    assert run(program, tests, names=["retry", "own"])["passed"] == [True, False]
    forged = """\
        def check(x, cb):
            try:
                cb()
            except BaseException:
                pass
            error = ValueError("forged")
            error.program_handle = 0  # the test's StopIteration by its handle: never given
            raise error
        """
    tests = ["def cb():\n    raise StopIteration\nassert all(map(lambda x: check(x, cb), [1]))"]
    assert run(forged, tests)["passed"] == [False]


def test_a_standard_library_exception_crosses_as_its_modules_class():
    """A standard library module's exception (json.JSONDecodeError, statistics.StatisticsError,
    decimal.InvalidOperation) is that module's class in the test process: its `except` catches
    it; a program's own class of such a name is its own."""
    program = """\
        import json, statistics, decimal
        def parse(s):
            return json.loads(s)
        def mean(xs):
            return statistics.mean(xs)
        def to_decimal(s):
            return decimal.Decimal(s)
        class JSONDecodeError(ValueError):
            pass
        def fake():
            raise JSONDecodeError("fake")
        """
    tests = ["import json\ntry:\n    parse('{bad')\nexcept json.JSONDecodeError as e:\n"
             "    assert e.pos == 1 and e.msg.startswith('Expecting')",
             "import statistics\ntry:\n    mean([])\nexcept statistics.StatisticsError:\n    pass",
             "import decimal\ntry:\n    to_decimal('abc')\n"
             "except decimal.InvalidOperation:\n    pass",
             "import json\ntry:\n    fake()\nexcept json.JSONDecodeError:\n    pass\n"
             "except ValueError:\n    raise AssertionError"]
    assert plain(program, tests) == [True, True, True, False]
    assert run(program, tests)["passed"] == [True, True, True, False]


def test_a_test_objects_class_is_its_own_for_callable_and_type():
    """A test object's class in the program's process is a proxy class of the test's class's name
    (sandbox_proxies.py): callable(x) only where the test's object is (a resolver returns a test's
    instance, the test's own object, and calls its callback), type(x).__name__, __qualname__ and
    x.__class__.__name__ are its class's, and two instances of one class are of one type, those of
    two classes (of one name too) of two."""
    program = """\
        def resolve(value):
            return value() if callable(value) else value
        def describe(shape):
            return f"{type(shape).__name__}: {shape.area()}"
        def names(x):
            return type(x).__name__, type(x).__qualname__, x.__class__.__name__
        def same_type(a, b):
            return type(a) is type(b)
        """
    tests = ["class Box:\n    pass\nb = Box()\nassert resolve(b) is b and resolve(lambda: 3) == 3",
             "class Square:\n    def area(self):\n        return 4\n"
             "assert describe(Square()) == 'Square: 4' and names(Square()) == ('Square',) * 3",
             "class Clock:\n    def __call__(self):\n        return 9\n"
             "assert resolve(Clock()) == 9",
             "class A:\n    pass\nclass B:\n    pass\nB.__name__ = B.__qualname__ = 'A'\n"
             "assert same_type(A(), A()) and not same_type(A(), B()) and names(B())[0] == 'A'",
             "items = []\nassert names(items.append)[0] == 'builtin_function_or_method'\n"
             "assert names(lambda: 1) == ('function',) * 3\n"
             "assert names(iter(items))[0] == 'list_iterator'"]
    assert plain(program, tests) == [True] * len(tests)
    result = run(program, tests)
    assert result["passed"] == [True] * len(tests), result["errors"]


def test_a_tests_subclass_of_a_value_type_is_of_that_type_in_the_program():
    """A test's instance of a subclass of a builtin value type is of that type in the program
    (sandbox_proxies.py:proxy_class): isinstance with list or dict holds, `match` takes a list's
    as a sequence and a dict's as a mapping (its items asked of the test process), and one of a
    type whose value cannot change (a str's, a tuple's, an IntEnum's member) holds that value
    there, which str.join, `%` and json read as in plain Python, its methods and text still the
    test's; the program's changes through its methods reach the test's object, which comes back
    as itself."""
    program = """\
        import json
        def kinds(x):
            return [isinstance(x, t) for t in (list, dict, str, int, tuple)]
        def total(row):
            match row:
                case [a, b]:
                    return a + b
                case {"a": a, **rest}:
                    return a + len(rest)
                case _:
                    return -1
        def shout(words):
            return " ".join(w.upper() for w in words) + "!" + "".join(words)
        def enc(c):
            return json.dumps({"c": c, str(c): c.name}), "%d-%s" % (c, c.label())
        def grow(row):
            row.append(3)
            return row
        def pair(p):
            return "%s:%s" % p, isinstance(p, tuple), p[1].upper()
        """
    classes = "class Row(list):\n    pass\nclass Cfg(dict):\n    pass\n"
    tests = [classes + "assert kinds(Row([1])) == [True, False, False, False, False]\n"
                       "assert kinds(Cfg(a=1)) == [False, True, False, False, False]",
             classes + "assert total(Row([1, 2])) == 3 and total(Row([1])) == -1\n"
                       "assert total(Cfg(a=1, b=2)) == 2",
             "class W(str):\n    pass\nassert shout([W('a'), W('b')]) == 'A B!ab'",
             "import enum\nclass C(enum.IntEnum):\n    A = 1\n    def label(self):\n"
             "        return 'x'\nassert enc(C.A) == ('{\"c\": 1, \"1\": \"A\"}', '1-x')",
             classes + "r = Row([1, 2])\nassert grow(r) is r and r == [1, 2, 3]",
             "class P(tuple):\n    pass\nassert pair(P((1, 'b'))) == ('1:b', True, 'B')"]
    assert plain(program, tests) == [True] * len(tests)
    result = run(program, tests)
    assert result["passed"] == [True] * len(tests), result["errors"]


def test_a_tests_instances_copies_vars_and_slots_are_plain_pythons():
    """copy.copy and copy.deepcopy of a test's instance copy it in the test process (a new
    instance of the test's class, the test's own when it comes back; a shallow copy shares its
    containers); vars() of a test's instance is a copy of its attributes (their containers the
    test's own) whose writes set them by the test's rules (a method stays the test's: the
    refusal fails the test whatever the program catches, where a program that could not write
    through vars() would have passed); type(x).__slots__ is its class's, and a class of none has
    none."""
    program = """\
        import copy
        def clone(n):
            c = copy.deepcopy(n)
            c.v = 2
            return c
        def shallow(n):
            c = copy.copy(n)
            c.items.append(1)
            return c
        def to_dict(o):
            return dict(vars(o))
        def bump(o):
            vars(o)["v"] += 1
        def shadow(o):
            try:
                vars(o)["area"] = lambda: 0
            except Exception:
                pass
        def fields(o):
            kind = type(o)
            return {s: getattr(o, s) for s in kind.__slots__} if hasattr(kind, "__slots__") else 0
        """
    node = "class Node:\n    def __init__(self):\n        self.v, self.items = 1, []\nn = Node()\n"
    tests = [node + "c = clone(n)\nassert c is not n and type(c) is Node and (c.v, n.v) == (2, 1)",
             node + "c = shallow(n)\nassert c is not n and type(c) is Node and n.items == [1]",
             node + "d = to_dict(n)\nassert d == {'v': 1, 'items': []} and d['items'] is n.items\n"
                    "bump(n)\nassert n.v == 2",
             "class S:\n    def area(self):\n        return 4\ns = S()\nshadow(s)\n"
             "assert s.area() == 4",
             "class P:\n    __slots__ = ('x', 'y')\n    def __init__(self):\n"
             "        self.x, self.y = 1, 2\nassert fields(P()) == {'x': 1, 'y': 2}",
             node + "assert fields(n) == 0"]
    assert plain(program, tests) == [True, True, True, False, True, True]
    result = run(program, tests)
    assert result["passed"] == [True, True, True, False, True, True], result["errors"]
    assert "may not set" in result["errors"][3] or "refus" in result["errors"][3], result["errors"]


def test_gap_a_tests_subclass_of_list_or_dict_is_no_list_to_its_base_types_own_code():
    """A test's instance of a subclass of list, dict, set or bytearray (whose value can change)
    is no instance of that type in the program's process, only its __class__ is (isinstance
    holds, `match` asks it for its items: the test before): the base's C code that reads or
    writes a list's storage (json.dumps, heapq, list.append(x, v)) refuses it with TypeError
    where plain Python reads or changes the test's object, so a right program fails and a wrong
    one that changes it so fails too (no copy of the value that the test would never see
    changed)."""
    program = """\
        import heapq, json
        def enc(row):
            return json.dumps(row)
        def smallest(row):
            heapq.heapify(row)
            return row[0]
        """
    row = "class Row(list):\n    pass\nr = Row([3, 1, 2])\n"
    tests = [row + "assert enc(r) == '[3, 1, 2]'",
             row + "assert smallest(r) == 1 and r == [3, 1, 2]"]
    assert plain(program, tests) == [True, False]
    result = run(program, tests)
    assert result["passed"] == [False, False], result["errors"]
    assert all(error.startswith("TypeError") for error in result["errors"]), result["errors"]


def test_a_declared_classes_instance_is_named_and_callable_as_its_class():
    """An instance of a class the prompt declares, the test's, is in the program an instance of
    the program's class of that name (isinstance), of a proxy class of its name, callable only
    where that class defines __call__: a resolver returns it, the test's own object."""
    context = "class Node:\n    def __init__(self, val):\n        self.val = val\n"
    program = context + textwrap.dedent("""\
        def resolve(value):
            return value() if callable(value) else value
        def describe(node):
            return type(node).__name__, node.__class__.__name__, isinstance(node, Node)
        """)
    tests = ["n = Node(1)\nassert resolve(n) is n and resolve(lambda: 2) == 2",
             "assert describe(Node(3)) == ('Node', 'Node', True)"]
    assert plain(program, tests) == [True, True]
    result = run(program, tests, context=context, names=["resolve", "describe"])
    assert result["passed"] == [True, True], result["errors"]


def test_a_tests_dataclass_instance_has_its_fields_in_the_program():
    """A test's instance of a dataclass the prompt declares is a dataclass instance in the program
    (its proxy class has the fields of the program's class of that name): dataclasses.fields,
    asdict, astuple and vars() read its fields (vars(): a copy of their values), replace() makes
    an instance of the program's class, the prompt's in the test; a field the program sets is the
    test's object's."""
    context = ("from dataclasses import dataclass\n@dataclass\nclass Employee:\n"
               "    name: str\n    salary: float\n")
    program = context + textwrap.dedent("""\
        import dataclasses
        def give_raise(e, pct):
            return dataclasses.replace(e, salary=round(e.salary * (1 + pct / 100), 2))
        def rows(e):
            return (dataclasses.astuple(e), dataclasses.asdict(e), vars(e),
                    [f.name for f in dataclasses.fields(e)], dataclasses.is_dataclass(e))
        def pay(e, salary):
            e.salary = salary
        """)
    tests = ["assert give_raise(Employee('a', 100.0), 10) == Employee('a', 110.0)",
             "assert rows(Employee('b', 5.0)) == (('b', 5.0), {'name': 'b', 'salary': 5.0}, "
             "{'name': 'b', 'salary': 5.0}, ['name', 'salary'], True)",
             "e = Employee('c', 1.0)\npay(e, 2.0)\nassert e == Employee('c', 2.0)"]
    assert plain(program, tests) == [True] * 3
    result = run(program, tests, context=context, names=["give_raise", "rows", "pay"])
    assert result["passed"] == [True] * 3, result["errors"]


def test_a_tests_own_dataclass_has_its_fields_in_the_program():
    """A dataclass the test defines (none the prompt declares) has its fields in the program too,
    as the test process tells them: dataclasses.fields, asdict, astuple and vars() read them."""
    program = """\
        import dataclasses
        def rows(p):
            return (dataclasses.astuple(p), dataclasses.asdict(p), sorted(vars(p)),
                    [f.name for f in dataclasses.fields(p)], type(p).__name__)
        """
    tests = ["from dataclasses import dataclass, field\n@dataclass\nclass P:\n    x: int\n"
             "    tags: list = field(default_factory=list)\n"
             "assert rows(P(1, ['a'])) == ((1, ['a']), {'x': 1, 'tags': ['a']}, ['tags', 'x'], "
             "['x', 'tags'], 'P')"]
    assert plain(program, tests) == [True]
    assert run(program, tests)["passed"] == [True]


def test_a_tests_simple_namespace_crosses_as_a_copy_written_back():
    """A test's types.SimpleNamespace crosses as a copy, numbered and written back as a dict is
    (sandbox_copies.py): vars() and its attributes are the test's, the attributes the program
    sets or changes (a list's append) are the test's object's after the call, a returned one is
    the test's own object, and one the program keeps stays the test's across calls."""
    program = """\
        KEPT = []
        def attrs(ns):
            return sorted(vars(ns)), ns.a + ns.b
        def update(ns):
            ns.total = sum(ns.items)
            ns.items.append(0)
            return ns
        def keep(ns):
            KEPT.append(ns)
        def later():
            KEPT[0].seen = True
        """
    tests = ["import types\nassert attrs(types.SimpleNamespace(b=1, a=2)) == (['a', 'b'], 3)",
             "import types\nns = types.SimpleNamespace(items=[1, 2])\n"
             "assert update(ns) is ns and ns.total == 3 and ns.items == [1, 2, 0]",
             "import types\nns = types.SimpleNamespace()\nkeep(ns)\nlater()\nassert ns.seen"]
    assert plain(program, tests) == [True] * 3
    result = run(program, tests)
    assert result["passed"] == [True] * 3, result["errors"]


def test_a_pathlib_path_crosses_as_a_value():
    """A pathlib path crosses as a value, either way, of its class (PurePosixPath, PureWindowsPath,
    PosixPath) and its text: the program reads a test's path's parts (suffix, `/`,
    os.path.basename), a path it returns is equal to the test's."""
    program = """\
        import os, pathlib
        def parts(p, name):
            return p.suffix, str(p / name), os.path.basename(p), type(p).__name__
        def make_path(*parts):
            return pathlib.Path(*parts)
        def windows():
            return pathlib.PureWindowsPath('c:/x') / 'y'
        """
    tests = ["import pathlib\nassert parts(pathlib.Path('a/b.txt'), 'c') == "
             "('.txt', 'a/b.txt/c', 'b.txt', 'PosixPath')",
             "import pathlib\nassert make_path('a', 'b') == pathlib.Path('a/b')\n"
             "assert type(make_path('a')) is pathlib.PosixPath\n"
             "assert str(make_path('a', 'b')) == 'a/b'",
             "import pathlib\nassert windows() == pathlib.PureWindowsPath('c:/x/y')"]
    assert plain(program, tests) == [True] * 3
    result = run(program, tests)
    assert result["passed"] == [True] * 3, result["errors"]


def test_functools_wraps_of_a_tests_function_copies_its_name():
    """A program's decorator applied to a test's function (functools.wraps) gives the wrapper the
    test function's __name__, __qualname__, __doc__ and __module__ (strings read from the test
    process: sandbox_proxies.py:readable), and its __wrapped__ is the test's function."""
    program = """\
        import functools
        def memoize(f):
            cache = {}
            @functools.wraps(f)
            def wrapper(*args):
                if args not in cache:
                    cache[args] = f(*args)
                return cache[args]
            return wrapper
        """
    tests = ["@memoize\ndef square(x):\n    '''Square.'''\n    return x * x\n"
             "assert (square.__name__, square.__qualname__, square.__doc__, square.__module__) =="
             " ('square', 'square', 'Square.', __name__)\n"
             "assert square.__wrapped__ is square.__wrapped__ and square.__wrapped__(3) == 9",
             "class K:\n    pass\nassert memoize(K).__name__ == 'K'"]
    assert plain(program, tests) == [True] * 2
    result = run(program, tests)
    assert result["passed"] == [True] * 2, result["errors"]


def test_vars_and_annotations_of_a_program_object_are_values():
    """A test reads a program instance's __dict__ (obj.__dict__, vars(obj)) and a program
    function's __annotations__ as dict values (copies; a builtin class in them crosses by name:
    `is int` holds), read-only: a change through one, which plain Python makes to the object,
    fails the test (a copy's change would leave the object as it was, where plain Python fails)."""
    program = """\
        class Student:
            def __init__(self, name, grade):
                self.name = name
                self.grade = grade
        def add(a: int, b: int = 2) -> int:
            return a + b
        """
    tests = ["s = Student('a', 3)\nassert s.__dict__ == {'name': 'a', 'grade': 3}",
             "assert vars(Student('b', 1)) == {'name': 'b', 'grade': 1}",
             "assert add.__annotations__ == {'a': int, 'b': int, 'return': int}\n"
             "assert add.__annotations__['return'] is int",
             "s = Student('a', 3)\nd = s.__dict__\nd['grade'] = 9\nassert s.grade == 3",
             "s = Student('a', 3)\nvars(s).clear()\nassert s.name == 'a'"]
    assert plain(program, tests) == [True] * 3 + [False] * 2
    result = run(program, tests)
    assert result["passed"] == [True] * 3 + [False] * 2, result["errors"]


def test_a_program_functions_code_answers_inspects_questions_as_in_plain_python():
    """A program function's __code__ is a program object whose co_ attributes are values (its
    process reads them off a real code object), so inspect.isgeneratorfunction,
    iscoroutinefunction and a test's co_argcount are plain Python's. A program object that only
    claims a generator's code (a __code__ attribute, no function) is no function in the test
    process: plain Python's inspect is fooled by it, the sandbox's is not."""
    program = """\
        def gen():
            yield 1
        def f(a, b=2):
            return a + b
        async def co():
            return 1
        class Fake:
            __code__, __name__, __defaults__, __kwdefaults__ = gen.__code__, "g", None, None
            __annotations__ = {}
            def __call__(self):
                return [1]
        fake = Fake()
        """
    tests = ["import inspect\nassert inspect.isgeneratorfunction(gen)\n"
             "assert not inspect.isgeneratorfunction(f)",
             "import inspect\nassert inspect.iscoroutinefunction(co)\n"
             "assert not inspect.iscoroutinefunction(f)",
             "assert f.__code__.co_argcount == 2 and f.__code__.co_varnames == ('a', 'b')\n"
             "assert f.__code__.co_name == 'f' and gen.__code__.co_flags & 0x20",
             "import inspect\nassert inspect.isgeneratorfunction(fake)"]
    assert plain(program, tests) == [True] * 4
    result = run(program, tests)
    assert result["passed"] == [True] * 3 + [False], result["errors"]


def test_a_program_functions_typing_annotations_cross_as_typing_objects():
    """Annotations of typing's generics (List[int], Optional[int], Dict[str, List[int]],
    Callable[[int], str], Tuple[int, ...], Literal, Any, a ForwardRef) and of builtins' (list[int],
    int | None) cross as values, made again by typing in the test process: equal to the test's
    own, typing.get_type_hints and inspect.signature read them as plain Python does. An
    annotation holding a program object (its class, an object whose __eq__ is always True)
    stays a program object: compared, it fails the test, where plain Python credits the liar."""
    program = """\
        from typing import Any, Callable, Dict, List, Literal, Optional, Tuple
        class Node:
            pass
        class Yes:
            def __eq__(self, other):
                return True
        def f(xs: List[int], k: Optional[int] = None) -> list[int]:
            return xs[:k]
        def g(a: Dict[str, List[int]], b: Tuple[int, ...], c: Callable[[int], str], d: Any,
              e: Literal[1, 'a'], h: int | None, n: Optional['Node']) -> None:
            pass
        def liar(x: Yes(), y: List[Node]):
            pass
        """
    tests = ["import typing\nhints = f.__annotations__\n"
             "assert hints['xs'] == typing.List[int] and hints['return'] == list[int]\n"
             "assert typing.get_type_hints(f)['k'] == typing.Optional[int]",
             "from typing import *\na = g.__annotations__\n"
             "assert a['a'] == Dict[str, List[int]] and a['b'] == Tuple[int, ...]\n"
             "assert a['c'] == Callable[[int], str] and a['d'] is Any and a['h'] == int | None\n"
             "assert a['e'] == Literal[1, 'a'] and a['n'] == Optional['Node']\n"
             "assert repr(a['c']) == 'typing.Callable[[int], str]' and a['return'] is None",
             "import inspect, typing\n"
             "assert inspect.signature(f).parameters['xs'].annotation == typing.List[int]",
             "import typing\nassert liar.__annotations__['x'] == typing.List[int]"]
    assert plain(program, tests) == [True] * 4
    result = run(program, tests)
    assert result["passed"] == [True] * 3 + [False], result["errors"]
    assert "program object" in result["errors"][3], result["errors"]


def test_a_program_enum_classs_protocol_is_the_enum_modules_own():
    """A program's Enum class answers `Color['RED']`, iteration, len(), reversed(), `in` and
    __members__ as the enum module's own code does on the members its class holds (in the
    program's process; sandbox_overrides.py:enumerated): its members, program objects, compare by
    identity. A class whose metaclass redefines that protocol, or whose members' == is their
    own, fails the test where plain Python would take the program's answer."""
    program = """\
        from enum import Enum, EnumType, auto
        class Color(Enum):
            RED = auto()
            GREEN = auto()
        def favourite():
            return Color.GREEN
        class Loose(EnumType):
            def __getitem__(cls, name):
                return cls.ONE
            def __contains__(cls, item):
                return True
        class Shade(Enum, metaclass=Loose):
            ONE = 1
            TWO = 2
        class Yes(Enum):
            ONE = 1
            TWO = 2
            def __eq__(self, other):
                return True
            __hash__ = Enum.__hash__
        def two():
            return Yes.TWO
        """
    tests = ["c = favourite()\nassert c is Color.GREEN and c != Color.RED and Color(2) is c\n"
             "assert Color['RED'] is Color.RED and c.name == 'GREEN' and c.value == 2",
             "assert list(Color) == [Color.RED, Color.GREEN] and len(Color) == 2\n"
             "assert list(reversed(Color)) == [Color.GREEN, Color.RED]\n"
             "assert Color.RED in Color and Shade.ONE not in Color\n"
             "assert [m.name for m in Color] == ['RED', 'GREEN']",
             "assert list(Color.__members__) == ['RED', 'GREEN']\n"
             "assert Color.__members__['GREEN'] is favourite()",
             "assert Shade['TWO'] is Shade.ONE",
             "assert Shade.TWO in Shade",
             "assert two() == Yes.ONE"]
    assert plain(program, tests) == [True] * 6
    result = run(program, tests)
    assert result["passed"] == [True] * 3 + [False] * 3, result["errors"]


def test_a_deep_argument_crosses_to_a_program_that_raised_its_limit():
    """A test's argument nested 3,000 deep reaches a program that raised its own recursion limit
    (the harness dumps and reads values under a limit of its own: sandbox_link.py:deep); a
    100,000-deep one cannot be sent (the test fails cleanly) and the next test runs."""
    program = """\
        import sys
        sys.setrecursionlimit(20000)
        def flatten(x):
            return [y for i in x for y in flatten(i)] if isinstance(x, list) else [x]
        """
    tests = ["x = 1\nfor _ in range(3000):\n    x = [x]\nassert flatten(x) == [1]",
             "x = 1\nfor _ in range(100000):\n    x = [x]\nflatten(x)",
             "assert flatten([[1], [2, [3]]]) == [1, 2, 3]"]
    assert plain(program, tests) == [True, False, True]  # (flatten's RecursionError there)
    result = run(program, tests)
    assert result["passed"] == [True, False, True], result["errors"]
    assert "cannot be sent" in result["errors"][1]


def test_a_tests_sys_argv_reaches_the_program():
    """A test's sys.argv (assigned, or mock.patch.object) is the program's sys.argv during its
    calls; restored, the program's is its own again."""
    program = """\
        import sys
        def main():
            return sum(int(a) for a in sys.argv[1:])
        def count():
            return len(sys.argv)
        """
    tests = ["import sys\nfrom unittest import mock\n"
             "with mock.patch.object(sys, 'argv', ['prog', '2', '3']):\n    assert main() == 5\n"
             "n = count()\nsys.argv = ['p', '7']\nassert main() == 7\nsys.argv = ['p']\n"
             "assert main() == 0"]
    assert plain(program, tests) == [True]
    result = run(program, tests)
    assert result["passed"] == [True], result["errors"]


def test_a_programs_log_records_reach_the_tests_handlers():
    """While a test's logger has a handler (assertLogs), the program's log records of its calls
    reach it as in one process: its message formatted by the program, its level and logger name
    (one of __name__ is __main__'s), an exception's text, under the test's levels (a debug record
    is not shown at WARNING, even where the program's own basicConfig chose DEBUG); while the
    test has none, none crosses (the program's own last-resort output is its stderr only)."""
    program = """\
        import logging
        logging.basicConfig(level=logging.DEBUG)
        log = logging.getLogger('calc.ops')
        def process(x):
            logging.debug('checking %s', x)
            if x < 0:
                logging.warning('negative input %s', x)
            return abs(x)
        def divide(a, b):
            log.info('divide %d by %d', a, b)
            try:
                return a / b
            except ZeroDivisionError:
                log.exception('no quotient')
        def named():
            logging.getLogger(__name__).error('from %s', __name__)
        """
    tests = ["import unittest\ntc = unittest.TestCase()\n"
             "with tc.assertLogs(level='WARNING') as cm:\n    assert process(-1) == 1\n"
             "assert cm.output == ['WARNING:root:negative input -1']\n"
             "assert cm.records[0].levelno == 30 and cm.records[0].getMessage() == "
             "'negative input -1'",
             "import unittest\ntc = unittest.TestCase()\n"
             "with tc.assertLogs('calc', level='INFO') as cm:\n    divide(6, 3)\n    divide(1, 0)\n"
             "assert cm.output[:2] == ['INFO:calc.ops:divide 6 by 3',\n"
             "                         'INFO:calc.ops:divide 1 by 0']\n"
             "assert cm.output[2].startswith('ERROR:calc.ops:no quotient\\nTraceback')\n"
             "assert 'ZeroDivisionError' in cm.output[2]",
             "import unittest\ntc = unittest.TestCase()\n"
             "with tc.assertLogs(level='DEBUG') as cm:\n    process(2)\n"
             "assert cm.output == ['DEBUG:root:checking 2']\n"
             "with tc.assertNoLogs(level='INFO'):\n    process(3)"]
    assert plain(program, tests) == [True] * 3
    own = ["import unittest\ntc = unittest.TestCase()\n"
           "with tc.assertLogs('__main__') as cm:\n    named()\n"
           "assert cm.output == ['ERROR:__main__:from __main__']",
           "import contextlib, io, logging\nbuffer = io.StringIO()\n"
           "with contextlib.redirect_stderr(buffer):\n    assert process(-4) == 4\n"
           "assert buffer.getvalue() == '' and logging.root.handlers == []\n"
           "assert 'calc.ops' not in logging.Logger.manager.loggerDict"]
    result = run(program, tests + own)
    assert result["passed"] == [True] * 5, result["errors"]


def test_a_test_object_of_an_argument_that_cannot_be_sent_stays_out_of_reach():
    """A test's argument that cannot be sent (a memoryview beside a test's function) fails the
    test before any of it goes out: the test objects its dump numbered on the way are forgotten,
    so a program that guesses handles (a proxy of its own, made through gc) reaches none of
    them in a later test (it read the test's secret before)."""
    program = """\
        import gc
        def f(*args):
            return 0
        def steal():
            for found in gc.get_objects():
                if type(found) is dict and found.get("__name__") == "sandbox_proxies":
                    proxies = found
            out = []
            for handle in range(6):
                try:
                    out.append(proxies["call"](proxies["Handled"](handle)))
                except BaseException as e:
                    out.append(type(e).__name__)
            return out
        """
    tests = ["secret = lambda: 'the expected answer'\nf([secret, memoryview(b'')])",
             "stolen = steal()\nassert 'the expected answer' not in stolen, stolen",
             "keep = lambda: 'sent'\nf(keep)\nassert 'sent' in steal()"]
    result = run(program, tests)
    assert result["passed"] == [False, True, True], result["errors"]
    assert "cannot be sent to the program: memoryview" in result["errors"][0]


def test_a_container_the_programs_value_holds_twice_is_one_object_in_the_test():
    """A fresh value that holds one list twice (`[[0] * m] * n`, a dict of one row twice) is one
    list in the test too: the wrong grid, whose rows are one list, fails a test that sets one
    cell, as in plain Python, beside the right grid of rows of their own."""
    right = """\
        def grid(n, m):
            return [[0] * m for _ in range(n)]
        def pair():
            row = [0, 0]
            return {"a": row, "b": list(row)}
        """
    wrong = right.replace("[[0] * m for _ in range(n)]", "[[0] * m] * n").replace(
        "list(row)", "row")
    tests = ["g = grid(2, 2)\ng[0][0] = 1\nassert g == [[1, 0], [0, 0]]",
             "g = grid(3, 1)\nfor i in range(3):\n    g[i][0] = i\nassert g == [[0], [1], [2]]",
             "d = pair()\nd['a'][0] = 5\nassert d['b'] == [0, 0]",
             "g = grid(2, 2)\nassert g[0] is not g[1]",
             "assert grid(2, 3) == [[0, 0, 0]] * 2"]
    for program, expected in ((right, [True] * 5), (wrong, [False, False, False, False, True])):
        assert plain(program, tests) == expected
        assert run(program, tests)["passed"] == expected


def test_gap_a_value_nested_too_deep_or_holding_itself_cannot_be_sent():
    """The harness walks a value the program returns under a recursion limit of its own
    (sandbox_link.py:deep): a list nested some 6,600 levels deep crosses, one of 10,000 (which
    plain Python returns and a loop walks) fails the test, and so does a list appended to itself
    (plain Python's `a[1] is a`): "the program's answer cannot be sent"."""
    program = """\
        def nest(n):
            v = []
            for _ in range(n):
                v = [v]
            return v
        def ring():
            a = [1]
            a.append(a)
            return a
        """
    walk = "v = nest({})\nd = 0\nwhile v:\n    v = v[0]\n    d += 1\nassert d == {}"
    tests = [walk.format(5000, 5000), walk.format(10000, 10000), "a = ring()\nassert a[1] is a"]
    assert plain(program, tests) == [True] * 3
    result = run(program, tests)
    assert result["passed"] == [True, False, False], result["errors"]
    assert all("the program's answer cannot be sent" in e for e in result["errors"][1:]), \
        result["errors"]


def test_gap_a_programs_own_tzinfo_crosses_as_a_fixed_offset_timezone():
    """A datetime or time whose tzinfo is an instance of the program's own tzinfo class crosses
    with a datetime.timezone of its offset then: its offset holds, but its tzname() is the fixed
    one's ('UTC-04:00', not 'EDT') and its rules for other dates are lost (replace(month=1) keeps
    the summer's offset); it equals that timezone, which the program's instance does not."""
    program = """\
        import datetime
        class Eastern(datetime.tzinfo):
            def utcoffset(self, dt):
                return datetime.timedelta(hours=-4 if 4 <= dt.month <= 10 else -5)
            def dst(self, dt):
                return datetime.timedelta(hours=1 if 4 <= dt.month <= 10 else 0)
            def tzname(self, dt):
                return "EDT" if 4 <= dt.month <= 10 else "EST"
        class Paris(datetime.tzinfo):
            def utcoffset(self, dt):
                return datetime.timedelta(hours=1)
            def dst(self, dt):
                return datetime.timedelta(0)
            def tzname(self, dt):
                return "CET"
        def summer():
            return datetime.datetime(2024, 7, 1, 12, tzinfo=Eastern())
        def opening():
            return datetime.time(9, 30, tzinfo=Paris())
        """
    tests = ["import datetime\n" + t for t in [
        "assert summer().utcoffset() == datetime.timedelta(hours=-4)",
        "assert summer().tzname() == 'EDT'",
        "assert summer().replace(month=1).utcoffset() == datetime.timedelta(hours=-5)",
        "assert summer().tzinfo == datetime.timezone(datetime.timedelta(hours=-4))",
        "assert opening().utcoffset() == datetime.timedelta(hours=1)",
        "assert opening().tzname() == 'CET'"]]
    assert plain(program, tests) == [True, True, True, False, True, True]
    result = run(program, tests)
    assert result["passed"] == [True, False, False, True, True, False], result["errors"]


def test_gap_asyncios_event_loop_cannot_start_in_either_process():
    """asyncio's event loop makes a socket pair for its self-pipe, which the seccomp filter
    refuses as every socket: asyncio.run fails with PermissionError in the program (its function
    that gathers coroutines) and in a test (of the program's coroutine or of the test's own),
    where plain Python runs all three."""
    program = """\
        import asyncio
        async def double(x):
            await asyncio.sleep(0)
            return 2 * x
        def total(xs):
            async def main():
                return sum(await asyncio.gather(*(double(x) for x in xs)))
            return asyncio.run(main())
        """
    tests = ["assert total([1, 2, 3]) == 12",
             "import asyncio\nassert asyncio.run(double(4)) == 8",
             "import asyncio\nasync def six():\n    return 6\nassert asyncio.run(six()) == 6"]
    assert plain(program, tests) == [True] * 3
    result = run(program, tests)
    assert result["passed"] == [False] * 3
    assert result["errors"] == ["PermissionError: [Errno 1] Operation not permitted"] * 3


def test_gap_a_programs_exit_gets_the_tests_exception_without_its_message():
    """A program's __exit__ gets a test's own exception as an instance of its class alone
    (test_a_tests_own_exception_reaches_exit_as_its_class_alone): its message is not there, so a
    manager that suppresses by the message ("try again") lets the exception through and one that
    records str(error) records '', where plain Python suppresses it and records the message; the
    test still catches its own exception, message and all."""
    program = """\
        SEEN = []
        class Retry:
            def __enter__(self):
                return self
            def __exit__(self, kind, error, traceback):
                SEEN.append(str(error))
                return kind is not None and "try again" in str(error)
        def seen():
            return SEEN[-1]
        """
    tests = ["with Retry():\n    raise ValueError('busy, try again')",
             "try:\n    with Retry():\n        raise ValueError('bad input')\n"
             "except ValueError:\n    pass\nassert seen() == 'bad input'",
             "try:\n    with Retry():\n        raise ValueError('bad input')\n"
             "except ValueError as e:\n    assert str(e) == 'bad input'"]
    assert plain(program, tests) == [True] * 3
    result = run(program, tests)
    assert result["passed"] == [False, False, True], result["errors"]
    assert result["errors"][0] == "ValueError: busy, try again"


def test_a_value_subclasss_own_floor_and_ceil_are_never_its_bases():
    """math.floor, math.ceil, math.trunc and round of a program's float or int subclass: where its
    class overrides __floor__ or __ceil__ (a buggy 0), the test fails, as plain Python's call of
    the override fails it; where it keeps its base's, they are its base value's, as there."""
    program = """\
        class Price(float):
            def __floor__(self):
                return 0
            def __ceil__(self):
                return 0
        class Count(int):
            def __floor__(self):
                return -1
        class Money(float):
            def cents(self):
                return round(self * 100)
        def half(x):
            return Price(x / 2)
        def count(x):
            return Count(x)
        def money(x):
            return Money(x)
        """
    tests = ["import math\nassert math.floor(half(5)) == 2",
             "import math\nassert math.ceil(half(5)) == 3",
             "import math\nassert math.floor(count(7)) == 7",
             "import math\nm = money(2.5)\nassert (math.floor(m), math.ceil(m)) == (2, 3)\n"
             "assert (math.trunc(m), round(m), round(m, 1)) == (2, 2, 2.5)"]
    assert plain(program, tests) == [False, False, False, True]
    result = run(program, tests)
    assert result["passed"] == [False, False, False, True], result["errors"]


def test_a_returned_dict_view_is_a_view_of_its_dict():
    """A keys(), values() or items() view the program returns is live, as in plain Python: of the
    test's own dict where the dict is the test's argument, of the kept container where it is the
    program's global (or an object's), so a program that should have returned a snapshot (list)
    fails; a view of a fresh dict of the program's is its items, as nothing else can change it."""
    program = """\
        INVENTORY = {}
        def add_item(name, qty):
            INVENTORY[name] = INVENTORY.get(name, 0) + qty
        def current_names():
            return INVENTORY.keys()
        def current_items():
            return INVENTORY.items()
        def snapshot():
            return list(INVENTORY)
        def names_of(d):
            return d.keys()
        def values_of(d):
            return d.values()
        def fresh(xs):
            return {x: [x] for x in xs}.items()
        """
    tests = ["add_item('a', 1); names = current_names(); add_item('b', 2)\n"
             "assert sorted(names) == ['a']",
             "items = current_items(); add_item('c', 1); assert len(items) == 2",
             "d = {'a': 1}; k = names_of(d); d['b'] = 2; assert list(k) == ['a']",
             "names = snapshot(); add_item('d', 1); assert 'd' not in names",
             "names = current_names(); add_item('e', 1)\n"
             "assert 'e' in names and names == set(snapshot()) and ('e', 1) in current_items()",
             "d = {'a': [1]}; v = values_of(d); d['b'] = [2]; assert list(v) == [[1], [2]]",
             "assert sorted(fresh([2, 1])) == [(1, [1]), (2, [2])] and len(fresh([1])) == 1"]
    assert plain(program, tests) == [False, False, False, True, True, True, True]
    result = run(program, tests)
    assert result["passed"] == [False, False, False, True, True, True, True], result["errors"]


def test_a_programs_datetime_subclass_keeps_its_own_methods():
    """A program's subclass of date or datetime with names of its own is a program object that
    keeps its base's value (a Valued), as a Stack(list) is: its own methods and text are asked of
    the program (a buggy isoformat, weekday or timestamp fails the test as in plain Python), an
    override of == or - fails the test, never its base's answer; where it keeps its base's,
    comparisons and arithmetic are Python's on its value, and `+ timedelta` is the program's
    (plain Python makes an instance of its class)."""
    program = """\
        import datetime
        class Day(datetime.date):
            def __str__(self):
                return "05/01/2020"
            def isoformat(self):
                return "2020-1-5"
            def weekday(self):
                return 0
            def __sub__(self, other):
                return datetime.timedelta(0)
        class Stamp(datetime.datetime):
            def timestamp(self):
                return 0.0
        class Week(datetime.date):
            def quarter(self):
                return (self.month - 1) // 3 + 1
        def sunday():
            return Day(2020, 1, 5)
        def at_noon(y, m, d):
            return Stamp(y, m, d, 12)
        def week(y, m, d):
            return Week(y, m, d)
        """
    tests = ["assert str(sunday()) == '2020-01-05'",
             "assert sunday().isoformat() == '2020-01-05'",
             "assert sunday().weekday() == 6",
             "import datetime\nassert (sunday() - datetime.date(2020, 1, 1)).days == 4",
             "import datetime\nnoon = datetime.datetime(2020, 1, 1, 12)\n"
             "assert at_noon(2020, 1, 1).timestamp() == noon.timestamp()",
             "import datetime\nw = week(2020, 5, 5)\n"
             "assert w == datetime.date(2020, 5, 5) and isinstance(w, datetime.date)\n"
             "first = datetime.date(2020, 5, 1)\n"
             "assert (w.quarter(), str(w), (w - first).days) == (2, '2020-05-05', 4)\n"
             "later = w + datetime.timedelta(days=60)\n"
             "assert later.quarter() == 3 and later > w and sorted([later, w])[0] == w"]
    assert plain(program, tests) == [False] * 5 + [True]
    result = run(program, tests)
    assert result["passed"] == [False] * 5 + [True], result["errors"]


def test_gap_a_returned_set_iterates_in_a_fresh_tables_order():
    """A set the program returns is rebuilt in the test process from its items, in a fresh table:
    where the program's set iterates otherwise (a big table left by its discarded items, an order
    its collisions made), list(), str() and next(iter()) of it can differ from plain Python's, so
    a test of that order may pass a wrong program (and fail a right one); its items, len(), ==
    and `in` are plain Python's."""
    program = """\
        def keep_one_and_64(n):
            s = set(range(n))
            for i in range(n):
                if i not in (1, 64):
                    s.discard(i)
            s.add(64)
            return s
        """
    tests = ["assert list(keep_one_and_64(40)) == [64, 1]",
             "assert keep_one_and_64(40) == {1, 64} and 64 in keep_one_and_64(40)"]
    assert plain(program, tests) == [False, True]
    result = run(program, tests)
    assert result["passed"] == [True, True], result["errors"]


def test_a_declared_members_forged_name_is_not_that_member():
    """A member of an Enum or Flag the context declares crosses as the test's member of its name
    only where that name leads back to it: a combination whose `_name_` the program set otherwise
    (`m._name_ = "R|X"`) is not the test's `Perm.R | Perm.X`, and a member so renamed makes its
    class the program's own (its members program objects), so a forged name passes no test that
    plain Python fails. An int Flag's value with bits beyond its members (`Bits.R | 8`, named
    "R|8") crosses as its int, as before combined members crossed by name."""
    context = ("import enum\nclass Perm(enum.Flag):\n    R = 1\n    W = 2\n    X = 4\n"
               "class Bits(enum.IntFlag):\n    R = 1\n    W = 2\n"
               "class Color(enum.Enum):\n    RED = 1\n    GREEN = 2\n")
    program = context + textwrap.dedent("""\
        def extra():
            return Bits.R | 8
        def both():
            return Bits.R | Bits.W
        def forged():
            m = Perm.R | Perm.W
            m._name_ = "R|X"
            return m
        def renamed():
            c = Color.RED
            c._name_ = "GREEN"
            return c
        """)
    tests = ["assert extra() == 9 and extra() == Bits.R | 8",
             "assert both() is Bits.R | Bits.W",
             "assert forged() == Perm.R | Perm.X",
             "assert renamed() == Color.GREEN"]
    assert plain(program, tests) == [True, True, False, False]
    result = run(program, tests, context=context, names=["extra", "both", "forged", "renamed"])
    assert result["passed"] == [True, True, False, False], result["errors"]


def test_a_declared_flags_combined_member_with_a_rewritten_value_is_not_that_member():
    """A Flag's combined member is cached by its class, so a program that rewrites its value
    (`m = P.R | P.W; m._value_ = 1`) keeps its name and class: it crosses as the test's `P.R|W`
    only where it holds its parts' bits, and a rewritten one passes no test plain Python fails."""
    context = "from enum import Flag\nclass P(Flag):\n    R = 1\n    W = 2\n"
    program = context + textwrap.dedent("""\
        def both():
            return P.R | P.W
        def rewritten():
            m = P.R | P.W
            m._value_ = 1
            return m
        """)
    tests = ["assert both().value == 3 and both() is P.R | P.W",
             "assert rewritten().value == 3"]
    assert plain(program, tests) == [True, False]
    assert run(program, tests, context=context, names=["both", "rewritten"])["passed"] == [
        True, False]


def test_a_test_member_of_a_class_the_program_redefines_reaches_it_as_the_tests():
    """A declared Enum's member the test passes back to the program is the program's member of
    that name where the program's class of that name has one; where looking it up raises (a
    program class whose `__members__` raises) it is the test's object, read in the test process,
    and the program's decoding goes on."""
    context = "import enum\nclass Color(enum.Enum):\n    RED = 1\n"
    program = context + textwrap.dedent("""\
        RED = Color.RED
        class Meta(type):
            @property
            def __members__(cls):
                raise RuntimeError("no members")
        class Color(metaclass=Meta):
            pass
        def name_of(c):
            return c.name
        """)
    tests = ["assert name_of(RED) == 'RED'", "assert name_of(RED) == 'BLUE'"]
    assert plain(program, tests) == [True, False]
    result = run(program, tests, context=context, names=["name_of", "RED"])
    assert result["passed"] == [True, False], result["errors"]


def test_gap_a_view_of_a_dict_past_the_room_of_kept_ones_is_its_snapshot():
    """Past the 16 dicts of its own that the program returned and still reaches (their room:
    sandbox_copies.py:rooms), a view of another dict it holds is that dict's snapshot, as a list
    beyond the room is a copy, in that test and the later ones: the right program passes where
    its view is read at once; a view read after the program changes its dict does not follow the
    change (plain Python's does), an aliasing gap docs/sandbox.md lists."""
    program = """\
        REG = {}
        def reg(k):
            REG.setdefault(k, {})[k] = 1
            return REG[k].keys()
        G = {1: 2}
        def gk():
            return G.keys()
        def put(k, v):
            G[k] = v
        """
    tests = ["for i in range(40):\n    assert list(reg(i)) == [i]",
             "assert list(gk()) == [1] and len(reg(3)) == 1",
             "k = gk(); put(3, 4); assert list(k) == [1, 3]"]
    assert plain(program, tests) == [True, True, True]
    result = run(program, tests)
    assert result["passed"] == [True, True, False], result["errors"]


def test_a_view_in_a_programs_exception_is_its_snapshot():
    """A dict view inside the arguments of an exception the program raises crosses as its items
    (the exception's payload is no value the test's changes reach), whatever else holds its dict
    (the raising frame, a global)."""
    program = """\
        def err():
            d = {1: 2}
            raise KeyError(d.keys())
        G = {1: 2}
        def err_global():
            raise LookupError(G.items())
        """
    tests = ["try:\n    err()\nexcept KeyError as e:\n    assert list(e.args[0]) == [1]",
             "try:\n    err_global()\nexcept LookupError as e:\n"
             "    assert list(e.args[0]) == [(1, 2)]",
             "try:\n    err()\nexcept KeyError as e:\n    assert list(e.args[0]) == [2]"]
    assert plain(program, tests) == [True, True, False]
    result = run(program, tests)
    assert result["passed"] == [True, True, False], result["errors"]


def test_gap_a_view_inside_a_declared_classs_instance_is_refused():
    """A view of a dict the program holds elsewhere, inside what the walk of a returned value does
    not enter (an instance of a class the context declares, rebuilt from its state), cannot be
    kept nor sent as a snapshot that would not follow the dict: the test fails, saying why."""
    context = "class Holder:\n    def __init__(self, k):\n        self.k = k\n"
    program = context + textwrap.dedent("""\
        G = {1: 2}
        def held():
            return Holder(G.keys())
        """)
    tests = ["assert list(held().k) == [1]"]
    assert plain(program, tests) == [True]
    result = run(program, tests, context=context, names=["held"])
    assert result["passed"] == [False]
    assert "a view of a dict held elsewhere that is not kept" in result["errors"][0]


def test_a_datetime_subclass_keeps_a_mixins_methods():
    """A program's subclass of date whose names of its own come from a mixin after date
    (`class Day(date, Mixin)`) is a program object that keeps its base's value, as one with
    methods in its own body is: the mixin's methods are the program's."""
    program = """\
        from datetime import date
        class Mixin:
            def label(self):
                return "L"
        class Day(date, Mixin):
            pass
        def day():
            return Day(2020, 1, 1)
        """
    tests = ["assert day().label() == 'L'",
             "from datetime import date\nassert day() == date(2020, 1, 1) and day().year == 2020",
             "assert day().label() == 'M'"]
    assert plain(program, tests) == [True, True, False]
    result = run(program, tests)
    assert result["passed"] == [True, True, False], result["errors"]


def test_bytes_of_a_value_subclass_is_its_own():
    """bytes(x) of a program's bytes or int subclass that defines __bytes__ is refused (plain
    Python calls that method first), where its base's value would answer otherwise; a subclass
    that keeps its base's bytes() is judged by its value."""
    program = """\
        class Blob(bytes):
            def __bytes__(self):
                return b"wrong"
        class Size(int):
            def __bytes__(self):
                return b"wrong"
        class Plain(bytes):
            pass
        def blob():
            return Blob(b"right")
        def size():
            return Size(3)
        def plain_blob():
            return Plain(b"ab")
        """
    tests = ["assert bytes(blob()) == b'right'", "assert bytes(size()) == bytes(3)",
             "assert bytes(plain_blob()) == b'ab'", "assert bytes(size() + 1) == bytes(4)"]
    assert plain(program, tests) == [False, False, True, True]
    result = run(program, tests)
    assert result["passed"] == [False, False, True, True], result["errors"]


def test_each_nan_is_its_own_float_with_its_sign():
    """A NaN crosses with its sign and payload, each NaN object a float of its own on the other
    side (two distinct NaNs never become one object; one NaN twice in a call stays one)."""
    program = """\
        def dedupe(xs):
            return list(dict.fromkeys(xs))
        def nan_pair():
            return [float("inf") - float("inf"), float("inf") * 0]
        def nan_twice():
            x = float("nan")
            return [x, x]
        def same(a, b):
            return a is b
        def neg_nan():
            return -float("nan")
        def ident(x):
            return x
        """
    tests = ["assert len(dedupe([float('nan'), float('nan')])) == 1",
             "xs = nan_pair(); assert xs.count(xs[0]) == 2",
             "assert same(float('nan'), float('nan'))",
             "import math; assert math.copysign(1.0, neg_nan()) == 1.0",
             "xs = nan_pair(); assert len(set(xs)) == 2",
             "xs = nan_twice(); assert xs[0] is xs[1]",
             "x = float('nan'); assert same(x, x) and len(dedupe([x, x])) == 1",
             "import math; assert math.copysign(1.0, neg_nan()) == -1.0",
             "import struct; x = struct.unpack('>d', bytes.fromhex('7ff8000000000123'))[0]\n"
             "assert struct.pack('>d', ident(x)).hex() == '7ff8000000000123'"]
    assert plain(program, tests) == [False] * 4 + [True] * 5
    result = run(program, tests)
    assert result["passed"] == [False] * 4 + [True] * 5, result["errors"]


def test_a_program_exceptions_override_of_a_builtin_method_runs():
    """A program exception class's own add_note or with_traceback (names BaseException has too)
    runs on the program's object, its __notes__ read there, as plain Python calls the program's
    method; a class that keeps BaseException's add_note keeps the test's."""
    program = """\
        class Invalid(ValueError):
            def add_note(self, note):
                pass
        class Loud(ValueError):
            def add_note(self, note):
                super().add_note(note.upper())
        class Plain(ValueError):
            pass
        class Traced(ValueError):
            def with_traceback(self, tb):
                self.seen = True
                return self
        def check(x):
            raise Invalid(x)
        def loud(x):
            raise Loud(x)
        def quiet(x):
            raise Plain(x)
        def traced():
            raise Traced()
        """
    tests = ["try:\n    check(1)\nexcept Invalid as e:\n    e.add_note('n')\n"
             "    assert e.__notes__ == ['n']",
             "try:\n    loud(1)\nexcept Loud as e:\n    e.add_note('n')\n"
             "    assert e.__notes__ == ['N']",
             "try:\n    quiet(1)\nexcept Plain as e:\n    e.add_note('n')\n"
             "    assert e.__notes__ == ['n']",
             "try:\n    traced()\nexcept Traced as e:\n"
             "    assert e.with_traceback(None) is e and e.seen"]
    assert plain(program, tests) == [False, True, True, True]
    result = run(program, tests)
    assert result["passed"] == [False, True, True, True], result["errors"]


def test_an_exception_class_whose_mro_is_not_its_bases_crosses_by_its_mro():
    """A program exception class whose metaclass's mro() leaves out a base (ValueError) is caught
    as its ancestry says (not by `except ValueError`), as in plain Python; a metaclass that keeps
    type's mro() keeps the class as it is."""
    program = """\
        class M(type):
            def mro(cls):
                return [cls, Exception, BaseException, object]
        class BadInput(ValueError, metaclass=M):
            pass
        class Kept(type):
            pass
        class Input(ValueError, metaclass=Kept):
            pass
        def parse(s):
            raise BadInput(s)
        def parse_kept(s):
            raise Input(s)
        """
    tests = ["try:\n    parse('x')\nexcept ValueError:\n    pass\nelse:\n    assert False",
             "try:\n    parse('x')\nexcept Exception as e:\n    assert isinstance(e, ValueError)",
             "try:\n    parse('x')\nexcept Exception as e:\n"
             "    assert not isinstance(e, ValueError)",
             "try:\n    parse_kept('x')\nexcept ValueError as e:\n"
             "    assert type(e).__name__ == 'Input' and isinstance(e, Input)"]
    assert plain(program, tests) == [False, False, True, True]
    result = run(program, tests)
    assert result["passed"] == [False, False, True, True], result["errors"]


def test_a_program_objects_finalizer_runs_when_the_test_drops_it():
    """A program object whose type has a finalizer (its class's __del__, a generator's finally) is
    released at once where the test's own code drops it (sandbox_remote.py:Remote's __del__):
    its finalizer runs then, as in one process, after the test's change to the list it holds is
    told, under the test's redirect_stdout, and its own change is back at the test's next line; so
    a finalizer that writes to the caller's list fails a test that expects it untouched. One
    dropped while a test's thread waits in a program call goes with the next request instead, and a
    proxy whose making failed writes nothing to the test's stderr as it goes."""
    program = """\
        class Conn:
            def __init__(self, log):
                self.log = log
            def __del__(self):
                self.log.append("closed")
        def open_conn(log):
            return Conn(log)
        def lines(log):
            try:
                yield 1
            finally:
                log.append("done")
        class Noisy:
            def __del__(self):
                print("bye")
        def call(f):
            return f()
        """
    tests = ["log = []; c = open_conn(log); log.append('x'); del c; assert log == ['x', 'closed']",
             "log = []; open_conn(log); assert log == [], log",
             "log = []; g = lines(log); next(g); del g; assert log == ['done'], log",
             "import contextlib, io\nout = io.StringIO()\nwith contextlib.redirect_stdout(out):\n"
             "    n = Noisy(); del n\nassert out.getvalue() == 'bye\\n'",
             "import threading, time\nc = open_conn([]); ev = threading.Event(); res = []\n"
             "t = threading.Thread(target=lambda: res.append(call(lambda: ev.wait(5))))\n"
             "t.start(); time.sleep(0.2); del c; ev.set(); t.join(); assert res == [True]",
             "import contextlib, io\nerr = io.StringIO()\nwith contextlib.redirect_stderr(err), "
             "contextlib.redirect_stdout(io.StringIO()):\n    n = Noisy()\n    try:\n"
             "        type(n)(1)\n    except Exception:\n        pass\n    del n\n"
             "assert err.getvalue() == '', err.getvalue()"]
    assert plain(program, tests) == [True, False, True, True, True, True]
    result = run(program, tests)
    assert result["passed"] == [True, False, True, True, True, True], result["errors"]


def test_an_object_holding_one_with_a_finalizer_is_released_where_the_test_drops_it():
    """A program object whose type has no finalizer but that holds one that does, or that a
    weakref.finalize watches, is released where the test drops it, as every program object is:
    the finalizer runs then, so a test that reads the caller's list before any further call sees
    it changed, as in plain Python (a wrong program whose held finalizer empties the list fails
    such a test); two objects of one class are of one type whatever they hold; a finalizer held
    in a closure or a partial's arguments runs so too."""
    program = """\
        import functools, weakref
        class Conn:
            def __init__(self, log):
                self.log = log
            def __del__(self):
                self.log.append("closed")
        class Wrap:
            def __init__(self, log):
                self.conn = Conn(log)
        def wrap(log):
            return Wrap(log)
        def unwrapped():
            return Wrap.__new__(Wrap)
        class Plain:
            pass
        def watched(log):
            found = Plain()
            weakref.finalize(found, log.append, "finalized")
            return found
        def noop():
            pass
        class Job:
            def __init__(self, log):
                conn = Conn(log)
                self.done = lambda: conn
                self.call = functools.partial(print, Conn(log))
        def job(log):
            return Job(log)
        """
    tests = ["log = []; w = wrap(log); del w; assert log == ['closed'], log",
             "log = []; w = wrap(log); del w; noop(); assert log == ['closed'], log",
             "log = []; w = watched(log); del w; assert log == ['finalized'], log",
             "assert type(wrap([])) is type(unwrapped())",
             "log = []; j = job(log); del j; assert log == ['closed'] * 2, log"]
    assert plain(program, tests) == [True] * 5
    result = run(program, tests)
    assert result["passed"] == [True] * 5, result["errors"]


def test_a_finalizer_attached_after_the_object_crossed_runs_where_the_test_drops_it():
    """An object that crossed with nothing to finalize and gains a finalizer later (a method of
    its own, or a call it is passed to, attaches one) is released at once where the test drops
    it, as in one process: the program's process tells it with the answer of the request that
    reached it (sandbox_proxies.py:urgent). So a program whose later finalizer empties the
    caller's list fails `xs == [1]`, as in plain Python, where its release at the next request
    passed it."""
    program = """\
        import weakref
        LOG = []
        def log():
            return LOG
        class Res:
            def __del__(self):
                LOG.append("freed")
        class Conn:
            def open(self):
                self.res = Res()
        def connect():
            return Conn()
        def attach(conn):
            conn.res = Res()
        def watch(conn, xs):
            weakref.finalize(conn, xs.clear)
        """
    tests = ["l = log(); l.clear(); c = connect(); c.open(); del c; assert l == ['freed'], l",
             "l = log(); l.clear(); c = connect(); attach(c); del c; assert l == ['freed'], l",
             "l = log(); l.clear(); c = connect(); c.open(); assert l == [], l",
             "xs = [1]; c = connect(); watch(c, xs); del c; assert xs == [1], xs"]
    assert plain(program, tests) == [True, True, True, False]
    result = run(program, tests)
    assert result["passed"] == [True, True, True, False], result["errors"]


FINALIZING = """\
    import functools, sys, types, weakref
    sys.path.insert(0, sys.argv[1])
    from sandbox_bases import IDENTITY, finalizing
    class Conn:
        def __del__(self):
            pass
    class Box:
        def __init__(self, held=None):
            self.held = held
        def get(self):
            return self.held
    def lines():
        yield 1
    watched, read = Box(), Box(Box(Conn()))
    weakref.finalize(watched, len, "")
    vars(read), vars(read.held)  # (their __dict__ made: read through all the same)
    cases = [Box(), Box().get, Box(3), Box(Box(Conn())), Box(Conn()).get, Conn(), lines(),
             types.SimpleNamespace(g=lines()), watched, map(Conn().__del__, []), read,
             map(Box(3).get, []), lambda: watched, lambda held=lines(): held,
             (lambda held: lambda: held)(Conn()), Box(functools.partial(len, Conn())),
             Box((lambda held: lambda: held)(3))]
    print([finalizing(case) >> IDENTITY + 1 for case in cases])
    """


def test_a_release_asks_a_round_trip_only_where_it_may_run_code():
    """sandbox_bases.py:finalizing gives a reference the bit past IDENTITY (released at once, a
    request of its own: sandbox_remote.py:URGENT) where the object or what it holds up to two
    steps on (an object's __dict__ or a tuple read through, made or not; a function's free
    variables: a closure, a partial's arguments) has a finalizer or a weak reference; a plain
    object, its bound method, one holding a number, or a function's globals and defaults (never
    read into: its globals are its module's, a walk that would cost each reference more than a
    round trip) goes with the next request (no round trip: a loop of method calls or of made
    objects costs what it did)."""
    found = subprocess.run([sys.executable, "-c", textwrap.dedent(FINALIZING),
                            str(ROOT / "nanomarl")], capture_output=True, text=True, timeout=60)
    assert found.stdout == "[0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0]\n", found


def test_gap_a_threads_change_after_the_call_is_unseen_till_the_next_one():
    """A program thread's change to a kept container after the call returned is compared at the
    test's next request: a test that makes no further call reads the container as it was, where
    plain Python's list has changed."""
    program = """\
        import threading, time
        def watch(xs):
            def later():
                time.sleep(0.05)
                xs.clear()
            threading.Thread(target=later, daemon=True).start()
            return len(xs)
        def noop():
            pass
        """
    tests = ["import time; xs = [1, 2]; assert watch(xs) == 2; time.sleep(0.3)\n"
             "assert xs == [1, 2]",
             "import time; xs = [1, 2]; watch(xs); time.sleep(0.3); noop(); assert xs == [1, 2]"]
    assert plain(program, tests) == [False] * 2
    result = run(program, tests)
    assert result["passed"] == [True, False], result["errors"]


def test_gap_the_programs_change_of_process_state_stays_in_its_process():
    """The program's change to its process's state (os.environ, a standard library module's
    attribute; likewise math.pi, sys.set_int_max_str_digits, os.chdir) stays in its process:
    the test process does not see it, where plain Python's test does."""
    program = """\
        import os, string
        def setup():
            os.environ["NANOMARL_GAP_PROBE"] = "1"
            string.nanomarl_gap_probe = True
        """
    tests = ["import os; setup(); assert 'NANOMARL_GAP_PROBE' not in os.environ",
             "import string; setup(); assert not hasattr(string, 'nanomarl_gap_probe')"]
    try:
        assert plain(program, tests) == [False, False]
    finally:
        os.environ.pop("NANOMARL_GAP_PROBE", None)
        vars(__import__("string")).pop("nanomarl_gap_probe", None)
    result = run(program, tests)
    assert result["passed"] == [True, True], result["errors"]
