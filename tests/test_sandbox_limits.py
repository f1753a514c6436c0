"""What a program's answer may cost the test process, and the harness's own words and reading of
the context: a set or dict whose keys share one hash costs quadratic time inside one C call, which
no alarm interrupts (the CPU watchdog would end the whole run of tests), so the test process
refuses it before building it (sandbox_layers.py:crowded), failing that test whatever it catches,
while big ordinary sets and dicts cross as in plain Python; an over-long answer's refusal names its
size and the limit in bytes; a context's namedtuple declared by keywords or through an alias is
declared (sandbox_sources.py)."""
import textwrap

from nanomarl.sandbox import ANSWER_BYTES
from nanomarl.sandbox_sources import top_level
from test_sandbox_semantics import plain, run

# A program that forges what its process sends (the harness in its own process is its to patch):
# JSON text the harness writes as it is (sandbox_values.py:Dumped), so that keys made to share a
# hash cost it nothing, and its write-back of a changed set as a plain list.
FORGER = """\
    import gc
    HARNESS = {d["__name__"]: d for d in gc.get_objects()
               if type(d) is dict and str(d.get("__name__")).startswith("sandbox_")}
    RAW = HARNESS["sandbox_values"]["Dumped"]
    M = 2 ** 61 - 1  # the ints k * M share one hash
    def keys(n, key="%d"):
        return ",".join(key % (k * M) for k in range(n))
    def forged(tag, n):
        pairs = '{"d":[%s]}' % keys(n, "[%d,0]")
        text = {"s": '{"s":[%s]}' % keys(n), "f": '{"f":[%s]}' % keys(n), "d": pairs,
                "t": '{"s":[%s]}' % keys(n, '{"t":[%d]}'), "K": '{"K":[%s]}' % keys(n),
                "I": '{"I":[%s]}' % keys(n, "[%d,0]"), "O": '{"O":%s}' % pairs,
                "C": '{"C":%s}' % pairs, "D": '{"D":[null,%s]}' % pairs}[tag]
        return RAW(text, None)
    def add_to(s):
        contents = HARNESS["sandbox_child"]["contents"]
        HARNESS["sandbox_child"]["contents"] = lambda c: (
            RAW("[%s]" % keys(15000), None) if type(c) is set else contents(c))
        s.add(1)
    """
TAGS = ["s", "f", "d", "t", "K", "I", "O", "C", "D"]


def test_a_set_or_dict_whose_keys_share_a_hash_is_refused_and_ordinary_big_ones_cross():
    """Sets, frozensets, dicts, tuple keys, dict views, OrderedDicts, Counters and defaultdicts of
    15,000 keys of one hash, forged by a program: each fails its test at once as the harness's
    refusal (not at the alarm, nor by the CPU watchdog ending the run), also where the test
    catches everything, and the run goes on; 20 keys of one hash cross; a changed set written
    back as a list of them changes nothing. A right program's 100,000-key dict and set, a set
    with a few keys of one hash ({-1, -2}, 40 multiples of 2**61 - 1), a 50,000-key dict of
    tuple keys and sets whose keys share hashes as numbers do (2,000 powers of 2, of 61 hashes;
    the 1,024 tuples of -1 and -2, of one) cross as in plain Python."""
    tests = [f"assert len(forged({tag!r}, 15000)) == 15000" for tag in TAGS] + [
        "try:\n    forged('O', 15000)\nexcept BaseException:\n    pass",
        "assert len(forged('s', 20)) == 20 and len(forged('O', 20)) == 20",
        "s = set()\nadd_to(s)\nassert len(s) < 2"]
    result = run(FORGER, tests, timeout=2.0, names=["forged", "add_to"])
    assert result["completed"], result
    assert result["passed"] == [False] * 10 + [True, True], result["errors"]
    for error in result["errors"][:10]:
        assert "the harness refused" in error and "share a hash" in error, error
    assert result["seconds"] < 6.0, result["seconds"]

    right = """\
        M = 2 ** 61 - 1
        def squares(n):
            return {k: k * k for k in range(n)}
        def spread(n):
            return set(range(0, 3 * n, 3)) | {-1, -2} | {k * M for k in range(1, 41)}
        def pairs(n):
            return {(k, str(k)): k for k in range(n)}
        def powers(n):
            return {2 ** k for k in range(n)}
        def signs(n):
            found = {()}
            for _ in range(n):
                found = {s + (x,) for s in found for x in (-1, -2)}
            return found
        """
    tests = ["r = squares(100000)\nassert len(r) == 100000 and r[99999] == 99999 ** 2",
             "r = spread(100000)\nassert len(r) == 100042 and 40 * (2 ** 61 - 1) in r and -1 in r",
             "from collections import OrderedDict\nr = pairs(50000)\n"
             "assert OrderedDict(r)[(7, '7')] == 7 and len(r) == 50000",
             "r = powers(2000)\nassert len(r) == 2000 and 2 ** 1999 in r",
             "r = signs(10)\nassert len(r) == 1024 and (-1,) * 10 in r"]
    assert plain(right, tests) == [True] * 5
    result = run(right, tests, timeout=5.0)
    assert result["passed"] == [True] * 5, result["errors"]


def test_an_over_long_answer_is_refused_with_its_size_and_the_limit_in_bytes():
    """An answer over the limit is the harness's refusal, which says how long it was and what the
    limit is, both in bytes."""
    result = run(f"def big():\n    return 'x' * {ANSWER_BYTES}\n", ["assert len(big()) > 0"])
    assert result["passed"] == [False], result
    error = result["errors"][0]
    size = int(error.partition("an answer of ")[2].split()[0])
    assert size > ANSWER_BYTES and "the harness refused" in error, error
    assert f"an answer of {size} bytes, over the limit of {ANSWER_BYTES} bytes" in error, error


def test_a_namedtuple_the_context_makes_by_keywords_or_an_alias_is_declared():
    """`namedtuple(typename="Point", field_names=...)`, `collections.namedtuple(...)`, one through
    an alias (`from collections import namedtuple as nt`) and typing's functional NamedTuple
    declare their class, as `Point = namedtuple("Point", ...)` does; a name other than the class's
    declares none. A program's instance of the keyword form crosses as the context's class."""
    context = textwrap.dedent("""\
        import collections, typing
        from collections import namedtuple, namedtuple as nt
        from typing import NamedTuple as NT
        Point = namedtuple(typename="Point", field_names=["x", "y"])
        Cell = collections.namedtuple("Cell", field_names="row col")
        Pair = nt("Pair", "a b")
        Span = NT("Span", [("start", int), ("end", int)])
        Edge = typing.NamedTuple("Edge", [("u", int), ("v", int)])
        Other = namedtuple(typename="Wrong", field_names="z")
        """)
    assert top_level(context)[2] == ["Point", "Cell", "Pair", "Span", "Edge"]
    body = "def midpoint(a, b):\n    return Point((a.x + b.x) / 2, (a.y + b.y) / 2)\n"
    tests = ["r = midpoint(Point(0, 0), Point(2, 4))\n"
             "assert r == Point(1.0, 2.0) and type(r) is Point",
             "assert type(midpoint(Point(0, 0), Point(0, 0))) is not tuple"]
    assert plain(context + body, tests) == [True, True]
    result = run(context + body, tests, context=context, names=["midpoint"])
    assert result["passed"] == [True, True], result["errors"]
