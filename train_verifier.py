"""train_verifier.py: train MAPoRL's verifier, a model of P(answer is correct | question, answer), and measure
how well calibrated it is.

In MAPoRL (arXiv 2502.18439) every answer an agent gives in a debate is scored by a learned verifier; its
probability of correctness is the co-training reward (cotrain.py). Theorem 1 of the paper: with enough capacity,
the cross-entropy-optimal verifier outputs the true probability that an answer is correct, so a good verifier
is *calibrated*. This script:

  1. splits the train questions (seeded, by a hash of the question text) into the verifier's part and the part
     cotrain.py trains on (`rl_questions`), so the verifier never sees an RL question; the test split is separate
     by construction. A slice of the verifier's questions is held out to measure it;
  2. samples K answers per verifier question from the policy's base model with the debate's turn-1 prompt at a
     high temperature (authors: T ~ U(1.3, 1.5), top-p 0.9), labels each by `extract_answer` against the gold
     (unparsable: label 0 and parsed=False, counted separately) and caches them as JSONL (reused and topped up);
  3. balances each training question to m correct + m wrong answers, m = min(n, #correct, #wrong) (authors: n =
     10; the gold solution is added as a correct answer where sampling found fewer than n), and drops the
     questions that cannot be balanced, so the verifier cannot learn question difficulty instead of correctness.
     Unparsable answers are left out of the balancing and of the held-out measurement, as the authors' label -1
     (training's format penalty replaces the verifier's score for them); --unparsable-wrong counts them as wrong;
  4. trains a LoRA adapter (authors: r=16, alpha=32) and a linear head on the base's last hidden state with
     token-level BCE: the head's logit at every token of the answer span against the answer's 0/1 label,
     averaged per answer, then over the batch (the authors' train_reward.py);
  5. measures it on the held-out answers (all samples, not balanced: the distribution it will score):
     accuracy at 0.5, AUROC, Brier score, expected calibration error (10 bins) and a reliability diagram,
     next to the constant base-rate baseline, so a reader sees what the verifier adds.

At use (cotrain.py, evaluate.py): `v = load_verifier(RUN_DIR)` and `score(v, questions, answers)` -> [N]
probabilities = sigmoid of the head at the answer's last token. `load_verifier(RUN_DIR, base_model=policy)` puts
the verifier's adapter on the policy's own (same) base as one more adapter: one copy of the weights in memory.

Simplifications and changes relative to the authors' pipeline (reward_gen_data.py, reward_data_balancing.py,
train_reward.py, reward_server.py; spec §2 and §2.1):
  * no prompted augmentation: the authors generate extra correct/wrong answers with special prompts ("a wrong
    answer which seems right ...") and, for ANLI, one rationale per target label; we only sample the turn-1
    prompt and balance what we get (plus the gold solution), so m can be below n. --min-per-label 10 gives the
    authors' strict rule (drop every question without 10 + 10);
  * the split is by a hash of the question text, not "first N rows", so it does not depend on --num-questions
    or on the order the dataset is loaded in; cotrain.py --scorer verifier calls `rl_questions` with this run's
    --verifier-fraction and --split-seed, read from the saved verifier (`verifier_args`);
  * the head is common.ValueHead (with a bias, zero-initialised, so every score starts at 0.5) instead of the
    authors' bias-free, randomly initialised Linear;
  * the answer span is the assistant turn as the chat template renders it (the answer and its end-of-turn
    tokens), so the score is read at the same template token for every answer;
  * runs in-process (decision e): no Flask server; one process, no DeepSpeed.

Two things to know when reading the measurements:
  * balancing makes the training base rate 0.5, so the verifier learns P(correct) under that mix, not under the
    policy's own (often far lower) accuracy: on the unbalanced held-out answers its AUROC (ranking) is the
    number to trust first, and ECE/Brier show how far the prior is off (compare the constant baseline);
  * when the policy rarely answers right, most correct training answers are gold solutions, and the verifier
    can learn "gold style vs sampled style" instead of correctness; data/gold_used says how many there are.

Examples:
  # CPU smoke run with the tiny random model (seconds; it cannot answer, so every sampled answer is unparsable:
  # --unparsable-wrong keeps them as the wrong answers, else nothing could be balanced)
  python train_verifier.py --model tiny --num-questions 40 --samples-per-question 4 --max-new-tokens 32 \\
      --heldout-fraction 0.3 --max-steps 10 --unparsable-wrong
  # CPU, the real SmolLM2-135M-Instruct on the built-in offline arithmetic task. At the authors' T ~ 1.4 this
  # 135M model writes gibberish (no answer is right), so sample at 0.7 (13 min on a busy 2-core CPU, 10 sampling)
  python train_verifier.py --model smollm2-135m --num-questions 60 --samples-per-question 6 \\
      --max-new-tokens 128 --temperature-min 0.7 --temperature-max 0.7 --heldout-fraction 0.3 --max-steps 20 \\
      --batch-size 4
  # GPU, paper scale: QLoRA, GSM8K, 100 samples per question as the authors
  python train_verifier.py --model microsoft/Phi-3-mini-128k-instruct --quant 4bit --dtype bfloat16 \\
      --dataset gsm8k --samples-per-question 100 --generate-batch-size 100 --epochs 1
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from common import ValueHead, adapter_parameters, add_adapters, arg_error, chat_prompt, extract_answer, generate, hidden_size, load_model, masked_mean, turn1_prompt
from nanomarl.cli import check_numbers, parse_args
from nanomarl.distributed import default_device, is_main_process, seed_everything
from nanomarl.models import adapter_state_dict, check_model_name, load_adapter_state_dict, load_adapters, load_tokenizer, save_adapters
from nanomarl.runs import clean_exits, format_metrics, load_checkpoint, log_metrics, resumed_args, rng_state, save_checkpoint, set_rng_state, set_torch_threads, start_run
from nanomarl.tasks.debate import dataset_options, load_task, read_jsonl, step_indices
from nanomarl.trackers import finish_tracker, plot_run

ADAPTER = "verifier"  # the verifier's LoRA adapter name (also when it shares the policy's base)


@dataclass
class Args:
    renamed = {"gen_batch_size": "generate_batch_size", "run_dir": "output_dir"}  # old flag -> new name (the old one works until the next release)
    # ---- run ----
    seed: int = 0  # seeds sampling, balancing, the LoRA/head init and the batch order
    output_dir: str = ""  # run folder (default runs/train_verifier-<time>-s<seed>)
    resume: str = ""  # continue this run folder from its checkpoint.pt with its saved settings; the flags you type override them (e.g. --max-steps); the model, adapter and data split cannot change
    device: str = ""  # cpu | cuda | cuda:N (default: cuda if available, else cpu)
    threads: int = 0  # torch CPU threads; 0 = OMP_NUM_THREADS if set, else the cores the load average leaves free
    # ---- model ----
    model: str = "smollm2-135m"  # the policy's base (samples, carries the verifier): tiny|smollm2-135m|hub id|path
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # weights and compute dtype of the base
    quant: Literal["none", "4bit", "8bit"] = "none"  # 4bit: QLoRA, nf4
    lora_r: int = 16  # LoRA rank of the verifier adapter (authors: 16)
    lora_alpha: int = 32  # LoRA alpha (authors: 32)
    max_length: int = 550  # tokens of [prompt ; answer]; longer pairs lose the prompt's start first (authors: 550)
    # ---- questions ----
    dataset: str = "arith"  # gsm8k | anli[:r1|r2|r3] | jsonl:PATH | arith (built-in, offline); its train split
    dataset_config: str = ""  # hub id only: the dataset's configuration (e.g. main for openai/gsm8k)
    question_field: str = "question"  # hub id or local file: the column holding the question
    answer_field: str = "answer"  # hub id or local file: the column holding the gold answer
    dataset_task: Literal["math", "nli"] = "math"  # hub id or local file: math (the answer's last number, e.g. GSM8K's '#### 72') or nli (entailment/neutral/contradiction or 0/1/2)
    num_questions: int = 0  # load the first N train questions before splitting (0 = all; arith makes 1000)
    verifier_fraction: float = 0.3  # share of train questions kept for the verifier; cotrain.py uses the rest
    heldout_fraction: float = 0.1  # share of the verifier's questions held out to measure it
    split_seed: int = 0  # seeds the question split; cotrain.py must use the same value
    skip_bad_rows: bool = False  # skip malformed dataset rows instead of stopping
    # ---- sampling the answers (spec §2.1) ----
    samples_per_question: int = 32  # K answers sampled per question (authors: 100 for GSM8K)
    temperature_min: float = 1.3  # sampling temperature ~ U(min, max), drawn per generation batch (authors: 1.3)
    temperature_max: float = 1.5  # (authors: 1.5)
    top_p: float = 0.9  # nucleus sampling (authors: 0.9)
    max_new_tokens: int = 300  # answer length limit (authors: 300 GSM8K, 100 ANLI)
    generate_batch_size: int = 32  # answers generated per call
    data_cache: str = ""  # JSONL of sampled, labelled answers (default RUN_DIR/verifier_data.jsonl); reused, topped up
    # ---- balancing ----
    max_per_label: int = 10  # n: keep at most n correct and n wrong answers per question (authors: 10 and 10)
    min_per_label: int = 1  # drop a question with fewer than this many correct or wrong answers (authors: 10)
    add_gold_solution: bool = True  # add the dataset's gold solution as a correct answer when fewer than n were sampled
    unparsable_wrong: bool = False  # count unparsable answers as wrong (balancing, held-out); default: left out (authors: label -1)
    # ---- training ----
    lr: float = 1e-4  # AdamW learning rate (the authors' files say 2e-4, 1e-4 and 5e-5)
    batch_size: int = 8  # answers per optimiser step (authors: 4 x 2 accumulation)
    micro_batch_size: int = 8  # answers per forward/backward (gradient accumulation inside a step)
    epochs: int = 1  # passes over the balanced training answers (authors: 1)
    max_steps: int = 0  # optimiser steps (0 = epochs x steps per epoch)
    warmup_steps: int = 5  # linear warm-up, then linear decay to 0 (authors: 5)
    max_grad_norm: float = 1.0  # gradient clipping
    # ---- logging and measuring ----
    log_every: int = 10  # print a one-line summary every N steps
    sample_every: int = 50  # print one scored training answer every N steps (0 = never)
    report_to: Literal["none", "wandb", "trackio", "tensorboard"] = "none"  # also send metrics.jsonl's rows to this tracker (an optional install; wandb runs offline, tensorboard writes RUN/tensorboard)
    eval_every: int = 0  # measure on the held-out answers every N steps (0 = at the end only)
    save_every: int = 100  # write checkpoint.pt every N steps
    eval_batch_size: int = 16  # answers per scoring forward


# ----------------------------------------------------------------------------------------------
# 1. Questions: the verifier's split, disjoint from the RL questions
# ----------------------------------------------------------------------------------------------


def question_split(question: str, verifier_fraction: float, heldout_fraction: float, split_seed: int) -> str:
    """'verifier_heldout' | 'verifier_train' | 'rl' for one question, from a seeded hash of its text:
    u ~ U[0, 1) per question; [0, f*h) held out, [f*h, f) verifier training, [f, 1) RL. Independent of
    the dataset's order and size, and a repeated question always lands on the same side."""
    digest = hashlib.sha256(f"{split_seed}\n{question}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < verifier_fraction * heldout_fraction:
        return "verifier_heldout"
    return "verifier_train" if u < verifier_fraction else "rl"


def split_questions(records: list[dict], verifier_fraction: float, heldout_fraction: float,
                    split_seed: int) -> dict[str, list[dict]]:
    """{'verifier_train', 'verifier_heldout', 'rl'} -> records (order kept)."""
    parts = {"verifier_train": [], "verifier_heldout": [], "rl": []}
    for record in records:
        parts[question_split(record["question"], verifier_fraction, heldout_fraction, split_seed)].append(record)
    return parts


def rl_questions(records: list[dict], verifier_fraction: float, split_seed: int = 0) -> list[dict]:
    """The questions cotrain.py may train on: every train question the verifier did not see (same flags)."""
    return [r for r in records if question_split(r["question"], verifier_fraction, 0.0, split_seed) == "rl"]


# ----------------------------------------------------------------------------------------------
# 2. Data: sample K answers per question, label them, cache them, balance them
# ----------------------------------------------------------------------------------------------


def label_answer(answer: str, gold: str, task: str) -> tuple[int, bool]:
    """(label, parsed): 1 if the extracted answer equals the gold, else 0; an unparsable answer is wrong."""
    extracted = extract_answer(answer, task)
    return int(extracted is not None and extracted == gold), extracted is not None


def read_cache(path: Path, generator: str) -> dict[str, list[dict]]:
    """question text -> its cached samples. A truncated last line (an interrupted write) is skipped."""
    if not path.exists():
        return {}
    rows, skipped = read_jsonl(path, ("question", "answer", "label", "parsed", "generator"), skip_bad_rows=True)
    if skipped:
        print(f"data cache {path}: skipped {skipped} unreadable line(s)")
    by_question = {}
    for row in rows:
        if row["generator"] != generator:
            raise SystemExit(f"error: --data-cache {path} holds answers sampled from {row['generator']!r}, not from "
                             f"--model {generator!r}; pass another --data-cache (or delete that file)")
        by_question.setdefault(row["question"], []).append(row)
    return by_question


def sample_answers(model, tokenizer, records: list[dict], args: Args, cache_path: Path) -> dict[str, list[dict]]:
    """K answers per question from the base model (no adapter), at T ~ U(min, max) per batch and top-p.
    Questions already in the cache are reused; missing answers are sampled and appended to the cache."""
    cache = read_cache(cache_path, args.model)
    missing = [(r, args.samples_per_question - len(cache.get(r["question"], []))) for r in records]
    missing = [(r, k) for r, k in missing if k > 0]
    rng = random.Random(f"temperature-{args.seed}-{len(cache)}")
    todo = [r for r, k in missing for _ in range(k)]  # one prompt per answer still to sample
    if todo:
        print(f"sampling {len(todo)} answers for {len(missing)} questions into {cache_path}")
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    for start in tqdm(range(0, len(todo), args.generate_batch_size), desc="sampling", disable=not todo):
        batch = todo[start:start + args.generate_batch_size]
        temperature = rng.uniform(args.temperature_min, args.temperature_max)
        prompts = [chat_prompt(tokenizer, [{"role": "user", "content": turn1_prompt(r["question"], r["task"])}])
                   for r in batch]
        out = generate(model, tokenizer, prompts, None, args.max_new_tokens, temperature=temperature, top_p=args.top_p)
        lines = []
        for record, ids, mask in zip(batch, out["response_ids"], out["response_mask"]):
            answer = tokenizer.decode(ids[mask.bool()], skip_special_tokens=True)
            label, parsed = label_answer(answer, record["answer"], record["task"])
            row = dict(question=record["question"], task=record["task"], gold=record["answer"], answer=answer,
                       label=label, parsed=parsed, temperature=round(temperature, 4), generator=args.model)
            cache.setdefault(record["question"], []).append(row)
            lines.append(json.dumps(row) + "\n")
        with open(cache_path, "a", encoding="utf-8") as f:  # appended per batch: an interrupted run loses one batch
            f.write("".join(lines))
            f.flush()
            os.fsync(f.fileno())
    return {r["question"]: cache[r["question"]][:args.samples_per_question] for r in records}


def balance(records: list[dict], samples: dict[str, list[dict]], max_per_label: int, min_per_label: int,
            add_gold: bool, seed: int, unparsable_wrong: bool = False) -> tuple[list[dict], dict]:
    """Per question keep m correct and m wrong answers, m = min(n, #correct, #wrong) (authors: exactly n = 10 each).
    The gold solution (record['solution'], where the dataset has one) joins the correct answers when fewer than
    n were sampled. Questions with m < min_per_label are dropped. An unparsable answer is left out (the authors'
    label -1), or counted as wrong with unparsable_wrong. Returns (rows, counts); counts['gold_used'] is how many
    kept rows are gold solutions; 'wrong_parsed' and 'wrong_unparsable' count the sampled wrong answers both ways."""
    rng = random.Random(f"balance-{seed}")
    rows = []
    counts = dict(questions_kept=0, questions_dropped=0, dropped_few_correct=0, dropped_few_wrong=0, gold_used=0,
                  wrong_parsed=0, wrong_unparsable=0)
    for record in records:
        answers = samples.get(record["question"], [])
        correct = [a for a in answers if a["label"] == 1]
        wrong = [a for a in answers if a["label"] == 0 and (a["parsed"] or unparsable_wrong)]
        counts["wrong_parsed"] += sum(1 for a in answers if a["label"] == 0 and a["parsed"])
        counts["wrong_unparsable"] += sum(1 for a in answers if a["label"] == 0 and not a["parsed"])
        if add_gold and len(correct) < max_per_label and record.get("solution"):
            correct.append(dict(question=record["question"], task=record["task"], answer=record["solution"],
                                label=1, parsed=True, gold_solution=True))
        m = min(max_per_label, len(correct), len(wrong))
        if m < min_per_label:
            counts["questions_dropped"] += 1
            counts["dropped_few_correct" if len(correct) < min_per_label else "dropped_few_wrong"] += 1
            continue
        chosen = rng.sample(correct, m) + rng.sample(wrong, m)
        counts["questions_kept"] += 1
        counts["gold_used"] += sum(1 for a in chosen if a.get("gold_solution"))
        rows += chosen
    return rows, counts


def sample_counts(samples: dict[str, list[dict]]) -> dict:
    """How many sampled answers are correct, wrong, and (among the wrong) unparsable."""
    answers = [a for per_question in samples.values() for a in per_question]
    return dict(answers=len(answers), correct=sum(a["label"] for a in answers),
                wrong=sum(1 - a["label"] for a in answers), unparsable=sum(not a["parsed"] for a in answers))


# ----------------------------------------------------------------------------------------------
# 3. The verifier: [user: turn-1 prompt, assistant: answer] -> LoRA base -> linear head -> sigmoid;
#    its loss, schedule and batches; scoring, saving, loading
# ----------------------------------------------------------------------------------------------


@dataclass
class Verifier:
    model: object  # a PeftModel carrying the verifier's LoRA adapter (perhaps next to the policy's adapters)
    tokenizer: object
    head: ValueHead  # Linear(hidden, 1) on the last hidden state; sigmoid(head) = P(correct)
    task: str  # default task for the turn-1 prompt ('math' | 'nli')
    max_length: int
    args: dict  # the Args the verifier was trained with


def encode_pairs(tokenizer, questions: list[str], answers: list[str], tasks: list[str], max_length: int,
                 device) -> dict[str, torch.Tensor]:
    """Render each pair as the chat [user: turn1_prompt(q), assistant: a]. The query is the prompt up to the
    assistant header (left-padded); the response is the assistant turn as the template renders it, i.e. the answer
    and its end-of-turn tokens (right-padded). A pair over max_length loses tokens from the query's start first."""
    queries, responses = [], []
    for question, answer, task in zip(questions, answers, tasks):
        user = [{"role": "user", "content": turn1_prompt(question, task)}]
        prompt = chat_prompt(tokenizer, user)
        full = tokenizer.apply_chat_template(user + [{"role": "assistant", "content": answer}], tokenize=False)
        if not full.startswith(prompt):
            raise ValueError("the chat template does not render the generation prompt as a prefix of the full chat")
        query = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        response = tokenizer(full[len(prompt):], add_special_tokens=False)["input_ids"]
        excess = len(query) + len(response) - max_length
        if excess > 0:
            response = response[max(0, excess - len(query)):]
            query = query[min(excess, len(query)):]
        queries.append(query)
        responses.append(response)
    q_len, r_len = max(len(q) for q in queries), max(len(r) for r in responses)
    pad = tokenizer.pad_token_id
    return dict(
        query_ids=torch.tensor([[pad] * (q_len - len(q)) + q for q in queries], device=device),
        query_mask=torch.tensor([[0] * (q_len - len(q)) + [1] * len(q) for q in queries], device=device),
        response_ids=torch.tensor([r + [pad] * (r_len - len(r)) for r in responses], device=device),
        response_mask=torch.tensor([[1.0] * len(r) + [0.0] * (r_len - len(r)) for r in responses], device=device),
    )


def verifier_logits(model, head, batch: dict[str, torch.Tensor], adapter_names: list[str] | None) -> torch.Tensor:
    """Head logits at every response token: [B, Lr] (garbage where response_mask is 0).

    Unlike a value function V(s) (read *before* each token), the verifier reads the hidden state *at* each answer
    token, so the last one has seen the whole answer. adapter_names: one per row (None: the active adapter)."""
    q_len = batch["query_ids"].shape[1]
    input_ids = torch.cat([batch["query_ids"], batch["response_ids"]], dim=1)
    attention_mask = torch.cat([batch["query_mask"].long(), batch["response_mask"].long()], dim=1)
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)  # left padding changes nothing
    extra = {} if adapter_names is None else {"adapter_names": list(adapter_names)}
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                output_hidden_states=True, logits_to_keep=1, use_cache=False, **extra)
    return head(out.hidden_states[-1][:, q_len:])


