"""The run folder and what keeps a run safe: args.json, metrics.jsonl and samples.jsonl, atomic
checkpoints, --resume, clean stops on SIGINT/SIGTERM, the RNG states, and the CPU thread count.

Every trainer calls start_run, log_metrics, save_checkpoint and, for --resume, resumed_args; a
learner may skip this module. A run folder resumes with the version of the script that saved it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from nanomarl.cli import BadRow, arg_error, flag_name, given_fields
from nanomarl.distributed import is_main_process, world_info
from nanomarl.trackers import check_report_to, report_metrics, start_tracker

# ---------------------------------------------------------------------- threads


def choose_threads(cores: int, load: float, running: float, omp_num_threads: str | None = None,
                   flag: int = 0) -> tuple[int, str]:
    """How many CPU threads torch should use, and why: --threads N if given (> 0), else
    OMP_NUM_THREADS if set to a positive integer, else the cores that other processes leave free:
    cores - round(min(load, running)), at least 1, with `load` the 1-minute load average and
    `running` the number of other runnable tasks right now.

    Why not one per core (torch's default): torch's OpenMP threads wait for each other at every
    operation, so when another process holds a core, a thread per core runs at the pace of the one
    that gets no CPU, many times slower. Why both measures: the load average lags by about a minute
    and still counts a run that has just ended; the count right now misses a competitor that happens
    to sleep at that moment. A core counts as busy when both see it."""
    if flag > 0:
        return flag, "--threads"
    if _positive_int(omp_num_threads):
        return int(omp_num_threads), "OMP_NUM_THREADS"
    busy = min(cores, max(0, round(min(load, running))))
    return max(1, cores - busy), (f"{cores} cores, {busy} busy: 1-minute load average {load:.2f}, "
                                  f"{running:.1f} other tasks running now")


def _positive_int(text: str | None) -> bool:
    return text is not None and text.strip().isdigit() and int(text) > 0


def other_running_tasks(samples: int = 10, interval_s: float = 0.02) -> float:
    """Tasks runnable right now besides this one, averaged over `samples` reads of /proc/loadavg
    (its 4th field, 'running/total', counts this process too); 0 where /proc is missing."""
    if not Path("/proc/loadavg").exists():
        return 0.0
    counts = []
    for _ in range(samples):
        counts.append(int(Path("/proc/loadavg").read_text().split()[3].split("/")[0]) - 1)
        time.sleep(interval_s)
    return max(0.0, sum(counts) / len(counts))


def set_torch_threads(flag: int = 0, flush_denormals: bool = True) -> str:
    """Set torch's CPU thread count by choose_threads (call it at startup, before any model loads)
    and return the line a script prints: 'threads: N (why)'. flush_denormals: float32 values below
    1.2e-38 become 0 on the CPU. The far tail of a sharp softmax (T 0.3) is such values, and a
    matmul over them runs up to 100x slower on x86; a term that small falls below the rounding of
    any sum it joins, so the numbers stay the same (tests/test_threads.py). Set before the first
    parallel op, so that torch's worker threads inherit it."""
    if flag < 0:
        arg_error("--threads", f"must be >= 0 (0 = choose from the free cores), got {flag}")
    torch.set_flush_denormal(flush_denormals)
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:
        cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    omp = os.environ.get("OMP_NUM_THREADS")
    by_load = flag <= 0 and not _positive_int(omp)  # else no need to sample the running tasks
    threads, why = choose_threads(cores, load, other_running_tasks() if by_load else 0.0, omp, flag)
    torch.set_num_threads(threads)
    return f"threads: {threads} ({why}" + (")" if flag > 0 else "; --threads N sets it)")

# ---------------------------------------------------------------------- random state


def rng_state() -> dict:
    state = dict(python=random.getstate(), numpy=np.random.get_state(), torch=torch.get_rng_state())
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict):
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def all_rng_states() -> list[dict]:
    """Every rank's rng_state(), indexed by rank ([rng_state()] for one process), for the
    checkpoint: a resumed multi-process run then samples exactly like an uninterrupted one. Every
    rank must call it."""
    states = [None] * world_info()[1]
    if len(states) == 1:
        return [rng_state()]
    torch.distributed.all_gather_object(states, rng_state())
    return states


def restore_rng_state(states: list[dict]):
    """Set this rank's RNG state from a checkpoint's all_rng_states()."""
    rank, world = world_info()
    if len(states) != world:
        arg_error("--resume", f"the checkpoint was written by {len(states)} process(es): resume "
                              f"it with as many (torchrun --nproc_per_node {len(states)}), "
                              f"not {world}")
    set_rng_state(states[rank])

# ---------------------------------------------------------------------- the run folder

# this process's run, its last checkpoint and how to continue before the first, for _stop
_RUN = dict(script="", run_dir=None, step=None, restart="")


