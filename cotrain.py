"""cotrain.py: MAPoRL, multi-agent post-co-training of LLMs with PPO on a collaborative debate.

Paper: Park et al., "MAPoRL: Multi-Agent Post-Co-Training for Collaborative Large Language Models with
Reinforcement Learning", arXiv 2502.18439 (ACL 2025). Spec: shared/spec/maporl.md.

A agents debate each question for T turns (Du et al. 2024). At turn 1 every agent answers alone; at turn t > 1
every agent sees the question, its own earlier answers and the other agents' answers from turn t-1, and answers
again. Every answer is scored (a learned verifier's probability, or 0/1 ground-truth correctness). The scores
become influence-aware rewards (paper Definition 1) plus collaboration incentives (paper Tables 1 and 2), and
every agent is trained with its own PPO, all at once, on one frozen base model:

    agent a's policy  = its own LoRA adapter            (--policy-sharing agent | agent-turn | shared)
    the critic        = --advantage gae only (a group run has none): one zero-initialised value head per turn (or
                        turn and agent) on the policy adapter's own last hidden states (--value-model shared), or on a
                        LoRA adapter 'critic' (separate, the paper)
    the reference     = the same base with every adapter disabled (no second copy in memory)

One update (the numbered stages in main()):
    1. play the debate on B questions, K times each (--samples-per-question); all agents of a turn are
       generated in ONE batched call, each row on its own adapter (common.generate)
    2. score every answer; a bad format (no parsable final answer, common.is_well_formed; too short; degenerate
       repetition) is replaced by --format-penalty, a response cut at --max-new-tokens gets --missing-eos-penalty
       on top (your own scorer, --reward-fn: no penalties and no incentives unless --reward-fn-rules)
    3. influence-aware reward R[t, a] (Definition 1) + incentive bonus b[t, a] (Tables 1 and 2)
    4. reference log-probs (and with --advantage gae values), without gradients, from ONE mixed-adapter pass; the
       old log-probs and entropies are those the debate was sampled with (--old-logprobs recompute: from the pass).
       Here and in stage 6 one forward per agent and debate covers its whole conversation: the last turn's prompt
       holds the earlier turns' prompts and responses, so that forward gives their log-probs too
       (--conversation-forward, checked token for token every update; otherwise one forward per turn)
    5. per-token rewards: -kl_coef * KL at every token, plus R + b at the last token; then --advantage group (the
       default): a response's summed reward less the mean of its question's K responses at that (turn, agent), on
       every token; or gae (the paper): GAE (γ=1, λ=0.95) on the value heads within each response, advantages
       whitened per (turn, agent)
    6. PPO: --ppo-epochs x shuffled minibatches x micro-batches (gradient accumulation); the losses of all
       (turn, agent) pairs are summed and every optimiser (one per policy adapter; with --advantage gae one more
       for the heads (shared) or the critic + heads (separate)) steps once per minibatch. Group: one forward +
       backward per micro-batch gives the policy loss; gae shared: the same one gives the policy and the value
       loss; gae separate: a second one on the critic adapter
    7. (and 0., before the first update) the team debates the held-out questions greedily: eval/turn{t}/accuracy
       and the transitions in metrics.jsonl, every --eval-every updates and after the last (evaluate_team)

What this script changes relative to the paper and the authors' code (chanwoo-park-official/MAPoRL), and why:
  * Incentives follow the paper's Tables 1 and 2. The authors' code swaps two α indices and flips all four β
    signs (spec decision a); see incentive_bonus().
  * Generation stops at EOS (the code always generates 300 tokens), and one temperature is used for sampling
    and for every log-prob recomputation (the code samples at a per-model temperature, recomputes at 0.7).
  * The verifier is called in-process (the code POSTs to a Flask server); ground truth is the default scorer.
  * Responses enter the discussion as generated; the code first rewrites them into "Answer: \\boxed{X}" form.
  * The default CPU run differs from the paper in three choices (README "Results", C3-C7): a task within a 135M
    model's reach (arith:digits: SmolLM2-135M knows one-digit sums, but answers before computing on many
    questions; on arith:easy its errors are arithmetic, which no configuration tried could train away), a
    per-question baseline over K = 4 debates of each question (--advantage group, as RLOO/GRPO) instead of GAE
    on value heads that never fitted at this scale (explained variance about 0), and the score evaluation counts
    (right 1, wrong or unparsable 0: --format-penalty 0 --missing-eos-penalty 0) instead of -10 / -1 (at -1 the
    agents learned to answer first and compute never). The paper's: --advantage gae --samples-per-question 1
    --format-penalty -10 --missing-eos-penalty -1 (the recipes/ spell it).
  * With --advantage gae, by default the value heads read the policy adapter's own hidden states (--value-model
    shared, a shared trunk as in TRL's classic PPO): about half the update's compute, but the value loss also
    trains the policy adapter (see ppo_update). --value-model separate is the paper's critic: one critic LoRA
    for all turns with a value head per turn (the code: a critic LoRA per turn), seeing the whole discussion
    like the policy; --no-critic-history is the code's shortcut (turn-1 question + response only).
  * PPO's π_old is the log-probs generate() sampled each token with (--old-logprobs sampling: the behaviour
    policy itself, no forward of its own; on SmolLM2 in fp32 a mean gap of ~1e-6 per token to a full forward, the
    gap magrpo.py logs as logprob_gap); the code, like TRL, recomputes
    them with a forward after the rollout (--old-logprobs recompute).
  * Turns left out of --train-turns are played by the base model, like the code's zeroed, frozen turn-0
    adapter (the paper's Experiment 1 trains turns >= 2 only: --train-turns 2,3).
  * The summed (turn, agent) losses step each optimiser once per minibatch; the code steps inside its loop
    over turns and agents.
  * Format penalty: the code requires >= 50 tokens; our default is 10 because the default CPU run allows only
    48 new tokens (set --min-response-tokens 50 at paper scale).
  * ANLI's turn-1 prompt also asks for \\boxed{label}, so the same format check applies to both tasks.
  * The paper's α/β values are not known; the defaults (0.5, 0.5, 0.3, 0.3) are those of one external run of the
    authors' code (spec §5.5).

Multi-process training (torchrun; gloo on CPU, NCCL with one GPU per process): --questions-per-update is the GLOBAL
batch, each of the N processes plays every N-th question of it, samples with its own seed (the adapters and heads
start identical), normalises advantages and losses by counts summed over all processes, and sums the LoRA/head
gradients before clipping and stepping. The sum is an explicit all-reduce after gradient accumulation: DDP's
per-backward hooks fit badly with several forwards, adapters and optimisers per step and with a process that holds
no question of a minibatch. N processes x B/N questions make the same update as one process with B questions. Only
rank 0 prints, logs (metrics of its own questions) and writes checkpoints. "multi-process:" comments mark the lines.

Examples:
  python cotrain.py --model tiny --max-steps 3 --max-new-tokens 16   # a smoke run, about a minute on CPU
  # the default (tuned for SmolLM2-135M on a CPU; its time: README "Results"): 2 agents x 2 turns, arith:digits,
  # the short prompt, T 0.3, lr 2e-4, 2 questions x 4 debates x 10 updates, group baseline, 2 PPO epochs,
  # 48 new tokens, 0/1 correctness, 40 held-out questions
  python cotrain.py
  # one GPU, paper scale: the paper's prompt, PPO settings and critic must be spelled out (or use
  # --config recipes/maporl-gsm8k-phi3.yaml)
  python cotrain.py --model microsoft/Phi-3-mini-128k-instruct --quant 4bit --dtype bfloat16 --prompt-style phi3 \\
      --dataset gsm8k --train-limit 0 --num-agents 2 --num-turns 3 --max-new-tokens 300 --min-response-tokens 50 \\
      --questions-per-update 32 --minibatch-questions 4 --micro-batch-questions 1 --forward-batch-size 16 \\
      --max-steps 200 --temperature 0.7 --lr 1e-5 --ppo-epochs 4 --value-model separate \\
      --advantage gae --samples-per-question 1 --format-penalty -10 --missing-eos-penalty -1 \\
      --scorer verifier --verifier runs/verifier-RUN
  torchrun --standalone --nproc_per_node 2 cotrain.py --model tiny --max-steps 3 --questions-per-update 4  # 2 CPU processes
  python cotrain.py --reward-fn examples/my_reward.py:correct_and_brief \\
      --dataset data.csv --question-field problem --answer-field solution   # your scorer, your data
"""
from __future__ import annotations

import json
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn as nn
from tqdm import tqdm

from common import SHORT_DISCUSSION, ValueHead, adapter_parameters, add_adapters, allreduce_sum, arg_error, chat_prompt, debate_metrics, explained_variance, extract_answer, first_used_column, forward_responses, gae, generate, hidden_size, is_well_formed, kl_k1, load_model, majority_vote_accuracy, masked_whiten, turn1_prompt, used_width
from nanomarl.cli import check_numbers, load_function, parse_args, parse_int_list
from nanomarl.distributed import allreduce_gradients, finish_distributed, init_distributed, is_main_process, seed_everything, seed_sampling_per_rank, world_info
from nanomarl.models import adapter_state_dict, check_model_name, load_adapter_state_dict, load_tokenizer, save_adapters
from nanomarl.runs import all_rng_states, atomic_write_text, clean_exits, finish_writes_first, format_metrics, load_checkpoint, log_metrics, log_samples, print_eval_table, restore_rng_state, resumed_args, save_checkpoint, set_torch_threads, start_run
from nanomarl.tasks.debate import dataset_options, load_task, step_indices
from nanomarl.trackers import finish_tracker, plot_run


