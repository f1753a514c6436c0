"""cotrain.py: MAPoRL (Park et al., arXiv 2502.18439). LLM agents debate; every agent is trained
with its own PPO on influence-aware rewards, all at once, as LoRA adapters on one frozen base.

A agents debate each question for T turns (Du et al. 2024): at turn 1 each answers alone; at turn
t > 1 each sees its own earlier answers and the others' answers of turn t-1, and answers again.
Every answer is scored (0/1 correctness, or a trained verifier's probability); the scores become
influence-aware rewards (Definition 1) plus collaboration incentives (Tables 1 and 2). The reference
policy is the base with every adapter disabled. One update, in the stages numbered below: 1 play the
debate, 2 score and penalise, 3 rewards, 4 reference log-probs (and values), 5 KL-shaped rewards and
advantages, 6 PPO, 7 evaluate on held-out questions.

    python cotrain.py                               # SmolLM2-135M on CPU
    python cotrain.py --model tiny --max-steps 2    # each stage once, tiny model
    python cotrain.py --config recipes/maporl-gsm8k-phi3.yaml  # paper scale, GPU
    python cotrain.py --resume RUN --dataset D --max-steps 40  # next stage
    torchrun --standalone --nproc_per_node 2 cotrain.py --model tiny

--fast (the default): the same numbers, faster: stage 1's generate() routes rows on several adapters
through stacked LoRA matmuls and prefills a question's K samples once (nanomarl/fast.py; CUDA:
nanomarl/fast_decode.py), stages 4-6 read each agent's turns in one forward
(nanomarl/conversation.py). --no-fast runs the plain code you read.

Simplifications and differences from the paper and the authors' code (docs/maporl.md says why):
  * Incentives follow the paper's Tables 1-2 (incentive_bonus); the authors' code swaps the W->R α
    values and flips Table 2's signs.
  * The CPU default: arith:digits; a per-question baseline over K = 4 debates (--advantage group)
    instead of GAE; the score evaluation counts (unparsable = wrong = 0) instead of -10 / -1. The
    paper's: --advantage gae --samples-per-question 1 --format-penalty -10 --missing-eos-penalty -1.
  * π_old: the log-probs the tokens were sampled with in fp32, else a forward (--old-logprobs).
  * Generation stops at EOS; one temperature samples and recomputes; the verifier runs in-process.
  * The summed (turn, agent) losses step each optimiser once per minibatch.
"""
from __future__ import annotations

import functools
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

from common import (ValueHead, adapter_parameters, add_adapters, allreduce_sum, chat_prompt,
                    debate_metrics, extract_answer, forward_conversation, forward_responses,
                    generate, has_degenerate_repetition, hidden_size, load_model, masked_whiten)
from nanomarl import vllm_rollout
from nanomarl.cli import DataArgs, ModelArgs, RunArgs, parse_args
from nanomarl.conversation import conversation_forward
from nanomarl.cotrain_run import (add_minibatch_stats, agent_models, check_questions, custom_scorer,
                                  eval_due, eval_metrics, eval_started, finish_run, load_state,
                                  log_update, ppo_metrics, rollout_metrics, save_state, settle_args,
                                  stop_if_kl_exceeds, train_turn_indices)
from nanomarl.critic import critic_values
from nanomarl.distributed import (allreduce_gradients, init_distributed, rank_rows, seed_everything,
                                  seed_sampling_per_rank)
from nanomarl.fast_decode import size_micro_batches
from nanomarl.models import load_tokenizer
from nanomarl.runs import clean_exits, log_metrics, set_torch_threads, start_run
from nanomarl.self_consistency import eval_controls
from nanomarl.split_controls import split_controls
from nanomarl.tasks.debate import dataset_options, load_task, step_indices
from nanomarl.tasks.debate_prompts import (continue_chat, discussion_message, first_message,
                                           followup_message, sampled_conversation)
from train_verifier import rl_records, verifier_scorer


