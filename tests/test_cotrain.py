"""Tests of cotrain.py (MAPoRL): reward and incentive tables, KL-shaped rewards, the debate rollout, PPO
invariants (ratio = 1 on the first minibatch, adapter isolation), a learning curve, and the CLI with --resume."""
import json
import math

import pytest
import torch

import common
import cotrain
from common import adapter_parameters, has_degenerate_repetition
from conftest import PAPER_PPO, run_script
from nanomarl.cli import parse_args
from nanomarl.models import load_tokenizer
from nanomarl.tasks.debate import load_task
from nanomarl.tasks.debate_prompts import continue_chat, discussion_message, turn1_prompt


def tiny_args(*flags):
    """Small, fast settings for the tiny random model; penalties off (the tiny model never writes \\boxed{})."""
    return parse_args(cotrain.Args, ["--model", "tiny", "--device", "cpu", "--questions-per-update", "2", *PAPER_PPO,
                                     "--micro-batch-questions", "0", "--max-new-tokens", "6", "--no-penalize-format",
                                     "--missing-eos-penalty", "0", "--sample-every", "0", "--log-every", "0",
                                     "--eval-questions", "0", *flags])  # the held-out evaluation: tests/test_eval_in_training.py


def ascii_fraction(records, responses):
    """Synthetic scorer: the fraction of the response's characters that are ASCII. The tiny random model samples
    bytes about uniformly; bytes >= 128 mostly decode to the replacement character, so it starts near 0.5."""
    return torch.tensor([sum(ord(c) < 128 for c in text) / max(1, len(text)) for text in responses])


# ---------------------------------------------------------------- influence-aware reward (Definition 1)


def test_influence_aware_rewards_hand_computed():
    s = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]])  # [T=3, A=2]
    # γ = 0.5: R[3] = s[3]; R[2] = (0.5 + 0.5·0.5)/1.5 = 0.5;
    # R[1,0] = (1 + 0.5·0.5 + 0.25·0.5)/1.75 = 1.375/1.75; R[1,1] = (0 + 0.375)/1.75
    expected = torch.tensor([[1.375 / 1.75, 0.375 / 1.75], [0.5, 0.5], [0.0, 1.0]])
    torch.testing.assert_close(cotrain.influence_aware_rewards(s, 0.5), expected)
    # γ = 0: only the agent's own score counts
    torch.testing.assert_close(cotrain.influence_aware_rewards(s, 0.0), s)
    # γ = 1: plain average of own score and the later turns' all-agent means
    expected_1 = torch.tensor([[(1 + 0.5 + 0.5) / 3, (0 + 0.5 + 0.5) / 3], [0.5, 0.5], [0.0, 1.0]])
    torch.testing.assert_close(cotrain.influence_aware_rewards(s, 1.0), expected_1)
    # A = 3, T = 2, γ = 0.3: the later turn's mean includes the agent itself
    s3 = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    future = 0.3 * (2 / 3)
    expected_3 = torch.tensor([[(1 + future) / 1.3, future / 1.3, future / 1.3], [0.0, 1.0, 1.0]])
    torch.testing.assert_close(cotrain.influence_aware_rewards(s3, 0.3), expected_3)
    # a batch [B, T, A] is the same as each item alone
    batch = torch.stack([s, s.flip(0), torch.full_like(s, -10.0)])
    torch.testing.assert_close(cotrain.influence_aware_rewards(batch, 0.3),
                               torch.stack([cotrain.influence_aware_rewards(x, 0.3) for x in batch]))
    # the other rules
    torch.testing.assert_close(cotrain.turn_rewards(s, "current", 0.3), s)
    torch.testing.assert_close(cotrain.turn_rewards(s, "final-mean", 0.3), torch.full_like(s, 0.5))


# ---------------------------------------------------------------- incentives (Tables 1 and 2)

# α0, α1, β0, β1 = 1, 2, 4, 8: every sum of incentives identifies which rows fired
A0, A1, B0, B1 = 1.0, 2.0, 4.0, 8.0
R, W = 1.0, 0.0


