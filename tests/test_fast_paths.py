"""Each fast path of cotrain.py's update equals the plain path beside it, on the tiny model (fp32):

  * the conversation forward (nanomarl/conversation.py: one forward per agent over its last trained
    turn also reads the earlier turns' responses) behind cotrain.forward_pairs (--fast) equals its
    loop (--no-fast), one forward per (turn, agent): log-probs, entropies, hidden states and
    gradients, for 2 and 3 turns and --train-turns 2,3, with and without autograd;
  * make_experience and ppo_update with the conversation forward equal the plain path: every
    experience tensor, every PPO statistic and the trained adapters and heads; the rows whose
    prompts do not hold their earlier turns as sampled (run_debate's as_sampled, which agrees with
    the tokens) take the loop (conversation_forward hands exactly those to its plain function), the
    others the conversation forward, and where no row holds forward_pairs is the loop, bit for
    bit;
  * --old-logprobs sampling (π_old as generate() sampled it; the fp32 default) is within 1e-5 of a
    recompute;
  * π has one definition (common.log_policy): a different one reaches every path, fast and plain.

The stacked-LoRA routing of generate() against peft's routing: tests/test_routing.py. The shared
helpers below are also used by tests/test_perf_update.py (what each design costs per update)."""
import functools
import math

import pytest
import torch
import torch.nn.functional as F

import common
import cotrain
from common import tokenize_prompts
from magrpo import reference_logprobs
from conftest import PAPER_PPO
from nanomarl import conversation
from nanomarl.cli import parse_args
from nanomarl.fast_decode import FastDecoder
from nanomarl.tasks.debate import load_task
from nanomarl.tasks.debate_prompts import sampled_conversation

CLOSE = dict(atol=1e-5, rtol=0)  # fp32 noise: the same sums, padded or batched differently


def tiny_args(*flags):
    """2 agents x 2 turns, 2 questions, 4 PPO epochs, micro-batches of one question, forward
    batches of 8 rows, π_old recomputed, on the tiny model; penalties off (the tiny model never
    writes an answer); the plain path (--no-fast: forward_pairs' loop, one forward per (turn,
    agent)) unless flags say --fast or a test sets args.fast. The tiny model's random bytes often
    include a special token that the chat drops, so some of its turn-2 prompts fall back to the
    text: the conversation-forward tests make the conversations hold first (as_one_conversation)."""
    return parse_args(cotrain.Args, [
        "--model", "tiny", "--device", "cpu", "--max-new-tokens", "6", *PAPER_PPO,
        "--questions-per-update", "2", "--ppo-epochs", "4", "--eval-questions", "0",
        "--old-logprobs", "recompute", "--no-penalize-format", "--missing-eos-penalty", "0",
        "--sample-every", "0", "--log-every", "0", "--no-fast", *flags])


def ascii_fraction(records, responses):
    """A synthetic score: the share of ASCII characters in each response."""
    return torch.tensor([sum(ord(c) < 128 for c in text) / max(1, len(text)) for text in responses])


def trainables(team) -> dict:
    """Every LoRA weight (all adapters) and every value-head tensor, cloned."""
    out = {n: p.detach().clone() for n, p in team.bases[0].named_parameters() if ".lora_" in n}
    out.update({f"heads.{k}": v.detach().clone() for k, v in team.heads.state_dict().items()})
    return out


def trained_looking(team, heads: bool = True):
    """Non-zero LoRA B (the policies are not the base: the KL is not 0) and, with heads, non-zero
    value heads (the values say which hidden states they read)."""
    with torch.no_grad():
        for name, p in team.bases[0].named_parameters():
            if ".lora_B." in name:
                p.normal_(std=0.05)
        for p in team.heads.parameters() if heads else []:
            p.normal_(std=0.5)


def debate_and_rewards(team, args, records):
    """Stages 1-3 of an update (cotrain.rollout_step without make_experience)."""
    debate = cotrain.run_debate(records, team.models(), team.agent_tokenizers(), team.adapter_names,
                                args.max_new_tokens, temperature=args.temperature)
    assert debate.records == records
    rewards = torch.stack([torch.stack([ascii_fraction(records, [r[t][a] for r in debate.responses])
                                        for a in range(args.num_agents)], -1)
                           for t in range(args.num_turns)], 1)
    return debate, rewards  # rewards [B, T, A]


