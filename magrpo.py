"""magrpo.py: MAGRPO, multi-agent group-relative policy optimisation (Liu et al., arXiv 2508.04652).

n LLM agents act in parallel on one joint reward (centralised training, decentralised execution).
Per problem the script grows a rollout tree, one turn at a time, then updates every agent:
  1. at every node each agent samples G completions of its own prompt (one batched generate call);
  2. joint actions: aligned (the j-th completion of every agent) or cross (all G^n combinations);
  3. each joint action gets one joint reward (generated code runs in a sandboxed process);
  4. if turns remain, each joint action opens a child node whose prompts carry external feedback;
  5. returns bottom-up: R_j = r_j + γ · mean(returns of child j's joint actions);
  6. a completion's credit is the sum of the returns of the joint actions that contain it; its
     advantage is the credit minus the mean over the agent's G siblings at the node (eq. 1);
  7. each agent's loss is −A · Σ_t log π(its own completion) (eq. 2): on-policy REINFORCE with a
     group baseline, no ratio, no clipping, no critic; the deepest turn is updated first.
Tasks (nanomarl/tasks/): minicode (default, offline), humaneval, coophumaneval, tldr, arxiv,
pipeline (3 agents, offline), teamwork, costs and arith:split (2 turns: private costs, split
information as cotrain.py's) or jsonl:PATH; a task declares its roles, one agent per role.

Differences from the paper and the authors' code (docs/magrpo.md lists them all):
  * the agents are LoRA adapters on one frozen base (--full-finetune: a full copy each);
  * log π is summed over the completion's tokens with the padding after EOS masked out, at the
    sampling temperature; each agent takes one optimiser step per turn over all of its nodes;
  * generated code runs in sandbox.py's locked-down process, never in the trainer;
  * prompts go through the chat template (--no-chat-template: raw text, as the authors);
  * multi-turn feedback is the offline level_feedback (the paper used an expert LLM).
--fast (the default): generate() routes rows on several adapters through stacked LoRA matmuls
and prefills each distinct prompt once (nanomarl/fast.py; on CUDA the static-cache decoder), the
same samples, and the update forwards each distinct prompt once
(nanomarl/fast.py:shared_prefix_forward); --no-fast: the plain code.

  python magrpo.py  # SmolLM2-135M, minicode, CPU
  python magrpo.py --model tiny --max-steps 4 --max-new-tokens 32  # smoke run
  python magrpo.py --turns 2 --joint-mode cross --max-steps 5  # level feedback
  python magrpo.py --dataset pipeline --num-agents 3 --max-steps 5  # 3 roles
  python magrpo.py --resume RUN --dataset D --max-steps 40  # curriculum stage 2
  torchrun --standalone --nproc_per_node 2 \\
      magrpo.py --model tiny --problems-per-step 2
"""
from __future__ import annotations

import copy
import functools
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from tqdm import tqdm

import common
from common import (adapter_parameters, add_adapters, chat_prompt, extract_answer,
                    forward_responses, generate, load_model, single_adapter)
from nanomarl import vllm_rollout
from nanomarl.cli import ModelArgs, RunArgs, arg_error, load_function, parse_args
from nanomarl.distributed import (allreduce_gradients, allreduce_sum, init_distributed,
                                  is_main_process, seed_everything,
                                  seed_sampling_per_rank)
from nanomarl.fast import shared_prefix_forward
from nanomarl.fast_decode import size_micro_batches
from nanomarl.magrpo_run import (RESUME_MUST_MATCH, check_args, check_task, custom_reward,
                                 finish_run, held_out_problems, load_state, print_sample,
                                 rollout_metrics, save_state, team_means, tree_samples)
from nanomarl.models import load_tokenizer
from nanomarl.runs import (clean_exits, format_metrics, log_metrics, log_samples, projected_time,
                           resumed_args, set_torch_threads, start_run)
from nanomarl.sandbox import parallel_map, run_tests_in_sandbox
from nanomarl.tasks.code_prompts import level_feedback, plain_feedback
from nanomarl.tasks.debate import step_indices
from nanomarl.tasks.kinds import ROLES, TWO_TURN_TASKS, format_prompts, joint_reward, pass_rate
from nanomarl.tasks.problems import load_problems