@pytest.mark.parametrize("correct, expected, rows", [
    # correct[t][a] for A = 2, T = 2; expected bonus[t][a]
    ([[R, R], [W, R]], [[0, -B1], [-A1, 0]], "T1 R->W vs majority R: -α1; T2 majority R->W, own R: -β1"),
    ([[R, W], [W, W]], [[0, -B0], [-A0, 0]], "T1 R->W vs majority W: -α0; T2 majority R->W, own W: -β0"),
    ([[W, W], [R, W]], [[0, B0], [A0, 0]], "T1 W->R vs majority W: +α0; T2 majority W->R, own W: +β0"),
    ([[W, R], [R, R]], [[0, B1], [A1, 0]], "T1 W->R vs majority R: +α1; T2 majority W->R, own R: +β1"),
    ([[W, R], [R, W]], [[-B0, B1], [A1, -A0]], "both change at once"),
    ([[R, R], [R, R]], [[0, 0], [0, 0]], "nobody changes: no incentive"),
])
def test_incentive_bonus_two_agents(correct, expected, rows):
    bonus = cotrain.incentive_bonus(torch.tensor(correct), A0, A1, B0, B1)
    torch.testing.assert_close(bonus, torch.tensor(expected, dtype=torch.float), msg=rows)


def test_incentive_bonus_three_agents_ties_and_three_turns():
    # A = 3: agent 0's others at turn 1 are {R, W}, a tie: its R->W gets no -α; every majority is a tie -> all 0
    tie = torch.tensor([[R, R, W], [W, R, W]])
    torch.testing.assert_close(cotrain.incentive_bonus(tie, A0, A1, B0, B1), torch.zeros(2, 3))
    # clear majorities: agents 0, 1 go W->R against a wrong majority (+α0); agent 2 (wrong at t=1) sees its
    # others' majority go W->R (+β0); agents 0 and 1 see a tie at t=2 (agent 2 W, the other R) -> no β
    clear = torch.tensor([[W, W, W], [R, R, W]])
    torch.testing.assert_close(cotrain.incentive_bonus(clear, A0, A1, B0, B1), torch.tensor([[0, 0, B0], [A0, A0, 0]]))
    # T = 3: the middle turn collects Table 1 (for t-1 -> t) and Table 2 (for t -> t+1)
    three = torch.tensor([[W, W], [R, W], [R, R]])
    expected = torch.tensor([[0, B0], [A0 + B1, 0], [0, A1]])
    torch.testing.assert_close(cotrain.incentive_bonus(three, A0, A1, B0, B1), expected)
    # a batch [B, T, A] is the same as each item alone; one agent alone gets nothing
    batch = torch.stack([three, three.flip(1), torch.zeros(3, 2)])
    torch.testing.assert_close(cotrain.incentive_bonus(batch, A0, A1, B0, B1),
                               torch.stack([cotrain.incentive_bonus(x, A0, A1, B0, B1) for x in batch]))
    torch.testing.assert_close(cotrain.incentive_bonus(torch.tensor([[W], [R]]), A0, A1, B0, B1), torch.zeros(2, 1))


# ---------------------------------------------------------------- scores, penalties, KL-shaped rewards


def test_penalties_and_repetition():
    assert has_degenerate_repetition([5, 6, 7] * 4)  # a 3-token block 4 times in a row
    assert not has_degenerate_repetition([5, 6, 7] * 3 + [1])  # 3 times is allowed
    assert has_degenerate_repetition([1, 2] + [9] * 4 + [3])
    assert not has_degenerate_repetition(list(range(40)))
    digits = {1: "0"}
    assert not has_degenerate_repetition([1] * 6,
                                         decode=lambda ids: "".join(digits[i] for i in ids))
    scores = torch.tensor([0.9, 0.8, 0.7, 0.6])
    good = torch.tensor([True, False, True, False])
    truncated = torch.tensor([False, False, True, True])
    torch.testing.assert_close(cotrain.apply_penalties(scores, good, truncated, -10.0, -1.0),
                               torch.tensor([0.9, -10.0, -0.3, -11.0]))
    torch.testing.assert_close(cotrain.apply_penalties(scores, good, truncated, None, 0.0), scores)
    assert cotrain.format_ok("4", list(range(12)), 10)
    assert not cotrain.format_ok(None, list(range(12)), 10)
    assert not cotrain.format_ok("4", list(range(5)), 10)


