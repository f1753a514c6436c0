"""MAGRPO's algorithm in magrpo.py: group-relative advantages (every mode, zero-variance groups, shuffled
rows), aligned vs cross joint actions and their credit, returns on a hand-built tree, the shape of real
multi-turn rollout trees, adapter isolation and the on-policy check, a learning test on a synthetic joint
reward, the update's shared-prompt forward (--fast, nanomarl/fast.py:shared_prefix_forward) against
forward_responses (--no-fast) on hand-built batches, its fallbacks and one whole update, and CLI smoke runs
(single-turn, two turns with full fine-tuning and a KL, --resume)."""
import copy
import functools
import json
import math

import pytest
import torch
from conftest import run_script

import common
import magrpo as M
from common import adapter_parameters, add_adapters, forward_responses, load_model
from nanomarl.distributed import seed_everything
from nanomarl.fast import shared_prefix_forward
from nanomarl.models import load_tokenizer



@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """The tiny model's ops are microseconds; with 2 threads on a busy 2-core machine every op waits for the
    second thread (a 50x slowdown measured). One thread here and in the CLI subprocesses."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------------------------
# advantages, joint actions, credits, returns
# ----------------------------------------------------------------------------------------------

REWARDS = torch.tensor([[1.0, 2.0, 3.0, 6.0], [5.0, 5.0, 5.0, 5.0], [0.0, 4.0, 0.0, 4.0]])


def test_group_advantages_every_mode_by_hand():
    assert M.group_advantages(REWARDS, "mean").tolist() == [[-2, -1, 0, 3], [0, 0, 0, 0], [-2, 2, -2, 2]]
    std1, std3 = math.sqrt(14 / 3), math.sqrt(16 / 3)  # unbiased stds of groups 1 and 3; group 2 has std 0
    assert torch.allclose(M.group_advantages(REWARDS, "std"), torch.tensor(
        [[-2 / std1, -1 / std1, 0, 3 / std1], [0, 0, 0, 0], [-2 / std3, 2 / std3, -2 / std3, 2 / std3]]))
    assert torch.allclose(M.group_advantages(REWARDS, "rloo"), torch.tensor(
        [[1 - 11 / 3, 2 - 10 / 3, 3 - 3, 6 - 2], [0, 0, 0, 0], [-8 / 3, 8 / 3, -8 / 3, 8 / 3]]))
    assert M.group_advantages(REWARDS, "max").tolist() == [[-5, -4, -3, 0], [0, 0, 0, 0], [-4, 0, -4, 0]]
    assert M.group_advantages(REWARDS, "raw").tolist() == REWARDS.tolist()
    with pytest.raises(ValueError):
        M.group_advantages(REWARDS, "median")


def test_group_advantages_follow_their_group_when_rows_are_shuffled():
    rewards = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
    order = torch.randperm(16, generator=torch.Generator().manual_seed(1))
    for mode in ("mean", "std", "rloo", "max", "raw"):
        assert torch.allclose(M.group_advantages(rewards[order], mode), M.group_advantages(rewards, mode)[order])


def test_singleton_groups():
    one = torch.tensor([[3.0], [-1.0]])
    assert M.group_advantages(one, "mean").tolist() == [[0.0], [0.0]]
    assert M.group_advantages(one, "std").tolist() == [[0.0], [0.0]]  # no NaN from the unbiased std
    with pytest.raises(ValueError):
        M.group_advantages(one, "rloo")


def test_joint_actions_aligned_and_cross():
    assert M.joint_actions(4, 2, "aligned") == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert len(M.joint_actions(4, 2, "cross")) == 16 and len(M.joint_actions(3, 3, "cross")) == 27
    assert M.joint_actions(2, 2, "cross") == [(0, 0), (0, 1), (1, 0), (1, 1)]


def node(rewards, joint, children=None) -> M.Node:
    return M.Node(problem={}, turn=0, prompts=[], prompt_history=[], response_history=[], joint=joint,
                  rewards=rewards, children=children or [None] * len(rewards))


def test_credit_per_completion_aligned_vs_cross():
    aligned = node([1.0, 2.0], M.joint_actions(2, 2, "aligned"))
    M.compute_returns(aligned, 1.0)
    assert M.completion_credits(aligned, 2, 2).tolist() == [[1, 2], [1, 2]]  # each completion: its own return
    cross = node([1.0, 2.0, 3.0, 4.0], M.joint_actions(2, 2, "cross"))
    M.compute_returns(cross, 1.0)
    # agent 0's completion 0 is in (0,0) and (0,1): 1 + 2; agent 1's completion 0 is in (0,0) and (1,0): 1 + 3
    assert M.completion_credits(cross, 2, 2).tolist() == [[3, 7], [4, 6]]
    # cross credit = G^(n-1) x the per-completion mean return, so mean-baselined advantages are G times larger
    advantages = M.group_advantages(M.completion_credits(cross, 2, 2), "mean")
    assert advantages.tolist() == [[-2, 2], [-1, 1]]


def test_returns_bootstrap_on_the_mean_of_the_child_group():
    grandchild = node([8.0, 0.0], [(0, 0), (1, 1)])
    child = node([2.0, 4.0], [(0, 0), (1, 1)], [None, grandchild])
    root = node([1.0, 0.0], [(0, 0), (1, 1)], [child, None])  # joint action 1 was not expanded (a leaf)
    assert M.compute_returns(root, 0.5) == [1 + 0.5 * (2 + (4 + 0.5 * 4)) / 2, 0.0]  # = [3.0, 0.0]
    assert child.returns == [2.0, 6.0] and grandchild.returns == [8.0, 0.0]
    assert [len(t) for t in M.nodes_by_turn([root])] == [1, 1, 1]


def test_kl_k3_is_non_negative_and_unbiased():
    logp, ref = torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([-1.5, -1.0, -0.5])
    r = ref - logp
    torch.testing.assert_close(M.kl_k3(logp, ref), torch.exp(r) - r - 1)
    assert (M.kl_k3(logp, ref) >= 0).all()
    # an unbiased estimate of KL(p||q) when sampling from p: exactly, on a 3-way categorical
    p, q = torch.tensor([0.2, 0.5, 0.3]), torch.tensor([0.4, 0.4, 0.2])
    torch.testing.assert_close((p * M.kl_k3(p.log(), q.log())).sum(), (p * (p / q).log()).sum())


def test_loss_weights():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    assert M.loss_weights(mask, 2, 2, "seq-sum").tolist() == [0.25] * 4  # mean over 2 nodes of means over G = 2
    assert M.loss_weights(mask, 2, 2, "token-mean").tolist() == [1 / 8] * 4  # 8 valid tokens
    padded = torch.cat([mask, torch.zeros(4, 5)], dim=1)  # more padding changes neither
    assert M.loss_weights(padded, 2, 2, "token-mean").tolist() == [1 / 8] * 4


# ----------------------------------------------------------------------------------------------
# real rollouts on the tiny model
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    return load_tokenizer("tiny")


def toy_args(**overrides) -> M.Args:
    base = dict(model="tiny", num_generations=2, max_new_tokens=4, chat_template=False, temperature=1.0, top_p=1.0,
                top_k=0, sandbox_workers=1, lr=0.03)
    return M.Args(**{**base, **overrides})


def toy_problems(count: int) -> list[dict]:
    return [dict(id=f"toy/{i}", kind="toy", text=f"Q{i}:") for i in range(count)]


def echo_feedback(problem, prompt_history, response_history):
    """A deterministic transition that shows what the branch saw."""
    return [f"{problem['id']} agent{i} turn{len(ph) + 1} after {rh[-1]!r}"
            for i, (ph, rh) in enumerate(zip(prompt_history, response_history))]


@pytest.mark.parametrize("joint_mode, children_per_node", [("aligned", 2), ("cross", 4)])
def test_multi_turn_rollout_tree(tiny, joint_mode, children_per_node):
    seed_everything(0)
    args = toy_args(turns=2, joint_mode=joint_mode)
    agents = M.build_agents(args, "cpu")
    task = M.Task(prompts=lambda p: [p["text"] + " a", p["text"] + " b"],
                  reward=lambda p, texts: (0.0, {}), feedback=echo_feedback)
    roots, batches = M.rollout(agents, tiny, toy_problems(3), task, args)
    turns = M.nodes_by_turn(roots)
    assert [len(t) for t in turns] == [3, 3 * children_per_node]
    assert [b[0]["response_ids"].shape[0] for b in batches] == [3 * 2, 3 * children_per_node * 2]  # G rows per node
    for root in roots:
        for action, child in zip(root.joint, root.children):
            responses = [root.texts[i][k] for i, k in enumerate(action)]
            assert child.prompt_history == [[root.prompts[0]], [root.prompts[1]]]
            assert child.response_history == [[responses[0]], [responses[1]]]
            assert child.prompts == echo_feedback(root.problem, child.prompt_history, child.response_history)
            assert all(c is None for c in child.children)
    # early termination: a mean reward above the threshold leaves the root unexpanded
    task.reward = lambda p, texts: (5.0, {})
    args = M.Args(**{**vars(args), "termination_threshold": 4.0})
    roots, batches = M.rollout(agents, tiny, toy_problems(2), task, args)
    assert [len(t) for t in M.nodes_by_turn(roots)] == [2] and len(batches) == 1


def test_update_is_on_policy_and_touches_only_the_agents_own_adapter(tiny):
    seed_everything(0)
    args = toy_args(num_generations=4)
    agents = M.build_agents(args, "cpu")
    model = agents.models[0]
    task = M.Task(prompts=lambda p: [p["text"], p["text"]], reward=lambda p, t: (float(len(t[0]) + 2 * len(t[1])), {}))
    roots, batches = M.rollout(agents, tiny, toy_problems(2), task, args)
    for root in roots:
        M.compute_returns(root, 1.0)
        root.advantages = M.group_advantages(M.completion_credits(root, 2, 4), "mean")
    assert any(root.advantages.abs().sum() > 0 for root in roots)
    base_before = {n: p.clone() for n, p in model.named_parameters() if ".lora_" not in n}
    adv = torch.cat([root.advantages[0] for root in roots])
    stats = M.accumulate_agent_loss(agents, 0, batches[0][0], adv, len(roots), args)
    assert stats["logprob_gap"] < 1e-5  # the update's log-probs are the sampling policy's
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in adapter_parameters(model, "agent0")[1::2])
    assert all(p.grad is None for p in adapter_parameters(model, "agent1"))
    assert all(not p.requires_grad and p.grad is None for n, p in model.named_parameters() if ".lora_" not in n)
    agent1_before = [p.clone() for p in adapter_parameters(model, "agent1")]
    agents.optimizers[0].step()
    assert all(torch.equal(a, b) for a, b in zip(agent1_before, adapter_parameters(model, "agent1")))
    assert all(torch.equal(base_before[n], p) for n, p in model.named_parameters() if ".lora_" not in n)


def test_magrpo_learns_a_synthetic_joint_reward(tiny):
    """Reward: the fraction of vowel characters in both agents' texts. The tiny random model's logits are
    nearly uniform (RMS-normed hidden state x N(0, 0.02) embeddings: no adapter could concentrate its output),
    so its tied embedding is scaled by 5 to give it the headroom a real model has."""
    seed_everything(0)
    args = toy_args(num_generations=8, max_new_tokens=6, problems_per_step=2)
    base = load_model("tiny")
    with torch.no_grad():
        base.get_input_embeddings().weight.mul_(5.0)
    agents = M.build_agents(args, "cpu", base)
    base_before = {n: p.clone() for n, p in agents.models[0].named_parameters() if ".lora_" not in n}
    adapters_before = [[p.clone() for p in adapter_parameters(agents.models[0], name)] for name in agents.names]

    def vowels(problem, texts):
        return sum(sum(c in "aeiou" for c in t) / max(len(t), 1) for t in texts) / len(texts), {}

    task = M.Task(prompts=lambda p: [p["text"], p["text"]], reward=vowels)
    curve = []
    for _ in range(20):  # reward/mean: the mean joint reward of the step's roots
        roots = M.magrpo_step(agents, tiny, toy_problems(2), task, args)[1]
        curve.append(sum(r for root in roots for r in root.rewards) / sum(len(root.rewards) for root in roots))
    assert sum(curve[:3]) / 3 < 0.05 and sum(curve[-5:]) / 5 > 0.25, curve  # seeds 0-4: from 0.01-0.06 to 0.26-0.5
    for name, before in zip(agents.names, adapters_before):
        assert any(not torch.equal(a, b) for a, b in zip(before, adapter_parameters(agents.models[0], name)))
    assert all(torch.equal(base_before[n], p) for n, p in agents.models[0].named_parameters() if ".lora_" not in n)


# ----------------------------------------------------------------------------------------------
# the update's shared-prompt forward (--fast, nanomarl/fast.py) against forward_responses (--no-fast)
# ----------------------------------------------------------------------------------------------


def prefix_model(kind: str):
    """The tiny Qwen2 or a random Llama (SmolLM2's architecture) with adapters agent0 and agent1 whose B
    matrices are random (with B = 0 the gradients of A are 0 and would compare nothing)."""
    from nanomarl import bench_gpu
    from nanomarl.models import hide_bitsandbytes_unless_quantised

    hide_bitsandbytes_unless_quantised()  # and peft's FutureWarning, as load_model does
    base = (load_model("tiny") if kind == "qwen2" else
            bench_gpu.build(bench_gpu.SMOKE["llama-smoke"], torch.float32, "cpu", load_tokenizer("tiny")))
    model = add_adapters(base, ["agent0", "agent1"], r=4, alpha=8)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


def shared_prompt_batch(vocab: int, G: int = 3) -> dict:
    """G rows for each of 3 prompts, left-padded to 11 columns: 7 real tokens, 10, and the second's ids with 9
    real (equal ids, another mask: another prompt); no row uses the first column (the common left padding
    both forwards cut). Right-padded responses of 9 columns with EOS masks of 1 to 8 tokens (the last column
    unused by every row)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (3, 11), generator=g)
    ids[2] = ids[1]
    mask = torch.zeros(3, 11, dtype=torch.long)
    for row, real in enumerate((7, 10, 9)):
        mask[row, 11 - real:] = 1
    rows = 3 * G
    response_mask = torch.zeros(rows, 9, dtype=torch.long)
    for i in range(rows):
        response_mask[i, :1 + (3 * i) % 8] = 1
    return dict(query_ids=ids.repeat_interleave(G, 0), query_mask=mask.repeat_interleave(G, 0),
                response_ids=torch.randint(5, vocab, (rows, 9), generator=g), response_mask=response_mask)


