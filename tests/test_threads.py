"""choose_threads: the torch thread count from cores, load average, tasks running now,
OMP_NUM_THREADS and --threads (a pure function, checked on hand-set inputs), and set_torch_threads,
which applies it at startup and flushes float32 denormals to 0 (the same gradients, bit for bit)."""
import os

import pytest
import torch

import nanomarl.runs
from common import forward_responses
from nanomarl.runs import choose_threads, other_running_tasks, set_torch_threads
from test_common import make_peft


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


TINY = torch.finfo(torch.float32).tiny  # 1.2e-38: the smallest normal float32


def flushing() -> bool:
    """Does this thread flush denormals to 0 now? (torch has no getter.)"""
    return bool((torch.tensor([1e-39]) * 1.0 == 0).item())


def test_set_torch_threads_applies_the_choice(monkeypatch):
    before = torch.get_num_threads()
    can_flush = torch.set_flush_denormal(False)  # False on a CPU without the mode (not x86)
    try:
        assert not flushing()
        set_torch_threads(1)
        assert flushing() == can_flush  # the default: flush where the CPU can
        set_torch_threads(1, flush_denormals=False)
        assert not flushing()
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
        torch.set_flush_denormal(True)  # as every script runs


def test_flushing_denormals_changes_no_gradient(tiny_model_dir):
    """One backward through forward_responses at a temperature where part of the softmax's tail
    is denormal: the LoRA gradients with and without the flush are equal bit for bit (one
    thread, so the flag holds for every op)."""
    if not torch.set_flush_denormal(False):  # torch's default; False: this CPU has no such mode
        pytest.skip("this CPU cannot flush denormals (torch.set_flush_denormal returns False)")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = make_peft(["agent0"])  # random B: both LoRA matrices get a gradient
        g = torch.Generator().manual_seed(0)
        q = torch.randint(3, 200, (2, 12), generator=g)
        r = torch.randint(3, 200, (2, 6), generator=g)
        qm, rm = torch.ones_like(q), torch.ones(r.shape)
        with torch.no_grad():  # a temperature that puts the median logit 95 nats below the top
            logits = model(input_ids=torch.cat([q, r], 1)).logits[:, q.shape[1] - 1:-1].float()
            temperature = float((logits.amax(-1, keepdim=True) - logits).median()) / 95
            tail = torch.softmax(logits / temperature, -1) / temperature  # in the gradient
        assert ((tail > 0) & (tail < TINY)).float().mean() > 0.01  # as SmolLM2's at T 0.3
        grads = {}
        for flush in (False, True):
            torch.set_flush_denormal(flush)
            assert flushing() == flush
            model.zero_grad()
            out = forward_responses(model, q, qm, r, rm, ["agent0"], temperature)
            out["logprobs"].sum().backward()
            grads[flush] = {n: p.grad.clone() for n, p in model.named_parameters()
                            if p.grad is not None}
    finally:
        torch.set_flush_denormal(True)
        torch.set_num_threads(before)
    assert len(grads[True]) > 0 and grads[True].keys() == grads[False].keys()
    assert any(float(v.abs().max()) > 0 for v in grads[True].values())
    for n, v in grads[False].items():
        assert torch.equal(v, grads[True][n]), n


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
