"""Fitting the ecosystem: --report-to trackers fed by log_metrics, samples.jsonl,
training_curves.png, a clean start (no bitsandbytes import without --quant, no transformers
FutureWarning), adapters that load with AutoPeftModelForCausalLM and their own tokenizer. Two tiny
CLI runs (cotrain, magrpo) serve most tests."""
import importlib.machinery
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import cotrain
from conftest import PAPER_PPO
from nanomarl.cli import parse_args
from nanomarl.models import CACHE_DIR, base_model_id, load_tokenizer
from nanomarl.runs import log_metrics
from nanomarl.trackers import finish_tracker, plot_run, run_curves, start_tracker

ROOT = Path(__file__).resolve().parents[1]

FAKE_WANDB = '''"""A stand-in for wandb: each call goes to $FAKE_TRACKER_LOG as a JSON line."""
import json, os


def _write(call, **data):
    with open(os.environ["FAKE_TRACKER_LOG"], "a") as f:
        f.write(json.dumps({"call": call, **data}) + "\\n")


class _Run:
    def log(self, metrics, step=None):
        _write("log", metrics=metrics, step=step)

    def finish(self):
        _write("finish")


def init(**kwargs):
    _write("init", **kwargs)
    return _Run()
'''

FAKE_BITSANDBYTES = '''import sys
sys.stderr.write("FAKE BITSANDBYTES IMPORTED\\n")
raise ImportError("the fake bitsandbytes of test_ecosystem")
'''


def run_cli(args: list[str], fakes: Path, tracker_log: Path) -> subprocess.CompletedProcess:
    """A script as a user starts it: no TRANSFORMERS_VERBOSITY (conftest sets it), the fakes first
    on the path."""
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_VERBOSITY"}
    env.update(PYTHONPATH=str(fakes), FAKE_TRACKER_LOG=str(tracker_log), PYTHONUNBUFFERED="1")
    result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, (f"{args} failed:\n{result.stdout[-3000:]}\n"
                                    f"{result.stderr[-3000:]}")
    return result


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def cotrain_run(tmp_path_factory, tiny_model_dir):
    """python cotrain.py on the tiny model, 2 updates, a sample every update, --report-to wandb with
    a fake wandb, and a fake bitsandbytes that says so on stderr if anything imports it."""
    tmp = tmp_path_factory.mktemp("cotrain")
    fakes = tmp / "fakes"
    (fakes / "wandb").mkdir(parents=True)
    (fakes / "wandb" / "__init__.py").write_text(FAKE_WANDB)
    (fakes / "bitsandbytes").mkdir()
    (fakes / "bitsandbytes" / "__init__.py").write_text(FAKE_BITSANDBYTES)
    run = tmp / "run"
    out = run_cli(["cotrain.py", "--model", "tiny", "--device", "cpu", *PAPER_PPO,
                   "--max-steps", "2", "--questions-per-update", "2", "--max-new-tokens", "6",
                   "--ppo-epochs", "1", "--lr", "1e-3", "--sample-every", "1", "--save-every", "0",
                   "--eval-questions", "2", "--report-to", "wandb", "--output-dir", str(run)],
                  fakes, tmp / "wandb_calls.jsonl")
    return dict(run=run, out=out, calls=read_jsonl(tmp / "wandb_calls.jsonl"),
                metrics=read_jsonl(run / "metrics.jsonl"))


def test_clean_start_no_bitsandbytes_no_future_warning(cotrain_run):
    out = cotrain_run["out"]
    text = out.stdout + out.stderr
    assert "FAKE BITSANDBYTES IMPORTED" not in text  # nothing imported bitsandbytes without --quant
    assert "gemm_4bit" not in text and "FutureWarning" not in text
    assert "is_gradient_checkpointing" not in text
    assert "done. metrics:" in out.stdout


