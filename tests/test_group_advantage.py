"""cotrain.py --advantage group: K debates per question, each response's reward against its question's mean
(a per-question baseline; no value heads). Hand-computed advantages, the rollout's grouping as main() builds it,
the PPO invariants (ratio one on the first minibatch, only the policy adapters move), a learning curve, and the
refusals."""
import json
import math

import pytest
import torch

import cotrain
from common import parse_args
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


def test_group_experience_and_update():
    """The experience of K = 2 debates per question: every valid token carries (R_i - kl_coef * sum KL_i) less the
    mean of its question's K responses, padding 0; PPO's first ratio is one; an update moves the policy adapters
    and neither the value heads nor anything else."""
    args = tiny_args("--advantage", "group", "--samples-per-question", "2", "--lr", "1e-2", "--ppo-epochs", "2",
                     "--temperature", "1.0", "--kl-coef", "0.05")
    torch.manual_seed(0)
    team = cotrain.build_team(args, "cpu")
    questions = cotrain.load_task("arith", "train", limit=2)
    records = [r for r in questions for _ in range(2)]  # as main(): each question K times in a row
    debate, exp, r = cotrain.rollout_step(team, args, records, ascii_fraction)
    for (t, a), e in exp.items():
        mask = e["response_mask"]
        sequence = r["rewards"][:, t, a] - args.kl_coef * e["kl"].sum(1)  # kl_shaped_rewards summed
        torch.testing.assert_close(e["rewards"].sum(1), sequence)
        expected = sequence - sequence.reshape(2, 2).mean(1).repeat_interleave(2)
        torch.testing.assert_close(e["advantages"], expected[:, None] * mask)
        assert torch.equal(e["returns"], torch.zeros_like(e["returns"]))
        assert e["advantages"].abs().sum() > 0  # the sampled debates differ, so the check can fail
    before, heads_before = snapshot(team), {k: v.clone() for k, v in team.heads.state_dict().items()}
    stats = cotrain.ppo_update(team, exp, args)
    for key in exp:
        first = stats[key][0]
        assert first["max_abs_logratio"] < 1e-5 and "vf_loss" not in first, key
    after = snapshot(team)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    for adapter in ("agent0", "agent1"):
        assert any(f".lora_B.{adapter}." in n for n in changed), adapter
    assert all(".lora_" in n for n in changed), "the frozen base changed"
    assert all(torch.equal(heads_before[k], v) for k, v in team.heads.state_dict().items())  # no value fit
    metrics = cotrain.ppo_metrics(exp, stats, args.num_agents)
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
])
def test_group_refusals(flags, named, capsys):
    with pytest.raises(SystemExit) as stop:
        cotrain.check_args(parse_args(cotrain.Args, ["--model", "tiny", *flags]))
    assert stop.value.code == 2
    assert f"error: {named}:" in capsys.readouterr().err