@dataclass
class Args(RunArgs, ModelArgs, DataArgs):  # and the run's, the base model's and the data's flags
    models: str = ""  # one base per agent, comma-separated (overrides --model)
    policy_sharing: Literal["agent", "agent-turn", "shared"] = "agent"  # LoRA per agent|turn|one
    value_model: Literal["shared", "separate"] = "shared"  # critic: heads on the policy | own LoRA
    old_logprobs: Literal["auto", "sampling", "recompute"] = "auto"  # sampled in fp32, else forward
    dataset: str = "arith:digits"  # arith[:digits|:easy], gsm8k, anli[:rN], jsonl:PATH, hub id
    num_agents: int = 2  # A, agents in the debate
    num_turns: int = 2  # T, turns of the debate (the paper trains with 3)
    train_turns: str = ""  # turns to train, 1-based, comma-separated (default all; others: base)
    prompt_style: Literal["short", "default", "phi3"] = "short"  # ours, or the authors' two
    feedback_in_prompt: bool = False  # show each agent the verifier's scores of the last answers
    max_new_tokens: int = 48  # response length limit (authors: 300)
    temperature: float = 0.3  # sampling temperature, also for every log-prob (authors: 0.7)
    generate_batch_size: int = 0  # rows per generate call (0: a whole turn in one call)
    forward_batch_size: int = 8  # rows per no-grad forward (ref log-probs, values, verifier)
    scorer: Literal["ground-truth", "verifier"] = "ground-truth"  # 0/1, or a verifier's probability
    verifier: str = ""  # a train_verifier.py run folder (with --scorer verifier)
    reward_fn: str = ""  # your scorer MODULE:FUNCTION, fn(records, responses) -> scores in [0, 1]
    reward_fn_rules: bool = False  # with --reward-fn: also apply the penalties and incentives
    penalize_format: bool = True  # a badly formatted answer's score becomes --format-penalty
    format_penalty: float = 0.0  # the bad-format score (authors: -10; 0: scored as a wrong answer)
    min_response_tokens: int = 10  # shorter responses count as bad format (authors: 50)
    missing_eos_penalty: float = 0.0  # added to a response cut at --max-new-tokens (authors: -1)
    reward_rule: Literal["influence", "current", "final-mean"] = "influence"  # Def. 1 | own | last
    influence_gamma: float = 0.3  # γ of the influence-aware reward (authors: 0.3)
    incentives: str = "0.5,0.5,0.3,0.3"  # α0,α1,β0,β1 of Tables 1-2 (incentive_bonus; 0s: none)
    max_steps: int = 10  # updates: each a rollout and --ppo-epochs passes over it
    questions_per_update: int = 2  # B, questions per rollout (global under torchrun; authors: 256)
    samples_per_question: int = 4  # K, debates per question (group compares them; authors: 1)
    advantage: Literal["group", "gae"] = "group"  # reward less its question's mean | GAE, values
    advantage_std: bool = False  # group: divide each (turn, agent)'s advantages by their std
    minibatch_questions: int = 0  # debates per optimiser step (0: all B x K, one step per epoch)
    micro_batch_questions: int = 1  # debates per forward/backward (gradient accumulation)
    ppo_epochs: int = 2  # passes over each rollout (authors: 4)
    lr: float = 2e-4  # AdamW learning rate of every adapter and head (authors: 1e-5)
    lr_decay_steps: int = 0  # updates the linear decay to lr / 10 lasts (0: --max-steps)
    max_grad_norm: float = 1.0  # clip each optimiser's gradient norm to this
    kl_coef: float = 0.002  # per-token KL penalty to the reference (authors: 0.002)
    cliprange: float = 0.2  # PPO clip ε of the ratio, and of the values around the old ones
    vf_coef: float = 0.1  # weight of the value loss
    gae_lambda: float = 0.95  # GAE λ (γ = 1 within a response)
    eval_questions: int = 40  # held-out questions debated greedily before and after (0: off)
    eval_every: int = 0  # also evaluate every N updates (0: before the first and after the last)
    eval_split: str = "test"  # split of the held-out questions (disjoint from the training split)
    eval_self_consistency: bool = True  # also agent 0 alone, A x T sampled answers voted (eval/sc/)


RESPONSE_KEYS = ("query_ids", "query_mask", "response_ids", "response_mask")  # what is forwarded
LR_END_FACTOR = 0.1  # the lr decays linearly to lr x this (the authors' LinearLR)
WEIGHT_DECAY = 0.01  # AdamW's, of every adapter and head (torch's default, the authors')
GAE_GAMMA = 1.0  # no discount within a response (TRL's and the authors' γ)


# 1. The debate (Sec. 3.1) -------------------------------------------------------------------------


@dataclass
class Debate:
    """A debate of A agents over T turns on B questions. Every per-answer field is indexed [b][t][a]
    (tensors [B, T, A]); rollout[(t, a)] holds generate()'s tensors of turn t's agent a, B rows."""
    records: list[dict]  # the B questions
    prompts: list  # [b][t][a] the chat text the agent answered
    responses: list  # [b][t][a] its response, decoded
    answers: list  # [b][t][a] extract_answer's (None: unparsable)
    correct: torch.Tensor  # [B, T, A] 1: the gold answer
    scores: torch.Tensor | None  # [B, T, A] the scorer's (None: none ran)
    rollout: dict  # (t, a) -> generate()'s tensors (ids, masks, log-probs), as_sampled; B rows
    generate_s: float = 0.0  # seconds spent playing it


