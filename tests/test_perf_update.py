"""What cotrain.py's update costs, and that its cheaper designs change no number, on the tiny model:

  * --value-model separate (the paper's critic adapter) equals the plain update written out below,
    bit for bit: per (turn, agent) a reference, a π_old and a critic forward for the experience,
    and per micro-batch and (turn, agent) a policy and a critic forward, the summed losses
    back-propagated once;
  * --value-model shared: the value heads read the policy forward's hidden states, so the
    experience and every PPO micro-batch need no critic forward;
  * counting model forwards and backwards shows what each design costs per update.

The fast paths that fork the algorithm (the conversation forward, --old-logprobs sampling) against
their plain paths: tests/test_fast_paths.py; here cotrain.py runs its plain path (tiny_args:
--no-fast)."""
import math

import pytest
import torch

import cotrain
from common import adapter_parameters, batched, forward_responses
from magrpo import reference_logprobs
from cotrain import gae, kl_shaped_rewards, policy_loss, value_loss
from nanomarl.tasks.debate import load_task
from test_fast_paths import (Counter, ascii_fraction, debate_and_rewards, tensors, tiny_args,
                             trainables)

KEYS = ("query_ids", "query_mask", "response_ids", "response_mask")


@pytest.fixture(autouse=True)
def one_forward_per_pair():
    """The update written out below forwards one (turn, agent) at a time: cotrain.py's plain path,
    tiny_args' --no-fast."""
    assert not tiny_args().fast

# ---------------------------------------------------------------- the plain update (the reference)


def plain_forward(model, batch: dict, name: str, temperature: float, **kwargs) -> dict:
    """forward_responses on the batch's prompts and responses, every row on adapter `name`."""
    return forward_responses(model, *(batch[k] for k in KEYS), [name] * len(batch["query_ids"]),
                             temperature, **kwargs)


def plain_forward_chunks(model, batch: dict, name: str, size: int, temperature: float,
                         **kwargs) -> dict:
    """plain_forward over chunks of `size` rows, outputs concatenated."""
    n = len(batch["query_ids"])
    outs = [plain_forward(model, {k: v[s:s + size] for k, v in batch.items()}, name, temperature,
                          **kwargs) for s in range(0, n, size)]
    return {k: torch.cat([o[k] for o in outs]) for k in ("logprobs", "entropy", "hidden")
            if outs[0][k] is not None}


@torch.no_grad()
def plain_make_experience(team, debate, final_rewards, args):
    """make_experience for --advantage gae --value-model separate --old-logprobs recompute, written
    out: per (turn, agent) a reference forward, π_old in the update's shapes (a micro-batch of
    debates at a time) and the critic's forward."""
    exp = {}
    for t, a in team.trained:
        ro = debate.rollout[(t, a)]
        batch = {k: ro[k] for k in KEYS}
        model, size = team.bases[0], args.forward_batch_size
        micro = args.micro_batch_questions or len(batch["query_ids"])
        policy = plain_forward_chunks(model, batch, team.adapter_names[t][a], micro,
                                      args.temperature, output_entropy=True)
        hidden = plain_forward_chunks(model, batch, "critic", size, args.temperature,
                                      output_hidden=True)["hidden"]
        ref_logprobs = batched(lambda **rows: reference_logprobs(model, **rows,
                                                                 temperature=args.temperature),
                               batch, size)
        mask = batch["response_mask"]
        values = team.heads[team.head_keys[(t, a)]](hidden) * mask
        final = final_rewards[:, t, a].to(mask.device)
        rewards, kl = kl_shaped_rewards(policy["logprobs"], ref_logprobs, mask, final,
                                        args.kl_coef)
        advantages, returns = gae(rewards, values, mask, cotrain.GAE_GAMMA, args.gae_lambda)
        exp[(t, a)] = cotrain.Experience(*(batch[k] for k in KEYS), as_sampled=ro["as_sampled"],
                                         old_logprobs=policy["logprobs"],
                                         ref_logprobs=ref_logprobs, old_values=values, kl=kl,
                                         rewards=rewards, entropy=policy["entropy"],
                                         returns=returns,
                                         advantages=cotrain.masked_whiten(advantages, mask))
    return exp


