"""cotrain.py --advantage group: K debates per question, each response's reward against its question's mean
(a per-question baseline; no value heads). Hand-computed advantages, the rollout's grouping as main() builds it,
the PPO invariants (ratio one on the first minibatch, only the policy adapters move), a run folder without value
heads that resumes as one run, a learning curve, and the refusals."""
import json
import math

import pytest
import torch

import cotrain
from nanomarl.cli import parse_args
from nanomarl.cotrain_run import check_args, ppo_metrics
from nanomarl.tasks.debate import load_task
from test_cotrain import ascii_fraction, snapshot, tiny_args


def test_group_advantages_hand_computed():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, -1.0, 0.0])  # two questions, K = 4
    # question 0: mean 0.25; question 1: mean 0.25
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25, 0.75, 0.75, -1.25, -0.25])
    torch.testing.assert_close(cotrain.group_advantages(rewards, 4), expected)
    # K = 2: ±half the difference, 0 for a tie
    torch.testing.assert_close(cotrain.group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5]), 2),
                               torch.tensor([0.5, -0.5, 0.0, 0.0]))
    # every group sums to zero
    assert cotrain.group_advantages(torch.randn(12), 3).reshape(4, 3).sum(1).abs().max() < 1e-6


def test_group_advantages_divided_by_their_std_by_hand():
    """--advantage-std: the advantages above over their (unbiased) std; a batch of ties stays 0."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, -1.0, 0.0])
    plain = torch.tensor([0.75, -0.25, -0.25, -0.25, 0.75, 0.75, -1.25, -0.25])
    std = math.sqrt((3 * 0.75 ** 2 + 4 * 0.25 ** 2 + 1.25 ** 2) / 7)  # the mean is 0: sum of squares
    torch.testing.assert_close(cotrain.group_advantages(rewards, 4, std=True), plain / std)
    assert cotrain.group_advantages(torch.ones(4), 2, std=True).tolist() == [0.0] * 4


def test_advantage_std_scales_each_turn_and_agent_to_unit_std():
    """In the experience main() builds, each (turn, agent)'s advantages are its final rewards' group
    advantages over their own std, plus the KL penalty's group advantages at their own size: a turn
    whose debates differ little is raised to the same scale as one that differs a lot."""
    torch.manual_seed(0)
    args = tiny_args("--advantage", "group", "--samples-per-question", "2", "--temperature", "1.0",
                     "--advantage-std")
    team = cotrain.build_team(args, "cpu")
    records = [r for r in load_task("arith", "train", limit=2) for _ in range(2)]
    _, exp, r = cotrain.rollout_step(team, args, records, ascii_fraction)
    centred = lambda x: x - x.reshape(2, 2).mean(1).repeat_interleave(2)  # noqa: E731
    for (t, a), e in exp.items():
        plain = centred(r["rewards"][:, t, a])
        expected = (plain / plain.std() if plain.abs().max() > 0 else plain) \
            + centred(-args.kl_coef * e.kl.sum(1))
        torch.testing.assert_close(e.advantages[:, 0], expected)
    assert any(e.advantages.abs().sum() > 0 for e in exp.values())


def test_group_experience_and_update():
    """The experience of K = 2 debates per question: every valid token carries (R_i - kl_coef * sum KL_i) less the
    mean of its question's K responses, padding 0; PPO's first ratio is one; an update moves the policy adapters
    and nothing else (there are no value heads, and no optimiser but the adapters')."""
    args = tiny_args("--advantage", "group", "--samples-per-question", "2", "--lr", "1e-2", "--ppo-epochs", "2",
                     "--temperature", "1.0", "--kl-coef", "0.05")
    torch.manual_seed(0)
    team = cotrain.build_team(args, "cpu")
    assert len(team.heads) == 0 and team.head_keys == {} and sorted(team.optimizers) == ["agent0", "agent1"]
    questions = load_task("arith", "train", limit=2)
    records = [r for r in questions for _ in range(2)]  # as main(): each question K times in a row
    debate, exp, r = cotrain.rollout_step(team, args, records, ascii_fraction)
    for (t, a), e in exp.items():
        mask = e.response_mask
        sequence = r["rewards"][:, t, a] - args.kl_coef * e.kl.sum(1)  # kl_shaped_rewards summed
        torch.testing.assert_close(e.rewards.sum(1), sequence)
        expected = sequence - sequence.reshape(2, 2).mean(1).repeat_interleave(2)
        torch.testing.assert_close(e.advantages, expected[:, None] * mask)
        assert e.returns is None and e.old_values is None  # no critic
    # the sampled debates differ, so the checks above can fail (a (turn, agent) whose K scores tie has zeros)
    assert any(e.advantages.abs().sum() > 0 for e in exp.values())
    before = snapshot(team)
    stats = cotrain.ppo_update(team, exp, args)
    assert sorted(k for k in stats if isinstance(k, str) and k.startswith("grad_norm/")) == ["grad_norm/agent0",
                                                                                            "grad_norm/agent1"]
    for key in exp:
        first = stats[key][0]
        assert first["max_abs_logratio"] < 1e-5 and "vf_loss" not in first, key
    after = snapshot(team)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    for adapter in ("agent0", "agent1"):
        assert any(f".lora_B.{adapter}." in n for n in changed), adapter
    assert all(".lora_" in n for n in changed), "the frozen base changed"
    metrics = ppo_metrics(exp, stats, args.num_agents)
    assert "loss/policy" in metrics and "loss/value" not in metrics and "val/explained_variance" not in metrics


def test_main_samples_each_question_k_times_in_a_row(tmp_path):
    args = tiny_args("--advantage", "group", "--samples-per-question", "3", "--max-steps", "1", "--sample-every", "1",
                     "--output-dir", str(tmp_path / "run"))
    run = cotrain.main(args, score_fn=ascii_fraction)
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    per_debate = len(rows) // (2 * 3)  # 2 questions x K = 3 debates, each A x T = 4 responses
    assert per_debate == 4
    questions = [rows[i * per_debate]["question"] for i in range(6)]
    assert questions[0] == questions[1] == questions[2] != questions[3] == questions[4] == questions[5]
    row = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert "loss/value" not in row and math.isfinite(row["loss/policy"])


def test_group_run_saves_no_value_heads_and_resumes_as_one_run(tmp_path):
    """A group run's folder holds no value heads (checkpoint.pt, value_heads.pt) and logs no value metric. Resumed
    after 2 of 3 updates, its 3rd update is the one an uninterrupted run makes (adapters and AdamW states)."""
    flags = ["--advantage", "group", "--samples-per-question", "2", "--lr", "1e-2", "--lr-decay-steps", "3",
             "--ppo-epochs", "1", "--temperature", "1.0"]
    run, straight = tmp_path / "run", tmp_path / "straight"
    cotrain.main(tiny_args(*flags, "--max-steps", "2", "--output-dir", str(run)), score_fn=ascii_fraction)
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    assert state["step"] == 2 and "heads" not in state and sorted(state["optimizers"]) == ["agent0", "agent1"]
    assert not (run / "value_heads.pt").exists()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        assert row["grad_norm/agent0"] > 0 and "grad_norm/value_heads" not in row, row
        # no value metric (loss/value, val/clipfrac, val/explained_variance, per agent too); val/ratio is the policy's
        assert not [k for k in row if "value" in k or ("val/" in k and not k.endswith("val/ratio"))], row

    cotrain.main(parse_args(cotrain.Args, ["--resume", str(run), "--max-steps", "3"]), score_fn=ascii_fraction)
    cotrain.main(tiny_args(*flags, "--max-steps", "3", "--output-dir", str(straight)), score_fn=ascii_fraction)
    expected = torch.load(straight / "checkpoint.pt", weights_only=False)
    assert expected["step"] == 3
    moved = [k for name, tensors in expected["adapters"][0].items() for k, v in tensors.items()
             if not torch.equal(v, state["adapters"][0][name][k])]
    assert moved  # the 3rd update changed the adapters: the comparisons below can fail
    resumed = torch.load(run / "checkpoint.pt", weights_only=False)
    assert resumed["step"] == 3 and "heads" not in resumed
    assert sorted(resumed["optimizers"]) == ["agent0", "agent1"]
    for name, tensors in expected["adapters"][0].items():
        for k, v in tensors.items():
            torch.testing.assert_close(resumed["adapters"][0][name][k], v, rtol=1e-6, atol=1e-7,
                                       msg=f"{name} {k}")
    for name, opt in expected["optimizers"].items():
        for i, moments in opt["state"].items():
            for k, v in moments.items():
                torch.testing.assert_close(resumed["optimizers"][name]["state"][i][k], v, rtol=1e-6,
                                           atol=1e-7)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and "grad_norm/value_heads" not in rows[-1]
    straight_row = json.loads((straight / "metrics.jsonl").read_text().splitlines()[-1])
    for key in ("objective/scores", "objective/kl", "loss/policy", "grad_norm/agent0"):
        assert rows[-1][key] == pytest.approx(straight_row[key], rel=1e-5, abs=1e-7), key


def test_group_learning_raises_a_synthetic_score(tmp_path):
    """As test_cotrain's learning test, with the per-question baseline instead of GAE and value heads."""
    args = tiny_args("--advantage", "group", "--samples-per-question", "2", "--max-steps", "24", "--lr", "3e-3",
                     "--ppo-epochs", "2", "--max-new-tokens", "8", "--temperature", "0.1", "--save-every", "100",
                     "--output-dir", str(tmp_path / "run"), "--dataset", "arith", "--prompt-style", "default")
    run = cotrain.main(args, score_fn=ascii_fraction)
    scores = [json.loads(line)["objective/scores"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    first, last = sum(scores[:2]) / 2, sum(scores[-6:]) / 6  # it learns within a few updates: 0.67 -> 0.92
    assert last > first + 0.15 and last > 0.85, scores


@pytest.mark.parametrize("flags, named", [
    (["--advantage", "group", "--samples-per-question", "1"], "--samples-per-question"),
    (["--advantage", "group", "--samples-per-question", "2", "--value-model", "separate"], "--value-model"),
    (["--samples-per-question", "0"], "--samples-per-question"),
    (["--advantage", "gae", "--samples-per-question", "1", "--advantage-std"], "--advantage-std"),
])
def test_group_refusals(flags, named, capsys):
    with pytest.raises(SystemExit) as stop:
        check_args(parse_args(cotrain.Args, ["--model", "tiny", *flags]))
    assert stop.value.code == 2
    assert f"error: {named}:" in capsys.readouterr().err