@dataclass
class Args:
    # old flag -> its new name: the old one still works, with a note, until the next release (README "Flags")
    renamed = {"updates": "max_steps", "lr_decay_updates": "lr_decay_steps", "run_dir": "output_dir"}
    # ---- run ----
    seed: int = 0  # random seed (questions, sampling, initialisation)
    output_dir: str = ""  # the run folder (default: runs/cotrain-<time>-s<seed>)
    resume: str = ""  # continue the run in this folder from its checkpoint.pt with its saved settings; the flags you type override them (e.g. --max-steps 10); the model(s), agents, turns, adapters and dataset cannot change
    device: str = ""  # cpu or cuda (default: cuda when available; under torchrun each process takes its own GPU)
    threads: int = 0  # torch CPU threads; 0 = OMP_NUM_THREADS if set, else the cores the load average leaves free
    # ---- models and adapters ----
    model: str = "smollm2-135m"  # base model of every agent: hub id, local path, smollm2-135m or tiny
    models: str = ""  # heterogeneous agents: one base per agent, comma-separated (overrides --model; each distinct base is loaded once)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # weights and compute dtype of the base
    quant: Literal["none", "4bit", "8bit"] = "none"  # 4bit: QLoRA, as the paper
    lora_r: int = 8  # LoRA rank (authors: 8)
    lora_alpha: int = 16  # LoRA alpha (authors: 16); LoRA on all linear layers, dropout 0
    policy_sharing: Literal["agent", "agent-turn", "shared"] = "agent"  # agent: one LoRA per agent | agent-turn: one per (turn, agent), the paper's θ_ta | shared: one for all agents of a base
    value_model: Literal["shared", "separate"] = "shared"  # shared: the value heads read the policy adapter's own hidden states (one forward+backward per PPO micro-batch, TRL's classic value-head model) | separate: a critic LoRA adapter of its own, as the paper (a second forward+backward)
    old_logprobs: Literal["sampling", "recompute"] = "sampling"  # PPO's π_old: sampling: the log-probs generate() sampled each token with (the behaviour policy itself; no forward of its own; in fp32 within 1e-5 of a recompute on the tiny model, tests/test_perf_update.py) | recompute: a no-grad forward of every response after the rollout (TRL's way; ratio 1 to < 1e-5 on the first minibatch in fp32)
    conversation_forward: bool = True  # one forward per agent and debate over its last trained turn also gives its earlier turns' log-probs (that prompt holds their prompts and responses, token for token: checked every update, else one forward per turn as --no-conversation-forward); not with --value-model separate
    critic_per_agent: bool = False  # one value head per (turn, agent) instead of one per turn
    critic_history: bool = True  # --value-model separate: the critic sees the whole discussion; --no-critic-history: turn-1 question + response only (authors' shortcut)
    # ---- debate ----
    dataset: str = "arith:digits"  # arith:digits (built-in, offline, one-step sums of one-digit numbers: the CPU default), arith:easy (numbers up to 20), arith (+ products, two steps), gsm8k, anli[:r1|r2|r3], jsonl:PATH, a hub id (owner/name) or a local .json/.jsonl/.csv/.parquet file or folder
    dataset_split: str = "train"  # the split to train on (a single local file is the split 'train')
    dataset_config: str = ""  # hub id only: the dataset's configuration (e.g. main for openai/gsm8k)
    question_field: str = "question"  # hub id or local file: the column holding the question
    answer_field: str = "answer"  # hub id or local file: the column holding the gold answer
    dataset_task: Literal["math", "nli"] = "math"  # hub id or local file: math (the answer's last number, e.g. GSM8K's '#### 72') or nli (entailment/neutral/contradiction or 0/1/2)
    train_limit: int = 1000  # use the first N training questions (0 = all)
    skip_bad_rows: bool = False  # skip malformed dataset rows instead of stopping
    num_agents: int = 2  # A, agents in the debate
    num_turns: int = 2  # T, turns of the debate (the paper trains with 3)
    train_turns: str = ""  # turns to train, 1-based and comma-separated (default: all); the others are played by the base model
    prompt_style: Literal["short", "default", "phi3"] = "short"  # the prompts: short (ours, one line, for small models) or the authors' verbatim: default (their Qwen2.5 one) or phi3
    feedback_in_prompt: bool = False  # show each agent the scores of its own and the others' previous answers (authors' reward_feedback)
    max_new_tokens: int = 48  # response length limit (authors: 300; the short prompt's answers take ~35 tokens)
    temperature: float = 0.3  # sampling temperature, also used for every log-prob recomputation (authors: 0.7; at 0.7 SmolLM2-135M samples almost nothing right)
    generate_batch_size: int = 0  # rows per generate call (0: all agents x questions of a turn in one call)
    forward_batch_size: int = 8  # rows per no-grad forward (old/reference log-probs, values)
    # ---- scores, penalties, rewards ----
    scorer: Literal["ground-truth", "verifier"] = "ground-truth"  # ground-truth (0/1 correctness) or verifier (a train_verifier.py checkpoint, with --verifier)
    verifier: str = ""  # path of a train_verifier.py checkpoint (needs --scorer verifier)
    verifier_batch_size: int = 8  # answers per verifier forward
    reward_fn: str = ""  # your own scorer MODULE:FUNCTION (a .py path or a dotted module), fn(records, responses) -> scores in [0, 1]; replaces --scorer (see examples/my_reward.py)
    reward_fn_rules: bool = False  # with --reward-fn: also apply the format and missing-EOS penalties and the incentives (Tables 1-2); off: your scores alone make the reward
    penalize_format: bool = True  # replace the score by --format-penalty for no parsable final answer (common.is_well_formed), a too-short response or degenerate repetition
    format_penalty: float = 0.0  # the bad-format score (authors: -10; 0: an unparsable answer scores as a wrong one, as evaluation counts it; at -1 SmolLM2 learned to answer first and compute never, README "Results" C5)
    min_response_tokens: int = 10  # shorter responses count as bad format (authors: 50 with 300-token responses)
    missing_eos_penalty: float = 0.0  # added to the score of a response cut at --max-new-tokens (authors: -1; 0: off, as evaluation, which reads a cut answer)
    reward_rule: Literal["influence", "current", "final-mean"] = "influence"  # influence (Definition 1), current (own score only) or final-mean (mean score of the last turn)
    influence_gamma: float = 0.3  # γ of the influence-aware reward (authors: 0.3)
    alpha0: float = 0.5  # Table 1: W->R against a wrong majority (+), R->W with a wrong majority (-)
    alpha1: float = 0.5  # Table 1: W->R with a right majority (+), R->W against a right majority (-)
    beta0: float = 0.3  # Table 2: own answer wrong and the others' majority goes W->R (+) or R->W (-)
    beta1: float = 0.3  # Table 2: own answer right and the others' majority goes W->R (+) or R->W (-)
    # ---- PPO ----
    max_steps: int = 10  # training steps (TRL PPO's): each one PPO update, a rollout of --questions-per-update questions and --ppo-epochs passes over it
    questions_per_update: int = 2  # B, questions per rollout, each giving A x T responses (authors: 256 over 8 GPUs); under torchrun the global batch, split across the processes
    samples_per_question: int = 4  # K, debates sampled per question in a rollout: B x K debates (--advantage group compares the K; authors: 1)
    advantage: Literal["group", "gae"] = "group"  # gae: GAE on the value heads' estimates, whitened per (turn, agent) (the paper's PPO) | group: a response's reward less the mean over the K debates of its question, on every token (a per-question baseline as RLOO/GRPO; no value heads; needs K >= 2)
    minibatch_questions: int = 0  # debates (questions x K) per optimiser step, over all processes (0: all B x K, one step per epoch)
    micro_batch_questions: int = 1  # debates per forward/backward inside a minibatch, per process (gradient accumulation; authors: 1)
    ppo_epochs: int = 2  # passes over each rollout (authors: 4)
    lr: float = 2e-4  # AdamW learning rate of every adapter and head (authors: 1e-5, with 256 questions per update; LoRA on a 135M model with 10 small updates needs ~20x more)
    lr_end_factor: float = 0.1  # linear decay from lr to lr * this over --lr-decay-steps (authors: 0.1)
    lr_decay_steps: int = 0  # steps the decay lasts (0: --max-steps). Saved with the run, so a --resume with a larger --max-steps keeps the schedule: the lr continues where it was and stays at lr * lr_end_factor for the added steps (give --lr-decay-steps again to re-plan)
    weight_decay: float = 0.01  # AdamW weight decay (torch default, as the authors)
    max_grad_norm: float = 1.0  # clip each optimiser's global gradient norm to this
    kl_coef: float = 0.002  # per-token KL penalty to the reference (authors: 0.002)
    cliprange: float = 0.2  # PPO ratio clip ε
    cliprange_value: float = 0.2  # value clip around the old values
    vf_coef: float = 0.1  # weight of the value loss
    gae_gamma: float = 1.0  # GAE discount within a response
    gae_lambda: float = 0.95  # GAE λ
    max_kl: float = 50.0  # stop (checkpoint kept) when an agent's mean per-response KL to the reference exceeds this (nats)
    # ---- logging ----
    log_every: int = 1  # print a one-line summary every N updates (metrics.jsonl gets every update)
    sample_every: int = 2  # print one sample debate every N updates and append every debate of that update to samples.jsonl (0: never)
    report_to: Literal["none", "wandb", "trackio", "tensorboard"] = "none"  # also send metrics.jsonl's rows to this tracker (an optional install; wandb runs offline, tensorboard writes RUN/tensorboard)
    save_every: int = 2  # write checkpoint.pt and the adapters every N updates (and at the end)
    # ---- held-out evaluation inside training ----
    eval_questions: int = 40  # held-out questions the team debates greedily before the first update, every --eval-every updates and at the end (0: off)
    eval_every: int = 0  # also evaluate every N updates (0: only before the first update and at the end)
    eval_split: str = "test"  # the dataset split of the held-out questions (must share no question with the training split)


# ----------------------------------------------------------------------------------------------
# Prompts (spec §1.3): the authors' turn-1 instruction and discussion template
# ----------------------------------------------------------------------------------------------

DISCUSSION_INSTRUCTION = (
    "Focus on providing a well-reasoned response that not only considers your own previous solution but also takes "
    "into account answers from other agents. If you believe your previous answer was incorrect, feel free to revise "
    "it. However, avoid repeating the same answer you or other agents have already provided. {reward_sentence}Ensure "
    "that your explanation is well justifing your final answer. Please maintain your answer with very simple "
    "reasoning.\n\nOnce again, the question is: {question}")  # verbatim from the authors' code, typos included
REWARD_SENTENCE = "Also, internaly think about the reward of your and other agents' answer."
REWARD_EXPLANATION = ("Here, each reward represents the probability that a suggested answer is correct, as evaluated "
                      "by a verifier. The reward value is between 0 and 1; the verifier is not always perfect, though "
                      "generally quite reliable.")  # the spec quotes its start and end; the middle is ours


def verifier_feedback(score: float) -> str:
    """The line an agent reads about its own previous answer when --feedback-in-prompt is on (spec §1.3 item 3)."""
    if score < 0.3:
        meaning = "Your answer is highly likely wrong."
    elif score < 0.6:
        meaning = "Your answer might be wrong, or your reasoning needs to have a stronger argument."
    elif score < 0.8:
        meaning = "Your answer seems right, but check your reasoning again, there might be some room for improvement."
    else:
        meaning = "Your answer is likely right with high probability."
    return f"Reward from a verifier of your answer: {score:.3f} out of 1.0, which means {meaning}"


def discussion_message(question: str, other_answers: list[tuple[int, str]], other_scores: list[float] | None = None,
                       own_score: float | None = None, prompt_style: str = "default") -> str:
    """The user message of turn t > 1 for one agent (the authors' construct_message_multi_agent).

    other_answers: (agent index, response at turn t-1) of every OTHER agent, shown as "Agent {index+1}".
    other_scores / own_score: verifier scores shown with --feedback-in-prompt (None: no feedback lines).
    Without feedback we drop the instruction's sentence about rewards, which would refer to nothing.
    prompt_style 'short' (ours, for small models) keeps the same structure with a one-line instruction instead of
    the authors' paragraph: the turn-2 prompt is ~3x shorter, and so is the cost of generating and training on it."""
    if prompt_style == "short" and other_scores is None and own_score is None:  # math only (run_debate)
        message = "Solutions from other agents:" + "".join(f"\n\nAgent {agent + 1}: ```{answer}```"
                                                           for agent, answer in other_answers)
        return message + "\n\n" + SHORT_DISCUSSION.format(question=question)
    message = "These are the solutions to the problem from other agents: "
    for k, (agent, answer) in enumerate(other_answers):
        message += f"\n\n Agent {agent + 1} solution: ```{answer}```"
        if other_scores is not None:
            message += (f"\n\n Reward associated with agent {agent + 1}'s solution calculated by verifier: "
                        f"{other_scores[k]:.3f} out of 1.0")
    if other_scores is not None:
        message += "\n\n" + REWARD_EXPLANATION
    sentence = REWARD_SENTENCE if other_scores is not None else ""
    message += "\n\n" + DISCUSSION_INSTRUCTION.format(reward_sentence=sentence, question=question)
    if own_score is not None:  # the authors merge "feedback on your last answer" and the discussion into one user turn
        message = verifier_feedback(own_score) + "\n\n" + message
    return message


# ----------------------------------------------------------------------------------------------
# The debate rollout (used by training here and by evaluate.py)
# ----------------------------------------------------------------------------------------------


def _is_peft(model) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def sampled_conversation(batch: dict, b: int) -> torch.Tensor:
    """Row b of a generate() batch without its padding: the prompt's tokens, then the sampled response's."""
    return torch.cat([batch["query_ids"][b][batch["query_mask"][b].bool()],
                      batch["response_ids"][b][batch["response_mask"][b].bool()]])


