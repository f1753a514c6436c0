"""train_verifier.py: train MAPoRL's verifier, a model of P(answer is correct | question, answer).

In MAPoRL (arXiv 2502.18439) a learned verifier scores every answer of a debate; its probability
of correctness is the co-training reward (cotrain.py --scorer verifier). By the paper's Theorem 1
the cross-entropy-optimal verifier outputs the true probability that an answer is correct, so a
good verifier is calibrated. Here it is one LoRA adapter and a linear head on the policy's base.
  1. split the train questions by a seeded hash: the verifier's (a slice held out) and cotrain.py's
  2. sample K answers per question with the debate's turn-1 prompt; label them; cache them as JSONL
  3. balance each question to m correct + m wrong answers, so it cannot learn question difficulty
  4. build the adapter and the head; 5. train them with token-level BCE at every answer token
  6. measure accuracy, AUROC, Brier score and ECE on the unbalanced held-out answers
  7. save it: load_verifier(RUN_DIR) and score(v, questions, answers) give P(correct)

Simplifications and differences from the authors' pipeline:
  1) no prompted augmentation ("a wrong answer which seems right ..."): only the turn-1 prompt is
     sampled, plus the gold solution, so m can be below the authors' n = 10 (--min-per-label 10
     gives their strict rule);
  2) the split hashes the question text: it does not depend on --num-questions or the row order;
  3) the head is common.ValueHead (with a bias, zero-initialised: every score starts at 0.5);
  4) the score is read at the last token of the assistant turn as the chat template renders it;
  5) one process: no reward server, no DeepSpeed.
Details, and how to read the measurements: docs/verifier.md.

CPU smoke run (the tiny random model cannot answer; --unparsable-wrong makes those the wrong ones):
python train_verifier.py --model tiny --num-questions 40 \\
    --samples-per-question 4 --max-new-tokens 32 --heldout-fraction 0.3 \\
    --max-steps 10 --unparsable-wrong

CPU, SmolLM2-135M, offline arithmetic (sampled at T = 0.7: at the authors' T ~ 1.4 it babbles):
python train_verifier.py --num-questions 60 --samples-per-question 6 \\
    --max-new-tokens 128 --temperature-min 0.7 --temperature-max 0.7 \\
    --heldout-fraction 0.3 --max-steps 20 --batch-size 4

GPU, paper scale (QLoRA Phi-3 on GSM8K, 100 samples per question as the authors):
python train_verifier.py --model microsoft/Phi-3-mini-128k-instruct \\
    --quant 4bit --dtype bfloat16 --dataset gsm8k --samples-per-question 100 \\
    --generate-batch-size 100 --epochs 1
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

from common import (ValueHead, adapter_parameters, add_adapters, chat_prompt, extract_answer,
                    generate, hidden_size, load_model, masked_mean)
from nanomarl.cli import arg_error, check_numbers, parse_args
from nanomarl.distributed import default_device, is_main_process, seed_everything
from nanomarl.models import (adapter_state_dict, check_device, check_model_name,
                             load_adapter_state_dict, load_adapters, load_tokenizer, save_adapters)
from nanomarl.runs import (clean_exits, format_metrics, load_checkpoint, log_metrics, resumed_args,
                           rng_state, save_checkpoint, set_restart_note, set_rng_state,
                           set_torch_threads, start_run)
from nanomarl.tasks.debate import dataset_options, load_task, read_jsonl, step_indices
from nanomarl.tasks.debate_prompts import turn1_prompt
from nanomarl.trackers import finish_tracker, plot_run

ADAPTER = "verifier"  # the verifier's LoRA adapter name (also when it shares the policy's base)


@dataclass
class Args:
    # ---- run ----
    seed: int = 0  # seeds sampling, balancing, the LoRA/head init and the batch order
    output_dir: str = ""  # run folder (default runs/train_verifier-<time>-s<seed>)
    resume: str = ""  # continue this run folder; the flags typed now override its settings
    device: str = ""  # cpu | cuda | cuda:N (default: cuda if available, else cpu)
    threads: int = 0  # torch CPU threads (0: OMP_NUM_THREADS, else the cores left free)
    # ---- model ----
    model: str = "smollm2-135m"  # the policy's base: tiny | smollm2-135m | hub id | path
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # weights and compute dtype
    quant: Literal["none", "4bit", "8bit"] = "none"  # 4bit: QLoRA, nf4
    fast: bool = True  # sampling's fast path (CUDA: the static-cache decoder); --no-fast: plain
    lora_r: int = 16  # LoRA rank of the verifier adapter (authors: 16)
    lora_alpha: int = 32  # LoRA alpha (authors: 32)
    max_length: int = 550  # tokens of [prompt ; answer], cut at the prompt's start (authors: 550)
    # ---- questions ----
    dataset: str = "arith"  # gsm8k | anli[:r1|r2|r3] | jsonl:PATH | arith (offline): train split
    dataset_config: str = ""  # hub id: its configuration (main); reasoning-gym:NAME: key=value,...
    question_field: str = "question"  # hub id or local file: the column holding the question
    answer_field: str = "answer"  # hub id or local file: the column holding the gold answer
    dataset_task: Literal["math", "nli"] = "math"  # hub id or local file: how the gold answer reads
    num_questions: int = 0  # load the first N train questions before splitting (0 = all)
    verifier_fraction: float = 0.3  # verifier's share of train questions; cotrain.py's: the rest
    heldout_fraction: float = 0.1  # share of the verifier's questions held out to measure it
    split_seed: int = 0  # seeds the question split; cotrain.py reads it from the saved verifier
    skip_bad_rows: bool = False  # skip malformed dataset rows instead of stopping
    # ---- sampling the answers ----
    samples_per_question: int = 32  # K answers sampled per question (authors: 100 for GSM8K)
    temperature_min: float = 1.3  # temperature ~ U(min, max), drawn per batch (authors: 1.3)
    temperature_max: float = 1.5  # (authors: 1.5)
    top_p: float = 0.9  # nucleus sampling (authors: 0.9)
    max_new_tokens: int = 300  # answer length limit (authors: 300 GSM8K, 100 ANLI)
    prompt_style: Literal["short", "default", "phi3"] = "default"  # turn-1 prompt: cotrain.py's
    generate_batch_size: int = 32  # answers generated per call
    data_cache: str = ""  # JSONL of labelled answers (default RUN_DIR/verifier_data.jsonl)
    # ---- balancing ----
    max_per_label: int = 10  # n: at most n correct and n wrong answers per question (authors: 10)
    min_per_label: int = 1  # drop a question with fewer correct or wrong answers (authors: 10)
    add_gold_solution: bool = True  # the gold solution joins the correct answers when fewer than n
    unparsable_wrong: bool = False  # count unparsable answers as wrong (default: left out)
    # ---- training ----
    lr: float = 1e-4  # AdamW learning rate
    batch_size: int = 8  # answers per optimiser step (authors: 4 x 2 accumulation)
    micro_batch_size: int = 8  # answers per forward/backward (gradient accumulation inside a step)
    epochs: int = 1  # passes over the balanced training answers (authors: 1)
    max_steps: int = 0  # optimiser steps (0 = epochs x steps per epoch)
    warmup_steps: int = 5  # linear warm-up, then linear decay to 0 (authors: 5)
    max_grad_norm: float = 1.0  # gradient clipping
    # ---- logging and measuring ----
    log_every: int = 10  # print a one-line summary every N steps
    sample_every: int = 50  # print one scored training answer every N steps (0 = never)
    report_to: Literal["none", "wandb", "trackio", "tensorboard"] = "none"  # also log there
    eval_every: int = 0  # measure on the held-out answers every N steps (0 = at the end only)
    save_every: int = 100  # write checkpoint.pt every N steps
    eval_batch_size: int = 16  # answers per scoring forward


def check_args(args: Args):
    """Every refusal of a setting, before anything heavy loads: one line `error: --flag: ...`."""
    check_numbers(args, positive=("lora_r", "lora_alpha", "lr", "epochs", "top_p"),
                  non_negative=("num_questions", "max_steps", "warmup_steps", "max_grad_norm",
                                "sample_every", "eval_every"), unit_interval=("top_p",))
    check_model_name(args.model, "--model")
    check_device(args.device)
    if not 0 < args.verifier_fraction < 1:
        arg_error("--verifier-fraction", f"must be in (0, 1), got {args.verifier_fraction}")
    if not 0 < args.heldout_fraction < 1:
        arg_error("--heldout-fraction", f"must be in (0, 1), got {args.heldout_fraction}")
    if not 0 < args.temperature_min <= args.temperature_max:
        arg_error("--temperature-min", "need 0 < --temperature-min <= --temperature-max")
    for flag in ("samples_per_question", "max_per_label", "min_per_label", "batch_size",
                 "micro_batch_size", "generate_batch_size", "eval_batch_size", "max_new_tokens",
                 "max_length", "log_every", "save_every"):
        if getattr(args, flag) < 1:
            arg_error("--" + flag.replace("_", "-"), f"must be >= 1, got {getattr(args, flag)}")


# ----------------------------------------------------------------------------------------------
# 1. Questions: the verifier's split, disjoint from the RL questions
# ----------------------------------------------------------------------------------------------


def question_split(question: str, verifier_fraction: float, heldout_fraction: float,
                   split_seed: int) -> str:
    """'verifier_heldout' | 'verifier_train' | 'rl' for one question, from a seeded hash of its
    text: u ~ U[0, 1) per question; [0, f*h) held out, [f*h, f) verifier training, [f, 1) RL.
    Independent of the dataset's order and size; a repeated question always lands on one side."""
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
        part = question_split(record["question"], verifier_fraction, heldout_fraction, split_seed)
        parts[part].append(record)
    return parts