@pytest.mark.parametrize("text,task,expected", [
    ("7 + 5 = 12. The answer is 12.", "math", "12"),  # counted right by evaluation, so it must pass the gate
    ("7 + 5 = 12.\nAnswer: \\boxed{12}", "math", "12"),
    ("7 + 5 = 12.\nAnswer: \\boxed{}", "math", None),  # an empty box is not an answer
    ("7 + 5 = 12.\nAnswer: \\boxed{XX}", "math", None),  # nor the prompt's copied placeholder
    ("7 + 5 = 12.", "math", None),  # a bare number in the reasoning is not an answer
    ("So the answer is: neutral.", "nli", "neutral"),
])
def test_one_definition_of_a_well_formed_answer(text, task, expected):
    """The training format gate, the ground-truth scorer and evaluation agree on every text."""
    ids = list(range(12))
    assert cotrain.format_ok(common.extract_answer(text, task), ids, 10) == (expected is not None)
    assert common.extract_answer(text, task) == expected
    records = [dict(question="q", answer=expected or "12", task=task)]
    scorer = cotrain.make_scorer(cotrain.Args(), "cpu")
    assert scorer(records, [text]).tolist() == [float(expected is not None)]


def test_kl_shaped_rewards():
    logprobs = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-0.3, -0.2, 0.0, 0.0]])
    ref = torch.tensor([[-1.5, -1.0, -0.5, -9.0], [-0.1, -0.7, -9.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    final = torch.tensor([2.0, -10.0])
    rewards, kl = cotrain.kl_shaped_rewards(logprobs, ref, mask, final, kl_coef=0.1)
    torch.testing.assert_close(kl, torch.tensor([[0.5, -1.0, 0.0, 0.0], [-0.2, 0.5, 0.0, 0.0]]))
    # -0.1·KL at every valid token, the final reward at the last valid one, 0 on padding
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, 0.1, 2.0, 0.0], [0.02, -10.05, 0.0, 0.0]]))
    torch.testing.assert_close(rewards.sum(1), final - 0.1 * kl.sum(1))


def test_policy_and_value_loss_hand_computed():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    new = torch.log(torch.tensor([[1.5, 0.5, 9.0]]))
    old, adv = torch.zeros(1, 3), torch.tensor([[2.0, 2.0, 5.0]])
    # token 1: ρ = 1.5, -A·ρ = -3, clipped -A·1.2 = -2.4 -> -2.4 (clipped); token 2: ρ = 0.5 -> -1; token 3 masked.
    # the minibatch has 4 valid tokens of this (turn, agent): (-2.4 - 1) / 4
    loss, s = cotrain.policy_loss(new, old, adv, mask, torch.tensor(4.0), cliprange=0.2)
    assert math.isclose(loss.item(), -3.4 / 4, rel_tol=1e-6)
    assert s["clipfrac"].item() == 1.0 and s["tokens"].item() == 2.0
    assert math.isclose(s["max_abs_logratio"].item(), math.log(2), rel_tol=1e-6)
    # values: (V=1, V_old=0.5, G=0): max(1, 0.49) -> 0.5; (0, 0.5, 1): max(1, 0.49) -> 0.5;
    # (0.9, 0.5, 1): max(0.01, 0.09) -> 0.045, value-clipped
    v_loss, vs = cotrain.value_loss(torch.tensor([[1.0, 0.0, 0.9]]), torch.tensor([[0.5, 0.5, 0.5]]),
                                    torch.tensor([[0.0, 1.0, 1.0]]), torch.ones(1, 3), torch.tensor(3.0), 0.2)
    assert math.isclose(v_loss.item(), (0.5 + 0.5 + 0.045) / 3, rel_tol=1e-5)
    assert vs["vf_clipfrac"].item() == 1.0


def test_majority_vote_accuracy():
    assert common.majority_vote_accuracy(["8", "8", "3"], "8") == 1.0
    assert common.majority_vote_accuracy(["8", "3"], "8") == 0.5  # a tie: expected accuracy
    assert common.majority_vote_accuracy(["3", "3", "8"], "8") == 0.0
    assert common.majority_vote_accuracy([None, "8"], "8") == 1.0  # no-answer is dropped from a tie
    assert common.majority_vote_accuracy([None, None, "8"], "8") == 0.0


# ---------------------------------------------------------------- prompts and the debate rollout