@dataclass
class Args(RunArgs, ModelArgs):  # and the run's and the base model's flags
    # --- run ---
    dataset: str = "minicode"  # minicode|humaneval|...|teamwork|costs|arith:split|jsonl:PATH
    reward_fn: str = ""  # your joint reward MODULE:FUNCTION, fn(problem, completions) -> reward
    train_limit: int = 0  # keep the first N training problems (0 = all)
    max_steps: int = 15  # optimiser steps
    problems_per_step: int = 1  # rollout trees per step (under torchrun: over all processes)
    # --- agents ---
    num_agents: int = 2  # agents n, one per role of the task (pipeline: 3)
    full_finetune: bool = False  # a full model copy per agent instead of LoRA adapters on one base
    lr: float = 2e-4  # AdamW learning rate, constant
    max_grad_norm: float = 0.0  # clip each agent's gradient norm (0 = no clipping)
    # --- MAGRPO ---
    num_generations: int = 4  # G: completions per agent per node
    joint_mode: Literal["aligned", "cross"] = "aligned"  # j-th of every agent (G) | all G^n
    turns: int = 1  # H: turns (2: a second turn with external feedback)
    discount: float = 1.0  # γ in R = r + γ·mean(child returns)
    adv_mode: Literal["mean", "std", "rloo", "max", "raw"] = "mean"  # group baseline (paper: mean)
    termination_threshold: float = 3.8  # no child nodes if a node's mean reward is above this
    reward_shift: float = 0.0  # reward processor: r -> r + shift (authors' newest configs: -4)
    loss_agg: Literal["seq-sum", "token-mean"] = "seq-sum"  # Σ_t per completion (paper) | per token
    beta: float = 0.0  # β of a per-token k3 KL to the base model in the loss (paper: none)
    micro_batch_size: int = 8  # completions per forward/backward chunk
    generate_batch_size: int = 0  # rows per generate call (0 = all rows of a turn in one call)
    # --- generation ---
    max_new_tokens: int = 96  # tokens per completion (paper: 256)
    temperature: float = 0.5  # sampling temperature (paper: 0.7 writing, 0.6 code)
    top_p: float = 0.9  # nucleus sampling (paper: 0.9 writing, 0.6 code)
    top_k: int = 50  # top-k sampling (0 = off)
    chat_template: bool = True  # wrap each prompt in the model's chat template
    # --- code tasks: sandbox and feedback ---
    test_timeout: float = 3.0  # wall-clock seconds per test in the sandbox
    sandbox_memory_mb: int = 512  # address-space limit of a sandboxed program
    sandbox_workers: int = 0  # programs run in parallel (0 = number of CPU cores)
    feedback: Literal["level_feedback", "plain"] = "level_feedback"  # multi-turn transition
    feedback_tests: int = 1  # asserts the feedback reports: first N (0 = all, −N = last N)
    code_extraction: Literal["ast", "authors"] = "ast"  # whole defs | the authors' line cleanup
    # --- logging ---
    sample_every: int = 4  # print and save a step's joint actions every N steps (0: never)
    save_every: int = 4  # write checkpoint.pt every N steps (and at the end)
    # --- held-out evaluation inside training ---
    eval_problems: int = 16  # held-out problems the team answers greedily (0: no evaluation)
    eval_every: int = 0  # also evaluate every N steps (0: only before the first and after the last)


# ------------------------------------------------------------------------------------------------
# 1. The task: what it plugs in (prompts, joint reward, feedback); its problems: nanomarl/tasks/
# ------------------------------------------------------------------------------------------------


@dataclass
class Task:
    """What a task plugs into the trainer (plain functions). n agents = len(roles): prompts returns
    one prompt per role, reward takes one completion per role (in the same order)."""
    prompts: object  # problem -> first-turn prompt of every agent
    reward: object  # (problem, one completion per agent) -> (joint reward, levels dict)
    feedback: object = None  # (problem, prompt_history, response_history) -> next prompts
    roles: list[str] = field(default_factory=list)  # agent i plays roles[i]
    last_turn_only: bool = False  # True: earlier turns' joint rewards are 0 (only the last scored)
    evaluate: object = None  # (play, problems, rows=[]) -> held-out metrics; rows: per problem


def make_task(args, kind: str = "code", reward_fn=None) -> Task:
    """The built-in task of a problem kind: first-turn prompts, the joint reward (or your
    reward_fn) and, for the coding and the two-turn tasks, the multi-turn feedback."""
    reward = lambda problem, texts: joint_reward(problem, texts, args.test_timeout,
                                                 args.sandbox_memory_mb, args.code_extraction)
    if reward_fn is not None:
        reward = custom_reward(reward_fn, "--reward-fn")
    if kind in TWO_TURN_TASKS:  # arith:split, costs (2 turns): reward_fn's reward, else their own
        own = reward if reward_fn is not None else None
        return Task(**TWO_TURN_TASKS[kind](extract_answer, own))
    if args.feedback == "level_feedback":
        feedback = lambda problem, ph, rh: level_feedback(problem, ph, rh, args.feedback_tests,
                                                          args.test_timeout, args.sandbox_memory_mb,
                                                          args.code_extraction)
    else:
        feedback = plain_feedback
    return Task(prompts=format_prompts, reward=reward, feedback=feedback, roles=ROLES[kind])


