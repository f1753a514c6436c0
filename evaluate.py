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

--mode magrpo (MAGRPO, arXiv 2508.04652). k = --num-samples joint answers per eval problem:
  single       one model does the whole task (the authors' single-agent prompts)
  parallel     the two MAGRPO prompts answered independently by the base model, concatenated
  pipeline     agent 2 answers after agent 1, seeing its output
  discussion   both answer, then each revises after seeing the other's answer (one round)
  magrpo       the agents of a single-turn magrpo.py run (--run)
  mt-magrpo    the agents of a multi-turn magrpo.py run (--mt-run), with its feedback
--runs A,B,C (alone): cross-play and swapped roles of magrpo.py runs, one per seed
(nanomarl/crossplay.py): agent 0 of run i with agent 1 of run j, each team's agents swapped.
--dataset arith:split: each debate also reports nanomarl/split_controls.py's silent partner, ceiling
and informative messages, as cotrain.py's held-out evaluation.
Coding: pass@k (the paper's and the unbiased one), accuracy@k, MaxCoop@k, cooperation rate and
the cooperation scheme of every passing (aux, main) pair; writing: the reward and its levels. Every
method: generation wall-clock, generated tokens and sequential generations per problem.

Choices of ours (the papers' evaluation code is not public, or does not cover these cases):
  1) the cooperation schemes are named, not defined, in the paper: classify_cooperation's
     docstring gives our exact rules;
  2) every method is sampled from the same seed; timing covers generation only, all agents of a
     turn batched in one call, so "parallel" really is one generate call;
  3) a single agent's writing without the split marker is split deterministically (the authors:
     at random); the coding pipeline prompt is ours (the authors have no coding pipeline);
  4) the SFT baseline keeps a debate only when its final majority is right outright.
Details, outputs and the exact method definitions: docs/evaluation_details.md.

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

import ast
import dataclasses
import datetime
import json
import math
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Literal

import torch
from tqdm import tqdm

import cotrain
import magrpo
from common import (adapter_parameters, add_adapters, debate_metrics, forward_responses, load_model,
                    majority_vote_accuracy, masked_mean, tokenize_prompts)
from nanomarl.cli import arg_error, check_numbers, given_fields, parse_args, parse_int_list
from nanomarl.crossplay import crossplay, crossplay_table, summarize
from nanomarl.distributed import default_device, seed_everything
from nanomarl.models import check_device, check_model_name, load_tokenizer
from nanomarl.runs import format_metrics, set_torch_threads, writable_dir
from nanomarl.sandbox import parallel_map
from nanomarl.self_consistency import debate_tokens, sample_answers, self_consistency_metrics
from nanomarl.split_controls import split_controls
from nanomarl.tasks.code import extract_function
from nanomarl.tasks.code_prompts import CODE_RULES, function_params, main_prompt
from nanomarl.tasks.debate import dataset_options, load_task, reasoning_gym_config


@dataclass
class Args:
    # ---- what to evaluate ----
    mode: Literal["debate", "magrpo"] = "debate"  # debate: MAPoRL debates | magrpo: MAGRPO teams
    use_vllm: bool = False  # generation on one vLLM engine holding every adapter (docs/usage.md)
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
    generate_batch_size: int = 0  # rows per generate call (0: a chunk's debates in one call, a
    # control's A x --batch-size rows)
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


# ----------------------------------------------------------------------------------------------
# 1. Sample metrics (MAGRPO): pass@k two ways, accuracy@k, cooperation
# ----------------------------------------------------------------------------------------------


def pass_at_k_first(passed: list[bool], k: int) -> float:
    """The MAGRPO paper's pass@k (the authors' PassOrNot@k): 1 if any of the FIRST k samples passes
    all tests."""
    if not 1 <= k <= len(passed):
        raise ValueError(f"pass@k needs 1 <= k <= n samples, got k={k}, n={len(passed)}")
    return float(any(passed[:k]))


