"""sandbox_zygote.py: a run forked by the trainer's zygote gives what a fresh interpreter's gives
(the plain path), hostile programs and the state of both processes included; a zygote killed
mid-run is started anew and the next run is right; runs from threads get their own results; the
trainer's deadline kills the forked group; no process is left behind; and the premises of the
zygote's security argument hold (the program already shares and reads the test process's hash
seed; each run's descriptors are its own)."""
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from nanomarl import sandbox, sandbox_zygote
from nanomarl.sandbox import parallel_map, run_tests_in_sandbox
from tests.test_sandbox import live_processes, proc_stat
from tests.test_sandbox_hostile import ATTACKS, TESTS, program as attacked

LIMITS = dict(timeout=1.0, memory_mb=256)
FIELDS = ("passed", "errors", "loaded", "load_error", "stdout", "stderr", "completed", "timed_out",
          "namespaces", "unprivileged", "seccomp")

# the state a run's two processes start with, which a fork of the zygote must give as a fresh
# interpreter does: modules, sys.argv's shape, __main__'s names, open descriptors (their kinds:
# the numbers differ), flags, streams, limits, session
STATE = """\
import os, resource, stat, sys
def descriptors():
    kinds = []
    for fd in range(1024):
        try:
            kinds.append((stat.S_IFMT(os.fstat(fd).st_mode), os.get_inheritable(fd),
                          os.get_blocking(fd)))
        except OSError:
            pass
    return sorted(kinds)
def state():
    return [sorted(sys.modules), sys.argv[0], len(sys.argv), sorted(vars(sys.modules["__main__"])),
            descriptors(), repr(sys.flags), repr(sys.stdin), sys.stdout.encoding, sys.stdout.errors,
            [resource.getrlimit(getattr(resource, "RLIMIT_" + name)) for name in
             ("CPU", "AS", "FSIZE", "NOFILE", "NPROC", "CORE")],
            os.getpgrp() == os.getpid(), os.getsid(0) == os.getpid(),
            sorted(os.environ.items()), os.getcwd(), sys.getrecursionlimit()]
print(state(), flush=True)
"""
PROGRAMS = {
    "right and wrong": ("def f(x):\n    print('x', x)\n    return x + 1\n",
                        ["assert f(1) == 2", "assert f(2) == 4", "g(1)"]),
    "fails to load": ("def f(x):\n    return x\nraise ValueError('at load')\n",
                      ["assert f(1) == 1"]),
    "syntax error": ("def f(x)\n    return x\n", ["assert f(1) == 1"]),
    "sys.exit(0) at load": ("import sys\nsys.exit(0)\n", ["assert False"]),
    "os._exit(0) in a call": ("import os\ndef f():\n    os._exit(0)\n",
                              ["f()", "assert f() is None"]),
    "reads stdin": ("def f():\n    return input()\n", ["assert f() == ''"]),
    "deep recursion": ("def f(n):\n    return f(n + 1)\n", ["f(0)"]),
    "times out": ("def f():\n    while True:\n        pass\n", ["f()", "assert True"]),
    "the program's process's state": (STATE, ["assert state() is not None"]),
    "the test process's state": ("x = 1\n", [STATE + "assert x == 1"]),
    **{f"attack: {name}": (attacked(attack, body), TESTS)
       for name, (attack, body) in ATTACKS.items()},
}