def continue_chat(tokenizer, conversation_ids: list[int], prompt: str) -> list[int] | str:
    """The next turn's prompt as token ids that continue the agent's conversation exactly as it was sampled:
    conversation_ids (the previous prompt's ids and the sampled response's, its EOS included) followed by the rest
    of the rendered chat `prompt`, tokenised on its own. Tokenising the whole chat as text can merge the agent's
    own tokens differently (SmolLM2 samples "\n\n" as one token, the text re-tokenises as two), so the agent
    would read an answer it did not write token for token, and --conversation-forward could not find the earlier
    turn inside the later prompt. Returns the text itself when it does not start with those tokens' text (a
    template that rewrites earlier turns, a special token sampled inside a response)."""
    sampled = tokenizer.decode(conversation_ids)
    if not prompt.startswith(sampled):
        return prompt
    return list(conversation_ids) + tokenizer(prompt[len(sampled):], add_special_tokens=False)["input_ids"]


def run_debate(records: list[dict], models: list, tokenizers: list, adapter_names: list[list[str]],
               max_new_tokens: int, temperature: float = 0.7, greedy: bool = False, scorer=None,
               feedback_in_prompt: bool = False, prompt_style: str = "default", generate_batch_size: int = 0) -> dict:
    """Play a T-turn debate between A agents on B questions (paper Sec. 3.1, Du et al. 2024).

    records: B load_task records {question, answer, task}.
    models, tokenizers: one per agent (A of them). Agents sharing a base pass the SAME model object; their rows
      are generated together. Heterogeneous agents pass different models; every agent's chat is rendered and
      tokenised with its own tokenizer, so the others' answers enter its prompt as text.
    adapter_names: T lists of A names: the adapter of agent a at turn t; '__base__' = the base model (off-the-shelf).
    greedy: argmax decoding (evaluation); otherwise sampling at `temperature`.
    scorer: optional fn(records, responses) -> tensor of scores in [0, 1]; needed for feedback_in_prompt.
    generate_batch_size: rows per generate call (0: every row of a turn on one base in a single call).

    Turn 1: each agent gets turn1_prompt(question). Turn t > 1: each agent's chat gets a user message with the
    other agents' turn t-1 responses (discussion_message); its own earlier answers are its assistant messages,
    in the tokens it sampled them with (continue_chat).

    Returns a dict:
      responses [T][A][B] str, answers [T][A][B] str | None (extract_answer), prompts [T][A][B] str (what the
      model saw), correct FloatTensor [B, T, A] (0/1), scores FloatTensor [B, T, A] or None (scorer's output),
      rollout [T][A]: dict of tensors with B rows from common.generate (query_ids, query_mask, response_ids,
      response_mask, logprobs, truncated): exactly the tokens PPO trains on."""
    num_turns, num_agents, batch = len(adapter_names), len(models), len(records)
    if feedback_in_prompt and scorer is None:
        raise ValueError("feedback_in_prompt needs a scorer")
    chats = [[[{"role": "user", "content": turn1_prompt(r["question"], r["task"], prompt_style)}] for r in records]
             for _ in range(num_agents)]  # chats[a][b]: the conversation agent a has seen on question b
    groups: dict[int, list[int]] = {}  # agents that share one model object, generated together
    for a, model in enumerate(models):
        groups.setdefault(id(model), []).append(a)
    responses = [[None] * num_agents for _ in range(num_turns)]
    answers = [[None] * num_agents for _ in range(num_turns)]
    prompts = [[None] * num_agents for _ in range(num_turns)]
    rollout = [[None] * num_agents for _ in range(num_turns)]
    sampled = [[None] * batch for _ in range(num_agents)]  # sampled[a][b]: agent a's last prompt + response ids
    correct = torch.zeros(batch, num_turns, num_agents)
    scores = torch.zeros(batch, num_turns, num_agents) if scorer is not None else None
    for t in range(num_turns):
        if t > 0:  # the discussion message: the other agents' previous answers (and, optionally, scores)
            for a in range(num_agents):
                others = [j for j in range(num_agents) if j != a]
                for b, r in enumerate(records):
                    fb = feedback_in_prompt
                    chats[a][b].append({"role": "user", "content": discussion_message(
                        r["question"], [(j, responses[t - 1][j][b]) for j in others],
                        other_scores=[float(scores[b, t - 1, j]) for j in others] if fb else None,
                        own_score=float(scores[b, t - 1, a]) if fb else None,
                        prompt_style=prompt_style if r["task"] == "math" else "default")})
        for agents in groups.values():  # one batched generate per distinct base, every row on its own adapter
            model, tok = models[agents[0]], tokenizers[agents[0]]
            texts = [chat_prompt(tok, chats[a][b]) for a in agents for b in range(batch)]
            inputs = [texts[k * batch + b] if t == 0 else continue_chat(tok, sampled[a][b], texts[k * batch + b])
                      for k, a in enumerate(agents) for b in range(batch)]
            names = [adapter_names[t][a] for a in agents for _ in range(batch)]
            if not _is_peft(model):
                if any(n != "__base__" for n in names):
                    raise ValueError(f"adapters {sorted(set(names))} requested but the model has no adapters")
                names = None
            out = generate(model, tok, inputs, names, max_new_tokens, temperature=temperature, greedy=greedy,
                           batch_size=generate_batch_size or None)
            for k, a in enumerate(agents):
                rows = slice(k * batch, (k + 1) * batch)
                rollout[t][a] = {key: value[rows] for key, value in out.items()}
                prompts[t][a] = texts[rows]
                sampled[a] = [sampled_conversation(rollout[t][a], b).tolist() for b in range(batch)]
                responses[t][a] = [tok.decode(ids[mask.bool()], skip_special_tokens=True) for ids, mask in
                                   zip(rollout[t][a]["response_ids"], rollout[t][a]["response_mask"])]
                answers[t][a] = [extract_answer(text, r["task"]) for text, r in zip(responses[t][a], records)]
                correct[:, t, a] = torch.tensor([float(ans is not None and ans == r["answer"])
                                                 for ans, r in zip(answers[t][a], records)])
                for b in range(batch):
                    chats[a][b].append({"role": "assistant", "content": responses[t][a][b]})
        if scorer is not None:
            flat = [responses[t][a][b] for a in range(num_agents) for b in range(batch)]
            turn_scores = scorer(records * num_agents, flat).float().cpu()
            scores[:, t, :] = turn_scores.view(num_agents, batch).T
    return dict(responses=responses, answers=answers, prompts=prompts, correct=correct, scores=scores,
                rollout=rollout)


# ----------------------------------------------------------------------------------------------
# Scores, penalties, rewards (pure functions on tensors [..., T, A])
# ----------------------------------------------------------------------------------------------


def has_degenerate_repetition(token_ids: list[int], max_period: int = 20, max_repeats: int = 3, decode=None) -> bool:
    """True when a block of 1..max_period tokens repeats consecutively more than max_repeats times (the authors'
    rule). Blocks that decode to digits only (e.g. "1000000") are allowed when `decode` is given."""
    n = len(token_ids)
    for period in range(1, max_period + 1):
        run = 0  # consecutive positions i with ids[i] == ids[i - period]
        for i in range(period, n):
            run = run + 1 if token_ids[i] == token_ids[i - period] else 0
            if run >= period * max_repeats:  # the block ids[i-period+1 .. i] occurred max_repeats + 1 times in a row
                block = token_ids[i - period + 1: i + 1]
                if decode is None or not decode(block).strip().isdigit():
                    return True
    return False


def format_ok(text: str, task: str, token_ids: list[int], min_tokens: int, decode=None) -> bool:
    """The format gate: a well-formed final answer (common.is_well_formed, the one definition evaluation also
    uses; the authors require a \\boxed{}), at least min_tokens tokens, and no degenerate repetition."""
    return (is_well_formed(text, task) and len(token_ids) >= min_tokens
            and not has_degenerate_repetition(token_ids, decode=decode))


def apply_penalties(scores: torch.Tensor, good_format: torch.Tensor, truncated: torch.Tensor,
                    format_penalty: float | None, missing_eos_penalty: float) -> torch.Tensor:
    """Bad format -> the score becomes format_penalty (None: no format gate); truncated -> + missing_eos_penalty.
    All tensors have the same shape ([B, T, A])."""
    if format_penalty is not None:
        scores = torch.where(good_format.bool(), scores, torch.full_like(scores, format_penalty))
    return scores + missing_eos_penalty * truncated.float()


def influence_aware_rewards(scores: torch.Tensor, gamma: float) -> torch.Tensor:
    """Influence-aware verification reward (paper Definition 1; the authors' 'discounted_sum'/'all' rule):

        R[t, a] = (s[t, a] + Σ_{t' > t} γ^(t'-t) · mean_j s[t', j]) / Σ_{t' = t..T} γ^(t'-t)

    The agent's own score counts at its turn; at every later turn the mean over ALL agents (itself included)
    counts. scores: [T, A] or [B, T, A] (penalised scores). Returns the same shape. γ = 0: R = s."""
    num_turns = scores.shape[-2]
    turn_mean = scores.mean(dim=-1)  # [..., T]
    rewards = torch.empty_like(scores)
    for t in range(num_turns):
        future = torch.zeros_like(turn_mean[..., t])
        for k in range(1, num_turns - t):
            future = future + gamma ** k * turn_mean[..., t + k]
        normaliser = sum(gamma ** k for k in range(num_turns - t))  # γ^0 = 1 for the current turn, also when γ = 0
        rewards[..., t, :] = (scores[..., t, :] + future.unsqueeze(-1)) / normaliser
    return rewards


def turn_rewards(scores: torch.Tensor, rule: str, gamma: float) -> torch.Tensor:
    """R[t, a] under --reward-rule: influence (Definition 1), current (own score), final-mean (mean of the last turn)."""
    if rule == "influence":
        return influence_aware_rewards(scores, gamma)
    if rule == "current":
        return scores.clone()
    if rule == "final-mean":
        return scores[..., -1:, :].mean(dim=-1, keepdim=True).expand_as(scores).clone()
    arg_error("--reward-rule", f"expected influence, current or final-mean, got {rule!r}")


def incentive_bonus(correct: torch.Tensor, alpha0: float, alpha1: float, beta0: float, beta1: float) -> torch.Tensor:
    """Collaboration incentives of the paper's Tables 1 and 2. correct: 0/1 tensor [T, A] or [B, T, A].

    "Majority" is the majority of the OTHER agents' correctness at that turn (mean > 0.5: R, < 0.5: W); a tie
    (mean exactly 0.5, or no other agent) gives no incentive. R = correct, W = wrong.

    Table 1, own revision, added to the agent's answer at t+1:
        own R->W, majority(t) R: -α1      own R->W, majority(t) W: -α0
        own W->R, majority(t) W: +α0      own W->R, majority(t) R: +α1
    Table 2, influence on the others, added to the agent's answer at t:
        majority R->W, own(t) R: -β1      majority R->W, own(t) W: -β0
        majority W->R, own(t) W: +β0      majority W->R, own(t) R: +β1

    The authors' code differs (spec decision a): it pays W->R with majority W as +α1 and W->R with majority R as
    +α0 (swapped), and in Table 2 flips all four signs and swaps β0/β1 in the R->W rows. We follow the paper."""
    c = correct.float()
    num_agents = c.shape[-1]
    if num_agents > 1:
        others = (c.sum(dim=-1, keepdim=True) - c) / (num_agents - 1)  # [..., T, A]: mean correctness of the others
    else:
        others = torch.full_like(c, 0.5)  # no other agent: treat as a tie, no incentive
    maj_right, maj_wrong = others > 0.5, others < 0.5
    own_right, own_wrong = c > 0.5, c < 0.5
    bonus = torch.zeros_like(c)
    # Table 1: own change t -> t+1 against the others' majority at t; paid at t+1
    went_wrong = own_right[..., :-1, :] & own_wrong[..., 1:, :]
    went_right = own_wrong[..., :-1, :] & own_right[..., 1:, :]
    table1 = (-alpha1 * (went_wrong & maj_right[..., :-1, :]) - alpha0 * (went_wrong & maj_wrong[..., :-1, :])
              + alpha0 * (went_right & maj_wrong[..., :-1, :]) + alpha1 * (went_right & maj_right[..., :-1, :]))
    bonus[..., 1:, :] += table1
    # Table 2: the others' majority changes t -> t+1, given the agent's own answer at t; paid at t
    maj_went_wrong = maj_right[..., :-1, :] & maj_wrong[..., 1:, :]
    maj_went_right = maj_wrong[..., :-1, :] & maj_right[..., 1:, :]
    own_r, own_w = own_right[..., :-1, :], own_wrong[..., :-1, :]
    table2 = (-beta1 * (maj_went_wrong & own_r) - beta0 * (maj_went_wrong & own_w)
              + beta0 * (maj_went_right & own_w) + beta1 * (maj_went_right & own_r))
    bonus[..., :-1, :] += table2
    return bonus


