"""The cheaper cotrain.py update (issue 17 item 1), on the tiny model:

  * make_experience: ONE no-grad mixed-adapter pass gives the reference log-probs ('__base__' rows), the hidden
    states of the values (policy rows: --value-model shared; 'critic' rows: separate) and, with --old-logprobs
    recompute (pinned by tiny_args), the old log-probs and entropies, where the update before it ran a policy, a
    reference and a critic forward; with --old-logprobs sampling (the default) π_old and the entropies are
    generate()'s own and the policy rows run only when their hidden states are read (the last test);
  * ppo_update --value-model shared: the value heads read the policy forward's hidden states, one forward and one
    backward per micro-batch where separate (the paper's critic adapter) needs two of each.

A copy of the update as it was before (commit e51a436, one process) is the reference: --value-model separate must
equal it bit for bit, and counting model forwards/backwards shows what each design costs per update."""
import math

import pytest
import torch

import cotrain
from cotrain import _forward, _forward_chunks, _rows, _turn_groups, gae, kl_shaped_rewards, policy_loss, value_loss
from common import adapter_parameters, batched, forward_responses, masked_whiten, reference_logprobs, tokenize_prompts
from conftest import PAPER_PPO
from nanomarl.cli import parse_args


def tiny_args(*flags):
    """The update shape of cotrain.py's default before this session (2 agents x 2 turns, 2 questions, 4 PPO epochs,
    micro-batches of one question, forward batches of 8 rows, old log-probs recomputed, one forward per turn; the
    counts in the README are for it) on the tiny model; penalties off (the tiny model never writes an answer). The
    tiny model's random bytes often include a special token that the chat drops, so some of its rows fall back to
    the text and its debates take one forward per turn anyway; the --conversation-forward tests build conversations
    that hold (as_one_conversation)."""
    return parse_args(cotrain.Args, ["--model", "tiny", "--device", "cpu", "--max-new-tokens", "6", *PAPER_PPO,
                                     "--questions-per-update", "2", "--ppo-epochs", "4", "--eval-questions", "0",
                                     "--old-logprobs", "recompute", "--no-conversation-forward",
                                     "--no-penalize-format", "--missing-eos-penalty", "0", "--sample-every", "0",
                                     "--log-every", "0", *flags])


def ascii_fraction(records, responses):
    return torch.tensor([sum(ord(c) < 128 for c in text) / max(1, len(text)) for text in responses])


# ---------------------------------------------------------------- the update before issue 17 (the reference)


@torch.no_grad()
def old_make_experience(team, debate, final_rewards, args):
    """make_experience of commit e51a436: a policy, a critic and a reference forward per (turn, base)."""
    exp = {}
    for t in sorted({t for t, _ in team.trained}):
        for i, agents in _turn_groups(team, t):
            for a in agents:
                ro = debate["rollout"][t][a]
                critic_src = ro if args.critic_history else debate["rollout"][0][a]
                exp[(t, a)] = dict(query_ids=ro["query_ids"], query_mask=ro["query_mask"], response_ids=ro["response_ids"],
                                   response_mask=ro["response_mask"], critic_query_ids=critic_src["query_ids"],
                                   critic_query_mask=critic_src["query_mask"])
            model, n, size = team.bases[i], len(debate["records"]), args.forward_batch_size
            batch = _rows(exp, t, agents, None, list(exp[(t, agents[0])]))
            names = [team.adapter_names[t][a] for a in agents for _ in range(n)]
            policy = _forward_chunks(model, batch, names, size, args.temperature, False, output_entropy=True)
            hidden = _forward_chunks(model, batch, ["critic"] * len(names), size, args.temperature, True,
                                     output_hidden=True)["hidden"]
            old_logprobs, entropy = policy["logprobs"], policy["entropy"]
            ref_logprobs = batched(lambda **rows: reference_logprobs(model, **rows, temperature=args.temperature),
                                   {k: batch[k] for k in ("query_ids", "query_mask", "response_ids", "response_mask")},
                                   size)
            for k, a in enumerate(agents):
                rows = slice(k * n, (k + 1) * n)
                mask = batch["response_mask"][rows]
                values = team.heads[team.head_keys[(t, a)]](hidden[rows]) * mask
                rewards, kl = kl_shaped_rewards(old_logprobs[rows], ref_logprobs[rows], mask,
                                                final_rewards[:, t, a].to(mask.device), args.kl_coef)
                advantages, returns = gae(rewards, values, mask, args.gae_gamma, args.gae_lambda)
                e = exp[(t, a)]
                e.update({key: batch[key][rows] for key in batch})
                e.update(old_logprobs=old_logprobs[rows], ref_logprobs=ref_logprobs[rows], old_values=values, kl=kl,
                         rewards=rewards, entropy=entropy[rows], returns=returns,
                         advantages=masked_whiten(advantages, mask, all_ranks=True))
    return exp