def pass_at_k_unbiased(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. 2021 (Codex paper, eq. 1): 1 − C(n−c, k)/C(n, k), for n
    samples of which c pass, computed as the numerically stable product
    1 − Π_{i=n−c+1..n} (1 − k/i)."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset contains a passing sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def accuracy_at_k(pass_fractions: list[float], k: int) -> float:
    """Accuracy@k: the best fraction of passed asserts among the first k samples."""
    return max(pass_fractions[:k])


def max_coop_at_k(bonuses: list[float], k: int) -> float:
    """MaxCoop@k: the largest cooperation bonus among the first k samples (the authors'
    MaxCoop@k)."""
    return max(bonuses[:k])


def cooperation_rate(bonuses: list[float]) -> float:
    """The fraction of samples with a positive cooperation bonus (the authors'
    `cooperation_rate`)."""
    return sum(b > 0 for b in bonuses) / len(bonuses)


# ----------------------------------------------------------------------------------------------
# 2. Cooperation-scheme classifier (coding): how does `main` use `aux`?
# ----------------------------------------------------------------------------------------------

COOPERATION_SCHEMES = ("aux-unused", "fallback", "strategy-filter", "coordinator", "thin-wrapper",
                       "decorator")


def _names(target: ast.AST) -> set[str]:
    """The variable names a store target binds or mutates: x, (x, y), x[i], x.attr -> {'x', 'y'}."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*[_names(e) for e in target.elts]) if target.elts else set()
    if isinstance(target, ast.Starred):
        return _names(target.value)
    if isinstance(target, (ast.Subscript, ast.Attribute)):
        return _names(target.value)
    return set()


def _reads(node: ast.AST | None, names: set[str]) -> bool:
    """Does the expression (or statement) read any of `names`?"""
    return node is not None and any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                                    and n.id in names for n in ast.walk(node))


def _bindings(func: ast.AST) -> list[tuple[set[str], ast.AST]]:
    """Every (names bound, value they come from) in a function: assignments, augmented assignments,
    for-loop and comprehension targets (from the iterable), walrus, with-as; and `x.method(...)` on
    a local variable or parameter x (it may mutate x: `res.append(aux(v))` puts aux's result in res,
    `r.sort()` changes r)."""
    out = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            out += [(_names(t), node.value) for t in node.targets]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            out.append((_names(node.target), node.value))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            out.append((_names(node.target), node.iter))
        elif isinstance(node, ast.NamedExpr):
            out.append((_names(node.target), node.value))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            out.append((_names(node.optional_vars), node.context_expr))
    local = set().union(*[names for names, _ in out])
    local |= {a.arg for a in ast.walk(func) if isinstance(a, ast.arg)}
    out += [({n.func.value.id}, n) for n in ast.walk(func) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
            and n.func.value.id in local]
    return out


def _returns(stmts: list[ast.stmt]) -> list[ast.Return]:
    return [n for s in stmts for n in ast.walk(s)
            if isinstance(n, ast.Return) and n.value is not None]


def _blocks(func: ast.AST):
    """Every statement list (function body, if/else, loop, try, with, handler bodies) in the
    function."""
    for node in ast.walk(func):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def classify_cooperation(aux_code: str, main_code: str, entry_point: str,
                         aux_name: str = "aux") -> str | None:
    """Label how `main` (the function `entry_point` in main_code) uses the helper `aux`, from their
    ASTs.

    The paper names the schemes only informally; these are this project's precise rules. "aux's
    result" is every expression that reads `aux`, plus, transitively, every variable bound from such
    an expression (assigned, augmented, looped over, appended/updated through `x.method(...)`). The
    first rule that matches wins:

    1. aux-unused: aux_code defines no function `aux`; or main rebinds the name `aux` (a parameter,
       an assignment, a nested def, an import); or aux's result reaches neither a `return` nor a
       condition (aux never mentioned, called for nothing, or its result ignored).
    2. fallback (aux on a failure path): aux is used inside an `except` handler; or in a non-first
       operand of `or` whose first operand does not use aux (`own(x) or aux(x)`); or main first
       computes its own result v (a variable with a binding that does not involve aux) and then an
       `if`/conditional expression that tests v either rebinds v to aux's result (`if v is None: v =
       aux(x)`), or has one path returning v without aux and the other path returning aux's result
       (`if ok(v): return v` ... `return aux(x)`); for an `if` statement, the "else" path is the
       else branch plus the statements after the `if`.
    3. strategy-filter (aux screens, main decides): aux's result is read by the test of an `if`,
       `while`, conditional expression, `assert` or comprehension `if`; or aux is passed as a
       function to `filter`/`itertools.filterfalse` or as a `key=` argument (`sorted(xs, key=aux)`).
    4. coordinator (main orchestrates several aux uses): aux is mentioned at two or more places, or
       inside a loop body (`for`/`while`, not the iterable of the loop) or a comprehension's
       element, or passed as a function to anything else (`map(aux, xs)`).
    5. thin-wrapper: every `return` that carries aux's result returns it unchanged: `return
       aux(...)`, or `return v` where every binding of v is exactly `v = aux(...)`. Guard clauses
       that return without aux are allowed (`if not xs: return []`). Stricter than the reward's
       wrapper check (magrpo.py), which also calls one-line `return len(aux(x))` a wrapper; here
       that is a decorator.
    6. decorator: otherwise; aux's result is transformed before it is returned (`return aux(x) + 1`,
       `r = aux(x); return sorted(r)`).

    Nested functions inside main are analysed as part of main. Returns None when main_code does not
    parse or has no function `entry_point` (nothing to classify)."""
    try:
        main_tree = ast.parse(main_code)
    except SyntaxError:
        return None
    funcs = [n for n in ast.walk(main_tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point]
    if not funcs:
        return None
    func = funcs[0]
    try:
        aux_defined = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                          and n.name == aux_name for n in ast.walk(ast.parse(aux_code)))
    except SyntaxError:
        aux_defined = False
    rebinds = any(a.arg == aux_name for a in ast.walk(func.args) if isinstance(a, ast.arg)) or any(
        (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == aux_name)
        or (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.name == aux_name)
        or (isinstance(n, ast.alias) and (n.asname or n.name) == aux_name) for n in ast.walk(func))
    if not aux_defined or rebinds:
        return "aux-unused"

    # aux's result: expressions that read `aux` or a tainted variable; propagate to a fixed point
    bindings = _bindings(func)
    tainted = {aux_name}
    while True:
        new = set().union(*[names for names, value in bindings if _reads(value, tainted)]) - tainted
        if not new:
            break
        tainted |= new
    own = set().union(*[names for names, value in bindings if not _reads(value, tainted)])
    own -= {aux_name}
    returns = _returns(func.body)
    tests = [n.test for n in ast.walk(func)
             if isinstance(n, (ast.If, ast.While, ast.IfExp, ast.Assert))]
    tests += [cond for n in ast.walk(func) if isinstance(n, ast.comprehension) for cond in n.ifs]
    calls = [n for n in ast.walk(func) if isinstance(n, ast.Call)]
    is_aux = lambda node: isinstance(node, ast.Name) and node.id == aux_name  # noqa: E731
    callee = lambda call: getattr(call.func, "id", None) or getattr(call.func, "attr", None)  # noqa
    passed_as_filter = any(callee(c) in ("filter", "filterfalse") and c.args and is_aux(c.args[0])
                           for c in calls) \
        or any(kw.arg == "key" and is_aux(kw.value) for c in calls for kw in c.keywords)

    # 1. aux-unused: the result reaches no return and no condition
    if not (any(_reads(r.value, tainted) for r in returns) or any(_reads(t, tainted) for t in tests)
            or passed_as_filter):
        return "aux-unused"

    # 2. fallback
    uses_aux = lambda node: _reads(node, {aux_name})  # noqa: E731
    if any(isinstance(n, ast.ExceptHandler) and any(uses_aux(s) for s in n.body)
           for n in ast.walk(func)):
        return "fallback"
    if any(isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or) and not uses_aux(n.values[0])
           and any(uses_aux(v) for v in n.values[1:]) for n in ast.walk(func)):
        return "fallback"

    def returns_own(stmts, v):
        return any(_reads(r.value, {v}) and not _reads(r.value, tainted) for r in _returns(stmts))

    def returns_aux(stmts):
        return any(_reads(r.value, tainted) for r in _returns(stmts))

    for block in _blocks(func):
        for i, stmt in enumerate(block):
            if not isinstance(stmt, ast.If):
                continue
            for v in own & {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)}:
                rebinds_v = any(v in names and uses_aux(value) for names, value in _bindings(stmt))
                other_path = stmt.orelse + block[i + 1:]
                if rebinds_v or (returns_own(stmt.body, v) and returns_aux(other_path)) or (
                        returns_aux(stmt.body) and returns_own(other_path, v)):
                    return "fallback"
    for n in ast.walk(func):
        if isinstance(n, ast.IfExp):
            for v in own & {m.id for m in ast.walk(n.test) if isinstance(m, ast.Name)}:
                own_body, own_else = (_reads(x, {v}) and not _reads(x, tainted)
                                      for x in (n.body, n.orelse))
                if (own_body and _reads(n.orelse, tainted)) or \
                        (own_else and _reads(n.body, tainted)):
                    return "fallback"

    # 3. strategy-filter
    if passed_as_filter or any(_reads(t, tainted) for t in tests):
        return "strategy-filter"

    # 4. coordinator
    mentions = [n for n in ast.walk(func) if is_aux(n)]
    called = {id(c.func) for c in calls}
    in_loop = any(uses_aux(s) for n in ast.walk(func)
                  if isinstance(n, (ast.For, ast.AsyncFor, ast.While)) for s in n.body + n.orelse)
    in_loop |= any(uses_aux(getattr(n, field)) for n in ast.walk(func)
                   if isinstance(n, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp))
                   for field in ("elt", "key", "value") if hasattr(n, field))
    if len(mentions) >= 2 or in_loop or any(id(m) not in called for m in mentions):
        return "coordinator"

    # 5. thin-wrapper / 6. decorator
    aux_call = lambda node: isinstance(node, ast.Call) and is_aux(node.func)  # noqa: E731
    direct = {v for v in tainted - {aux_name}
              if all(aux_call(value) for names, value in bindings if v in names)}
    if all(aux_call(r.value) or (isinstance(r.value, ast.Name) and r.value.id in direct)
           for r in returns if _reads(r.value, tainted)):
        return "thin-wrapper"
    return "decorator"


# ----------------------------------------------------------------------------------------------
# 3. MAPoRL debates: who plays each seat, the debates, the SFT baseline
#    (the metrics are common.debate_metrics, as in cotrain.py's in-training evaluation)
# ----------------------------------------------------------------------------------------------

DEBATE_METHODS = ("offtheshelf", "maporl", "single", "sft", "mix", "sc-base", "sc-maporl")
SC_PAIRS = {"sc-base": "offtheshelf", "sc-maporl": "maporl"}  # control -> the debate it matches
# --dataset '': cotrain.py's and magrpo.py's CPU defaults
DEFAULT_DATASET = dict(debate="arith:digits", magrpo="minicode")


def load_adapter_as(model, folder: Path, name: str):
    """Load a saved peft adapter folder (save_adapters) under a new name, so that several runs'
    `agent0` can sit on one base; the weights are frozen."""
    from peft import PeftModel

    if not (folder / "adapter_config.json").exists():
        raise SystemExit(f"error: {folder} is not a saved adapter (no adapter_config.json)")
    if isinstance(model, PeftModel):
        model.load_adapter(str(folder), adapter_name=name)
    else:
        model = PeftModel.from_pretrained(model, str(folder), adapter_name=name)
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    return model


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


def read_debate_run(run_dir: str, flag: str) -> dict:
    """cotrain.py's debate.json: the base of each agent, the adapter of each (turn, agent), their
    folders."""
    path = Path(run_dir) / "debate.json"
    if not path.exists():
        arg_error(flag, f"{path} does not exist: not a finished cotrain.py run folder")
    return json.loads(path.read_text())


def run_agent(bases: Bases, run_dir: str, flag: str, agent: int | None, num_agents: int,
              num_turns: int) -> list[tuple[str, list[str]]]:
    """Evaluation agents played by a cotrain.py run: [(base, [T] adapter names)] for each of
    num_agents agents. Agent a is the run's agent `agent` (or a mod A_run when None); turn t uses
    the run's adapter of turn min(t, T_run) (a run trained with fewer turns keeps its last turn's
    adapter). The adapters are loaded onto the run agent's base, renamed r<k>_<name> so that several
    runs' agent0 can coexist."""
    info = read_debate_run(run_dir, flag)
    run_agents, run_turns = len(info["models"]), len(info["adapters"])
    if agent is not None and not 0 <= agent < run_agents:
        arg_error(flag, f"{run_dir} has agents 0..{run_agents - 1}, not {agent}")
    prefix = bases.prefix(run_dir)
    out = []
    for a in range(num_agents):
        src = agent if agent is not None else a % run_agents
        base = info["models"][src]
        names = []
        for t in range(num_turns):
            name = info["adapters"][min(t, run_turns - 1)][src]
            if name != "__base__":
                folder = Path(run_dir) / info["adapter_dirs"][src] / name
                bases.load_adapter(base, folder, prefix + name)
                name = prefix + name
            names.append(name)
        out.append((base, names))
    return out


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


def play_debates(bases: Bases, agents: list[tuple[str, list[str]]], records: list[dict], args,
                 scorer, greedy: bool, desc: str = "debates") -> tuple[dict, float, int]:
    """cotrain.run_debate over the records in chunks of --batch-size (a bar over the questions).
    Returns (the debate's responses, answers and prompts [T][A][B] and per question the tokens
    generated and read [B], wall-clock seconds, generated tokens)."""
    models = [bases.model(base) for base, _ in agents]
    tokenizers = [bases.tokenizers[base] for base, _ in agents]
    adapter_names = [[names[t] for _, names in agents] for t in range(args.num_turns)]
    merged, seconds, tokens = None, 0.0, 0
    bar = tqdm(total=len(records), desc=desc, unit="question")
    for start in range(0, len(records), args.batch_size):
        chunk = records[start:start + args.batch_size]
        t0 = time.perf_counter()
        debate = cotrain.run_debate(chunk, models, tokenizers, adapter_names, args.max_new_tokens,
                                    args.temperature, greedy=greedy, scorer=scorer,
                                    feedback_in_prompt=args.feedback_in_prompt,
                                    prompt_style=args.prompt_style,
                                    generate_batch_size=args.generate_batch_size)
        seconds += time.perf_counter() - t0
        generated, read = debate_tokens(debate)
        tokens += sum(generated)
        if merged is None:
            merged = {k: debate[k] for k in ("responses", "answers", "prompts")}
            merged.update(tokens=[], prompt_tokens=[])
        else:
            for k in ("responses", "answers", "prompts"):
                for t, turn in enumerate(merged[k]):
                    for a in range(len(turn)):
                        turn[a] = turn[a] + debate[k][t][a]
        merged["tokens"] += generated
        merged["prompt_tokens"] += read
        bar.update(len(chunk))
    bar.close()
    return merged, seconds, tokens


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
        out = sample_answers(cotrain.run_debate, bases.model(base), bases.tokenizers[base], adapter,
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


def correct_debate_examples(debate: dict, records: list[dict]) -> list[tuple[str, str]]:
    """Keep the debates whose FINAL-turn majority vote is right outright (tie expectation = 1: the
    gold wins, or every tied answer is the gold; a 50/50 tie is not kept), and return every (prompt,
    response) of every agent and turn in them: the collaboration trajectories the SFT baseline
    imitates. debate: cotrain.run_debate's output (prompts, responses, answers: [T][A][B])."""
    num_turns, num_agents = len(debate["answers"]), len(debate["answers"][0])
    examples = []
    for b, record in enumerate(records):
        final = [debate["answers"][-1][a][b] for a in range(num_agents)]
        if majority_vote_accuracy(final, record["answer"]) == 1.0:
            examples += [(debate["prompts"][t][a][b], debate["responses"][t][a][b])
                         for t in range(num_turns) for a in range(num_agents)]
    return examples


def encode_sft_batch(tokenizer, prompts: list[str], responses: list[str], max_response_tokens: int,
                     device) -> dict:
    """Left-padded prompts and right-padded responses (+ EOS, so the model learns to stop), in the
    layout common.forward_responses expects. Responses longer than max_response_tokens are cut."""
    query_ids, query_mask = tokenize_prompts(tokenizer, prompts, device)
    rows = [tokenizer(r, add_special_tokens=False)["input_ids"][:max_response_tokens - 1]
            + [tokenizer.eos_token_id] for r in responses]
    width = max(len(r) for r in rows)
    response_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    response_mask = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        response_ids[i, :len(r)] = torch.tensor(r)
        response_mask[i, :len(r)] = 1.0
    return dict(query_ids=query_ids, query_mask=query_mask, response_ids=response_ids.to(device),
                response_mask=response_mask.to(device))


def sft_lora(model, tokenizer, examples: list[tuple[str, str]], adapter: str, epochs: int,
             lr: float, batch_size: int, max_response_tokens: int, seed: int) -> list[float]:
    """Fine-tune the LoRA adapter `adapter` (already on the model) on (prompt, response) pairs with
    a plain masked NLL: −Σ log π(response token | prompt, earlier tokens) / #response tokens. Only
    this adapter's parameters are optimised (AdamW). Returns the loss of every step."""
    device = next(model.parameters()).device
    params = adapter_parameters(model, adapter)
    optimizer = torch.optim.AdamW(params, lr=lr)
    rng = random.Random(seed)
    losses = []
    for _ in range(epochs):
        order = list(range(len(examples)))
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            chosen = [examples[i] for i in order[start:start + batch_size]]
            batch = encode_sft_batch(tokenizer, [p for p, _ in chosen], [r for _, r in chosen],
                                     max_response_tokens, device)
            out = forward_responses(model, **batch, adapter_names=[adapter] * len(chosen))
            logprobs = out["logprobs"]
            loss = -masked_mean(logprobs, batch["response_mask"])  # masked NLL per response token
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            losses.append(loss.item())
    return losses


def sft_base(args) -> str:
    """The base the SFT baseline fine-tunes and plays: the --run's base, so that it is compared with
    the trained agents on the same model (a heterogeneous run has no single base: refused), else
    --model."""
    if not getattr(args, "run", ""):
        return args.model
    models = sorted(set(read_debate_run(args.run, "--run")["models"]))
    if len(models) > 1:
        arg_error("--methods", f"sft fine-tunes one base, but {args.run} has several "
                               f"({', '.join(models)}): leave sft out of --methods")
    return models[0]


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
    debate, _, _ = play_debates(bases, agents, records, args, scorer, greedy=False)
    examples = correct_debate_examples(debate, records)
    model = add_adapters(bases.model(base), ["sft"], r=args.lora_r, alpha=args.lora_alpha)
    bases.models[base] = model
    losses = sft_lora(model, bases.tokenizers[base], examples, "sft", args.sft_epochs, args.sft_lr,
                      args.sft_batch_size, args.max_new_tokens, args.seed) if examples else []
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


def train_overlap(records: list[dict], run_dir: str) -> int | None:
    """How many of the evaluation records are questions the cotrain.py run in run_dir loaded for
    training (its dataset's split 'train', read again with the seed of its args.json); None when
    they cannot be read."""
    path = Path(run_dir) / "args.json"
    if not path.exists():
        return None
    run = json.loads(path.read_text())
    options = (("question_field", "question_field"), ("answer_field", "answer_field"),
               ("config", "dataset_config"), ("task", "dataset_task"))
    fields = {k: run[v] for k, v in options if v in run}
    try:
        trained = load_task(run["dataset"], "train", None, run["seed"], skip_bad_rows=True,
                            **fields)
    except (SystemExit, Exception) as e:  # e.g. a hub dataset that is not cached
        print(f"note: could not read the training questions of {run_dir} to check the overlap "
              f"({e})")
        return None
    questions = {r["question"] for r in trained}
    return sum(r["question"] in questions for r in records)


def evaluate_debates(args, device: str, methods: list[str]) -> tuple[dict, list[dict]]:
    """Debate mode: every method's A-agent, T-turn debates on the eval questions, and their
    metrics."""
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
    # every adapter is loaded first
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
    # the debates first: a control matches its paired debate's tokens
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
        debate, seconds, tokens = play_debates(bases, plans[method], records, args, scorer,
                                               args.greedy, desc=method)
        spent[method] = debate["tokens"]
        answers = [[[debate["answers"][t][a][b] for a in range(args.num_agents)]
                    for t in range(args.num_turns)]
                   for b in range(len(records))]  # [question][turn][agent]
        results[method] = dict(**debate_metrics(answers, golds),
                               agents=[dict(base=base, adapters=names)
                                       for base, names in plans[method]],
                               time_per_question_s=seconds / len(records),
                               answers_per_question=args.num_agents * args.num_turns,
                               tokens_per_question=tokens / len(records),
                               prompt_tokens_per_question=sum(debate["prompt_tokens"])
                               / len(records),
                               **extra)
        rows += [dict(method=method, question=r["id"], gold=r["answer"], answers=answers[b],
                      responses=[[debate["responses"][t][a][b] for a in range(args.num_agents)]
                                 for t in range(args.num_turns)], tokens=debate["tokens"][b])
                 for b, r in enumerate(records)]
        print(f"{method}: " + accuracy_summary(results[method]["accuracy"])
              + f" | tokens/question {results[method]['tokens_per_question']:.1f}")
        if "views" in records[0]:  # arith:split: the silent partner, the ceiling, the channel
            controls = debate_split_controls(bases, plans[method], records, args, debate)
            results[method]["split_controls"] = controls
            print(f"{method}: " + format_metrics(controls, list(controls)))
    return {m: results[m] for m in methods}, rows, records


def debate_split_controls(bases: Bases, agents: list[tuple[str, list[str]]], records: list[dict],
                          args, debate: dict) -> dict:
    """The controls of cotrain.py's held-out evaluation on split information, for one method's team
    (nanomarl/split_controls.py, greedy): eval/silent/turn{t}/agent_accuracy,
    eval/ceiling/accuracy (its agent 0's turn-1 policy alone, on the whole question) and
    eval/turn{t}/informative and /heard (of the debate just played)."""
    team = SimpleNamespace(models=lambda: [bases.model(base) for base, _ in agents],
                           agent_tokenizers=lambda: [bases.tokenizers[base] for base, _ in agents],
                           adapter_names=[[names[t] for _, names in agents]
                                          for t in range(args.num_turns)])
    return split_controls(cotrain.run_debate, team, args, records, debate,
                          greedy_debate=False)  # sampled, in chunks: the silent turn 1 replayed


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


# ----------------------------------------------------------------------------------------------
# 4. MAGRPO teams: the baselines' prompts, k joint answers per problem, their metrics
# ----------------------------------------------------------------------------------------------
#
# magrpo.py has the MAGRPO agents' first-turn prompts (format_prompts) and the multi-turn
# feedback; the baselines' prompts below are the authors' evaluation scripts' (LLM_Collab_Writing:
# evals/eval_{tldr,arxiv}_{single_agent,pipeline,discussion}.py; LLM_Collab_Code_Generation:
# baselines/he_{single_agent,discuss}.py), except the coding pipeline, which the authors do not
# have (ours: main's prompt plus aux's code).

MAGRPO_METHODS = ("single", "parallel", "pipeline", "discussion", "magrpo", "mt-magrpo")
PARAGRAPH_SPLIT = "[PARAGRAPH_SPLIT]"


def single_agent_prompt(problem: dict) -> str:
    """One model does the whole task: code = the entry point alone; writing = both parts, split by a
    marker."""
    if problem["kind"] == "code":
        entry, params = problem["entry_point"], function_params(problem["prompt"]) or "..."
        return ("Solve this coding problem by implementing the required function.\n\nProblem:\n"
                f"{problem['prompt']}\n\nIMPORTANT INSTRUCTIONS:\n"
                f"{CODE_RULES}- Implement ONLY the '{entry}' function as specified\n"
                "- Make sure to include proper return statement\n\n"
                f"Your output should follow this format:\n\ndef {entry}({params}):\n"
                "    # your function code here\n    return result\n")
    if problem["kind"] == "tldr":
        return ("Please provide a summary of this Reddit post in exactly two paragraphs:\n\n"
                f"{problem['text']}\n\nInstructions:\n- First paragraph: Provide a concise summary "
                "of the main points\n- Second paragraph: Expand on the summary with more details, "
                "using more unique vocabulary words, include as many categories of transition "
                "words as possible to improve flow, and make it 2-3 times longer than the first "
                "paragraph in terms of character count, while maintaining a consistent style\n\n"
                "IMPORTANT REQUIREMENTS - FOLLOW EXACTLY:\n"
                "- No paragraph should be less than 10 tokens or more than 200 tokens\n"
                f"- Use EXACTLY this delimiter between paragraphs: {PARAGRAPH_SPLIT}\n\nSummary:\n"
                "Paragraph 1:")
    return ("Based on the following scientific abstract, expand content for an introduction "
            f"section in exactly two paragraphs:\n\n{problem['text']}\n\nInstructions:\n"
            "- First paragraph: Focus on background and motivation\n"
            "- Second paragraph: Focus on methodology and implications\n"
            "- Both paragraphs should be roughly EQUAL in length (similar word count)\n\n"
            "IMPORTANT REQUIREMENTS - FOLLOW EXACTLY:\n- Each paragraph should be between 128 and "
            f"256 tokens\n- Use EXACTLY this delimiter between paragraphs: {PARAGRAPH_SPLIT}\n\n"
            "Introduction:\nParagraph 1:")


def split_paragraphs(text: str, kind: str) -> tuple[str, str]:
    """A single agent's writing -> (part 1, part 2): at the marker, else (the authors split at a
    random 2-3x (TLDR) or 0.9-1.1x (arXiv) length ratio) deterministically at 2.5x / 1x, at the next
    space."""
    text = text.strip()
    if PARAGRAPH_SPLIT in text:
        first, second = text.split(PARAGRAPH_SPLIT, 1)
    else:
        cut = int(len(text) / (1 + (2.5 if kind == "tldr" else 1.0)))
        while cut < len(text) and text[cut] not in " \n":
            cut += 1
        first, second = text[:cut], text[cut:]
    label = r"^(?:first paragraph|second paragraph|paragraph [12]|part [12]):\s*"
    strip = lambda s: re.sub(label, "", s.strip(), flags=re.IGNORECASE).strip()  # noqa: E731
    return strip(first), strip(second)


def pipeline_prompt(problem: dict, first_output: str) -> str:
    """Agent 2's prompt in the sequential pipeline: it sees agent 1's output."""
    if problem["kind"] == "code":
        aux = extract_function(first_output, "aux") or first_output
        return (main_prompt(problem)
                + f"\nThe helper function aux, written by another agent:\n{aux}\n")
    if problem["kind"] == "tldr":
        return ("Create a detailed summary that expands on the following concise summary.\n\n"
                f"Original Query:\n{problem['text']}\n\nConcise Summary (from another agent):\n"
                f"{first_output}\n\nIMPORTANT INSTRUCTIONS:\n"
                "- Build upon and expand the concise summary above\n- Use more unique words\n"
                "- Use transition words to improve flow\n- Make your response 2-3x longer than the "
                "concise summary\n")
    return ("Based on the following scientific abstract, expand content for an introduction "
            f"section.\n\nAbstract:\n{problem['text']}\n\n"
            f"Background and motivation section (from another agent):\n{first_output}\n\n"
            "IMPORTANT INSTRUCTIONS:\n- Focus on methodology and implications\n"
            "- Build upon the background section provided above\n"
            "- Avoid repeating what was already written in the background\n")


def discussion_prompts(problem: dict, first: list[str]) -> list[str]:
    """Round 2 of the one-round discussion: each agent sees the other's round-1 output (and, in
    writing, its own)."""
    if problem["kind"] == "code":
        entry = problem["entry_point"]
        params = function_params(problem["prompt"]) or "..."
        main_code = (extract_function(first[1], entry)
                     or "# No main function generated in Round 1")
        aux_code = (extract_function(first[0], "aux")
                    or "# No aux function generated in Round 1")
        rules = ("- Do NOT include markdown code blocks (```python)\n"
                 "- Do NOT include any text before or after the function\n")
        return ["Improve your helper function based on how it's being used by the main function.\n"
                f"\nProblem:\n{problem['prompt']}\n\nThe main function implementation from another "
                f"agent:\n{main_code}\n\nIMPORTANT INSTRUCTIONS:\n"
                "- Output ONLY the improved aux function code, no explanations\n"
                f"{rules}- Create an improved helper function named 'aux' that better assists the "
                "main function\n- Look at how the main function uses (or could use) aux() and "
                "optimize accordingly\n- The aux function should provide exactly what the main "
                "function needs\n\nYour output should follow this format:\n\ndef aux(...):\n"
                "    # your improved function code here\n    return result\n",
                "Improve your main function implementation based on the helper function provided.\n"
                f"\nProblem:\n{problem['prompt']}\n\nThe auxiliary function implementation from "
                f"another agent:\n{aux_code}\n\nIMPORTANT INSTRUCTIONS:\n"
                "- Output ONLY the improved main function code, no explanations\n"
                f"{rules}- Do NOT redefine the aux() function (it's already provided above)\n"
                f"- Implement ONLY the improved '{entry}' function\n"
                "- Make effective use of the aux() function based on what it provides\n"
                "- Ensure your solution correctly uses the aux() function's return value\n\n"
                f"Your output should follow this format:\n\ndef {entry}({params}):\n"
                "    # your improved function code here\n    return result\n"]
    if problem["kind"] == "tldr":
        return ["Refine your concise summary based on the detailed version.\n\nOriginal Query:\n"
                f"{problem['text']}\n\nYour previous concise summary:\n{first[0]}\n\n"
                f"The detailed summary from another agent:\n{first[1]}\n\nIMPORTANT INSTRUCTIONS:\n"
                "- Output ONLY the refined concise summary\n"
                "- Ensure it provides a good foundation for the detailed version\n"
                "- Keep it brief and focused\n",
                "Refine your detailed summary now that you can see the concise version.\n\n"
                f"Original Query:\n{problem['text']}\n\nThe concise summary:\n{first[0]}\n\n"
                f"Your previous detailed summary:\n{first[1]}\n\nIMPORTANT INSTRUCTIONS:\n"
                "- Build upon and expand the concise summary\n"
                "- Use more unique words than the concise summary\n"
                "- Use transition words to improve flow\n- Make your response 2-3x longer than the "
                "concise summary\n"]
    return ["Refine your background and motivation section based on the methodology section.\n\n"
            f"Original Abstract:\n{problem['text']}\n\nYour previous background and motivation:\n"
            f"{first[0]}\n\nThe methodology and implications from another agent:\n{first[1]}\n\n"
            "IMPORTANT INSTRUCTIONS:\n- Output ONLY the refined background and motivation\n"
            "- Ensure it provides a good foundation for the methodology section\n"
            "- Make both sections roughly equal in length\n",
            "Refine your methodology and implications section now that you can see the "
            f"background.\n\nOriginal Abstract:\n{problem['text']}\n\n"
            f"The background and motivation:\n{first[0]}\n\n"
            f"Your previous methodology and implications:\n{first[1]}\n\nIMPORTANT INSTRUCTIONS:\n"
            "- Build upon the background section\n- Ensure consistency with the background and "
            "motivation\n- Make both sections roughly equal in length\n"]


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