def rl_questions(records: list[dict], verifier_fraction: float, split_seed: int = 0) -> list[dict]:
    """The questions cotrain.py may train on: every train question the verifier did not see."""
    return [r for r in records
            if question_split(r["question"], verifier_fraction, 0.0, split_seed) == "rl"]


def load_questions(args: Args) -> tuple[list[dict], dict[str, list[dict]]]:
    """The train split, and its parts; a repeated question counts once. Refuses an empty part."""
    records = load_task(args.dataset, "train", args.num_questions or None, args.seed,
                        args.skip_bad_rows, **dataset_options(args))
    parts = split_questions(records, args.verifier_fraction, args.heldout_fraction, args.split_seed)
    for name in ("verifier_train", "verifier_heldout"):
        parts[name] = list({r["question"]: r for r in parts[name]}.values())
    print(f"{args.dataset}: {len(records)} train questions -> verifier "
          f"{len(parts['verifier_train'])} + held out {len(parts['verifier_heldout'])}, "
          f"RL (cotrain.py) {len(parts['rl'])}")
    if not parts["verifier_train"]:
        arg_error("--verifier-fraction",
                  f"no verifier questions among {len(records)}: raise it or --num-questions")
    if not parts["verifier_heldout"]:
        arg_error("--heldout-fraction", f"no held-out questions among the "
                  f"{len(parts['verifier_train'])} verifier questions: raise it or --num-questions")
    return records, parts