def old_ppo_update(team, exp, args, shuffle_seed=0):
    """ppo_update of commit e51a436 (one process): per micro-batch and turn a policy forward + backward, then a
    critic forward + backward."""
    n = next(iter(exp.values()))["response_mask"].shape[0]
    mb_size = args.minibatch_questions or n
    micro = min(args.micro_batch_questions or mb_size, mb_size)
    shuffle = torch.Generator().manual_seed(shuffle_seed)
    keys = ["query_ids", "query_mask", "response_ids", "response_mask", "critic_query_ids", "critic_query_mask",
            "old_logprobs", "old_values", "advantages", "returns"]
    stats = {key: [] for key in exp}
    turns = sorted({t for t, _ in team.trained})
    for epoch in range(args.ppo_epochs):
        perm = torch.randperm(n, generator=shuffle)
        for start in range(0, n, mb_size):
            minibatch = perm[start:start + mb_size]
            num_tokens = {key: e["response_mask"][minibatch].sum() for key, e in exp.items()}
            mb_stats = {key: [] for key in exp}
            for opt in team.optimizers.values():
                opt.zero_grad(set_to_none=True)
            for m_start in range(0, len(minibatch), micro):
                rows = minibatch[m_start:m_start + micro]
                for t in turns:
                    for i, agents in _turn_groups(team, t):
                        batch = _rows(exp, t, agents, rows, keys)
                        size = len(rows)
                        names = [team.adapter_names[t][a] for a in agents for _ in range(size)]
                        parts = [slice(k * size, (k + 1) * size) for k in range(len(agents))]
                        new_logprobs = _forward(team.bases[i], batch, names, args.temperature, False)["logprobs"]
                        pg_total, pg_stats = 0.0, []
                        for a, r in zip(agents, parts):
                            loss, s = policy_loss(new_logprobs[r], batch["old_logprobs"][r], batch["advantages"][r],
                                                  batch["response_mask"][r], num_tokens[(t, a)], args.cliprange)
                            pg_total = pg_total + loss
                            pg_stats.append(s)
                        pg_total.backward()
                        hidden = _forward(team.bases[i], batch, ["critic"] * len(names), args.temperature, True,
                                          output_hidden=True)["hidden"]
                        vf_total = 0.0
                        for a, r, s in zip(agents, parts, pg_stats):
                            mask = batch["response_mask"][r]
                            new_values = team.heads[team.head_keys[(t, a)]](hidden[r]) * mask
                            loss, vs = value_loss(new_values, batch["old_values"][r], batch["returns"][r], mask,
                                                  num_tokens[(t, a)], args.cliprange_value)
                            vf_total = vf_total + args.vf_coef * loss
                            mb_stats[(t, a)].append({**s, **vs})
                        vf_total.backward()
            for opt in team.optimizers.values():
                torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], args.max_grad_norm)
                opt.step()
            for key, pieces in mb_stats.items():
                total = {k: float(sum(p[k] for p in pieces)) for k in pieces[0] if k != "max_abs_logratio"}
                total["max_abs_logratio"] = float(max(p["max_abs_logratio"] for p in pieces))
                stats[key].append(total)
    return stats