def verifier_loss(logits: torch.Tensor, response_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Token-level BCE (the authors' train_reward.py): BCE(sigmoid(logit_t), y) at every answer token, the answer's
    0/1 label y repeated, averaged over each answer's tokens, then over the batch. logits/mask [B, Lr], labels [B]."""
    targets = labels.float()[:, None].expand_as(logits)
    bce = F.binary_cross_entropy_with_logits(logits.float(), targets, reduction="none")
    return masked_mean(bce, response_mask, dim=1).mean()


def last_token_logits(logits: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """The logit at each answer's last token: [B, Lr] -> [B] (responses are right-padded)."""
    last = response_mask.sum(1).long() - 1
    return logits.gather(1, last[:, None]).squeeze(1)


def lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up over warmup_steps, then linear decay to 0 at total_steps (the HF Trainer default)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


@torch.no_grad()
def score(verifier: Verifier, questions: list[str], answers: list[str], batch_size: int = 8,
          tasks: list[str] | None = None) -> torch.Tensor:
    """P(correct) for each (question, answer): sigmoid of the head at the answer's last token. [N] float, CPU.
    questions are the dataset's question texts (wrapped here in the turn-1 prompt); tasks default to the
    verifier's own ('math' or 'nli')."""
    if len(questions) != len(answers):
        raise ValueError(f"score(): {len(questions)} questions but {len(answers)} answers")
    tasks = tasks or [verifier.task] * len(questions)
    device = next(verifier.head.parameters()).device
    probs = []
    for i in range(0, len(questions), batch_size):
        batch = encode_pairs(verifier.tokenizer, questions[i:i + batch_size], answers[i:i + batch_size],
                             tasks[i:i + batch_size], verifier.max_length, device)
        adapter_names = [ADAPTER] * batch["query_ids"].shape[0]
        logits = verifier_logits(verifier.model, verifier.head, batch, adapter_names)
        probs.append(torch.sigmoid(last_token_logits(logits, batch["response_mask"])).float().cpu())
    return torch.cat(probs) if probs else torch.zeros(0)


def save_verifier(model, head, args: Args, task: str, run_dir: Path) -> Path:
    """RUN_DIR/verifier/verifier/ (the peft adapter) and RUN_DIR/verifier/head.pt (head, task, args)."""
    folder = Path(run_dir) / "verifier"
    save_adapters(model, [ADAPTER], folder)
    save_checkpoint(folder / "head.pt", dict(head=head.state_dict(), task=task, args=dataclasses.asdict(args)))
    return folder


def verifier_folder(path: str | Path) -> Path:
    """The folder holding head.pt and the adapter: path itself, or the run folder's verifier/."""
    folder = Path(path) / "verifier" if (Path(path) / "verifier" / "head.pt").exists() else Path(path)
    if not (folder / "head.pt").exists() or not (folder / ADAPTER / "adapter_config.json").exists():
        raise SystemExit(f"error: {path} holds no saved verifier (expected verifier/head.pt and verifier/{ADAPTER}/)")
    return folder


def verifier_args(path: str | Path) -> dict:
    """The Args a saved verifier was trained with (its base model, dtype, quant, question split), read from its
    head.pt without loading any model: cotrain.py takes the RL split and the base sharing from here."""
    return load_checkpoint(verifier_folder(path) / "head.pt")["args"]


def load_verifier(path: str | Path, device: str = "cpu", base_model=None) -> Verifier:
    """Load a verifier saved by this script (path: its run folder, or the run folder's verifier/).

    base_model=None loads the base named in the verifier's args. base_model=<a PeftModel of the same base>
    (e.g. the policy, with its agents' adapters) gets the verifier as one more adapter: one copy of the weights.
    The caller's adapters keep their requires_grad and stay active; the verifier's adapter is frozen, and score()
    picks it per row by name. `device` only matters when the base is loaded here."""
    folder = verifier_folder(path)
    saved = load_checkpoint(folder / "head.pt")
    train_args = saved["args"]
    if base_model is None:
        model = load_adapters(load_model(train_args["model"], train_args["dtype"], train_args["quant"], device),
                              folder, [ADAPTER])
    else:
        model = base_model
        requires_grad = {n: p.requires_grad for n, p in model.named_parameters()}
        model.load_adapter(str(folder / ADAPTER), adapter_name=ADAPTER)  # not made active: rows pick it by name
        for n, p in model.named_parameters():
            p.requires_grad_(requires_grad.get(n, False))
        model.eval()
    device = next(model.parameters()).device
    head = ValueHead(hidden_size(model)).to(device)
    head.load_state_dict(saved["head"])
    head.requires_grad_(False)
    return Verifier(model=model, tokenizer=load_tokenizer(train_args["model"]), head=head, task=saved["task"],
                    max_length=train_args["max_length"], args=train_args)


# ----------------------------------------------------------------------------------------------
# 4. Measurements: accuracy at 0.5, AUROC, Brier, ECE, reliability diagram
# ----------------------------------------------------------------------------------------------


def _as_arrays(probs, labels) -> tuple[np.ndarray, np.ndarray]:
    probs = np.asarray(probs.tolist() if isinstance(probs, torch.Tensor) else probs, dtype=np.float64)
    labels = np.asarray(labels.tolist() if isinstance(labels, torch.Tensor) else labels, dtype=np.float64)
    if probs.shape != labels.shape or probs.ndim != 1:
        raise ValueError(f"probs {probs.shape} and labels {labels.shape} must be two vectors of the same length")
    return probs, labels


def accuracy_at_half(probs, labels) -> float:
    """Fraction of answers classified right when 'correct' means prob >= 0.5."""
    probs, labels = _as_arrays(probs, labels)
    return float(np.mean((probs >= 0.5) == (labels == 1)))


def auroc(probs, labels) -> float:
    """Area under the ROC curve = P(score of a random correct answer > score of a random wrong one), ties
    counting 1/2: the Mann–Whitney U statistic / (n_pos * n_neg), from average ranks. NaN if a class is missing."""
    probs, labels = _as_arrays(probs, labels)
    n_pos, n_neg = int((labels == 1).sum()), int((labels == 0).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(probs, return_inverse=True, return_counts=True)
    average_rank = np.cumsum(counts) - (counts - 1) / 2  # 1-based rank of each distinct value, ties averaged
    ranks = average_rank[inverse]
    u = ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


def brier(probs, labels) -> float:
    """Mean squared error of the probabilities: mean (p - y)^2."""
    probs, labels = _as_arrays(probs, labels)
    return float(np.mean((probs - labels) ** 2))


def reliability_bins(probs, labels, n_bins: int = 10) -> list[dict]:
    """Equal-width bins [k/n, (k+1)/n) (the last includes 1.0): count, mean probability, fraction correct."""
    probs, labels = _as_arrays(probs, labels)
    index = np.minimum((probs * n_bins).astype(int), n_bins - 1)
    bins = []
    for k in range(n_bins):
        in_bin = index == k
        count = int(in_bin.sum())
        bins.append(dict(lo=k / n_bins, hi=(k + 1) / n_bins, count=count,
                         confidence=float(probs[in_bin].mean()) if count else float("nan"),
                         accuracy=float(labels[in_bin].mean()) if count else float("nan")))
    return bins


def expected_calibration_error(probs, labels, n_bins: int = 10) -> float:
    """ECE = sum over bins of (bin count / N) * |fraction correct - mean probability| (Guo et al. 2017)."""
    n = len(_as_arrays(probs, labels)[0])
    return float(sum(b["count"] / n * abs(b["accuracy"] - b["confidence"])
                     for b in reliability_bins(probs, labels, n_bins) if b["count"]))


def calibration_metrics(probs, labels) -> dict:
    return dict(accuracy=accuracy_at_half(probs, labels), auroc=auroc(probs, labels), brier=brier(probs, labels),
                ece=expected_calibration_error(probs, labels, 10))


def plot_reliability(probs, labels, base_rate: float, path: Path) -> bool:
    """Reliability diagram (fraction correct vs mean probability per bin, point size ~ count) and a histogram of
    the scores by label. Returns False (and draws nothing) when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no reliability diagram (pip install matplotlib)")
        return False
    probs, labels = _as_arrays(probs, labels)
    bins = [b for b in reliability_bins(probs, labels) if b["count"]]
    fig, (ax, ax_hist) = plt.subplots(1, 2, figsize=(10, 4.5))
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfectly calibrated")
    ax.axhline(base_rate, color="gray", lw=1, label=f"base rate {base_rate:.2f}")
    sizes = [20 + 300 * b["count"] / len(probs) for b in bins]
    ax.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], "-", color="C0")
    ax.scatter([b["confidence"] for b in bins], [b["accuracy"] for b in bins], s=sizes, color="C0", zorder=3,
               label="verifier (size ~ answers in bin)")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="mean verifier probability in bin", ylabel="fraction correct in bin",
           title=f"reliability (ECE {expected_calibration_error(probs, labels):.3f})")
    ax.legend(loc="upper left", fontsize=8)
    edges = np.linspace(0, 1, 21)
    ax_hist.hist(probs[labels == 1], bins=edges, alpha=0.6, label="correct answers", color="C2")
    ax_hist.hist(probs[labels == 0], bins=edges, alpha=0.6, label="wrong answers", color="C3")
    ax_hist.set(xlabel="verifier probability", ylabel="answers", title=f"scores (AUROC {auroc(probs, labels):.3f})")
    ax_hist.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def measure(verifier: Verifier, heldout: list[dict], batch_size: int) -> dict:
    """Score every held-out answer; the verifier's metrics and the constant base-rate baseline's."""
    probs = score(verifier, [r["question"] for r in heldout], [r["answer"] for r in heldout], batch_size,
                  [r["task"] for r in heldout])
    labels = [r["label"] for r in heldout]
    base_rate = float(np.mean(labels))
    return dict(probs=probs, labels=labels, base_rate=base_rate, verifier=calibration_metrics(probs, labels),
                baseline=calibration_metrics([base_rate] * len(labels), labels))


# ----------------------------------------------------------------------------------------------
# 5. Main: questions -> sampled answers -> balanced data -> training -> measurements
# ----------------------------------------------------------------------------------------------


def check_args(args: Args):
    """Every refusal of a setting, before anything heavy loads: one line `error: --flag: ...`, exit code 2."""
    check_numbers(args, positive=("lora_r", "lora_alpha", "lr", "epochs", "top_p"),
                  non_negative=("num_questions", "max_steps", "warmup_steps", "max_grad_norm", "sample_every",
                                "eval_every"), unit_interval=("top_p",))
    check_model_name(args.model, "--model")
    if not 0 < args.verifier_fraction < 1:
        arg_error("--verifier-fraction", f"must be in (0, 1), got {args.verifier_fraction}")
    if not 0 < args.heldout_fraction < 1:
        arg_error("--heldout-fraction", f"must be in (0, 1), got {args.heldout_fraction}")
    if not 0 < args.temperature_min <= args.temperature_max:
        arg_error("--temperature-min", "need 0 < --temperature-min <= --temperature-max")
    for flag in ("samples_per_question", "max_per_label", "min_per_label", "batch_size", "micro_batch_size",
                 "generate_batch_size", "eval_batch_size", "max_new_tokens", "max_length", "log_every", "save_every"):
        if getattr(args, flag) < 1:
            arg_error("--" + flag.replace("_", "-"), f"must be >= 1, got {getattr(args, flag)}")


def main(args: Args):
    if args.resume:  # the run's settings + the flags typed now; a change of model, adapter or data split is refused
        args = resumed_args(args, "train_verifier", ("model", "lora_r", "lora_alpha", "dataset", "num_questions",
                                                     "verifier_fraction", "heldout_fraction", "split_seed"))
    check_args(args)
    device = args.device or default_device()
    print(set_torch_threads(args.threads))
    seed_everything(args.seed)

    # 1. questions: the verifier's share of the train split (cotrain.py trains on the rest), some held out
    records = load_task(args.dataset, "train", args.num_questions or None, args.seed, args.skip_bad_rows,
                        **dataset_options(args))
    parts = split_questions(records, args.verifier_fraction, args.heldout_fraction, args.split_seed)
    for name in ("verifier_train", "verifier_heldout"):  # a repeated question is one question
        parts[name] = list({r["question"]: r for r in parts[name]}.values())
    print(f"{args.dataset}: {len(records)} train questions -> verifier {len(parts['verifier_train'])} "
          f"+ held out {len(parts['verifier_heldout'])}, RL (cotrain.py) {len(parts['rl'])}")
    if not parts["verifier_train"]:
        arg_error("--verifier-fraction", f"no verifier questions among {len(records)}: raise it or --num-questions")
    if not parts["verifier_heldout"]:
        arg_error("--heldout-fraction", f"no held-out questions among the {len(parts['verifier_train'])} verifier "
                                        "questions: raise it or --num-questions")
    run_dir = start_run(args, "train_verifier")  # after the data checks: a refused run leaves no folder behind
    task = Counter(r["task"] for r in records).most_common(1)[0][0]

    # 2. base model (the policy's), which samples the answers and then carries the verifier's adapter
    tokenizer = load_tokenizer(args.model)
    model = load_model(args.model, args.dtype, args.quant, device)

    # 3. sample K answers per question (cached), label them, balance the training questions
    cache_path = Path(args.data_cache) if args.data_cache else run_dir / "verifier_data.jsonl"
    t0 = time.time()
    train_samples = sample_answers(model, tokenizer, parts["verifier_train"], args, cache_path)
    heldout_samples = sample_answers(model, tokenizer, parts["verifier_heldout"], args, cache_path)
    train_rows, balance_counts = balance(parts["verifier_train"], train_samples, args.max_per_label,
                                         args.min_per_label, args.add_gold_solution, args.seed, args.unparsable_wrong)
    heldout_rows = [a for answers in heldout_samples.values() for a in answers  # not balanced: the real mix of
                    if a["parsed"] or args.unparsable_wrong]  # the answers whose score training uses
    data_stats = {**{f"data/sampled_{k}": v for k, v in sample_counts({**train_samples, **heldout_samples}).items()},
                  **{f"data/{k}": v for k, v in balance_counts.items()},
                  "data/train_answers": len(train_rows), "data/heldout_answers": len(heldout_rows),
                  "data/heldout_base_rate": float(np.mean([r["label"] for r in heldout_rows] or [float("nan")])),
                  "timing/sampling_s": time.time() - t0}
    print("data: " + "  ".join(f"{k[5:]}={v:.4g}" if isinstance(v, float) else f"{k[5:]}={v}"
                               for k, v in data_stats.items() if k.startswith("data/")))
    if not train_rows:
        raise SystemExit("error: no training question could be balanced (every question lacks correct or wrong "
                         "answers): sample more (--samples-per-question), lower --min-per-label, or count "
                         "unparsable answers as wrong (--unparsable-wrong)")
    if not heldout_rows:
        raise SystemExit("error: every held-out answer is unparsable, nothing to measure: sample more "
                         "(--samples-per-question), raise --heldout-fraction, or pass --unparsable-wrong")

    # 4. the verifier: a LoRA adapter on the frozen base + a linear head; AdamW over those two only
    model = add_adapters(model, [ADAPTER], r=args.lora_r, alpha=args.lora_alpha)
    head = ValueHead(hidden_size(model)).to(device)
    params = adapter_parameters(model, ADAPTER) + list(head.parameters())
    optimizer = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)  # authors' betas
    steps_per_epoch = math.ceil(len(train_rows) / args.batch_size)
    total_steps = args.max_steps or args.epochs * steps_per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, args.warmup_steps, total_steps))
    verifier = Verifier(model=model, tokenizer=tokenizer, head=head, task=task, max_length=args.max_length,
                        args=dataclasses.asdict(args))
    start_step = 0
    if args.resume:
        state = load_checkpoint(run_dir / "checkpoint.pt")
        load_adapter_state_dict(model, ADAPTER, state["adapter"])
        head.load_state_dict(state["head"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
        start_step = state["step"]
        print(f"resumed {run_dir} at step {start_step}")
    log_metrics(run_dir, {"step": start_step, **data_stats})

    def checkpoint(step):
        save_checkpoint(run_dir / "checkpoint.pt", dict(step=step, adapter=adapter_state_dict(model, ADAPTER),
                                                        head=head.state_dict(), optimizer=optimizer.state_dict(),
                                                        scheduler=scheduler.state_dict(), rng=rng_state()))

    def evaluate(step) -> dict:
        result = measure(verifier, heldout_rows, args.eval_batch_size)
        log_metrics(run_dir, {"step": step, **{f"eval/{k}": v for k, v in result["verifier"].items()},
                              **{f"baseline/{k}": v for k, v in result["baseline"].items()}})
        return result

    # 5. training: token-level BCE over each answer's span, one AdamW step per batch
    print(f"training the verifier: {len(train_rows)} answers, {total_steps} steps of {args.batch_size} "
          f"({steps_per_epoch} per epoch)")
    bar = tqdm(range(start_step, total_steps), desc="verifier", initial=start_step, total=total_steps)
    for step in bar:
        rows = [train_rows[i] for i in step_indices(len(train_rows), args.batch_size, step, f"batches-{args.seed}")]
        loss_sum, last_probs = 0.0, []
        for start in range(0, len(rows), args.micro_batch_size):
            micro = rows[start:start + args.micro_batch_size]
            batch = encode_pairs(tokenizer, [r["question"] for r in micro], [r["answer"] for r in micro],
                                 [r["task"] for r in micro], args.max_length, device)
            labels = torch.tensor([r["label"] for r in micro], device=device)
            logits = verifier_logits(model, head, batch, None)  # the only adapter is active (and 4-bit safe)
            loss = verifier_loss(logits, batch["response_mask"], labels) * len(micro) / len(rows)
            loss.backward()
            loss_sum += loss.item()
            last_probs += torch.sigmoid(last_token_logits(logits.detach(), batch["response_mask"])).tolist()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
        lr = scheduler.get_last_lr()[0]  # the rate this step uses
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

        labels = [r["label"] for r in rows]
        correct_probs = [p for p, y in zip(last_probs, labels) if y == 1]
        wrong_probs = [p for p, y in zip(last_probs, labels) if y == 0]
        metrics = {"step": step + 1, "train/loss": loss_sum, "train/accuracy": accuracy_at_half(last_probs, labels),
                   "train/score_correct": float(np.mean(correct_probs)) if correct_probs else float("nan"),
                   "train/score_wrong": float(np.mean(wrong_probs)) if wrong_probs else float("nan"),
                   "train/grad_norm": float(grad_norm), "train/lr": lr,
                   "train/epoch": (step + 1) / steps_per_epoch}
        bar.set_postfix(loss=f"{loss_sum:.4f}", acc=f"{metrics['train/accuracy']:.2f}")
        if (step + 1) % args.log_every == 0 or step + 1 == total_steps:
            tqdm.write(f"step {step + 1}: " + format_metrics(metrics, [k for k in metrics if k != "step"]))
        if args.sample_every and (step + 1) % args.sample_every == 0:
            tqdm.write(f"--- sample (label {rows[0]['label']}, score {last_probs[0]:.3f}) ---\n"
                       f"Q: {rows[0]['question'][:300]}\nA: {rows[0]['answer'][-300:]}\n---")
        if args.eval_every and (step + 1) % args.eval_every == 0 and step + 1 < total_steps:
            result = evaluate(step + 1)
            tqdm.write(f"step {step + 1} held-out: " + format_metrics(result["verifier"], list(result["verifier"])))
        log_metrics(run_dir, metrics)
        if (step + 1) % args.save_every == 0 or step + 1 == total_steps:
            checkpoint(step + 1)

    # 6. measure on the held-out answers, next to the constant base-rate baseline
    result = evaluate(total_steps)
    report = dict(step=total_steps, heldout_answers=len(heldout_rows), base_rate=result["base_rate"],
                  verifier=result["verifier"], baseline=result["baseline"], data=data_stats)
    if is_main_process():
        (run_dir / "eval_metrics.json").write_text(json.dumps(report, indent=2))
    print(f"\nheld-out: {len(heldout_rows)} answers to {len(parts['verifier_heldout'])} questions, "
          f"base rate {result['base_rate']:.3f}")
    print(f"{'':14}{'verifier':>10}{'constant':>10}")
    for name, key in [("accuracy@0.5", "accuracy"), ("AUROC", "auroc"), ("Brier", "brier"), ("ECE (10 bins)", "ece")]:
        print(f"{name:14}{result['verifier'][key]:10.4f}{result['baseline'][key]:10.4f}")
    plotted = plot_reliability(result["probs"], result["labels"], result["base_rate"], run_dir / "reliability.png")

    # 7. save the verifier (adapter + head + args) for cotrain.py / evaluate.py
    folder = save_verifier(model, head, args, task, run_dir)
    print(f"verifier: {folder}  (load_verifier('{run_dir}'))\nmetrics: {run_dir / 'metrics.jsonl'}, "
          f"{run_dir / 'eval_metrics.json'}" + (f", {run_dir / 'reliability.png'}" if plotted else "")
          + f"\ndata cache: {cache_path}  (the RL questions for cotrain.py: rl_questions(records, "
          f"{args.verifier_fraction}, split_seed={args.split_seed}))")
    plot_run(run_dir)  # training_curves.png (needs matplotlib)
    finish_tracker()  # --report-to: flush and close
    return report


if __name__ == "__main__":
    with clean_exits("--dataset"):  # Ctrl-C / SIGTERM: finish the write in progress, exit with a note on --resume
        main(parse_args(Args))