# ------------------------------------------------------------------------------------------------
# 2. The agents and the rollout tree (stages 1-4)
# ------------------------------------------------------------------------------------------------


@dataclass
class Agents:
    """The n policies: one PeftModel shared by all agents (LoRA, adapter names[i]) or one full model
    each."""
    models: list  # models[i] generates and trains agent i
    names: list[str] | None  # adapter names ('agent0', ...; '__base__' = no adapter); None: copies
    optimizers: list = field(default_factory=list)  # one AdamW per agent, over its own parameters
    params: list = field(default_factory=list)  # params[i]: agent i's trainable parameters
    ref_model: object = None  # frozen reference for the KL with full copies (LoRA: adapters off)


def build_agents(args, device: str, base=None) -> Agents:
    """LoRA: one frozen base, adapter agentI per agent; --full-finetune: a full trainable copy per
    agent. `base`: an already loaded base model to use instead of loading args.model."""
    base = base if base is not None else load_model(args.model, args.dtype, args.quant, device)
    names = [f"agent{i}" for i in range(args.num_agents)]
    if args.full_finetune:
        models = [copy.deepcopy(base) for _ in names]
        for model in models:
            model.requires_grad_(True)
            model.eval()  # dropout off: the update's log-probs are those of the sampling policy
        params = [list(model.parameters()) for model in models]
        ref_model = base if args.beta > 0 else None
        names = None
    else:
        model = add_adapters(base, names, r=args.lora_r, alpha=args.lora_alpha)
        models = [model] * args.num_agents
        ref_model = None
        params = [adapter_parameters(model, nm) for nm in names]
    # one optimiser per agent over its own parameters; a constant learning rate, as the authors
    optimizers = [torch.optim.AdamW(p, lr=args.lr, weight_decay=0.0) for p in params]
    return Agents(models=models, names=names, optimizers=optimizers, params=params,
                  ref_model=ref_model)


def render_prompt(tokenizer, text: str, chat_template: bool) -> str:
    return chat_prompt(tokenizer, [{"role": "user", "content": text}]) if chat_template else text


def generate_joint_action(agents: Agents, tokenizer, prompts: list[list[str]], num_samples: int = 1,
                          max_new_tokens: int = 256, temperature: float = 0.7, top_p: float = 1.0,
                          top_k: int = 0, greedy: bool = False, chat_template: bool = True,
                          batch_size: int | None = None, fast: bool = False,
                          logprobs: bool = True) -> dict:
    """All agents answer in parallel: prompts[p][i] is agent i's prompt for problem p; every agent
    samples `num_samples` completions of it. With LoRA agents this is ONE generate call (in chunks
    of `batch_size` rows if given), each row on its agent's adapter; with copies one call per agent.
    fast: common.generate's fast paths (--fast); logprobs=False: no π (the held-out play).
    Returns dict(texts [p][i][g], batches [i]: agent i's common.generate output, rows p-major)."""
    n = len(agents.models)
    P = len(prompts)
    rendered = [[render_prompt(tokenizer, text, chat_template) for text in row] for row in prompts]
    sampling = dict(max_new_tokens=max_new_tokens, temperature=temperature, greedy=greedy,
                    top_p=top_p, top_k=top_k, batch_size=batch_size, fast=fast, logprobs=logprobs)
    if agents.names is not None:  # one batch over all (problem, agent, sample) rows
        rows = [(p, i) for p in range(P) for i in range(n) for _ in range(num_samples)]
        out = generate(agents.models[0], tokenizer, [rendered[p][i] for p, i in rows],
                       [agents.names[i] for _, i in rows], **sampling)
        batches = [{k: v.unflatten(0, (P, n, num_samples))[:, i].flatten(0, 1)  # agent i's rows
                    for k, v in out.items()} for i in range(n)]
    else:
        batches = [generate(agents.models[i], tokenizer,
                            [rendered[p][i] for p in range(P) for _ in range(num_samples)],
                            None, **sampling) for i in range(n)]
    decoded = [[tokenizer.decode(ids[mask.bool()], skip_special_tokens=True)  # [i][p·G + g]
                for ids, mask in zip(b["response_ids"], b["response_mask"])] for b in batches]
    texts = [[d[p * num_samples:(p + 1) * num_samples] for d in decoded] for p in range(P)]
    return dict(texts=texts, batches=batches)


