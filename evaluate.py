"""evaluate.py: the papers' evaluations and baselines for MAPoRL debates and MAGRPO agent teams.

It measures how collaboration changes results, and writes a JSON of every number, a markdown table
and plots. A tool, not a teaching script: read cotrain.py and magrpo.py first.

--mode debate (MAPoRL, arXiv 2502.18439). A agents debate each test question for T turns
(cotrain.run_debate; A and T may differ from training: the paper trains 2 agents, evaluates 3).
  offtheshelf  every agent is the base model (the bases of --run when given)
  maporl       the agents of a cotrain.py run (--run)
  single       a cotrain.py run with --num-agents 1 plays every seat (--single-run)
  sft          "SFT on collaboration trajectories": a LoRA fine-tuned on the off-the-shelf
               debates whose final majority is right plays every seat
  mix          one source per seat (--agents base,RUN,RUN:1,base:MODEL): a heterogeneous team
Per turn: the mean agent accuracy (reported first: an unparsable partner cannot raise it), each
agent's accuracy, the majority vote with tie expectation (the paper's metric, named the authors'
rule: with two agents it scores [right, unparsable] 1 but [right, wrong] 0.5), and the W→R, R→W,
R→R, W→W transitions between consecutive turns (the paper's Figs. 3-4), per agent and pooled; the
tokens each method generated and read per question.
The controls, single-agent self-consistency (nanomarl/self_consistency.py): one agent alone answers
each question A x T times (--sc-samples; sampled at --temperature, also under --greedy) and its
answers are voted by the same rule; and within the paired debate's generated tokens per question.
  sc-base      the base model alone (paired with offtheshelf)
  sc-maporl    --run's agent --sc-agent alone, its turn-1 adapter (paired with maporl)
--dataset reasoning-gym:basic_arithmetic (pip install reasoning-gym, optional): a third party's
phrasing of arith:digits' skill (nanomarl/tasks/debate.py names its settings; --dataset-config
changes them); the questions evaluated are saved in results.json.
--dataset arith:split: each debate also reports nanomarl/split_controls.py's controls, as
cotrain.py's held-out evaluation: silent, shuffled, oracle and wrong partners, the no-information
bound, agent 0's turn-1 policy on the whole question (eval/whole_question), informative messages.
--speakers A,base --readers B,base (alone): who learned what; each pairing plays the speakers'
turn-1 adapters (base: none) before the readers' later ones; the matrix (nanomarl/pairings.py).

--mode magrpo (MAGRPO, arXiv 2508.04652). k = --num-samples joint answers per eval problem:
  single       one model does the whole task (the authors' single-agent prompts)
  parallel     the two MAGRPO prompts answered independently by the base model, concatenated
  pipeline     agent 2 answers after agent 1, seeing its output
  discussion   both answer, then each revises after seeing the other's answer (one round)
  magrpo       the agents of a single-turn magrpo.py run (--run)
  mt-magrpo    the agents of a multi-turn magrpo.py run (--mt-run), with its feedback
--runs A,B,C (alone): cross-play and swapped roles of magrpo.py runs, one per seed
(nanomarl/crossplay.py): agent 0 of run i with agent 1 of run j, each team's agents swapped.
Coding: pass@k (the paper's and the unbiased one), accuracy@k, MaxCoop@k, cooperation rate and
the cooperation scheme of every passing (aux, main) pair; writing: the reward and its levels. Every
method: generation wall-clock, generated tokens and sequential generations per problem.

Choices of ours (the papers' evaluation code is not public, or does not cover these cases), the
exact method definitions and the outputs: docs/evaluation_details.md.

CPU smoke runs with the tiny random model (it cannot answer, so every number is 0):
python evaluate.py --model tiny --limit 4 --max-new-tokens 16 \\
    --sft-questions 4
python evaluate.py --model tiny --limit 4 --max-new-tokens 16 \\
    --methods offtheshelf,sc-base --dataset reasoning-gym:basic_arithmetic
python evaluate.py --mode magrpo --model tiny --limit 2 --num-samples 2 \\
    --k-values 1,2 --max-new-tokens 16

Before and after training, SmolLM2-135M on the offline arithmetic task:
python evaluate.py --run runs/cotrain-RUN --single-run runs/cotrain-A1-RUN \\
    --limit 100 --max-new-tokens 96
python evaluate.py --mode magrpo --run runs/magrpo-RUN \\
    --mt-run runs/magrpo-MT-RUN --max-new-tokens 96 --top-p 0.9 --top-k 50

GPU, paper scale: Phi-3 on GSM8K, 3 agents x 3 turns, greedy; CoopHumanEval with 15 samples:
python evaluate.py --model microsoft/Phi-3-mini-128k-instruct --quant 4bit \\
    --dtype bfloat16 --prompt-style phi3 --dataset gsm8k --limit 0 \\
    --run runs/cotrain-RUN --greedy --batch-size 64
python evaluate.py --mode magrpo --model Qwen/Qwen2.5-Coder-3B \\
    --dtype bfloat16 --dataset coophumaneval --no-chat-template \\
    --num-samples 15 --k-values 1,3,5,10 --temperature 0.6 --top-p 0.6 \\
    --run runs/magrpo-RUN
"""
from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Literal

import torch
from tqdm import tqdm

import common
import cotrain
import magrpo
from common import add_adapters, debate_metrics, load_model
from nanomarl.cli import arg_error, given_fields, parse_args, parse_int_list
from nanomarl.crossplay import crossplay, crossplay_table, summarize
from nanomarl.distributed import default_device, seed_everything
from nanomarl.eval_report import (accuracy_summary, agents_table, control_summary, controls_table,
                                  debate_table, magrpo_columns, plot_debate, plot_magrpo,
                                  samples_table, split_table, write_results)
from nanomarl.eval_runs import (check_args, dataset_source, load_adapter_as, load_run_adapters,
                                read_debate_run, read_run, run_agent, train_overlap, use_run_data,
                                use_run_settings)