# ---------------------------------------------------------------- helpers


def trainables(team) -> dict:
    """Every LoRA weight (all adapters) and every value-head tensor, cloned."""
    out = {n: p.detach().clone() for n, p in team.bases[0].named_parameters() if ".lora_" in n}
    out.update({f"heads.{k}": v.detach().clone() for k, v in team.heads.state_dict().items()})
    return out


def debate_and_rewards(team, args, records):
    """Stages 1-3 of an update (cotrain.rollout_step without make_experience)."""
    debate = cotrain.run_debate(records, team.models(), team.agent_tokenizers(), team.adapter_names,
                                args.max_new_tokens, temperature=args.temperature)
    debate["records"] = records
    rewards = torch.stack([torch.stack([ascii_fraction(records, debate["responses"][t][a])
                                        for a in range(args.num_agents)], -1) for t in range(args.num_turns)], 1)
    return debate, rewards  # rewards [B, T, A]


class Counter:
    """Counts the model's forward calls and the rows they carry (the PeftModel's forward), and backward calls."""

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


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("flags", [["--ppo-epochs", "2"], ["--ppo-epochs", "1", "--no-critic-history"]])
def test_separate_equals_the_update_before_bit_for_bit(flags):
    """--value-model separate: the one-pass experience (policy + '__base__' + 'critic' rows in one forward) and the
    update are bit-identical to the old three-pass experience and update: tensors, statistics, parameters. With
    --no-critic-history the critic's rows follow the turn-1 prompt (a forward of their own)."""
    args = tiny_args("--value-model", "separate", *flags)
    records = cotrain.load_task("arith", "train", limit=2)
    old_team, new_team = cotrain.build_team(args, "cpu"), cotrain.build_team(args, "cpu")
    assert old_team.base_adapters[0] == ["agent0", "agent1", "critic"]
    for team in (old_team, new_team):  # the same non-zero heads: the values read the critic's hidden states
        torch.manual_seed(2)
        with torch.no_grad():
            for p in team.heads.parameters():
                p.normal_(std=0.5)
    before = trainables(old_team)
    assert all(torch.equal(v, trainables(new_team)[k]) for k, v in before.items())  # build_team seeds
    torch.manual_seed(1)
    debate, rewards = debate_and_rewards(old_team, args, records)
    old_exp = old_make_experience(old_team, debate, rewards, args)
    new_exp = cotrain.make_experience(new_team, debate, rewards, args)
    assert set(old_exp) == set(new_exp) == {(0, 0), (0, 1), (1, 0), (1, 1)}
    for key in old_exp:
        assert set(old_exp[key]) == set(new_exp[key])
        for name, tensor in old_exp[key].items():
            assert torch.equal(tensor, new_exp[key][name]), (key, name)
    assert all(e["advantages"].abs().sum() > 0 and e["old_values"].abs().sum() > 0 for e in new_exp.values())
    old_stats = old_ppo_update(old_team, old_exp, args, shuffle_seed=3)
    new_stats = cotrain.ppo_update(new_team, new_exp, args, shuffle_seed=3)
    for key in old_exp:
        assert old_stats[key] == new_stats[key], key  # losses, clip fractions, ratios: every minibatch
    old_after, new_after = trainables(old_team), trainables(new_team)
    for name in old_after:
        assert torch.equal(old_after[name], new_after[name]), name
    moved = {n.split(".lora_")[1].split(".")[1] for n in old_after if ".lora_B." in n and not torch.equal(before[n], old_after[n])}
    assert moved == {"agent0", "agent1", "critic"}  # the update did something to compare (the check can fail)


