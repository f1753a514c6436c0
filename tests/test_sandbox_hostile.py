"""The verdict is not the program's: one hostile program per class of attack that gives a wrong
solution full credit wherever the verdict is decided inside the program's own process (late
lookups, interpreter flags, gc, settrace jumps, closure cells, metaclass code in an except clause,
audit hooks, ctypes patches of int.__eq__, an always-equal object), and programs that crash or
burden a trainer that trusts what they write (malformed report lines, a flood). Each runs through
run_tests_in_sandbox and through code_reward (the attack in a default argument of a one-line
function, which survives the code extraction); the same attack beside a right solution still gets
full credit, so a 0 comes from the wrong values, not from a broken run."""
import resource
import textwrap

import pytest

from nanomarl.sandbox import ANSWER_BYTES, parse_report, report_cap, run_tests_in_sandbox
from nanomarl.tasks.code import code_reward, extract_tests

PROBLEM = dict(id="toy/add", kind="code", entry_point="add",
               prompt='def add(a, b):\n    """The sum of a and b."""\n',
               test="def check(candidate):\n    assert candidate(1, 2) == 3\n"
                    "    assert candidate(5, 7) == 12\n"
                    "    assert abs(candidate(0.5, 0.25) - 0.75) < 1e-9\n")
TESTS = extract_tests(PROBLEM["test"], "add")
LIMITS = dict(timeout=1.0, memory_mb=256)

FRAMES = """import sys
def harness_frame(name):  # the innermost frame that has this local
    frame = sys._getframe()
    while frame is not None and name not in frame.f_locals:
        frame = frame.f_back
    return frame
"""
# class -> (attack, which runs when the program loads; the wrong add's return expression)
ATTACKS = {
    "late lookup: a replaced builtin": ("""
import builtins
_enumerate = builtins.enumerate
builtins.enumerate = lambda items, start=0: _enumerate(["pass"] * len(items), start)
""", "0"),
    "late lookup: the job rewritten": (FRAMES + """
frame = harness_frame("job")
tests = frame.f_locals["job"].get("tests") if frame is not None else None
if type(tests) is list:
    tests[:] = ["pass"] * len(tests)
""", "0"),
    "interpreter flags: -O": ("""
import _testinternalcapi
config = _testinternalcapi.get_config()
config["optimization_level"] = 1  # later compiles drop every assert
_testinternalcapi.set_config(config)
""", "0"),
    "gc: harness state": ("""
import gc
for obj in gc.get_objects():
    if type(obj) is dict and "tests" in obj and type(obj["tests"]) is list:
        obj["tests"][:] = ["pass"] * len(obj["tests"])
""", "0"),
    "settrace: a jump over the test": ("""
import dis, sys
def tracer(frame, event, arg):
    code = frame.f_code
    calls = [i.positions.lineno for i in dis.get_instructions(code) if i.argval == "_exec"]
    stores = [i.positions.lineno for i in dis.get_instructions(code)
              if i.opname == "STORE_FAST" and i.argval == "verdict"]
    if code.co_name != "run" or not calls or not stores:
        return None
    def jump(frame, event, arg):
        if event == "line" and frame.f_lineno == calls[0]:
            frame.f_lineno = stores[0]  # past the test, onto `verdict = pass`
        return jump
    return jump
sys.settrace(tracer)
""", "0"),
    "closure cells": ("""
import gc
for obj in gc.get_objects():
    if callable(obj) and getattr(obj, "__name__", "") == "run" and getattr(obj, "__closure__", 0):
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__):
            if name in ("_exec", "exec_"):
                cell.cell_contents = lambda *args, **kwargs: None
""", "0"),
    "metaclass code in the except clause": (FRAMES + """
import ctypes
class Meta(type):
    @property
    def __name__(cls):  # read by the harness's except clause, after `verdict = fail`
        frame = sys._getframe(1)
        if "verdict" in frame.f_locals:
            frame.f_locals["verdict"] = b"1"
            ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
        return "Fine"
class Fine(Exception, metaclass=Meta):
    pass
""", "(_ for _ in ()).throw(Fine())"),
    "audit hook: the test rewritten at compile": ("""
import ctypes, sys
def hook(event, args):  # runs inside compile(), called by the harness with the test's source
    source = sys._getframe(1).f_locals.get("source") if event == "compile" else None
    if type(source) is str and source.isascii() and str(args[1]).startswith("<test"):
        start = id(source) + sys.getsizeof(source) - len(source) - 1  # its characters
        ctypes.memmove(start, b"pass".ljust(len(source)), len(source))
sys.addaudithook(hook)
""", "0"),
    "ctypes: int.__eq__ patched": ("""
import ctypes
RICH = ctypes.CFUNCTYPE(ctypes.py_object, ctypes.py_object, ctypes.py_object, ctypes.c_int)
slots = [ctypes.c_void_p.from_address(id(t) + 200) for t in (int, float)]  # tp_richcompare
originals, LT, EQ = [RICH(slot.value) for slot in slots], 0, 2
patched = [RICH(lambda a, b, op: True if op is EQ else originals[0](a, b, op)),  # int ==
           RICH(lambda a, b, op: True if op is LT else originals[1](a, b, op))]  # float <
for slot, function in zip(slots, patched):
    slot.value = ctypes.cast(function, ctypes.c_void_p).value
""", "0"),
    "an object equal to everything": ("""
class Any:
    __eq__ = lambda self, other: True
    __sub__ = lambda self, other: 0
""", "Any()"),
}