def forward_and_grads(forward, model, batch: dict, names, size: int) -> tuple[dict, dict]:
    """forward over the rows, `size` at a time (magrpo's micro-batches), backward of Σ c·log π with fixed
    random c per token; the outputs and every LoRA gradient (None where none flowed)."""
    model.zero_grad(set_to_none=True)
    coefficients = torch.randn(batch["response_mask"].shape, generator=torch.Generator().manual_seed(2))
    outs = []
    for start in range(0, len(coefficients), size):
        rows = {k: v[start:start + size] for k, v in batch.items()}
        out = forward(model, *rows.values(), names and names[start:start + size], 0.7, output_entropy=True)
        if out["logprobs"].requires_grad:  # on '__base__' nothing is trained
            (out["logprobs"] * coefficients[start:start + size]).sum().backward()
        outs.append(out)
    out = {k: torch.cat([o[k] for o in outs]) for k in ("logprobs", "entropy")}
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters() if ".lora_" in n}
    return out, grads


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("order, size, adapter, plain_chunks", [
    ("grouped", 4, "agent0", 1), ("shuffled", 9, "agent0", 0), ("grouped", 5, None, 0), ("grouped", 4, "__base__", 1)])
def test_shared_prefix_forward_equals_forward_responses(monkeypatch, kind, order, size, adapter, plain_chunks):
    """Log-probs and entropies within 1e-5 of forward_responses', 0 on padding, and every LoRA gradient within
    1e-4 relative (the other adapter's: none in both): prompts of three lengths, G = 3 rows each, in order cut
    by micro-batches of 4 (a group split across two, a prompt alone in the last: forward_responses) or of 5,
    or shuffled in one; on one adapter, on the active one (names None: full copies) or on none ('__base__').
    forward_responses serves exactly the micro-batches where no two rows share a prompt."""
    model = prefix_model(kind)
    batch = shared_prompt_batch(model.config.vocab_size)
    if order == "shuffled":
        perm = torch.randperm(9, generator=torch.Generator().manual_seed(3))
        batch = {k: v[perm] for k, v in batch.items()}
    names = None if adapter is None else [adapter] * 9
    plain, plain_grads = forward_and_grads(forward_responses, model, batch, names, size)
    served = []
    monkeypatch.setattr(common, "forward_responses", lambda *a, **k: served.append(1) or forward_responses(*a, **k))
    out, grads = forward_and_grads(functools.partial(shared_prefix_forward, common), model, batch, names, size)
    assert len(served) == plain_chunks
    for k in ("logprobs", "entropy"):
        assert out[k].shape == (9, 9) and (out[k][batch["response_mask"] == 0] == 0).all()
        torch.testing.assert_close(out[k], plain[k], atol=1e-5, rtol=0)
    assert grads.keys() == plain_grads.keys()
    for n, g in grads.items():
        if plain_grads[n] is None or adapter == "__base__" or ".agent1." in n:
            assert g is None and plain_grads[n] is None, n
        else:
            assert (g - plain_grads[n]).norm() <= 1e-4 * plain_grads[n].norm() and g.norm() > 0, n