def test_shared_experience_reuses_the_policy_pass():
    """--value-model shared: the old and reference log-probs, entropies and KL are those of the old three-pass path
    (one forward per agent and one reference forward; to fp32 noise, as the one pass pads the rows of both agents
    and the base together), and the values are the heads applied to the POLICY's hidden states (no critic)."""
    args = tiny_args()
    assert args.value_model == "shared"  # the default
    records = cotrain.load_task("arith", "train", limit=2)
    team = cotrain.build_team(args, "cpu")
    assert team.base_adapters[0] == ["agent0", "agent1"] and "critic" not in team.bases[0].peft_config
    assert sorted(team.optimizers) == ["agent0", "agent1", "value_heads"]
    with torch.no_grad():  # non-zero heads, so the values say which hidden states they read
        for p in team.heads.parameters():
            p.normal_(std=0.5)
    torch.manual_seed(1)
    debate, rewards = debate_and_rewards(team, args, records)
    exp = cotrain.make_experience(team, debate, rewards, args)
    model = team.bases[0]
    for (t, a), e in exp.items():
        ro = debate["rollout"][t][a]
        batch = {k: ro[k] for k in ("query_ids", "query_mask", "response_ids", "response_mask")}
        with torch.no_grad():
            own = forward_responses(model, *batch.values(), [f"agent{a}"] * 2, args.temperature,
                                    output_hidden=True, output_entropy=True)
            ref = reference_logprobs(model, *batch.values(), temperature=args.temperature)
        width = e["response_mask"].shape[1]  # make_experience trims all-padding columns
        mask = e["response_mask"]
        close = dict(rtol=0, atol=1e-5)  # fp32 noise: that pass batches both agents' and the base's rows
        torch.testing.assert_close(e["old_logprobs"], own["logprobs"][:, :width], **close, msg=str((t, a)))
        torch.testing.assert_close(e["entropy"], own["entropy"][:, :width], **close, msg=str((t, a)))
        torch.testing.assert_close(e["ref_logprobs"], ref[:, :width], **close, msg=str((t, a)))
        values = team.heads[f"turn{t + 1}"](own["hidden"][:, :width]) * mask
        torch.testing.assert_close(e["old_values"], values, rtol=0, atol=1e-6)
        assert e["old_values"].abs().sum() > 0


@pytest.mark.parametrize("value_model", ["shared", "separate"])
def test_ratio_is_one_on_the_first_minibatch(value_model):
    args = tiny_args("--value-model", value_model, "--questions-per-update", "3", "--micro-batch-questions", "2",
                     "--ppo-epochs", "2", "--lr", "3e-3", "--temperature", "0.1")
    team = cotrain.build_team(args, "cpu")
    _, exp, _ = cotrain.rollout_step(team, args, cotrain.load_task("arith", "train", limit=3), ascii_fraction)
    stats = cotrain.ppo_update(team, exp, args)
    assert stats["skipped"] == 0 and set(exp) == {(0, 0), (0, 1), (1, 0), (1, 1)}
    for key in exp:
        first = stats[key][0]  # epoch 0, minibatch 0: the policy that generated the rollout
        assert first["max_abs_logratio"] < 1e-5, key
        assert first["clipfrac"] == 0.0 and first["approxkl"] < 1e-10, key
        assert math.isclose(first["ratio"] / first["tokens"], 1.0, abs_tol=1e-6)
        assert stats[key][-1]["max_abs_logratio"] > 1e-3, key  # after a step the policy has moved (can fail)


