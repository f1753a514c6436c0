"""magrpo's hub problem sets (CoopHumanEval, TLDR, arXiv) through the real datasets.load_dataset, on
local folders laid out as the hub datasets are (a README whose configs name each split's files), and
the train / held-out split of a --dataset jsonl:PATH file."""
import json
import zlib

import pytest

from nanomarl.tasks import problems
from nanomarl.tasks.problems import load_problems


def hub_folder(root, splits: dict[str, list[dict]]):
    """A dataset folder as on the hub: data/<split>-00000-of-00001.parquet per split and a README
    whose `configs` maps each split name (e.g. arXiv's 'val') to its files."""
    import datasets

    (root / "data").mkdir(parents=True)
    lines = ["---", "configs:", "- config_name: default", "  data_files:"]
    for split, rows in splits.items():
        datasets.Dataset.from_list(rows).to_parquet(str(root / "data" /
                                                        f"{split}-00000-of-00001.parquet"))
        lines += [f"  - split: {split}", f"    path: data/{split}-*"]
    (root / "README.md").write_text("\n".join([*lines, "---", ""]))
    return str(root)


def post(split, i):
    return {"prompt": f"SUBREDDIT: r/{split}\n\nTITLE: post {i}\n\nPOST: text {i}\n\nTL;DR:",
            "completion": f" summary {i}"}


def che(k):
    return {"task_id": f"CoopHumanEval/{k}", "prompt": f"def f{k}(x):\n    \"\"\"x + {k}\"\"\"\n",
            "canonical_solution": f"    return x + {k}\n", "entry_point": f"f{k}",
            "test": f"def check(candidate):\n    assert candidate(1) == {1 + k}\n"}


@pytest.mark.parametrize("task", ["tldr", "arxiv", "coophumaneval"])
def test_paper_tasks_load_disjoint_train_and_eval_through_load_dataset(tmp_path, monkeypatch, task):
    """trl-lib/tldr: prompt/completion in train, validation and test (eval = test); arXiv:
    abstracts in train and val (eval = val); CoopHumanEval: one split 'train' (eval = its first
    16 problems)."""
    import datasets

    splits = {
        "tldr": {s: [post(s, i) for i in range(5)] for s in ("train", "validation", "test")},
        # the same text at the same index in both splits: the id alone keeps them apart
        "arxiv": {s: [{"abstract_text": f"We study problem {i}."} for i in range(4)]
                  for s in ("train", "val")},
        "coophumaneval": {"train": [che(k) for k in range(20)]},
    }[task]
    name, hub_splits = problems.HUB[task]
    calls, real_load_dataset = [], datasets.load_dataset

    def load_dataset(path, *args, **kwargs):
        calls.append((path, kwargs.get("split")))
        return real_load_dataset(folder, *args, cache_dir=str(tmp_path / "cache"), **kwargs)

    folder = hub_folder(tmp_path / task, splits)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    train, held = load_problems(task, "train"), load_problems(task, "eval")
    assert calls == [(name, hub_splits["train"]), (name, hub_splits["eval"])]
    assert train and held
    assert not {p["id"] for p in train} & {p["id"] for p in held}
    assert len({p["id"] for p in train}) == len(train)
    kind = "code" if task == "coophumaneval" else task
    assert {p["kind"] for p in train + held} == {kind}
    if task == "coophumaneval":
        assert (len(train), len(held)) == (4, 16)
        assert (held[0]["id"], train[0]["id"]) == ("CoopHumanEval/0", "CoopHumanEval/16")
        assert train[0]["entry_point"] == "f16" and "assert" in train[0]["test"]
    else:
        assert (len(train), len(held)) == (len(splits["train"]), len(splits[hub_splits["eval"]]))
        field = "prompt" if task == "tldr" else "abstract_text"
        assert [p["text"] for p in held] == [r[field] for r in splits[hub_splits["eval"]]]
        assert held[0]["id"] == f"{task}/{hub_splits['eval']}/0"
    assert load_problems(task, "train", limit=2) == train[:2]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return f"jsonl:{path}"


def code_row(k, **extra):
    return dict(task_id=f"toy/{k}", prompt=f"def f{k}(x):\n", entry_point=f"f{k}",
                test=f"def check(candidate):\n    assert candidate(0) == {k}\n", **extra)


def test_jsonl_split_column_and_hash_split(tmp_path):
    """A "split" field decides (validation and test are held out); without one, a crc32 hash of
    the prompt or text does, as for the debate task's JSONL: about 1 row in 5 is held out."""
    sides = ["train", "eval", "train", "test", "validation", "train"]
    dataset = write_jsonl(tmp_path / "split.jsonl",
                          [code_row(k, split=side) for k, side in enumerate(sides)])
    train, held = load_problems(dataset, "train"), load_problems(dataset, "eval")
    assert [p["id"] for p in train] == ["toy/0", "toy/2", "toy/5"]
    assert [p["id"] for p in held] == ["toy/1", "toy/3", "toy/4"]

    posts = [{"prompt": f"post {i}"} for i in range(40)]
    dataset = write_jsonl(tmp_path / "posts.jsonl", posts)
    train, held = load_problems(dataset, "train"), load_problems(dataset, "eval")
    expected = [f"post {i}" for i in range(40) if zlib.crc32(f"post {i}".encode()) % 10 < 2]
    assert [p["text"] for p in held] == expected and 0 < len(held) < 20
    assert len(train) + len(held) == 40 and not {p["id"] for p in train} & {p["id"] for p in held}
    assert load_problems(dataset, "train") == train  # the same split on every call
    assert load_problems(dataset, "eval", limit=1) == held[:1]


def test_jsonl_problem_in_both_splits_is_refused(tmp_path, capsys):
    same_text = [code_row(0, split="train"), dict(code_row(0, split="test"), task_id="toy/copy")]
    same_id = [code_row(0, split="train"), dict(code_row(1, split="eval"), task_id="toy/0")]
    for name, rows in (("text", same_text), ("id", same_id)):
        dataset = write_jsonl(tmp_path / f"{name}.jsonl", rows)
        for split in ("train", "eval"):
            with pytest.raises(SystemExit) as refused:
                load_problems(dataset, split)
            assert refused.value.code == 2
            assert "1 held-out problem(s) are also training problems" in capsys.readouterr().err
    dataset = write_jsonl(tmp_path / "odd.jsonl", [code_row(0, split="dev")])
    with pytest.raises(SystemExit, match="row 1: split must be one of"):
        load_problems(dataset)