def test_report_to_gets_the_rows_of_metrics_jsonl(cotrain_run):
    calls, metrics, run = cotrain_run["calls"], cotrain_run["metrics"], cotrain_run["run"]
    assert [c["call"] for c in calls] == ["init"] + ["log"] * len(metrics) + ["finish"]
    init = calls[0]
    assert init["mode"] == "offline" and init["dir"] == str(run) and init["project"] == "nanomarl"
    assert init["config"]["report_to"] == "wandb" and init["config"]["max_steps"] == 2
    assert [r["step"] for r in metrics if "objective/scores" in r] == [1, 2]  # training rows
    # held-out eval: before and after
    assert [r["step"] for r in metrics if "eval/turn2/accuracy" in r] == [0, 2]
    for call, row in zip(calls[1:], metrics):
        assert call["step"] == row["step"]
        assert call["metrics"] == {k: v for k, v in row.items() if k != "step"}  # the same numbers


def test_samples_jsonl_holds_every_debate_of_a_sampled_update(cotrain_run):
    rows, metrics = read_jsonl(cotrain_run["run"] / "samples.jsonl"), cotrain_run["metrics"]
    assert len(rows) == 2 * 2 * 2 * 2  # 2 updates x 2 questions x 2 turns x 2 agents
    for step, m in zip((1, 2), [m for m in metrics if "objective/scores" in m]):
        mine = [r for r in rows if r["step"] == step]
        pairs = sorted([(t, a) for t in (1, 2) for a in (0, 1)] * 2)
        assert sorted((r["turn"], r["agent"]) for r in mine) == pairs

        def mean(key):
            return sum(r[key] for r in mine) / len(mine)

        assert mean("score") == pytest.approx(m["objective/scores"], abs=1e-6)
        assert mean("penalized_score") == pytest.approx(m["objective/penalized_scores"], abs=1e-5)
        assert mean("reward") == pytest.approx(m["objective/rewards"], abs=1e-5)
    for r in rows:
        assert r["question"] in r["prompt"] and isinstance(r["response"], str) and r["gold"]
        assert r["correct"] == float(r["answer"] == r["gold"])
    assert "=== sample debate, update 2" in cotrain_run["out"].stdout


def test_training_curves_png_of_a_run(cotrain_run):
    png = cotrain_run["run"] / "training_curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    metrics = cotrain_run["metrics"]
    curves = run_curves(metrics)
    scores = [m["objective/scores"] for m in metrics if "objective/scores" in m]
    assert curves["reward"]["objective/scores"] == ([1, 2], scores)
    assert set(curves["training accuracy (%)"]) == {"turn1/accuracy", "turn2/accuracy"}
    headline = curves["held-out mean agent accuracy (%; step 0: untrained)"]
    key = "eval/turn2/agent_accuracy"
    assert headline[key] == ([0, 2], [m[key] for m in metrics if key in m])


def test_adapters_load_with_auto_peft_and_their_tokenizer(cotrain_run, tiny_model_dir):
    from peft import AutoPeftModelForCausalLM
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    folder = cotrain_run["run"] / "adapters" / "agent0"
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tiny_model_dir)  # tiny has no hub id: a folder
    model = AutoPeftModelForCausalLM.from_pretrained(folder)
    saved = load_file(folder / "adapter_model.safetensors")
    loaded = dict(model.named_parameters())
    lora_b = [k for k in saved if "lora_B" in k]
    assert lora_b and any(saved[k].abs().sum() > 0 for k in lora_b)  # trained (lora_B starts at 0)
    for key in lora_b:
        name = key.replace("lora_B.weight", "lora_B.default.weight")
        assert torch.equal(loaded[name].detach(), saved[key]), key
    tokenizer = AutoTokenizer.from_pretrained(folder)
    reference = load_tokenizer("tiny")
    assert tokenizer("2 + 3 = 5")["input_ids"] == reference("2 + 3 = 5")["input_ids"]
    assert tokenizer.pad_token == reference.pad_token
    assert tokenizer.chat_template == reference.chat_template
    trained_on = json.loads((folder / "trained_on.json").read_text())
    assert trained_on == dict(base="tiny", folder=str(tiny_model_dir),
                              adapter_config_base=str(tiny_model_dir))