def test_shared_isolation_one_agent_moves_only_its_adapter_and_the_heads():
    args = tiny_args("--lr", "1e-2", "--ppo-epochs", "2")
    team = cotrain.build_team(args, "cpu")
    model = team.bases[0]
    groups = {name: {id(p) for g in opt.param_groups for p in g["params"]} for name, opt in team.optimizers.items()}
    assert groups["agent0"] == {id(p) for p in adapter_parameters(model, "agent0")}
    assert groups["value_heads"] == {id(p) for p in team.heads.parameters()}
    with torch.no_grad():
        for p in team.heads.parameters():
            p.normal_(std=0.5)
    records = cotrain.load_task("arith", "train", limit=2)
    _, exp, _ = cotrain.rollout_step(team, args, records, ascii_fraction)
    # agent 0's policy + value loss from ONE forward: gradients reach agent 0's adapter and the head, nothing else
    e = exp[(1, 0)]
    out = _forward(model, e, ["agent0"] * 2, args.temperature, False, output_hidden=True)
    pg, _ = policy_loss(out["logprobs"], e["old_logprobs"], e["advantages"], e["response_mask"], e["response_mask"].sum(), 0.2)
    vf, _ = value_loss(team.heads["turn2"](out["hidden"]) * e["response_mask"], e["old_values"], e["returns"],
                       e["response_mask"], e["response_mask"].sum(), 0.2)
    (pg + args.vf_coef * vf).backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert with_grad and all(".lora_A.agent0." in n or ".lora_B.agent0." in n for n in with_grad), with_grad
    assert team.heads["turn2"].linear.weight.grad.abs().sum() > 0 and team.heads["turn1"].linear.weight.grad is None
    model.zero_grad(set_to_none=True)
    team.heads.zero_grad(set_to_none=True)
    # a whole update in which only agent 0 is trained: agent 1's adapter and the base stay bit-identical
    team.trained = [(0, 0), (1, 0)]
    _, exp, _ = cotrain.rollout_step(team, args, records, ascii_fraction)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    heads_before = {k: v.clone() for k, v in team.heads.state_dict().items()}
    stats = cotrain.ppo_update(team, exp, args)
    assert stats["skipped"] == 0 and stats["grad_norm/agent1"] == [0.0, 0.0]
    changed = {n for n, p in model.named_parameters() if not torch.equal(before[n], p)}
    assert changed and all(".lora_A.agent0." in n or ".lora_B.agent0." in n for n in changed), changed
    assert all(not torch.equal(heads_before[k], v) for k, v in team.heads.state_dict().items())


@pytest.mark.parametrize("value_model", ["shared", "separate"])
def test_value_loss_gradient_reaches_the_policy_adapter_only_when_shared(value_model):
    """Advantages set to zero: the surrogate sends exactly no gradient, so what reaches the policy adapters is the
    value loss's. Shared: it does (through the hidden states the heads read), and the heads learn. Separate: the
    value loss trains the critic adapter and the heads, never a policy."""
    args = tiny_args("--value-model", value_model, "--ppo-epochs", "1", "--lr", "1e-2")
    team = cotrain.build_team(args, "cpu")
    with torch.no_grad():  # non-zero heads: with zero-initialised ones dV/dh = 0 on the first step
        for p in team.heads.parameters():
            p.normal_(std=0.5)
    _, exp, _ = cotrain.rollout_step(team, args, cotrain.load_task("arith", "train", limit=2), ascii_fraction)
    for e in exp.values():
        e["advantages"].zero_()
    stats = cotrain.ppo_update(team, exp, args)
    values = "value_heads" if value_model == "shared" else "critic"
    assert stats[f"grad_norm/{values}"][0] > 1e-3
    for agent in ("agent0", "agent1"):
        if value_model == "shared":
            assert stats[f"grad_norm/{agent}"][0] > 1e-4, agent
        else:
            assert stats[f"grad_norm/{agent}"][0] == 0.0, agent