from nanomarl.models import load_tokenizer
from nanomarl.pairings import evaluate_pairings, pairings_table, use_pairing_settings
from nanomarl.runs import format_metrics, set_torch_threads, writable_dir
from nanomarl.sample_metrics import code_metrics, writing_metrics
from nanomarl.sandbox import parallel_map
from nanomarl.self_consistency import debate_tokens, sample_answers, self_consistency_metrics
from nanomarl.sft_baseline import correct_debate_examples, sft_base, sft_lora
from nanomarl.split_controls import split_controls
from nanomarl.tasks.baseline_prompts import (discussion_prompts, pipeline_prompt,
                                             single_agent_prompt, split_paragraphs)
from nanomarl.tasks.code import extract_function
from nanomarl.tasks.cooperation import classify_cooperation
from nanomarl.tasks.debate import dataset_options, load_task


@dataclass
class Args:
    # ---- what to evaluate ----
    mode: Literal["debate", "magrpo"] = "debate"  # debate: MAPoRL debates | magrpo: MAGRPO teams
    use_vllm: bool = False  # generation on one vLLM engine holding every adapter (docs/usage.md)
    fast: bool = True  # the trainers' fast paths, the same numbers; --no-fast: the plain code
    methods: str = ""  # comma-separated methods (default: every method the given flags allow)
    dataset: str = ""  # as cotrain.py / magrpo.py ('' = the --run's, else the mode's CPU default)
    output_dir: str = ""  # results folder (default runs/evaluate-<mode>-<time>)
    seed: int = 0  # seeds sampling (re-seeded before every method) and the SFT baseline
    question_seed: int = 0  # draws the debate questions (arith, reasoning-gym) and the SFT ones
    device: str = ""  # cpu | cuda | cuda:N (default: cuda if available, else cpu)
    threads: int = 0  # torch CPU threads (0: OMP_NUM_THREADS, else the cores left free)
    # ---- model and trained agents ----
    model: str = "smollm2-135m"  # base model: tiny | smollm2-135m | hub id | path
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # weights and compute dtype
    quant: Literal["none", "4bit", "8bit"] = "none"  # quantised base (bitsandbytes)
    run: str = ""  # the trained run (debate: cotrain.py; magrpo: a single-turn magrpo.py run)
    mt_run: str = ""  # magrpo: a multi-turn magrpo.py run (--turns 2), method mt-magrpo
    runs: str = ""  # magrpo: magrpo.py runs A,B,... (one per seed): cross-play and swapped roles
    single_run: str = ""  # debate: a cotrain.py run with --num-agents 1, method single
    agents: str = ""  # debate method mix, one per seat: base | base:MODEL | RUN_DIR | RUN_DIR:K
    speakers: str = ""  # debate: runs A,B,... or base whose turn-1 adapters speak, with --readers
    readers: str = ""  # debate: runs or base whose later turns read them (nanomarl/pairings.py)
    split_controls: bool = True  # arith:split: the channel's controls (--no-split-controls: off)
    # ---- generation ----
    greedy: bool = False  # greedy decoding instead of sampling
    temperature: float = 0.3  # sampling temperature (MAPoRL: 0.7 for Phi-3 and Qwen2.5)
    top_p: float = 1.0  # nucleus sampling (MAPoRL: 1.0; magrpo.py trains at 0.9)
    top_k: int = 0  # top-k sampling, 0 = off (MAPoRL: 0; magrpo.py trains at 50)
    max_new_tokens: int = 0  # tokens per answer (0: debate 300, magrpo 256, as the papers)
    chat_template: bool = True  # magrpo: wrap prompts in the chat template, as magrpo.py does
    # ---- debate (MAPoRL) ----
    split: str = "test"  # dataset split
    dataset_config: str = ""  # hub id: its configuration (main); reasoning-gym:NAME: key=value,...
    question_field: str = "question"  # hub id or local file: the column holding the question
    answer_field: str = "answer"  # hub id or local file: the column holding the gold answer
    dataset_task: Literal["math", "nli"] = "math"  # hub id or local file: how the gold answer reads
    limit: int = 50  # debate questions / magrpo problems: the first N of the eval split (0 = all)
    num_agents: int = 3  # A (the paper trains with 2 and evaluates with 3)
    num_turns: int = 3  # T
    batch_size: int = 16  # debates per generate call (each call holds batch_size x A rows)
    generate_batch_size: int = 0  # rows a generate call (0: a chunk's debates, A x --batch-size)
    prompt_style: Literal["short", "default", "phi3"] = "short"  # debate prompts, as cotrain.py
    feedback_in_prompt: bool = False  # agents read a verifier's scores of earlier answers
    verifier: str = ""  # train_verifier.py run folder, for --feedback-in-prompt
    # ---- debate controls: single-agent self-consistency (sc-base, sc-maporl) ----
    sc_samples: int = 0  # answers per question (0: A x T, as many as the debate's)
    sc_max_samples: int = 0  # at most this many to fill the paired debate's tokens (0: 4 x it)
    sc_agent: int = 0  # the agent that answers alone (sc-maporl: of --run; sc-base: its base)
    # ---- debate baseline: SFT on collaboration trajectories ----
    sft_questions: int = 100  # train questions whose off-the-shelf debates are collected
    sft_epochs: int = 2  # passes over the kept (prompt, response) pairs
    sft_lr: float = 1e-4  # AdamW learning rate of the SFT LoRA
    sft_batch_size: int = 8  # pairs per optimiser step
    lora_r: int = 8  # rank of the SFT LoRA
    lora_alpha: int = 16  # alpha of the SFT LoRA
    # ---- magrpo (MAGRPO) ----
    num_samples: int = 5  # k joint answers per problem (authors: 15)
    k_values: str = "1,3,5"  # the k of pass@k, accuracy@k, MaxCoop@k (each <= --num-samples)
    test_timeout: float = 3.0  # seconds per test in the sandbox
    sandbox_memory_mb: int = 512  # address-space limit of a sandboxed program
    sandbox_workers: int = 0  # programs scored in parallel (0 = number of CPU cores)