def run_debate(records: list[dict], models: list, tokenizers: list, adapter_names: list[list[str]],
               max_new_tokens: int, temperature: float = 0.7, greedy: bool = False, scorer=None,
               feedback_in_prompt: bool = False, prompt_style: str = "default", logprobs=True,
               generate_batch_size: int = 0, show_partner=str, fast: bool = False) -> Debate:
    """Play a T-turn debate between A agents on B questions (Sec. 3.1), each other agent's answer
    of turn t-1 shown as show_partner(answer) (the silent control: neutral_message). A split record
    (arith:split) gives each agent its own view, then a fresh chat with its partners' words."""
    t0 = time.time()
    num_turns, num_agents, batch = len(adapter_names), len(models), len(records)
    def empty():  # [b][t][a]
        return [[[None] * num_agents for _ in range(num_turns)] for _ in records]
    d = Debate(records, prompts=empty(), responses=empty(), answers=empty(),
               correct=torch.zeros(batch, num_turns, num_agents),
               scores=torch.zeros(batch, num_turns, num_agents) if scorer else None, rollout={})
    # chats[a][b]: the conversation agent a has seen on question b
    chats = [[[{"role": "user", "content": first_message(r, a, prompt_style)}] for r in records]
             for a in range(num_agents)]
    # the agents that share one model object, generated together
    groups = {id(m): [a for a in range(num_agents) if models[a] is m] for m in models}
    for t in range(num_turns):
        for a, b in ((a, b) for a in range(num_agents if t > 0 else 0) for b in range(batch)):
            said = [(j, show_partner(r)) for j, r in enumerate(d.responses[b][t - 1]) if j != a]
            if "followups" in records[b]:  # arith:split: a fresh chat with the partners' words
                chats[a][b] = [{"role": "user", "content": followup_message(
                    records[b], a, [text for _, text in said])}]
                continue
            chats[a][b].append({"role": "user", "content": discussion_message(
                records[b]["question"], said,
                prompt_style=prompt_style if records[b]["task"] == "math" else "default",
                other_scores=([float(d.scores[b, t - 1, j]) for j, _ in said]
                              if feedback_in_prompt else None),
                own_score=float(d.scores[b, t - 1, a]) if feedback_in_prompt else None)})
        for agents in groups.values():  # one generate call per base, each row on its own adapter
            model, tok = models[agents[0]], tokenizers[agents[0]]
            texts = [chat_prompt(tok, chats[a][b]) for a in agents for b in range(batch)]
            inputs = [texts[k * batch + b] if len(chats[a][b]) == 1  # a chat that starts here
                      else continue_chat(tok, sampled_conversation(d.rollout[(t - 1, a)], b)
                                         .tolist(), texts[k * batch + b])  # as sampled, continued
                      for k, a in enumerate(agents) for b in range(batch)]
            names = [adapter_names[t][a] for a in agents for _ in range(batch)]
            out = generate(model, tok, inputs, names, max_new_tokens, temperature=temperature,
                           greedy=greedy, batch_size=generate_batch_size or None, fast=fast,
                           logprobs=logprobs)
            for k, a in enumerate(agents):
                rows = slice(k * batch, (k + 1) * batch)
                ro = d.rollout[(t, a)] = {key: value[rows] for key, value in out.items()}
                ro["as_sampled"] = torch.tensor([t == 0 or (  # [B] the prompt holds every earlier
                    isinstance(inputs[k * batch + b], list)  # turn as sampled (--fast reads it)
                    and bool(d.rollout[(t - 1, a)]["as_sampled"][b])) for b in range(batch)])
                for b, r in enumerate(records):
                    text = tok.decode(ro["response_ids"][b][ro["response_mask"][b].bool()],
                                      skip_special_tokens=True)
                    d.prompts[b][t][a], d.responses[b][t][a] = texts[k * batch + b], text
                    d.answers[b][t][a] = answer = extract_answer(text, r["task"])
                    d.correct[b, t, a] = float(answer is not None and answer == r["answer"])
                    chats[a][b].append({"role": "assistant", "content": text})
        if scorer is not None:
            flat = [d.responses[b][t][a] for a in range(num_agents) for b in range(batch)]
            d.scores[:, t] = scorer(records * num_agents, flat).float().cpu().view(num_agents, -1).T
    d.generate_s = time.time() - t0
    return d


# 2. Scores and penalties (the scorer itself: make_scorer) -----------------------------------------


def format_ok(answer: str | None, token_ids: list[int], min_tokens: int, decode=None) -> bool:
    """The format gate: a final answer (extract_answer's, as the scorer and evaluation read it), at
    least min_tokens tokens, and no degenerate repetition (the authors' rules)."""
    return (answer is not None and len(token_ids) >= min_tokens
            and not has_degenerate_repetition(token_ids, decode=decode))


def apply_penalties(scores: torch.Tensor, good_format: torch.Tensor, truncated: torch.Tensor,
                    format_penalty: float | None, missing_eos_penalty: float) -> torch.Tensor:
    """Bad format: the score becomes format_penalty (None: no format gate); truncated: plus
    missing_eos_penalty. All [B, T, A]."""
    if format_penalty is not None:
        scores = torch.where(good_format.bool(), scores, torch.full_like(scores, format_penalty))
    return scores + missing_eos_penalty * truncated.float()


# 3. Rewards: influence-aware (Definition 1) and the incentives (Tables 1 and 2) -------------------


def influence_aware_rewards(scores: torch.Tensor, gamma: float) -> torch.Tensor:
    """Influence-aware verification reward (Definition 1; the authors' 'discounted_sum' rule), on
    scores [..., T, A]: its own score at its turn, the mean over ALL agents at every later turn,
        R[t, a] = (s[t, a] + Σ_{t' > t} γ^(t'-t) · mean_j s[t', j]) / Σ_{t' = t..T} γ^(t'-t)"""
    num_turns = scores.shape[-2]
    turn_mean = scores.mean(dim=-1)  # [..., T]
    rewards = torch.empty_like(scores)
    for t in range(num_turns):
        future = torch.zeros_like(turn_mean[..., t])
        for k in range(1, num_turns - t):
            future = future + gamma ** k * turn_mean[..., t + k]
        normaliser = sum(gamma ** k for k in range(num_turns - t))  # γ^0 = 1, also when γ = 0
        rewards[..., t, :] = (scores[..., t, :] + future.unsqueeze(-1)) / normaliser
    return rewards


def turn_rewards(scores: torch.Tensor, rule: str, gamma: float) -> torch.Tensor:
    """R[t, a] under --reward-rule: influence (Definition 1), current (own score), final-mean."""
    if rule == "influence":
        return influence_aware_rewards(scores, gamma)
    if rule == "current":
        return scores.clone()
    return scores[..., -1:, :].mean(dim=-1, keepdim=True).expand_as(scores).clone()  # final-mean


