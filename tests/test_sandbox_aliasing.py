"""sandbox.py against plain Python's semantics for a container of the program's own (a global, an
attribute, a closure cell, a cache) that a call returns, the test reads through a program object
or a generator yields: one the program still reaches is kept from then on, as an argument
container it keeps is (sandbox_lending.py:lent_back), so the test's changes reach the program and
the program's reach the test's object; a fresh one stays a plain copy. Each wrong program (whose
bug is aliasing) is checked beside the right one, with the verdicts of plain Python."""
import random
import sys
from pathlib import Path

from test_sandbox_semantics import plain, run

HISTORY = """\
    HIST = []
    def history():
        return HIST
    def record(x):
        HIST.append(x)
    """
COPIED = HISTORY.replace("return HIST", "return list(HIST)")


def test_a_list_the_program_returns_and_keeps_is_its_own_both_ways():
    """`h = history()` is the program's HIST: the test's append reaches the program (the wrong
    program fails `history() == []` as in plain Python), the program's later append reaches h,
    and two calls give one object; a program that returns a copy passes the first and fails the
    others."""
    tests = ["h = history()\nh.append('junk')\nassert history() == []",
             "h = history()\nrecord(1)\nassert h[-1] == 1",
             "assert history() is history()"]
    for program in (HISTORY, COPIED):
        expected = plain(program, tests)
        assert run(program, tests)["passed"] == expected, program
    assert plain(HISTORY, tests) == [False, True, True]
    assert plain(COPIED, tests) == [True, False, False]


def test_a_method_returning_self_items_and_an_attribute_read_are_the_objects_own():
    """A method that returns `self.items` and a read of `s.items` through the program object give
    the instance's own list: the test's append is the stack's push (plain Python's aliasing)."""
    program = """\
        class Stack:
            def __init__(self):
                self.items = []
            def view(self):
                return self.items
            def size(self):
                return len(self.items)
            def push(self, x):
                self.items.append(x)
        """
    tests = ["s = Stack()\ns.view().append(1)\nassert s.size() == 0",
             "s = Stack()\ns.items.append(1)\nassert s.size() == 1",
             "s = Stack()\nv = s.view()\ns.push(2)\nassert v == [2] and s.items is v"]
    expected = plain(program, tests)
    assert expected == [False, True, True]
    assert run(program, tests)["passed"] == expected


def test_a_memoised_result_the_test_changes_is_what_the_next_call_returns():
    """A memoising program returns its cache's dict, its whole cache, or an lru_cache's list:
    the test's change to what it returned is what the next call returns, as in plain Python, so
    the program whose results the test may change fails a later check."""
    program = """\
        import functools
        CACHE = {}
        def counts(word):
            if word not in CACHE:
                CACHE[word] = {c: word.count(c) for c in word}
            return CACHE[word]
        def cache():
            return CACHE
        @functools.lru_cache(maxsize=None)
        def divisors(n):
            return [d for d in range(1, n + 1) if n % d == 0]
        """
    tests = ["d = counts('aab')\nd['a'] = 99\nassert counts('aab') == {'a': 2, 'b': 1}",
             "counts('xy')\ncache()['xy']['x'] = 5\nassert counts('xy')['x'] == 5",
             "divisors(12).append(99)\nassert divisors(12) == [1, 2, 3, 4, 6, 12]",
             "c = cache()\ncounts('new')\nassert 'new' in c"]
    expected = plain(program, tests)
    assert expected == [False, True, False, True]
    assert run(program, tests)["passed"] == expected


def test_a_nested_container_returned_keeps_its_inner_lists_too():
    """A list of lists the program keeps, returned whole or as a fresh list of its rows: a change
    to a row reaches the program's grid, and the program's change to a cell reaches the test's
    row; a fresh outer list stays a copy (appending to it changes nothing there)."""
    program = """\
        GRID = [[0] * 3 for _ in range(3)]
        def grid():
            return GRID
        def rows():
            return list(GRID)
        def cell(r, c):
            return GRID[r][c]
        def put(r, c, v):
            GRID[r][c] = v
        """
    tests = ["grid()[1][1] = 5\nassert cell(1, 1) == 0",
             "rows()[0][0] = 7\nassert cell(0, 0) == 0",
             "g = grid()\nput(2, 2, 9)\nassert g[2][2] == 9",
             "r = rows()\nput(0, 1, 4)\nassert r[0][1] == 4",
             "r = rows()\nr.append([1])\nassert len(grid()) == 3"]
    expected = plain(program, tests)
    assert expected == [False, False, True, True, True]
    assert run(program, tests)["passed"] == expected