def writable_dir(folder: str | Path, flag: str = "--output-dir") -> Path:
    """The folder, made (parents too) and checked by writing a file in it, before any work: one line
    naming the flag when it cannot be written."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        arg_error(flag, f"cannot write to {folder}: {e.strerror or e} (pick a writable folder)")
    return folder


def start_run(args, script: str) -> Path:
    """The run folder: a new runs/<script>-<time> (or --output-dir), or --resume's folder (checked
    by resumed_args). A new run writes args.json (its settings and the script's name). A resume
    appends the flags it was given to resumes.jsonl (the next resume layers them again), writes the
    merged settings to args_resume.json, removes what a killed write left behind, and trims
    metrics.jsonl, samples.jsonl and eval_samples.jsonl to the checkpoint's step (the later steps
    are logged again). A folder that cannot be written is refused first, with one line."""
    check_report_to(getattr(args, "report_to", "none"))  # a missing tracker: refused first
    resume = getattr(args, "resume", "")
    flag = "--resume" if resume else "--output-dir"
    now = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(resume or getattr(args, "output_dir", "") or f"runs/{script}-{now}-s{args.seed}")
    if world_info()[1] > 1:  # every rank uses rank 0's folder name (clocks differ)
        box = [str(run_dir)]
        torch.distributed.broadcast_object_list(box, src=0)
        run_dir = Path(box[0])
    elif not resume and (run_dir / "metrics.jsonl").exists():
        arg_error("--output-dir", f"{run_dir} already holds a run; continue it with "
                                  f"--resume {run_dir} or pick a new folder")
    if resume and not (run_dir / "checkpoint.pt").is_file():
        arg_error("--resume", f"{run_dir} has no checkpoint.pt to resume from")
    done = checkpoint_step(run_dir / "checkpoint.pt") if resume else 0
    if resume and 0 < getattr(args, "max_steps", 0) <= done:  # a finished run: nothing rewritten
        arg_error("--max-steps", f"{run_dir} is already at step {done} of --max-steps "
                                 f"{args.max_steps}: nothing to train (a longer run: --resume "
                                 f"{run_dir} --max-steps N, N > {done})")
    _RUN.update(script=script, run_dir=run_dir, step=None, restart="")
    if not is_main_process():
        return run_dir
    writable_dir(run_dir, flag)
    start_tracker(getattr(args, "report_to", "none"), run_dir, dataclasses.asdict(args))
    settings = json.dumps({"script": script, **dataclasses.asdict(args)}, indent=2)
    if not resume:
        atomic_write_text(run_dir / "args.json", settings)
        return run_dir
    _RUN["step"] = done
    for leftover in [*run_dir.glob("*.tmp"), *run_dir.glob(".tmp-*"), *run_dir.glob("*.old")]:
        if leftover.suffix == ".old" and not leftover.with_suffix("").exists():
            continue  # X.old without X: the copy load_adapters falls back to
        shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    for log in ("metrics.jsonl", "samples.jsonl", "eval_samples.jsonl"):
        trim_jsonl(run_dir / log, _RUN["step"])
    given = {name: getattr(args, name) for name in sorted(given_fields(args) - {"resume"})}
    now = datetime.datetime.now().isoformat(timespec="seconds")
    with open(run_dir / "resumes.jsonl", "a") as f:
        f.write(json.dumps(dict(time=now, step=_RUN["step"], given=given)) + "\n")
    atomic_write_text(run_dir / "args_resume.json", settings)
    return run_dir


def set_restart_note(note: str):
    """What a stop before the first checkpoint says to do (default: start again in a new folder)."""
    _RUN["restart"] = note


def resumes_given(run_dir: Path) -> list[dict]:
    """The flags given at each resume of the run, in order (RUN/resumes.jsonl; [] before any)."""
    resumes = Path(run_dir) / "resumes.jsonl"
    lines = resumes.read_text().splitlines() if resumes.exists() else []
    return [json.loads(line)["given"] for line in lines if line.strip()]


def resumed_args(args, script: str, must_match: tuple[str, ...] = (),
                 same_eval: tuple[str, ...] = (), checkpoint: bool = True):
    """--resume RUN: the settings of the run, layered in the order they were given: the first run's
    args.json, then the flags given at each earlier resume (RUN/resumes.jsonl), then the flags typed
    on this command line (typed, not "differs from the default", so --lr 1e-5 counts even when 1e-5
    is the default). Refused before any model loads, with one line: a folder without args.json or
    checkpoint.pt (checkpoint=False: a script that restarts such a run itself), a run of another
    script, a run saved by another version of this script (its settings are not exactly this
    version's flags), a changed flag of must_match (what the checkpoint's tensors depend on: models,
    agents, turns, adapters, dataset), and a same_eval flag (the held-out evaluation's questions)
    other than the first run's or 0 (off): the last evaluation compares with the first."""
    run_dir, cls = Path(args.resume), type(args)
    if not (run_dir / "args.json").is_file():
        arg_error("--resume", f"{run_dir} has no args.json: not a run folder (give the folder of "
                              f"the run to continue)")
    saved = json.loads((run_dir / "args.json").read_text())
    if checkpoint and not (run_dir / "checkpoint.pt").is_file():
        arg_error("--resume", f"{run_dir} has no checkpoint.pt: the run stopped before its first "
                              f"checkpoint (start it again in a new folder)")
    owner = saved.pop("script", None)
    if owner is not None and owner != script:
        arg_error("--resume", f"{run_dir} is a {owner}.py run, not a {script}.py one; continue it "
                              f"with python {owner}.py --resume {run_dir}")
    layers = [saved] + resumes_given(run_dir)
    names = {f.name for f in dataclasses.fields(cls)}
    # another version: args.json without the script's name, or with other fields than this Args
    unknown = {k for layer in layers[1:] for k in layer if k not in names}
    differ = sorted((names ^ set(saved)) | unknown)
    if owner is None or differ:
        why = "its args.json names no script"
        if differ:
            why = "its flags differ: " + ", ".join(flag_name(k) for k in differ[:4])
            why += ", ..." if len(differ) > 4 else ""
        arg_error("--resume", f"{run_dir} was saved by another version of {script}.py ({why}); "
                              f"resume it with that version, or start a new run")
    merged = {}
    for layer in layers:
        merged.update(layer)
    before, given = dict(merged), given_fields(args) - {"resume"}
    merged.update({name: getattr(args, name) for name in given})
    changed = [name for name in must_match if merged[name] != before[name]]
    if changed:
        was = " ".join(_flag_text(n, before[n]) for n in changed)
        arg_error(", ".join(flag_name(n) for n in changed),
                  f"{run_dir} was trained with {was}; a resumed run keeps them (drop the flag, or "
                  f"start a new run)")
    changed = [name for name in same_eval if merged[name] not in (saved[name], 0)]
    if changed:
        was = " ".join(_flag_text(n, saved[n]) for n in changed)
        arg_error(", ".join(flag_name(n) for n in changed),
                  f"{run_dir} was evaluated before its first update with {was}; a resumed run "
                  f"evaluates the same questions, so that before and after compare (drop the flag, "
                  f"or 0 for no evaluation)")
    merged["resume"] = args.resume
    resumed = cls(**merged)
    object.__setattr__(resumed, "_given", frozenset(given))
    return resumed


def _flag_text(name: str, value) -> str:
    if isinstance(value, bool):
        return flag_name(name) if value else flag_name("no_" + name)
    return f"{flag_name(name)} {value!r}" if value == "" else f"{flag_name(name)} {value}"


def trim_jsonl(path: Path, step: int):
    """Keep the rows of a per-step log up to `step` (a resumed run logs the later steps again, each
    step exactly once) and drop a torn last line (a process killed mid-append). Rows without a
    step are kept."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        step_of_row = row.get("step") if isinstance(row, dict) else None
        if not isinstance(step_of_row, (int, float)) or step_of_row <= step:
            keep.append(line + "\n")
    atomic_write_text(path, "".join(keep))

# ---------------------------------------------------------------------- logs


def log_metrics(run_dir: Path, metrics: dict):
    """Append one JSON object (one step) to metrics.jsonl and send the same row to the --report-to
    tracker; only rank 0 writes."""
    if is_main_process():
        row = {k: v.item() if isinstance(v, (torch.Tensor, np.generic)) else v
               for k, v in metrics.items()}
        with open(Path(run_dir) / "metrics.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        report_metrics(row)


def print_eval_table(run_dir: Path, columns: list[str]):
    """The held-out evaluations logged in metrics.jsonl (rows holding columns[0]) as a table, from
    the one before the first update (step 0) to the last, then 'before -> after' for the last column
    (the headline number)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not is_main_process() or not path.exists():
        return
    rows = [row for row in map(json.loads, path.read_text().splitlines()) if columns[0] in row]
    if not rows:
        return
    print(f"held-out evaluation ({rows[0].get('eval/num_questions', '?')} held-out items, greedy):")
    print(f"{'step':>5} | " + " | ".join(columns))
    for row in rows:
        cells = " | ".join(f"{row.get(c, float('nan')):>{len(c)}.3f}" for c in columns)
        print(f"{row['step']:>5} | " + cells)
    before, after, last = rows[0], rows[-1], columns[-1]
    print(f"{last}: {before[last]:.3f} (step {before['step']}) -> "
          f"{after[last]:.3f} (step {after['step']})")


def format_metrics(metrics: dict, keys: list[str]) -> str:
    return "  ".join(f"{k}={metrics[k]:.4g}" for k in keys
                     if k in metrics and isinstance(metrics[k], (int, float)))


def log_samples(run_dir: Path, rows: list[dict], name: str = "samples.jsonl"):
    """Append rows (one JSON object each, with its `step`) to the run's `name` (rank 0 only):
    rollouts to samples.jsonl, held-out answers to eval_samples.jsonl."""
    if is_main_process():
        with open(Path(run_dir) / name, "a") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)