# ----------------------------------------------------------------------------------------------
# 2. Answers: sample K per question from the base model, label them, cache them
# ----------------------------------------------------------------------------------------------


def label_answer(answer: str, gold: str, task: str) -> tuple[int, bool]:
    """(label, parsed): 1 if the extracted answer equals the gold, else 0; unparsable is wrong."""
    extracted = extract_answer(answer, task)
    return int(extracted is not None and extracted == gold), extracted is not None


def read_cache(path: Path, generator: str, style: str = "default") -> dict[str, list[dict]]:
    """question text -> its cached samples. A truncated last line (a killed write) is skipped."""
    if not path.exists():
        return {}
    rows, skipped = read_jsonl(path, ("question", "answer", "label", "parsed", "generator"),
                               skip_bad_rows=True)
    if skipped:
        print(f"data cache {path}: skipped {skipped} unreadable line(s)")
    by_question = {}
    for row in rows:
        if row["generator"] != generator:
            raise SystemExit(f"error: --data-cache {path} holds answers sampled from "
                             f"{row['generator']!r}, not from --model {generator!r}; pass another "
                             "--data-cache (or delete that file)")
        cached_style = row.get("prompt_style", "default")  # a cache from before the flag: default
        if cached_style != style:
            raise SystemExit(f"error: --data-cache {path} holds answers to --prompt-style "
                             f"{cached_style}, not {style}; pass another "
                             "--data-cache (or delete that file)")
        by_question.setdefault(row["question"], []).append(row)
    return by_question


def sample_answers(model, tokenizer, records: list[dict], args: Args,
                   cache_path: Path) -> dict[str, list[dict]]:
    """K answers per question from the base model (no adapter), at T ~ U(min, max) per batch and
    top-p. Questions already in the cache are reused; missing answers are sampled and appended."""
    cache = read_cache(cache_path, args.model, args.prompt_style)
    missing = [(r, args.samples_per_question - len(cache.get(r["question"], []))) for r in records]
    missing = [(r, k) for r, k in missing if k > 0]
    rng = random.Random(f"temperature-{args.seed}-{len(cache)}")
    todo = [r for r, k in missing for _ in range(k)]  # one prompt per answer still to sample
    if todo:
        print(f"sampling {len(todo)} answers for {len(missing)} questions into {cache_path}")
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    batches = range(0, len(todo), args.generate_batch_size)
    for start in tqdm(batches, desc="sampling", disable=not todo):
        batch = todo[start:start + args.generate_batch_size]
        temperature = rng.uniform(args.temperature_min, args.temperature_max)
        prompts = [chat_prompt(tokenizer, [{"role": "user",
                                            "content": turn1_prompt(r["question"], r["task"],
                                                                    args.prompt_style)}])
                   for r in batch]
        out = generate(model, tokenizer, prompts, None, args.max_new_tokens,
                       temperature=temperature, top_p=args.top_p, fast=args.fast)
        lines = []
        for record, ids, mask in zip(batch, out["response_ids"], out["response_mask"]):
            answer = tokenizer.decode(ids[mask.bool()], skip_special_tokens=True)
            label, parsed = label_answer(answer, record["answer"], record["task"])
            row = dict(question=record["question"], task=record["task"], gold=record["answer"],
                       answer=answer, label=label, parsed=parsed, temperature=round(temperature, 4),
                       generator=args.model, prompt_style=args.prompt_style)
            cache.setdefault(record["question"], []).append(row)
            lines.append(json.dumps(row) + "\n")
        with open(cache_path, "a", encoding="utf-8") as f:  # per batch: a kill loses one batch
            f.write("".join(lines))
            f.flush()
            os.fsync(f.fileno())
    return {r["question"]: cache[r["question"]][:args.samples_per_question] for r in records}


def sample_counts(samples: dict[str, list[dict]]) -> dict:
    """How many sampled answers are correct, wrong, and (among the wrong) unparsable."""
    answers = [a for per_question in samples.values() for a in per_question]
    return dict(answers=len(answers), correct=sum(a["label"] for a in answers),
                wrong=sum(1 - a["label"] for a in answers),
                unparsable=sum(not a["parsed"] for a in answers))


# ----------------------------------------------------------------------------------------------
# 3. Data: balance the training questions; the held-out answers stay as sampled
# ----------------------------------------------------------------------------------------------


def balance(records: list[dict], samples: dict[str, list[dict]], max_per_label: int,
            min_per_label: int, add_gold: bool, seed: int,
            unparsable_wrong: bool = False) -> tuple[list[dict], dict]:
    """Per question keep m correct and m wrong answers, m = min(n, #correct, #wrong) (authors:
    exactly n = 10 each). The gold solution (record['solution'], where the dataset has one) joins
    the correct answers when fewer than n were sampled. Questions with m < min_per_label are
    dropped. An unparsable answer is left out (the authors' label -1), or counted as wrong with
    unparsable_wrong. Returns (rows, counts); counts['gold_used'] is how many kept rows are gold
    solutions; 'wrong_parsed' and 'wrong_unparsable' count the sampled wrong answers both ways."""
    rng = random.Random(f"balance-{seed}")
    rows = []
    counts = dict(questions_kept=0, questions_dropped=0, dropped_few_correct=0, dropped_few_wrong=0,
                  gold_used=0, wrong_parsed=0, wrong_unparsable=0)
    for record in records:
        answers = samples.get(record["question"], [])
        correct = [a for a in answers if a["label"] == 1]
        wrong = [a for a in answers if a["label"] == 0 and (a["parsed"] or unparsable_wrong)]
        counts["wrong_parsed"] += sum(1 for a in answers if a["label"] == 0 and a["parsed"])
        counts["wrong_unparsable"] += sum(1 for a in answers if a["label"] == 0 and not a["parsed"])
        if add_gold and len(correct) < max_per_label and record.get("solution"):
            correct.append(dict(question=record["question"], task=record["task"], label=1,
                                answer=record["solution"], parsed=True, gold_solution=True))
        m = min(max_per_label, len(correct), len(wrong))
        if m < min_per_label:
            counts["questions_dropped"] += 1
            few = "dropped_few_correct" if len(correct) < min_per_label else "dropped_few_wrong"
            counts[few] += 1
            continue
        chosen = rng.sample(correct, m) + rng.sample(wrong, m)
        counts["questions_kept"] += 1
        counts["gold_used"] += sum(1 for a in chosen if a.get("gold_solution"))
        rows += chosen
    return rows, counts