def sampled_experience(team, debate) -> dict:
    """{(t, a): cotrain.Experience} of every trained (turn, agent) holding only the sampled tensors
    (what make_experience starts from), sharing them with debate.rollout."""
    return {(t, a): cotrain.Experience(*(debate.rollout[(t, a)][k]
                                         for k in (*cotrain.RESPONSE_KEYS, "as_sampled")))
            for t, a in team.trained}


def tensors(e) -> dict:
    """An Experience's fields that hold a tensor, by name."""
    return {name: value for name, value in vars(e).items() if value is not None}


class Counter:
    """Counts the model's forward calls and the rows they carry (the PeftModel's forward), and
    backward calls."""

    def __init__(self, model, monkeypatch):
        self.calls, self.rows, self.backwards = 0, 0, 0
        original, original_backward = model.forward, torch.Tensor.backward

        def forward(*args, **kwargs):
            self.calls += 1
            self.rows += kwargs["input_ids"].shape[0]
            return original(*args, **kwargs)

        def backward(tensor, *args, **kwargs):
            self.backwards += 1
            return original_backward(tensor, *args, **kwargs)
        monkeypatch.setattr(model, "forward", forward)
        monkeypatch.setattr(torch.Tensor, "backward", backward)

    def take(self) -> tuple[int, int, int]:
        out = (self.calls, self.rows, self.backwards)
        self.calls, self.rows, self.backwards = 0, 0, 0
        return out


def as_one_conversation(debate, tokenizer):
    """The debate with every later turn's prompt starting with the previous turn's prompt + its
    sampled response, token for token: what run_debate's continue_chat gives on its own, except
    for rows whose random tiny-model bytes include a special token the chat drops (those fell back
    to the text: here the sampled response is inserted before the rest of that prompt, which only
    the forwards read). Left-padded again to one width per turn for all agents (as one generate
    call gives them)."""
    num_turns = 1 + max(t for t, _ in debate.rollout)
    num_agents = 1 + max(a for _, a in debate.rollout)
    for t in range(1, num_turns):
        rows = []
        for a in range(num_agents):
            previous, later = debate.rollout[(t - 1, a)], debate.rollout[(t, a)]
            rows.append([])
            for b in range(len(previous["query_ids"])):
                q_prev = previous["query_ids"][b][previous["query_mask"][b].bool()]
                q_later = later["query_ids"][b][later["query_mask"][b].bool()]
                held = sampled_conversation(previous, b)
                holds = len(q_later) >= len(held) and torch.equal(q_later[:len(held)], held)
                rows[a].append(q_later if holds else torch.cat([held, q_later[len(q_prev):]]))
        prompts = [r.tolist() for agent_rows in rows for r in agent_rows]
        ids, mask = tokenize_prompts(tokenizer, prompts, "cpu")
        for a, agent_rows in enumerate(rows):
            these = slice(a * len(agent_rows), (a + 1) * len(agent_rows))
            debate.rollout[(t, a)] = dict(debate.rollout[(t, a)], query_ids=ids[these],
                                          query_mask=mask[these],
                                          as_sampled=torch.ones(len(agent_rows), dtype=torch.bool))
    return debate


# ---------------------------------------------------------------- forward_pairs


def holds(earlier, later, rows: torch.Tensor) -> torch.Tensor:
    """For each row: does its earlier prompt and response (padding removed) start, token for token,
    the same row's later prompt? A bool [len(rows)]."""
    def real(batch, key, b):
        return getattr(batch, key)[b][getattr(batch, key.replace("ids", "mask"))[b].bool()]
    return torch.tensor([torch.equal(real(later, "query_ids", b)[:len(conversation)], conversation)
                         for b in rows.tolist() for conversation in [torch.cat(
                             [real(earlier, "query_ids", b), real(earlier, "response_ids", b)])]],
                        dtype=torch.bool)