def joint_actions(num_generations: int, num_agents: int, mode: str) -> list[tuple[int, ...]]:
    """Joint action = the completion index of every agent. aligned: (j, j, ..., j), G of them;
    cross: every combination, G^n of them."""
    if mode == "aligned":
        return [(j,) * num_agents for j in range(num_generations)]
    if mode == "cross":
        return list(itertools.product(range(num_generations), repeat=num_agents))
    raise ValueError(f"unknown joint mode {mode!r} (aligned, cross)")


@dataclass
class Node:
    """One node of a rollout tree: every agent's prompt at one turn and what was sampled from it."""
    problem: dict
    turn: int
    prompts: list[str]  # agent i's prompt text at this node
    prompt_history: list[list[str]]  # agent i's prompts at the earlier turns of this branch
    response_history: list[list[str]]  # agent i's responses at the earlier turns of this branch
    texts: list[list[str]] = field(default_factory=list)  # [agent][G] sampled completions
    joint: list[tuple[int, ...]] = field(default_factory=list)  # completion index per agent
    rewards: list[float] = field(default_factory=list)  # immediate joint reward of each
    levels: list[dict] = field(default_factory=list)  # the reward's levels of each
    children: list[Node | None] = field(default_factory=list)  # child node of each (None: leaf)
    returns: list[float] = field(default_factory=list)  # return of each joint action
    credits: torch.Tensor | None = None  # [agent, G]: credit of each completion
    advantages: torch.Tensor | None = None  # [agent, G]: advantage of each completion


def rollout(agents: Agents, tokenizer, problems: list[dict], task: Task,
            args) -> tuple[list[Node], list[list[dict]]]:
    """Grow one tree per problem, one turn at a time. Returns (roots, batches) with
    batches[t][i] agent i's sampled rows at turn t: G consecutive rows per node, nodes in
    nodes_by_turn order."""
    n = args.num_agents
    G = args.num_generations
    frontier = [Node(problem=p, turn=0, prompts=task.prompts(p),
                     prompt_history=[[] for _ in range(n)], response_history=[[] for _ in range(n)])
                for p in problems]
    roots = list(frontier)
    batches = []
    for turn in range(args.turns):
        # 1. generate: every agent's G completions at every node of this turn, in one batched call
        out = generate_joint_action(agents, tokenizer, [node.prompts for node in frontier], G,
                                    args.max_new_tokens, args.temperature, args.top_p, args.top_k,
                                    chat_template=args.chat_template,
                                    batch_size=args.generate_batch_size or None, fast=args.fast)
        batches.append(out["batches"])
        # 2. joint actions: aligned (G per node) or cross (G^n per node)
        for node, texts in zip(frontier, out["texts"]):
            node.texts = texts
            node.joint = joint_actions(G, n, args.joint_mode)
        # 3. one joint reward per joint action (code runs in sandboxed subprocesses, in parallel)
        jobs = [(node.problem, [node.texts[i][k] for i, k in enumerate(action)])
                for node in frontier for action in node.joint]
        scores = iter(parallel_map(lambda job: task.reward(*job), jobs, args.sandbox_workers))
        for node in frontier:
            for _ in node.joint:
                total, levels = next(scores)
                if task.last_turn_only and turn < args.turns - 1:
                    total = 0.0  # not scored: the return is γ·its children's (levels are logged)
                node.rewards.append(total + args.reward_shift)  # the reward processor
                node.levels.append(levels)
            node.children = [None] * len(node.joint)
        # 4. branch: each joint action opens a child node with feedback prompts (unless this is the
        # last turn or the node's mean reward is above the termination threshold)
        if turn == args.turns - 1:
            break
        expand = [(node, j) for node in frontier
                  if sum(node.rewards) / len(node.rewards) <= args.termination_threshold
                  for j in range(len(node.joint))]
        histories = []
        for node, j in expand:
            responses = [node.texts[i][k] for i, k in enumerate(node.joint[j])]
            histories.append(([h + [p] for h, p in zip(node.prompt_history, node.prompts)],
                              [h + [r] for h, r in zip(node.response_history, responses)]))
        next_prompts = parallel_map(lambda job: task.feedback(job[0].problem, *job[1]),
                                    [(node, h) for (node, _), h in zip(expand, histories)],
                                    args.sandbox_workers)
        frontier = []
        for (node, j), history, prompts in zip(expand, histories, next_prompts):
            node.children[j] = Node(problem=node.problem, turn=turn + 1, prompts=prompts,
                                    prompt_history=history[0], response_history=history[1])
            frontier.append(node.children[j])
        if not frontier:
            break
    return roots, batches


# ------------------------------------------------------------------------------------------------
# 3. Returns, credits and group-relative advantages (stages 5-6)
# ------------------------------------------------------------------------------------------------