def test_forward_and_backward_counts_per_update(monkeypatch):
    """cotrain.py's default update shape (2 agents x 2 turns, 2 questions, 4 PPO epochs, micro-batches of one
    question, forward batches of 8 rows). Model forward calls (rows) and backward calls per update:

                          experience           PPO (4 epochs x 2 micro-batches x 2 turns)     total calls
      before (e51a436)    6 calls (24 rows)    48 calls (64 rows): 2 policy + 1 critic each, 32 backward   54
      separate            4 calls (24 rows)    48 calls (64 rows), 32 backward                             52
      shared (default)    2 calls (16 rows)    32 calls (32 rows): 2 policy each, 16 backward               34
    (a per-adapter forward under autograd carries one agent's rows: 1 row per agent and micro-batch)."""
    records = cotrain.load_task("arith", "train", limit=2)
    counts = {}
    for label, value_model in (("before", "separate"), ("separate", "separate"), ("shared", "shared")):
        args = tiny_args("--value-model", value_model)
        assert (args.num_agents, args.num_turns, args.questions_per_update, args.ppo_epochs, args.micro_batch_questions,
                args.forward_batch_size) == (2, 2, 2, 4, 1, 8)  # the former default shape (tiny_args)
        team = cotrain.build_team(args, "cpu")
        debate, rewards = debate_and_rewards(team, args, records)
        with monkeypatch.context() as patch:
            counter = Counter(team.bases[0], patch)
            make, update = (old_make_experience, old_ppo_update) if label == "before" else (cotrain.make_experience,
                                                                                             cotrain.ppo_update)
            exp = make(team, debate, rewards, args)
            experience = counter.take()
            update(team, exp, args)
            counts[label] = dict(experience=experience, ppo=counter.take())
    assert counts["before"] == dict(experience=(6, 24, 0), ppo=(48, 64, 32))
    assert counts["separate"] == dict(experience=(4, 24, 0), ppo=(48, 64, 32))
    assert counts["shared"] == dict(experience=(2, 16, 0), ppo=(32, 32, 16))


@pytest.mark.parametrize("flags", [["--advantage", "group", "--samples-per-question", "2"], []])
def test_sampling_old_logprobs_are_the_rollouts_and_skip_the_policy_rows(monkeypatch, flags):
    """--old-logprobs sampling (the default): π_old and the entropies are generate()'s own, bit for bit; they equal
    a recompute to < 1e-5 (tiny model, fp32); the reference is the base's forward as before; and the experience
    pass forwards the policy's rows only where their hidden states are read (--advantage gae --value-model
    shared): with --advantage group it runs the '__base__' rows alone, half the rows of a recompute."""
    group = "group" in flags
    records = [r for r in cotrain.load_task("arith", "train", limit=2) for _ in range(2 if group else 1)]
    rows_seen, exps = {}, {}
    for mode in ("sampling", "recompute"):
        args = tiny_args("--old-logprobs", mode, *flags)
        team = cotrain.build_team(args, "cpu")
        with torch.no_grad():  # trained-looking adapters: the policy is not the base, so the KL is not 0
            for name, p in team.bases[0].named_parameters():
                if ".lora_B." in name:
                    p.normal_(std=0.05)
        torch.manual_seed(1)
        debate, rewards = debate_and_rewards(team, args, records)
        with monkeypatch.context() as patch:
            counter = Counter(team.bases[0], patch)
            exps[mode] = cotrain.make_experience(team, debate, rewards, args)
            rows_seen[mode] = counter.take()[1]
        if mode == "sampling":
            for (t, a), e in exps[mode].items():
                ro = debate["rollout"][t][a]
                width, mask = e["response_mask"].shape[1], e["response_mask"]
                assert torch.equal(e["old_logprobs"], ro["logprobs"][:, :width]), (t, a)
                assert torch.equal(e["entropy"], ro["entropy"][:, :width]), (t, a)
                with torch.no_grad():
                    ref = reference_logprobs(team.bases[0], *(ro[k] for k in ("query_ids", "query_mask", "response_ids",
                                                                             "response_mask")), args.temperature)
                torch.testing.assert_close(e["ref_logprobs"], ref[:, :width], atol=1e-6, rtol=0)
                torch.testing.assert_close(e["kl"], (e["old_logprobs"] - e["ref_logprobs"]) * mask, atol=1e-6, rtol=0)
                assert e["kl"].abs().max() > 1e-3, (t, a)  # the policy is not the base
    rows = 2 * 2 * len(records)  # 2 turns x 2 agents x the debates: one copy of every response
    assert rows_seen == {"sampling": rows * (1 if group else 2), "recompute": rows * 2}
    for key, e in exps["sampling"].items():  # the same debate (seeded): the two sources of π_old agree
        assert set(e) == set(exps["recompute"][key]), key  # and the experience holds the same tensors
        assert torch.equal(e["response_ids"], exps["recompute"][key]["response_ids"])
        for name in ("old_logprobs", "entropy"):
            torch.testing.assert_close(e[name], exps["recompute"][key][name], atol=1e-5, rtol=0)


