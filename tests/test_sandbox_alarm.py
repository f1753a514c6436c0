"""The per-test alarm of the test process against a program past its timeout (plain Python: the
test times out, whatever the program does meanwhile): a ring while the link holds the alarm off
is owed, never lost (nanomarl/sandbox_alarm.py:due), and a timed-out call's changes reach the
next test as in plain Python, where the alarm interrupts the call after them and the next test
starts only once the call ends (its late answer is awaited before the next test, as long as the
tests' budget lasts, and its news taken: nanomarl/sandbox_link.py:settle, overdue). The
verdicts of a timeout are written out: plain Python's alarm interrupts the call."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from test_sandbox_semantics import run

HERE = os.path.dirname(os.path.abspath(__file__))
NANOMARL = os.path.join(os.path.dirname(HERE), "nanomarl")

OWED = """\
    import os, sys, threading, time
    sys.path.insert(0, sys.argv[1])
    import sandbox_link as link
    link.LINK["side"] = "test"
    read, write = os.pipe()
    def flood():  # (lines enough: the loop below always finds one)
        while True:
            os.write(write, b"x" * 100 + b"\\n")
    threading.Thread(target=flood, daemon=True).start()
    def loop():
        buffer, end = bytearray(), time.monotonic() + 1.5
        while time.monotonic() < end:
            link.held(time.sleep, 0.05)  # (each ring lands here, the alarm held off)
            line = link.read_line(read, buffer, 1 << 20)
            del buffer[:len(line) + 1]
        return "ran past its timeout"
    print(link.attempt(loop, 0.2)[0], link.LINK["failed"])
    """


def test_a_ring_while_the_alarm_is_held_off_is_owed():
    """Each ring lands while the link holds the alarm off (as a program's flood of lines keeps
    it): the next wait for bytes raises it, the timeout noted."""
    found = subprocess.run([sys.executable, "-c", textwrap.dedent(OWED), NANOMARL],
                           capture_output=True, text=True, timeout=60)
    assert found.stdout.split(None, 1) == ["t", "Timeout: test timed out\n"], found


FLOOD = """\
    import gc, os, threading, time
    def _module(name):
        for found in gc.get_objects():
            if type(found) is dict and found.get("__name__") == name and "__builtins__" in found:
                return found
    def _flood(stop, fd, line):
        while not stop:
            os.write(fd, line)
    def slow_answer(seconds):
        link, alarm, stop = _module("sandbox_link"), _module("sandbox_alarm"), []
        if link is not None:  # its own alarm off, its answer pipe flooded (valid JSON, no message)
            alarm["ALARM"][0] = False
            line = b"\\n[" + b"1.5e300," * (1 << 17) + b"0]\\n"
            threading.Thread(target=_flood, args=(stop, link["LINK"]["out"], line),
                             daemon=True).start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:  # (too slow)
            pass
        stop.append(1)
        return 42
    """


def test_a_flood_of_lines_does_not_outlast_the_alarm():
    """A program that turns its own alarm off and floods its answer pipe with long lines of JSON
    keeps the test process unpacking lines, the alarm held off: it still times out."""
    result = run(FLOOD, ["assert slow_answer(2.0) == 42"], memory_mb=1024)
    assert result["passed"] == [False] and result["errors"][0].startswith("Timeout"), result


KEEPS = """\
    import time
    L = []
    def keep(lst):
        global L
        L = lst
    def slow(seconds=None):
        L.append(99)  # (wrong: it changes the caller's list, then hangs)
        if seconds is None:
            time.sleep(30)  # (its own alarm ends it)
        end = time.monotonic() + (seconds or 0)
        while time.monotonic() < end:
            try:
                time.sleep(0.005)
            except BaseException:  # (its own alarm: it answers after the test's timeout)
                pass
    def noop():
        return 0
    """


@pytest.mark.parametrize("seconds", [None, 1.25], ids=["interrupted", "late"])
def test_a_kept_list_changed_by_a_call_that_times_out_stays_changed(seconds):
    """The call appends to a list the test kept, then times out: in plain Python the list keeps
    the 99 (the alarm interrupts the call after the change), in the next test as in the one
    after, with or without a call of the program between."""
    result = run(KEEPS, ["lst = []\nkeep(lst)\nassert lst == []", "slow(%r)" % seconds,
                         "assert lst == [99]", "assert noop() == 0\nassert lst == [99]"],
                 max_timeouts=4)
    assert result["passed"] == [True, False, True, True], result["errors"]
    assert result["errors"][1].startswith("Timeout"), result["errors"]


PRECISION = """\
    import decimal, time
    def compute():
        decimal.getcontext().prec = 6  # (wrong: it changes the one context)
        time.sleep(30)  # (its own alarm ends it)
    def noop():
        return 0
    """


def test_a_precision_set_by_a_call_that_times_out_is_the_next_tests():
    """The call sets prec 6 and times out: plain Python's next test sees 6, before any call of
    the program as after one."""
    result = run(PRECISION, ["compute()", "import decimal\nassert decimal.getcontext().prec == 6",
                             "import decimal\nnoop()\nassert decimal.getcontext().prec == 6"],
                 max_timeouts=4)
    assert result["passed"] == [False, True, True], result["errors"]
    assert result["errors"][0].startswith("Timeout"), result["errors"]


PAST = """\
    import time
    L = []
    def keep(lst):
        global L
        L = lst
    def late(seconds, item=None):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                while time.monotonic() < end:
                    try:
                        time.sleep(0.005)
                    except BaseException:  # (its own alarm, swallowed: it answers late)
                        pass
            except BaseException:  # (a ring between two sleeps, swallowed too)
                pass
        if item is not None:
            L.append(item)  # (wrong: it changes the caller's list after its timeout)
        return seconds
    def forever(callback):
        print("began", flush=True)
        while True:
            try:
                callback()
            except BaseException:
                pass
    def outer(callback):
        return callback()
    def hang():
        time.sleep(30)  # (its own alarm ends it)
    def add(a, b):
        return a + b
    """


def test_a_call_past_its_timeout_ends_before_the_next_test():
    """The call swallows its own alarm for 2.5 s, then appends to a list the test kept: plain
    Python starts the next test only once the call has ended, and that test sees the 99 (the
    late answer is awaited on the tests' budget: nanomarl/sandbox_link.py:settle)."""
    result = run(PAST, ["lst = []\nkeep(lst)", "late(2.5, 99)", "assert lst == []",
                        "assert lst == [99]"], max_timeouts=6)
    assert result["passed"] == [True, False, False, True], result["errors"]
    assert result["errors"][1].startswith("Timeout"), result["errors"]


def test_a_slow_call_within_the_budget_leaves_the_later_tests_passing():
    """A right program that swallows its alarm answers 3.5 s late: the next tests start once it
    has answered, and pass (each has its own timeout, none spent waiting)."""
    result = run(PAST, ["assert late(3.5) == 3.5", "assert add(1, 2) == 3",
                        "assert add(2, 2) == 4", "assert add(1, 1) == 2"], max_timeouts=7)
    assert result["passed"] == [False, True, True, True], result["errors"]
    assert result["errors"][0].startswith("Timeout"), result["errors"]


@pytest.mark.parametrize("callback", ["lambda: hang()", "lambda: catch(hang)"],
                         ids=["raised", "caught"])
def test_a_callbacks_call_that_times_out_ends_with_its_callers(callback):
    """A callback the program calls calls the program, which times out (the test may catch it):
    the inner call ends with the outer one, whose answer is all the next test awaits."""
    catch = "def catch(fn):\n    try:\n        fn()\n    except BaseException:\n        pass\n"
    result = run(PAST, [catch + "outer(%s)" % callback, "assert add(1, 2) == 3"])
    assert result["passed"] == [False, True], result["errors"]
    assert result["errors"][0].startswith("Timeout"), result["errors"]


def test_a_call_that_never_ends_fails_the_tests_after_it():
    """The program swallows its own alarm and calls the test's callback forever: plain Python
    never starts the next test. Its answer is awaited as long as the tests' budget lasts (the
    callbacks served meanwhile, under the CPU watchdog), then the tests left fail, not run; the
    run ends before its deadline, its processes gone. A run whose test process stalled past the
    timeout before it called the program (plain Python then runs the next tests too: a loaded
    machine) is run again: the program says when its call began."""
    tests = ["forever(lambda: None)"] + ["assert 1 + 1 == 2"] * 12
    for _ in range(3):
        result = run(PAST, tests, timeout=0.5, max_timeouts=8)
        if "began" in result["stdout"]:
            break
    assert result["stdout"].startswith("began\n"), result["stdout"]
    assert result["completed"] and not result["timed_out"], result
    assert result["passed"] == [False] * 13, result["errors"]
    assert result["errors"][1:] == ["not run"] * 12, result["errors"]
    with pytest.raises(ProcessLookupError):
        os.killpg(result["pid"], 0)


def test_a_call_in_c_past_the_budget_leaves_the_report_before_the_deadline():
    """The call runs C code no alarm interrupts (plain Python: the test hangs with it); its late
    answer is awaited only while the trainer's deadline leaves room for the report (test_side's
    end, however long max_timeouts·timeout is): the run completes, the test left not run."""
    program = "def spin():\n    return sum(range(10 ** 11))\ndef add(a, b):\n    return a + b\n"
    result = run(program, ["assert spin() == 0", "assert add(1, 1) == 2"], timeout=1.0,
                 max_timeouts=8)
    assert result["completed"] and not result["timed_out"], result
    assert result["passed"] == [False, False], result["errors"]
    assert result["errors"][1] == "not run", result["errors"]


def test_a_callback_the_late_call_makes_may_call_the_program():
    """The call swallows its alarm for 1.5 s, then calls the test's callback, which calls the
    program: plain Python runs both before the next test starts, and the next tests pass (the
    callback's call is served while the late answer is awaited: sandbox_link.py:settle)."""
    program = textwrap.dedent(PAST) + "def late_then(seconds, callback):\n    late(seconds)\n" + (
        "    return callback()\n")
    result = run(program, ["late_then(1.5, lambda: add(1, 2))", "assert add(1, 1) == 2",
                           "assert add(2, 2) == 4"], timeout=0.5, max_timeouts=8)
    assert result["passed"] == [False, True, True], result["errors"]
    assert result["errors"][0].startswith("Timeout"), result["errors"]


def plain_timed(program, tests, timeout=1.0):
    """The verdicts of plain Python, each test under its own alarm (as the sandbox's: a test past
    its timeout fails, the next starts with what the interrupted call changed)."""
    def ring(signum, frame):
        raise TimeoutError
    scope, verdicts = {"__name__": "plain"}, []
    exec(textwrap.dedent(program), scope)
    previous = signal.signal(signal.SIGALRM, ring)
    try:
        for test in tests:
            try:
                signal.setitimer(signal.ITIMER_REAL, timeout)
                try:
                    exec(textwrap.dedent(test), scope)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                verdicts.append(True)
            except (Exception, TimeoutError):
                verdicts.append(False)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return verdicts


WALKS = """\
    def walk(path, start):
        path.append(start)  # (an argument container put inside another)
        while True:  # (its own alarm ends it)
            pass
    def visit(seen, graph):
        seen.append(graph["start"])  # (one nested in another argument)
        while True:
            pass
    def mark(dist, start):
        dist["from"] = start  # (a dict's value)
        while True:
            pass
    def ok():
        return 1
    """


TUPLE_WALKS = """\
    def note(rows, t):
        rows.append(t)  # (an argument's tuple put inside an argument container)
        while True:  # (its own alarm ends it)
            pass
    def visit(seen, start):
        seen.add(start)  # (a set's item)
        while True:
            pass
    def mark(dist, start):
        dist[start] = 0  # (a dict's key)
        while True:
            pass
    def ok():
        return 1
    """


@pytest.mark.parametrize("program, first, after", [
    (WALKS, "path = []\nwalk(path, [0, 0])", "assert path == [[0, 0]]"),
    (WALKS, "path, start = [], [0, 0]\nwalk(path, start)", "assert path[0] is start"),
    (WALKS, "seen, start = [], [0, 0]\nwalk(seen, start)",
     "start.append(1)\nassert seen == [[0, 0, 1]]"),
    (WALKS, "seen, graph = [], {'start': [0, 0]}\nvisit(seen, graph)",
     "assert seen[0] is graph['start']"),
    (WALKS, "dist, start = {}, [0, 0]\nmark(dist, start)", "assert dist['from'] is start"),
    (TUPLE_WALKS, "t, rows = (0, 0), []\nnote(rows, t)",
     "assert rows == [(0, 0)] and rows[0] is t"),
    (TUPLE_WALKS, "t, seen = (0, 0), set()\nvisit(seen, t)",
     "assert seen == {t} and next(iter(seen)) is t"),
    (TUPLE_WALKS, "t, dist = (0, 0), {}\nmark(dist, t)",
     "assert dist == {t: 0} and next(iter(dist)) is t"),
], ids=["list", "identity", "seen", "nested", "dict", "tuple-list", "tuple-set", "tuple-dict"])
def test_a_late_answer_putting_an_argument_inside_another_is_taken(program, first, after):
    """The call puts one of its argument containers, or its argument's tuple, inside another, then
    times out: its late answer's write-back marks it {"a": k} or {"g": k}, the k-th argument
    container or tuple of the call it answers (kept with its wait; not of whatever call is out when
    it arrives, none here): plain Python's next tests run, and see the change, the test's own
    object there."""
    tests = [first, "assert ok() == 1", after, "assert ok() == 1"]
    expected = plain_timed(program, tests)
    assert expected == [False, True, True, True]
    result = run(program, tests, max_timeouts=4)
    assert result["passed"] == expected, result["errors"]
    assert result["errors"][0].startswith("Timeout"), result["errors"]


CALLS_BACK = textwrap.dedent(PAST) + """\
P, START = [], [0, 0]
def walk(callback):
    late(1.25)  # (past the test's timeout, its alarm swallowed)
    try:
        time.sleep(1)  # (until its next ring, 50 ms on at most)
    except BaseException:
        pass
    try:
        callback(P, START)  # (asked just after a ring: its wait ends with the next one)
    except BaseException:
        pass
def path_holds_start():
    return P == [[0, 0]] and P[0] is START
"""

SLOW_CALLBACK = """\
import time
def slow(path, start):
    path.append(start)  # (an argument container put inside another)
    time.sleep(0.3)  # (its answer late: the program's wait for it has ended)
walk(slow)
"""


def test_a_callbacks_late_answer_marks_the_programs_own_arguments():
    """The program, past its time, calls the test's callback, which puts one argument container
    inside the other and answers after the program's wait for it has ended (served while the
    test process awaits the timed-out call: sandbox_link.py:settle, no alarm ringing): its
    write-back's {"a": k} names the k-th container of the program's call it answers (kept with
    its wait), so the program's list holds its own START, as in plain Python (whose alarm the
    program swallows: that test passes there; the sandbox's cannot be swallowed)."""
    tests = [SLOW_CALLBACK, "assert path_holds_start()", "assert path_holds_start()"]
    assert plain_timed(CALLS_BACK, tests) == [True, True, True]
    result = run(CALLS_BACK, tests, max_timeouts=4)
    assert result["passed"] == [False, True, True], result["errors"]
    assert result["errors"][0].startswith("Timeout"), result["errors"]


RING_AFTER_READ = """\
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    import sandbox_link as link
    from sandbox_alarm import TestTimeout
    read, write = os.pipe()
    def ring_after_read(line):  # an answer read, then the alarm rings before talk sees it
        def next_message():
            try:
                link.unpacked(line, bytearray(line + b"\\n"))
            except ValueError:  # (malformed: skipped)
                pass
            raise TestTimeout()
        return next_message
    for line in (b'[2,"a","v",7,{"d":[],"w":[[0,[5]]]}]', b'[1,"a","v",7,{"d":[],"w":[[0,[6]]]}]',
                 b'[2,"a","v",7,{"d":[],"w":[[0,[5]]]'):
        taken = []
        link.LINK.update(side="test", seq=1, gone="", failed="", out=write, refer=None,
                         kept_tags={}, decode=json.loads, next=ring_after_read(line), drop=dict,
                         mine=[], waiting={1: (None, [["earlier"]], [])},
                         late=lambda extra, args: taken.append((extra["w"], args)))
        try:
            link.ask("call", 3, args=[[1]])
        except TestTimeout:
            print(sorted(link.LINK["waiting"]), taken)
    """


def test_an_answer_read_as_the_alarm_rings_is_taken_as_a_late_one():
    """The alarm rings once an answer is read but before the call's loop takes it: the call's own
    answer (2) or an earlier call's late one (1, whose wait is out) is taken at once, its
    write-back read against its own call's arguments, never lost with the wait left open (the
    tests after it would await it until the budget ran out); its own, malformed, leaves no wait
    for an answer that will not come."""
    found = subprocess.run([sys.executable, "-c", textwrap.dedent(RING_AFTER_READ), NANOMARL],
                           capture_output=True, text=True, timeout=60)
    assert found.stdout.split("\n") == ["[1] [([[0, [5]]], [[1]])]",
                                        "[2] [([[0, [6]]], [['earlier']])]", "[1] []", ""], found


FORGED_NUMBERS = """\
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import sandbox_link as link
    link.LINK.update(side="test", decode=json.loads, read=None, args=[[["now"]]], tuples=[[]],
                     waiting={1: (None, [["late"]], [])})
    for line in (b'[1,"a","v",7,{}]', b'[--1,"a","v",7,{}]', b'[ 1 ,"a","v",7,{}]',
                 b'[1,"\\u0061","v",7,{}]', b'[1.0,"a","v",7,{}]', b'[true,"a","v",7,{}]',
                 b'[2,"q","x",0,null,null,{}]'):
        try:
            message = link.unpacked(line, bytearray(line + b"\\n"))
        except ValueError:  # (malformed: skipped)
            message = None
        print(message is not None and message[:2], link.called())
    """


def test_an_answer_is_read_against_the_call_its_number_names_or_skipped():
    """An answer's number is read from its bytes before it is decoded, so that its marks name the
    arguments of the call it answers (called: a late one's, kept with its wait). JSON's white
    space around the number reads as the number; an answer whose bytes hide its number ("\\u0061"
    for "a", 1.0, true) is skipped as forged, never read against the call out now, and a line
    whose number is no number (--1) leaves no earlier line's number behind."""
    found = subprocess.run([sys.executable, "-c", textwrap.dedent(FORGED_NUMBERS), NANOMARL],
                           capture_output=True, text=True, timeout=60)
    assert found.stdout.split("\n") == [
        "[1, 'a'] [['late']]", "False [['now']]", "[1, 'a'] [['late']]", "False [['now']]",
        "False [['now']]", "False [['now']]", "[2, 'q'] [['now']]", ""], found


GIVEN = """\
    import sys
    sys.path.insert(0, sys.argv[1])
    from sandbox_proxies import given
    outer, mixed = ((3,), "a"), ([1], 2)
    tuples = [outer, outer[0], mixed]  # (as the walk meets them: an outer tuple, then its own)
    print(given(tuples, {"t": [0, 3]}) == {id(outer): '{"g":0}', id(outer[0]): '{"g":1}'})
    print(given(tuples, {"t": [0, 4]}), given(tuples, {"t": 3}), given(tuples, {}), given([], {}))
    text = "".join(["a", "b"])  # (a leaf argument, numbered first: sandbox_copies.py:leaves)
    print(given([text, outer[0]], {"t": [1, 2]}) == {id(text): '{"g":0}', id(outer[0]): '{"g":1}'})
    print(given([text, outer[0]], {"t": [0, 2]}), given([text, outer[0]], {"t": [2, 2]}))
    """


def test_a_calls_tuples_are_marked_only_where_both_sides_counted_as_many():
    """given marks a call's leaf arguments and tuples of leaves ({"g": k}; none for a tuple that
    holds a list) where the test process counted as many leaves and as many in all as the
    program's process met (its "t"), and none where the counts differ or the test told none (a
    check: both walks meet the same leaves and tuples)."""
    found = subprocess.run([sys.executable, "-c", textwrap.dedent(GIVEN), NANOMARL],
                           capture_output=True, text=True, timeout=60)
    assert found.stdout.split("\n") == ["True", "{} {} {} {}", "True", "{} {}", ""], found