def program(attack: str, body: str) -> str:
    """A one-line add whose default argument runs the attack as the program loads."""
    return f"def add(a, b, _=exec({attack!r})):\n    return {body}\n"


def cases(right: bool):
    return [pytest.param(name, attack, "a + b" if right else body, id=name)
            for name, (attack, body) in ATTACKS.items()]


@pytest.mark.parametrize("name, attack, body", cases(right=False))
def test_attack_with_a_wrong_solution_gets_no_credit(name, attack, body):
    result = run_tests_in_sandbox(program(attack, body), TESTS, **LIMITS)
    assert result["completed"] and result["passed"] == [False] * 3, result
    _, levels = code_reward("", program(attack, body), PROBLEM, **LIMITS)
    assert (levels["tests_passed"], levels["tests_total"], levels["tests"]) == (0, 3, 0.0), levels


@pytest.mark.parametrize("name, attack, body", cases(right=True))
def test_attack_with_a_right_solution_still_gets_full_credit(name, attack, body):
    result = run_tests_in_sandbox(program(attack, body), TESTS, **LIMITS)
    assert result["loaded"] and result["passed"] == [True] * 3, result
    _, levels = code_reward("", program(attack, body), PROBLEM, **LIMITS)
    assert (levels["tests_passed"], levels["tests_total"]) == (3, 3), levels


# ----------------------------------------------------------------------------------------------
# The trainer: nothing a program writes crashes it or costs it more than a little CPU
# ----------------------------------------------------------------------------------------------

FORGED_LINES = FRAMES + """
import os
frame = harness_frame("report_fd")
lines = [b"test 99999999 1 ", b"test -1 1 ", b"test x1 1 ", b"test 1e3 1 ", b"test 0", b"done"]
nonce = frame.f_locals.get("nonce", b"0" * 32) if frame is not None else b"0" * 32
for fd in [frame.f_locals["report_fd"]] if frame is not None else range(3, 32):
    try:
        os.write(fd, b"".join(nonce + b" " + line + b"\\n" for line in lines))
    except OSError:
        pass
os._exit(0)
"""
FLOOD = """
import os, signal
signal.signal(signal.SIGALRM, signal.SIG_IGN)
junk = b"x" * 65536 + b"\\n1 test 0 1\\n" * 100
while True:
    for fd in range(1, 32):
        try:
            os.write(fd, junk)
        except OSError:
            pass
"""


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@pytest.mark.parametrize("attack", [FORGED_LINES, FLOOD], ids=["forged lines", "flood"])
def test_trainer_survives_what_a_program_writes_scores_it_0_and_spends_little_cpu(attack):
    before = cpu_seconds()
    result = run_tests_in_sandbox(program(attack, "a + b"), TESTS, **LIMITS)
    _, levels = code_reward("", program(attack, "a + b"), PROBLEM, **LIMITS)
    spent = cpu_seconds() - before
    assert result["passed"] == [False] * 3 and levels["tests_passed"] == 0, (result, levels)
    assert result["seconds"] < 3 * LIMITS["timeout"] + 1.0  # the load's timeout, not the deadline
    assert spent < 0.3, f"the trainer spent {spent:.2f} s of CPU on two runs"