def test_prompts():
    p = turn1_prompt("What is 2+2?", "math")
    assert p.startswith("Question: What is 2+2?") and "\\boxed{XX}" in p
    assert "\\boxed{LABEL}" in turn1_prompt("Premise: a", "nli")
    msg = discussion_message("What is 2+2?", [(1, "It is 4."), (2, "5")])
    assert msg.startswith("These are the solutions to the problem from other agents: ")
    assert "Agent 2 solution: ```It is 4.```" in msg and "Agent 3 solution: ```5```" in msg
    assert msg.endswith("Once again, the question is: What is 2+2?") and "reward" not in msg.lower()
    fb = discussion_message("Q", [(0, "4")], other_scores=[0.25], own_score=0.9)
    assert fb.startswith("Reward from a verifier of your answer: 0.900 out of 1.0, which means Your answer is likely right")
    assert "Reward associated with agent 1's solution calculated by verifier: 0.250 out of 1.0" in fb


def test_run_debate_three_agents_history_and_feedback():
    from common import load_model

    tok = load_tokenizer("tiny")
    model = load_model("tiny")
    records = [dict(question="What is 3+4?", answer="7", task="math"), dict(question="What is 1+1?", answer="2", task="math")]
    seen = []

    def scorer(recs, responses):
        seen.append(len(responses))
        return torch.linspace(0.1, 0.9, len(responses))

    debate = cotrain.run_debate(records, [model] * 3, [tok] * 3, [["__base__"] * 3] * 2, max_new_tokens=5,
                                greedy=True, scorer=scorer, feedback_in_prompt=True)
    assert seen == [6, 6]  # all 3 agents x 2 questions of a turn scored together
    assert debate.correct.shape == debate.scores.shape == (2, 2, 3)
    # agent 0's turn-2 prompt on question 1: its own turn-1 answer as an assistant message, the OTHERS'
    # turn-1 answers in the discussion message, and the verifier feedback lines
    prompt = debate.prompts[1][1][0]
    own, others = debate.responses[1][0][0], [debate.responses[1][0][j] for j in (1, 2)]
    assert f"<|im_start|>assistant\n{own}<|im_end|>" in prompt
    assert f"Agent 2 solution: ```{others[0]}```" in prompt and f"Agent 3 solution: ```{others[1]}```" in prompt
    assert "Agent 1 solution" not in prompt
    scores = debate.scores
    assert f"Reward from a verifier of your answer: {scores[1, 0, 0]:.3f}" in prompt
    assert f"agent 2's solution calculated by verifier: {scores[1, 0, 1]:.3f}" in prompt
    # the rollout tensors are the tokens of the responses
    ro = debate.rollout[(1, 2)]
    assert tok.decode(ro["response_ids"][0][ro["response_mask"][0].bool()], skip_special_tokens=True) == debate.responses[0][1][2]


def test_continue_chat_keeps_the_tokens_the_agent_sampled():
    """An agent's own answer enters its next prompt as the tokens it sampled, not as its text re-tokenised. SmolLM2
    samples "\n\n" as one token that the text re-tokenises as two; the tiny byte-level tokenizer has no merges,
    so here the sampled tokens that the text cannot give back are a cut-off UTF-8 character (0xC3, the first byte
    of "é"), which decodes to "\ufffd" and re-tokenises as three other bytes."""
    from common import chat_prompt

    tok = load_tokenizer("tiny")
    first = [{"role": "user", "content": "What is 3+4?"}]
    query = tok(chat_prompt(tok, first), add_special_tokens=False)["input_ids"]
    seven, cut = tok.convert_tokens_to_ids("7"), tok.convert_tokens_to_ids("Ã")  # byte-level tokens of "7", 0xC3
    for response in ([seven, cut, tok.eos_token_id],  # ended with EOS
                     [seven, cut]):  # cut at max_new_tokens: no EOS
        answer = tok.decode(response, skip_special_tokens=True)
        assert answer == "7\ufffd" and tok(answer, add_special_tokens=False)["input_ids"] != [seven, cut]
        chat = first + [{"role": "assistant", "content": answer}, {"role": "user", "content": "Once again?"}]
        text = chat_prompt(tok, chat)
        ids = continue_chat(tok, query + response, text)
        assert ids[:len(query) + len(response)] == query + response  # the conversation exactly as sampled
        assert tok.decode(ids) == text  # and the same chat as the text
        assert ids != tok(text, add_special_tokens=False)["input_ids"]  # which the text alone does not give
        # a template that rewrites the earlier turn (e.g. drops it): the text itself, tokenised as usual
        rewritten = chat_prompt(tok, [first[0], {"role": "user", "content": "Once again?"}])
        assert continue_chat(tok, query + response, rewritten) == rewritten