def build_data(model, tokenizer, parts: dict[str, list[dict]], args: Args, cache_path: Path):
    """Stages 2-3: (balanced training rows, held-out rows, data statistics). The held-out answers
    are not balanced: they are the mix of answers whose score training uses."""
    t0 = time.time()
    train_samples = sample_answers(model, tokenizer, parts["verifier_train"], args, cache_path)
    heldout_samples = sample_answers(model, tokenizer, parts["verifier_heldout"], args, cache_path)
    train_rows, balance_counts = balance(parts["verifier_train"], train_samples, args.max_per_label,
                                         args.min_per_label, args.add_gold_solution, args.seed,
                                         args.unparsable_wrong)
    heldout_rows = [a for answers in heldout_samples.values() for a in answers
                    if a["parsed"] or args.unparsable_wrong]
    sampled = sample_counts({**train_samples, **heldout_samples})
    heldout_labels = [r["label"] for r in heldout_rows] or [float("nan")]
    data_stats = {**{f"data/sampled_{k}": v for k, v in sampled.items()},
                  **{f"data/{k}": v for k, v in balance_counts.items()},
                  "data/train_answers": len(train_rows), "data/heldout_answers": len(heldout_rows),
                  "data/heldout_base_rate": float(np.mean(heldout_labels)),
                  "timing/sampling_s": time.time() - t0}
    print("data: " + "  ".join(f"{k[5:]}={v:.4g}" if isinstance(v, float) else f"{k[5:]}={v}"
                               for k, v in data_stats.items() if k.startswith("data/")))
    if not train_rows:
        raise SystemExit("error: no training question could be balanced (every question lacks "
                         "correct or wrong answers): sample more (--samples-per-question), lower "
                         "--min-per-label, or count unparsable answers as wrong "
                         "(--unparsable-wrong)")
    if not heldout_rows:
        raise SystemExit("error: every held-out answer is unparsable, nothing to measure: sample "
                         "more (--samples-per-question), raise --heldout-fraction, or pass "
                         "--unparsable-wrong")
    return train_rows, heldout_rows, data_stats


# ----------------------------------------------------------------------------------------------
# 4. The verifier: [user: turn-1 prompt, assistant: answer] -> LoRA base -> linear head -> sigmoid
# ----------------------------------------------------------------------------------------------


@dataclass
class Verifier:
    model: object  # a PeftModel with the verifier's adapter (perhaps beside the policy's)
    tokenizer: object
    head: ValueHead  # Linear(hidden, 1) on the last hidden state; sigmoid(head) = P(correct)
    task: str  # default task for the turn-1 prompt ('math' | 'nli')
    max_length: int
    args: dict  # the Args the verifier was trained with


def encode_pairs(tokenizer, questions: list[str], answers: list[str], tasks: list[str],
                 max_length: int, device, style: str = "default") -> dict[str, torch.Tensor]:
    """Render each pair as the chat [user: turn1_prompt(q, style), assistant: a]. The query: prompt
    up to the assistant header (left-padded); the response is the assistant turn as the template
    renders it, i.e. the answer and its end-of-turn tokens (right-padded). A pair over max_length
    loses tokens from the query's start first."""
    queries, responses = [], []
    for question, answer, task in zip(questions, answers, tasks):
        user = [{"role": "user", "content": turn1_prompt(question, task, style)}]
        prompt = chat_prompt(tokenizer, user)
        full = tokenizer.apply_chat_template(user + [{"role": "assistant", "content": answer}],
                                             tokenize=False)
        if not full.startswith(prompt):
            raise ValueError("the chat template does not render the generation prompt as a prefix "
                             "of the full chat")
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
        query_mask=torch.tensor([[0] * (q_len - len(q)) + [1] * len(q) for q in queries],
                                device=device),
        response_ids=torch.tensor([r + [pad] * (r_len - len(r)) for r in responses], device=device),
        response_mask=torch.tensor([[1.0] * len(r) + [0.0] * (r_len - len(r)) for r in responses],
                                   device=device),
    )


def verifier_logits(model, head, batch: dict[str, torch.Tensor],
                    adapter_names: list[str] | None) -> torch.Tensor:
    """Head logits at every response token: [B, Lr] (garbage where response_mask is 0).

    Unlike a value function V(s) (read *before* each token), the verifier reads the hidden state
    *at* each answer token, so the last one has seen the whole answer. adapter_names: one per row
    (None: the active adapter)."""
    q_len = batch["query_ids"].shape[1]
    input_ids = torch.cat([batch["query_ids"], batch["response_ids"]], dim=1)
    attention_mask = torch.cat([batch["query_mask"].long(), batch["response_mask"].long()], dim=1)
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)  # left padding changes nothing
    extra = {} if adapter_names is None else {"adapter_names": list(adapter_names)}
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                output_hidden_states=True, logits_to_keep=1, use_cache=False, **extra)
    return head(out.hidden_states[-1][:, q_len:])