def code_metrics(samples: list[list[dict]], k_values: list[int]) -> dict:
    """samples[problem][j] (in sampling order) -> the authors' coding metrics: pass@k (any of the
    first k passes every assert), the unbiased pass@k, accuracy@k, MaxCoop@k (each averaged over
    problems), and over all samples the cooperation rate, structure / syntax / full-pass rates, and
    the cooperation schemes of the passing pairs."""
    flat = [s for per_p in samples for s in per_p]
    n = len(samples[0])
    out = {}
    per_problem = lambda f: sum(f(per_p) for per_p in samples) / len(samples)  # noqa: E731
    for k in k_values:
        out[f"pass@{k}"] = per_problem(lambda ss: pass_at_k_first([s["passed_all"] for s in ss], k))
        out[f"pass@{k}_unbiased"] = per_problem(
            lambda ss: pass_at_k_unbiased(n, sum(s["passed_all"] for s in ss), k))
        out[f"accuracy@{k}"] = per_problem(lambda ss: accuracy_at_k([s["accuracy"] for s in ss], k))
        out[f"maxcoop@{k}"] = per_problem(lambda ss: max_coop_at_k([s["bonus"] for s in ss], k))
    out["cooperation_rate"] = cooperation_rate([s["bonus"] for s in flat])
    out["structure_rate"] = sum(s["main_defined"] for s in flat) / len(flat)
    out["syntax_rate"] = sum(s["syntax_ok"] for s in flat) / len(flat)
    out["full_pass_rate"] = sum(s["passed_all"] for s in flat) / len(flat)
    labelled = [s["scheme"] for s in flat if s.get("scheme")]
    out["schemes"] = {label: labelled.count(label) for label in COOPERATION_SCHEMES}
    out["schemes_labelled"] = len(labelled)
    return out


