"""bench.py runs on the tiny model and its figures are consistent (no timing is asserted: speed is measured in
bench.py itself, never asserted in tests)."""
import json
import subprocess
import sys

import pytest

import common
from conftest import run_script


def test_bench_speed_and_memory_on_the_tiny_model(tmp_path):
    out = tmp_path / "bench"
    result = run_script(["bench.py", "--models", "tiny", "--parts", "speed,memory", "--agents", "2", "--questions",
                         "2", "--max-new-tokens", "4", "--turns", "2", "--repeats", "1", "--output-dir", str(out)],
                        timeout=300)
    # each part says what it measures, and a bar counts the parts
    assert "== speed on tiny" in result.stdout + result.stderr
    assert "== memory on tiny" in result.stdout + result.stderr
    assert "2/2 [" in result.stderr and "bench: 100%" in result.stderr
    report = json.loads((out / "bench.json").read_text())
    entry = report["models"]["tiny"]
    rollout, training = entry["rollout"][0], entry["training"][0]
    # A x B rows, and min_new_tokens = max_new_tokens: every row generates exactly 4 tokens in every variant
    assert rollout["rows"] == 4 and rollout["tokens"] == 16
    assert rollout["sampled_rows"] == 4 * 4  # K = 4 samples of each row (--samples' default)
    assert rollout["shared_prefill_speedup"] == pytest.approx(
        rollout["seconds"]["sampled_every_prefill"]["median"] / rollout["seconds"]["sampled_shared_prefill"]["median"])
    for key in ("mixed", "per_agent", "ceiling", "base_generate", "one_adapter_generate", "sampled_shared_prefill",
                "sampled_every_prefill"):
        s = rollout["seconds"][key]
        assert 0 < s["min"] <= s["median"] <= s["max"]
    assert rollout["speedup"] == pytest.approx(rollout["seconds"]["per_agent"]["median"]
                                               / rollout["seconds"]["mixed"]["median"])
    assert rollout["fraction_of_ceiling"] == pytest.approx(rollout["mixed_tok_s"] / rollout["ceiling_tok_s"])
    assert training["rows"] == 4 and training["padding_overhead"] >= 1.0
    assert set(training["seconds"]) == {"batched", "one_at_a_time", "mixed_batch"}
    # memory: the trainable parameter counts of the three layouts, against the model itself
    memory = entry["memory_mb"]
    model = common.add_adapters(common.load_model("tiny"), ["agent0"], r=8, alpha=16)
    per_adapter = sum(p.numel() for p in common.adapter_parameters(model, "agent0"))
    base = sum(p.numel() for n, p in model.named_parameters() if ".lora_" not in n)
    hidden = common.hidden_size(model)
    assert memory["one-adapter"]["trainable_params"] == per_adapter
    # A x T agent-turn adapters + the critic adapter + T value heads (Linear(hidden, 1))
    assert memory["agent-turn-adapters"]["trainable_params"] == (2 * 2 + 1) * per_adapter + 2 * (hidden + 1)
    assert memory["full-copies"]["trainable_params"] == 2 * base
    for layout in ("one-adapter", "agent-turn-adapters", "full-copies"):
        assert memory[layout]["peak_mb"] >= memory[layout]["loaded_mb"] > 0
    assert memory["adapters_vs_one_adapter"] == pytest.approx(memory["agent-turn-adapters"]["peak_mb"]
                                                              / memory["one-adapter"]["peak_mb"])