# 1. MAPoRL debates: who plays each seat (run folders: nanomarl/eval_runs.py) ----------------------


DEBATE_METHODS = ("offtheshelf", "maporl", "single", "sft", "mix", "sc-base", "sc-maporl")
SC_PAIRS = {"sc-base": "offtheshelf", "sc-maporl": "maporl"}  # control -> the debate it matches


class Bases:
    """The base models of the evaluation, each loaded once, with every adapter loaded onto it by
    name."""

    def __init__(self, args, device: str):
        self.args, self.device = args, device
        # base name -> model (a PeftModel once adapters are loaded), tokenizer
        self.models, self.tokenizers = {}, {}
        # (base, adapter name) pairs loaded; run folder -> adapter name prefix
        self.loaded, self.prefixes = set(), {}

    def model(self, name: str):
        if name not in self.models:
            self.models[name] = load_model(name, self.args.dtype, self.args.quant, self.device)
            self.tokenizers[name] = load_tokenizer(name)
        return self.models[name]

    def load_adapter(self, base: str, folder: Path, name: str):
        if (base, name) not in self.loaded:
            self.models[base] = load_adapter_as(self.model(base), folder, name)
            self.loaded.add((base, name))

    def prefix(self, run_dir: str) -> str:
        """A short, distinct adapter-name prefix per run folder (r0_, r1_, ...)."""
        return self.prefixes.setdefault(str(Path(run_dir).resolve()), f"r{len(self.prefixes)}_")


def method_agents(method: str, bases: Bases, args) -> list[tuple[str, list[str]]]:
    """[(base model, [T] adapter names)] for each of the A evaluation agents of a debate method."""
    A, T = args.num_agents, args.num_turns
    if method == "offtheshelf":  # the bases of --run (heterogeneous runs included), no adapters
        models = read_debate_run(args.run, "--run")["models"] if args.run else [args.model]
        return [(models[a % len(models)], ["__base__"] * T) for a in range(A)]
    if method == "maporl":
        return run_agent(bases, args.run, "--run", None, A, T)
    if method == "single":  # trained alone (A = 1): its one agent plays every seat
        if len(read_debate_run(args.single_run, "--single-run")["models"]) != 1:
            arg_error("--single-run", f"{args.single_run} is not a --num-agents 1 run")
        return run_agent(bases, args.single_run, "--single-run", 0, A, T)
    if method == "sft":
        return [(sft_base(args), ["sft"] * T)] * A
    if method in SC_PAIRS:  # one seat: agent --sc-agent's turn-1 policy, or its base
        run = read_debate_run(args.run, "--run") if args.run else dict(models=[args.model])
        if not 0 <= args.sc_agent < len(run["models"]):
            arg_error("--sc-agent", f"must be in 0..{len(run['models']) - 1}, got {args.sc_agent}")
        if method == "sc-base":
            return [(run["models"][args.sc_agent], ["__base__"])]
        return run_agent(bases, args.run, "--run", args.sc_agent, 1, 1)
    sources = [s.strip() for s in args.agents.split(",")]  # mix
    if len(sources) != A:
        arg_error("--agents", f"gives {len(sources)} sources but --num-agents is {A}")
    out = []
    for source in sources:
        if source == "base" or source.startswith("base:"):
            out.append((source[5:] or args.model, ["__base__"] * T))
        else:  # RUN_DIR (this seat's agent of the run) or RUN_DIR:K (the run's agent K)
            head, _, tail = source.rpartition(":")
            run_dir, index = (head, int(tail)) if head and tail.isdigit() else (source, None)
            out.append(run_agent(bases, run_dir, "--agents", index, A, T)[len(out)])
    return out


# 2. Playing the debates (cotrain.run_debate) and the single-agent control -------------------------


def play_debates(bases: Bases, agents: list[tuple[str, list[str]]], records: list[dict], args,
                 scorer, greedy: bool, desc: str = "debates") -> tuple:
    """cotrain.run_debate over the records in chunks of --batch-size (a bar over the questions).
    Returns (the chunks' cotrain.Debate joined (no rollout tensors), per question the tokens
    generated and read, wall-clock seconds)."""
    models = [bases.model(base) for base, _ in agents]
    tokenizers = [bases.tokenizers[base] for base, _ in agents]
    adapter_names = [[names[t] for _, names in agents] for t in range(args.num_turns)]
    chunks, generated, read, seconds = [], [], [], 0.0
    bar = tqdm(total=len(records), desc=desc, unit="question")
    for start in range(0, len(records), args.batch_size):
        chunk = records[start:start + args.batch_size]
        t0 = time.perf_counter()
        debate = cotrain.run_debate(chunk, models, tokenizers, adapter_names, args.max_new_tokens,
                                    args.temperature, greedy=greedy, scorer=scorer,
                                    feedback_in_prompt=args.feedback_in_prompt,
                                    prompt_style=args.prompt_style, logprobs=False,
                                    generate_batch_size=args.generate_batch_size, fast=args.fast)
        seconds += time.perf_counter() - t0
        chunks.append(debate)
        chunk_generated, chunk_read = debate_tokens(debate)
        generated, read = generated + chunk_generated, read + chunk_read
        bar.update(len(chunk))
    bar.close()
    lists = {k: sum((getattr(d, k) for d in chunks), [])  # the chunks' questions, in order
             for k in ("records", "prompts", "responses", "answers")}
    joined = cotrain.Debate(**lists, correct=torch.cat([d.correct for d in chunks]), scores=None,
                            rollout={})
    return joined, generated, read, seconds


