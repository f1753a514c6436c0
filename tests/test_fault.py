"""Nothing is lost when a run is killed. cotrain.py and magrpo.py on the tiny model are SIGKILLed
(once in the middle of a checkpoint write, at a fixed step; then at random moments of a seeded draw)
and SIGINTed, and resumed with `--resume RUN` after each stop. The final adapters must equal, tensor
for tensor, those of an uninterrupted in-process run with the same seed, and metrics.jsonl must hold
every step exactly once, with the same values."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

import cotrain
import magrpo
from conftest import PAPER_PPO, ROOT
from nanomarl.cli import parse_args
from nanomarl.runs import checkpoint_step

TINY = ["--model", "tiny", "--device", "cpu", "--save-every", "1"]
COTRAIN = [*TINY, *PAPER_PPO, "--num-turns", "1", "--questions-per-update", "1",
           "--max-new-tokens", "4", "--ppo-epochs", "1", "--lr", "1e-2", "--sample-every", "0",
           "--max-steps", "12", "--eval-questions", "0"]
MAGRPO = [*TINY, "--num-generations", "2", "--max-new-tokens", "6", "--sandbox-workers", "1",
          "--adv-mode", "raw", "--reward-shift", "1.0", "--lr", "0.01", "--sample-every", "100",
          "--max-steps", "12", "--eval-problems", "0"]


def launch(script, argv, **env):
    return subprocess.Popen([sys.executable, f"{script}.py", *argv], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})


def logged_steps(run):
    path = run / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def count_lines(path):
    return len(path.read_text().splitlines()) if path.exists() else 0


def stop_after_progress(proc, run, sig, delay):
    """Once the resumed process has opened the run (a new line in resumes.jsonl, metrics.jsonl
    trimmed) and logged one new step, wait `delay` seconds and send `sig`. Returns the exit code and
    stderr."""
    def wait_until(condition):
        deadline = time.time() + 120
        while proc.poll() is None and not condition() and time.time() < deadline:
            time.sleep(0.02)

    resumes = count_lines(run / "resumes.jsonl")
    wait_until(lambda: count_lines(run / "resumes.jsonl") > resumes)
    start = logged_steps(run)
    wait_until(lambda: logged_steps(run) > start)
    time.sleep(delay)
    if proc.poll() is None:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def adapters(run):
    files = sorted((run / "adapters").rglob("*.safetensors"))
    return {f"{p.parent.name}/{p.name}": load_file(p) for p in files}


def metrics(run):
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("timing/")}
            for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("script", ["cotrain", "magrpo"])
def test_killed_and_resumed_run_equals_an_uninterrupted_one(tmp_path, script):
    # 12 steps: a tiny step is quick, so fewer could all finish before a random kill lands
    flags, steps = COTRAIN if script == "cotrain" else MAGRPO, 12
    rng = random.Random(0 if script == "cotrain" else 1)
    if script == "magrpo":
        data = tmp_path / "posts.jsonl"
        data.write_text("".join(json.dumps({"prompt": f"post {i}"}) + "\n" for i in range(3)))
        flags = [*flags, "--dataset", f"jsonl:{data}"]
    module = {"cotrain": cotrain, "magrpo": magrpo}[script]
    reference, run = tmp_path / "reference", tmp_path / "run"
    module.main(parse_args(module.Args, [*flags, "--output-dir", str(reference)]))

    # 1. SIGKILL inside the write of checkpoint 2: the new file is complete but not swapped in yet
    proc = launch(script, [*flags, "--output-dir", str(run)], NANOMARL_TEST_KILL_IN_CHECKPOINT="2")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, err
    assert (run / "checkpoint.pt.tmp").exists() and checkpoint_step(run / "checkpoint.pt") == 1
    assert logged_steps(run) == 2  # one step past the checkpoint: the resume logs it again, once
    kills, stops = 1, 0
    # 2. resume, and stop at random moments: SIGINT once (a clean stop), then SIGKILLs; the last
    # resume finishes
    for sig in (signal.SIGINT, signal.SIGKILL, None):
        proc = launch(script, ["--resume", str(run)])
        if sig is None:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
            break
        code, err = stop_after_progress(proc, run, sig, delay=rng.uniform(0.0, 0.3))
        if code == -signal.SIGKILL:
            kills += 1
        elif code == 128 + signal.SIGINT:
            stops += 1
            assert f"continue with python {script}.py --resume {run}" in err, err
            # peft adapters at every checkpoint
            assert (run / "adapters" / "agent0" / "adapter_config.json").exists()
        else:
            assert code == 0, err  # it finished before the signal came
    assert kills >= 2 and stops == 1, (kills, stops)
    print(f"{script}: survived {kills} SIGKILLs and {stops} SIGINT")

    rows, expected = metrics(run), metrics(reference)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))  # each step exactly once
    for row, ref in zip(rows, expected):
        for key, value in ref.items():
            assert row[key] == pytest.approx(value, rel=1e-5, abs=1e-7), (row["step"], key)
    final, straight = adapters(run), adapters(reference)
    assert final.keys() == straight.keys() and len(final) >= 2
    for name in straight:
        for key, tensor in straight[name].items():
            assert torch.allclose(final[name][key], tensor, atol=1e-7, rtol=0), (name, key)
    assert any(t.abs().sum() > 0 for name in straight for k, t in straight[name].items()
               if "lora_B" in k)  # trained