def children(parent: int) -> list[tuple[int, str]]:
    """(pid, state) of each process whose parent is `parent`, zombies included."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    return [(pid, st[0]) for pid in pids if (st := proc_stat(pid)) is not None and st[1] == parent]


def group_alive(group: int) -> list[int]:
    """The live (not zombie) processes of a process group."""
    return live_processes(lambda st: st[2] == group)


def settled(check, seconds: float = 5.0):
    """check()'s value once it is empty (false), or its last value after `seconds`."""
    deadline = time.monotonic() + seconds
    while (found := check()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def zygote_pid() -> int:
    run_tests_in_sandbox("x = 1", [], **LIMITS)  # (started where it is not running)
    return sandbox_zygote.ZYGOTES[sandbox.CHILD_CODE][1].pid


def test_the_zygote_and_a_fresh_interpreter_give_the_same_results():
    names = list(PROGRAMS)
    forked = parallel_map(lambda name: run_tests_in_sandbox(*PROGRAMS[name], **LIMITS), names, 2)
    plain = parallel_map(lambda name: run_tests_in_sandbox(*PROGRAMS[name], **LIMITS, zygote=False),
                         names, 2)
    for name, mine, theirs in zip(names, forked, plain):
        assert {k: mine[k] for k in FIELDS} == {k: theirs[k] for k in FIELDS}, name
        assert mine["completed"] and mine["pid"] != theirs["pid"], name
    assert forked[names.index("right and wrong")]["passed"] == [True, False, False]
    assert not any(any(result["passed"]) for name, result in zip(names, forked)
                   if name.startswith("attack"))


def test_a_killed_zygote_is_started_anew_and_the_next_run_is_right():
    zygote = zygote_pid()
    results = []
    running = threading.Thread(target=lambda: results.append(run_tests_in_sandbox(
        "import time\ntime.sleep(30)\n", ["assert True"], timeout=20.0)))
    running.start()
    assert not settled(lambda: not children(zygote), 10.0), "the run never started"
    time.sleep(0.2)
    os.kill(zygote, signal.SIGKILL)
    running.join(30)
    assert not running.is_alive() and not results[0]["completed"], results
    assert settled(lambda: group_alive(results[0]["pid"])) == [], "its processes outlived it"
    result = run_tests_in_sandbox("def f(x):\n    return 2 * x\n", ["assert f(2) == 4"], **LIMITS)
    assert result["passed"] == [True] and result["completed"], result
    assert sandbox_zygote.ZYGOTES[sandbox.CHILD_CODE][1].pid != zygote


def test_runs_from_threads_get_their_own_results():
    def run(k):
        return run_tests_in_sandbox(f"def f():\n    print({k})\n    return {k}\n",
                                    [f"assert f() == {k}", f"assert f() == {k + 1}"], **LIMITS)

    results = parallel_map(run, list(range(12)), 4)
    for k, result in enumerate(results):
        assert result["passed"] == [True, False] and result["stdout"] == f"{k}\n{k}\n", (k, result)
    assert len({result["pid"] for result in results}) == 12


def test_the_trainers_deadline_kills_the_forked_group():
    """A test that swallows its alarm while it sleeps (no CPU: no watchdog) and a program that
    spins in a thread: only the trainer's killpg at its deadline ends them."""
    zygote = zygote_pid()
    program = ("import threading\ndef spin():\n    while True:\n        pass\n"
               "threading.Thread(target=spin, daemon=True).start()\n")
    test = ("import time\nwhile True:\n    try:\n        time.sleep(100)\n"
            "    except BaseException:\n        pass\n")
    start = time.monotonic()
    result = run_tests_in_sandbox(program, [test], timeout=0.5, memory_mb=256)
    assert result["timed_out"] and not result["completed"] and result["returncode"] == -9, result
    assert 3.0 <= time.monotonic() - start < 6.0, result["seconds"]
    assert settled(lambda: group_alive(result["pid"])) == [], "processes left behind"
    assert settled(lambda: children(zygote)) == [], "the zygote holds a child still"


def test_no_process_or_zombie_is_left_behind():
    zygote = zygote_pid()
    programs = [("def f():\n    return 1\n", ["assert f() == 1"]),
                ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", ["assert True"]),
                ("import os\nos._exit(3)\n", ["assert True"])]
    results = parallel_map(lambda job: run_tests_in_sandbox(*job, **LIMITS), programs, 2)
    for result in results:
        assert settled(lambda: group_alive(result["pid"])) == [], result
    assert settled(lambda: children(zygote)) == [], "the zygote's children are not all reaped"
    assert [pid for pid, state in children(os.getpid()) if state == "Z"] == []
    assert zygote_pid() == zygote  # (the same zygote served them all)


def test_the_hash_seed_is_shared_within_a_run_and_the_program_reads_it_anyway():
    """The premise of the zygote's security argument (sandbox_zygote.py's docstring): the program's
    process has the test process's hash seed in every run (a fork of it) and reads the key itself
    (ctypes); the zygote only keeps the seed the same from one run to the next."""
    key = "bytes((ctypes.c_ubyte * 16).in_dll(ctypes.pythonapi, '_Py_HashSecret'))"
    program = (f"import ctypes\ndef seed():\n    return {key}\n"
               "def hashed():\n    return hash('nanomarl')\n")
    tests = [f"import ctypes\nassert seed() == {key}", "assert hashed() == hash('nanomarl')",
             "print(hashed(), flush=True)"]
    seeds = {}
    for zygote in (True, True, False, False):
        result = run_tests_in_sandbox(program, tests, **LIMITS, zygote=zygote)
        assert result["passed"] == [True] * 3, result
        seeds.setdefault(zygote, set()).add(result["stdout"])
    assert len(seeds[True]) == 1 and len(seeds[False]) == 2


@pytest.mark.parametrize("zygote", [True, False], ids=["zygote", "plain"])
def test_stdin_is_each_runs_own(zygote):
    """Each run's descriptors are its own (fresh from the trainer): a flag one program sets on its
    stdin does not reach the next run's."""
    program = ("import os\ndef flags():\n    return os.get_blocking(0)\n"
               "os.set_blocking(0, False)\n")
    for _ in range(2):
        result = run_tests_in_sandbox(program, ["assert flags() is False"], **LIMITS, zygote=zygote)
        assert result["passed"] == [True], result
    result = run_tests_in_sandbox("import os\ndef flags():\n    return os.get_blocking(0)\n",
                                  ["assert flags() is True"], **LIMITS, zygote=zygote)
    assert result["passed"] == [True], result


def test_a_zygote_that_ends_twice_before_forking_leaves_the_run_to_the_plain_path(monkeypatch,
                                                                                   capsys):
    """Where the zygote dies before each of a run's two requests, the run takes the plain path
    (a fresh interpreter), gives its right results, and so do the runs after it, with one
    warning."""
    monkeypatch.setattr(sandbox_zygote, "PLAIN", [])  # (this process's zygote: usable so far)
    sends = []

    def dead(*args):
        sends.append(args)
        raise BrokenPipeError("the zygote has died")

    monkeypatch.setattr(sandbox_zygote.socket, "send_fds", dead)
    program, tests = PROGRAMS["right and wrong"]
    for _ in range(2):
        result = run_tests_in_sandbox(program, tests, **LIMITS)
        assert result["passed"] == [True, False, False] and result["completed"]
    assert len(sends) == 2  # two tries in the first run, none in the second
    assert sandbox_zygote.PLAIN == ["the zygote ended twice before it forked"]
    assert capsys.readouterr().err.count("no zygote, the zygote ended twice") == 1