def test_a_fresh_container_stays_a_plain_copy_and_costs_no_kept_room():
    """A list the program makes anew at each call and does not keep crosses as a copy: the
    test's change does not reach the next call's result, and 200 of them (each in a list it
    returns) take none of the 16 of its own kept, so the program's HIST is still kept after."""
    program = HISTORY.rstrip(" ") + """\
    def fresh():
        return [1, 2]
    def nested():
        return [[1], [2]]
    """
    tests = ["a = fresh()\na.append(3)\nassert fresh() == [1, 2]",
             "n = nested()\nn[0].append(3)\nassert nested() == [[1], [2]]",
             "kept = [fresh() for _ in range(100)] + [nested() for _ in range(100)]\n"
             "h = history()\nh.append(1)\nassert history() == [1] and history() is h"]
    expected = plain(program, tests)
    assert expected == [True, True, True]
    assert run(program, tests)["passed"] == expected


def test_a_generator_yielding_its_own_list_gives_that_list_each_time():
    """A generator that yields its one buffer list, growing it between yields, gives the same
    list three times, as plain Python does (each item a copy would be [0], [0, 1], [0, 1, 2])."""
    program = """\
        def gen():
            buf = []
            for i in range(3):
                buf.append(i)
                yield buf
        """
    tests = ["assert list(gen()) == [[0, 1, 2]] * 3",
             "a, b, c = gen()\nassert a is b is c"]
    expected = plain(program, tests)
    assert expected == [True, True]
    assert run(program, tests)["passed"] == expected


def test_beyond_16_returned_containers_the_rest_are_copies():
    """The program's own containers returned have a room of their own (16 containers, 1,024
    items: sandbox_copies.py:rooms): of 100 lists the program keeps and returns, the first
    16 are its own (the test's change reaches it), the rest copies, as documented; a list of
    5,000 items is a copy (emptying it is not seen); no test crashes the run."""
    program = """\
        LISTS = [[i] for i in range(100)]
        BIG = list(range(5000))
        def get(i):
            return LISTS[i]
        def big():
            return BIG
        """
    tests = ["got = [get(i) for i in range(100)]\nfor g in got:\n    g.append(0)\n"
             "assert [len(get(i)) for i in range(100)] == [2] * 16 + [1] * 84",
             "b = big()\nb.clear()\nassert big() == list(range(5000))",
             "assert get(3) == [3, 0]"]
    assert plain(program, tests) == [False, False, True]
    result = run(program, tests, timeout=5.0)
    assert result["completed"]
    assert result["passed"] == [True, True, True], result["errors"]


def test_a_hostile_program_changing_what_it_returned_does_not_break_the_run():
    """A program that returns its list and then changes it from a thread, from a finalizer that
    the collector runs at any allocation, or returns a list of a million items or a cyclic one:
    the run completes, each test gets a verdict, and the test after them passes."""
    program = """\
        import gc, threading
        DATA = []
        def spin():
            for i in range(50000):
                DATA.append(i)
                if len(DATA) > 500:
                    DATA.clear()
        def threaded():
            threading.Thread(target=spin, daemon=True).start()
            return DATA
        class Evil:
            def __del__(self):
                DATA.append(len(DATA))
                DATA[:] = DATA[-3:]
        def finalized():
            gc.set_threshold(3)
            for _ in range(50):
                e = Evil()
                e.me = e
            return [DATA, [DATA], {'d': DATA}]
        HUGE = list(range(10 ** 6))
        def huge():
            gc.set_threshold(700, 10, 10)
            return HUGE
        CYCLE = []
        CYCLE.append(CYCLE)
        def cyclic():
            return CYCLE
        def add(a, b):
            return a + b
        """
    tests = ["for _ in range(5):\n    d = threaded()\n    d.append(-1)\nassert type(d) is list",
             "for _ in range(20):\n    f = finalized()\nassert f[0] is f[1][0] is f[2]['d']",
             "h = huge()\nh.append(1)\nassert len(huge()) == 10 ** 6",
             "cyclic()",
             "assert add(1, 2) == 3"]
    result = run(program, tests, timeout=10.0, memory_mb=512)
    assert result["completed"], result
    assert result["passed"][0] and result["passed"][1] and result["passed"][4], result["errors"]
    assert result["passed"][2] is True  # (beyond the bounds: a copy, as documented)
    assert result["passed"][3] is False  # (a cyclic value cannot be sent)