def held_rows(team, exp, args, rows, adapter=None) -> torch.Tensor:
    """The conversation forward's per-row mask [len(rows)]: the rows it serves, the others handed
    (once, in the rows' order) to its plain function (here a recording one: forward_pairs' loop).
    The served rows are those whose every trained turn holds its agent's earlier turns as sampled
    (Experience.as_sampled, checked against the tokens: holds), none where an agent's turns
    run on several adapters, and the merged outputs of all the rows equal the loop's (fp32
    noise)."""
    handed = []

    def plain(part):
        handed.append(part.clone())
        return cotrain.forward_pairs(team, exp, part, args, adapter, 0, plain=True)
    with torch.no_grad():
        read = functools.partial(common.forward_conversation, temperature=args.temperature)
        out = conversation.conversation_forward(team, exp, rows, adapter, 0, read, plain)
        loop = cotrain.forward_pairs(team, exp, rows, args, adapter, 0, plain=True)
    assert len(handed) <= 1, handed  # one call for all the rows it cannot read
    served = ~torch.isin(rows, handed[0]) if handed else torch.ones(len(rows), dtype=torch.bool)
    assert served.dtype == torch.bool and served.shape == (len(rows),)
    if handed:
        assert torch.equal(handed[0], rows[~served])  # exactly the other rows, in the rows' order
    last = max(t for t, _ in exp)
    held = torch.stack([e.as_sampled[rows] for e in exp.values()]).all(0)
    tokens = torch.ones(len(rows), dtype=torch.bool)
    for t, a in exp:
        if t != last:
            tokens &= holds(exp[(t, a)], exp[(last, a)], rows)
    assert not (held & ~tokens).any()  # the flag never claims a conversation the tokens lack
    assert not (served & ~held).any()  # it reads only the rows that hold
    if served.any():  # one adapter per agent: it serves every row that holds
        assert torch.equal(served, held)
    assert set(out) == set(loop) == set(exp)
    for key, o in out.items():  # every row, in the rows' order
        assert o["logprobs"].shape == (len(rows), exp[key].response_ids.shape[1])
        torch.testing.assert_close(o["logprobs"], loop[key]["logprobs"], **CLOSE, msg=str(key))
    return served


def one_conversation_team(args, questions: int):
    """(args, a trained-looking team, its sampled debate on `questions` training questions, every
    agent's turns made one conversation token for token)."""
    team = cotrain.build_team(args, "cpu")
    torch.manual_seed(2)
    trained_looking(team, heads=False)
    torch.manual_seed(1)
    debate, _ = debate_and_rewards(team, args, load_task("arith", "train", limit=questions))
    return args, team, as_one_conversation(debate, team.agent_tokenizers()[0])


def assert_all_equal_the_loop(results, plain, plain_grads, exp):
    """Every mode's outputs (log-probs, entropies, hidden states) and gradients equal the loop's
    (fp32 noise); results: {mode: (outputs, gradients, forwards)}."""
    for mode, (out, grads, _) in results.items():
        for key in exp:
            for name in ("logprobs", "entropy", "hidden"):
                torch.testing.assert_close(out[key][name], plain[key][name], **CLOSE,
                                           msg=f"{mode} {key} {name}")
        assert set(grads) == set(plain_grads)
        for n in plain_grads:
            torch.testing.assert_close(grads[n], plain_grads[n], atol=1e-5, rtol=1e-4, msg=n)


def forward_and_backward(team, exp, rows, args, chunk, grad, weights, params, monkeypatch):
    """cotrain.forward_pairs on rows (with entropies and hidden states) and, with grad, the LoRA
    gradients of a loss on every output: (outputs, gradients, the number of model forwards)."""
    model = team.bases[0]
    with monkeypatch.context() as patch, torch.set_grad_enabled(grad):
        counter = Counter(model, patch)
        out = cotrain.forward_pairs(team, exp, rows, args, None, chunk, output_entropy=True,
                                    output_hidden=True)
        calls = counter.take()[0]
    grads = {}
    if grad:
        loss = sum((out[key]["logprobs"] * weights[key][rows]).sum()
                   + out[key]["hidden"].pow(2).mean() for key in exp)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in params.items() if p.grad is not None}
        model.zero_grad(set_to_none=True)
    return out, grads, calls


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("flags", [["--num-turns", "2"], ["--num-turns", "3"],
                                   ["--num-turns", "3", "--train-turns", "2,3"]])