@pytest.mark.parametrize("case", ["distinct prompts", "two adapters", "hidden states"])
def test_shared_prefix_forward_falls_back_to_forward_responses(case):
    """No two rows sharing a prompt, rows on two adapters, or output_hidden: forward_responses' own outputs."""
    model = prefix_model("qwen2")
    batch = shared_prompt_batch(model.config.vocab_size, G=1 if case == "distinct prompts" else 3)
    rows = batch["response_mask"].shape[0]
    names = ["agent0", "agent1"] * (rows // 2) + ["agent0"] * (rows % 2) if case == "two adapters" else ["agent0"] * rows
    kwargs = dict(output_entropy=True, output_hidden=case == "hidden states")
    with torch.no_grad():
        out = shared_prefix_forward(common, model, *batch.values(), names, 0.7, **kwargs)
        plain = forward_responses(model, *batch.values(), names, 0.7, **kwargs)
    assert out.keys() == plain.keys()
    for k, v in plain.items():
        assert (v is None and out[k] is None) if k == "hidden" and case != "hidden states" else torch.equal(out[k], v), k


def test_shared_prefix_forward_reads_pi_from_common(monkeypatch):
    """π's one definition, common.log_policy, replaced (π at twice the temperature): the shared-prompt forward
    reads the new one, as forward_responses does (tests/test_fast_paths.py::test_one_definition_of_pi)."""
    model = prefix_model("qwen2")
    batch, names = shared_prompt_batch(model.config.vocab_size), ["agent0"] * 9
    with torch.no_grad():
        real = shared_prefix_forward(common, model, *batch.values(), names, 0.7)["logprobs"]
        hot = forward_responses(model, *batch.values(), names, 1.4)["logprobs"]  # the real π at 1.4
        monkeypatch.setattr(common, "log_policy", lambda logits, t: torch.log_softmax(logits.float() / (2 * t), -1))
        fast = shared_prefix_forward(common, model, *batch.values(), names, 0.7)["logprobs"]
        plain = forward_responses(model, *batch.values(), names, 0.7)["logprobs"]
    torch.testing.assert_close(fast, plain, atol=1e-5, rtol=0)
    torch.testing.assert_close(plain, hot, atol=1e-6, rtol=0)
    assert (fast - real).abs().max() > 1e-2


def test_magrpo_update_fast_equals_plain(tiny):
    """One MAGRPO update on the same rollout trees with --fast and --no-fast, from the same weights and
    optimiser state: every agent's loss, entropy and log-prob gap within 1e-5 (relative where larger than 1), its
    gradient norm within 1e-4 relative (prompts of three lengths, G = 4, micro-batches of 3: groups cut)."""
    seed_everything(0)
    args = toy_args(num_generations=4, micro_batch_size=3, adv_mode="raw")
    agents = M.build_agents(args, "cpu")
    model = agents.models[0]
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.3)
    task = M.Task(prompts=lambda p: [p["text"], p["text"] + " go"], reward=lambda p, t: (float(len(t[0]) + 2 * len(t[1])), {}))
    problems = [dict(id=f"toy/{i}", kind="toy", text="Q" + " x" * (3 * i) + ":") for i in range(3)]
    roots, batches = M.rollout(agents, tiny, problems, task, args)
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    states = [copy.deepcopy(o.state_dict()) for o in agents.optimizers]
    metrics = {}
    for fast in (False, True):
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(weights[n])
        for optimizer, state in zip(agents.optimizers, states):
            optimizer.load_state_dict(copy.deepcopy(state))
        metrics[fast] = M.magrpo_update(agents, roots, batches, M.Args(**{**vars(args), "fast": fast}))
    assert any(metrics[False][f"agent{i}/loss"] != 0 for i in range(2))
    for key, plain in metrics[False].items():
        if key.endswith("grad_norm"):
            assert metrics[True][key] == pytest.approx(plain, rel=1e-4), key
        else:
            assert metrics[True][key] == pytest.approx(plain, rel=1e-5, abs=1e-5), key