def verifier_loss(logits: torch.Tensor, response_mask: torch.Tensor,
                  labels: torch.Tensor) -> torch.Tensor:
    """Token-level BCE (the authors' train_reward.py): BCE(sigmoid(logit_t), y) at every answer
    token, the answer's 0/1 label y repeated, averaged over each answer's tokens, then over the
    batch. logits/mask [B, Lr], labels [B]."""
    targets = labels.float()[:, None].expand_as(logits)
    bce = F.binary_cross_entropy_with_logits(logits.float(), targets, reduction="none")
    return masked_mean(bce, response_mask, dim=1).mean()


def last_token_logits(logits: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """The logit at each answer's last token: [B, Lr] -> [B] (responses are right-padded)."""
    last = response_mask.sum(1).long() - 1
    return logits.gather(1, last[:, None]).squeeze(1)


@torch.no_grad()
def score(verifier: Verifier, questions: list[str], answers: list[str], batch_size: int = 8,
          tasks: list[str] | None = None) -> torch.Tensor:
    """P(correct) for each (question, answer): sigmoid of the head at the answer's last token. [N]
    float, CPU. questions are the dataset's question texts (wrapped here in the turn-1 prompt);
    tasks default to the verifier's own ('math' or 'nli')."""
    if len(questions) != len(answers):
        raise ValueError(f"score(): {len(questions)} questions but {len(answers)} answers")
    tasks = tasks or [verifier.task] * len(questions)
    device = next(verifier.head.parameters()).device
    probs = []
    for i in range(0, len(questions), batch_size):
        batch = encode_pairs(verifier.tokenizer, questions[i:i + batch_size],
                             answers[i:i + batch_size], tasks[i:i + batch_size],
                             verifier.max_length, device,
                             verifier.args.get("prompt_style", "default"))
        adapter_names = [ADAPTER] * batch["query_ids"].shape[0]
        logits = verifier_logits(verifier.model, verifier.head, batch, adapter_names)
        probs.append(torch.sigmoid(last_token_logits(logits, batch["response_mask"])).float().cpu())
    return torch.cat(probs) if probs else torch.zeros(0)


def lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up over warmup_steps, then linear decay to 0 at total_steps (the HF default)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def build_verifier(model, tokenizer, task: str, args: Args, device, num_rows: int):
    """A LoRA adapter on the frozen base and a zero-initialised head; AdamW over those two only
    (the authors' betas), warm-up then linear decay. Returns (verifier, optimizer, scheduler, total
    steps)."""
    model = add_adapters(model, [ADAPTER], r=args.lora_r, alpha=args.lora_alpha)
    head = ValueHead(hidden_size(model)).to(device)
    params = adapter_parameters(model, ADAPTER) + list(head.parameters())
    optimizer = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    total_steps = args.max_steps or args.epochs * math.ceil(num_rows / args.batch_size)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, args.warmup_steps, total_steps))
    verifier = Verifier(model=model, tokenizer=tokenizer, head=head, task=task,
                        max_length=args.max_length, args=dataclasses.asdict(args))
    return verifier, optimizer, scheduler, total_steps


# ----------------------------------------------------------------------------------------------
# 5. Training: token-level BCE over each answer's span, one AdamW step per batch
# ----------------------------------------------------------------------------------------------


def save_training_state(run_dir: Path, step: int, verifier: Verifier, optimizer, scheduler):
    save_checkpoint(run_dir / "checkpoint.pt",
                    dict(step=step, adapter=adapter_state_dict(verifier.model, ADAPTER),
                         head=verifier.head.state_dict(), optimizer=optimizer.state_dict(),
                         scheduler=scheduler.state_dict(), rng=rng_state()))