def kl_shaped_rewards(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, response_mask: torch.Tensor,
                      final_reward: torch.Tensor, kl_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token rewards of one (turn, agent) (paper Sec. 3.2, r_θ): r_k = -kl_coef · KL_k at every valid token
    (k1 estimator log π - log π_ref), plus the final scalar R + b at the last valid token (the EOS, or the last
    token of a truncated response). Shapes [B, L], [B, L], [B, L], [B]. Returns (rewards, kl), both 0 on padding;
    rewards.sum(1) == final_reward - kl_coef * kl.sum(1)."""
    kl = kl_k1(logprobs, ref_logprobs) * response_mask
    rewards = -kl_coef * kl
    last = (response_mask.sum(dim=1).long() - 1).clamp(min=0)  # the mask is a contiguous prefix
    rewards[torch.arange(rewards.shape[0]), last] += final_reward.to(rewards.dtype)
    return rewards, kl


def token_mean(per_token: torch.Tensor, response_mask: torch.Tensor, num_tokens: torch.Tensor) -> torch.Tensor:
    """---- LOSS NORMALISATION: the one place. ----
    A micro-batch's token SUM divided by num_tokens, the valid tokens of this (turn, agent) in the whole
    MINIBATCH: summing the micro-batch losses gives exactly the minibatch's token-mean (gradient accumulation).
    Multi-process: num_tokens is the count over all ranks (ppo_update), and the gradients are summed."""
    return (per_token * response_mask).sum() / num_tokens


def policy_loss(new_logprobs, old_logprobs, advantages, response_mask, num_tokens, cliprange: float):
    """PPO's clipped surrogate for one (turn, agent) micro-batch (paper Sec. 3.2, L_Surrogate), as a loss:
    max(-A·ρ, -A·clip(ρ, 1-ε, 1+ε)) per token, ρ = π_new/π_old. Returns (loss, stats as token sums and a max)."""
    logratio = (new_logprobs - old_logprobs) * response_mask
    ratio = torch.exp(logratio)
    pg_losses = -advantages * ratio
    pg_losses_clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    pg_loss_per_token = torch.max(pg_losses, pg_losses_clipped)
    with torch.no_grad():
        m = response_mask
        stats = dict(tokens=m.sum(), pg_loss=(pg_loss_per_token * m).sum(), approxkl=(0.5 * logratio ** 2 * m).sum(),
                     clipfrac=((pg_losses_clipped > pg_losses).float() * m).sum(), ratio=(ratio * m).sum(),
                     max_abs_logratio=logratio.abs().max())
    return token_mean(pg_loss_per_token, response_mask, num_tokens), stats


def value_loss(new_values, old_values, returns, response_mask, num_tokens, cliprange_value: float):
    """Clipped value loss for one (turn, agent) micro-batch (paper Sec. 3.2, L_Value; TRL's form):
    0.5 · max((V - G)², (clip(V, V_old ± c) - G)²) per token, G = the GAE returns. Returns (loss, stats)."""
    values_clipped = old_values + torch.clamp(new_values - old_values, -cliprange_value, cliprange_value)
    vf_losses, vf_losses_clipped = (new_values - returns) ** 2, (values_clipped - returns) ** 2
    vf_loss_per_token = 0.5 * torch.max(vf_losses, vf_losses_clipped)
    with torch.no_grad():
        m = response_mask
        stats = dict(vf_loss=(vf_loss_per_token * m).sum(), vf_clipfrac=((vf_losses_clipped > vf_losses).float() * m).sum())
    return token_mean(vf_loss_per_token, response_mask, num_tokens), stats


# ----------------------------------------------------------------------------------------------
# Models, adapters, value heads, optimisers
# ----------------------------------------------------------------------------------------------


def policy_adapter_name(sharing: str, turn: int, agent: int) -> str:
    """The LoRA adapter that plays agent `agent` (0-based) at turn `turn` (0-based)."""
    if sharing == "agent":
        return f"agent{agent}"
    if sharing == "agent-turn":
        return f"agent{agent}_turn{turn + 1}"
    if sharing == "shared":
        return "policy"
    arg_error("--policy-sharing", f"expected agent, agent-turn or shared, got {sharing!r}")


@dataclass
class Team:
    """Everything trainable, built once by build_team()."""
    base_names: list[str]  # distinct base models
    bases: list  # one PeftModel per distinct base (policy adapters, + 'critic' with --value-model separate)
    tokenizers: list  # one per distinct base
    agent_base: list[int]  # base index of each agent
    adapter_names: list[list[str]]  # [T][A] adapter of each (turn, agent); '__base__' for untrained turns
    trained: list[tuple[int, int]]  # the (turn, agent) pairs PPO trains, 0-based
    base_adapters: list[list[str]]  # adapters on each base (the critic, if any, last)
    heads: nn.ModuleDict  # value heads, keyed by head_keys[(t, a)]; empty with --advantage group (no values read)
    head_keys: dict  # (t, a) -> key in heads
    optimizers: dict  # "adapter" (or "base{i}/adapter") -> AdamW; --advantage gae adds "critic" (the critic LoRA + its heads, separate) or "value_heads" (the heads, shared)

    def models(self) -> list:  # per agent, for run_debate
        return [self.bases[i] for i in self.agent_base]

    def agent_tokenizers(self) -> list:
        return [self.tokenizers[i] for i in self.agent_base]


def agent_models(args: Args) -> list[str]:
    """The base model of each agent: --models a,b,... or --model for everyone."""
    names = [m.strip() for m in args.models.split(",")] if args.models else [args.model] * args.num_agents
    if len(names) != args.num_agents:
        arg_error("--models", f"gives {len(names)} models but --num-agents is {args.num_agents}")
    return names


def train_turn_indices(args: Args) -> list[int]:
    """--train-turns (1-based) as 0-based turn indices; all turns by default."""
    turns = [t - 1 for t in parse_int_list(args.train_turns, "--train-turns")] or list(range(args.num_turns))
    if any(not 0 <= t < args.num_turns for t in turns):
        arg_error("--train-turns", f"turns are 1..{args.num_turns}, got {args.train_turns!r}")
    return sorted(set(turns))


def build_team(args: Args, device: str) -> Team:
    """Load each distinct base once; seed with --seed; add the policy adapters (and with --value-model separate
    the critic adapter) and one optimiser per adapter; with --advantage gae also the value heads (shared: and one
    more optimiser for them). --advantage group reads no values: no heads, nothing to step, log or save for them."""
    names = agent_models(args)
    base_names = list(dict.fromkeys(names))
    agent_base = [base_names.index(n) for n in names]
    train_turns = train_turn_indices(args)
    adapter_names = [[policy_adapter_name(args.policy_sharing, t, a) if t in train_turns else "__base__"
                      for a in range(args.num_agents)] for t in range(args.num_turns)]
    trained = [(t, a) for t in train_turns for a in range(args.num_agents)]
    models = [load_model(name, args.dtype, args.quant, device) for name in base_names]
    tokenizers = [load_tokenizer(name) for name in base_names]
    seed_everything(args.seed)  # after loading: building `tiny` the first time reseeds torch's RNG
    bases, base_adapters = [], []
    for i, model in enumerate(models):
        own = sorted({adapter_names[t][a] for t, a in trained if agent_base[a] == i})
        own += ["critic"] if args.value_model == "separate" else []
        bases.append(add_adapters(model, own, r=args.lora_r, alpha=args.lora_alpha))
        base_adapters.append(own)
    fit_values = args.advantage == "gae"  # --advantage group reads no values: no heads (and no optimiser for them)
    head_keys, heads = {}, nn.ModuleDict()
    for t, a in (trained if fit_values else []):
        key = f"turn{t + 1}" + (f"_agent{a}" if args.critic_per_agent else ("" if len(bases) == 1 else f"_base{agent_base[a]}"))
        head_keys[(t, a)] = key
        if key not in heads:
            heads[key] = ValueHead(hidden_size(bases[agent_base[a]])).to(device)
    optimizers = {}
    for i, model in enumerate(bases):  # one AdamW per adapter, built from that adapter's parameters only
        prefix = "" if len(bases) == 1 else f"base{i}/"
        for name in base_adapters[i]:
            params = adapter_parameters(model, name)
            if name == "critic":
                params += [p for (t, a), key in head_keys.items() if agent_base[a] == i for p in heads[key].parameters()]
                params = list({id(p): p for p in params}.values())  # a head shared by several agents: once
            optimizers[prefix + name] = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
        if fit_values and args.value_model == "shared":  # no critic adapter: the heads (on the policies' states) alone
            params = list({id(p): p for (t, a), key in head_keys.items() if agent_base[a] == i
                           for p in heads[key].parameters()}.values())
            optimizers[prefix + "value_heads"] = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
    return Team(base_names, bases, tokenizers, agent_base, adapter_names, trained, base_adapters, heads, head_keys,
                optimizers)


def rl_records(args: Args, records: list[dict]) -> list[dict]:
    """The questions PPO may train on. With --scorer verifier: only those the verifier neither trained nor was
    measured on (train_verifier.rl_questions; MAPoRL footnote 2), split with the settings of the verifier's own
    run, read from its checkpoint. Other scorers: every record."""
    if args.scorer != "verifier":
        return records
    from train_verifier import rl_questions, verifier_args

    trained = verifier_args(args.verifier)
    kept = rl_questions(records, trained["verifier_fraction"], trained["split_seed"])
    print(f"RL questions: {len(kept)} of {len(records)}; the other {len(records) - len(kept)} are the verifier's "
          f"(--verifier-fraction {trained['verifier_fraction']} --split-seed {trained['split_seed']} of {args.verifier})")
    if trained.get("dataset") != args.dataset:
        print(f"note: the verifier was trained on {trained.get('dataset')}, RL runs on {args.dataset}")
    return kept


def make_scorer(args: Args, device: str, team: Team | None = None):
    """fn(records, responses) -> FloatTensor of scores: 0/1 correctness, or the verifier's probability. A verifier
    trained on a base of the team (same model, dtype and quant) is loaded onto it as one more adapter (no copy)."""
    if args.scorer == "ground-truth":
        def ground_truth(records, responses):
            return torch.tensor([float(extract_answer(text, r["task"]) == r["answer"]) for r, text in zip(records, responses)])
        return ground_truth
    from train_verifier import load_verifier, score, verifier_args  # imported only when a verifier is used

    trained = verifier_args(args.verifier)  # one more adapter on the policy's base when the bases match
    same = [] if team is None else [model for name, model in zip(team.base_names, team.bases)
                                    if (name, args.dtype, args.quant) == (trained["model"], trained["dtype"],
                                                                          trained["quant"])]
    verifier = load_verifier(args.verifier, device, base_model=same[0] if same else None)

    def verifier_score(records, responses):  # the verifier sees the question and the answer, not the discussion
        return score(verifier, [r["question"] for r in records], responses, batch_size=args.verifier_batch_size)
    return verifier_score


def custom_scorer(fn, name: str):
    """Your scorer (--reward-fn, or main(score_fn=...)) as the trainer calls it: fn(records, responses) gets the
    load_task records (dicts with question, answer (the normalised gold), task, id and the dataset's other fields)
    and one response string per record, and returns one score in [0, 1] per response (a list or a tensor).
    A wrong length or a score outside [0, 1] stops the run with an error naming `name` (NaN passes: PPO skips a
    non-finite loss with a warning)."""
    def scorer(records, responses):
        scores = torch.as_tensor(fn(records, responses), dtype=torch.float).detach().cpu().flatten()
        if scores.shape[0] != len(responses):
            arg_error(name, f"returned {scores.shape[0]} scores for {len(responses)} responses")
        bad = ((scores < 0) | (scores > 1)).nonzero().flatten().tolist()
        if bad:
            arg_error(name, f"returned {scores[bad[0]].item()} for response {bad[0]}: scores must be in [0, 1]")
        return scores
    return scorer


# ----------------------------------------------------------------------------------------------
# Experience (no grad) and the PPO update
# ----------------------------------------------------------------------------------------------


def _rows(exp: dict, t: int, agents: list[int], rows: torch.Tensor | None, keys: list[str]) -> dict:
    """Concatenate the chosen rows of several agents' experience at turn t (all agents of one base at one turn
    come from the same generate call, so their tensors have equal widths), then drop all-padding columns."""
    out = {k: torch.cat([exp[(t, a)][k] if rows is None else exp[(t, a)][k][rows] for a in agents]) for k in keys}
    for q_ids, q_mask in (("query_ids", "query_mask"), ("critic_query_ids", "critic_query_mask")):
        if q_mask in out:  # left padding: keep from the first column any row uses
            first = first_used_column(out[q_mask])
            out[q_ids], out[q_mask] = out[q_ids][:, first:], out[q_mask][:, first:]
    width = used_width(out["response_mask"])  # right padding: keep up to the last used column
    for k in keys:
        if not k.startswith(("query", "critic_query")) and out[k].dim() == 2:
            out[k] = out[k][:, :width]
    return out


def _forward(model, batch: dict, names: list[str], temperature: float, critic: bool, **kwargs) -> dict:
    q = "critic_query" if critic else "query"
    return forward_responses(model, batch[f"{q}_ids"], batch[f"{q}_mask"], batch["response_ids"], batch["response_mask"],
                             names, temperature, **kwargs)


def _forward_chunks(model, batch: dict, names: list[str], size: int, temperature: float, critic: bool,
                    earlier: list[tuple] = (), **kwargs) -> dict:
    """_forward over chunks of `size` rows (bounded memory), outputs concatenated."""
    outs = [_forward(model, {k: v[s:s + size] for k, v in batch.items()}, names[s:s + size], temperature, critic,
                     earlier=[tuple(x[s:s + size] for x in e) for e in earlier], **kwargs)
            for s in range(0, len(names), size)]

    def cat(parts: list[dict]) -> dict:
        return {k: torch.cat([o[k] for o in parts]) for k in ("logprobs", "entropy", "hidden") if parts[0][k] is not None}

    return dict(cat(outs), earlier=[cat([o["earlier"][k] for o in outs]) for k in range(len(earlier))])


def _earlier(batches: list[dict]) -> list[tuple]:
    """forward_responses' `earlier` for turns whose responses sit inside the forwarded prompts: (response ids,
    mask, where each starts = the real tokens of its own prompt)."""
    return [(b["response_ids"], b["response_mask"], b["query_mask"].sum(1)) for b in batches]


def one_conversation(team: Team, exp: dict, args: Args) -> bool:
    """--conversation-forward: can one forward per agent and debate, over its LAST trained turn, give every trained
    turn's log-probs (and values)? Yes when each agent plays the trained turns on one adapter, no separate critic
    adapter needs forwards of its own, and every earlier trained turn's prompt and sampled response are, token for
    token, the start of the last turn's prompt (run_debate continues each chat token for token: continue_chat). A
    template that rewrites earlier turns or a special token sampled inside a response breaks it for that row, and
    this update then takes one forward per turn."""
    turns = sorted({t for t, _ in team.trained})
    if not args.conversation_forward or len(turns) < 2 or (args.advantage == "gae" and args.value_model == "separate"):
        return False
    last = turns[-1]

    def held(t: int, a: int) -> bool:  # agent a's turn t, every row, sits at the start of its last turn's prompt
        if (last, a) not in exp or team.adapter_names[t][a] != team.adapter_names[last][a]:
            return False
        later = exp[(last, a)]
        for b in range(len(later["query_ids"])):
            conversation = sampled_conversation(exp[(t, a)], b)
            prompt = later["query_ids"][b][later["query_mask"][b].bool()]
            if len(prompt) < len(conversation) or not torch.equal(prompt[:len(conversation)], conversation):
                return False
        return True

    holds = all(held(t, a) for t, a in team.trained if t != last)
    # multi-process: every rank takes the same decision (the whitening's collectives run in the same order)
    device = next(iter(exp.values()))["response_mask"].device
    return bool(allreduce_sum(torch.tensor(float(not holds), device=device)) == 0)


def _turn_groups(team: Team, t: int) -> list[tuple[int, list[int]]]:
    """(base index, trained agents on that base) at turn t."""
    groups = []
    for i in range(len(team.bases)):
        agents = [a for tt, a in team.trained if tt == t and team.agent_base[a] == i]
        if agents:
            groups.append((i, agents))
    return groups


def group_advantages(sequence_rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """--advantage group: A_i = R_i - mean_j R_j over the K = group_size debates of the same question, rows
    q*K .. q*K+K-1 holding question q's debates (the rollout repeats each question K times in a row; MAGRPO's
    Eq. 1 baseline, RLOO's with the sample itself included). No std division (Dr. GRPO). [B*K] -> [B*K]."""
    grouped = sequence_rewards.reshape(-1, group_size)
    return (grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1)


@torch.no_grad()
def make_experience(team: Team, debate: dict, final_rewards: torch.Tensor, args: Args) -> dict:
    """For every trained (turn, agent): old and reference log-probs, values, entropy, KL-shaped rewards,
    GAE advantages (whitened) and returns. final_rewards: [B, T, A] = R + b. Returns {(t, a): dict of tensors}.
    Multi-process: each rank passes its own questions; the whitening statistics are those of all ranks."""
    exp = {}
    for t, a in team.trained:
        ro = debate["rollout"][t][a]
        critic_src = ro if args.critic_history else debate["rollout"][0][a]  # authors: turn-1 prompt only
        exp[(t, a)] = dict(query_ids=ro["query_ids"], query_mask=ro["query_mask"], response_ids=ro["response_ids"],
                           response_mask=ro["response_mask"], critic_query_ids=critic_src["query_ids"],
                           critic_query_mask=critic_src["query_mask"],
                           old_logprobs=ro["logprobs"], entropy=ro["entropy"])  # as sampled (see below)
    turns = sorted({t for t, _ in team.trained})
    one_forward = one_conversation(team, exp, args)  # --conversation-forward: the last turn's forward holds them all
    for t in turns[-1:] if one_forward else turns:
        inside = turns[:-1] if one_forward else []  # the earlier turns whose responses this turn's prompts hold
        for i, agents in _turn_groups(team, t):
            model, n, size = team.bases[i], len(debate["records"]), args.forward_batch_size
            batch = _rows(exp, t, agents, None, list(exp[(t, agents[0])]))
            held = [_rows(exp, tt, agents, None, list(exp[(tt, agents[0])])) for tt in inside]
            names = [team.adapter_names[t][a] for a in agents for _ in range(n)]
            # 4. ONE no-grad mixed-adapter pass (per --forward-batch-size rows) does all of it: the same rows on
            # '__base__' (the reference: no adapter); with --old-logprobs recompute or --value-model shared the
            # responses on their agents' adapters (old log-probs, entropies; shared: the hidden states the values
            # read); with --value-model separate on 'critic' (the values). Rows of one batch do not affect each
            # other: each part equals its own forward bit for bit (tests/test_perf_update.py, tiny model on CPU).
            # Only --no-critic-history's critic rows, whose prompt differs, get a forward of their own: padded to the
            # policy's prompt they round differently.
            # --old-logprobs sampling (the default) takes π_old from generate(): the log-probs each token was
            # sampled with, i.e. the behaviour policy itself, and saves the policy's rows here. They come from the
            # KV-cached decoding kernel, so the first ratio is 1 only to float noise (fp32: README "Speed and memory");
            # recompute uses a full forward like the update's: 1 to < 1e-5 in fp32, and under bf16 this mixed
            # no-grad pass and the update's per-adapter forwards still round differently (up to 5e-3 measured).
            # --conversation-forward: the same pass over the last turn's rows also reads the earlier turns'
            # responses inside their prompts (one_conversation), so those turns get no forward of their own.
            shared, rows_n = args.value_model == "shared", len(names)
            fit_values = args.advantage == "gae"  # --advantage group reads no values
            recompute = args.old_logprobs == "recompute"
            parts = {"policy": names} if recompute or (shared and fit_values) else {}
            parts["reference"] = ["__base__"] * rows_n
            if fit_values and not shared and args.critic_history:  # the critic's rows join the pass
                parts["critic"] = ["critic"] * rows_n
            part = {name: slice(k * rows_n, (k + 1) * rows_n) for k, name in enumerate(parts)}
            keys = ("query_ids", "query_mask", "response_ids", "response_mask")
            out = _forward_chunks(model, {k: batch[k].repeat(len(parts), 1) for k in keys},
                                  [name for rows_names in parts.values() for name in rows_names], size,
                                  args.temperature, False, output_entropy=recompute,
                                  output_hidden=(shared and fit_values) or "critic" in parts,  # none nobody reads
                                  earlier=[tuple(x.repeat(len(parts), *[1] * (x.dim() - 1)) for x in e)
                                           for e in _earlier(held)])
            for tt, tb, o in zip(inside + [t], held + [batch], out["earlier"] + [out]):
                ref_logprobs = o["logprobs"][part["reference"]]
                if recompute:
                    old_logprobs, entropy = o["logprobs"][part["policy"]], o["entropy"][part["policy"]]
                else:
                    old_logprobs, entropy = tb["old_logprobs"], tb["entropy"]
                if not fit_values:
                    hidden = None
                elif shared:
                    hidden = o["hidden"][part["policy"]]
                elif "critic" in parts:
                    hidden = o["hidden"][part["critic"]]
                else:
                    hidden = _forward_chunks(model, tb, ["critic"] * rows_n, size, args.temperature, True,
                                             output_hidden=True)["hidden"]
                for k, a in enumerate(agents):
                    rows = slice(k * n, (k + 1) * n)
                    mask = tb["response_mask"][rows]
                    # 5. per-token rewards (final reward + b at the last token, -kl_coef x KL at every token), then
                    rewards, kl = kl_shaped_rewards(old_logprobs[rows], ref_logprobs[rows], mask,
                                                    final_rewards[:, tt, a].to(mask.device), args.kl_coef)
                    if fit_values:  # GAE within each response, advantages whitened over this (turn, agent)
                        values = team.heads[team.head_keys[(tt, a)]](hidden[rows]) * mask  # (multi-process: all ranks)
                        advantages, returns = gae(rewards, values, mask, args.gae_gamma, args.gae_lambda)
                        advantages = masked_whiten(advantages, mask, all_ranks=True)
                    else:  # --advantage group: the response's summed reward against its question's K debates
                        values = returns = torch.zeros_like(rewards)
                        advantages = group_advantages(rewards.sum(dim=1), args.samples_per_question)[:, None] * mask
                    e = exp[(tt, a)]
                    e.update({key: tb[key][rows] for key in tb})  # the trimmed tensors
                    e.update(old_logprobs=old_logprobs[rows], ref_logprobs=ref_logprobs[rows], old_values=values, kl=kl,
                             rewards=rewards, entropy=entropy[rows], returns=returns, advantages=advantages)
    return exp


def ppo_update(team: Team, exp: dict, args: Args, shuffle_seed: int = 0) -> dict:
    """--ppo-epochs passes of shuffled minibatches over the rollout. Per minibatch, for every micro-batch and
    turn: the policy log-probs of all trained agents of a base (each row on its own adapter; forward_responses
    runs one padded forward per adapter under autograd) and their clipped surrogates; the values from the SAME
    forward's hidden states (--value-model shared; policy + value losses back-propagated once), or from a second
    forward on the critic adapter (separate: the surrogates back-propagated first, one graph alive at a time).
    Gradients accumulate over micro-batches, turns and agents; then every optimiser clips its gradient norm and
    steps once. A non-finite loss skips the minibatch's step. --conversation-forward (one_conversation): the last
    turn's forward also gives the earlier turns' log-probs and hidden states, so they get no forward of their own;
    their losses are the same functions of the same log-probs (tests/test_perf_update.py).
    shuffle_seed seeds the minibatch shuffle (its own generator: the same order on every rank).
    Multi-process: exp holds this rank's questions, question g of the global batch being local row g // world
    on rank g % world (main() deals them out so); a minibatch is a set of global questions, each rank forwards
    its own, losses are divided by the minibatch's GLOBAL token count and the gradients summed across ranks,
    so the step equals one process's step on the whole minibatch.
    Returns {(t, a): list of per-minibatch stats (token sums)}, 'skipped', 'conversation_forward' (0/1) and
    'grad_norm/<optimiser>' lists."""
    rank, world = world_info()
    device = next(iter(exp.values()))["response_mask"].device
    n_global = next(iter(exp.values()))["response_mask"].shape[0] * world  # every rank holds B / world questions
    mb_size = args.minibatch_questions or n_global
    micro = min(args.micro_batch_questions or mb_size, mb_size)
    trainable = [p for opt in team.optimizers.values() for g in opt.param_groups for p in g["params"]]
    shuffle = torch.Generator().manual_seed(shuffle_seed)  # not the sampling RNG, which differs between ranks
    keys = ["query_ids", "query_mask", "response_ids", "response_mask", "critic_query_ids", "critic_query_mask",
            "old_logprobs", "old_values", "advantages", "returns"]
    stats = {key: [] for key in exp}
    stats.update(skipped=0, **{f"grad_norm/{name}": [] for name in team.optimizers})
    turns = sorted({t for t, _ in team.trained})
    shared, fit_values = args.value_model == "shared", args.advantage == "gae"
    one_forward = one_conversation(team, exp, args)  # --conversation-forward: the last turn's forward holds them all
    stats["conversation_forward"] = float(one_forward)
    for epoch in range(args.ppo_epochs):
        perm = torch.randperm(n_global, generator=shuffle)
        for start in range(0, n_global, mb_size):
            minibatch = perm[start:start + mb_size]
            minibatch = minibatch[minibatch % world == rank] // world  # multi-process: this rank's rows of it
            # the loss normalisation's denominator: the minibatch's valid tokens of each (turn, agent), all ranks
            num_tokens = {key: allreduce_sum(e["response_mask"][minibatch].sum()) for key, e in exp.items()}
            mb_stats, finite = {key: [] for key in exp}, True
            for opt in team.optimizers.values():
                opt.zero_grad(set_to_none=True)
            for m_start in range(0, len(minibatch), micro):
                rows = minibatch[m_start:m_start + micro]
                for t in turns[-1:] if one_forward else turns:
                    inside = turns[:-1] if one_forward else []  # earlier turns read from this turn's forward
                    for i, agents in _turn_groups(team, t):
                        batch = _rows(exp, t, agents, rows, keys)
                        held = [_rows(exp, tt, agents, rows, keys) for tt in inside]
                        size = len(rows)
                        names = [team.adapter_names[t][a] for a in agents for _ in range(size)]
                        parts = [slice(k * size, (k + 1) * size) for k in range(len(agents))]
                        # policy: every row on its own agent's adapter; gradients reach each row's adapter only
                        # (--value-model shared: the same forward returns the hidden states the value heads read;
                        # --conversation-forward: it also returns the earlier turns' outputs, read inside the prompts)
                        out = _forward(team.bases[i], batch, names, args.temperature, False,
                                       output_hidden=shared and fit_values, earlier=_earlier(held))
                        per_turn = list(zip(inside + [t], held + [batch], out.get("earlier", []) + [out]))
                        pg_total, pg_stats = 0.0, []
                        for tt, tb, o in per_turn:
                            for a, r in zip(agents, parts):
                                loss, s = policy_loss(o["logprobs"][r], tb["old_logprobs"][r], tb["advantages"][r],
                                                      tb["response_mask"][r], num_tokens[(tt, a)], args.cliprange)
                                pg_total = pg_total + loss
                                pg_stats.append(((tt, a), s))
                        finite = finite and bool(torch.isfinite(pg_total))
                        if not fit_values:  # --advantage group: no values to fit, the surrogates alone
                            if finite:
                                pg_total.backward()
                            for key, s in pg_stats:
                                mb_stats[key].append(s)
                            continue
                        if shared:
                            hiddens = [o["hidden"] for _, _, o in per_turn]
                        else:  # (never with --conversation-forward: one turn per forward)
                            if finite:
                                pg_total.backward()
                            # critic: the 'critic' adapter on every row (one graph alive at a time), then the heads
                            hiddens = [_forward(team.bases[i], batch, ["critic"] * len(names), args.temperature, True,
                                                output_hidden=True)["hidden"]]
                        vf_total, stat = 0.0, iter(pg_stats)
                        for (tt, tb, _), hidden in zip(per_turn, hiddens):
                            for a, r in zip(agents, parts):
                                mask = tb["response_mask"][r]
                                new_values = team.heads[team.head_keys[(tt, a)]](hidden[r]) * mask
                                loss, vs = value_loss(new_values, tb["old_values"][r], tb["returns"][r], mask,
                                                      num_tokens[(tt, a)], args.cliprange_value)
                                vf_total = vf_total + args.vf_coef * loss
                                key, s = next(stat)
                                mb_stats[key].append({**s, **vs})
                        finite = finite and bool(torch.isfinite(vf_total))
                        if finite and not shared:
                            vf_total.backward()
                        elif finite:
                            # --value-model shared: ONE backward of policy loss + vf_coef x value loss. The value
                            # loss's gradient also reaches the policy adapter, through the hidden states the head
                            # reads: each agent's LoRA learns to act AND to make its last hidden state predict
                            # the return (a shared trunk, as TRL's classic PPO with AutoModelForCausalLMWithValueHead).
                            # The critic costs no forward of its own, but fitting values now pulls on the policy's
                            # features: vf_coef sets how hard (the adapter's clip norm covers both), and the first
                            # step sends none (zero-initialised heads: dV/dh = w = 0). --value-model separate
                            # keeps the paper's critic adapter, which never touches the policy.
                            (pg_total + vf_total).backward()
            # multi-process: sum the gradients of all ranks (each loss was divided by the global token count, so the
            # sum is the gradient of the whole minibatch); skip the step everywhere if a loss was non-finite anywhere
            allreduce_gradients(trainable, "sum")
            finite = bool(allreduce_sum(torch.tensor(float(not finite), device=device)) == 0)
            # each optimiser clips the global norm of its own parameters' gradients, then steps once
            norms = {name: float(torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]],
                                                                args.max_grad_norm))
                     for name, opt in team.optimizers.items()}
            if not finite or not all(math.isfinite(v) for v in norms.values()):
                warnings.warn(f"non-finite PPO loss or gradient in epoch {epoch}; skipping this minibatch's step")
                stats["skipped"] += 1
                continue
            for name, opt in team.optimizers.items():
                stats[f"grad_norm/{name}"].append(norms[name])
                opt.step()
            for key, pieces in mb_stats.items():
                if not pieces:  # multi-process: no question of this minibatch is on this rank
                    continue
                total = {k: float(sum(p[k] for p in pieces)) for k in pieces[0] if k != "max_abs_logratio"}
                total["max_abs_logratio"] = float(max(p["max_abs_logratio"] for p in pieces))
                stats[key].append(total)
    return stats