def plain_ppo_update(team, exp, args, shuffle_seed=0):
    """ppo_update for --value-model separate (one process), written out: per micro-batch and (turn,
    agent) a policy and a critic forward and their losses, then one backward of the sum."""
    n = next(iter(exp.values())).response_mask.shape[0]
    mb_size = args.minibatch_questions or n
    micro = min(args.micro_batch_questions or mb_size, mb_size)
    shuffle = torch.Generator().manual_seed(shuffle_seed)
    keys = [*KEYS, "old_logprobs", "old_values", "advantages", "returns"]
    stats = {key: [] for key in exp}
    model = team.bases[0]
    for epoch in range(args.ppo_epochs):
        perm = torch.randperm(n, generator=shuffle)
        for start in range(0, n, mb_size):
            minibatch = perm[start:start + mb_size]
            num_tokens = {key: e.response_mask[minibatch].sum() for key, e in exp.items()}
            mb_stats = {key: [] for key in exp}
            for opt in team.optimizers.values():
                opt.zero_grad(set_to_none=True)
            for m_start in range(0, len(minibatch), micro):
                rows = minibatch[m_start:m_start + micro]
                loss = 0.0
                for (t, a), e in exp.items():
                    batch = {k: getattr(e, k)[rows] for k in keys}
                    mask = batch["response_mask"]
                    new_logprobs = plain_forward(model, batch, team.adapter_names[t][a],
                                                 args.temperature)["logprobs"]
                    pg, s = policy_loss(new_logprobs, batch["old_logprobs"], batch["advantages"],
                                        mask, num_tokens[(t, a)], args.cliprange)
                    hidden = plain_forward(model, batch, "critic", args.temperature,
                                           output_hidden=True)["hidden"]
                    new_values = team.heads[team.head_keys[(t, a)]](hidden) * mask
                    vf, vs = value_loss(new_values, batch["old_values"], batch["returns"], mask,
                                        num_tokens[(t, a)], args.cliprange)
                    loss = loss + pg
                    loss = loss + args.vf_coef * vf
                    mb_stats[(t, a)].append({**s, **vs})
                loss.backward()
            for opt in team.optimizers.values():
                params = [p for g in opt.param_groups for p in g["params"]]
                torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
                opt.step()
            for key, pieces in mb_stats.items():
                total = {k: float(sum(p[k] for p in pieces)) for k in pieces[0]
                         if k != "max_abs_logratio"}
                total["max_abs_logratio"] = float(max(p["max_abs_logratio"] for p in pieces))
                stats[key].append(total)
    return stats


# ---------------------------------------------------------------- tests


def test_separate_equals_the_plain_update_bit_for_bit():
    """--value-model separate: the experience and the update are bit-identical to the plain ones
    above: tensors, statistics, parameters."""
    args = tiny_args("--value-model", "separate", "--ppo-epochs", "2")
    records = load_task("arith", "train", limit=2)
    old_team, new_team = cotrain.build_team(args, "cpu"), cotrain.build_team(args, "cpu")
    assert old_team.base_adapters[0] == ["agent0", "agent1", "critic"]
    # the same non-zero heads in both: the values read the critic's states
    for team in (old_team, new_team):
        torch.manual_seed(2)
        with torch.no_grad():
            for p in team.heads.parameters():
                p.normal_(std=0.5)
    before = trainables(old_team)
    # build_team seeds: the same adapters
    assert all(torch.equal(v, trainables(new_team)[k]) for k, v in before.items())
    torch.manual_seed(1)
    debate, rewards = debate_and_rewards(old_team, args, records)
    old_exp = plain_make_experience(old_team, debate, rewards, args)
    new_exp = cotrain.make_experience(new_team, debate, rewards, args)
    assert set(old_exp) == set(new_exp) == {(0, 0), (0, 1), (1, 0), (1, 1)}
    for key in old_exp:
        assert set(tensors(old_exp[key])) == set(tensors(new_exp[key]))
        for name, tensor in tensors(old_exp[key]).items():
            assert torch.equal(tensor, getattr(new_exp[key], name)), (key, name)
    assert all(e.advantages.abs().sum() > 0 and e.old_values.abs().sum() > 0
               for e in new_exp.values())
    old_stats = plain_ppo_update(old_team, old_exp, args, shuffle_seed=3)
    new_stats = cotrain.ppo_update(new_team, new_exp, args, shuffle_seed=3)
    for key in old_exp:
        # losses, clip fractions, ratios: every minibatch
        assert old_stats[key] == new_stats[key], key
    old_after, new_after = trainables(old_team), trainables(new_team)
    for name in old_after:
        assert torch.equal(old_after[name], new_after[name]), name
    moved = {n.split(".lora_")[1].split(".")[1] for n in old_after
             if ".lora_B." in n and not torch.equal(before[n], old_after[n])}
    assert moved == {"agent0", "agent1", "critic"}  # the update did something to compare


