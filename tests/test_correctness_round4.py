"""Correctness, round 4: each test fails on the code it guards when that code is put back wrong.

evaluate.py's --seed draws samples, not questions; the cooperation bonus counts a call of aux, not a
mention; merge_adapter.py merges onto the agent's own base; --advantage-std scales the final
rewards, not the KL penalty's noise; disagreements.py reads a samples file with the controls' rows;
the script's process-group teardown leaves vLLM's group to vLLM; a --models run's closing line
names the adapter folders it wrote. (The vLLM freshness and the --use-vllm runs: test_vllm.py.)"""
import json
import math
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import cotrain
import evaluate
from nanomarl import sample_metrics
from nanomarl.cli import parse_args
from nanomarl.tasks.code import calls_aux, code_reward
from nanomarl.tasks.debate import load_task
from test_evaluate import _docs_script
from test_magrpo_rewards import ADD, AUX

# ---------------------------------------------------------------- evaluate.py: --seed samples only


def evaluate_debates(tmp_path, *flags) -> tuple[dict, list[dict]]:
    """A small sampled evaluate.py --mode debate run of the untrained pair: results.json and its
    samples.jsonl rows."""
    out = tmp_path / "-".join(flags)
    evaluate.main(parse_args(evaluate.Args, [
        "--model", "tiny", "--methods", "offtheshelf", "--limit", "3", "--num-agents", "2",
        "--num-turns", "2", "--max-new-tokens", "8", "--temperature", "1.0", "--device", "cpu",
        "--output-dir", str(out), *flags]))
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return json.loads((out / "results.json").read_text()), rows


def test_evaluate_seed_samples_other_answers_to_the_same_questions(tmp_path, tiny_model_dir):
    drawn = lambda seed: [dict(id=r["id"], question=r["question"], answer=r["answer"])  # noqa: E731
                          for r in load_task("arith:digits", "test", 3, seed=seed)]
    first, first_rows = evaluate_debates(tmp_path, "--seed", "0")
    second, second_rows = evaluate_debates(tmp_path, "--seed", "1")
    assert first["questions"] == second["questions"] == drawn(0)
    assert [r["question"] for r in second_rows] == [q["id"] for q in drawn(0)]
    assert [r["responses"] for r in first_rows] != [r["responses"] for r in second_rows]
    assert second["dataset_source"] == dict(dataset="arith:digits", split="test", question_seed=0,
                                            limit=3)
    other, _ = evaluate_debates(tmp_path, "--question-seed", "1")
    assert other["questions"] == drawn(1) != drawn(0)


# ---------------------------------------------------- the cooperation bonus: a call, not a mention

SOLVES_ALONE = ('def add(a, b):\n    """Could return aux(a, b); adds them itself."""\n'
                '    # aux(a, b) would do the same\n    return a + b\n')


def test_a_mention_of_aux_earns_no_cooperation_bonus(tmp_path):
    total, levels = code_reward(AUX, SOLVES_ALONE, ADD, timeout=2.0, memory_mb=256)
    assert levels["cooperation"] == 0.0 and total == pytest.approx(0.4 + 0.6 + 0.5 + 1.0)
    # the authors' extraction keeps their regex: the mention pays 0.5 + 1.0 (not a wrapper)
    total, levels = code_reward(AUX, SOLVES_ALONE, ADD, timeout=2.0, memory_mb=256,
                                extraction="authors")
    assert levels["cooperation"] == 1.5 and total == pytest.approx(4.0)
    # one definition for every metric: the bonus (cooperation_rate, MaxCoop), the scheme, helper_use
    problem = dict(ADD, kind="code")
    sample = evaluate.score_sample(problem, [AUX, SOLVES_ALONE], timeout=2.0, memory_mb=256)
    assert sample["bonus"] == 0.0 and sample["scheme"] == "aux-unused"
    metrics = sample_metrics.code_metrics([[sample]], [1])
    assert metrics["cooperation_rate"] == 0.0 and metrics["maxcoop@1"] == 0.0
    use = _docs_script("helper_use")
    spec = '    """Add.\n    >>> aux(1, 2)\n    3\n    """'
    row = dict(texts=[AUX, SOLVES_ALONE], levels=dict(tests_passed=3))
    assert use.helper_use(row, dict(problem, aux_spec=spec)) == {
        "main calls aux": False, "aux right": True, "both": False, "a test passed": True}