def test_run_debate_continues_each_agents_conversation_token_for_token():
    """Every turn-2 prompt starts with the agent's own turn-1 prompt and sampled response, token for token, unless
    those tokens do not decode to the start of the rendered chat (continue_chat's fallback; random bytes of the
    tiny model can include special tokens, which the chat drops)."""
    from common import load_model

    torch.manual_seed(0)
    tok, model = load_tokenizer("tiny"), load_model("tiny")
    records = load_task("arith", "train", limit=4)
    debate = cotrain.run_debate(records, [model] * 2, [tok] * 2, [["__base__"] * 2] * 2, max_new_tokens=8,
                                temperature=1.0)
    held = 0
    for a in range(2):
        first, second = debate.rollout[(0, a)], debate.rollout[(1, a)]
        for b in range(len(records)):
            conversation = torch.cat([first["query_ids"][b][first["query_mask"][b].bool()],
                                      first["response_ids"][b][first["response_mask"][b].bool()]])
            prompt = second["query_ids"][b][second["query_mask"][b].bool()]
            if debate.prompts[b][1][a].startswith(tok.decode(conversation)):
                assert torch.equal(prompt[:len(conversation)], conversation)
                assert tok.decode(prompt) == debate.prompts[b][1][a]
                held += 1
            else:
                assert prompt.tolist() == tok(debate.prompts[b][1][a], add_special_tokens=False)["input_ids"]
    assert held >= 4, held


def test_heterogeneous_bases_are_loaded_once(tiny_model_dir):
    args = tiny_args("--models", f"tiny,{tiny_model_dir},tiny", "--num-agents", "3", "--num-turns", "2")
    team = cotrain.build_team(args, "cpu")
    assert team.base_names == ["tiny", str(tiny_model_dir)] and team.agent_base == [0, 1, 0]
    assert team.models()[0] is team.models()[2] and team.models()[0] is not team.models()[1]
    # --value-model shared (the default): no critic adapter, one optimiser for each base's value heads
    assert sorted(team.optimizers) == ["base0/agent0", "base0/agent2", "base0/value_heads", "base1/agent1",
                                       "base1/value_heads"]
    records = load_task("arith", "train", limit=2)
    debate, exp, _ = cotrain.rollout_step(team, args, records, ascii_fraction)
    assert set(exp) == {(t, a) for t in range(2) for a in range(3)}
    stats = cotrain.ppo_update(team, exp, args)
    assert stats["skipped"] == 0


# ---------------------------------------------------------------- PPO invariants


def snapshot(team):
    return {n: p.detach().clone() for n, p in team.bases[0].named_parameters()}


@pytest.mark.parametrize("sharing", ["agent", "agent-turn"])
def test_ratio_is_one_on_first_minibatch(sharing):
    args = tiny_args("--policy-sharing", sharing, "--questions-per-update", "3", "--micro-batch-questions", "2",
                     "--ppo-epochs", "2", "--lr", "3e-3", "--temperature", "0.1")
    torch.manual_seed(0)
    team = cotrain.build_team(args, "cpu")
    records = load_task("arith", "train", limit=3)
    _, exp, _ = cotrain.rollout_step(team, args, records, ascii_fraction)
    stats = cotrain.ppo_update(team, exp, args)
    assert set(exp) == {(0, 0), (0, 1), (1, 0), (1, 1)}
    for key in exp:
        first = stats[key][0]  # epoch 0, minibatch 0: the policy that generated the rollout
        assert first["max_abs_logratio"] < 1e-5, key
        # approxkl sums ½ logratio² over the tokens: per token, what |logratio| < 1e-5 allows
        assert first["clipfrac"] == 0.0 and first["approxkl"] / first["tokens"] < 5e-11, key
        assert math.isclose(first["ratio"] / first["tokens"], 1.0, abs_tol=1e-6)
        later = stats[key][-1]  # after an optimiser step the policy has moved: the check can fail
        assert later["max_abs_logratio"] > 1e-3, key