# ----------------------------------------------------------------------------------------------
# Checkpoints, data order, logging helpers
# ----------------------------------------------------------------------------------------------


def learning_rate(args: Args, step: int) -> float:
    """Linear decay from lr to lr * lr_end_factor over --lr-decay-steps (default --max-steps; the authors' LinearLR),
    then constant: updates added on --resume continue at the final lr instead of jumping."""
    decay = args.lr_decay_steps or args.max_steps
    return args.lr * (1.0 - (1.0 - args.lr_end_factor) * min(step, decay) / max(1, decay))


def save_state(run_dir: Path, team: Team, step: int, args: Args):
    """checkpoint.pt (everything --resume needs, written atomically) plus peft adapter folders, the value
    heads (value_heads.pt; --advantage gae only) and debate.json (which adapter plays which turn and agent) for
    evaluate.py. Every rank calls it (the RNG states are gathered); only rank 0 writes."""
    rngs = all_rng_states()
    if not is_main_process():
        return
    with finish_writes_first():  # Ctrl-C waits for the whole set; each file is written atomically (SIGKILL-safe)
        state = dict(step=step, rng=rngs, optimizers={name: opt.state_dict() for name, opt in team.optimizers.items()},
                     adapters=[{name: adapter_state_dict(m, name) for name in names}
                               for m, names in zip(team.bases, team.base_adapters)])
        if team.heads:  # --advantage gae; a group run has none (build_team)
            state["heads"] = team.heads.state_dict()
        save_checkpoint(run_dir / "checkpoint.pt", state)
        dirs = ["adapters" if len(team.bases) == 1 else f"adapters_base{i}" for i in range(len(team.bases))]
        for model, names, folder in zip(team.bases, team.base_adapters, dirs):
            save_adapters(model, names, run_dir / folder)
        if team.heads:
            save_checkpoint(run_dir / "value_heads.pt", team.heads.state_dict())
        info = dict(models=[team.base_names[i] for i in team.agent_base], adapters=team.adapter_names,
                    adapter_dirs=[dirs[i] for i in team.agent_base], prompt_style=args.prompt_style, step=step,
                    feedback_in_prompt=args.feedback_in_prompt, num_turns=args.num_turns, dataset=args.dataset)
        atomic_write_text(run_dir / "debate.json", json.dumps(info, indent=2))