@pytest.mark.parametrize("main, calls", [
    ("def f(x):\n    return aux(x) + 1\n", True),
    ("def f(x):\n    return [aux(y) for y in x]\n", True),
    ("def f(x):\n    s = 'aux(x)'\n    return s\n", False),          # a string
    ("def f(x):\n    # aux(x)\n    return x\n", False),                # a comment
    ("def f(x):\n    def aux(y):\n        return y\n    return aux(x)\n", False),  # its own aux
    ("def f(x, aux=len):\n    return aux(x)\n", False),              # a parameter named aux
    ("def f(x):\n    return helper.aux(x)\n", False),                # another object's aux
    ("def f(x:\n    return aux(x)\n", False),                        # does not parse
])
def test_calls_aux_by_hand(main, calls):
    assert calls_aux(main) is calls
    assert calls_aux("def f(x):\n    # aux(x)\n    return x\n", "authors")  # the authors' regex


# --------------------------------------------------------- merge_adapter.py: the agent's own base


def two_base_run(tmp_path, tiny_model_dir):
    """A cotrain.py --models STRONG,TINY run folder as save_state writes it (args.json's --model
    is the default, not agent 0's base), agent 0's adapter trained on STRONG (a second tiny
    model)."""
    from common import add_adapters, load_model
    from nanomarl.models import build_tiny_model, save_adapters

    strong = build_tiny_model(tmp_path / "strong-base", seed=1)
    run = tmp_path / "run"
    run.mkdir()
    (run / "args.json").write_text(json.dumps(dict(model=str(tiny_model_dir),
                                                   models=f"{strong},{tiny_model_dir}")))
    (run / "debate.json").write_text(json.dumps(dict(
        models=[str(strong), str(tiny_model_dir)], adapters=[["agent0", "agent1"]] * 2,
        adapter_dirs=["adapters_base0", "adapters_base1"])))
    model = add_adapters(load_model(str(strong)), ["agent0"])
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B.agent0" in name:
            p.data.normal_(0, 0.5)
    save_adapters(model, ["agent0"], run / "adapters_base0")
    return run, strong, model


def test_merge_adapter_merges_onto_the_agents_own_base(tmp_path, tiny_model_dir):
    from common import load_model

    run, strong, model = two_base_run(tmp_path, tiny_model_dir)
    _docs_script("merge_adapter").merge_adapter(str(run / "adapters_base0" / "agent0"),
                                                str(tmp_path / "merged"))
    ids = torch.tensor([[1, 5, 9, 12, 3]])
    with torch.no_grad():
        expected = model(ids).logits
        merged = load_model(str(tmp_path / "merged"))(ids).logits
        other_base = load_model(str(tiny_model_dir))(ids).logits
    assert (expected - other_base).abs().max() > 1e-2  # the two bases differ
    torch.testing.assert_close(merged, expected, atol=1e-5, rtol=1e-5)


def test_merge_adapter_refuses_a_run_that_names_another_base(tmp_path, tiny_model_dir):
    run, strong, _ = two_base_run(tmp_path, tiny_model_dir)
    info = json.loads((run / "debate.json").read_text())
    info["models"][0] = str(tiny_model_dir)  # the run says TINY, the adapter's config STRONG
    (run / "debate.json").write_text(json.dumps(info))
    with pytest.raises(SystemExit, match=f"was saved on the base {strong}, but its run names"):
        _docs_script("merge_adapter").merge_adapter(str(run / "adapters_base0" / "agent0"),
                                                    str(tmp_path / "merged"))
    assert not (tmp_path / "merged").exists()


# ---------------------------------------- --advantage-std: the final rewards' spread, not the KL's


def test_group_advantages_of_ties_are_exactly_zero():
    """Whatever the group mean rounds to (the float32 mean of three 0.9s is 6e-8 off 0.9), and
    with --advantage-std (a whole batch of ties: 0, not that rounding over its std)."""
    ties = torch.full((6,), 0.9)
    assert (ties.reshape(2, 3) - ties.reshape(2, 3).mean(1, keepdim=True)).abs().max() > 0
    assert cotrain.group_advantages(ties, 3).tolist() == [0.0] * 6
    assert cotrain.group_advantages(ties, 3, std=True).tolist() == [0.0] * 6
    mixed = cotrain.group_advantages(torch.tensor([0.9, 0.9, 0.9, 1.0, 0.0, 0.5]), 3)
    assert mixed[:3].tolist() == [0.0] * 3
    torch.testing.assert_close(mixed[3:], torch.tensor([0.5, -0.5, 0.0]))