def test_shared_experience_reads_the_values_from_the_policy_forward():
    """--value-model shared: the old and reference log-probs, entropies and KL are those of one
    policy and one reference forward per (turn, agent), and the values are the heads applied to
    the POLICY's hidden states (no critic)."""
    args = tiny_args()
    assert args.value_model == "shared"  # the default
    records = load_task("arith", "train", limit=2)
    team = cotrain.build_team(args, "cpu")
    assert team.base_adapters[0] == ["agent0", "agent1"]
    assert "critic" not in team.bases[0].peft_config
    assert sorted(team.optimizers) == ["agent0", "agent1", "value_heads"]
    with torch.no_grad():  # non-zero heads, so the values say which hidden states they read
        for p in team.heads.parameters():
            p.normal_(std=0.5)
    torch.manual_seed(1)
    debate, rewards = debate_and_rewards(team, args, records)
    exp = cotrain.make_experience(team, debate, rewards, args)
    model = team.bases[0]
    for (t, a), e in exp.items():
        ro = debate.rollout[(t, a)]
        batch = {k: ro[k] for k in ("query_ids", "query_mask", "response_ids", "response_mask")}
        with torch.no_grad():
            own = forward_responses(model, *batch.values(), [f"agent{a}"] * 2, args.temperature,
                                    output_hidden=True, output_entropy=True)
            ref = reference_logprobs(model, *batch.values(), temperature=args.temperature)
        width = e.response_mask.shape[1]
        mask = e.response_mask
        close = dict(rtol=0, atol=1e-5)  # fp32 noise: π_old a micro-batch of one debate at a time
        torch.testing.assert_close(e.old_logprobs, own["logprobs"][:, :width], **close,
                                   msg=str((t, a)))
        torch.testing.assert_close(e.entropy, own["entropy"][:, :width], **close,
                                   msg=str((t, a)))
        torch.testing.assert_close(e.ref_logprobs, ref[:, :width], **close, msg=str((t, a)))
        values = team.heads[f"turn{t + 1}"](own["hidden"][:, :width]) * mask
        torch.testing.assert_close(e.old_values, values, **close)
        assert e.old_values.abs().sum() > 0


@pytest.mark.parametrize("value_model", ["shared", "separate"])
def test_ratio_is_one_on_the_first_minibatch(value_model):
    args = tiny_args("--value-model", value_model, "--questions-per-update", "3",
                     "--micro-batch-questions", "2", "--ppo-epochs", "2", "--lr", "3e-3",
                     "--temperature", "0.1")
    team = cotrain.build_team(args, "cpu")
    _, exp, _ = cotrain.rollout_step(team, args, load_task("arith", "train", limit=3),
                                     ascii_fraction)
    stats = cotrain.ppo_update(team, exp, args)
    assert stats["skipped"] == 0 and set(exp) == {(0, 0), (0, 1), (1, 0), (1, 1)}
    for key in exp:
        first = stats[key][0]  # epoch 0, minibatch 0: the policy that generated the rollout
        assert first["max_abs_logratio"] < 1e-5, key
        # approxkl sums ½ logratio² over the tokens: per token, what |logratio| < 1e-5 allows
        assert first["clipfrac"] == 0.0 and first["approxkl"] / first["tokens"] < 5e-11, key
        assert math.isclose(first["ratio"] / first["tokens"], 1.0, abs_tol=1e-6)
        assert stats[key][-1]["max_abs_logratio"] > 1e-3, key  # after a step the policy has moved


def test_shared_isolation_one_agent_moves_only_its_adapter_and_the_heads():
    args = tiny_args("--lr", "1e-2", "--ppo-epochs", "2")
    team = cotrain.build_team(args, "cpu")
    model = team.bases[0]
    groups = {name: {id(p) for g in opt.param_groups for p in g["params"]}
              for name, opt in team.optimizers.items()}
    assert groups["agent0"] == {id(p) for p in adapter_parameters(model, "agent0")}
    assert groups["value_heads"] == {id(p) for p in team.heads.parameters()}
    with torch.no_grad():
        for p in team.heads.parameters():
            p.normal_(std=0.5)
    records = load_task("arith", "train", limit=2)
    _, exp, _ = cotrain.rollout_step(team, args, records, ascii_fraction)
    # agent 0's policy + value loss from ONE forward: gradients reach agent 0's adapter and the
    # head, nothing else
    e = exp[(1, 0)]
    out = cotrain.forward_pairs(team, {(1, 0): e}, torch.arange(2), args, output_hidden=True)[(1, 0)]
    mask, tokens = e.response_mask, e.response_mask.sum()
    pg, _ = policy_loss(out["logprobs"], e.old_logprobs, e.advantages, mask, tokens, 0.2)
    vf, _ = value_loss(team.heads["turn2"](out["hidden"]) * mask, e.old_values, e.returns,
                       mask, tokens, 0.2)
    (pg + args.vf_coef * vf).backward()
    with_grad = {n for n, p in model.named_parameters()
                 if p.grad is not None and p.grad.abs().sum() > 0}
    agent0 = (".lora_A.agent0.", ".lora_B.agent0.")
    assert with_grad and all(any(k in n for k in agent0) for n in with_grad), with_grad
    assert team.heads["turn2"].linear.weight.grad.abs().sum() > 0
    assert team.heads["turn1"].linear.weight.grad is None
    model.zero_grad(set_to_none=True)
    team.heads.zero_grad(set_to_none=True)
    # a whole update in which only agent 0 is trained: agent 1's adapter and the base stay
    # bit-identical
    team.trained = [(0, 0), (1, 0)]
    _, exp, _ = cotrain.rollout_step(team, args, records, ascii_fraction)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    heads_before = {k: v.clone() for k, v in team.heads.state_dict().items()}
    stats = cotrain.ppo_update(team, exp, args)
    assert stats["skipped"] == 0 and stats["grad_norm/agent1"] == [0.0, 0.0]
    changed = {n for n, p in model.named_parameters() if not torch.equal(before[n], p)}
    assert changed and all(any(k in n for k in agent0) for n in changed), changed
    assert all(not torch.equal(heads_before[k], v) for k, v in team.heads.state_dict().items())