def play_self_consistency(bases: Bases, agent: tuple[str, list[str]], records: list[dict], args,
                          budgets: list[int] | None) -> tuple[dict, float]:
    """The control: one agent (base, [its adapter]) answers each record --sc-samples times
    (default A x T), sampled at --temperature, in chunks of --batch-size questions; with budgets,
    more answers up to --sc-max-samples (default 4 x) until the question's budget is spent
    (self_consistency.sample_answers). Returns (answers, responses, tokens, prompt_tokens
    [question][sample], wall-clock seconds)."""
    (base, (adapter,)), n = agent, args.sc_samples or args.num_agents * args.num_turns
    samples, seconds = None, 0.0
    bar = tqdm(total=len(records), desc="control", unit="question")
    for start in range(0, len(records), args.batch_size):
        chunk = slice(start, start + args.batch_size)
        t0 = time.perf_counter()
        play = functools.partial(cotrain.run_debate, fast=args.fast, logprobs=False)
        out = sample_answers(play, bases.model(base), bases.tokenizers[base], adapter,
                             records[chunk], n, budgets[chunk] if budgets else None,
                             args.sc_max_samples or 4 * n, max_new_tokens=args.max_new_tokens,
                             temperature=args.temperature, prompt_style=args.prompt_style,
                             generate_batch_size=(args.generate_batch_size
                                                  or args.batch_size * args.num_agents))
        seconds += time.perf_counter() - t0
        samples = out if samples is None else {k: samples[k] + out[k] for k in samples}
        bar.update(len(records[chunk]))
    bar.close()
    return samples, seconds


# 3. The SFT baseline (its trainer: nanomarl/sft_baseline.py) --------------------------------------


def train_sft_baseline(bases: Bases, args, scorer, exclude: set[str] = frozenset()) -> dict:
    """The "SFT on collaboration trajectories" baseline: off-the-shelf debates on train questions
    (sampled), keep those whose final majority is right, fine-tune a LoRA 'sft' on all their
    (prompt, response) pairs with a masked NLL. Every agent then plays with it. Questions in
    `exclude` (the evaluation's) are never trained on. Returns its statistics."""
    base = sft_base(args)
    loaded = load_task(args.dataset, "train", args.sft_questions, args.question_seed,
                       **dataset_options(args))
    records = [r for r in loaded if r["question"] not in exclude]
    if len(records) < len(loaded):
        print(f"sft: left out {len(loaded) - len(records)} train questions that are also "
              "evaluation questions")
    agents = [(base, ["__base__"] * args.num_turns)] * args.num_agents
    debate = play_debates(bases, agents, records, args, scorer, greedy=False)[0]
    examples = correct_debate_examples(debate, records)
    model = add_adapters(bases.model(base), ["sft"], r=args.lora_r, alpha=args.lora_alpha)
    bases.models[base] = model
    losses = sft_lora(model, bases.tokenizers[base], examples, "sft", args.sft_epochs, args.sft_lr,
                      args.sft_batch_size, args.max_new_tokens, args.seed,
                      common) if examples else []
    for p in model.parameters():
        p.requires_grad_(False)
    kept = len(examples) // (args.num_agents * args.num_turns)
    outcome = (f", loss {losses[0]:.3f} -> {losses[-1]:.3f}" if losses else
               " (nothing to learn from: the sft agents equal the base)")
    print(f"sft (base {base}): kept {kept} of {len(records)} off-the-shelf debates, "
          f"{len(examples)} (prompt, response) pairs, {len(losses)} steps" + outcome)
    return dict(base=base, questions=len(records), kept_debates=kept, examples=len(examples),
                steps=len(losses), first_loss=losses[0] if losses else None,
                last_loss=losses[-1] if losses else None)


# 4. The debate evaluation (the metrics: common.debate_metrics, as in cotrain.py) ------------------