def writing_metrics(samples: list[list[dict]]) -> dict:
    """The writing reward (max 3) and its four levels, averaged over every sample."""
    flat = [s for per_p in samples for s in per_p]
    out = {f"level/{name}": sum(s["levels"][name] for s in flat) / len(flat)
           for name in flat[0]["levels"]}
    out["reward_max_of_k"] = (sum(max(s["reward"] for s in per_p) for per_p in samples)
                              / len(samples))
    return out


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
                                       chat_template=args.chat_template)
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


def read_run(run_dir: str, flag: str, need: tuple[str, ...] = ()) -> dict:
    """A training run's args.json; refused with one line naming the flag when it is missing or
    lacks a setting in `need` (a run saved by another version of the script)."""
    path = Path(run_dir) / "args.json"
    if not path.exists():
        arg_error(flag, f"{run_dir} has no args.json: not a run folder of cotrain.py or magrpo.py")
    run = json.loads(path.read_text())
    missing = [key for key in need if key not in run]
    if missing:
        arg_error(flag, f"{path} has no {', '.join(missing)}: a run saved by another version of "
                        f"the script (evaluate it with that version)")
    return run


def load_run_adapters(model, run_dir: str, flag: str, args, prefix: str):
    """Every adapter in RUN_DIR/adapters/, loaded as prefix + its name. Returns (model, names, run
    args)."""
    run_args = read_run(run_dir, flag, need=("model", "turns", "feedback", "feedback_tests",
                                               "code_extraction"))
    if run_args["model"] != args.model:
        arg_error(flag, f"{run_dir} was trained on --model {run_args['model']!r}, but --model "
                        f"is {args.model!r}")
    folder = Path(run_dir) / "adapters"
    found = sorted(p.name for p in folder.iterdir()
                   if (p / "adapter_config.json").exists()) if folder.is_dir() else []
    if not found:
        arg_error(flag, f"{folder} holds no saved adapters (a LoRA run saves them when it "
                        "finishes; --full-finetune runs, saved as agents/, are not supported here)")
    for name in found:
        model = load_adapter_as(model, folder / name, prefix + name)
    return model, [prefix + name for name in found], run_args


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
    problems = magrpo.load_problems(args.dataset, "eval", args.limit)
    if not problems:
        arg_error("--dataset", f"{args.dataset} has no eval problems")
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
                                   "generate_batch_size": args.generate_batch_size})
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