def incentive_bonus(correct: torch.Tensor, alpha0: float, alpha1: float, beta0: float,
                    beta1: float) -> torch.Tensor:
    """Collaboration incentives of the paper's Tables 1 and 2. correct: 0/1, [T, A] or [B, T, A].

    "Majority" is the majority of the OTHER agents' correctness at that turn (mean > 0.5: R,
    < 0.5: W); a tie (mean exactly 0.5, or no other agent) gives no incentive.

    Table 1, own revision, added to the agent's answer at t+1:
        own R->W, majority(t) R: -α1      own R->W, majority(t) W: -α0
        own W->R, majority(t) W: +α0      own W->R, majority(t) R: +α1
    Table 2, influence on the others, added to the agent's answer at t:
        majority R->W, own(t) R: -β1      majority R->W, own(t) W: -β0
        majority W->R, own(t) W: +β0      majority W->R, own(t) R: +β1"""
    c = correct.float()
    num_agents = c.shape[-1]
    others = ((c.sum(dim=-1, keepdim=True) - c) / (num_agents - 1) if num_agents > 1
              else torch.full_like(c, 0.5))  # the others' mean correctness; no other: a tie
    right = (c > 0.5).float()  # 1: right at that turn
    wrong = (c < 0.5).float()
    maj_right = (others > 0.5).float()
    maj_wrong = (others < 0.5).float()
    bonus = torch.zeros_like(c)
    # Table 1: own change t -> t+1 (+1 W->R, -1 R->W) x α of majority(t); paid at t+1
    change = wrong[..., :-1, :] * right[..., 1:, :] - right[..., :-1, :] * wrong[..., 1:, :]
    bonus[..., 1:, :] += change * (alpha1 * maj_right[..., :-1, :]
                                   + alpha0 * maj_wrong[..., :-1, :])
    # Table 2: the others' majority change t -> t+1 (+1 W->R, -1 R->W) x β of own(t); paid at t
    maj_change = (maj_wrong[..., :-1, :] * maj_right[..., 1:, :]
                  - maj_right[..., :-1, :] * maj_wrong[..., 1:, :])
    bonus[..., :-1, :] += maj_change * (beta1 * right[..., :-1, :] + beta0 * wrong[..., :-1, :])
    return bonus


# The team: a LoRA adapter per policy on each base, value heads, one optimiser per adapter


@dataclass
class Team:
    base_names: list[str]  # distinct base models
    bases: list  # one PeftModel per distinct base: the policy adapters (and 'critic')
    tokenizers: list  # one per distinct base
    agent_base: list[int]  # base index of each agent
    adapter_names: list[list[str]]  # [T][A] adapter of each (turn, agent); '__base__': untrained
    trained: list[tuple[int, int]]  # the (turn, agent) pairs PPO trains, 0-based
    base_adapters: list[list[str]]  # adapters on each base (the critic, if any, last)
    heads: nn.ModuleDict  # value heads (--advantage gae only), keyed by head_keys[(t, a)]
    head_keys: dict  # (t, a) -> key in heads
    optimizers: dict  # "[base{i}/]adapter" -> AdamW; gae adds "critic" or "value_heads"

    def models(self) -> list:  # per agent, for run_debate
        return [self.bases[i] for i in self.agent_base]

    def agent_tokenizers(self) -> list:
        return [self.tokenizers[i] for i in self.agent_base]


def build_team(args: Args, device: str) -> Team:
    """Each distinct base once, its policy adapters (and 'critic' with --value-model separate), one
    optimiser per adapter from its own parameters only; with --advantage gae the value heads."""
    names = agent_models(args)
    base_names = list(dict.fromkeys(names))
    agent_base = [base_names.index(n) for n in names]
    train_turns = train_turn_indices(args)
    policy = {"agent": "agent{a}", "shared": "policy"}.get(args.policy_sharing, "agent{a}_turn{t}")
    adapter_names = [[policy.format(a=a, t=t + 1) if t in train_turns else "__base__"
                      for a in range(args.num_agents)] for t in range(args.num_turns)]
    trained = [(t, a) for t in train_turns for a in range(args.num_agents)]
    models = [load_model(name, args.dtype, args.quant, device) for name in base_names]
    tokenizers = [load_tokenizer(name) for name in base_names]
    seed_everything(args.seed)  # after loading: building `tiny` the first time reseeds torch
    base_adapters = [sorted({adapter_names[t][a] for t, a in trained if agent_base[a] == i})
                     + (["critic"] if args.value_model == "separate" else [])
                     for i in range(len(models))]
    bases = [add_adapters(model, own, r=args.lora_r, alpha=args.lora_alpha)
             for model, own in zip(models, base_adapters)]
    fit_values = args.advantage == "gae"  # --advantage group reads no values: no heads
    head_keys, heads = {}, nn.ModuleDict()
    for t, a in (trained if fit_values else []):
        by = "" if len(bases) == 1 else f"_base{agent_base[a]}"
        head_keys[(t, a)] = key = f"turn{t + 1}{by}"
        if key not in heads:
            heads[key] = ValueHead(hidden_size(bases[agent_base[a]])).to(device)
    adamw = functools.partial(torch.optim.AdamW, lr=args.lr, weight_decay=WEIGHT_DECAY)
    optimizers = {}
    for i, model in enumerate(bases):
        prefix = "" if len(bases) == 1 else f"base{i}/"
        own_heads = list({id(p): p for (t, a), key in head_keys.items() if agent_base[a] == i
                          for p in heads[key].parameters()}.values())  # a shared head: once
        for name in base_adapters[i]:  # the critic adapter steps with its heads
            params = adapter_parameters(model, name) + (own_heads if name == "critic" else [])
            optimizers[prefix + name] = adamw(params)
        if fit_values and args.value_model == "shared":  # the heads alone, on the policies' states
            optimizers[prefix + "value_heads"] = adamw(own_heads)
    return Team(base_names, bases, tokenizers, agent_base, adapter_names, trained, base_adapters,
                heads, head_keys, optimizers)


