"""choose_threads: the torch thread count from cores, load average, tasks running now,
OMP_NUM_THREADS and --threads (a pure function, checked on hand-set inputs), and set_torch_threads,
which applies it at startup."""
import os

import pytest
import torch

import nanomarl.runs
from nanomarl.runs import choose_threads, other_running_tasks, set_torch_threads


@pytest.mark.parametrize("cores, load, running, expected", [
    (2, 0.0, 0.0, 2),   # idle 2-core machine: one thread per core, torch's default
    (2, 0.4, 0.3, 2),   # a little background work rounds to nothing busy
    (2, 0.7, 0.9, 1),   # most of a core busy, in the last minute and now: leave it
    (2, 1.0, 1.0, 1),   # one competing CPU-bound process: one thread
    (2, 1.49, 1.2, 1),
    (2, 2.3, 3.0, 1),   # both cores busy: never fewer than one thread
    (2, 9.0, 9.0, 1),
    (2, 2.0, 0.0, 2),   # a run that has just ended: the load average counts it, nothing runs now
    (2, 0.1, 1.0, 2),   # a competitor just started: not yet in the load average (--threads wins)
    (16, 3.2, 4.0, 13),
    (16, 0.0, 0.0, 16),
    (1, 0.9, 1.0, 1),
])
def test_threads_from_cores_load_and_running_tasks(cores, load, running, expected):
    threads, why = choose_threads(cores, load, running, None, 0)
    assert threads == expected
    busy = min(cores, round(min(load, running)))
    assert why == (f"{cores} cores, {busy} busy: 1-minute load average {load:.2f}, "
                   f"{running:.1f} other tasks running now")


def test_flag_then_environment_then_load():
    assert choose_threads(2, 1.0, 1.0, "4", 3) == (3, "--threads")  # the flag wins over everything
    assert choose_threads(2, 1.0, 1.0, None, 5) == (5, "--threads")  # even above the core count
    assert choose_threads(2, 1.0, 1.0, "2", 0) == (2, "OMP_NUM_THREADS")  # wins over the load
    assert choose_threads(8, 0.0, 0.0, " 1 ", 0) == (1, "OMP_NUM_THREADS")
    for unusable in ("", "0", "-2", "two", "1.5"):  # not a positive integer: the load decides
        assert choose_threads(2, 1.0, 1.0, unusable, 0)[0] == 1
        assert choose_threads(2, 0.0, 0.0, unusable, 0)[0] == 2


def test_set_torch_threads_applies_the_choice(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert set_torch_threads(2) == "threads: 2 (--threads)" and torch.get_num_threads() == 2
        line = set_torch_threads(0)
        assert line == "threads: 1 (OMP_NUM_THREADS; --threads N sets it)"
        assert torch.get_num_threads() == 1
        monkeypatch.delenv("OMP_NUM_THREADS")
        cores = len(os.sched_getaffinity(0))
        monkeypatch.setattr(os, "getloadavg", lambda: (5.0, 0.0, 0.0))  # every core busy ...
        monkeypatch.setattr(nanomarl.runs, "other_running_tasks", lambda: 5.0)  # ... and still now
        assert set_torch_threads(0).startswith("threads: 1 (") and torch.get_num_threads() == 1
        # ... but that was a run that has ended
        monkeypatch.setattr(nanomarl.runs, "other_running_tasks", lambda: 0.0)
        assert set_torch_threads(0).startswith(f"threads: {cores} (")
        assert torch.get_num_threads() == cores
        with pytest.raises(SystemExit, match="--threads: must be >= 0"):
            set_torch_threads(-1)
    finally:
        torch.set_num_threads(before)


def test_other_running_tasks_sees_a_competitor():
    """A CPU-bound process is always runnable: it counts as (at least) one other task running
    now."""
    import subprocess
    import sys
    import time

    competitor = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # past the interpreter's start-up
        assert other_running_tasks(samples=5, interval_s=0.01) >= 1.0
    finally:
        competitor.kill()
        competitor.wait()


def test_scripts_print_the_choice_at_startup(tmp_path):
    """magrpo.py with --threads: the startup line says the count (a short tiny run)."""
    from conftest import run_script

    done = run_script(["magrpo.py", "--model", "tiny", "--max-steps", "1", "--num-generations", "2",
                       "--max-new-tokens", "4", "--sandbox-workers", "1", "--threads", "1",
                       "--output-dir", str(tmp_path / "run")], timeout=300)
    assert "threads: 1 (--threads)" in done.stdout