# ---------------------------------------------------------------------- safe writes


def atomic_write_text(path: Path, text: str):
    """Write a temporary file, then rename it over `path`: a reader (or a killed writer) sees the
    old or the new text."""
    with finish_writes_first():
        tmp = Path(str(path) + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


def checkpoint_step(path: str | Path) -> int:
    """The step of a checkpoint.pt, read without loading its tensors (memory-mapped)."""
    return torch.load(path, map_location="cpu", weights_only=False, mmap=True)["step"]


def save_checkpoint(path: str | Path, state: dict):
    """torch.save to a temporary file, fsync, then rename over the old checkpoint: a SIGKILL at any
    moment leaves the previous checkpoint intact, and a SIGINT/SIGTERM waits until the write is
    done. Only rank 0 writes."""
    if not is_main_process():
        return
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with finish_writes_first():
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        # The one test hook in this module (tests/test_fault.py): a SIGKILL at exactly this point,
        # between writing the new checkpoint and swapping it in, cannot be timed from outside the
        # process, and this is the moment the atomic write must survive. Unset, it does nothing.
        if os.environ.get("NANOMARL_TEST_KILL_IN_CHECKPOINT") == str(state.get("step")):
            os.kill(os.getpid(), signal.SIGKILL)  # the new checkpoint is written, not swapped in
        os.replace(tmp, path)
        if path.name == "checkpoint.pt":
            _RUN["step"] = state.get("step")  # for the note of a stop


def load_checkpoint(path: str | Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def replace_dir(tmp: Path, target: Path):
    """Swap a finished temporary folder into place (the old one is removed only after the swap; a
    kill between the two renames leaves target.old, which load_adapters falls back to)."""
    old = target.with_name(target.name + ".old")
    with finish_writes_first():
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)

# ---------------------------------------------------------------------- signals

_WRITES = dict(depth=0, pending=None)  # open finish_writes_first() blocks; a signal held back


@contextlib.contextmanager
def finish_writes_first():
    """Around a write that must not be cut (a checkpoint, the adapters, both): a SIGINT/SIGTERM that
    arrives inside waits until the outermost block ends, then stops the run (clean_exits()).
    Blocks nest."""
    _WRITES["depth"] += 1
    try:
        yield
    finally:
        _WRITES["depth"] -= 1
    if _WRITES["depth"] == 0 and _WRITES["pending"] is not None:
        signum, _WRITES["pending"] = _WRITES["pending"], None
        _stop(signum)


def _stop(signum: int):
    run_dir, step, script = _RUN["run_dir"], _RUN["step"], _RUN["script"]
    if run_dir is None:
        note = ""
    elif step is None:
        note = (f": no checkpoint was written yet in {run_dir} "
                f"({_RUN['restart'] or 'start the run again in a new folder'})")
    else:
        note = (f": the checkpoint in {run_dir} is at step {step}; continue with "
                f"python {script}.py --resume {run_dir}")
    print(f"\nstopped by {signal.Signals(signum).name}{note}", file=sys.stderr)
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def clean_exits(data_flag: str = "--dataset"):
    """What a script's `__main__` runs main() in. SIGINT (Ctrl-C) and SIGTERM stop the run with exit
    code 128 + the signal's number and a note on how to continue; a checkpoint or adapter write in
    progress is finished first. (SIGKILL cannot be caught: the atomic writes keep the previous
    checkpoint loadable.) A malformed data row (BadRow) stops with one line naming data_flag, exit
    code 2. Other errors keep their traceback."""
    def handler(signum, frame):
        if _WRITES["depth"]:
            _WRITES["pending"] = signum
        else:
            _stop(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except BadRow as e:
        arg_error(data_flag, str(e))
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def projected_time(run_dir: Path, step_s: float, updates: int, evaluations: int) -> str:
    """The minutes the rest of a run takes on this machine: `updates` updates of step_s seconds and
    `evaluations` held-out evaluations as long as the last one (metrics.jsonl; none yet: 0 s)."""
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    eval_s = next((m["timing/eval_s"] for m in reversed(logged) if "timing/eval_s" in m), 0.0)
    minutes = (updates * step_s + evaluations * eval_s) / 60
    return (f"projected on this machine: {minutes:.1f} more minutes ({updates} updates of "
            f"{step_s:.0f} s, {evaluations} held-out evaluations of {eval_s:.0f} s)")