# 4-5. Experience: reference log-probs (and values), KL-shaped rewards, advantages ----------------


@dataclass
class Experience:
    """One trained (turn, agent)'s B rows (debates): the sampled tensors, then stages 4-5's."""
    query_ids: torch.Tensor  # the prompts, left-padded ([B, L] each, 0 on padding)
    query_mask: torch.Tensor
    response_ids: torch.Tensor  # the responses, right-padded
    response_mask: torch.Tensor
    as_sampled: torch.Tensor | None = None  # [B] the prompt holds the earlier turns (run_debate)
    old_logprobs: torch.Tensor | None = None  # log π_old, as sampled (or recomputed)
    entropy: torch.Tensor | None = None  # of π_old
    ref_logprobs: torch.Tensor | None = None  # log π_ref: the base, adapters off
    kl: torch.Tensor | None = None  # log π_old - log π_ref
    rewards: torch.Tensor | None = None  # per token: -kl_coef x KL, plus R + b at the last
    advantages: torch.Tensor | None = None
    old_values: torch.Tensor | None = None  # --advantage gae: V(s) when sampled
    returns: torch.Tensor | None = None  # --advantage gae: A + V


def kl_shaped_rewards(logprobs: torch.Tensor, ref_logprobs: torch.Tensor,
                      response_mask: torch.Tensor, final_reward: torch.Tensor, kl_coef: float):
    """Per-token rewards of one (turn, agent) (Sec. 3.2, r_θ): -kl_coef · KL at every valid token,
    plus the final R + b at the last one. Returns (rewards, kl) [B, L], 0 on padding."""
    kl = (logprobs - ref_logprobs) * response_mask  # log π - log π_ref: Schulman's k1, unbiased
    rewards = -kl_coef * kl
    last = (response_mask.sum(dim=1).long() - 1).clamp(min=0)  # the mask is a contiguous prefix
    rewards[torch.arange(rewards.shape[0]), last] += final_reward.to(rewards.dtype)
    return rewards, kl


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float):
    """Generalised advantage estimation (Schulman et al. 2016, eq. 16) within each response:
    δ_t = r_t + γ V(s_{t+1}) - V(s_t), A_t = Σ_l (γλ)^l δ_{t+l}; V = 0 after the last valid token.
    [B, L] each, mask a contiguous valid prefix. Returns (advantages, returns = A + V)."""
    values = values * mask
    deltas = rewards + gamma * F.pad(values[:, 1:], (0, 1)) - values  # every δ_t at once
    next_valid = F.pad(mask[:, 1:], (0, 1))
    advantages = torch.zeros_like(rewards)
    last_gae = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        last_gae = deltas[:, t] + gamma * lam * next_valid[:, t] * last_gae
        advantages[:, t] = last_gae
    advantages = advantages * mask
    return advantages, advantages + values


def group_advantages(rewards: torch.Tensor, group_size: int, std: bool = False):
    """--advantage group: A_i = R_i - mean_j R_j over the K debates of one question (rows q*K ..
    q*K+K-1; (K-1)/K of RLOO's), one baseline per question at every turn, not MAGRPO's per node
    (Eq. 1); 0 in a group of ties. std (--advantage-std; Dr. GRPO has none): over the rows' std."""
    grouped = rewards.reshape(-1, group_size)
    ties = grouped.amax(dim=1, keepdim=True) == grouped.amin(dim=1, keepdim=True)
    adv = (grouped - grouped.mean(dim=1, keepdim=True)).masked_fill(ties, 0.0).reshape(-1)
    return masked_whiten(adv, torch.ones_like(adv)) if std else adv


def forward_pairs(team: Team, exp: dict, rows: torch.Tensor, args: Args, adapter: str | None = None,
                  chunk: int = 0, plain: bool = False, **outputs) -> dict:
    """forward_responses over the chosen rows (debates) of every trained (turn, agent), each on its
    own policy adapter or all on `adapter` ('__base__': the reference; 'critic'), `chunk` rows per
    forward: {(t, a): logprobs, entropy, hidden (None unless asked)}; --fast: conversation.py's."""
    if args.fast and not plain:
        def loop(part):
            return forward_pairs(team, exp, part, args, adapter, chunk, plain=True, **outputs)
        return conversation_forward(team, exp, rows, adapter, chunk, forward_conversation, loop,
                                    temperature=args.temperature, **outputs)
    out = {}
    for (t, a), e in exp.items():
        model, name = team.bases[team.agent_base[a]], adapter or team.adapter_names[t][a]
        pieces = [forward_responses(model, *(getattr(e, k)[part] for k in RESPONSE_KEYS),
                                    [name] * len(part), args.temperature, **outputs)
                  for part in rows.split(chunk or len(rows))]
        out[(t, a)] = {k: None if v is None else torch.cat([p[k] for p in pieces])
                       for k, v in pieces[0].items()}
    return out