# ----------------------------------------------------------------------------------------------
# CLI: smoke runs and --resume
# ----------------------------------------------------------------------------------------------

CLI = ["--model", "tiny", "--num-generations", "2", "--max-new-tokens", "8", "--sandbox-workers", "1",
       "--adv-mode", "raw", "--reward-shift", "1.0", "--lr", "0.01"]  # raw + shift: non-zero advantages


def read_metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_cli_two_turns_with_full_finetuning_and_kl(tmp_path):
    data = tmp_path / "code.jsonl"
    data.write_text(json.dumps(dict(task_id="toy/add", prompt="def add(a, b):\n", entry_point="add",
                                    test="def check(candidate):\n    assert candidate(1, 2) == 3\n")) + "\n")
    run = tmp_path / "mt"
    out = run_script(["magrpo.py", *CLI, "--dataset", f"jsonl:{data}", "--turns", "2", "--max-steps", "1", "--output-dir",
                      str(run), "--full-finetune", "--beta", "0.1", "--sample-every", "1"], timeout=600)
    (metrics,) = read_metrics(run)
    assert metrics["tree/nodes"] == 3 and "turn1/reward/mean" in metrics  # root + G = 2 children
    # deepest turn first: turn 1 is updated by the sampling policy itself (on-policy, KL to the base 0), and
    # turn 0's log-probs are taken after that step, so they have moved away from sampling and from the base
    for agent in ("agent0", "agent1"):
        assert metrics[f"{agent}/turn1_logprob_gap"] < 1e-5 and metrics[f"{agent}/turn1_kl"] == 0.0
        assert metrics[f"{agent}/logprob_gap"] > 1e-4 and metrics[f"{agent}/kl"] > 0
    assert (run / "agents" / "agent1" / "config.json").exists() and "agent models:" in out.stdout
    assert "--- step 1: problem toy/add" in out.stdout