def test_a_kept_container_nested_deep_crosses_and_the_run_goes_on():
    """A kept dict the program grows into a tree 500 levels deep and a kept list the test nests
    700 deep cross as in plain Python; one the program nests 10,000 deep, or the test 20,000,
    is beyond the harness's limit (sandbox_link.py:deep): its news cannot be sent, so it is
    forgotten on both sides (a copy from then on), and neither process fails a later test."""
    program = """\
        ROOT = {"tree": None}
        def tree():
            return ROOT
        def insert(k):
            node = {"k": k, "l": None, "r": None}
            if ROOT["tree"] is None:
                ROOT["tree"] = node
                return
            cur = ROOT["tree"]
            while cur[side := "l" if k < cur["k"] else "r"] is not None:
                cur = cur[side]
            cur[side] = node
        def height():
            n, cur = 0, ROOT["tree"]
            while cur is not None:
                n, cur = n + 1, cur["r"]
            return n
        G, H = [], []
        def get():
            return G
        def hold():
            return H
        def depth():
            n, cur = 0, G
            while cur:
                n, cur = n + 1, cur[0]
            return n
        STACK = {"top": None, "n": 0}
        def stack():
            return STACK
        def push_many(n):
            for i in range(n):
                STACK["top"] = (i, STACK["top"])
            STACK["n"] += n
        def size():
            return STACK["n"]
        def add(a, b):
            return a + b
        """
    tests = ["g = get()\nx = g\nfor _ in range(700):\n    x.append([])\n    x = x[0]\n"
             "assert depth() == 700",
             "h = hold()\nx = h\nfor _ in range(20000):\n    x.append([])\n    x = x[0]\n"
             "assert add(2, 2) == 4",
             "s = stack()\npush_many(10000)\nassert size() == 10000",
             "assert add(1, 2) == 3",
             "t = tree()\nfor i in range(500):\n    insert(i)\nassert height() == 500",
             "assert add(3, 4) == 7",
             "assert height() == 500 and tree()['tree']['k'] == 0 and depth() == 700"]
    expected = plain(program, tests)
    assert expected == [True] * 7
    result = run(program, tests, timeout=10.0)
    # (the program's change nests its kept STACK past the harness's limit: it cannot be sent, the
    # harness refuses that test, never forgetting the change silently; the run goes on)
    assert result["passed"] == [True] * 2 + [False] + [True] * 4, result["errors"]
    assert "refused" in result["errors"][2]


def test_a_change_that_cannot_be_sent_forgets_that_container_alone():
    """The test puts an object that cannot be sent (no value, no test object) into the program's
    kept dict: its news are not sent, the dict is forgotten on both sides (as beyond the bounds:
    the program's keeps what it had, the test's changes to that object stay the test's) and no
    later test fails for it; read again, the program's dict is kept anew. Passed to the program
    then, it is an argument that cannot be sent: that test fails (as documented), no other."""
    program = """\
        REG = {}
        def registry():
            return REG
        def has(k):
            return k in REG
        def size(d):
            return len(d)
        def add(a, b):
            return a + b
        """
    tests = ["r = registry()\nr['x'] = memoryview(b'')\nr['y'] = 1\nassert 'x' in r",
             "assert add(1, 2) == 3",
             "r = registry()\nr['z'] = 2\nassert has('z') and registry() is r",
             "assert has('z') and add(2, 2) == 4",
             "assert has('y')",
             "r = registry()\nr['w'] = memoryview(b'')\nassert size(r) == len(r)",
             "assert add(5, 5) == 10"]
    assert plain(program, tests) == [True] * 7
    result = run(program, tests)
    assert result["passed"] == [True] * 4 + [False, False, True], result["errors"]
    assert "cannot be sent" in result["errors"][5]  # (y: the test's alone; w: an argument)