@pytest.mark.parametrize("value_model", ["shared", "separate"])
def test_value_loss_gradient_reaches_the_policy_adapter_only_when_shared(value_model):
    """Advantages set to zero: the surrogate sends exactly no gradient, so what reaches the policy
    adapters is the value loss's. Shared: it does (through the hidden states the heads read), and
    the heads learn. Separate: the value loss trains the critic adapter and the heads, never a
    policy."""
    args = tiny_args("--value-model", value_model, "--ppo-epochs", "1", "--lr", "1e-2")
    team = cotrain.build_team(args, "cpu")
    with torch.no_grad():  # non-zero heads: with zero-initialised ones dV/dh = 0 on the first step
        for p in team.heads.parameters():
            p.normal_(std=0.5)
    _, exp, _ = cotrain.rollout_step(team, args, load_task("arith", "train", limit=2),
                                     ascii_fraction)
    for e in exp.values():
        e.advantages.zero_()
    stats = cotrain.ppo_update(team, exp, args)
    values = "value_heads" if value_model == "shared" else "critic"
    assert stats[f"grad_norm/{values}"][0] > 1e-3
    for agent in ("agent0", "agent1"):
        if value_model == "shared":
            assert stats[f"grad_norm/{agent}"][0] > 1e-4, agent
        else:
            assert stats[f"grad_norm/{agent}"][0] == 0.0, agent


def test_forward_and_backward_counts_per_update(monkeypatch):
    """The update shape of tiny_args (2 agents x 2 turns, 2 questions, 4 PPO epochs, micro-batches
    of one question, forward batches of 8 rows, π_old recomputed), the plain path. Model forward
    calls (rows) and backward calls per update:

                experience          PPO (4 epochs x 2 micro-batches x 4 pairs)       total calls
      plain     16 calls (24 rows)  64 calls (64 rows): a policy and a critic, 8 backward    80
      separate  16 calls (24 rows)  64 calls (64 rows), 8 backward                          80
      shared    12 calls (16 rows)  32 calls (32 rows): a policy, 8 backward                44
    (per (turn, agent) the experience forwards the reference and, separate, the critic in one call
    each, and π_old in the update's own shapes: one call per micro-batch of one debate). The
    conversation forward halves the calls of two turns: tests/test_fast_paths.py."""
    records = load_task("arith", "train", limit=2)
    counts = {}
    for label, value_model in (("plain", "separate"), ("separate", "separate"),
                               ("shared", "shared")):
        args = tiny_args("--value-model", value_model)
        assert (args.num_agents, args.num_turns, args.questions_per_update, args.ppo_epochs,
                args.micro_batch_questions, args.forward_batch_size) == (2, 2, 2, 4, 1, 8)
        team = cotrain.build_team(args, "cpu")
        debate, rewards = debate_and_rewards(team, args, records)
        with monkeypatch.context() as patch:
            counter = Counter(team.bases[0], patch)
            make, update = ((plain_make_experience, plain_ppo_update) if label == "plain"
                            else (cotrain.make_experience, cotrain.ppo_update))
            exp = make(team, debate, rewards, args)
            experience = counter.take()
            update(team, exp, args)
            counts[label] = dict(experience=experience, ppo=counter.take())
    assert counts["plain"] == dict(experience=(16, 24, 0), ppo=(64, 64, 8))
    assert counts["separate"] == dict(experience=(16, 24, 0), ppo=(64, 64, 8))
    assert counts["shared"] == dict(experience=(12, 16, 0), ppo=(32, 32, 8))