def test_cli_resume_may_change_the_dataset_as_a_curriculum_stage(tmp_path):
    """--resume RUN --dataset D: the same agents go on from the checkpoint on D's problems (the
    problems are drawn by step and seed); a flag that fixes the checkpoint's shapes is refused."""
    first, second = tmp_path / "apples.jsonl", tmp_path / "pears.jsonl"
    first.write_text("".join(json.dumps({"prompt": f"apple {i}"}) + "\n" for i in range(3)))
    second.write_text("".join(json.dumps({"prompt": f"pear {i}"}) + "\n" for i in range(3)))
    run = tmp_path / "run"
    run_script(["magrpo.py", *CLI, "--dataset", f"jsonl:{first}", "--max-steps", "1",
                "--sample-every", "1", "--output-dir", str(run)], timeout=600)
    before = torch.load(run / "checkpoint.pt", weights_only=False)["agents"]
    out = run_script(["magrpo.py", "--resume", str(run), "--dataset", f"jsonl:{second}",
                      "--max-steps", "2"], timeout=600)
    assert f"resumed {run} at step 1" in out.stdout and f"MAGRPO on jsonl:{second}" in out.stdout
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    prompts = {step: {p for r in rows if r["step"] == step for p in r["prompts"]} for step in (1, 2)}
    assert prompts[1] and all("apple" in p and "pear" not in p for p in prompts[1])
    assert prompts[2] and all("pear" in p and "apple" not in p for p in prompts[2])
    assert [m["step"] for m in read_metrics(run)] == [1, 2]
    after = torch.load(run / "checkpoint.pt", weights_only=False)["agents"]
    assert any(not torch.equal(before[0][k], after[0][k]) for k in before[0])  # it trained on
    with pytest.raises(AssertionError, match="error: --lora-r: "):  # exit code 2, one line
        run_script(["magrpo.py", "--resume", str(run), "--lora-r", "4"], timeout=120)