def load_training_state(run_dir: Path, verifier: Verifier, optimizer, scheduler) -> int:
    """--resume: the adapter, head, optimiser, schedule and random state; returns the step."""
    state = load_checkpoint(run_dir / "checkpoint.pt")
    load_adapter_state_dict(verifier.model, ADAPTER, state["adapter"])
    verifier.head.load_state_dict(state["head"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    set_rng_state(state["rng"])
    print(f"resumed {run_dir} at step {state['step']}")
    return state["step"]


def train_step(verifier: Verifier, optimizer, scheduler, rows: list[dict], args: Args, device):
    """One optimiser step on a batch of answers, in micro-batches. Returns (loss, the last-token
    probabilities, the gradient norm, the learning rate used)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    loss_sum, probs = 0.0, []
    for start in range(0, len(rows), args.micro_batch_size):
        micro = rows[start:start + args.micro_batch_size]
        batch = encode_pairs(verifier.tokenizer, [r["question"] for r in micro],
                             [r["answer"] for r in micro], [r["task"] for r in micro],
                             args.max_length, device, args.prompt_style)
        labels = torch.tensor([r["label"] for r in micro], device=device)
        # the only adapter is active (and 4-bit safe): no per-row adapter names
        logits = verifier_logits(verifier.model, verifier.head, batch, None)
        loss = verifier_loss(logits, batch["response_mask"], labels) * len(micro) / len(rows)
        loss.backward()
        loss_sum += loss.item()
        probs += torch.sigmoid(last_token_logits(logits.detach(), batch["response_mask"])).tolist()
    grad_norm = torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
    lr = scheduler.get_last_lr()[0]  # the rate this step uses
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_sum, probs, float(grad_norm), lr


def train(verifier: Verifier, optimizer, scheduler, train_rows: list[dict],
          heldout_rows: list[dict], args: Args, run_dir: Path, start_step: int, total_steps: int):
    """The training loop: a step, its metrics, the periodic prints, evaluations and checkpoints."""
    device = next(verifier.head.parameters()).device
    steps_per_epoch = math.ceil(len(train_rows) / args.batch_size)
    print(f"training the verifier: {len(train_rows)} answers, {total_steps} steps of "
          f"{args.batch_size} ({steps_per_epoch} per epoch)")
    bar = tqdm(range(start_step, total_steps), desc="verifier", initial=start_step,
               total=total_steps)
    for step in bar:
        indices = step_indices(len(train_rows), args.batch_size, step, f"batches-{args.seed}")
        rows = [train_rows[i] for i in indices]
        loss, probs, grad_norm, lr = train_step(verifier, optimizer, scheduler, rows, args, device)

        labels = [r["label"] for r in rows]
        correct_probs = [p for p, y in zip(probs, labels) if y == 1]
        wrong_probs = [p for p, y in zip(probs, labels) if y == 0]
        nan = float("nan")
        metrics = {"step": step + 1, "train/loss": loss,
                   "train/accuracy": accuracy_at_half(probs, labels),
                   "train/score_correct": float(np.mean(correct_probs)) if correct_probs else nan,
                   "train/score_wrong": float(np.mean(wrong_probs)) if wrong_probs else nan,
                   "train/grad_norm": grad_norm, "train/lr": lr,
                   "train/epoch": (step + 1) / steps_per_epoch}
        bar.set_postfix(loss=f"{loss:.4f}", acc=f"{metrics['train/accuracy']:.2f}")
        done = step + 1
        if done % args.log_every == 0 or done == total_steps:
            keys = [k for k in metrics if k != "step"]
            tqdm.write(f"step {done}: " + format_metrics(metrics, keys))
        if args.sample_every and done % args.sample_every == 0:
            tqdm.write(f"--- sample (label {rows[0]['label']}, score {probs[0]:.3f}) ---\n"
                       f"Q: {rows[0]['question'][:300]}\nA: {rows[0]['answer'][-300:]}\n---")
        if args.eval_every and done % args.eval_every == 0 and done < total_steps:
            result = evaluate(verifier, heldout_rows, args, run_dir, done)
            tqdm.write(f"step {done} held-out: "
                       + format_metrics(result["verifier"], list(result["verifier"])))
        log_metrics(run_dir, metrics)
        if done % args.save_every == 0 or done == total_steps:
            save_training_state(run_dir, done, verifier, optimizer, scheduler)


# ----------------------------------------------------------------------------------------------
# 6. Measurements: accuracy at 0.5, AUROC, Brier, ECE, reliability diagram
# ----------------------------------------------------------------------------------------------


def _as_arrays(probs, labels) -> tuple[np.ndarray, np.ndarray]:
    probs = np.asarray(probs.tolist() if isinstance(probs, torch.Tensor) else probs,
                       dtype=np.float64)
    labels = np.asarray(labels.tolist() if isinstance(labels, torch.Tensor) else labels,
                        dtype=np.float64)
    if probs.shape != labels.shape or probs.ndim != 1:
        raise ValueError(f"probs {probs.shape} and labels {labels.shape} must be two vectors of "
                         "the same length")
    return probs, labels


def accuracy_at_half(probs, labels) -> float:
    """Fraction of answers classified right when 'correct' means prob >= 0.5."""
    probs, labels = _as_arrays(probs, labels)
    return float(np.mean((probs >= 0.5) == (labels == 1)))


def auroc(probs, labels) -> float:
    """Area under the ROC curve = P(score of a random correct answer > score of a random wrong one),
    ties counting 1/2: the Mann-Whitney U statistic / (n_pos * n_neg), from average ranks. NaN if
    a class is missing."""
    probs, labels = _as_arrays(probs, labels)
    n_pos, n_neg = int((labels == 1).sum()), int((labels == 0).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(probs, return_inverse=True, return_counts=True)
    average_rank = np.cumsum(counts) - (counts - 1) / 2  # 1-based rank per value, ties averaged
    ranks = average_rank[inverse]
    u = ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


def brier(probs, labels) -> float:
    """Mean squared error of the probabilities: mean (p - y)^2."""
    probs, labels = _as_arrays(probs, labels)
    return float(np.mean((probs - labels) ** 2))


def reliability_bins(probs, labels, n_bins: int = 10) -> list[dict]:
    """Equal-width bins [k/n, (k+1)/n) (the last includes 1.0): count, mean probability, fraction
    correct."""
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
    """ECE = sum over bins of (bin count / N) * |fraction correct - mean probability|
    (Guo et al. 2017)."""
    n = len(_as_arrays(probs, labels)[0])
    return float(sum(b["count"] / n * abs(b["accuracy"] - b["confidence"])
                     for b in reliability_bins(probs, labels, n_bins) if b["count"]))


def calibration_metrics(probs, labels) -> dict:
    return dict(accuracy=accuracy_at_half(probs, labels), auroc=auroc(probs, labels),
                brier=brier(probs, labels), ece=expected_calibration_error(probs, labels, 10))


def plot_reliability(probs, labels, base_rate: float, path: Path) -> bool:
    """Reliability diagram (fraction correct vs mean probability per bin, point size ~ count) and a
    histogram of the scores by label. Returns False (and draws nothing) without matplotlib."""
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
    confidence, accuracy = [b["confidence"] for b in bins], [b["accuracy"] for b in bins]
    ax.plot(confidence, accuracy, "-", color="C0")
    ax.scatter(confidence, accuracy, s=sizes, color="C0", zorder=3,
               label="verifier (size ~ answers in bin)")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="mean verifier probability in bin",
           ylabel="fraction correct in bin",
           title=f"reliability (ECE {expected_calibration_error(probs, labels):.3f})")
    ax.legend(loc="upper left", fontsize=8)
    edges = np.linspace(0, 1, 21)
    ax_hist.hist(probs[labels == 1], bins=edges, alpha=0.6, label="correct answers", color="C2")
    ax_hist.hist(probs[labels == 0], bins=edges, alpha=0.6, label="wrong answers", color="C3")
    ax_hist.set(xlabel="verifier probability", ylabel="answers",
                title=f"scores (AUROC {auroc(probs, labels):.3f})")
    ax_hist.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def measure(verifier: Verifier, heldout: list[dict], batch_size: int) -> dict:
    """Score every held-out answer; the verifier's metrics and the constant base-rate baseline's."""
    probs = score(verifier, [r["question"] for r in heldout], [r["answer"] for r in heldout],
                  batch_size, [r["task"] for r in heldout])
    labels = [r["label"] for r in heldout]
    base_rate = float(np.mean(labels))
    return dict(probs=probs, labels=labels, base_rate=base_rate,
                verifier=calibration_metrics(probs, labels),
                baseline=calibration_metrics([base_rate] * len(labels), labels))


def evaluate(verifier: Verifier, heldout_rows: list[dict], args: Args, run_dir: Path,
             step: int) -> dict:
    """measure() on the held-out answers, logged as eval/* and baseline/* at this step."""
    result = measure(verifier, heldout_rows, args.eval_batch_size)
    log_metrics(run_dir, {"step": step, **{f"eval/{k}": v for k, v in result["verifier"].items()},
                          **{f"baseline/{k}": v for k, v in result["baseline"].items()}})
    return result


def final_report(verifier: Verifier, heldout_rows: list[dict], args: Args, run_dir: Path,
                 step: int, data_stats: dict, heldout_questions: int) -> tuple[dict, bool]:
    """The last measurement: eval_metrics.json, a table against the constant baseline, and
    reliability.png. Returns (the report, whether the diagram was drawn)."""
    result = evaluate(verifier, heldout_rows, args, run_dir, step)
    report = dict(step=step, heldout_answers=len(heldout_rows), base_rate=result["base_rate"],
                  verifier=result["verifier"], baseline=result["baseline"], data=data_stats)
    if is_main_process():
        (run_dir / "eval_metrics.json").write_text(json.dumps(report, indent=2))
    print(f"\nheld-out: {len(heldout_rows)} answers to {heldout_questions} questions, "
          f"base rate {result['base_rate']:.3f}")
    print(f"{'':14}{'verifier':>10}{'constant':>10}")
    for name, key in [("accuracy@0.5", "accuracy"), ("AUROC", "auroc"), ("Brier", "brier"),
                      ("ECE (10 bins)", "ece")]:
        print(f"{name:14}{result['verifier'][key]:10.4f}{result['baseline'][key]:10.4f}")
    plotted = plot_reliability(result["probs"], result["labels"], result["base_rate"],
                               run_dir / "reliability.png")
    return report, plotted


# ----------------------------------------------------------------------------------------------
# 7. Saving and loading the verifier (cotrain.py and evaluate.py load it)
# ----------------------------------------------------------------------------------------------


def save_verifier(model, head, args: Args, task: str, run_dir: Path) -> Path:
    """RUN_DIR/verifier/verifier/ (the peft adapter), RUN_DIR/verifier/head.pt (head, task, args)"""
    folder = Path(run_dir) / "verifier"
    save_adapters(model, [ADAPTER], folder)
    save_checkpoint(folder / "head.pt",
                    dict(head=head.state_dict(), task=task, args=dataclasses.asdict(args)))
    return folder


def verifier_folder(path: str | Path) -> Path:
    """The folder holding head.pt and the adapter: path itself, or the run folder's verifier/."""
    nested = Path(path) / "verifier"
    folder = nested if (nested / "head.pt").exists() else Path(path)
    if not (folder / "head.pt").exists() or not (folder / ADAPTER / "adapter_config.json").exists():
        raise SystemExit(f"error: {path} holds no saved verifier (expected verifier/head.pt and "
                         f"verifier/{ADAPTER}/)")
    return folder


def verifier_args(path: str | Path) -> dict:
    """The Args a saved verifier was trained with (its base model, dtype, quant, question split),
    read from its head.pt without loading any model: cotrain.py takes the RL split and the base
    from here."""
    return load_checkpoint(verifier_folder(path) / "head.pt")["args"]


def load_verifier(path: str | Path, device: str = "cpu", base_model=None) -> Verifier:
    """Load a verifier saved by this script (path: its run folder, or the run folder's verifier/).

    base_model=None loads the base named in the verifier's args. base_model=<a PeftModel of the
    same base> (e.g. the policy, with its agents' adapters) gets the verifier as one more adapter:
    one copy of the weights. The caller's adapters keep their requires_grad and stay active; the
    verifier's adapter is frozen, and score() picks it per row by name. `device` only matters when
    the base is loaded here."""
    folder = verifier_folder(path)
    saved = load_checkpoint(folder / "head.pt")
    train_args = saved["args"]
    if base_model is None:
        base = load_model(train_args["model"], train_args["dtype"], train_args["quant"], device)
        model = load_adapters(base, folder, [ADAPTER])
    else:
        model = base_model
        requires_grad = {n: p.requires_grad for n, p in model.named_parameters()}
        # not made active: rows pick it by name
        model.load_adapter(str(folder / ADAPTER), adapter_name=ADAPTER)
        for n, p in model.named_parameters():
            p.requires_grad_(requires_grad.get(n, False))
        model.eval()
    device = next(model.parameters()).device
    head = ValueHead(hidden_size(model)).to(device)
    head.load_state_dict(saved["head"])
    head.requires_grad_(False)
    return Verifier(model=model, tokenizer=load_tokenizer(train_args["model"]), head=head,
                    task=saved["task"], max_length=train_args["max_length"], args=train_args)


def verifier_scorer(args, device: str, team=None):
    """cotrain.py --scorer verifier: fn(records, responses) -> the verifier's probability that each
    answer is right, from the question and the answer (not the discussion). A verifier trained on a
    base of the team (same model, dtype and quant) is loaded onto it as one more adapter."""
    trained = verifier_args(args.verifier)
    key = (trained["model"], trained["dtype"], trained["quant"])
    same = [] if team is None else [model for name, model in zip(team.base_names, team.bases)
                                    if (name, args.dtype, args.quant) == key]
    verifier = load_verifier(args.verifier, device, base_model=same[0] if same else None)
    return lambda records, responses: score(verifier, [r["question"] for r in records], responses,
                                            batch_size=args.forward_batch_size)


def rl_records(args, records: list[dict]) -> list[dict]:
    """cotrain.py --scorer verifier: the questions PPO may train on, those the verifier neither
    trained nor was measured on (MAPoRL footnote 2), split as the verifier's own run split them."""
    trained = verifier_args(args.verifier)
    kept = rl_questions(records, trained["verifier_fraction"], trained["split_seed"])
    print(f"RL questions: {len(kept)} of {len(records)}; the other {len(records) - len(kept)} are "
          f"the verifier's (--verifier-fraction {trained['verifier_fraction']} --split-seed "
          f"{trained['split_seed']} of {args.verifier})")
    if trained.get("dataset") != args.dataset:
        print(f"note: the verifier was trained on {trained.get('dataset')}, RL runs on "
              f"{args.dataset}")
    style = trained.get("prompt_style", "default")
    if style != args.prompt_style:
        print(f"note: the verifier learned answers to the {style} turn-1 prompt; the debate uses "
              f"--prompt-style {args.prompt_style}")
    return kept


# ----------------------------------------------------------------------------------------------
# Main: questions -> sampled answers -> balanced data -> training -> measurements -> saved verifier
# ----------------------------------------------------------------------------------------------


def main(args: Args):
    if args.resume:  # the run's settings + the flags typed now; the checkpoint's shape is fixed
        args = resumed_args(args, "train_verifier",
                            ("model", "lora_r", "lora_alpha", "dataset", "num_questions",
                             "verifier_fraction", "heldout_fraction", "split_seed"),
                            checkpoint=False)
        if not (Path(args.resume) / "checkpoint.pt").is_file():  # stopped before its first one:
            print(f"{args.resume} has no checkpoint yet: starting it again there, with the answers "
                  f"it sampled")  # the same folder again, its cached answers reused
            (Path(args.resume) / "metrics.jsonl").unlink(missing_ok=True)
            args.output_dir, args.resume = args.resume, ""
    check_args(args)
    device = args.device or default_device()
    print(set_torch_threads(args.threads))
    seed_everything(args.seed)

    # 1. questions: the verifier's share of the train split (cotrain.py trains on the rest)
    records, parts = load_questions(args)
    run_dir = start_run(args, "train_verifier")  # after the data checks: a refusal leaves no folder
    task = Counter(r["task"] for r in records).most_common(1)[0][0]

    # 2-3. the policy's base samples K answers per question (cached); training questions balanced
    tokenizer = load_tokenizer(args.model)
    model = load_model(args.model, args.dtype, args.quant, device)
    cache_path = Path(args.data_cache) if args.data_cache else run_dir / "verifier_data.jsonl"
    set_restart_note(f"the answers sampled so far stay in {cache_path}: python train_verifier.py "
                     f"--resume {run_dir} samples only the missing ones")
    train_rows, heldout_rows, data_stats = build_data(model, tokenizer, parts, args, cache_path)

    # 4. the verifier: a LoRA adapter on the same base and a linear head, AdamW over those two
    verifier, optimizer, scheduler, total_steps = build_verifier(model, tokenizer, task, args,
                                                                 device, len(train_rows))
    start_step = load_training_state(run_dir, verifier, optimizer, scheduler) if args.resume else 0
    log_metrics(run_dir, {"step": start_step, **data_stats})

    # 5. training: token-level BCE over each answer's span
    train(verifier, optimizer, scheduler, train_rows, heldout_rows, args, run_dir, start_step,
          total_steps)

    # 6. measure on the held-out answers, next to the constant base-rate baseline
    report, plotted = final_report(verifier, heldout_rows, args, run_dir, total_steps, data_stats,
                                   len(parts["verifier_heldout"]))

    # 7. save the verifier (adapter + head + args) for cotrain.py / evaluate.py
    folder = save_verifier(verifier.model, verifier.head, args, task, run_dir)
    print(f"verifier: {folder}  (load_verifier('{run_dir}'))\n"
          f"metrics: {run_dir / 'metrics.jsonl'}, {run_dir / 'eval_metrics.json'}"
          + (f", {run_dir / 'reliability.png'}" if plotted else "")
          + f"\ndata cache: {cache_path}  (the RL questions for cotrain.py: rl_questions(records, "
          f"{args.verifier_fraction}, split_seed={args.split_seed}))")
    plot_run(run_dir)  # training_curves.png (needs matplotlib)
    finish_tracker()  # --report-to: flush and close
    return report


if __name__ == "__main__":
    with clean_exits("--dataset"):  # Ctrl-C / SIGTERM: finish the write in progress, note --resume
        main(parse_args(Args))