def test_forward_pairs_conversation_forward_equals_its_loop(monkeypatch, flags, grad):
    """forward_pairs over every trained (turn, agent) of both agents, as make_experience and
    ppo_update call it: the conversation forward gives every turn's log-probs, entropies and hidden
    states from ONE forward per agent over its last turn (a third of the forwards for 3 turns),
    equal to the loop's one forward per pair to fp32 noise; in chunks of 1 row too (no gradients)
    and, under autograd, with the same gradients on every adapter."""
    args, team, debate = one_conversation_team(tiny_args(*flags), questions=2)
    exp = sampled_experience(team, debate)
    assert held_rows(team, exp, args, torch.arange(2)).all()  # the fast path serves every row
    turns = sorted({t for t, _ in team.trained})
    assert turns == ([1, 2] if "--train-turns" in flags else list(range(args.num_turns)))
    model = team.bases[0]
    params = {n: p for n, p in model.named_parameters() if ".lora_" in n}
    weights = {key: torch.randn(e.response_mask.shape) for key, e in exp.items()}
    rows = torch.tensor([1, 0])  # any order
    results = {}
    modes = [("loop", 0), ("fast", 0)] + ([] if grad else [("loop", 1), ("fast", 1)])
    for mode, chunk in modes:
        args.fast = mode == "fast"  # --fast: the conversation forward; --no-fast: the loop
        out, grads, calls = forward_and_backward(team, exp, rows, args, chunk, grad, weights,
                                                 params, monkeypatch)
        results[(mode, chunk)] = (out, grads, calls)
    plain, plain_grads, plain_calls = results[("loop", 0)]
    for key, e in exp.items():
        mask = e.response_mask[rows]
        assert plain[key]["logprobs"].shape == mask.shape and mask.sum() > 0
        assert (plain[key]["logprobs"].abs() > 0).sum() == mask.sum()  # a log-prob at every token
        assert plain[key]["entropy"].abs().sum() > 0 and plain[key]["hidden"].abs().sum() > 0
    assert_all_equal_the_loop(results, plain, plain_grads, exp)
    assert plain_calls == 2 * len(turns)  # the loop: one forward per (turn, agent)
    assert results[("fast", 0)][2] == 2  # one forward per agent for all its turns
    if not grad:
        assert results[("loop", 1)][2] == 2 * 2 * len(turns) and results[("fast", 1)][2] == 2 * 2
    else:
        moved = {n.split(".lora_")[1].split(".")[1] for n, g in plain_grads.items()
                 if g.abs().sum() > 0}
        assert moved == {"agent0", "agent1"}  # both adapters have gradients to compare


# ---------------------------------------------------------------- the conversation forward


@pytest.mark.parametrize("flags", [
    ["--advantage", "group", "--samples-per-question", "2"],
    ["--advantage", "gae", "--value-model", "shared"],
    ["--advantage", "gae", "--value-model", "shared", "--old-logprobs", "sampling",
     "--micro-batch-questions", "2"],
    ["--advantage", "group", "--samples-per-question", "2", "--num-turns", "3"],
    ["--advantage", "gae", "--num-turns", "3", "--train-turns", "2,3"],
    ["--advantage", "gae", "--value-model", "separate"]])