@torch.no_grad()
def make_experience(team: Team, debate: Debate, final_rewards: torch.Tensor, args: Args) -> dict:
    """{(t, a): Experience} for every trained (turn, agent); final_rewards [B, T, A] = R + b."""
    exp = {key: Experience(**{k: debate.rollout[key][k] for k in (*RESPONSE_KEYS, "as_sampled")})
           for key in team.trained}
    rows = torch.arange(len(debate.records))  # every debate
    # 4. the reference: the same rows on the base alone
    ref = forward_pairs(team, exp, rows, args, "__base__", args.forward_batch_size)
    # π_old: as sampled in fp32; below fp32 a forward in the update's shapes (TRL's, the authors')
    below_fp32 = (args.dtype, args.quant) != ("float32", "none")
    recompute = args.old_logprobs == "recompute" or (args.old_logprobs == "auto" and below_fp32)
    old = debate.rollout if not recompute else forward_pairs(
        team, exp, rows, args, None, args.micro_batch_questions, output_entropy=True,
        output_hidden=args.advantage == "gae")
    values = (critic_values(forward_pairs, team, exp, rows, args, old if recompute else None,
                            args.forward_batch_size) if args.advantage == "gae" else None)
    for (t, a), e in exp.items():
        mask = e.response_mask
        final = final_rewards[:, t, a].to(mask.device)
        rewards, kl = kl_shaped_rewards(old[(t, a)]["logprobs"], ref[(t, a)]["logprobs"], mask,
                                        final, args.kl_coef)  # 5. the per-token rewards
        if values is not None:  # GAE within each response, whitened over this (turn, agent)
            advantages, returns = gae(rewards, values[(t, a)], mask, GAE_GAMMA, args.gae_lambda)
            e.old_values, e.returns = values[(t, a)], returns
            e.advantages = masked_whiten(advantages, mask)
        else:  # group: R + b against its question's K debates, plus the summed KL's (r_θ)
            penalty = group_advantages(-args.kl_coef * kl.sum(dim=1), args.samples_per_question)
            advantages = group_advantages(final, args.samples_per_question, args.advantage_std)
            e.advantages = (advantages + penalty)[:, None] * mask  # --advantage-std: R + b's only
        e.old_logprobs, e.entropy = old[(t, a)]["logprobs"], old[(t, a)]["entropy"]
        e.ref_logprobs, e.kl, e.rewards = ref[(t, a)]["logprobs"], kl, rewards
    return exp


# 6. PPO (Sec. 3.2): the clipped surrogate, the value loss, the update -----------------------------


def token_mean(per_token: torch.Tensor, response_mask: torch.Tensor, num_tokens: torch.Tensor):
    """LOSS NORMALISATION, the one place: a micro-batch's token SUM over num_tokens, this (turn,
    agent)'s tokens in the whole MINIBATCH (all ranks): the micro-batch losses sum to its mean."""
    return (per_token * response_mask).sum() / num_tokens


def policy_loss(new_logprobs, old_logprobs, advantages, mask, num_tokens, cliprange):
    """PPO's clipped surrogate (Sec. 3.2, L_Surrogate) as a loss: max(-A·ρ, -A·clip(ρ, 1-ε, 1+ε))
    per token, ρ = π_new / π_old. Returns (loss, stats as token sums and a max)."""
    logratio = (new_logprobs - old_logprobs) * mask
    ratio = torch.exp(logratio)
    pg_losses = -advantages * ratio
    pg_losses_clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    pg_loss_per_token = torch.max(pg_losses, pg_losses_clipped)
    with torch.no_grad():
        stats = dict(tokens=mask.sum(), pg_loss=(pg_loss_per_token * mask).sum(),
                     approxkl=(0.5 * logratio ** 2 * mask).sum(), ratio=(ratio * mask).sum(),
                     clipfrac=((pg_losses_clipped > pg_losses).float() * mask).sum(),
                     max_abs_logratio=logratio.abs().max())
    return token_mean(pg_loss_per_token, mask, num_tokens), stats


def value_loss(new_values, old_values, returns, mask, num_tokens, cliprange: float):
    """Clipped value loss (Sec. 3.2, L_Value; TRL's form): 0.5 · max((V - G)², (clip(V, V_old ± ε)
    - G)²) per token, G = the GAE returns. Returns (loss, stats)."""
    values_clipped = old_values + torch.clamp(new_values - old_values, -cliprange, cliprange)
    vf_losses = (new_values - returns) ** 2
    vf_losses_clipped = (values_clipped - returns) ** 2
    vf_loss_per_token = 0.5 * torch.max(vf_losses, vf_losses_clipped)
    with torch.no_grad():
        stats = dict(vf_loss=(vf_loss_per_token * mask).sum(),
                     vf_clipfrac=((vf_losses_clipped > vf_losses).float() * mask).sum())
    return token_mean(vf_loss_per_token, mask, num_tokens), stats


def ppo_loss(team: Team, exp: dict, rows: torch.Tensor, num_tokens: dict, stats: dict,
             args: Args):
    """The loss of these rows at every trained (turn, agent), each pair on its own adapter: the sum
    of the clipped surrogates and, with --advantage gae, vf_coef x the value losses."""
    out = forward_pairs(team, exp, rows, args, output_hidden=args.advantage == "gae")  # for V(s)
    values = (critic_values(forward_pairs, team, exp, rows, args, out)  # on these states
              if args.advantage == "gae" else None)  # (or the critic adapter's)
    loss = 0.0
    for key, e in exp.items():
        mask = e.response_mask[rows]
        pg_loss, s = policy_loss(out[key]["logprobs"], e.old_logprobs[rows], e.advantages[rows],
                                 mask, num_tokens[key], args.cliprange)
        loss = loss + pg_loss
        if values is not None:
            vf_loss, vs = value_loss(values[key], e.old_values[rows], e.returns[rows], mask,
                                     num_tokens[key], args.cliprange)
            loss = loss + args.vf_coef * vf_loss
            s = {**s, **vs}
        stats[key].append(s)
    return loss