def test_cli_resume_continues_exactly(tmp_path):
    data = tmp_path / "tldr.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"post {i}"}) + "\n" for i in range(3)))
    common = [*CLI, "--dataset", f"jsonl:{data}", "--save-every", "1"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    out = run_script(["magrpo.py", *common, "--max-steps", "3", "--output-dir", str(straight)], timeout=600)
    assert f"adapters: {straight / 'adapters'}" in out.stdout and (straight / "adapters" / "agent0").is_dir()
    run_script(["magrpo.py", *common, "--max-steps", "1", "--output-dir", str(resumed)], timeout=600)
    out = run_script(["magrpo.py", "--resume", str(resumed), "--max-steps", "3"], timeout=600)
    assert f"resumed {resumed} at step 1" in out.stdout
    a, b = read_metrics(straight), read_metrics(resumed)
    assert [m["step"] for m in b] == [1, 2, 3]
    for x, y in zip(a, b):
        for key in x:
            if not key.startswith("timing/"):
                assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-7), key
    assert a[-1]["agent0/loss"] != 0
    state_a = torch.load(straight / "checkpoint.pt", weights_only=False)["agents"]
    state_b = torch.load(resumed / "checkpoint.pt", weights_only=False)["agents"]
    for agent_a, agent_b in zip(state_a, state_b):
        assert all(torch.allclose(agent_a[k], agent_b[k], atol=1e-6) for k in agent_a)