def test_report_parser_counts_only_well_formed_lines_and_never_raises():
    """Hand-made reports: a wrong nonce, out-of-range, negative, non-ASCII and non-numeric
    indices, bad verdicts and missing fields are ignored; no closing line: nothing counts."""
    nonce = "ab" * 16
    fresh = lambda: dict(passed=[False] * 3, errors=["not run"] * 3, loaded=False, load_error="",
                         completed=False, namespaces=False, unprivileged=False, seccomp=True)
    lines = ["load 1 ", "test 0 1 ", "test 2 0 AssertionError: ", "test 3 1 ",
             "test 99999999999 1 ", "test -1 1 ", "test \u0661 1 ", "test 1e0 1 ", "test 1 2 ",
             "test 1", "test", "", "seccomp 7", "load", "done"]
    report = "\n".join([nonce + " " + line for line in lines] + ["cd" * 16 + " test 1 1 "])
    result = parse_report(report.encode() + b"\n\xff\xfe\n", nonce, fresh())
    assert result["completed"] and result["loaded"] and result["seccomp"]
    assert result["passed"] == [True, False, False]
    assert result["errors"] == ["", "not run", "AssertionError: "]
    unfinished = parse_report(report.encode().replace(b" done", b" done?"), nonce, fresh())
    assert not unfinished["completed"] and unfinished["passed"] == [False] * 3
    assert report_cap(nonce, 3) == 8 * (32 + 40 + 600)


@pytest.mark.parametrize("value, passes", [
    ("(1, 2)", "== (1, 2)"), ("[1, 2]", "!= (1, 2)"), ("{1, 2}", "== {2, 1}"),
    ("{(1, 'a'): [None, True]}", "== {(1, 'a'): [None, True]}"), ("1.5", "== 1.5"),
    ("float('inf')", "== float('inf')"), ("True", "is True"), ("2 ** 100", "== 2 ** 100")])
def test_plain_values_cross_exactly(value, passes):
    """Tuples, lists, sets, dicts with tuple keys, floats, bools and big ints arrive as they were
    (a tuple is not a list); anything else, or an answer over ANSWER_BYTES, fails."""
    result = run_tests_in_sandbox(f"def f():\n    return {value}\n",
                                  [f"assert f() {passes}", "assert f() == 'no'"], **LIMITS)
    assert result["passed"] == [True, False], result


def test_counters_and_generators_travel_and_an_over_long_answer_fails():
    """A Counter travels as a Counter, a generator as a reference drawn by the test; an answer
    over ANSWER_BYTES is refused (a ValueError of the harness's, not a value)."""
    program_text = textwrap.dedent(f"""\
        import collections
        def counter():
            return collections.Counter("aab")
        def generator():
            return (i for i in range(3))
        def big():
            return "x" * {ANSWER_BYTES}
        def fine():
            return dict(collections.Counter("aab"))
        """)
    result = run_tests_in_sandbox(program_text, [
        "assert counter() == {'a': 2, 'b': 1} and type(counter()).__name__ == 'Counter'",
        "assert list(generator()) == [0, 1, 2]",
        "assert len(big()) > 0", "assert fine() == {'a': 2, 'b': 1}"], **LIMITS)
    assert result["passed"] == [True, True, False, True], result
    size = result["errors"][2].partition("an answer of ")[2].split()[0]  # (the harness refused)
    assert "refused" in result["errors"][2] and int(size) > ANSWER_BYTES, result["errors"]


def test_a_program_that_holds_every_thread_fails_a_test_that_needs_one_whatever_it_catches():
    """RLIMIT_NPROC counts the test process's threads with the program's: a program that holds
    them all makes a test's thread fail to start, which fails that test whatever it catches (the
    harness's refusal), never a RuntimeError the test could take for the program's own."""
    context = ("from concurrent.futures import ThreadPoolExecutor\n"
               "def concurrently(fn, *args):\n    with ThreadPoolExecutor(2) as pool:\n"
               "        return pool.submit(fn, *args).result()\n")
    hog = ("import threading\nthreading.stack_size(1 << 18)\nheld, stop = [], threading.Event()\n"
           "try:\n    while len(held) < 64:\n"
           "        held.append(threading.Thread(target=stop.wait, daemon=True))\n"
           "        held[-1].start()\nexcept RuntimeError:\n    pass\n")
    wrong = "def positive(x):\n    return x\n"
    right = "def positive(x):\n    if x <= 0:\n        raise RuntimeError(x)\n    return x\n"
    tests = ["try:\n    concurrently(positive, -1)\n    ok = False\nexcept RuntimeError:\n"
             "    ok = True\nassert ok", "assert concurrently(positive, 3) == 3"]
    for text, passed in ((wrong, [False, True]), (right, [True, True]),
                         (hog + wrong, [False, False])):
        result = run_tests_in_sandbox(text, tests, context=context, names=["positive"], **LIMITS)
        assert result["passed"] == passed, result
    assert result["errors"] == ["RuntimeError: can't start new thread"] * 2, result["errors"]