# ----------------------------------------------------------------------------------------------
# 5. Outputs: results.json (every number), results.md (tables), PNG plots (matplotlib optional)
# ----------------------------------------------------------------------------------------------


VOTE_RULE = ("majority vote with tie expectation, the authors' rule (two agents: [right, "
             "unparsable] scores 1, [right, wrong] 0.5)")


def accuracy_summary(accuracy: dict) -> str:
    """The console line of one method: the mean agent accuracy per turn, then the authors' vote."""
    agents, vote = (" ".join(f"{a:.3f}" for a in accuracy[k]) for k in ("mean_agent", "majority"))
    return f"mean agent accuracy per turn {agents} | vote (authors' tie rule) {vote}"


def control_summary(m: dict) -> str:
    """The console line of a control: one answer's accuracy, the vote of as many answers as the
    debate's, tokens; the vote within the paired debate's tokens where it was evaluated."""
    line = (f"one answer {m['sample_accuracy']:.3f} | vote of {m['num_samples']} "
            f"{m['vote_accuracy']:.3f} | tokens/question {m['tokens_per_question']:.1f}")
    if "budget_vote_accuracy" in m:
        line += (f" | within {m['control_of']}'s {m['budget_per_question']:.1f} tokens/question: "
                 f"vote {m['budget_vote_accuracy']:.3f} of {m['budget_samples']:.1f} answers")
    return line