def compute_returns(node: Node, discount: float) -> list[float]:
    """Bottom-up: a leaf's return is its reward; R_j = r_j + γ · mean(returns of child j's joint
    actions)."""
    node.returns = [r + (discount * sum(compute_returns(child, discount)) / len(child.joint)
                         if child else 0.0) for r, child in zip(node.rewards, node.children)]
    return node.returns


def completion_credits(node: Node, num_agents: int, num_generations: int) -> torch.Tensor:
    """[agent, G]: the SUM of the returns of the joint actions containing each completion. Aligned:
    its own joint action's return; cross: the sum over its G^(n-1) partners (the authors' "no
    averaging"; a mean would only rescale the advantages by 1/G^(n-1))."""
    credits = torch.zeros(num_agents, num_generations)
    for action, ret in zip(node.joint, node.returns):
        for agent, k in enumerate(action):
            credits[agent, k] += ret
    return credits


def group_advantages(rewards: torch.Tensor, mode: str = "mean") -> torch.Tensor:
    """rewards [groups, G] -> advantages [groups, G]; each row is baselined with its own group only.
      mean: R − mean(R) (paper eq. 1, the default) | std: (R − mean)/std where std > 1e-8 (unbiased
      std), then clamped to ±10 | rloo: R − mean of the other G−1 | max: R − max(R) (MAReMax)
      | raw: R (MAREINFORCE). A group whose rewards are all equal gets advantage 0 except in raw."""
    rewards = rewards.float()
    mean = rewards.mean(dim=1, keepdim=True)
    if mode == "mean":
        return rewards - mean
    if mode == "std":
        std = rewards.std(dim=1, keepdim=True)  # NaN for G = 1; NaN > 1e-8 is False: no division
        return torch.where(std > 1e-8, (rewards - mean) / std, rewards - mean).clamp(-10.0, 10.0)
    if mode == "rloo":
        size = rewards.shape[1]
        if size < 2:
            raise ValueError("adv mode rloo needs at least 2 samples per group")
        return (size * rewards - rewards.sum(dim=1, keepdim=True)) / (size - 1)
    if mode == "max":
        return rewards - rewards.max(dim=1, keepdim=True).values
    if mode == "raw":
        return rewards.clone()
    raise ValueError(f"unknown advantage mode {mode!r} (mean, std, rloo, max, raw)")


def nodes_by_turn(roots: list[Node]) -> list[list[Node]]:
    """All nodes of the trees, grouped by turn, in the order the rollout created them."""
    turns = []
    frontier = list(roots)
    while frontier:
        turns.append(frontier)
        frontier = [child for node in frontier for child in node.children if child is not None]
    return turns


# ------------------------------------------------------------------------------------------------
# 4. The update: −A · log π(own completion), deepest turn first, one step per agent per turn
# ------------------------------------------------------------------------------------------------