def test_bench_rejects_unknown_parts(repo_root):
    done = subprocess.run([sys.executable, "bench.py", "--parts", "speed,sped"], cwd=repo_root, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0 and "--parts" in done.stderr and "'speed,sped'" in done.stderr


def test_bench_refuses_an_unwritable_output_dir_before_measuring(repo_root):
    done = subprocess.run([sys.executable, "bench.py", "--parts", "sandbox", "--output-dir",
                           "/proc/nanomarl-no/bench"], cwd=repo_root, capture_output=True, text=True,
                          timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: --output-dir: cannot write to /proc/nanomarl-no/bench")
    assert "== sandbox" not in done.stdout + done.stderr  # nothing was measured


def test_bench_cpu_roofline_on_the_tiny_model(tmp_path):
    """The cpu part: the machine's bandwidth and FLOP/s measured, the rollout's two bounds from the
    model's own weights and tokens, and each path's fraction of the tighter one."""
    out = tmp_path / "bench"
    result = run_script(["bench.py", "--models", "tiny", "--parts", "cpu", "--cpu-rows", "4",
                         "--max-new-tokens", "3", "--repeats", "1", "--cpu-stage-updates", "0",
                         "--output-dir", str(out)], timeout=300)
    assert "== cpu roofline on tiny" in result.stdout + result.stderr
    entry = json.loads((out / "bench.json").read_text())["models"]["tiny"]["cpu"]
    model = common.add_adapters(common.load_model("tiny"), ["agent0", "agent1"], r=8, alpha=16)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    params = sum(p.numel() for p in model.parameters())
    assert entry["rows"] == 4 and entry["tokens"] == 12 and entry["prompt_tokens"] > 0
    assert entry["read_bound_s"] == pytest.approx(3 * weight_bytes / (entry["bandwidth_gb_s"] * 1e9))
    assert entry["flop_bound_s"] == pytest.approx(
        2 * params * (12 + entry["prompt_tokens"]) / (entry["matmul_gflop_s"] * 1e9))
    bound = max(entry["read_bound_s"], entry["flop_bound_s"])
    assert entry["bound_tok_s"] == pytest.approx(12 / bound)
    for path in ("fast", "plain"):
        seconds = entry[path]["seconds"]["median"]
        assert entry[path]["tok_s"] == pytest.approx(12 / seconds)
        assert entry[path]["of_bound"] == pytest.approx(bound / seconds)
    # the products alone: every base Linear once a step (the tied head counted as a product)
    base = model.get_base_model()
    product_bytes = 4 * (base.lm_head.weight.numel() + sum(
        p.numel() for n, p in base.named_parameters()
        if n.endswith(("proj.weight", "proj.base_layer.weight"))))
    assert entry["products_gb_s"] == pytest.approx(product_bytes * 3 / entry["products_s"] / 1e9)


def test_bench_cpu_stages_of_a_default_update_and_evaluation(tmp_path):
    """The cpu part's second half: cotrain.py at its defaults (tiny model, 2 held-out questions)
    for one update, the update and the held-out evaluation timed stage by stage: every stage of
    the default path appears, the shares sum to one, the stages' calls are the update's counts,
    and the generate calls are the rollout's and the evaluation's rows."""
    out = tmp_path / "bench"
    result = run_script(["bench.py", "--models", "tiny", "--parts", "cpu", "--cpu-rows", "2",
                         "--max-new-tokens", "2", "--repeats", "1", "--cpu-stage-updates", "1",
                         "--cpu-stage-flags", "--eval-questions 2", "--output-dir", str(out)],
                        timeout=300)
    assert "== cpu stages on tiny" in result.stdout + result.stderr
    stages = json.loads((out / "bench.json").read_text())["models"]["tiny"]["cpu"]["stages"]
    assert stages["command"].startswith("cotrain.py --model tiny --device cpu --max-steps 1")
    assert len(stages["updates"]) == 1 and len(stages["evaluations"]) == 2  # before and after
    update, evaluation = stages["update"]["stages"], stages["evaluation"]["stages"]
    assert list(update) == [  # --advantage group: no values; π_old as sampled: no forward
        "1 rollout: prompts, decoding, answers", "1 rollout: generate, turn 1",
        "1 rollout: generate, turn 2", "1 rollout: log-probs and entropy of the samples",
        "2 scorer", "2-3 format gate, penalties, rewards", "4 reference log-probs: forwards",
        "5 KL-shaped rewards, advantages", "5 KL check", "6 PPO: forwards", "6 PPO: losses",
        "6 PPO: backwards", "6 PPO: gradient norms, clipping", "6 PPO: optimiser steps",
        "6 PPO: shuffle, zero_grad, statistics"]
    # held-out debates compute no log-probs (generate(logprobs=False)): no such stage
    required = ["debate: prompts, decoding, answers", "debate: generate, turn 1",
                "debate: generate, turn 2", "debate: metrics",
                "split controls (arith:split)", "control: prompts, decoding, answers",
                "control: generate, round 1",
                "control: collecting the answers", "control: token counts, metrics"]
    assert set(required) <= set(evaluation) <= set(required) | {"control: generate, round 2"}
    for record in (stages["update"], stages["evaluation"]):
        assert sum(s["share"] for s in record["stages"].values()) == pytest.approx(1.0)
        assert sum(s["seconds"] for s in record["stages"].values()) == pytest.approx(
            record["seconds"])
    # 2 epochs x 8 micro-batches of one debate (B 2 x K 4); 2 epochs x one step per agent
    assert update["6 PPO: backwards"]["calls"] == update["6 PPO: losses"]["calls"] == 16
    assert update["6 PPO: optimiser steps"]["calls"] == 4
    assert update["6 PPO: gradient norms, clipping"]["calls"] == 4
    assert update["2 scorer"]["calls"] == 2 and update["5 KL check"]["calls"] == 1
    # the timed update sits inside cotrain's own timing/step_s, which also computes its metrics
    assert stages["update"]["seconds"] <= stages["logged"]["timing/step_s"][0] + 0.01
    calls = {(c["during"], c["stage"]): c for c in stages["generate_calls"]}
    for turn in (1, 2):  # 8 debates x 2 agents; 2 questions x 2 agents
        assert calls[("update 1", f"1 rollout: generate, turn {turn}")]["rows"] == 16
        assert calls[("evaluation 2", f"debate: generate, turn {turn}")]["rows"] == 4
    assert calls[("evaluation 2", "control: generate, round 1")]["rows"] == 8  # A x T answers
    for c in stages["generate_calls"]:
        assert c["longest"] <= c["steps"] <= 48 and c["without_eos"] <= c["rows"]
        assert c["generated_tokens"] <= c["rows"] * c["steps"] and c["prompt_tokens"] > 0


def test_bench_sandbox_against_a_revision(tmp_path, repo_root):
    """--sandbox-against: the revision's own sandbox (its exported files, in a subprocess of its
    own) timed beside this tree's; each passes the canonical solutions and fails `return None`."""
    out = tmp_path / "bench"
    result = run_script(["bench.py", "--parts", "sandbox", "--sandbox-programs", "3",
                         "--repeats", "1", "--sandbox-against", "HEAD", "--output-dir", str(out)],
                        timeout=300)
    report = json.loads((out / "bench.json").read_text())["sandbox"]
    this, head = report["sandbox"], report["against"]["HEAD"]
    assert report["programs"] == 3 and list(report["against"]) == ["HEAD"]
    for entry in (this, head):
        assert entry["passed"] == 3 and entry["return_none_passed"] == 0
        assert entry["programs_per_s"] == pytest.approx(3 / entry["seconds"]["median"])
        assert entry["programs_per_s"] > 0
    # each sandbox ran from its own files
    assert this["module"] == str(repo_root / "nanomarl" / "sandbox.py")
    assert head["module"] == str(out.resolve() / "revisions" / "HEAD" / "nanomarl" / "sandbox.py")
    assert head["ratio"] == pytest.approx(this["programs_per_s"] / head["programs_per_s"])
    assert "(3/3 passed; return None: 0/3 passed)" in result.stdout
    assert f"sandbox of HEAD: {head['programs_per_s']:.1f} programs/s" in result.stdout
    assert f"this tree x{head['ratio']:.2f} of HEAD's" in result.stdout