@pytest.mark.parametrize("flags,per_turn", [([], False), (["--policy-sharing", "shared"], False),
                                            (["--micro-batch-questions", "2"], True)])
def test_bf16_first_epoch_ratio_is_one(flags, per_turn):
    """bf16 rounds by a batch's shape: the sampling pass (a KV cache, a token at a time) gives other
    log-probs than the update's forward. --old-logprobs auto recomputes π_old below fp32, in the
    update's own shapes (a micro-batch at a time, each adapter's rows alone), so with the weights
    unchanged (lr 0) every minibatch of the first epoch sees a ratio of 1; as sampled it is not.
    per_turn: the plain path (--no-fast), one forward per (turn, agent) (the conversation forward off)."""
    from nanomarl.cotrain_run import settle_args

    worst = {}
    for mode in ("auto", "sampling"):
        args, _ = settle_args(tiny_args(
            "--dtype", "bfloat16", "--old-logprobs", mode, "--samples-per-question", "2",
            "--micro-batch-questions", "1", "--minibatch-questions", "2", "--ppo-epochs", "1",
            "--max-new-tokens", "12", "--temperature", "0.3", *flags,
            *(["--no-fast"] if per_turn else [])))
        assert args.fast == (not per_turn)
        args.lr = 0.0  # every minibatch then sees the policy that sampled
        torch.manual_seed(0)
        team = cotrain.build_team(args, "cpu")
        records = [r for r in load_task("arith", "train", limit=2) for _ in range(2)]
        _, exp, _ = cotrain.rollout_step(team, args, records, ascii_fraction)
        stats = cotrain.ppo_update(team, exp, args)
        assert all(len(stats[key]) >= 2 for key in exp)  # several minibatches, several micro
        worst[mode] = max(s["max_abs_logratio"] for key in exp for s in stats[key])
    assert worst["auto"] < 1e-3, worst
    assert worst["sampling"] > 1e-3, worst  # the check can fail: the sampled π_old is off


def test_one_update_changes_only_own_adapters():
    # two epochs = two optimiser steps: the zero-initialised value heads pass no gradient to the critic LoRA
    # on the first step (dV/dh = w = 0), only from the second on. The paper's separate critic adapter here; the
    # shared value heads: tests/test_perf_update.py
    args = tiny_args("--policy-sharing", "agent", "--lr", "1e-2", "--ppo-epochs", "2", "--value-model", "separate")
    torch.manual_seed(0)
    team = cotrain.build_team(args, "cpu")
    model = team.bases[0]
    # each optimiser holds exactly its adapter's parameters (+ the heads for the critic); no overlaps
    groups = {name: {id(p) for g in opt.param_groups for p in g["params"]} for name, opt in team.optimizers.items()}
    assert groups["agent0"] == {id(p) for p in adapter_parameters(model, "agent0")}
    assert groups["agent1"] == {id(p) for p in adapter_parameters(model, "agent1")}
    assert groups["critic"] == {id(p) for p in adapter_parameters(model, "critic")} | {id(p) for p in team.heads.parameters()}
    assert not (groups["agent0"] & groups["agent1"]) and not (groups["agent0"] & groups["critic"])

    records = load_task("arith", "train", limit=2)
    _, exp, _ = cotrain.rollout_step(team, args, records, ascii_fraction)
    # agent 0's loss alone sends gradients to agent 0's adapter and nowhere else
    e = exp[(1, 0)]
    policy = cotrain.forward_pairs(team, {(1, 0): e}, torch.arange(2), args)[(1, 0)]
    loss, _ = cotrain.policy_loss(policy["logprobs"], e.old_logprobs, e.advantages, e.response_mask,
                                  e.response_mask.sum(), 0.2)
    loss.backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert with_grad and all(".lora_B.agent0." in n or ".lora_A.agent0." in n for n in with_grad), with_grad
    model.zero_grad(set_to_none=True)

    before, heads_before = snapshot(team), {k: v.clone() for k, v in team.heads.state_dict().items()}
    cotrain.ppo_update(team, exp, args)
    after = snapshot(team)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    for adapter in ("agent0", "agent1", "critic"):
        assert any(f".lora_B.{adapter}." in n for n in changed), adapter
    assert all(".lora_" in n for n in changed), "the frozen base changed"
    assert all(not torch.equal(heads_before[k], v) for k, v in team.heads.state_dict().items() if k.endswith("weight"))