# ---------------------------------------------------------------- --conversation-forward


def as_one_conversation(debate, tokenizer):
    """The debate with every later turn's prompt starting with the previous turn's prompt + its sampled response,
    token for token: what run_debate's continue_chat gives on its own, except for rows whose random tiny-model bytes
    include a special token the chat drops (those fell back to the text: here the sampled response is inserted
    before the rest of that prompt, which only the forwards read). Left-padded again to one width per turn for
    all agents (as one generate call gives them)."""
    for previous, later in zip(debate["rollout"], debate["rollout"][1:]):
        rows = []
        for a in range(len(later)):
            rows.append([])
            for b in range(len(previous[a]["query_ids"])):
                q_prev = previous[a]["query_ids"][b][previous[a]["query_mask"][b].bool()]
                q_later = later[a]["query_ids"][b][later[a]["query_mask"][b].bool()]
                held = cotrain.sampled_conversation(previous[a], b)
                holds = len(q_later) >= len(held) and torch.equal(q_later[:len(held)], held)
                rows[a].append(q_later if holds else torch.cat([held, q_later[len(q_prev):]]))
        ids, mask = tokenize_prompts(tokenizer, [r.tolist() for agent_rows in rows for r in agent_rows], "cpu")
        for a, agent_rows in enumerate(rows):
            these = slice(a * len(agent_rows), (a + 1) * len(agent_rows))
            later[a] = dict(later[a], query_ids=ids[these], query_mask=mask[these])
    return debate


@pytest.mark.parametrize("flags", [["--advantage", "group", "--samples-per-question", "2"],
                                   ["--advantage", "gae", "--value-model", "shared"],
                                   ["--advantage", "gae", "--value-model", "shared", "--old-logprobs", "sampling",
                                    "--micro-batch-questions", "2"],
                                   ["--advantage", "group", "--samples-per-question", "2", "--num-turns", "3"],
                                   ["--advantage", "gae", "--num-turns", "3", "--train-turns", "2,3"]])