def ppo_update(team: Team, exp: dict, args: Args, shuffle_seed: int = 0) -> dict:
    """--ppo-epochs passes of shuffled minibatches (CleanRL's loop): a forward and backward per
    micro-batch of debates (ppo_loss), then each optimiser clips and steps once per minibatch.
    Multi-process: question g and its K debates sit on rank g % world; the losses are divided by the
    minibatch's GLOBAL token count and the gradients summed: the step equals one process's."""
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    n_global = len(next(iter(exp.values())).response_mask) * world
    mb_size = args.minibatch_questions or n_global
    micro = min(args.micro_batch_questions or mb_size, mb_size)
    params = {name: [p for g in opt.param_groups for p in g["params"]]
              for name, opt in team.optimizers.items()}
    shuffle = torch.Generator().manual_seed(shuffle_seed)  # the same order on every rank
    stats = dict({key: [] for key in exp}, skipped=0,
                 **{f"grad_norm/{name}": [] for name in team.optimizers})
    for epoch in range(args.ppo_epochs):
        perm = torch.randperm(n_global, generator=shuffle)
        for minibatch in perm.split(mb_size):
            if world > 1:  # multi-process: this rank's debates of the minibatch
                minibatch = rank_rows(minibatch, args.samples_per_question)
            counts = torch.stack([e.response_mask[minibatch].sum() for e in exp.values()])
            num_tokens = dict(zip(exp, allreduce_sum(counts) if world > 1 else counts))  # global
            mb_stats = {key: [] for key in exp}
            for opt in team.optimizers.values():
                opt.zero_grad(set_to_none=True)
            for m_start in range(0, len(minibatch), micro):
                rows = minibatch[m_start:m_start + micro]  # these debates, every (turn, agent)
                ppo_loss(team, exp, rows, num_tokens, mb_stats, args).backward()
            if world > 1:  # summed: a non-finite loss on one rank makes every rank skip the step
                allreduce_gradients([p for group in params.values() for p in group])
            norms = {name: float(torch.nn.utils.clip_grad_norm_(group, args.max_grad_norm))
                     for name, group in params.items()}
            if not all(math.isfinite(v) for v in norms.values()):
                warnings.warn(f"non-finite PPO loss or gradient in epoch {epoch}: step skipped")
                stats["skipped"] += 1
                continue
            for name, opt in team.optimizers.items():
                stats[f"grad_norm/{name}"].append(norms[name])
                opt.step()
            add_minibatch_stats(stats, mb_stats)  # token sums per minibatch and (turn, agent)
    return stats


def learning_rate(args: Args, step: int) -> float:
    """Linear decay from lr to lr * LR_END_FACTOR over --lr-decay-steps, then constant."""
    decay = args.lr_decay_steps or args.max_steps
    return args.lr * (1.0 - (1.0 - LR_END_FACTOR) * min(step, decay) / max(1, decay))


# 7. Held-out evaluation; the stages of one update; main ------------------------------------------


@torch.no_grad()
def evaluate_team(team: Team, args: Args, records: list[dict], scorer) -> dict:
    """The team debates the held-out questions greedily: per-turn metrics (Sec. 4.1), controls."""
    t0 = eval_started(args, records)
    play = functools.partial(run_debate, fast=args.fast, logprobs=False)  # the controls' too
    debate = play(records, team.models(), team.agent_tokenizers(), team.adapter_names,
                  args.max_new_tokens, greedy=True, prompt_style=args.prompt_style,
                  scorer=scorer if args.feedback_in_prompt else None,
                  feedback_in_prompt=args.feedback_in_prompt,
                  generate_batch_size=args.generate_batch_size)
    numbers = debate_metrics(debate.answers, [r["answer"] for r in records])
    controls = split_controls(play, team, args, records, debate)  # arith:split only
    return dict(eval_metrics(numbers), **controls,
                **eval_controls(play, team, args, records, debate, t0))


def rollout_step(team: Team, args: Args, records: list[dict], scorer,
                 builtin_rules: bool = True) -> tuple[dict, dict, dict]:
    """Stages 1-5 of one update: (debate, exp, dict(scores, penalized, rewards, bonus) [B, T, A]).
    builtin_rules=False (your scorer without --reward-fn-rules): no penalties, no incentives."""
    # 1. play the debate: all agents of a turn in one generate call, each row on its own adapter
    debate = run_debate(records, team.models(), team.agent_tokenizers(), team.adapter_names,
                        args.max_new_tokens, temperature=args.temperature, scorer=scorer,
                        feedback_in_prompt=args.feedback_in_prompt, prompt_style=args.prompt_style,
                        generate_batch_size=args.generate_batch_size, fast=args.fast)
    # 2. score the answers; penalise a bad format and a missing EOS
    scores = debate.scores
    good = torch.zeros_like(scores, dtype=torch.bool)
    truncated = torch.zeros_like(scores, dtype=torch.bool)
    tokenizers = team.agent_tokenizers()
    for (t, a), ro in debate.rollout.items():  # turn t's agent a: generate()'s tensors
        truncated[:, t, a] = ro["truncated"].cpu()
        for b in range(len(records)):
            ids = ro["response_ids"][b][ro["response_mask"][b].bool()].tolist()
            good[b, t, a] = format_ok(debate.answers[b][t][a], ids, args.min_response_tokens,
                                      decode=tokenizers[a].decode)
    penalized = apply_penalties(scores, good, truncated, args.format_penalty if args.penalize_format
                                else None, args.missing_eos_penalty)
    # 3. influence-aware reward (Definition 1) + incentives (Tables 1-2, on 0/1 correctness)
    bonus = incentive_bonus(debate.correct, *map(float, args.incentives.split(",")))  # α0,α1,β0,β1
    if not builtin_rules:  # your scorer without --reward-fn-rules: its scores alone
        penalized = scores.clone()
        bonus = torch.zeros_like(scores)
    rewards = turn_rewards(penalized, args.reward_rule, args.influence_gamma) + bonus
    # 4-5. reference log-probs and values; KL-shaped per-token rewards; advantages
    exp = make_experience(team, debate, rewards, args)
    return debate, exp, dict(scores=scores, penalized=penalized, rewards=rewards, bonus=bonus)