def evaluate_debates(args, device: str, methods: list[str]) -> tuple[dict, list[dict]]:
    """Debate mode: every method's A-agent, T-turn debates on the eval questions, and their
    metrics."""
    # 1. the questions; a run that trained on some of them is flagged
    records = load_task(args.dataset, args.split, args.limit or None, args.question_seed,
                        **dataset_options(args))  # --seed: the same questions, other samples
    if not records:
        arg_error("--dataset", f"{args.dataset} {args.split} has no questions")
    if "sft" in methods:
        sft_base(args)  # a heterogeneous --run has no one base to fine-tune: refused early
    for flag, run_dir in (("--run", args.run), ("--single-run", args.single_run)):
        overlap = train_overlap(records, run_dir) if run_dir else None
        if overlap:
            print(f"\n{'!' * 100}\nWARNING: {overlap} of the {len(records)} evaluation questions "
                  f"({args.dataset} {args.split}) are training questions of {flag} {run_dir}: its "
                  "accuracy on them measures recall, not generalisation. Evaluate on questions it "
                  f"never trained on (another --split or file).\n{'!' * 100}\n")
    bases = Bases(args, device)
    scorer = None
    if args.feedback_in_prompt:  # agents read a verifier's scores of earlier answers
        scorer = cotrain.make_scorer(SimpleNamespace(scorer="verifier", verifier=args.verifier,
                                                     forward_batch_size=args.batch_size), device)
    # 2. who plays each seat of each method: every adapter is loaded first
    plans = {m: method_agents(m, bases, args) for m in methods if m != "sft"}
    if args.use_vllm:  # one base (check_vllm_args), a peft model: an adapter trained later (sft)
        from nanomarl import vllm_rollout  # is added to it and joins the engine at first use

        base = next(iter(bases.models), args.model)
        bases.models[base] = with_peft(bases.model(base))
        vllm_rollout.start(bases.models[base], max_loras=8)
    if args.run:
        info = read_debate_run(args.run, "--run")
        for key in ("prompt_style", "feedback_in_prompt"):
            if info.get(key) is not None and info[key] != getattr(args, key):
                print(f"note: {args.run} was trained with --{key.replace('_', '-')} {info[key]}; "
                      f"evaluating with {getattr(args, key)}")
        if info.get("dataset") and info["dataset"] != args.dataset:
            print(f"cross-domain transfer: {args.run} was trained on {info['dataset']}, evaluated "
                  f"on {args.dataset}")
    results, rows, spent = {}, [], {}
    golds = [r["answer"] for r in records]
    # 3. each method's debates and metrics; the debates first: a control matches its paired
    # debate's tokens
    for method in sorted(methods, key=lambda m: m in SC_PAIRS):
        extra = {}
        if method == "sft":
            seed_everything(args.seed)
            exclude = {r["question"] for r in records}
            extra["sft"] = train_sft_baseline(bases, args, scorer, exclude=exclude)
            plans[method] = method_agents(method, bases, args)
        seed_everything(args.seed)  # every method starts from the same random state
        print(f"{method}: {len(records)} questions, " + (
            f"one agent alone, {args.sc_samples or args.num_agents * args.num_turns} sampled "
            f"answers each (more within {SC_PAIRS[method]}'s tokens)" if method in SC_PAIRS else
            f"{args.num_agents} agents x {args.num_turns} turns, "
            f"{'greedy' if args.greedy else f'T = {args.temperature}'}")
            + f", up to {args.max_new_tokens} tokens an answer")
        if method in SC_PAIRS:
            results[method], method_rows = evaluate_self_consistency(
                method, bases, plans[method][0], records, args, spent.get(SC_PAIRS[method]))
            rows += method_rows
            continue
        debate, generated, read, seconds = play_debates(bases, plans[method], records, args,
                                                        scorer, args.greedy, desc=method)
        spent[method] = generated
        results[method] = dict(**debate_metrics(debate.answers, golds),
                               agents=[dict(base=base, adapters=names)
                                       for base, names in plans[method]],
                               time_per_question_s=seconds / len(records),
                               answers_per_question=args.num_agents * args.num_turns,
                               tokens_per_question=sum(generated) / len(records),
                               prompt_tokens_per_question=sum(read) / len(records),
                               **extra)
        rows += [dict(method=method, question=r["id"], gold=r["answer"], answers=debate.answers[b],
                      responses=debate.responses[b], tokens=generated[b])
                 for b, r in enumerate(records)]
        print(f"{method}: " + accuracy_summary(results[method]["accuracy"])
              + f" | tokens/question {results[method]['tokens_per_question']:.1f}")
        if "views" in records[0] and args.split_controls:  # arith:split: the channel's controls
            answers = {}  # control -> [b][t][a] (turns 2..T): samples.jsonl's METHOD/CONTROL rows
            controls = results[method]["split_controls"] = debate_split_controls(
                bases, plans[method], records, args, debate, answers)
            rows += [dict(method=f"{method}/{c}", question=r["id"], gold=r["answer"], answers=a[b])
                     for c, a in answers.items() for b, r in enumerate(records)]
            print(f"{method}: " + format_metrics(controls, list(controls)))
    return {m: results[m] for m in methods}, rows, records


def debate_split_controls(bases: Bases, agents: list[tuple[str, list[str]]], records: list[dict],
                          args, debate, answers: dict | None = None) -> dict:
    """The controls of cotrain.py's held-out evaluation on split information, for one method's team
    (nanomarl/split_controls.py, greedy, from a greedy turn 1): silent, shuffled, oracle and wrong
    partners, the no-information bound, agent 0's turn-1 policy alone on the whole question, and
    eval/turn{t}/informative and /heard (of the debate just played); answers: as split_controls."""
    team = SimpleNamespace(models=lambda: [bases.model(base) for base, _ in agents],
                           agent_tokenizers=lambda: [bases.tokenizers[base] for base, _ in agents],
                           adapter_names=[[names[t] for _, names in agents]
                                          for t in range(args.num_turns)])
    play = functools.partial(cotrain.run_debate, fast=args.fast, logprobs=False)
    return split_controls(play, team, args, records, debate, answers=answers,
                          greedy_debate=False)  # sampled, in chunks: turn 1 replayed


def evaluate_self_consistency(method: str, bases: Bases, agent: tuple[str, list[str]],
                              records: list[dict], args,
                              budgets: list[int] | None) -> tuple[dict, list[dict]]:
    """A control's numbers (self_consistency_metrics) and its samples.jsonl rows, in the debates'
    layout: one 'turn' whose 'agents' are the answers. budgets: the paired debate's generated tokens
    per question (None when it was not evaluated: no token-matched vote)."""
    pair, n = SC_PAIRS[method], args.sc_samples or args.num_agents * args.num_turns
    if budgets is None:
        print(f"note: {method}: {pair} is not evaluated, so there is no vote within its tokens")
    if args.greedy:
        print(f"note: {method} samples at --temperature {args.temperature} (the debates: greedy)")
    samples, seconds = play_self_consistency(bases, agent, records, args, budgets)
    golds = [r["answer"] for r in records]
    result = dict(**self_consistency_metrics(samples, golds, n, budgets), control_of=pair,
                  agent=dict(base=agent[0], adapter=agent[1][0]), temperature=args.temperature,
                  max_samples=args.sc_max_samples or 4 * n,
                  time_per_question_s=seconds / len(records))
    rows = [dict(method=method, question=r["id"], gold=r["answer"], answers=[samples["answers"][q]],
                 responses=[samples["responses"][q]], tokens=sum(samples["tokens"][q]))
            for q, r in enumerate(records)]
    print(f"{method}: " + control_summary(result))
    return result, rows


# 5. MAGRPO teams: k joint answers per problem, scored, and their metrics -------------------------
# (the baselines' prompts: nanomarl/tasks/baseline_prompts.py; pass@k and the other metrics at k:
# nanomarl/sample_metrics.py)

MAGRPO_METHODS = ("single", "parallel", "pipeline", "discussion", "magrpo", "mt-magrpo")