def test_one_forward_per_conversation_equals_one_forward_per_turn(monkeypatch, flags):
    """--conversation-forward: the turn-2 forward also gives turn 1's log-probs, entropies and hidden states (turn 2's
    prompt holds turn 1's prompt and response), so the experience pass and every PPO micro-batch forward half the
    rows (three turns: a third); the experience, the PPO statistics and the trained adapters and heads equal those of
    one forward per turn to fp32 noise. Non-zero heads (the values read the hidden states) and trained-looking
    adapters (KL not 0). With --train-turns 2,3 turn 3's forward carries turn 2 (turn 1 is the base's, untrained)."""
    group = "group" in flags
    records = [r for r in cotrain.load_task("arith", "train", limit=2) for _ in range(2 if group else 1)]
    results = {}
    for mode in ("--no-conversation-forward", "--conversation-forward"):
        args = tiny_args("--ppo-epochs", "2", *flags, mode)
        team = cotrain.build_team(args, "cpu")
        torch.manual_seed(2)
        with torch.no_grad():
            for name, p in team.bases[0].named_parameters():
                if ".lora_B." in name:
                    p.normal_(std=0.05)
            for p in team.heads.parameters():
                p.normal_(std=0.5)
        torch.manual_seed(1)
        debate, rewards = debate_and_rewards(team, args, records)
        debate = as_one_conversation(debate, team.agent_tokenizers()[0])
        before = trainables(team)
        with monkeypatch.context() as patch:
            counter = Counter(team.bases[0], patch)
            exp = cotrain.make_experience(team, debate, rewards, args)
            experience = counter.take()
            stats = cotrain.ppo_update(team, exp, args, shuffle_seed=3)
            ppo = counter.take()
        results[mode] = dict(exp=exp, stats=stats, before=before, after=trainables(team), counts=(experience, ppo))
    separate, one = results["--no-conversation-forward"], results["--conversation-forward"]
    assert separate["stats"]["conversation_forward"] == 0.0 and one["stats"]["conversation_forward"] == 1.0
    (exp_calls, exp_rows, _), (ppo_calls, ppo_rows, ppo_backwards) = separate["counts"]
    micro = 2 if "--micro-batch-questions" in flags else 1
    trained_turns = [1, 2] if "--train-turns" in flags else list(range(3 if "--num-turns" in flags else 2))
    n = len(trained_turns)  # one forward per turn -> one per conversation
    assert one["counts"] == ((exp_calls // n, exp_rows // n, 0), (ppo_calls // n, ppo_rows // n, ppo_backwards // n))
    assert ppo_calls == 2 * n * (len(records) // micro) * 2  # epochs x turns x micro-batches x agents (one each)
    assert set(one["exp"]) == set(separate["exp"]) == {(t, a) for t in trained_turns for a in (0, 1)}
    for key, e in separate["exp"].items():
        assert set(e) == set(one["exp"][key])
        for name, tensor in e.items():
            torch.testing.assert_close(one["exp"][key][name], tensor, atol=2e-5, rtol=1e-4, msg=f"{key} {name}")
        assert e["kl"].abs().max() > 1e-3 and e["advantages"].abs().sum() > 0
        for k, (s, o) in enumerate(zip(separate["stats"][key], one["stats"][key])):
            for name in s:
                assert math.isclose(s[name], o[name], rel_tol=1e-4, abs_tol=1e-5), (key, k, name, s[name], o[name])
    moved = 0
    for name, value in separate["after"].items():
        torch.testing.assert_close(one["after"][name], value, atol=1e-5, rtol=1e-4, msg=name)
        moved += not torch.equal(value, separate["before"][name])
    assert moved > 0  # the update changed something to compare


def test_conversation_forward_falls_back_when_a_prompt_does_not_hold_the_earlier_turn():
    """One row whose turn-2 prompt does not start with its turn-1 prompt + response (a re-tokenisation that
    differs), a per-(turn, agent) adapter, or the paper's separate critic: one forward per turn, bit for bit the
    --no-conversation-forward update."""
    records = cotrain.load_task("arith", "train", limit=2)
    cases = {"one row": [], "agent-turn": ["--policy-sharing", "agent-turn"], "separate": ["--value-model", "separate"]}
    for case, flags in cases.items():
        results = {}
        for mode in ("--no-conversation-forward", "--conversation-forward"):
            args = tiny_args("--ppo-epochs", "1", *flags, mode)
            team = cotrain.build_team(args, "cpu")
            torch.manual_seed(1)
            debate, rewards = debate_and_rewards(team, args, records)
            debate = as_one_conversation(debate, team.agent_tokenizers()[0])
            exp = {(t, a): debate["rollout"][t][a] for t, a in team.trained}
            assert cotrain.one_conversation(team, exp, args) == (mode == "--conversation-forward" and case == "one row")
            if case == "one row":  # agent 1, question 1: one token of its turn-1 response differs inside turn 2
                second, n = debate["rollout"][1][1], int(debate["rollout"][0][1]["query_mask"][1].sum())
                first_real = int((second["query_mask"][1] == 0).sum())
                second["query_ids"][1, first_real + n] += 1
                assert not cotrain.one_conversation(team, exp, args)
            exp = cotrain.make_experience(team, debate, rewards, args)
            stats = cotrain.ppo_update(team, exp, args)
            results[mode] = (exp, stats, trainables(team))
        (exp0, stats0, after0), (exp1, stats1, after1) = results.values()
        assert stats1["conversation_forward"] == 0.0, case
        for key in exp0:
            assert stats0[key] == stats1[key], (case, key)
            for name in exp0[key]:
                assert torch.equal(exp0[key][name], exp1[key][name]), (case, key, name)
        assert all(torch.equal(after0[n], after1[n]) for n in after0), case