def load_state(run_dir: Path, team: Team) -> int:
    """Restore what save_state wrote. A group run's checkpoint from before group runs dropped the value heads
    holds zero-initialised heads and their never-stepped optimiser ("value_heads"): nothing reads them, they are
    left unloaded (the loop below loads the team's own optimisers only)."""
    state = load_checkpoint(run_dir / "checkpoint.pt")
    for model, adapters in zip(team.bases, state["adapters"]):
        for name, tensors in adapters.items():
            load_adapter_state_dict(model, name, tensors)
    if team.heads:  # the team's own heads only (build_team: none for --advantage group)
        team.heads.load_state_dict(state["heads"])
    for name, opt in team.optimizers.items():
        opt.load_state_dict(state["optimizers"][name])
    restore_rng_state(state["rng"])  # this rank's
    return state["step"]


def legacy_settings(saved: dict) -> dict:
    """What a run saved before these flags existed did: a separate critic adapter, GAE on one debate per
    question, old log-probs from a forward of their own, one forward per turn, and a learning rate decaying over its
    own --max-steps
    (resumed_args fills in each one its args.json lacks; such a run saved --max-steps as "updates", its
    old name)."""
    return dict(value_model="separate", lr_decay_steps=saved.get("max_steps", saved.get("updates", 0)),
                advantage="gae", samples_per_question=1, old_logprobs="recompute", conversation_forward=False)