GRAPH = """\
    class Graph:
        def __init__(self, n):
            self.adj = {i: [] for i in range(n)}
    G = Graph(100)
    def graph():
        return G.adj
    class View:
        def __init__(self, data):
            self.data = data
        def total(self):
            return sum(self.data)
    HOG = [[i] * 60 for i in range(64)]
    def hog():
        return HOG
    def push(box):
        box.items.append(99)
    """


def test_the_programs_returned_containers_have_a_room_of_their_own():
    """The program's own containers returned (a dict of 100 lists, 64 lists of 60) fill a room of
    their own (16 containers, 1,024 items: sandbox_copies.py:rooms), never the one of the
    argument containers the program keeps and of a test object's it reads: after them, a View
    that keeps the test's list still sees the test's append, and the program's append to a test
    object's list still reaches it, as in plain Python (a right program passes, a wrong one
    fails)."""
    view = ("data = [1, 2]\nv = View(data)\ndata.append(3)\nassert v.total() == 6")
    box = ("class Box:\n    def __init__(self):\n        self.items = [1]\n"
           "b = Box()\npush(b)\nassert b.items == [1, 99]")
    tests = [view, "assert len(graph()) == 100", "h = hog()\nassert len(h) == 64", view, box,
             view.replace("== 6", "== 3")]
    expected = plain(GRAPH, tests)
    assert expected == [True] * 5 + [False]
    assert run(GRAPH, tests)["passed"] == expected


def test_a_view_of_the_programs_dict_gives_its_own_lists():
    """`.values()` and `.items()` of the program's dict of lists give its own lists, as in plain
    Python: the test's insert reaches the program (a wrong program that hands out its buckets
    fails), the program's append reaches the test's; a view of a fresh dict gives copies."""
    program = """\
        TABLE = {1: ['x'], 2: ['y']}
        def buckets():
            return TABLE.values()
        def pairs():
            return TABLE.items()
        def lookup(k):
            return TABLE[k][0]
        def put(k, v):
            TABLE[k].append(v)
        def fresh():
            return {1: ['x']}.values()
        """
    tests = ["for b in buckets():\n    b.insert(0, 'junk')\nassert lookup(1) == 'x'",
             "for k, b in pairs():\n    b.insert(0, 'more')\nassert lookup(2) == 'more'",
             "v = list(buckets())\nput(1, 'z')\nassert v[0][-1] == 'z'",
             "for b in fresh():\n    b.append(1)\nassert list(fresh()) == [['x']]"]
    expected = plain(program, tests)
    assert expected == [False, True, True, True]
    assert run(program, tests)["passed"] == expected


def test_a_kept_dict_that_gains_keys_sends_them_alone():
    """A memo dict and a Counter the test read once, then 3,000 calls that each add a key: each
    call sends its new pair alone (sandbox_copies.py:news) until the dict is beyond the room of
    the program's own (a copy from then on), so the loop ends within a 3 s timeout as in plain
    Python; the keys either side adds reach the other in their order, and a reordered or changed
    one crosses whole."""
    program = """\
        from collections import Counter, OrderedDict
        MEMO, COUNTS, TABLE = {}, Counter(), OrderedDict(a=1)
        def cache():
            return MEMO
        def sq(n):
            if n not in MEMO:
                MEMO[n] = n * n
            return MEMO[n]
        def counts():
            return COUNTS
        def see(w):
            COUNTS[w] += 1
            return COUNTS[w]
        def table():
            return TABLE
        def put(k, v):
            TABLE[k] = v
        def last():
            TABLE.move_to_end('a')
            return list(TABLE)
        """
    tests = ["c = cache()\nfor i in range(3000):\n    assert sq(i) == i * i",
             "c = counts()\nfor i in range(3000):\n    assert see(str(i)) == 1",
             "d = table()\nd['b'] = 2\nput('c', 3)\nd['d'] = 4\n"
             "assert list(table()) == list(d) == ['a', 'b', 'c', 'd'] and table() is d",
             "d = table()\nassert last() == ['b', 'c', 'd', 'a'] == list(d)\nd['b'] = 0\n"
             "put('e', 5)\nassert d == {'b': 0, 'c': 3, 'd': 4, 'a': 1, 'e': 5} == table()"]
    expected = plain(program, tests)
    assert expected == [True] * 4
    assert run(program, tests, timeout=3.0)["passed"] == expected