def debate_table(methods: dict[str, dict]) -> str:
    """Markdown: rows = methods, columns = turns (the mean agent accuracy in %), the same turns'
    majority vote with tie expectation (the authors' rule, in %), the pooled W→R / R→W fractions
    between consecutive turns, then the budget: answers, generated and read tokens per question; a
    note under the table names the two accuracies."""
    n_turns = max(m["num_turns"] for m in methods.values())
    head = (["method"] + [f"turn {t + 1}" for t in range(n_turns)]
            + [f"vote turn {t + 1}" for t in range(n_turns)]
            + [f"W→R / R→W {t + 1}→{t + 2}" for t in range(n_turns - 1)]
            + ["answers / q", "tokens / q", "prompt tokens / q"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in methods.items():
        agents, vote = ([f"{100 * a:.1f}" for a in m["accuracy"][k]]
                        for k in ("mean_agent", "majority"))
        trans = [f"{100 * p['pooled_fractions']['W→R']:.1f} / "
                 f"{100 * p['pooled_fractions']['R→W']:.1f}"
                 for p in m["transitions"]]
        budget = [str(m.get("answers_per_question", ""))] + [
            f"{m[k]:.1f}" if k in m else "" for k in ("tokens_per_question",
                                                      "prompt_tokens_per_question")]
        cells = (agents + [""] * (n_turns - len(agents)) + vote + [""] * (n_turns - len(vote))
                 + trans + [""] * (n_turns - 1 - len(trans)) + budget)
        lines.append("| " + " | ".join([name] + cells) + " |")
    return ("\n".join(lines) + f"\n\nturn t: the mean agent accuracy (%), which an unparsable "
            f"partner cannot raise; vote turn t: the {VOTE_RULE}; tokens: generated, per "
            f"question, every agent and turn.\n")


def agents_table(methods: dict[str, dict]) -> str:
    """Markdown: each agent of each debate method: its accuracy per turn (%) and its W→R / R→W
    between consecutive turns (% of the questions)."""
    n_turns = max(m["num_turns"] for m in methods.values())
    head = (["method", "agent"] + [f"turn {t + 1}" for t in range(n_turns)]
            + [f"W→R / R→W {t + 1}→{t + 2}" for t in range(n_turns - 1)])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in methods.items():
        for a, per_turn in enumerate(m["accuracy"]["agents"]):
            trans = [f"{100 * p['agent_fractions'][a]['W→R']:.1f} / "
                     f"{100 * p['agent_fractions'][a]['R→W']:.1f}" for p in m["transitions"]]
            cells = ([f"{100 * x:.1f}" for x in per_turn] + [""] * (n_turns - len(per_turn))
                     + trans + [""] * (n_turns - 1 - len(trans)))
            lines.append("| " + " | ".join([name, str(a)] + cells) + " |")
    return "\n".join(lines) + "\n\nEach agent: its accuracy per turn (%), its W→R / R→W (% of "\
        "the questions).\n"


def controls_table(controls: dict[str, dict], debates: dict[str, dict]) -> str:
    """Markdown: each self-consistency control (%): one answer's accuracy; the vote of as many
    answers as the debate's, with their tokens per question; the vote of the answers within the
    debate's generated tokens, how many answers and tokens that is and the questions that fell
    short; then the debate it matches: its last turn's mean agent accuracy and vote, its answers
    and tokens per question."""
    head = ["control", "one answer", "vote, same answers", "answers / q", "tokens / q",
            "vote, same tokens", "answers / q", "tokens / q", "short", "debate",
            "debate last turn", "debate vote", "answers / q", "tokens / q"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in controls.items():
        budget = ([f"{100 * m['budget_vote_accuracy']:.1f}", f"{m['budget_samples']:.1f}",
                   f"{m['budget_tokens_per_question']:.1f}", f"{100 * m['budget_short']:.1f} %"]
                  if "budget_vote_accuracy" in m else [""] * 4)
        d = debates.get(m["control_of"])
        debate = ([f"{100 * d['accuracy']['mean_agent'][-1]:.1f}",
                   f"{100 * d['accuracy']['majority'][-1]:.1f}", str(d["answers_per_question"]),
                   f"{d['tokens_per_question']:.1f}"] if d else ["not evaluated", "", "", ""])
        cells = ([f"{100 * m['sample_accuracy']:.1f}", f"{100 * m['vote_accuracy']:.1f}",
                  str(m["num_samples"]), f"{m['tokens_per_question']:.1f}"] + budget
                 + [m["control_of"]] + debate)
        lines.append("| " + " | ".join([name] + cells) + " |")
    temperature = next(iter(controls.values()))["temperature"]
    return ("\n".join(lines) + f"\n\nA control: one agent alone answers each question, sampled at "
            f"T = {temperature}; one answer: its mean accuracy; vote: the same tie rule, over as "
            "many answers as the debate's (same answers) or over the answers, in sampling order, "
            "whose generated tokens do not exceed the debate's on that question (same tokens; at "
            "least one; short: the questions where the answers ran out first).\n")


def split_table(debates: dict[str, dict]) -> str:
    """Markdown: the split-information controls of each debate method that has them (%): its last
    turn's mean agent accuracy, the same with silent partners, the one-agent ceiling, per turn the
    messages that carry the agent's own number, and before the last turn those that carry it in the
    first sentence (what a partner hears)."""
    chosen = {name: m for name, m in debates.items() if "split_controls" in m}
    if not chosen:
        return ""
    T = max(m["num_turns"] for m in chosen.values())
    head = (["method", f"turn {T}", f"silent turn {T}", "ceiling"]
            + [f"informative turn {t + 1}" for t in range(T)]
            + [f"heard turn {t + 1}" for t in range(T - 1)])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in chosen.items():
        c = m["split_controls"]
        keys = ([f"eval/silent/turn{T}/agent_accuracy", "eval/ceiling/accuracy"]
                + [f"eval/turn{t + 1}/informative" for t in range(T)]
                + [f"eval/turn{t + 1}/heard" for t in range(T - 1)])
        cells = [f"{100 * m['accuracy']['mean_agent'][-1]:.1f}"] + [
            f"{100 * c[k]:.1f}" if k in c else "" for k in keys]
        lines.append("| " + " | ".join([name] + cells) + " |")
    return ("\n".join(lines) + "\n\nSplit information (each agent sees its own number): the mean "
            "agent accuracy; the same team, greedy, with every partner message replaced by a "
            "neutral one (silent); agent 0's turn-1 policy alone on the whole question (ceiling); "
            "the messages that carry the agent's own number (informative), and in their first "
            "sentence, what a partner hears (heard).\n")


def samples_table(methods: dict[str, dict], columns: list[str]) -> str:
    """Markdown: rows = methods, columns = the given metric keys (missing -> blank)."""
    lines = ["| method | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 1)]
    for name, m in methods.items():
        cells = [f"{m[c]:.3g}" if isinstance(m.get(c), (int, float)) else "" for c in columns]
        lines.append("| " + " | ".join([name] + cells) + " |")
    return "\n".join(lines) + "\n"


def magrpo_columns(k_values: list[int], code: bool) -> list[str]:
    """results.md's columns in magrpo mode: for code, pass@k, unbiased pass@k, accuracy@k and
    MaxCoop@k for every k of --k-values; for writing, the reward levels; then reward, latency and
    tokens."""
    kinds = (("pass", ""), ("pass", "_unbiased"), ("accuracy", ""), ("maxcoop", ""))
    columns = ([f"{metric}@{k}{suffix}" for metric, suffix in kinds for k in k_values]
               + ["cooperation_rate"] if code else
               ["reward_max_of_k", "level/structure", "level/coordination", "level/vocabulary",
                "level/style"])
    return columns + ["reward", "reward_round1", "time_per_problem_s", "tokens_per_problem",
                      "sequential_generations"]


def write_results(out_dir: Path, results: dict, table: str) -> tuple[Path, Path]:
    """results.json (every number; non-finite floats become null) and results.md (the table)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    clean = lambda x: (None if isinstance(x, float) and not math.isfinite(x) else  # noqa: E731
                       {k: clean(v) for k, v in x.items()} if isinstance(x, dict) else
                       [clean(v) for v in x] if isinstance(x, (list, tuple)) else x)
    json_path, md_path = out_dir / "results.json", out_dir / "results.md"
    json_path.write_text(json.dumps(clean(results), indent=2, ensure_ascii=False))
    md_path.write_text(table)
    return json_path, md_path


def _pyplot():
    """matplotlib.pyplot with a file-only backend, or None (and a note) when matplotlib is not
    installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots (pip install matplotlib)")
        return None
    return plt


def plot_debate(methods: dict[str, dict], out_dir: Path,
                controls: dict | None = None) -> list[Path]:
    """accuracy_per_turn.png (per method and turn, the mean agent accuracy, solid, and the
    authors' majority vote, dashed; each control's vote, dotted) and, with T >= 2,
    transitions.png (pooled W→R and R→W fractions per pair of consecutive turns, a pair of bars
    per method: MAPoRL Figs. 3-4)."""
    plt = _pyplot()
    if plt is None:
        return []
    n_turns = next(iter(methods.values()))["num_turns"]  # every method plays the same T
    paths = [out_dir / "accuracy_per_turn.png"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for i, (name, m) in enumerate(methods.items()):
        ax.plot(range(1, n_turns + 1), [100 * a for a in m["accuracy"]["mean_agent"]], marker="o",
                color=f"C{i}", label=f"{name}: mean agent")
        ax.plot(range(1, n_turns + 1), [100 * a for a in m["accuracy"]["majority"]], marker="x",
                color=f"C{i}", linestyle="--", label=f"{name}: vote (authors' tie rule)")
    for i, (name, m) in enumerate((controls or {}).items(), start=len(methods)):
        ax.axhline(100 * m["vote_accuracy"], color=f"C{i}", linestyle=":",
                   label=f"{name}: vote of {m['num_samples']} answers")
    ax.set(xlabel="turn", ylabel="accuracy (%)", title="Accuracy per turn", ylim=(0, 100))
    ax.set_xticks(range(1, n_turns + 1))
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.savefig(paths[0], dpi=120, bbox_inches="tight")
    plt.close(fig)
    if n_turns < 2:
        return paths
    paths.append(out_dir / "transitions.png")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / (2 * len(methods))
    for i, (name, m) in enumerate(methods.items()):
        for j, kind in enumerate(("W→R", "R→W")):
            ax.bar([x + (2 * i + j) * width for x in range(n_turns - 1)],
                   [100 * pair["pooled_fractions"][kind] for pair in m["transitions"]], width,
                   color=f"C{i}", hatch="" if kind == "W→R" else "//", label=f"{name} {kind}")
    ax.set_xticks([x + 0.4 - width / 2 for x in range(n_turns - 1)],
                  [f"{t + 1}→{t + 2}" for t in range(n_turns - 1)])
    ax.set(xlabel="turns", ylabel="% of (question, agent) pairs",
           title="Answer changes between turns")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.savefig(paths[1], dpi=120, bbox_inches="tight")
    plt.close(fig)
    return paths


def plot_magrpo(methods: dict[str, dict], out_dir: Path, code: bool) -> list[Path]:
    """quality_vs_time.png (pass@k for every k of --k-values, or the reward, against generation
    seconds per problem: the efficiency claim) and, for code, schemes.png (the cooperation schemes
    of each method's passing pairs)."""
    plt = _pyplot()
    if plt is None:
        return []
    keys = sorted({key for m in methods.values() for key in m if re.fullmatch(r"pass@\d+", key)},
                  key=lambda key: int(key[5:])) if code else ["reward"]
    paths = [out_dir / "quality_vs_time.png"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    scale = 100 if code else 1  # pass@k in %
    for i, key in enumerate(keys):  # one marker per k, one point per method
        points = [(name, m["time_per_problem_s"], scale * m[key]) for name, m in methods.items()
                  if m.get(key) is not None]
        ax.scatter([x for _, x, _ in points], [y for _, _, y in points], marker="os^Dv<>p*"[i % 9],
                   label=key)
        xs, ys, placed = [x for _, x, _ in points] or [0], [y for _, _, y in points] or [0], []
        near_x = 0.08 * (max(xs) - min(xs) or 1)  # names closer than this stack, not overlap
        near_y = 0.08 * (100 if code else max(ys) - min(ys) or 1)
        for name, x, y in points if i == 0 else []:  # a method's points share x: its name once
            stack = sum(abs(x - px) <= near_x and abs(y - py) <= near_y for px, py in placed)
            placed.append((x, y))
            ax.annotate(name, (x, y), fontsize=8, xytext=(3, 3 + 10 * stack),
                        textcoords="offset points")
    if code:
        ax.legend(fontsize=8)
    ax.set(xlabel="generation wall-clock per problem (s)", title="Quality against latency",
           ylabel="pass@k (%)" if code else "reward", **(dict(ylim=(0, 100)) if code else {}))
    fig.tight_layout()
    fig.savefig(paths[0], dpi=120)
    plt.close(fig)
    labelled = {name: m for name, m in methods.items() if code and m.get("schemes_labelled")}
    if labelled:
        paths.append(out_dir / "schemes.png")
        fig, ax = plt.subplots(figsize=(6, 1.2 + 0.4 * len(labelled)))
        left = [0.0] * len(labelled)
        for scheme in COOPERATION_SCHEMES:
            widths = [m["schemes"][scheme] / m["schemes_labelled"] for m in labelled.values()]
            ax.barh(list(labelled), widths, left=left, label=scheme)
            left = [a + b for a, b in zip(left, widths)]
        ax.set(xlabel="fraction of passing (aux, main) pairs", title="Cooperation schemes")
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
        fig.savefig(paths[1], dpi=120, bbox_inches="tight")
        plt.close(fig)
    return paths


# ----------------------------------------------------------------------------------------------
# 6. Main
# ----------------------------------------------------------------------------------------------


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


def check_args(args):
    """Every refusal of a setting, before anything heavy loads: one line `error: --flag: ...`, exit
    code 2."""
    if args.use_vllm:
        from nanomarl.vllm_rollout import check_vllm_args
        check_vllm_args(args)
    check_numbers(args, positive=("top_p", "num_samples", "batch_size", "sft_lr", "sft_batch_size",
                                  "lora_r", "lora_alpha", "test_timeout"),
                  non_negative=("limit", "max_new_tokens", "top_k", "sft_questions", "sft_epochs",
                                "sandbox_workers", "sc_samples", "sc_max_samples", "sc_agent"),
                  unit_interval=("top_p",))
    check_model_name(args.model, "--model")
    check_device(args.device)
    for flag in ("run", "mt_run", "single_run", "verifier"):
        if getattr(args, flag) and not Path(getattr(args, flag)).is_dir():
            arg_error("--" + flag.replace("_", "-"),
                      f"{getattr(args, flag)} is not a folder (give a run folder)")
    if args.mode == "debate" and (args.num_agents < 1 or args.num_turns < 1):
        arg_error("--num-agents", "need --num-agents >= 1 and --num-turns >= 1")
    sc_samples = args.sc_samples or args.num_agents * args.num_turns
    if args.sc_max_samples and args.sc_max_samples < sc_samples:
        arg_error("--sc-max-samples", f"must be >= the answers per question ({sc_samples}), got "
                                      f"{args.sc_max_samples}")
    if args.runs and (args.mode != "magrpo" or args.run or args.mt_run or args.methods):
        arg_error("--runs", "evaluates the cross-play of magrpo.py runs alone: --mode magrpo, "
                            "without --run, --mt-run and --methods")
    for run_dir in args.runs.split(",") if args.runs else []:
        if not Path(run_dir.strip()).is_dir():
            arg_error("--runs", f"{run_dir.strip()} is not a folder (give magrpo.py run folders)")
    if args.mode == "magrpo" and args.num_samples < 1:
        arg_error("--num-samples", f"must be >= 1, got {args.num_samples}")
    if args.mode == "magrpo" and args.dataset == "pipeline":  # the methods here play 2 agents
        arg_error("--dataset", "pipeline has 3 agents; evaluate.py scores 2-agent teams only "
                               "(minicode, humaneval, coophumaneval, tldr, arxiv, jsonl:PATH)")
    if args.feedback_in_prompt and not args.verifier:
        arg_error("--feedback-in-prompt", "needs --verifier (a train_verifier.py run folder)")
    if not args.greedy and args.temperature <= 0:
        arg_error("--temperature", "must be > 0 when sampling (or pass --greedy), got "
                                   f"{args.temperature}")


def use_run_data(args):
    """--dataset '' is the mode's default; with --run and no --dataset typed: the run's own, read
    from its args.json."""
    args.dataset = args.dataset or DEFAULT_DATASET[args.mode]
    if not args.run or "dataset" in given_fields(args):
        return
    if not (Path(args.run) / "args.json").is_file():
        return
    run = read_run(args.run, "--run")
    if "dataset" not in run:
        arg_error("--run", f"{args.run}/args.json names no dataset (a run saved by another version "
                           f"of the script): type the --dataset to evaluate on")
    value = run["dataset"]
    if value and value != args.dataset:
        print(f"--dataset {value}: the one {args.run} was trained on (--dataset chooses another)")
        args.dataset = value


# evaluate.py's flag <- the cotrain.py run's setting that its held-out evaluation used
RUN_EVAL_SETTINGS = dict(num_agents="num_agents", num_turns="num_turns",
                         max_new_tokens="max_new_tokens", prompt_style="prompt_style",
                         feedback_in_prompt="feedback_in_prompt", verifier="verifier",
                         temperature="temperature", seed="seed", split="eval_split",
                         limit="eval_questions", dataset_config="dataset_config",
                         question_field="question_field", answer_field="answer_field",
                         dataset_task="dataset_task")


def use_run_settings(args):
    """Debate mode with a cotrain.py --run: what is not typed follows the run's own held-out
    evaluation (its agents, turns, tokens, prompts, questions, greedy debates, one generate call per
    turn, its controls' samples; methods offtheshelf and maporl, and the controls if it had them):
    the numbers the training printed. A typed flag that differs gets a note."""
    if args.mode != "debate" or not args.run or not (Path(args.run) / "args.json").is_file():
        return
    run, given = read_run(args.run, "--run"), given_fields(args)
    if run.get("script", "cotrain") != "cotrain":
        return
    run_values = {flag: run[key] for flag, key in RUN_EVAL_SETTINGS.items() if key in run}
    run_values["greedy"] = True
    if not run_values.get("limit"):  # a run without a held-out evaluation: its training questions
        run_values.pop("limit", None)
        run_values.pop("split", None)
    if run.get("model") and not run.get("models") and "model" not in given:
        args.model = run["model"]  # the base its agents were trained on (offtheshelf's either way)
    for flag, value in run_values.items():
        if flag not in given:
            setattr(args, flag, value)
        elif getattr(args, flag) != value:
            print(f"note: {args.run}'s held-out evaluation used --{flag.replace('_', '-')} "
                  f"{value}; evaluating with {getattr(args, flag)} (typed)")
    n = args.sc_samples or args.num_agents * args.num_turns
    if "limit" not in given and "batch_size" not in given:  # all questions in one call, as it did
        args.batch_size = max(args.limit, 1)
    if "generate_batch_size" not in given:  # its 0: a whole turn, or a round of answers, at once
        args.generate_batch_size = run.get("generate_batch_size") or args.batch_size * n
    if "sc_max_samples" not in given:
        args.sc_max_samples = 2 * n
    if "methods" not in given:
        controls = ",sc-base,sc-maporl" if run.get("eval_self_consistency", True) else ""
        args.methods = "offtheshelf,maporl" + controls
    settings = " ".join(f"--{f.replace('_', '-')} {getattr(args, f)}" for f in
                        ("num_agents", "num_turns", "max_new_tokens", "limit", "split", "seed")
                        if f not in given)
    print(f"evaluating as {args.run}'s held-out evaluation: {settings}"
          f"{' --greedy' if 'greedy' not in given else ''} --methods {args.methods} (typed flags "
          f"override; --methods adds sft, single, mix)")


def dataset_source(args) -> dict:
    """How to make the evaluated questions again: the dataset, split, question seed, limit, and for
    reasoning-gym:NAME the library's version and every generator setting."""
    source = dict(dataset=args.dataset, split=args.split, question_seed=args.question_seed,
                  limit=args.limit)
    if args.dataset.startswith("reasoning-gym:"):
        import importlib.metadata
        source.update(library="reasoning-gym", version=importlib.metadata.version("reasoning-gym"),
                      settings=reasoning_gym_config(args.dataset, args.dataset_config))
    return source


def main(args: Args):
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
    print(f"evaluate.py --mode {args.mode}: "
          + (f"cross-play of {args.runs}" if args.runs else f"methods {', '.join(methods)}")
          + f" -> {out_dir}")
    start = time.time()
    if args.runs:  # cross-play and swapped roles alone
        results, rows, pngs = {}, [], []
        extra = dict(crossplay=evaluate_crossplay(args, device))
        table = crossplay_table(extra["crossplay"])
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