RESUME_MUST_MATCH = ("model", "models", "num_agents", "num_turns", "train_turns", "policy_sharing", "value_model",
                     "critic_per_agent", "lora_r", "lora_alpha", "dataset")  # what the checkpoint's tensors are built for


def check_args(args: Args):
    """Every refusal of a setting, before anything heavy loads: one line `error: --flag: ...`, exit code 2."""
    check_numbers(args, positive=("num_agents", "num_turns", "lora_r", "lora_alpha", "max_new_tokens", "temperature",
                                  "forward_batch_size", "verifier_batch_size", "max_steps", "questions_per_update",
                                  "samples_per_question",
                                  "ppo_epochs", "lr", "cliprange", "cliprange_value", "max_kl"),
                  non_negative=("train_limit", "generate_batch_size", "min_response_tokens", "minibatch_questions",
                                "micro_batch_questions", "lr_decay_steps", "weight_decay", "max_grad_norm",
                                "kl_coef", "vf_coef", "log_every", "sample_every", "save_every", "eval_questions",
                                "eval_every"),
                  unit_interval=("lr_end_factor", "influence_gamma", "gae_gamma", "gae_lambda"))
    for model in agent_models(args):
        check_model_name(model, "--models" if args.models else "--model")
    if args.reward_fn and (args.scorer != "ground-truth" or args.verifier):
        arg_error("--reward-fn", "replaces --scorer; drop --scorer verifier and --verifier")
    if args.verifier and not Path(args.verifier).exists():
        arg_error("--verifier", f"{args.verifier} does not exist (give a train_verifier.py run folder)")
    if args.scorer == "verifier" and not args.verifier:
        arg_error("--verifier", "--scorer verifier needs --verifier PATH (a train_verifier.py checkpoint)")
    if args.verifier and args.scorer != "verifier":
        arg_error("--verifier", "is given but --scorer is ground-truth; add --scorer verifier")
    if args.feedback_in_prompt and args.scorer != "verifier":
        arg_error("--feedback-in-prompt", "shows a verifier's scores: with --scorer ground-truth it would write the "
                                          "gold 0/1 labels into the prompts (add --scorer verifier --verifier PATH)")
    if args.advantage == "group" and args.samples_per_question < 2:
        arg_error("--samples-per-question", f"--advantage group compares the debates of each question: needs >= 2, "
                                            f"got {args.samples_per_question}")
    if args.advantage == "group" and args.value_model == "separate":
        arg_error("--value-model", "separate trains a critic adapter, which --advantage group never reads (use "
                                   "--advantage gae, or drop --value-model)")
    if args.advantage == "group" and args.critic_per_agent and not args.resume:  # (saved before this refusal: resumes)
        arg_error("--critic-per-agent", "chooses the value heads, which --advantage group does not have (use "
                                        "--advantage gae, or drop --critic-per-agent)")
    if not args.critic_history and args.value_model == "shared":
        arg_error("--no-critic-history", "needs --value-model separate (shared value heads read the policy's own forward)")
    policy_adapter_name(args.policy_sharing, 0, 0)
    turn1_prompt("", "math", args.prompt_style)
    agent_models(args)
    train_turn_indices(args)


def print_sample(step: int, debate: dict, scores: torch.Tensor, penalized: torch.Tensor, rewards: torch.Tensor,
                 chars: int = 400):
    """The first question's debate, printed above the progress bar (tqdm.write)."""
    record = debate["records"][0]
    lines = [f"\n=== sample debate, update {step} | gold {record['answer']} ===\nQ: {record['question']}"]
    for t, turn in enumerate(debate["responses"]):
        for a, texts in enumerate(turn):
            text = texts[0] if len(texts[0]) <= chars else texts[0][:chars] + " [...]"
            lines.append(f"--- turn {t + 1}, agent {a}: answer={debate['answers'][t][a][0]} score={scores[0, t, a]:.3f} "
                         f"penalised={penalized[0, t, a]:.3f} reward={rewards[0, t, a]:.3f}\n{text}")
    tqdm.write("\n".join(lines + ["=" * 40]))


def debate_samples(step: int, debate: dict, scores: torch.Tensor, penalized: torch.Tensor,
                   rewards: torch.Tensor) -> list[dict]:
    """samples.jsonl rows of one update: every (question, turn, agent) response with its prompt, parsed answer,
    score, penalised score and reward (this process's questions)."""
    return [dict(step=step, question=record["question"], gold=record["answer"], turn=t + 1, agent=a,
                 prompt=debate["prompts"][t][a][b], response=debate["responses"][t][a][b],
                 answer=debate["answers"][t][a][b], correct=debate["correct"][b, t, a].item(),
                 score=scores[b, t, a].item(), penalized_score=penalized[b, t, a].item(), reward=rewards[b, t, a].item())
            for b, record in enumerate(debate["records"]) for t in range(len(debate["responses"]))
            for a in range(len(debate["responses"][t]))]


def rollout_metrics(debate: dict, scores: torch.Tensor, penalized: torch.Tensor, rewards: torch.Tensor,
                    bonus: torch.Tensor) -> dict:
    """Per turn and per (agent, turn): majority-vote accuracy, correctness, scores, rewards, bonuses, lengths."""
    metrics = {}
    num_turns, num_agents = scores.shape[1], scores.shape[2]
    for t in range(num_turns):
        votes = [majority_vote_accuracy([debate["answers"][t][a][b] for a in range(num_agents)], r["answer"])
                 for b, r in enumerate(debate["records"])]
        metrics[f"turn{t + 1}/accuracy"] = sum(votes) / len(votes)
        for a in range(num_agents):
            ro = debate["rollout"][t][a]
            p = f"agent{a}/turn{t + 1}/"
            metrics.update({p + "correct": debate["correct"][:, t, a].mean().item(), p + "score": scores[:, t, a].mean().item(),
                            p + "penalized_score": penalized[:, t, a].mean().item(), p + "reward": rewards[:, t, a].mean().item(),
                            p + "bonus": bonus[:, t, a].mean().item(),
                            p + "completions/mean_length": ro["response_mask"].sum(1).float().mean().item(),
                            p + "completions/clipped_ratio": ro["truncated"].float().mean().item()})
    metrics.update({"objective/scores": scores.mean().item(), "objective/penalized_scores": penalized.mean().item(),
                    "objective/rewards": rewards.mean().item(), "objective/bonus": bonus.mean().item(),
                    "objective/correct": debate["correct"].mean().item(),
                    "objective/format_penalized_frac": (penalized < scores - 1e-6).float().mean().item()})
    lengths = torch.cat([ro["response_mask"].sum(1).float().cpu() for turn in debate["rollout"] for ro in turn])
    truncated = torch.cat([ro["truncated"].float().cpu() for turn in debate["rollout"] for ro in turn])
    metrics.update({"completions/mean_length": lengths.mean().item(), "completions/clipped_ratio": truncated.mean().item()})
    return metrics


def ppo_metrics(exp: dict, stats: dict, num_agents: int) -> dict:
    """PPO statistics per agent (token-weighted over its trained turns and all minibatches) and overall."""
    metrics, per_agent = {}, {a: [] for a in range(num_agents)}
    for (t, a) in exp:
        per_agent[a].append((t, a))
    for a, keys in list(per_agent.items()) + [(None, list(exp))]:
        if not keys:
            continue
        prefix = "" if a is None else f"agent{a}/"
        mb = [s for key in keys for s in stats[key]]
        tokens = sum(s["tokens"] for s in mb) or float("nan")
        masks = [exp[k]["response_mask"] for k in keys]
        metrics.update({
            prefix + "objective/kl": sum(exp[k]["kl"].sum() for k in keys).item() / sum(m.shape[0] for m in masks),
            prefix + "objective/entropy": sum((exp[k]["entropy"] * m).sum() for k, m in zip(keys, masks)).item() / sum(m.sum() for m in masks).item(),
            prefix + "policy/approxkl": sum(s["approxkl"] for s in mb) / tokens,
            prefix + "policy/clipfrac": sum(s["clipfrac"] for s in mb) / tokens,
            prefix + "val/ratio": sum(s["ratio"] for s in mb) / tokens,
            prefix + "loss/policy": sum(s["pg_loss"] for s in mb) / tokens,
        })
        if mb and "vf_loss" in mb[0]:  # --advantage gae: the value heads' fit
            metrics.update({
                prefix + "val/clipfrac": sum(s["vf_clipfrac"] for s in mb) / tokens,
                prefix + "loss/value": sum(s["vf_loss"] for s in mb) / tokens,
                prefix + "val/explained_variance": sum(explained_variance(exp[k]["old_values"], exp[k]["returns"],
                                                                          exp[k]["response_mask"]) for k in keys) / len(keys),
            })
    for key, value in stats.items():
        if isinstance(key, str) and key.startswith("grad_norm/") and value:
            metrics[key] = sum(value) / len(value)
    metrics["train/skipped_minibatches"] = stats["skipped"]
    metrics["train/conversation_forward"] = stats.get("conversation_forward", 0.0)  # 1: one forward per conversation
    return metrics


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------


def heldout_records(args: Args, train_records: list[dict]) -> list[dict]:
    """The fixed held-out questions of the in-training evaluation: the first --eval-questions of --eval-split.
    Refused (before any model loads) when one of them is also a training question."""
    if not args.eval_questions or not is_main_process():
        return []
    if Path(args.dataset).is_file():  # a single local data file is one split ('train'): nothing is held out
        print(f"note: {args.dataset} is a single file (the split 'train'): no in-training evaluation; hold questions "
              f"out in a folder with a test file, or measure with evaluate.py")
        return []
    records = load_task(args.dataset, args.eval_split, limit=args.eval_questions, seed=0,  # the same set for every --seed
                        skip_bad_rows=args.skip_bad_rows, **dataset_options(args))
    shared = {r["question"] for r in records} & {r["question"] for r in train_records}
    if shared:
        arg_error("--eval-split", f"{len(shared)} of the {len(records)} held-out questions of split {args.eval_split!r} "
                                  f"are also training questions (e.g. {sorted(shared)[0][:60]!r}); choose a disjoint split")
    if not records:
        arg_error("--eval-split", f"{args.dataset} has no questions in split {args.eval_split!r} (or --eval-questions 0 to skip)")
    return records


def eval_due(args: Args, step: int) -> bool:
    """Evaluate before the first update (step 0), every --eval-every updates and after the last one."""
    return bool(args.eval_questions) and is_main_process() and (
        step == 0 or step == args.max_steps or bool(args.eval_every and step % args.eval_every == 0))