def test_a_program_change_that_cannot_be_sent_fails_the_test_whatever_it_catches():
    """The program changes a test's container and then makes it unsendable (a cyclic item): in
    plain Python the test sees the change; the harness cannot send it, so it never forgets the
    container silently (the test's old contents would pass): the test fails as a refusal, whether
    the container is kept, an argument of a call that returned or raised, or the program breaks
    the harness's walk of the kept ones (a Random's getstate patched)."""
    program = """\
        import random
        KEEP = []
        def f(a, r=None):
            KEEP.append(a)
            KEEP.append(r)
            return sum(a)
        def g():
            KEEP[0].sort()
            b = []
            b.append(b)
            KEEP[0].append(b)
        def h():
            KEEP[-2].sort()
            random.Random.getstate = lambda self: 1 / 0
        def hide(items):
            items.sort()
            junk = []
            junk.append(junk)
            items.append(junk)
        def validate(items):
            hide(items)
            raise ValueError("negative")
        def add(x, y):
            return x + y
        """
    tests = ["a = [3, 1, 2]\nf(a)\ng()\nassert a == [3, 1, 2]",
             "assert add(1, 2) == 3",
             "xs = [3, -1, 2]\ntry:\n    validate(xs)\nexcept ValueError:\n    pass\n"
             "assert xs == [3, -1, 2]",
             "a = [3, 1, 2]\ntry:\n    hide(a)\nexcept Exception:\n    pass\nassert a == [3, 1, 2]",
             "import random\na = [3, 1, 2]\nf(a, random.Random(1))\nh()\nassert a == [3, 1, 2]",
             "assert add(2, 2) == 4"]
    getstate = random.Random.getstate  # (plain Python's run patches this process's)
    try:
        assert plain(program, tests) == [False, True, False, False, False, True]
    finally:
        random.Random.getstate = getstate
    result = run(program, tests)
    assert result["passed"] == [False, True, False, False, False, True], result["errors"]
    assert all("Abort" in result["errors"][i] or "cannot" in result["errors"][i]
               for i in (0, 2, 3, 4)), result["errors"]


def test_a_kept_list_nested_thousands_deep_is_weighed_in_one_walk(monkeypatch):
    """The program's own list nested 3,000 deep that it still reaches (sandbox_lending.py:
    lent_back): a level k deep weighs 2k + 1 items, so the 16 kept are the levels 511 down to 496
    from the bottom, the outermost that fit its room of its own (1,024 items); the outer levels,
    which do not fit, are weighed in one walk of the value (sandbox_lending.py:least), not each by
    a walk of all it holds: the snapshots taken grow with the depth, not with its square."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "nanomarl"))
    import sandbox_copies
    import sandbox_lending
    taken, original = [], sandbox_copies.snapshot

    def snapshot(value):
        taken.append(1)
        return original(value)

    for module in (sandbox_copies, sandbox_lending):
        monkeypatch.setattr(module, "snapshot", snapshot)
    levels = [[]]
    for _ in range(3000):
        levels.append([levels[-1]])
    link = dict(kept={}, kept_ids={}, kept_tags={}, own=set(), lending=[], refer=None)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)  # (dump recurses: sandbox_link.py:deep's limit)
    try:
        sandbox_lending.lent_back([levels[-1]], link, {}, (), [0])
    finally:
        sys.setrecursionlimit(limit)
    depth = {id(level): k for k, level in enumerate(levels)}
    depths = sorted(depth[id(entry["object"])] for entry in link["kept"].values())
    assert depths == list(range(496, 512))
    assert len(taken) < 4 * 3000