@torch.no_grad()
def reference_logprobs(model, query_ids, query_mask, response_ids, response_mask,
                       temperature: float = 1.0):
    """Log-probs under the reference policy: the same base with every adapter disabled."""
    with single_adapter(model, "__base__"):
        return forward_responses(model, query_ids, query_mask, response_ids, response_mask, None,
                                 temperature)["logprobs"]


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = exp(r) − r − 1 with r = log π_ref − log π: unbiased and non-negative."""
    log_ratio = ref_logprobs - logprobs
    return torch.exp(log_ratio) - log_ratio - 1


def loss_weights(response_mask: torch.Tensor, num_nodes: float, num_generations: int, loss_agg: str,
                 num_tokens: float | None = None) -> torch.Tensor:
    """THE loss normalisation (one place): the per-completion weight w such that an agent's loss at
    a turn is Σ_rows w · Σ_t ℓ_t. seq-sum (paper): the mean over the turn's nodes of the mean over
    each node's G completions of the summed token losses, w = 1/(nodes·G); token-mean: every valid
    token of the turn counts once, w = 1/(valid tokens), counted in response_mask unless num_tokens
    is given. Multi-process: num_nodes and num_tokens are the counts over all ranks."""
    rows = response_mask.shape[0]
    if loss_agg == "seq-sum":
        return torch.full((rows,), 1.0 / (num_nodes * num_generations), device=response_mask.device)
    if loss_agg == "token-mean":
        num_tokens = response_mask.sum().item() if num_tokens is None else num_tokens
        return torch.full((rows,), 1.0 / max(num_tokens, 1.0), device=response_mask.device)
    raise ValueError(f"unknown loss aggregation {loss_agg!r} (seq-sum, token-mean)")


def accumulate_agent_loss(agents: Agents, agent: int, batch: dict, advantages: torch.Tensor,
                          num_nodes: float, args, num_tokens: float | None = None) -> dict:
    """Forward agent `agent`'s rows of one turn in micro-batches and back-propagate −A·log π
    (+ β·k3) into its parameters (gradients accumulate; the caller steps). log π is at the sampling
    temperature, summed over the completion's tokens with everything after EOS masked. num_nodes,
    num_tokens: loss_weights' denominators. Returns the agent's metrics for the turn."""
    model = agents.models[agent]
    weights = loss_weights(batch["response_mask"], num_nodes, args.num_generations, args.loss_agg,
                           num_tokens)
    totals = dict(loss=0.0, entropy=0.0, kl=0.0, tokens=0.0, logprob_gap=0.0, truncation_gap=0.0)
    # --fast: each distinct prompt forwarded once (nanomarl/fast.py); plain: forward_responses
    forward = functools.partial(shared_prefix_forward, common) if args.fast else forward_responses
    for start in range(0, batch["response_mask"].shape[0], args.micro_batch_size):
        rows = slice(start, start + args.micro_batch_size)
        # (forward_responses skips the padding columns every row of the chunk has)
        chunk = {k: v[rows] for k, v in batch.items()}
        mask = chunk["response_mask"]
        adv, w = advantages[rows], weights[rows]
        names = None if agents.names is None else [agents.names[agent]] * mask.shape[0]
        inputs = [chunk[k] for k in ("query_ids", "query_mask", "response_ids", "response_mask")]
        out = forward(model, *inputs, names, args.temperature, output_entropy=True)
        token_loss = -adv.to(mask.device)[:, None] * out["logprobs"]  # eq. 2: −A · log π, per token
        if args.beta > 0:  # the reference: the base, LoRA adapters off, or its frozen copy
            ref_model = model if agents.ref_model is None else agents.ref_model
            ref = reference_logprobs(ref_model, *inputs, args.temperature)
            kl = kl_k3(out["logprobs"], ref) * mask
            token_loss = token_loss + args.beta * kl
            totals["kl"] += kl.sum().item()
        loss = ((token_loss * mask).sum(dim=1) * w).sum()
        loss.backward()
        totals["loss"] += loss.item()
        totals["entropy"] += out["entropy"].sum().item()
        totals["tokens"] += mask.sum().item()
        # |log π(now) − log π(at sampling)|: 0 up to float noise for the first turn updated
        totals["logprob_gap"] += ((out["logprobs"].detach() - chunk["logprobs"]).abs()
                                  * mask).sum().item()
        # log q − log π of the sampled tokens: −log(the mass top-k/top-p kept) (docs/magrpo.md)
        gap = chunk["sampling_logprobs"] - chunk["logprobs"]
        totals["truncation_gap"] += (gap * mask).sum().item()
    tokens = max(totals.pop("tokens"), 1.0)
    return {k: v if k == "loss" else v / tokens for k, v in totals.items()}


def magrpo_update(agents: Agents, roots: list[Node], batches: list[list[dict]], args) -> dict:
    """Stages 5-7 on grown trees (rollout's output): returns, advantages, then every agent's update,
    deepest turn first. Multi-process: each rank passes its own trees; every rank must call it.
    Returns each agent's loss statistics and gradient norm."""
    n = args.num_agents
    G = args.num_generations
    # 5. returns bottom-up, 6. credits and group-relative advantages (one group per node and agent)
    turns = nodes_by_turn(roots)
    for root in roots:
        compute_returns(root, args.discount)
    all_nodes = [node for nodes in turns for node in nodes]
    credits = torch.stack([completion_credits(node, n, G) for node in all_nodes])  # [nodes, n, G]
    advantages = group_advantages(credits.reshape(-1, G), args.adv_mode).reshape(-1, n, G)
    for node, credit, adv in zip(all_nodes, credits, advantages):
        node.credits = credit
        node.advantages = adv
    # 7. the policy-gradient update, deepest turn first; each agent steps its own optimiser once
    metrics = {}
    multi = torch.distributed.is_initialized()  # under torchrun: sums over the ranks
    for turn in reversed(range(args.turns)):
        nodes = turns[turn] if turn < len(turns) else []  # another rank's trees may go deeper
        # the loss normalisation's denominators: this turn's nodes and each agent's valid tokens,
        # summed over all ranks (the summed gradients are then those of one process with all trees)
        counts = [len(nodes)] + [batches[turn][i]["response_mask"].sum().item() if nodes else 0.0
                                 for i in range(n)]
        counts = torch.tensor(counts, dtype=torch.float, device=agents.params[0][0].device)
        num_nodes, *num_tokens = (allreduce_sum(counts) if multi else counts).tolist()
        if num_nodes == 0:
            continue  # no tree reached this turn, on any rank
        for agent in range(n):
            prefix = f"agent{agent}/" if turn == 0 else f"agent{agent}/turn{turn}_"
            if nodes:  # a rank without nodes at this turn adds nothing but joins the all-reduce
                adv = torch.cat([node.advantages[agent] for node in nodes])
                stats = accumulate_agent_loss(agents, agent, batches[turn][agent], adv, num_nodes,
                                              args, num_tokens[agent])
                metrics.update({prefix + k: v for k, v in stats.items()})
            if multi:  # the gradients summed over the ranks, then clipped and stepped
                allreduce_gradients(agents.params[agent])
            max_norm = args.max_grad_norm if args.max_grad_norm > 0 else float("inf")  # no clip
            grad_norm = torch.nn.utils.clip_grad_norm_(agents.params[agent], max_norm)
            agents.optimizers[agent].step()
            agents.optimizers[agent].zero_grad(set_to_none=True)
            metrics[prefix + "grad_norm"] = float(grad_norm)
    return metrics


def magrpo_step(agents: Agents, tokenizer, problems: list[dict], task: Task,
                args) -> tuple[dict, list[Node], list[list[dict]]]:
    """One MAGRPO iteration: grow the trees (stages 1-4), then magrpo_update (5-7). Returns
    (the update's metrics and timings, roots, batches)."""
    t0 = time.time()
    roots, batches = rollout(agents, tokenizer, problems, task, args)
    t_rollout = time.time() - t0
    metrics = magrpo_update(agents, roots, batches, args)
    metrics["timing/rollout_s"] = t_rollout
    metrics["timing/step_s"] = time.time() - t0
    return metrics, roots, batches


# ------------------------------------------------------------------------------------------------
# 5. Held-out evaluation: the team's greedy joint action on problems it never trains on
# ------------------------------------------------------------------------------------------------


def eval_due(args, eval_problems: list[dict], step: int) -> bool:
    """Evaluate (when there are held-out problems) before the first step (step 0), every
    --eval-every steps and after the last one."""
    every = bool(args.eval_every and step % args.eval_every == 0)
    return bool(eval_problems) and is_main_process() and (
        step == 0 or step == args.max_steps or every)


@torch.no_grad()
def evaluate_team(agents: Agents, tokenizer, problems: list[dict], task: Task, args,
                  run_dir: Path | None = None, step: int = 0) -> dict:
    """The team's greedy joint action on every held-out problem (first turn), scored by the task's
    joint reward (without the reward processor): eval/reward/mean, the mean of every level, and for
    the coding tasks eval/pass_rate, the fraction of problems whose every test passed. A task with
    its own evaluation (arith:split: both turns and the controls) plays it with `play`; its answers
    per problem go to run_dir's eval_samples.jsonl, each row with its step."""
    t0 = time.time()

    def play(prompts: list[list[str]]) -> list[list[str]]:  # [p][i]: agent i's greedy answer
        out = generate_joint_action(agents, tokenizer, prompts, 1, args.max_new_tokens, greedy=True,
                                    chat_template=args.chat_template,
                                    batch_size=args.generate_batch_size or None, fast=args.fast,
                                    logprobs=False)
        return [[texts[0] for texts in per_problem] for per_problem in out["texts"]]
    if task.evaluate is not None:
        rows = []
        metrics = task.evaluate(play, problems, rows=rows)
        if run_dir is not None:
            log_samples(run_dir, [dict(step=step, **row) for row in rows], "eval_samples.jsonl")
        return {**metrics, "eval/num_questions": len(problems), "timing/eval_s": time.time() - t0}
    jobs = list(zip(problems, play([task.prompts(p) for p in problems])))
    results = parallel_map(lambda job: task.reward(*job), jobs, args.sandbox_workers)
    metrics = {"eval/reward/mean": sum(total for total, _ in results) / len(results)}
    for key in results[0][1]:
        if all(isinstance(levels.get(key), (int, float)) for _, levels in results):
            metrics[f"eval/reward/{key}"] = sum(levels[key] for _, levels in results) / len(results)
    solved = pass_rate(problems[0]["kind"], [levels for _, levels in results])
    if solved is not None:
        metrics["eval/pass_rate"] = solved
    metrics.update({"eval/num_questions": len(problems), "timing/eval_s": time.time() - t0})
    return metrics


# ------------------------------------------------------------------------------------------------
# 6. Main: agents -> (rollout trees -> returns -> advantages -> update) x steps -> adapters
# ------------------------------------------------------------------------------------------------


def main(args: Args):
    if args.resume:  # the run's settings + the flags typed now; a change of shape is refused
        args = resumed_args(args, "magrpo", RESUME_MUST_MATCH, ("eval_problems",))
    check_args(args)
    size_micro_batches(args, "micro_batch_size", 1,  # completions per forward: CUDA, unless typed
                       512 + args.turns * args.max_new_tokens)
    reward_fn = load_function(args.reward_fn, "--reward-fn") if args.reward_fn else None
    problems = load_problems(args.dataset, "train", args.train_limit)
    if not problems:
        arg_error("--dataset", f"{args.dataset} has no training problems")
    eval_problems = held_out_problems(args, problems)  # the eval split, never trained on
    task = make_task(args, problems[0]["kind"], reward_fn)
    check_task(args, problems, task)  # --num-agents is the number of roles; multi-turn: code only
    rank, world, device = init_distributed(args.device)  # under torchrun: join the process group
    print(set_torch_threads(args.threads))
    if args.problems_per_step % world or args.problems_per_step > len(problems):
        arg_error("--problems-per-step", f"is the global number of trees per step, split across "
                                         f"the {world} process(es): it must be divisible by "
                                         f"{world} and at most the {len(problems)} problems, got "
                                         f"{args.problems_per_step}")
    run_dir = start_run(args, "magrpo")
    seed_everything(args.seed)
    tokenizer = load_tokenizer(args.model)
    agents = build_agents(args, device)  # the same initial agents on every rank (same seed)
    seed_sampling_per_rank(args.seed)  # every rank samples different completions
    start_step = load_state(run_dir, agents) if args.resume else 0
    if args.use_vllm:  # rollouts on vLLM; it reloads an adapter whenever its weights change
        vllm_rollout.start(agents.models[0], agents.names)
    print(f"MAGRPO on {args.dataset}: {len(problems)} problems, {args.num_agents} agents "
          f"{'/'.join(task.roles)} ({'full copies' if args.full_finetune else 'LoRA adapters'} of "
          f"{args.model}), G={args.num_generations}, {args.joint_mode} joint actions, "
          f"{args.turns} turn(s), {args.max_steps} steps"
          + (f", reward {args.reward_fn}" if args.reward_fn else ""))
    if problems[0]["kind"] in ("code", "pipeline"):
        run_tests_in_sandbox("x = 1", [])  # a missing sandbox layer is reported now, once
    if start_step == 0 and eval_due(args, eval_problems, 0):  # 0. the untrained team, held out
        metrics = evaluate_team(agents, tokenizer, eval_problems, task, args, run_dir)
        log_metrics(run_dir, {"step": 0, **metrics})
    bar = tqdm(range(start_step, args.max_steps), desc="magrpo", initial=start_step,
               total=args.max_steps, disable=rank > 0)
    for step in bar:
        order = step_indices(len(problems), args.problems_per_step, step, f"magrpo-{args.seed}",
                             drop_last=world > 1)
        batch = [problems[i] for i in order][rank::world]  # this rank's problems
        metrics, roots, batches = magrpo_step(agents, tokenizer, batch, task, args)
        metrics.update(rollout_metrics(nodes_by_turn(roots), roots, batches, args.num_generations))
        metrics.update(team_means(metrics, args.num_agents))  # the rollout's, for the log
        if eval_due(args, eval_problems, step + 1):  # the team after this step, held out
            metrics.update(evaluate_team(agents, tokenizer, eval_problems, task, args, run_dir,
                                         step + 1))
        log_metrics(run_dir, {"step": step + 1, **metrics})  # rank 0 writes its own trees' metrics
        left = range(step + 2, args.max_steps + 1)  # the steps after this one
        if step == start_step and left and rank == 0:  # this run's first step: the rest's minutes
            evals = sum(eval_due(args, eval_problems, s) for s in left)
            tqdm.write(projected_time(run_dir, metrics["timing/step_s"], len(left), evals))
        bar.set_postfix(reward=f"{metrics['reward/mean']:.3f}")
        if (step + 1) % args.log_every == 0:
            tqdm.write(f"step {step + 1}: " + format_metrics(metrics, [
                "reward/mean", "return/mean", "frac_reward_zero_std", "completions/mean_length",
                "completions/clipped_ratio", "objective/entropy",
                *[f"agent{i}/loss" for i in range(args.num_agents)], "timing/step_s"]))
        if args.sample_every and (step + 1) % args.sample_every == 0:
            print_sample(step + 1, roots)
            log_samples(run_dir, tree_samples(step + 1, roots))
        if (step + 1) % args.save_every == 0 or step + 1 == args.max_steps:
            save_state(run_dir, agents, step + 1)
    finish_run(run_dir, agents, tokenizer, eval_problems)


if __name__ == "__main__":
    with clean_exits("--dataset"):  # Ctrl-C / SIGTERM: finish the write in progress, then exit
        main(parse_args(Args))