@torch.no_grad()
def evaluate_team(team: Team, args: Args, records: list[dict], scorer) -> dict:
    """The team debates the held-out questions greedily; the numbers evaluate.py --mode debate reports
    (common.debate_metrics): majority-vote accuracy per turn with tie expectation (MAPoRL Sec. 4.1), the mean
    agent's accuracy, the unparsable rate, and the pooled wrong->right / right->wrong changes into each turn."""
    t0 = time.time()
    debate = run_debate(records, team.models(), team.agent_tokenizers(), team.adapter_names, args.max_new_tokens,
                        greedy=True, scorer=scorer if args.feedback_in_prompt else None,
                        feedback_in_prompt=args.feedback_in_prompt, prompt_style=args.prompt_style,
                        generate_batch_size=args.generate_batch_size)
    answers = [[[debate["answers"][t][a][b] for a in range(args.num_agents)] for t in range(args.num_turns)]
               for b in range(len(records))]
    numbers = debate_metrics(answers, [r["answer"] for r in records])
    metrics = {}
    for t in range(args.num_turns):
        metrics[f"eval/turn{t + 1}/accuracy"] = numbers["accuracy"]["majority"][t]
        metrics[f"eval/turn{t + 1}/agent_accuracy"] = numbers["accuracy"]["mean_agent"][t]
        metrics[f"eval/turn{t + 1}/invalid_rate"] = numbers["invalid_rate"][t]
    for pair in numbers["transitions"]:  # changes from turn t to t+1, as fractions of (question, agent) pairs
        into = pair["turns"][1] + 1
        metrics[f"eval/turn{into}/wrong_to_right"] = pair["pooled_fractions"]["W→R"]
        metrics[f"eval/turn{into}/right_to_wrong"] = pair["pooled_fractions"]["R→W"]
    metrics.update({"eval/num_questions": len(records), "timing/eval_s": time.time() - t0})
    return metrics


def rollout_step(team: Team, args: Args, records: list[dict], scorer,
                 builtin_rules: bool = True) -> tuple[dict, dict, dict]:
    """Stages 1-5 of one update: the debate, scores and penalties, rewards, experience. Returns
    (debate, exp, tensors) with tensors = dict(scores, penalized, rewards, bonus), each [B, T, A].
    builtin_rules=False (a custom scorer without --reward-fn-rules): no format/EOS penalties and no incentives."""
    # 1. play the debate: all agents of a turn in one generate call, each row on its own adapter
    t0 = time.time()
    debate = run_debate(records, team.models(), team.agent_tokenizers(), team.adapter_names, args.max_new_tokens,
                        temperature=args.temperature, scorer=scorer, feedback_in_prompt=args.feedback_in_prompt,
                        prompt_style=args.prompt_style, generate_batch_size=args.generate_batch_size)
    debate["records"], debate["generate_s"] = records, time.time() - t0  # the generation and scoring alone
    # 2. score answers; penalise bad format and truncation
    scores = debate["scores"]
    good, truncated = torch.zeros_like(scores, dtype=torch.bool), torch.zeros_like(scores, dtype=torch.bool)
    for t in range(args.num_turns):
        for a in range(args.num_agents):
            ro, tok = debate["rollout"][t][a], team.agent_tokenizers()[a]
            truncated[:, t, a] = ro["truncated"].cpu()
            for b, text in enumerate(debate["responses"][t][a]):
                ids = ro["response_ids"][b][ro["response_mask"][b].bool()].tolist()
                good[b, t, a] = format_ok(text, records[b]["task"], ids, args.min_response_tokens, decode=tok.decode)
    penalized = apply_penalties(scores, good, truncated, args.format_penalty if args.penalize_format else None,
                                args.missing_eos_penalty)
    # 3. influence-aware reward (Definition 1) + incentives (Tables 1-2, on 0/1 correctness)
    bonus = incentive_bonus(debate["correct"], args.alpha0, args.alpha1, args.beta0, args.beta1)
    if not builtin_rules:  # a custom scorer without --reward-fn-rules: its scores alone make the reward
        penalized, bonus = scores.clone(), torch.zeros_like(scores)
    rewards = turn_rewards(penalized, args.reward_rule, args.influence_gamma) + bonus
    # 4-5. old/reference log-probs, values; KL-shaped per-token rewards, GAE, whitened advantages (make_experience)
    exp = make_experience(team, debate, rewards, args)
    return debate, exp, dict(scores=scores, penalized=penalized, rewards=rewards, bonus=bonus)


def main(args: Args, score_fn=None) -> Path:
    """Train; returns the run folder. score_fn(records, responses) -> scores in [0, 1] is --reward-fn from Python
    (see custom_scorer): it replaces --scorer, and the built-in penalties and incentives then apply only with
    --reward-fn-rules."""
    if args.resume:  # the run's settings + the flags typed now; a structural change is refused before loading
        args = resumed_args(args, "cotrain", RESUME_MUST_MATCH, legacy=legacy_settings)
    check_args(args)
    args.lr_decay_steps = args.lr_decay_steps or args.max_steps  # saved in args.json: a longer resume keeps it
    if args.reward_fn:  # your scorer is imported before anything heavy: a bad spec stops here
        if score_fn is not None:
            arg_error("--reward-fn", "main() was also given score_fn; pass one of them")
        score_fn = load_function(args.reward_fn, "--reward-fn")
    if args.reward_fn_rules and score_fn is None:
        arg_error("--reward-fn-rules", "only applies with --reward-fn (the built-in scorers always use the rules)")
    builtin_rules = score_fn is None or args.reward_fn_rules
    # multi-process: under torchrun join the process group (gloo on CPU, NCCL on GPU; only rank 0 prints)
    rank, world, device = init_distributed(args.device)
    print(set_torch_threads(args.threads))
    if args.questions_per_update % world:
        arg_error("--questions-per-update", f"is the global batch, split across the {world} processes: it must be "
                                            f"divisible by {world}, got {args.questions_per_update}")
    # the data is read and checked (fields, rows, split) before the run folder is made and any model loads
    records = load_task(args.dataset, args.dataset_split, limit=args.train_limit or None, seed=args.seed,
                        skip_bad_rows=args.skip_bad_rows, **dataset_options(args))
    records = rl_records(args, records)  # --scorer verifier: never the verifier's own questions
    eval_records = heldout_records(args, records)  # checked now: no held-out question is a training question
    if len(records) < args.questions_per_update:
        arg_error("--questions-per-update", f"is {args.questions_per_update} but {args.dataset} has {len(records)} questions")
    run_dir = start_run(args, "cotrain")
    team = build_team(args, device)  # seeds everything with --seed: the same adapters and heads on every rank
    seed_sampling_per_rank(args.seed)  # multi-process: every rank samples different responses
    if score_fn is not None:
        scorer = custom_scorer(score_fn, "--reward-fn" if args.reward_fn else "score_fn")
        print(f"scorer: {args.reward_fn or 'score_fn'}; the format/EOS penalties and the incentives are "
              + ("ON (--reward-fn-rules)" if builtin_rules else "off (--reward-fn-rules turns them on)"))
    else:
        scorer = make_scorer(args, device, team)
    start = load_state(run_dir, team) if args.resume else 0
    if args.resume:
        print(f"resumed {run_dir} from update {start}")
    print(f"{args.num_agents} agents x {args.num_turns} turns on {args.dataset} | bases {team.base_names} | "
          f"trained (turn, agent): {[(t + 1, a) for t, a in team.trained]} | adapters {team.base_adapters}")
    if start == 0 and eval_due(args, 0):  # 0. the untrained team on the held-out questions: the "before" row
        log_metrics(run_dir, dict(step=0, **evaluate_team(team, args, eval_records, scorer)))
    bar = tqdm(range(start, args.max_steps), initial=start, total=args.max_steps, desc="cotrain", disable=rank > 0)
    for step in bar:
        lr = learning_rate(args, step)
        for opt in team.optimizers.values():
            for group in opt.param_groups:
                group["lr"] = lr
        records_now = [records[i] for i in step_indices(len(records), args.questions_per_update, step,
                                                        f"cotrain-{args.seed}", drop_last=True)]
        records_now = records_now[rank::world]  # multi-process: this rank's questions (global question g on rank g % world)
        records_now = [r for r in records_now for _ in range(args.samples_per_question)]  # K debates each, in a row
        t0 = time.time()
        debate, exp, r = rollout_step(team, args, records_now, scorer, builtin_rules)
        t1 = time.time()
        # mean per-response KL of each (turn, agent) over all ranks' responses: every rank takes the same decision
        kl_per_agent = {key: (allreduce_sum(e["kl"].sum()) / (e["kl"].shape[0] * world)).item() for key, e in exp.items()}
        worst = max(kl_per_agent, key=kl_per_agent.get)
        if kl_per_agent[worst] > args.max_kl:
            save_state(run_dir, team, step, args)
            finish_distributed()
            raise SystemExit(f"stopped at update {step}: turn {worst[0] + 1} agent {worst[1]} has KL "
                             f"{kl_per_agent[worst]:.2f} > --max-kl {args.max_kl} to the reference. The checkpoint of "
                             f"update {step} is kept in {run_dir}; lower --lr or raise --kl-coef.")
        # 6. PPO on every trained (turn, agent); one step per optimiser per minibatch
        stats = ppo_update(team, exp, args, shuffle_seed=1_000_003 * args.seed + step)
        t2 = time.time()
        metrics = dict(step=step + 1, lr=lr, **rollout_metrics(debate, r["scores"], r["penalized"], r["rewards"], r["bonus"]),
                       **ppo_metrics(exp, stats, args.num_agents),
                       **{"timing/generate_s": debate["generate_s"], "timing/rollout_s": t1 - t0,
                          "timing/update_s": t2 - t1, "timing/step_s": t2 - t0})
        if eval_due(args, step + 1):  # 7. the team after this update on the held-out questions (greedy)
            metrics.update(evaluate_team(team, args, eval_records, scorer))
        log_metrics(run_dir, metrics)  # multi-process: rank 0 writes, its own questions' metrics (grad norms: global)
        last = f"turn{args.num_turns}/accuracy"
        bar.set_postfix(acc=f"{metrics[last]:.2f}", score=f"{metrics['objective/scores']:.2f}",
                        kl=f"{metrics['objective/kl']:.3f}", clip=f"{metrics['policy/clipfrac']:.3f}")
        if stats["skipped"]:
            tqdm.write(f"warning: update {step + 1}: skipped {stats['skipped']} minibatch step(s) with a non-finite loss")
        if args.log_every and (step + 1) % args.log_every == 0:
            tqdm.write(f"update {step + 1}: " + format_metrics(metrics, [f"turn{t + 1}/accuracy" for t in range(args.num_turns)] + [
                "objective/scores", "objective/penalized_scores", "objective/rewards", "objective/kl", "policy/clipfrac",
                "val/clipfrac", "loss/value", "objective/entropy", "timing/rollout_s", "timing/update_s"]))
        if args.sample_every and (step + 1) % args.sample_every == 0:
            print_sample(step + 1, debate, r["scores"], r["penalized"], r["rewards"])
            log_samples(run_dir, debate_samples(step + 1, debate, r["scores"], r["penalized"], r["rewards"]))
        if (args.save_every and (step + 1) % args.save_every == 0) or step + 1 == args.max_steps:
            save_state(run_dir, team, step + 1, args)
    if start >= args.max_steps:
        print(f"nothing to do: the checkpoint is at update {start} and --max-steps is {args.max_steps}")
    print(f"done. metrics: {run_dir / 'metrics.jsonl'} | adapters: {run_dir / 'adapters'} (agents and turns: "
          f"{run_dir / 'debate.json'}) | checkpoint: {run_dir / 'checkpoint.pt'}")
    print_eval_table(run_dir, [f"eval/turn{t}/{k}" for t in range(2, args.num_turns + 1) for k in ("wrong_to_right", "right_to_wrong")]
                     + [f"eval/turn{t}/accuracy" for t in range(1, args.num_turns + 1)])  # before, during and after
    plot_run(run_dir)  # training_curves.png (needs matplotlib)
    finish_tracker()  # --report-to: flush and close
    finish_distributed()  # multi-process: leave the process group (without it gloo aborts at exit)
    return run_dir


if __name__ == "__main__":
    with clean_exits("--dataset"):  # Ctrl-C / SIGTERM: finish the write in progress, exit with a note on --resume
        main(parse_args(Args))