def test_non_finite_loss_skips_the_update(tmp_path):
    args = tiny_args("--max-steps", "1", "--lr", "1e-2", "--ppo-epochs", "1", "--output-dir", str(tmp_path / "run"))

    def nan_scorer(records, responses):
        return torch.full((len(responses),), float("nan"))

    with pytest.warns(UserWarning, match="non-finite PPO loss or gradient"):
        run = cotrain.main(args, score_fn=nan_scorer)
    row = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["train/skipped_minibatches"] == 1
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    for adapters in state["adapters"]:
        for name, tensors in adapters.items():
            assert all(v.abs().sum() == 0 for k, v in tensors.items() if "lora_B" in k), name  # never stepped


def test_max_kl_stops_with_a_checkpoint(tmp_path, monkeypatch):
    """The runaway-KL stop (cotrain_run.MAX_KL) fires after a step and not before it. Update 1 starts at the
    reference, so its KL is 0 up to the forward's rounding (the recompute path forwards rows in other batch shapes
    than the reference's, and some CPUs' kernels round by shape: ~1e-7 per response here); one step at lr 1e-2
    moves it to ~0.1. A 1e-3 limit sits between the two, far from both."""
    from nanomarl import cotrain_run

    monkeypatch.setattr(cotrain_run, "MAX_KL", 1e-3)
    args = tiny_args("--max-steps", "4", "--lr", "1e-2", "--output-dir", str(tmp_path / "run"),
                     "--old-logprobs", "recompute", "--log-every", "1")
    with pytest.raises(SystemExit, match="> 0.001 to the reference") as stop:
        cotrain.main(args, score_fn=ascii_fraction)
    stopped_at = int(str(stop.value).split("stopped at update ")[1].split(":")[0])
    assert 1 <= stopped_at < 4
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["step"] == stopped_at
    kls = [json.loads(line)["objective/kl"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
           if "objective/kl" in line]
    assert len(kls) == stopped_at and abs(kls[0]) < 1e-5, kls  # the updates logged before the stop: at the reference


# ---------------------------------------------------------------- learning and the CLI


def test_learning_raises_a_synthetic_score(tmp_path):
    """2 agents x 2 turns on the tiny model learn to write ASCII: the mean score of the last updates is clearly
    above the first ones (fixed seed). Temperature 0.1: the tiny model's logits span only about ±1 (its
    embeddings have std 0.02), so at 0.7 no adapter can change the sampled bytes much."""
    args = tiny_args("--max-steps", "16", "--lr", "3e-3", "--ppo-epochs", "2", "--max-new-tokens", "8",
                     "--temperature", "0.1", "--output-dir", str(tmp_path / "run"), "--save-every", "100",
                     "--dataset", "arith", "--prompt-style", "default")  # the prompts this test was calibrated on
    run = cotrain.main(args, score_fn=ascii_fraction)
    scores = [json.loads(line)["objective/scores"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    first, last = sum(scores[:4]) / 4, sum(scores[-4:]) / 4
    assert last > first + 0.15 and last > 0.75, scores


def test_cli_smoke_and_resume(tmp_path):
    """2 updates, then --resume for a 3rd: the step counter and metrics.jsonl continue, and the 3rd update is
    exactly the one an uninterrupted 3-update run makes (adapters, heads, optimisers and RNG restored)."""
    flags = ["--model", "tiny", "--device", "cpu", *PAPER_PPO, "--questions-per-update", "2", "--max-new-tokens", "6",
             "--ppo-epochs", "1", "--lr", "1e-3", "--lr-decay-steps", "3", "--sample-every", "1", "--eval-questions", "4"]
    run = tmp_path / "run"
    out = run_script(["cotrain.py", *flags, "--output-dir", str(run), "--max-steps", "2"], timeout=300)
    assert "sample debate" in out.stdout and "metrics:" in out.stdout
    assert torch.load(run / "checkpoint.pt", weights_only=False)["step"] == 2
    out = run_script(["cotrain.py", "--resume", str(run), "--max-steps", "3"], timeout=300)
    assert "from update 2" in out.stdout
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]  # 0: the held-out evaluation before any update
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    assert state["step"] == 3
    # --advantage gae keeps its value heads and their optimiser (a group run has none: tests/test_group_advantage.py)
    assert set(state["heads"]) == {"turn1.linear.weight", "turn1.linear.bias", "turn2.linear.weight", "turn2.linear.bias"}
    assert "value_heads" in state["optimizers"] and (run / "value_heads.pt").exists()
    assert all("grad_norm/value_heads" in r for r in rows[1:])
    assert json.loads((run / "args_resume.json").read_text())["max_new_tokens"] == 6  # the saved flags were kept
    info = json.loads((run / "debate.json").read_text())
    assert info["adapters"] == [["agent0", "agent1"], ["agent0", "agent1"]]
    assert (run / "adapters" / "agent0" / "adapter_config.json").exists()

    straight = tmp_path / "straight"
    run_script(["cotrain.py", *flags, "--output-dir", str(straight), "--max-steps", "3"], timeout=300)
    expected = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()][3]
    for key in ("objective/scores", "objective/kl", "loss/value", "loss/policy", "completions/mean_length"):
        assert rows[3][key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), key


def test_a_resume_may_change_the_dataset_as_a_curriculum_stage(tmp_path, monkeypatch):
    """--resume RUN --dataset D (a curriculum's next stage): 1 update on arith:split-mix (3 training wordings), then
    --dataset arith:split-many (30) for a 2nd. The run records D; the same agents go on from the checkpoint; the
    2nd update debates D's training questions (the same step_indices, D's records) and the evaluation after it D's
    held-out split."""
    from nanomarl.tasks.debate import step_indices

    evaluated = []  # the ids of the questions each held-out evaluation debates
    evaluate_team = cotrain.evaluate_team
    monkeypatch.setattr(cotrain, "evaluate_team", lambda team, args, records, scorer: (
        evaluated.append([r["id"] for r in records]) or evaluate_team(team, args, records, scorer)))
    run = tmp_path / "run"
    cotrain.main(tiny_args("--dataset", "arith:split-mix", "--max-steps", "1", "--eval-questions", "2",
                           "--eval-split", "validation", "--no-eval-self-consistency", "--sample-every", "1",
                           "--output-dir", str(run)))
    before = torch.load(run / "checkpoint.pt", weights_only=False)["adapters"][0]["agent0"]
    assert evaluated == [["arith:split-mix/validation/0", "arith:split-mix/validation/1"]] * 2  # steps 0 and 1
    cotrain.main(parse_args(cotrain.Args, ["--resume", str(run), "--dataset", "arith:split-many",
                                           "--max-steps", "2"]))
    assert evaluated[2:] == [["arith:split-many/validation/0", "arith:split-many/validation/1"]]  # step 2: D's
    assert json.loads((run / "args.json").read_text())["dataset"] == "arith:split-mix"  # the first stage's
    assert json.loads((run / "args_resume.json").read_text())["dataset"] == "arith:split-many"
    resumes = [json.loads(line) for line in (run / "resumes.jsonl").read_text().splitlines()]
    assert [(r["step"], r["given"]["dataset"]) for r in resumes] == [(1, "arith:split-many")]
    assert json.loads((run / "debate.json").read_text())["dataset"] == "arith:split-many"  # what evaluate.py reads
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    asked = {step: list(dict.fromkeys(r["question"] for r in rows if r["step"] == step)) for step in (1, 2)}
    mix, many = (load_task(name, "train", seed=0, num_agents=2) for name in ("arith:split-mix", "arith:split-many"))
    assert asked[1] == [mix[i]["question"] for i in step_indices(1000, 2, 0, "cotrain-0", drop_last=True)]
    assert asked[2] == [many[i]["question"] for i in step_indices(1000, 2, 1, "cotrain-0", drop_last=True)]
    assert not set(asked[2]) & {r["question"] for r in mix}  # words arith:split-mix never uses
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]
    after = torch.load(run / "checkpoint.pt", weights_only=False)
    assert after["step"] == 2 and any(not torch.equal(before[k], after["adapters"][0]["agent0"][k]) for k in before)