def test_saving_adapters_of_a_hub_named_base_asks_the_hub_nothing(tmp_path, monkeypatch,
                                                                  tiny_model_dir):
    """An adapter whose config names a hub id (smollm2-135m's copy names its hub model): saved
    without a hub lookup and without a warning, and trained_on.json records the folder trained on."""
    import warnings

    import peft.utils.save_and_load

    import common
    from nanomarl import models

    def no_hub(*args, **kwargs):
        raise AssertionError("save_adapters asked the hub")

    monkeypatch.setattr(peft.utils.save_and_load, "check_file_exists_on_hf_hub", no_hub)
    monkeypatch.setattr(models, "base_model_id", lambda path: "HuggingFaceTB/SmolLM2-135M-Instruct")
    model = common.add_adapters(common.load_model("tiny"), ["agent0"], r=4, alpha=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        models.save_adapters(model, ["agent0"], tmp_path / "adapters")
    folder = tmp_path / "adapters" / "agent0"
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert json.loads((folder / "trained_on.json").read_text()) == dict(
        base="tiny", folder=str(tiny_model_dir),
        adapter_config_base="HuggingFaceTB/SmolLM2-135M-Instruct")


def test_evaluate_run_repeats_the_runs_held_out_evaluation(cotrain_run, tmp_path):
    """`python evaluate.py --run RUN`, nothing else typed: the run's own held-out setting (its
    agents, turns, 6 tokens, 2 questions, greedy, the untrained and trained teams and their
    controls, not evaluate.py's 3 x 3, 300 tokens, sampled, with an SFT baseline) and so the
    numbers the training logged before its first update and after its last."""
    from conftest import run_script

    result = run_script(["evaluate.py", "--run", str(cotrain_run["run"]), "--output-dir",
                         str(tmp_path / "eval")], timeout=300)
    out = result.stdout
    assert f"evaluating as {cotrain_run['run']}'s held-out evaluation" in out
    # each method first says what it runs, then a bar counts its questions
    assert "maporl: 2 questions, 2 agents x 2 turns, greedy, up to 6 tokens an answer" in out
    assert "sc-maporl: 2 questions, one agent alone, 4 sampled answers each" in out
    assert "maporl: 100%" in result.stderr and "control: 100%" in result.stderr
    assert "2/2 [" in result.stderr
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    used = results["args"]
    assert (used["model"], used["num_agents"], used["num_turns"], used["max_new_tokens"],
            used["limit"], used["split"], used["greedy"]) == ("tiny", 2, 2, 6, 2, "test", True)
    methods = results["methods"]
    assert list(methods) == ["offtheshelf", "maporl", "sc-base", "sc-maporl"]
    evals = [row for row in cotrain_run["metrics"] if "eval/tokens_per_question" in row]
    assert [row["step"] for row in evals] == [0, 2]
    for (debate, control), row in zip((("offtheshelf", "sc-base"), ("maporl", "sc-maporl")), evals):
        m, sc = methods[debate], methods[control]
        assert m["accuracy"]["mean_agent"] == [row[f"eval/turn{t}/agent_accuracy"] for t in (1, 2)]
        assert m["accuracy"]["majority"] == [row[f"eval/turn{t}/accuracy"] for t in (1, 2)]
        assert m["tokens_per_question"] == row["eval/tokens_per_question"] <= 2 * 2 * 6
        assert m["prompt_tokens_per_question"] == row["eval/prompt_tokens_per_question"]
        for key in ("vote_accuracy", "tokens_per_question", "budget_vote_accuracy",
                    "budget_samples"):
            assert sc[key] == row[f"eval/sc/{key}"], (control, key)


def test_base_model_id_names_the_hub_model_behind_an_alias():
    local_smollm2 = str(CACHE_DIR / "smollm2-135m-instruct")  # the folder _smollm2_folder() writes
    assert base_model_id(local_smollm2) == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert base_model_id("Qwen/Qwen2.5-3B-Instruct") == "Qwen/Qwen2.5-3B-Instruct"
    assert base_model_id("/data/my-model") == "/data/my-model"


def test_quantised_load_after_a_plain_one_still_gets_4bit_lora():
    """hide_bitsandbytes_unless_quantised hides bitsandbytes from peft's first import without
    --quant; a 4-bit load later in the same process must still get bitsandbytes' LoRA layers (peft's
    cached answer is cleared)."""
    pytest.importorskip("bitsandbytes", reason="--quant 4bit needs bitsandbytes")
    code = textwrap.dedent("""
        import sys, common
        plain = common.add_adapters(common.load_model("tiny"), ["a"])
        assert "bitsandbytes" not in sys.modules, "imported without --quant"
        q = common.add_adapters(common.load_model("tiny", quant="4bit"), ["a"])
        print(type(q.base_model.model.model.layers[0].self_attn.q_proj).__module__,
              type(q.base_model.model.model.layers[0].self_attn.q_proj).__name__)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ["peft.tuners.lora.bnb", "Linear4bit"]


def test_report_to_refuses_a_typo_and_a_missing_package(monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit) as error:
        parse_args(cotrain.Args, ["--report-to", "wandbb"])
    assert error.value.code == 2 and "tensorboard" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "trackio", None)  # find_spec -> None: as if not installed
    args = parse_args(cotrain.Args, ["--model", "tiny", "--report-to", "trackio",
                                     "--output-dir", str(tmp_path / "new")])
    with pytest.raises(SystemExit) as error:
        cotrain.main(args)
    assert error.value.code == 2 and not (tmp_path / "new").exists()  # refused before the folder
    assert capsys.readouterr().err.strip() == ("error: --report-to: trackio is not installed "
                                               "(pip install trackio, or --report-to none)")


def test_trackio_gets_the_rows_at_their_step(monkeypatch, tmp_path):
    """trackio is a module-level API (init/log/finish); the same rows as metrics.jsonl, `step` as
    its step."""
    calls = []
    fake = type(sys)("trackio")
    fake.init = lambda **kwargs: calls.append(("init", kwargs["project"], kwargs["name"]))
    fake.log = lambda metrics, step=None: calls.append(("log", metrics, step))
    fake.finish = lambda: calls.append(("finish",))
    fake.__spec__ = importlib.machinery.ModuleSpec("trackio", loader=None)  # find_spec finds it
    monkeypatch.setitem(sys.modules, "trackio", fake)
    start_tracker("trackio", tmp_path, {"lr": 0.1})
    rows = [{"step": 0, "eval/turn1/accuracy": 0.25},
            {"step": 1, "objective/scores": torch.tensor(0.5)}]
    for row in rows:
        log_metrics(tmp_path, row)
    finish_tracker()
    log_metrics(tmp_path, {"step": 2, "objective/scores": 1.0})  # after finish: metrics.jsonl only
    assert calls == [("init", "nanomarl", tmp_path.name), ("log", {"eval/turn1/accuracy": 0.25}, 0),
                     ("log", {"objective/scores": 0.5}, 1), ("finish",)]
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 1, 2]


# ------------------------------------------------------ magrpo: samples.jsonl and tensorboard


@pytest.fixture(scope="module")
def magrpo_run(tmp_path_factory, tiny_model_dir):
    """python magrpo.py on the tiny model, 2 steps, a sample every step; --report-to tensorboard
    when installed."""
    tmp = tmp_path_factory.mktemp("magrpo")
    data = tmp / "tldr.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"post {i}"}) + "\n" for i in range(3)))
    run = tmp / "run"
    report_to = "tensorboard" if importlib.util.find_spec("tensorboard") else "none"
    out = run_cli(["magrpo.py", "--model", "tiny", "--num-generations", "2",
                   "--max-new-tokens", "8", "--sandbox-workers", "1", "--dataset", f"jsonl:{data}",
                   "--max-steps", "2", "--sample-every", "1",
                   "--save-every", "2", "--report-to", report_to, "--output-dir", str(run)],
                  tmp, tmp / "unused.jsonl")
    return dict(run=run, out=out, metrics=read_jsonl(run / "metrics.jsonl"), report_to=report_to)


def test_magrpo_samples_jsonl_holds_every_joint_action(magrpo_run):
    rows, metrics = read_jsonl(magrpo_run["run"] / "samples.jsonl"), magrpo_run["metrics"]
    assert [r["step"] for r in rows] == [1, 1, 2, 2]  # 1 tree x G = 2 joint actions per step
    for step, m in zip((1, 2), [m for m in metrics if "reward/mean" in m]):
        mine = [r for r in rows if r["step"] == step]
        assert [r["joint_action"] for r in mine] == [0, 1] and all(r["turn"] == 1 for r in mine)
        assert sum(r["reward"] for r in mine) / 2 == pytest.approx(m["reward/mean"], abs=1e-9)
        for level, value in mine[0]["levels"].items():
            total = sum(r["levels"][level] for r in mine)
            assert total / 2 == pytest.approx(m[f"reward/{level}"], abs=1e-9)
        for r in mine:
            assert len(r["prompts"]) == len(r["completions"]) == 2
            assert r["problem"] == mine[0]["problem"]
            assert r["return"] == pytest.approx(r["reward"])  # one turn: the return is the reward
    assert "--- step 2: problem" in magrpo_run["out"].stdout
    assert (magrpo_run["run"] / "training_curves.png").stat().st_size > 10_000


def test_tensorboard_gets_the_numbers_of_metrics_jsonl(magrpo_run):
    if magrpo_run["report_to"] != "tensorboard":
        pytest.skip("tensorboard is not installed (pip install tensorboard)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(magrpo_run["run"] / "tensorboard"))
    events.Reload()
    metrics = magrpo_run["metrics"]
    numbers = {k for row in metrics for k, v in row.items()
               if k != "step" and isinstance(v, (int, float))}
    assert set(events.Tags()["scalars"]) == numbers
    for key in ("reward/mean", "agent0/loss", "objective/kl"):
        logged = [(e.step, e.value) for e in events.Scalars(key)]
        expected = [(row["step"], pytest.approx(row[key], rel=1e-6, abs=1e-7))
                    for row in metrics if key in row]
        assert logged == expected, key


# ------------------------------------------- training_curves.png from a synthetic metrics.jsonl


def synthetic_rows() -> list[dict]:
    """What the trainers log: eval rows (step 0 = before any update), training rows, and noise to
    leave out."""
    return [
        {"step": 0, "eval/turn1/accuracy": 0.2, "eval/turn2/accuracy": 0.25,
         "eval/turn2/agent_accuracy": 0.3, "eval/num_questions": 50,
         "eval/turn2/wrong_to_right": 0.1, "timing/eval_s": 9.0},
        {"step": 1, "objective/scores": 0.1, "objective/rewards": -1.0, "turn1/accuracy": 0.0,
         "turn2/accuracy": 0.5, "objective/kl": 0.0, "loss/policy": 0.3, "loss/value": 2.0,
         "timing/step_s": 4.0, "lr": 1e-5},
        {"step": 2, "objective/scores": 0.4, "objective/rewards": float("nan"),
         "turn1/accuracy": 0.5, "turn2/accuracy": 1.0, "objective/kl": 0.02, "loss/policy": "n/a",
         "loss/value": 1.5},
        {"step": 2, "eval/turn1/accuracy": 0.3, "eval/turn2/accuracy": 0.45,
         "eval/turn2/agent_accuracy": 0.5},
        {"objective/scores": 9.0},  # no step: left out
        {"step": 3, "reward/mean": 0.5, "eval/reward/mean": 0.7, "eval/reward/syntax": 1.0,
         "eval/pass_rate": 0.25, "agent0/loss": -0.1, "reward/max": 2.0},
    ]


def test_run_curves_extracts_the_series():
    curves = run_curves(synthetic_rows())
    held_out = ["held-out mean agent accuracy (%; step 0: untrained)",
                "held-out vote, the authors' tie rule (%)",
                "held-out pass rate, accuracy (%; step 0: untrained)",
                "held-out reward, calibration (step 0: untrained)", "held-out reward levels"]
    assert list(curves) == ["reward", "training accuracy (%)", "KL to the reference (nats)", "loss",
                            *held_out]
    assert curves["reward"] == {"objective/scores": ([1, 2], [0.1, 0.4]),
                                "objective/rewards": ([1], [-1.0]), "reward/mean": ([3], [0.5])}
    assert curves["training accuracy (%)"] == {"turn1/accuracy": ([1, 2], [0.0, 0.5]),
                                           "turn2/accuracy": ([1, 2], [0.5, 1.0])}
    assert curves["KL to the reference (nats)"] == {"objective/kl": ([1, 2], [0.0, 0.02])}
    assert curves["loss"] == {"loss/policy": ([1], [0.3]), "loss/value": ([1, 2], [2.0, 1.5]),
                              "agent0/loss": ([3], [-0.1])}
    # the headline first (the mean agent), the vote beside it; rates apart from rewards
    assert curves[held_out[0]] == {"eval/turn2/agent_accuracy": ([0, 2], [0.3, 0.5])}
    assert curves[held_out[1]] == {"eval/turn1/accuracy": ([0, 2], [0.2, 0.3]),
                                   "eval/turn2/accuracy": ([0, 2], [0.25, 0.45])}
    assert curves[held_out[2]] == {"eval/pass_rate": ([3], [0.25])}
    assert curves[held_out[3]] == {"eval/reward/mean": ([3], [0.7])}
    assert curves["held-out reward levels"] == {"eval/reward/syntax": ([3], [1.0])}
    assert run_curves([{"step": 1, "timing/step_s": 1.0}]) == {}


def test_plot_run_and_plot_cli_draw_the_png(tmp_path, monkeypatch):
    plt = pytest.importorskip("matplotlib.pyplot", reason="plots need matplotlib")
    import matplotlib.figure

    run = tmp_path / "run"
    run.mkdir()
    torn = '{"step": 4, "tor'
    rows = "".join(json.dumps(r) + "\n" for r in synthetic_rows())
    (run / "metrics.jsonl").write_text(rows + torn)
    drawn, savefig = [], matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda fig, *args, **kw: drawn.append(fig) or savefig(fig, *args, **kw))
    path = plot_run(run)
    axes = {ax.get_title(): ax for ax in drawn[0].axes if ax.get_title()}
    headline = axes["held-out mean agent accuracy (%; step 0: untrained)"]
    assert headline.get_ylim() == (0, 100)  # accuracy in %, the axis pinned to 0-100
    assert list(headline.lines[0].get_ydata()) == pytest.approx([30, 50])
    assert axes["loss"].get_ylim() != (0, 100)
    assert path == run / "training_curves.png"
    image = plt.imread(path)
    assert image.shape[:2] == (1080, 1500)  # 9 panels: 3 rows x 3 columns of 5 x 3.6 in, 100 dpi
    assert image[..., :3].std() > 0.05  # not blank
    path.unlink()
    out = subprocess.run([sys.executable, "plot.py", "--run", str(run)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == f"training curves: {path}", out.stderr
    assert path.stat().st_size > 10_000
    import plot

    with pytest.raises(SystemExit) as error:
        plot.main(plot.Args(run=str(tmp_path / "nothing")))
    assert error.value.code == 2 and str(error.value).startswith("error: --run: ")