def make_scorer(args: Args, device: str, team: Team | None = None, score_fn=None):
    """fn(records, responses) -> scores in [0, 1]: yours (--reward-fn or score_fn), a trained
    verifier's probability (--scorer verifier, train_verifier.py), or 0/1 correctness."""
    if score_fn is not None:
        return custom_scorer(score_fn, "--reward-fn" if args.reward_fn else "score_fn")
    if args.scorer == "verifier":
        return verifier_scorer(args, device, team)
    return lambda records, responses: torch.tensor([  # 1: a parsable answer equal to the gold one
        float(extract_answer(text, r["task"]) == r["answer"])
        for r, text in zip(records, responses)])


def main(args: Args, score_fn=None) -> Path:
    """Train; returns the run folder. score_fn(records, responses) -> scores in [0, 1] is
    --reward-fn from Python (the penalties and incentives then apply with --reward-fn-rules)."""
    args, score_fn = settle_args(args, score_fn)  # --resume, every refusal, --reward-fn
    args.lr_decay_steps = args.lr_decay_steps or args.max_steps  # saved: a longer resume keeps it
    size_micro_batches(args, "micro_batch_questions", args.num_agents,  # CUDA only, unless typed
                       256 + args.num_turns * args.num_agents * args.max_new_tokens)
    rank, world, device = init_distributed(args.device)  # multi-process: torchrun's process group
    print(set_torch_threads(args.threads))
    records = load_task(args.dataset, "train", seed=args.seed, skip_bad_rows=args.skip_bad_rows,
                        **dataset_options(args))
    if args.scorer == "verifier":  # never the questions the verifier trained or was measured on
        records = rl_records(args, records)
    eval_records = check_questions(args, records, world)  # held out: never trained on
    run_dir = start_run(args, "cotrain")
    team = build_team(args, device)  # seeded with --seed: the same adapters on every rank
    seed_sampling_per_rank(args.seed)  # multi-process: every rank samples different responses
    scorer = make_scorer(args, device, team, score_fn)
    start = load_state(run_dir, team) if args.resume else 0
    if args.use_vllm:  # rollouts on vLLM; it reloads an adapter whenever its weights change
        vllm_rollout.start(team.bases[0], [n for n in team.base_adapters[0] if n != "critic"])
    print(f"{args.dataset}: adapters {team.adapter_names} on {team.base_names} from update {start}")
    if start == 0 and eval_due(args, 0):  # 7. the untrained team on the held-out questions
        log_metrics(run_dir, dict(step=0, **evaluate_team(team, args, eval_records, scorer)))
    bar = tqdm(range(start, args.max_steps), initial=start, total=args.max_steps, desc="cotrain",
               disable=rank > 0)
    for step in bar:
        lr = learning_rate(args, step)
        for group in (g for opt in team.optimizers.values() for g in opt.param_groups):
            group["lr"] = lr
        batch = [records[i] for i in step_indices(len(records), args.questions_per_update, step,
                                                  f"cotrain-{args.seed}", drop_last=True)]
        batch = batch[rank::world]  # multi-process: global question g on rank g % world
        batch = [r for r in batch for _ in range(args.samples_per_question)]  # K debates, in a row
        t0 = time.time()
        rules = score_fn is None or args.reward_fn_rules  # the built-in penalties and incentives
        debate, exp, r = rollout_step(team, args, batch, scorer, rules)
        t1 = time.time()
        stop_if_kl_exceeds(run_dir, team, step, exp, args)
        stats = ppo_update(team, exp, args, shuffle_seed=1_000_003 * args.seed + step)  # 6. PPO
        metrics = dict(step=step + 1, lr=lr, **rollout_metrics(debate, **r),
                       **ppo_metrics(exp, stats, args.num_agents), **{
                           "timing/generate_s": debate.generate_s, "timing/rollout_s": t1 - t0,
                           "timing/update_s": time.time() - t1, "timing/step_s": time.time() - t0})
        if eval_due(args, step + 1):  # 7. the team after this update on the held-out questions
            metrics.update(evaluate_team(team, args, eval_records, scorer))
        log_update(run_dir, metrics, stats, debate, r, args, bar)
        if (args.save_every and (step + 1) % args.save_every == 0) or step + 1 == args.max_steps:
            save_state(run_dir, team, step + 1, args)
    finish_run(run_dir, args)
    return run_dir


if __name__ == "__main__":
    with clean_exits("--dataset"):  # Ctrl-C / SIGTERM: finish the write in progress, then exit
        main(parse_args(Args))