def score_sample(problem: dict, texts: list[str], timeout: float, memory_mb: int) -> dict:
    """One joint answer -> its reward, levels and the per-sample facts the metrics need. texts:
    [aux, main] or [part 1, part 2]; a single agent's code is scored as main with no aux (no
    cooperation possible)."""
    reward, levels = magrpo.joint_reward(problem, texts, timeout, memory_mb)
    sample = dict(reward=reward, levels=levels)
    if problem["kind"] == "code":
        total, passed = levels["tests_total"], levels["tests_passed"]
        entry = problem["entry_point"]
        sample.update(passed_all=total > 0 and passed == total,
                      accuracy=passed / total if total else 0.0, bonus=levels["cooperation"],
                      main_defined=levels["structure"] >= 0.6 - 1e-9,
                      syntax_ok=levels["syntax"] > 0)
        if sample["passed_all"] and texts[0]:
            sample["scheme"] = classify_cooperation(extract_function(texts[0], "aux"),
                                                    extract_function(texts[1], entry), entry)
    return sample


def timed_generate(team, tokenizer, prompts: list[list[str]], agents: list[int], num_samples: int,
                   args) -> tuple[list, float, int]:
    """The acting agents (`agents`, indices into the team) answer in parallel: prompts[p][j] is
    acting agent j's prompt for item p, each sampled num_samples times, in ONE batched call (LoRA
    agents; magrpo's generate_joint_action). Returns (texts [p][j][g], wall-clock seconds, generated
    tokens)."""
    acting = magrpo.Agents(models=[team.models[i] for i in agents], optimizers=[], params=[],
                           names=None if team.names is None else [team.names[i] for i in agents])
    device = next(team.models[0].parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = magrpo.generate_joint_action(acting, tokenizer, prompts, num_samples, args.max_new_tokens,
                                       args.temperature, args.top_p, args.top_k, greedy=args.greedy,
                                       chat_template=args.chat_template, fast=args.fast)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    return out["texts"], seconds, sum(int(b["response_mask"].sum()) for b in out["batches"])


def team_answers(method: str, team, tokenizer, problem: dict, args, turns: int = 1,
                 feedback=None) -> dict:
    """k = args.num_samples joint answers of one method to one problem. Returns dict(final [k][2]
    texts that are scored, first [k][2] round-1 texts of the two-round methods (else None), seconds,
    tokens, calls = generate calls one after the other: the latency in units of one generation)."""
    k, code = args.num_samples, problem["kind"] == "code"
    seconds = tokens = calls = 0
    first = None

    def run(prompts, agents, num_samples):
        nonlocal seconds, tokens, calls
        texts, s, t = timed_generate(team, tokenizer, prompts, agents, num_samples, args)
        seconds, tokens, calls = seconds + s, tokens + t, calls + 1
        return texts

    if method == "single":  # one agent (agent 0's policy) does the whole task
        outs = run([[single_agent_prompt(problem)]], [0], k)[0][0]
        final = [["", text] if code else list(split_paragraphs(text, problem["kind"]))
                 for text in outs]
    elif method == "pipeline":  # 1. agent 1 answers; 2. agent 2 answers, seeing agent 1's output
        outs1 = run([[magrpo.format_prompts(problem)[0]]], [0], k)[0][0]
        outs2 = run([[pipeline_prompt(problem, a)] for a in outs1], [1], 1)
        final = [[a, outs2[g][0][0]] for g, a in enumerate(outs1)]
    elif method == "discussion":  # 1. both answer in parallel; 2. each revises, seeing the other
        round1 = run([magrpo.format_prompts(problem)], [0, 1], k)[0]
        first = [[round1[0][g], round1[1][g]] for g in range(k)]
        round2 = run([discussion_prompts(problem, pair) for pair in first], [0, 1], 1)
        final = [[round2[g][0][0], round2[g][1][0]] for g in range(k)]
    else:  # parallel, magrpo, mt-magrpo: the MAGRPO prompts; `turns` turns with feedback between
        prompts = magrpo.format_prompts(problem)
        joint = run([prompts], [0, 1], k)[0]
        prompt_history = [[[p] for p in prompts] for _ in range(k)]  # [sample][agent][turn]
        response_history = [[[joint[i][g]] for i in range(2)] for g in range(k)]
        for _ in range(1, turns):
            next_prompts = parallel_map(
                lambda g: feedback(problem, prompt_history[g], response_history[g]),
                list(range(k)), args.sandbox_workers)
            outs = run(next_prompts, [0, 1], 1)
            for g in range(k):
                for i in range(2):
                    prompt_history[g][i].append(next_prompts[g][i])
                    response_history[g][i].append(outs[g][i][0])
        final = [[response_history[g][i][-1] for i in range(2)] for g in range(k)]
        if turns > 1:
            first = [[response_history[g][i][0] for i in range(2)] for g in range(k)]
    return dict(final=final, first=first, seconds=seconds, tokens=tokens, calls=calls)


def evaluate_magrpo_method(method: str, team, tokenizer, problems: list[dict], args,
                           k_values: list[int], turns: int = 1,
                           feedback=None) -> tuple[dict, list[dict]]:
    """Every number of one method over the eval problems, and its samples (for samples.jsonl)."""
    seed_everything(args.seed)  # every method starts from the same random state
    samples, firsts, rows = [], [], []
    seconds, tokens, calls = [], [], []
    for problem in tqdm(problems, desc=method):
        # 1. generate k joint answers (timed)
        out = team_answers(method, team, tokenizer, problem, args, turns, feedback)
        # 2. score them (code in sandboxed subprocesses, in parallel)
        score = lambda texts: score_sample(problem, texts, args.test_timeout,  # noqa: E731
                                           args.sandbox_memory_mb)
        scored = parallel_map(score, out["final"], args.sandbox_workers)
        samples.append(scored)
        if out["first"] is not None:
            firsts += [s["reward"] for s in parallel_map(score, out["first"], args.sandbox_workers)]
        seconds.append(out["seconds"])
        tokens.append(out["tokens"])
        calls.append(out["calls"])
        rows += [dict(method=method, problem=problem["id"], sample=g, texts=texts,
                      reward=s["reward"], levels=s["levels"], scheme=s.get("scheme"))
                 for g, (texts, s) in enumerate(zip(out["final"], scored))]
    # 3. metrics
    flat = [s for per_p in samples for s in per_p]
    metrics = dict(num_problems=len(problems), num_samples=args.num_samples, turns=turns,
                   reward=sum(s["reward"] for s in flat) / len(flat))
    code = problems[0]["kind"] == "code"
    metrics.update(code_metrics(samples, k_values) if code else writing_metrics(samples))
    if code:
        metrics.update({f"level/{name}": sum(s["levels"][name] for s in flat) / len(flat)
                        for name in ("structure", "syntax", "tests", "cooperation")})
    if firsts:
        metrics["reward_round1"] = sum(firsts) / len(firsts)
    # generation only, all k samples of a problem
    metrics["time_per_problem_s"] = sum(seconds) / len(seconds)
    # generated tokens, every agent and round, all k samples
    metrics["tokens_per_problem"] = sum(tokens) / len(tokens)
    metrics["tokens_per_sample"] = metrics["tokens_per_problem"] / args.num_samples
    # generate calls one after the other
    metrics["sequential_generations"] = sum(calls) / len(calls)
    return metrics, rows


def with_peft(model):
    """peft routes rows to adapters by name ('__base__' = the bare base) only on a PeftModel: a base
    with no adapter loaded gets one unused LoRA adapter (its B matrix is zero, so it would change
    nothing anyway)."""
    from peft import PeftModel

    return model if isinstance(model, PeftModel) else add_adapters(model, ["unused"])


def evaluate_magrpo(args, device: str, methods: list[str]) -> tuple[dict, list[dict]]:
    """MAGRPO mode: each method's k joint answers per eval problem, scored with magrpo.py's reward.
    Every agent is an adapter on one base ('__base__' for the untrained baselines), so a team
    answers in one batched call."""
    # 1. the eval problems; the trained runs' adapters on one base
    problems = magrpo.load_problems(args.dataset, "eval", args.limit)
    if not problems:
        arg_error("--dataset", f"{args.dataset} has no eval problems")
    if problems[0]["kind"] in ("split", "costs"):  # two turns: score_sample would play one
        arg_error("--dataset", f"{args.dataset} in --mode magrpo: magrpo.py evaluates it (eval/*)")
    k_values = parse_int_list(args.k_values, "--k-values")
    if not k_values or not all(1 <= k <= args.num_samples for k in k_values):
        arg_error("--k-values", f"each k must be in [1, --num-samples={args.num_samples}], got "
                                f"{args.k_values!r}")
    tokenizer = load_tokenizer(args.model)
    model = load_model(args.model, args.dtype, args.quant, device)
    trained = {}  # method -> (adapter names of its 2 agents, the run's args)
    runs = (("magrpo", "--run", args.run, "st_"), ("mt-magrpo", "--mt-run", args.mt_run, "mt_"))
    for method, flag, run_dir, prefix in runs:
        if method in methods:
            model, names, run_args = load_run_adapters(model, run_dir, flag, args, prefix)
            if len(names) != 2:
                arg_error(flag, f"expected the 2 agents' adapters, found {names}")
            for key in ("dataset", "temperature", "top_p", "top_k", "max_new_tokens",
                        "chat_template"):
                if key in run_args and run_args[key] != getattr(args, key):
                    print(f"note: {run_dir} was trained with --{key.replace('_', '-')} "
                          f"{run_args[key]}; evaluating with {getattr(args, key)}")
            trained[method] = (names, run_args)
    model = with_peft(model)
    if args.use_vllm:
        from nanomarl import vllm_rollout
        vllm_rollout.start(model)
    base = magrpo.Agents(models=[model, model], names=["__base__", "__base__"], optimizers=[],
                         params=[])
    # 2. each method's k joint answers per problem, scored (evaluate_magrpo_method)
    results, rows = {}, []
    for method in methods:
        team, turns, feedback = base, 1, None
        if method in trained:
            names, run_args = trained[method]
            team = magrpo.Agents(models=[model, model], names=names, optimizers=[], params=[])
            turns = run_args["turns"]
            task_args = SimpleNamespace(**{**run_args, "test_timeout": args.test_timeout,
                                           "sandbox_memory_mb": args.sandbox_memory_mb})
            feedback = magrpo.make_task(task_args).feedback
        results[method], method_rows = evaluate_magrpo_method(method, team, tokenizer, problems,
                                                              args, k_values, turns, feedback)
        rows += method_rows
        shown = [f"pass@{k_values[0]}", "reward", "cooperation_rate", "time_per_problem_s",
                 "tokens_per_problem"]
        print(f"{method}: " + format_metrics(results[method], shown))
    return results, rows


def evaluate_crossplay(args, device: str) -> dict:
    """--runs: cross-play and swapped roles (nanomarl/crossplay.py). Every run's two adapters on one
    base, as s<k>_agent0 and s<k>_agent1; each pairing answers the held-out problems greedily and is
    scored as magrpo.py's in-training evaluation (magrpo.evaluate_team). What is not typed
    (--dataset, --limit, --max-new-tokens, --chat-template) follows the first run's settings."""
    runs, given = [r.strip() for r in args.runs.split(",") if r.strip()], given_fields(args)
    first = read_run(runs[0], "--runs")
    args.model = args.model if "model" in given else first.get("model", args.model)
    model, teams = load_model(args.model, args.dtype, args.quant, device), []
    for k, run_dir in enumerate(runs):
        model, names, _ = load_run_adapters(model, run_dir, "--runs", args, f"s{k}_")
        if names != [f"s{k}_agent0", f"s{k}_agent1"]:
            arg_error("--runs", f"{run_dir}: expected the adapters agent0 and agent1, found "
                                f"{[n[len(f's{k}_'):] for n in names]}")
        teams.append(names)
    settings = dict(dataset="dataset", limit="eval_problems", max_new_tokens="max_new_tokens",
                    chat_template="chat_template")
    ours = {key: getattr(args, flag) if flag in given or key not in first else first[key]
            for flag, key in settings.items()}
    eval_args = SimpleNamespace(**{**first, **ours, "test_timeout": args.test_timeout,
                                   "sandbox_memory_mb": args.sandbox_memory_mb,
                                   "sandbox_workers": args.sandbox_workers,
                                   "generate_batch_size": args.generate_batch_size,
                                   "fast": args.fast})
    problems = magrpo.load_problems(eval_args.dataset, "eval", eval_args.eval_problems or None)
    if not problems:
        arg_error("--dataset", f"{eval_args.dataset} has no eval problems")
    task = magrpo.make_task(eval_args, problems[0]["kind"])
    tokenizer = load_tokenizer(args.model)
    print(f"cross-play: {len(runs)} runs, {len(runs) ** 2 + len(runs)} teams x {len(problems)} "
          f"held-out {eval_args.dataset} problems, greedy, up to {eval_args.max_new_tokens} tokens")

    def play(names):
        team = magrpo.Agents(models=[model, model], names=names)
        metrics = magrpo.evaluate_team(team, tokenizer, problems, task, eval_args)
        print(f"  seat 0 {names[0]}, seat 1 {names[1]}: "
              + format_metrics(metrics, [k for k in ("eval/pass_rate", "eval/reward/mean")
                                         if k in metrics]))
        return metrics

    played = crossplay(play, teams)
    return dict(**summarize(played, runs), played=played, dataset=eval_args.dataset,
                problems=[p["id"] for p in problems], max_new_tokens=eval_args.max_new_tokens)


# 6. Main (settings: nanomarl/eval_runs.py; tables and plots: nanomarl/eval_report.py) -------------


def choose_methods(args) -> list[str]:
    """--methods, or every method the given flags allow; a method without its flag is an error."""
    allowed = DEBATE_METHODS if args.mode == "debate" else MAGRPO_METHODS
    if args.mode == "debate":
        needs = dict(maporl=("run", "--run"), single=("single_run", "--single-run"),
                     mix=("agents", "--agents"), **{"sc-maporl": ("run", "--run")})
    else:
        needs = dict(magrpo=("run", "--run"), **{"mt-magrpo": ("mt_run", "--mt-run")})
    if args.methods:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        for m in methods:
            if m not in allowed:
                arg_error("--methods", f"unknown {args.mode} method {m!r} (expected: "
                                       f"{', '.join(allowed)})")
            if m in needs and not getattr(args, needs[m][0]):
                arg_error("--methods", f"method {m} needs {needs[m][1]}")
        return methods
    return [m for m in allowed if m not in needs or getattr(args, needs[m][0])]


def main(args: Args):
    use_pairing_settings(args)  # --speakers/--readers: the runs' held-out evaluation
    use_run_data(args)
    use_run_settings(args)
    check_args(args)
    methods = choose_methods(args)
    if not args.max_new_tokens:
        args.max_new_tokens = 300 if args.mode == "debate" else 256
    device = args.device or default_device()
    print(set_torch_threads(args.threads))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = writable_dir(args.output_dir or f"runs/evaluate-{args.mode}-{stamp}")
    print(f"evaluate.py --mode {args.mode}: " + (
        f"cross-play of {args.runs}" if args.runs else f"speakers {args.speakers} x readers "
        f"{args.readers}" if args.speakers else f"methods {', '.join(methods)}") + f" -> {out_dir}")
    start = time.time()
    if args.runs:  # cross-play and swapped roles alone
        results, rows, pngs = {}, [], []
        extra = dict(crossplay=evaluate_crossplay(args, device))
        table = crossplay_table(extra["crossplay"])
    elif args.speakers:  # who learned what (nanomarl/pairings.py)
        pairings, rows = evaluate_pairings(args, Bases(args, device), play_debates, debate_metrics,
                                           debate_split_controls)
        results, pngs, extra, table = {}, [], dict(pairings=pairings), pairings_table(pairings)
    elif args.mode == "magrpo":
        results, rows = evaluate_magrpo(args, device, methods)
        code = "structure_rate" in next(iter(results.values()))
        k_values = parse_int_list(args.k_values, "--k-values")
        table = samples_table(results, magrpo_columns(k_values, code))
        pngs = plot_magrpo(results, out_dir, code)
        extra = {}
    else:
        results, rows, records = evaluate_debates(args, device, methods)
        debates = {m: r for m, r in results.items() if m not in SC_PAIRS}
        controls = {m: r for m, r in results.items() if m in SC_PAIRS}
        table = (debate_table(debates) + "\n" + agents_table(debates) if debates else "") \
            + ("\n" + controls_table(controls, debates) if controls else "")
        split = split_table(debates)  # arith:split's controls
        table += "\n" + split if split else ""
        pngs = plot_debate(debates, out_dir, controls) if debates else []
        extra = dict(questions=[dict(id=r["id"], question=r["question"], answer=r["answer"])
                                for r in records], dataset_source=dataset_source(args))
    payload = dict(mode=args.mode, args=dataclasses.asdict(args), device=device,
                   wall_s=time.time() - start, methods=results, **extra)
    json_path, md_path = write_results(out_dir, payload, table)
    with open(out_dir / "samples.jsonl", "w") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    print("\n" + table)
    print(f"results: {json_path}\ntable: {md_path}\nsamples: {out_dir / 'samples.jsonl'}")
    for path in pngs:
        print(f"plot: {path}")


if __name__ == "__main__":
    main(parse_args(Args))