def test_one_forward_per_conversation_equals_one_forward_per_turn(monkeypatch, flags):
    """The conversation forward: the turn-2 forward also gives turn 1's log-probs, entropies and
    hidden states (turn 2's prompt holds turn 1's prompt and response), so the experience pass and
    every PPO micro-batch forward half the rows (three turns: a third); the experience, the PPO
    statistics and the trained adapters and heads equal those of one forward per turn to fp32
    noise. Non-zero heads (the values read the hidden states) and trained-looking adapters (KL not
    0). With --train-turns 2,3 turn 3's forward carries turn 2 (turn 1 is the base's, untrained);
    with --value-model separate the critic's forwards take it too."""
    group = "group" in flags
    records = [r for r in load_task("arith", "train", limit=2) for _ in range(2 if group else 1)]
    results = {}
    for mode in ("per turn", "conversation"):
        args = tiny_args("--ppo-epochs", "2", *flags)
        team = cotrain.build_team(args, "cpu")
        torch.manual_seed(2)
        trained_looking(team)
        torch.manual_seed(1)
        debate, rewards = debate_and_rewards(team, args, records)
        debate = as_one_conversation(debate, team.agent_tokenizers()[0])
        before = trainables(team)
        args.fast = mode == "conversation"  # the fast path on: it serves every row
        with monkeypatch.context() as patch:
            counter = Counter(team.bases[0], patch)
            exp = cotrain.make_experience(team, debate, rewards, args)
            experience = counter.take()
            stats = cotrain.ppo_update(team, exp, args, shuffle_seed=3)
            ppo = counter.take()
        results[mode] = dict(exp=exp, stats=stats, before=before, after=trainables(team),
                             counts=(experience, ppo))
    separate = results["per turn"]
    one = results["conversation"]
    (exp_calls, exp_rows, _), (ppo_calls, ppo_rows, ppo_backwards) = separate["counts"]
    micro = 2 if "--micro-batch-questions" in flags else 1
    trained_turns = [1, 2] if "--train-turns" in flags else list(range(3 if "--num-turns" in flags
                                                                         else 2))
    n = len(trained_turns)  # one forward per (turn, agent) -> one per agent
    assert one["counts"] == ((exp_calls // n, exp_rows // n, 0),
                             (ppo_calls // n, ppo_rows // n, ppo_backwards))
    # epochs x micro-batches x turns x agents (x 2 with a critic); one backward per micro-batch
    critic = 2 if "separate" in flags else 1
    assert ppo_calls == 2 * (len(records) // micro) * n * 2 * critic
    assert ppo_backwards == 2 * (len(records) // micro)
    keys = {(t, a) for t in trained_turns for a in (0, 1)}
    assert set(one["exp"]) == set(separate["exp"]) == keys
    for key, e in separate["exp"].items():
        assert set(tensors(e)) == set(tensors(one["exp"][key]))
        for name, tensor in tensors(e).items():
            torch.testing.assert_close(getattr(one["exp"][key], name), tensor, atol=2e-5,
                                       rtol=1e-4, msg=f"{key} {name}")
        assert e.kl.abs().max() > 1e-3 and e.advantages.abs().sum() > 0
        assert len(separate["stats"][key]) == len(one["stats"][key]) == 2
        for k, (s, o) in enumerate(zip(separate["stats"][key], one["stats"][key])):
            assert set(s) == set(o)
            for name in s:
                assert math.isclose(s[name], o[name], rel_tol=1e-4, abs_tol=1e-5), (
                    key, k, name, s[name], o[name])
    moved = 0
    for name, value in separate["after"].items():
        torch.testing.assert_close(one["after"][name], value, atol=1e-5, rtol=1e-4, msg=name)
        moved += not torch.equal(value, separate["before"][name])
    assert moved > 0  # the update changed something to compare


def break_conversation(debate, agent: int, row: int):
    """Agent `agent`'s turn-2 prompt of debate `row` no longer starts with its turn-1 prompt +
    response: a token of the turn-1 response differs (a re-tokenisation that differs: run_debate
    then gives the text, and says so in as_sampled)."""
    second = debate.rollout[(1, agent)]
    second["as_sampled"][row] = False
    n = int(debate.rollout[(0, agent)]["query_mask"][row].sum())
    first_real = int((second["query_mask"][row] == 0).sum())
    second["query_ids"][row, first_real + n] += 1


@pytest.mark.parametrize("grad", [False, True])
def test_forward_pairs_serves_the_rows_that_hold_and_loops_over_the_rest(monkeypatch, grad):
    """Rows held and rows not in one call: the held rows from one forward per agent, the others
    from the loop (one forward per (turn, agent)), merged in the rows' order, equal to the loop's
    outputs for every row (fp32 noise) and, under autograd, its gradients; in chunks of 1 too."""
    args, team, debate = one_conversation_team(
        tiny_args("--num-turns", "2", "--questions-per-update", "3"), questions=3)
    break_conversation(debate, agent=0, row=1)  # debate 1: agent 0's conversation does not hold
    exp = sampled_experience(team, debate)
    rows = torch.tensor([2, 1, 0])  # any order
    held = held_rows(team, exp, args, rows)
    assert held.tolist() == [True, False, True]  # per row, over every agent's turns
    assert held_rows(team, exp, args, torch.tensor([1])).tolist() == [False]
    assert held_rows(team, exp, args, torch.tensor([0, 2])).tolist() == [True, True]
    model = team.bases[0]
    params = {n: p for n, p in model.named_parameters() if ".lora_" in n}
    weights = {key: torch.randn(e.response_mask.shape) for key, e in exp.items()}
    results = {}
    for fast, chunk in [(False, 0), (True, 0)] + ([] if grad else [(True, 1)]):
        args.fast = fast
        out, grads, calls = forward_and_backward(team, exp, rows, args, chunk, grad, weights,
                                                 params, monkeypatch)
        results[(fast, chunk)] = (out, grads, calls)
    plain, plain_grads, plain_calls = results[(False, 0)]
    assert plain_calls == 4  # the loop: one forward per (turn, agent), all rows
    assert results[(True, 0)][2] == 2 + 4  # one per agent (held rows) + the loop (the one other)
    if not grad:  # chunks of 1: two held rows x 2 agents, one row x 4 pairs
        assert results[(True, 1)][2] == 2 * 2 + 4
    for key, e in exp.items():
        mask = e.response_mask[rows]
        assert plain[key]["logprobs"].shape == mask.shape and mask.sum() > 0
        assert (plain[key]["logprobs"].abs() > 0).sum() == mask.sum()  # a log-prob at every token
    assert_all_equal_the_loop(results, plain, plain_grads, exp)


@pytest.mark.parametrize("case", ["one row", "no row", "agent-turn"])
def test_the_update_where_some_or_no_conversations_hold_equals_the_plain_path(monkeypatch, case):
    """make_experience and ppo_update with --fast where the conversations hold only in part: one
    row whose turn-2 prompt does not start with its turn-1 prompt + response (the held mask says
    so; that row takes the loop, the other the conversation forward: fp32 noise); no row (the held
    mask all False: forward_pairs is the loop, bit for bit the plain path's update); a LoRA per
    (turn, agent): the policies' forwards take the loop (nothing held), the reference's (the base
    at every turn) still one forward per agent (fp32 noise)."""
    records = load_task("arith", "train", limit=2)
    flags = ["--policy-sharing", "agent-turn"] if case == "agent-turn" else []
    results = {}
    for fast in (False, True):
        args = tiny_args("--ppo-epochs", "1", *flags)
        args.fast = fast
        team = cotrain.build_team(args, "cpu")
        torch.manual_seed(1)
        debate, rewards = debate_and_rewards(team, args, records)
        debate = as_one_conversation(debate, team.agent_tokenizers()[0])
        exp = sampled_experience(team, debate)
        rows = torch.arange(2)
        policies = held_rows(team, exp, args, rows)
        assert policies.tolist() == ([False, False] if case == "agent-turn" else [True, True])
        assert held_rows(team, exp, args, rows, "__base__").all()  # the reference: the base always
        if case != "agent-turn":  # agent 1, question 1 (and question 0): a response token differs
            break_conversation(debate, agent=1, row=1)
            if case == "no row":
                break_conversation(debate, agent=1, row=0)
            expected = [case == "one row", False]
            assert held_rows(team, exp, args, rows).tolist() == expected
            assert held_rows(team, exp, args, rows, "__base__").tolist() == expected
        with monkeypatch.context() as patch:
            counter = Counter(team.bases[0], patch)
            exp = cotrain.make_experience(team, debate, rewards, args)
            stats = cotrain.ppo_update(team, exp, args)
            calls = counter.take()[0]
        results[fast] = (exp, stats, trainables(team), calls)
    (exp0, stats0, after0, calls0), (exp1, stats1, after1, calls1) = results[False], results[True]
    assert set(exp0) == set(exp1)
    if case == "no row":
        assert calls1 == calls0
        for key in exp0:
            assert stats0[key] == stats1[key], (case, key)
            assert set(tensors(exp0[key])) == set(tensors(exp1[key])), (case, key)
            for name, tensor in tensors(exp0[key]).items():
                assert torch.equal(tensor, getattr(exp1[key], name)), (case, key, name)
        assert all(torch.equal(after0[n], after1[n]) for n in after0), case
        return
    assert calls1 != calls0  # the conversation forward served some rows
    for key in exp0:
        assert set(tensors(exp0[key])) == set(tensors(exp1[key])), (case, key)
        for name, tensor in tensors(exp0[key]).items():
            torch.testing.assert_close(getattr(exp1[key], name), tensor, atol=2e-5, rtol=1e-4,
                                       msg=f"{case} {key} {name}")
        for k, (s, o) in enumerate(zip(stats0[key], stats1[key])):
            assert set(s) == set(o)
            for name in s:
                assert math.isclose(s[name], o[name], rel_tol=1e-4, abs_tol=1e-5), (
                    case, key, k, name, s[name], o[name])
    for n in after0:
        torch.testing.assert_close(after1[n], after0[n], atol=1e-5, rtol=1e-4, msg=n)


# ---------------------------------------------------------------- --old-logprobs


@pytest.mark.parametrize("flags", [["--advantage", "group", "--samples-per-question", "2"], []])
def test_sampling_old_logprobs_equal_a_recompute(monkeypatch, flags):
    """--old-logprobs sampling (the default): π_old and the entropies are generate()'s own, bit for
    bit, and within 1e-5 of a recompute's (a forward after the rollout); the reference is the
    base's forward either way; the experience pass forwards the policy's rows only where their
    hidden states are read (--advantage gae --value-model shared): with --advantage group it runs
    the '__base__' rows alone, half the rows of a recompute. auto on an fp32 base: as sampled."""
    group = "group" in flags
    records = [r for r in load_task("arith", "train", limit=2) for _ in range(2 if group else 1)]
    rows_seen, exps = {}, {}
    for mode in ("auto", "sampling", "recompute"):
        args = tiny_args("--old-logprobs", mode, *flags)
        team = cotrain.build_team(args, "cpu")
        trained_looking(team, heads=False)  # seeded by build_team: the same adapters in both modes
        torch.manual_seed(1)
        debate, rewards = debate_and_rewards(team, args, records)
        with monkeypatch.context() as patch:
            counter = Counter(team.bases[0], patch)
            exps[mode] = cotrain.make_experience(team, debate, rewards, args)
            rows_seen[mode] = counter.take()[1]
        if mode == "sampling":
            for (t, a), e in exps[mode].items():
                ro = debate.rollout[(t, a)]
                width, mask = e.response_mask.shape[1], e.response_mask
                assert torch.equal(e.old_logprobs, ro["logprobs"][:, :width]), (t, a)
                assert torch.equal(e.entropy, ro["entropy"][:, :width]), (t, a)
                with torch.no_grad():
                    ref = reference_logprobs(team.bases[0], ro["query_ids"], ro["query_mask"],
                                             ro["response_ids"], ro["response_mask"],
                                             args.temperature)
                # make_experience forwards the reference rows in other batches: fp32 noise
                torch.testing.assert_close(e.ref_logprobs, ref[:, :width], **CLOSE)
                torch.testing.assert_close(e.kl, (e.old_logprobs - e.ref_logprobs) * mask,
                                           atol=1e-6, rtol=0)
                assert e.kl.abs().max() > 1e-3, (t, a)  # the policy is not the base
    rows = 2 * 2 * len(records)  # 2 turns x 2 agents x the debates: one copy of every response
    assert rows_seen == {"auto": rows * (1 if group else 2), "sampling": rows * (1 if group else 2),
                         "recompute": rows * 2}
    for key, e in exps["auto"].items():
        assert set(tensors(e)) == set(tensors(exps["sampling"][key])), key
        assert all(torch.equal(value, getattr(exps["sampling"][key], name))
                   for name, value in tensors(e).items()), key
    for key, e in exps["sampling"].items():  # the same debate (seeded): both π_old agree
        recomputed = exps["recompute"][key]
        assert set(tensors(e)) == set(tensors(recomputed)), key  # the same tensors held
        assert torch.equal(e.response_ids, recomputed.response_ids)
        for name in ("old_logprobs", "entropy"):
            torch.testing.assert_close(getattr(e, name), getattr(recomputed, name), **CLOSE,
                                       msg=f"{key} {name}")


# ---------------------------------------------------------------- π's one definition


def twice_as_hot(logits, temperature):
    """Another definition of π: the softmax at twice the temperature (its value at T is the real
    π's at 2T)."""
    return F.log_softmax(logits.float() / (2 * temperature), dim=-1)


def test_one_definition_of_pi(monkeypatch):
    """common.log_policy is π's one definition: replaced by another, every path that reads
    log-probs reads the new one, and they agree with each other as before: generate with
    fast=False (peft's routing, transformers) and fast=True (stacked routing), the static-cache
    decoder as the model's sampling_engine (greedy: the same tokens), forward_responses on the
    generated rows, and cotrain's conversation forward (forward_pairs with --fast, on a two-turn
    debate whose turn-1 rollouts generate sampled) against its loop (--no-fast). Each differs from
    its value under the real π, and equals the real π's at twice the temperature."""
    from test_common import chat, make_peft

    from nanomarl.models import load_tokenizer

    tok = load_tokenizer("tiny")
    model = make_peft()  # agent0, agent1: random B, the adapters differ
    names = ["agent0", "agent1", "__base__", "agent1"]
    prompts = chat(tok, ["q one", "question two is longer", "3", "four four"])
    args = tiny_args()
    team = cotrain.build_team(args, "cpu")
    torch.manual_seed(2)
    trained_looking(team, heads=False)
    records = load_task("arith", "train", limit=2)
    keys = ("query_ids", "query_mask", "response_ids", "response_mask")

    def every_path() -> dict:
        out = {fast: common.generate(model, tok, prompts, names, max_new_tokens=8, greedy=True,
                                     fast=fast) for fast in (False, True)}
        model.sampling_engine = FastDecoder(model)  # CPU: eager; CUDA's fast_decoder gives it
        try:
            out["decoder"] = common.generate(model, tok, prompts, names, max_new_tokens=8,
                                             greedy=True, fast=True)
        finally:
            del model.sampling_engine
        with torch.no_grad():  # greedy: π at T = 1
            out["forward_responses"] = common.forward_responses(
                model, *(out[False][k] for k in keys), names, 1.0, output_entropy=True)
        torch.manual_seed(1)
        debate, _ = debate_and_rewards(team, args, records)  # sampled at args.temperature
        debate = as_one_conversation(debate, team.agent_tokenizers()[0])
        exp = sampled_experience(team, debate)
        assert held_rows(team, exp, args, torch.arange(2)).all()  # the conversation forward: all
        for fast in (False, True):
            args.fast = fast
            with torch.no_grad():
                out[f"forward_pairs fast={fast}"] = cotrain.forward_pairs(
                    team, exp, torch.arange(2), args, output_entropy=True)
        out["debate"] = debate
        return out

    results = {}
    for patched in (False, True):
        with monkeypatch.context() as patch:
            if patched:
                patch.setattr(common, "log_policy", twice_as_hot)
            results[patched] = every_path()
    real, other = results[False], results[True]
    mask = real[False]["response_mask"]
    assert mask.sum() > 8
    for out in results.values():  # every path agrees with the others, under either definition
        for path in (True, "decoder", "forward_responses"):
            if path != "forward_responses":
                for k in ("response_ids", "response_mask"):
                    assert torch.equal(out[path][k], out[False][k]), (path, k)
            for k in ("logprobs", "entropy"):
                torch.testing.assert_close(out[path][k], out[False][k], atol=1e-5, rtol=0,
                                           msg=f"{path} {k}")
        conversation_out, loop = out["forward_pairs fast=True"], out["forward_pairs fast=False"]
        for key in loop:
            for k in ("logprobs", "entropy"):
                torch.testing.assert_close(conversation_out[key][k], loop[key][k], **CLOSE,
                                           msg=f"{key} {k}")
        for a in range(args.num_agents):  # turn 1: π as generate sampled it (--old-logprobs)
            torch.testing.assert_close(loop[(0, a)]["logprobs"],
                                       out["debate"].rollout[(0, a)]["logprobs"], **CLOSE)
    # the same tokens, other log-probs: the new definition reached every path
    assert torch.equal(other[False]["response_ids"], real[False]["response_ids"])
    for path in (False, True, "decoder", "forward_responses"):
        for k in ("logprobs", "entropy"):
            gap = ((other[path][k] - real[path][k]) * mask).abs().max()
            assert gap > 1e-2, (path, k, gap)
    for fast in (False, True):
        pairs = f"forward_pairs fast={fast}"
        for key in real[pairs]:
            ro = real["debate"].rollout[key]
            assert torch.equal(ro["response_ids"], other["debate"].rollout[key]["response_ids"])
            gap = ((other[pairs][key]["logprobs"] - real[pairs][key]["logprobs"])
                   * ro["response_mask"]).abs().max()
            assert gap > 1e-2, (pairs, key, gap)
    # and what it defines: the real π at twice the temperature
    with torch.no_grad():
        hot = common.forward_responses(model, *(real[False][k] for k in keys), names, 2.0,
                                       output_entropy=True)
        args.fast, args.temperature = False, 2 * args.temperature
        hot_pairs = cotrain.forward_pairs(team, sampled_experience(team, real["debate"]),
                                          torch.arange(2), args, output_entropy=True)
    for k in ("logprobs", "entropy"):
        torch.testing.assert_close(other[False][k], hot[k], atol=1e-5, rtol=0, msg=k)
        for key in hot_pairs:
            torch.testing.assert_close(other["forward_pairs fast=True"][key][k], hot_pairs[key][k],
                                       **CLOSE, msg=f"{key} {k}")