def test_advantage_std_leaves_the_kl_penalty_at_its_size():
    """make_experience with --advantage-std on debates whose final rewards all tie (a constant
    score): the advantages are each response's summed KL penalty less its question's mean, ~1e-4,
    not that noise over its own std (~1); and with a score that differs, the final rewards' part
    over its std plus the KL part unscaled, by hand from the experience's own tensors."""
    from test_cotrain import ascii_fraction, tiny_args

    torch.manual_seed(0)
    args = tiny_args("--advantage", "group", "--samples-per-question", "2", "--temperature", "1.0",
                     "--advantage-std", "--kl-coef", "0.05")
    team = cotrain.build_team(args, "cpu")
    records = [r for r in load_task("arith", "train", limit=2) for _ in range(2)]
    with torch.no_grad():  # the adapters away from the base: a KL to the reference that is not 0
        for name, p in team.bases[0].named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.05)
    centred = lambda x: x - x.reshape(2, 2).mean(1).repeat_interleave(2)  # noqa: E731
    constant = lambda recs, responses: torch.full((len(responses),), 0.5)  # noqa: E731
    _, exp, r = cotrain.rollout_step(team, args, records, constant)
    for (t, a), e in exp.items():
        assert r["rewards"][:, t, a].unique().numel() == 1  # every final reward ties
        kl = centred(-args.kl_coef * e.kl.sum(1))
        assert 0 < kl.abs().max() < 0.05
        torch.testing.assert_close(e.advantages[:, 0], kl, atol=1e-6, rtol=0)
    torch.manual_seed(1)
    _, exp, r = cotrain.rollout_step(team, args, records, ascii_fraction)
    for (t, a), e in exp.items():
        final = centred(r["rewards"][:, t, a])
        scaled = final / final.std() if final.abs().max() > 0 else final
        expected = scaled + centred(-args.kl_coef * e.kl.sum(1))
        torch.testing.assert_close(e.advantages[:, 0], expected, atol=1e-5, rtol=1e-4)


# ---------------------------------------------- disagreements.py on a file with the controls' rows


def test_disagreements_reads_a_samples_file_with_the_controls(tmp_path, capsys):
    rows = [dict(method="maporl", gold="9", answers=[["9", "8"], ["8", "9"]]),
            dict(method="sc-maporl", gold="9", answers=[["9", "8", "9", "9", "7", "9"]]),
            dict(method="sc-base", gold="9", answers=[[None, "9", "8", "8"]])]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _docs_script("disagreements").main([str(tmp_path / "samples.jsonl")])
    assert capsys.readouterr().out.splitlines()[2:] == [
        "| maporl | own right, partner wrong | 1 | 0 (0 %) | 1 (100 %) | 0 (0 %) | 0 (0 %) |",
        "| maporl | own wrong, partner right | 1 | 0 (0 %) | 1 (100 %) | 0 (0 %) | 1 (100 %) |"]


# ------------------------------------------------------- teardown: vLLM's process group is vLLM's

ENGINE_STUB = """
import atexit, os, sys, tempfile
import torch.distributed as dist
sys.path.insert(0, os.environ["REPO"])
from nanomarl.distributed import finish_distributed, init_distributed
init_distributed()  # a plain `python script.py`: no group of the script's own
# what a vLLM engine in this process does: a world of one, a subgroup, both destroyed at its exit
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
subgroup = dist.new_group([0])
atexit.register(lambda: (dist.destroy_process_group(subgroup), dist.destroy_process_group()))
finish_distributed()  # the script's last line (cotrain_run.finish_run, magrpo.main)
print("done")
"""


def test_the_scripts_teardown_leaves_an_engines_process_group_to_the_engine(repo_root):
    import os

    result = subprocess.run([sys.executable, "-c", ENGINE_STUB], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "REPO": str(repo_root)})
    assert result.returncode == 0 and result.stdout == "done\n"
    assert "Traceback" not in result.stderr and "Invalid process group" not in result.stderr, \
        result.stderr


# ------------------------------------------------------ a --models run's closing line, its folders


def test_a_models_runs_closing_line_names_its_adapter_folders(tmp_path, capsys):
    from nanomarl.cotrain_run import finish_run

    args = SimpleNamespace(models="runs/strong,smollm2-135m", model="smollm2-135m", num_agents=2,
                           num_turns=2, eval_questions=0, eval_self_consistency=False)
    finish_run(tmp_path, args)
    line = capsys.readouterr().out.splitlines()[0]
    assert f"adapters: {tmp_path / 'adapters_base0'}, {tmp_path / 'adapters_base1'} (" in line
    finish_run(tmp_path, SimpleNamespace(**{**vars(args), "models": ""}))
    assert f"adapters: {tmp_path / 'adapters'} (" in capsys.readouterr().out.splitlines()[0]
