"""The questions of the debate scripts (cotrain.py, train_verifier.py, evaluate.py): load_task reads
GSM8K, ANLI, a local JSONL file, any hub dataset or local data file, or makes the built-in offline
arithmetic word problems or a reasoning-gym generator's questions (optional package); each record
holds a question and its normalised gold answer.

Also the answer normalisers (numbers, ANLI labels), local JSONL files read one way (local_jsonl, on
nanomarl/tasks/local_data.py), and step_indices (which questions a step trains on, so a resumed run
continues exactly). A learner may skip this module: a record is {id, question, answer, task}.
"""
from __future__ import annotations

import dataclasses
import math
import random
import re
from fractions import Fraction
from pathlib import Path

from nanomarl.cli import BadRow, arg_error
from nanomarl.tasks.local_data import hash_split, jsonl_split, read_jsonl
from nanomarl.tasks.split import SPLIT_DATASETS, arith_split_records

ANLI_LABELS = ["entailment", "neutral", "contradiction"]

ANLI_PROMPT = (  # the authors' ANLI prompt
    "Premise: {premise}\n\nHypothesis: {hypothesis}\n\nPlease determine the relationship between "
    "the premise and hypothesis. Choose one of the following: 'entailment', 'neutral', or "
    "'contradiction'. Start with a concise reasoning for your choice, and conclude with your final "
    "answer. You do not need to restate the premise and hypothesis.")


def gsm8k_record(row: dict, index: int, split: str) -> dict:
    """openai/gsm8k row -> record; the gold is the text after '####'."""
    if "####" not in row["answer"]:
        raise ValueError("gsm8k answer has no '####'")
    gold = normalize_number(row["answer"].split("####")[-1])
    if gold is None:
        raise ValueError(f"unparsable gold answer {row['answer'].split('####')[-1]!r}")
    solution = row["answer"].split("####")[0].strip()
    solution = re.sub(r"<<[^>]*>>", "", solution)  # drop the calculator annotations
    return dict(id=f"gsm8k/{split}/{index}", question=row["question"], answer=gold, task="math",
                solution=f"{solution}\nAnswer: \\boxed{{{gold}}}")


def anli_record(row: dict, index: int, split: str) -> dict:
    """facebook/anli row -> record; label 0/1/2 -> entailment/neutral/contradiction."""
    if row["label"] not in (0, 1, 2):
        raise ValueError(f"anli label {row['label']!r} is not 0, 1 or 2")
    return dict(id=f"anli/{split}/{row.get('uid', index)}", question=ANLI_PROMPT.format(**row),
                answer=ANLI_LABELS[row["label"]], task="nli")


def jsonl_record(row: dict, question_field: str = "question", answer_field: str = "answer",
                 task: str = "math") -> dict:
    """A local JSONL row -> record: the question and the gold answer from their fields, the answer
    normalised as `task` (a row's own "task" field wins: 'math' or 'nli', where 0/1/2 are
    ANLI_LABELS); optional "id", extra fields kept. ValueError names a missing field's flag."""
    for field, flag in ((question_field, "--question-field"), (answer_field, "--answer-field")):
        if field not in row:
            raise ValueError(f"no field {field!r} ({flag} names it; the row has "
                             f"{', '.join(map(repr, row)) or 'none'})")
    task, answer = row.get("task", task), row[answer_field]
    if task not in ("math", "nli"):
        raise ValueError(f"task must be 'math' or 'nli', got {task!r}")
    if task == "nli" and type(answer) is int and answer in (0, 1, 2):
        answer = ANLI_LABELS[answer]
    gold = (normalize_number if task == "math" else normalize_label)(str(answer))
    if gold is None or not str(row[question_field] or "").strip():
        raise ValueError("empty question" if gold else f"unparsable gold answer {answer!r}")
    return {**row, "question": str(row[question_field]), "answer": gold, "task": task}


def local_jsonl(name: str, split: str, limit: int | None, skip_bad_rows: bool,
                question_field: str, answer_field: str, task: str) -> list[dict]:
    """A local JSONL file, named jsonl:PATH (its splits: each row's "split" field, else hash_split)
    or PATH (one split, 'train'), read one way: read_jsonl and jsonl_record, so a bad row is named
    by file and line, and a file without a usable row is refused in one line."""
    path, hashed = name.removeprefix("jsonl:"), name.startswith("jsonl:")
    if task not in ("math", "nli"):
        arg_error("--dataset-task", f"expected math or nli, got {task!r}")
    if not hashed and split != "train":
        arg_error("--dataset", f"{name} has no split {split!r}, only train (a single file is "
                               f"the split 'train'; a folder takes its split names from its file "
                               f"names)")
    fields = list(dict.fromkeys(k for row in read_jsonl(path, (), True)[0] for k in row))
    for field, flag in ((question_field, "--question-field"), (answer_field, "--answer-field")):
        if fields and field not in fields:  # in no row: the flag, not the rows, is wrong
            arg_error(flag, f"{path} has no column {field!r} (its columns: {', '.join(fields)})")
    rows, skipped = read_jsonl(path, (), skip_bad_rows,
                               lambda row: jsonl_record(row, question_field, answer_field, task))
    if skipped:
        print(f"skipped {skipped} bad rows in {path}")
    if not rows:
        arg_error("--dataset", f"{path} has no usable rows" + (" (--skip-bad-rows skipped "
                                                              f"{skipped})" if skipped else ""))
    for i, row in enumerate(rows):
        row.setdefault("id", f"{Path(path).stem}/{i}" if hashed else f"{Path(path).stem}/train/{i}")
    rows = jsonl_split(rows, split, path) if hashed else rows  # a split field, else a text hash
    return rows[:limit] if limit else rows


_ARITH_NAMES = ["Ava", "Ben", "Cara", "Dan", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jin", "Kai",
                "Lea", "Mo", "Nia"]
_ARITH_ITEMS = ["apples", "pencils", "marbles", "stickers", "books", "coins", "cookies", "shells"]

ARITH_KINDS = {  # the built-in offline tasks, from hardest to easiest
    "arith": ["add", "sub", "mul", "two"],  # one or two steps, numbers 2-20
    "arith:easy": ["add", "sub"],  # one step, numbers 2-20
    # one step, one-digit numbers: a small model's errors here are mostly behaviour (an answer
    # copied from the question instead of computed), which RL can fix, not arithmetic
    "arith:digits": ["add-digits", "sub-digits"]}


def arith_problem(rng: random.Random, kinds: list[str] = ARITH_KINDS["arith"]) -> tuple[str, int]:
    """One easy arithmetic word problem with its integer answer (add, subtract, multiply, or two
    steps; the -digits kinds add or subtract one-digit numbers, drawn last: moving a draw changes
    every kind's questions)."""
    name, item = rng.choice(_ARITH_NAMES), rng.choice(_ARITH_ITEMS)
    a, b, c = rng.randint(2, 20), rng.randint(2, 20), rng.randint(2, 9)
    kind = rng.choice(kinds)
    if kind in ("add-digits", "sub-digits"):
        a, b = rng.randint(2, 9), rng.randint(1, 9)
        kind = kind.removesuffix("-digits")
    if kind == "add":
        return (f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?",
                a + b)
    if kind == "sub":
        a, b = max(a, b), min(a, b)
        return (f"{name} has {a} {item} and gives away {b}. How many {item} does {name} have left?",
                a - b)
    if kind == "mul":
        return (f"{name} has {c} boxes with {b} {item} in each box. How many {item} does {name} "
                f"have?", c * b)
    return (f"{name} has {a} {item}, buys {c} packs of {b} {item} each, then loses 3. "
            f"How many {item} does {name} have now?", a + c * b - 3)


def arith_records(n: int, split: str, seed: int = 0, name: str = "arith") -> list[dict]:
    """The built-in offline task: n distinct seeded arithmetic word problems (name: arith,
    arith:easy with one-step additions and subtractions only, or arith:digits with one-digit
    numbers). A question belongs to a split by a hash of its text (hash_split), so splits never
    share a question, whatever n or seed each script asks for."""
    if split not in ("train", "test", "validation"):
        arg_error("--dataset", f"arith has splits train, test, validation; got {split!r}")
    rng, problems, seen = random.Random(f"arith-{seed}-{split}"), [], set()
    for _ in range(200 * n + 1000):
        if len(problems) == n:
            break
        question, answer = arith_problem(rng, ARITH_KINDS[name])
        if hash_split(question) == split and question not in seen:
            seen.add(question)
            problems.append((question, answer))
    return [dict(id=f"arith/{split}/{i}", question=q, answer=str(a), task="math",
                 solution=f"The answer is {a}.\nAnswer: \\boxed{{{a}}}")
            for i, (q, a) in enumerate(problems)]


# reasoning-gym:NAME (pip install reasoning-gym, optional): a third party's phrasing of a skill.
# basic_arithmetic's settings match arith:digits: one sum or difference of two one-digit numbers
# (the library draws operands 0-10 and lets a difference go negative; arith:digits: 2-9 and 1-9,
# never below 0) in its own four templates ("What is 3 + 5?", "Solve", "Compute", "Evaluate:")
REASONING_GYM_DEFAULTS = {"basic_arithmetic": dict(
    min_terms=2, max_terms=2, min_digits=1, max_digits=1, operators=("+", "-"),
    allow_parentheses=False, allow_negation=False, format_style="natural", whitespace="single")}


def reasoning_gym_config(name: str, config: str = "") -> dict:
    """The generator settings of reasoning-gym:NAME: REASONING_GYM_DEFAULTS, then config's key=value
    pairs (--dataset-config, e.g. 'min_digits=2,max_digits=2,operators=+'), each read as the type of
    the library's default (a tuple, such as operators, takes one character per item)."""
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        arg_error("--dataset", f"{name} needs the optional package reasoning-gym (pip install "
                               f"reasoning-gym)")
    dataset = name.partition(":")[2]
    if dataset not in DATASETS:
        arg_error("--dataset", f"reasoning-gym has no dataset {dataset!r}")
    defaults = {f.name: f.default for f in dataclasses.fields(DATASETS[dataset][1])
                if f.name not in ("seed", "size")}  # both are load_task's
    out = dict(REASONING_GYM_DEFAULTS.get(dataset, {}))
    for pair in filter(None, (p.strip() for p in config.split(","))):
        key, _, value = (part.strip() for part in pair.partition("="))
        kind = type(defaults.get(key))
        try:
            if key not in defaults or not value:
                raise ValueError("not a key=value pair of its settings")
            if kind is bool and value.lower() not in ("true", "false"):
                raise ValueError("expected true or false")
            out[key] = (value.lower() == "true" if kind is bool else
                        tuple(value) if kind in (tuple, list) else kind(value))
        except (ValueError, TypeError) as e:
            arg_error("--dataset-config", f"{pair!r} for reasoning-gym {dataset}: {e} (its "
                                          f"settings: {', '.join(defaults)})")
    return out


def reasoning_gym_records(name: str, split: str, n: int | None, seed: int, config: str,
                          skip_bad_rows: bool) -> list[dict]:
    """The first n (None: all, of the first 50,000 items) distinct questions of reasoning-gym:NAME
    (settings: reasoning_gym_config; the library's seed: `seed`) that fall in `split` by hash_split,
    as arith_records, so that its splits never share a question; each record keeps the library's
    item index (source_index)."""
    settings, dataset = reasoning_gym_config(name, config), name.partition(":")[2]  # import checked
    import reasoning_gym

    if split not in ("train", "test", "validation"):
        arg_error("--dataset", f"{name} has splits train, test, validation; got {split!r}")
    try:
        data = reasoning_gym.create_dataset(dataset, seed=seed, size=50 * (n or 1000),
                                              **settings)
    except (AssertionError, TypeError, ValueError) as e:  # the library's own checks
        arg_error("--dataset-config", f"reasoning-gym {dataset} refuses {settings}: {e}")
    records, seen = [], set()
    for index in range(len(data)):
        if len(records) == n:
            break
        item = data[index]
        if item["question"] in seen or hash_split(item["question"]) != split:
            continue
        seen.add(item["question"])
        gold = normalize_number(str(item["answer"]))
        if gold is None and not skip_bad_rows:
            raise BadRow(f"{name} item {index}: unparsable gold answer {item['answer']!r} "
                         f"(use --skip-bad-rows to skip such rows)")
        if gold is not None:
            records.append(dict(id=f"reasoning-gym/{dataset}/{split}/{index}", source_index=index,
                                question=item["question"], answer=gold, task="math"))
    if n and len(records) < n:
        print(f"note: {name} {split} has only {len(records)} distinct questions with these "
              f"settings")
    return records


# a local data file's suffix -> the datasets builder that reads it
DATA_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def dataset_records(name: str, split: str, limit: int | None, skip_bad_rows: bool,
                    question_field: str, answer_field: str, config: str, task: str) -> list[dict]:
    """Records of any hub dataset (owner/name: datasets.load_dataset(name, config, split=split)) or
    local data: a .json/.csv/.parquet file (datasets names its one split 'train'; a .jsonl file is
    local_jsonl's) or a folder (split names from the file names, e.g. train.jsonl). The question
    and the gold answer are read from question_field and answer_field; the answer is normalised as
    the built-in tasks do: math -> normalize_number (the last number, so GSM8K's '... #### 72'
    gives '72'), nli -> normalize_label (0/1/2 also map to ANLI_LABELS). Checked here, before any
    model loads: the fields exist and the split has at least one usable row."""
    if task not in ("math", "nli"):
        arg_error("--dataset-task", f"expected math or nli, got {task!r}")
    from datasets import load_dataset

    path = Path(name)
    try:
        if path.suffix in DATA_FILE_BUILDERS or path.exists():
            if not path.exists():
                arg_error("--dataset", f"{path} does not exist")
            if path.is_file() and path.suffix not in DATA_FILE_BUILDERS:
                arg_error("--dataset", f"{path}: expected a .json, .jsonl, .csv or .parquet file "
                                       f"or a folder of them")
            if path.is_file():
                tables = load_dataset(DATA_FILE_BUILDERS[path.suffix], data_files=str(path))
            else:
                tables = load_dataset(str(path))
            if split not in tables:
                arg_error("--dataset", f"{name} has no split {split!r}, only "
                                       f"{', '.join(tables)} (a single file is the split 'train'; "
                                       f"a folder takes its split names from its file names)")
            table, source = tables[split], path.stem
        else:  # a hub id
            table, source = load_dataset(name, config or None, split=split), name
    except Exception as e:  # offline, no such dataset or split, an unreadable file (not SystemExit)
        arg_error("--dataset", f"cannot load {name!r} split {split!r}: {type(e).__name__}: {e}")
    for flag, column in (("--question-field", question_field), ("--answer-field", answer_field)):
        if column not in table.column_names:
            arg_error(flag, f"{name} has no column {column!r} "
                            f"(its columns: {', '.join(table.column_names)})")
    records, skipped = [], 0
    for i, row in enumerate(table):
        if limit and len(records) >= limit:
            break
        answer = row[answer_field]
        if task == "nli" and type(answer) is int and answer in (0, 1, 2):
            gold = ANLI_LABELS[answer]
        else:
            gold = normalize_number(str(answer)) if task == "math" else normalize_label(str(answer))
        if gold is None or not str(row[question_field] or "").strip():
            if not skip_bad_rows:
                why = f"unparsable gold answer {answer!r}" if gold is None else "empty question"
                raise BadRow(f"{name} {split} row {i}: {why} "
                             f"(use --skip-bad-rows to skip such rows)")
            skipped += 1
            continue
        records.append({**row, "id": str(row.get("id", f"{source}/{split}/{i}")),
                        "question": str(row[question_field]), "answer": gold, "task": task})
    if skipped:
        print(f"skipped {skipped} bad rows in {name} {split}")
    if not records:
        arg_error("--dataset", f"{name} split {split!r} has no usable rows")
    return records


def dataset_options(args) -> dict:
    """--dataset-config/--question-field/--answer-field/--dataset-task (and --num-agents, for
    arith:split) as load_task's keywords."""
    return dict(question_field=args.question_field, answer_field=args.answer_field,
                config=args.dataset_config, task=args.dataset_task,
                num_agents=getattr(args, "num_agents", 2))


def load_task(name: str, split: str = "train", limit: int | None = None, seed: int = 0,
              skip_bad_rows: bool = False, question_field: str = "question",
              answer_field: str = "answer", config: str = "", task: str = "math",
              num_agents: int = 2) -> list[dict]:
    """Records {id, question, answer (normalised gold), task ('math'|'nli'), ...} for a dataset
    name: gsm8k (hub openai/gsm8k), anli / anli:r1|r2|r3 (hub facebook/anli, default r3 as the
    authors), jsonl:PATH (local, fixed fields), arith (built-in offline generator), or any hub id /
    local data file, read with question_field, answer_field, config and task (math|nli) by
    dataset_records; reasoning-gym:NAME (optional package; settings: --dataset-config). `limit`
    keeps the first N. arith:split (and its held-out -w1, -w2, -wide, and -mix, its problems in
    three training wordings): one number per agent (num_agents), arith_split_records."""
    if name.startswith("reasoning-gym:"):
        for flag, value, default in (("--question-field", question_field, "question"),
                                     ("--answer-field", answer_field, "answer"),
                                     ("--dataset-task", task, "math")):
            if value != default:
                arg_error(flag, f"applies to a hub id or a local file, not to {name}")
        return reasoning_gym_records(name, split, limit or None, seed, config, skip_bad_rows)
    builtin = (name in ("arith", "arith:easy", "arith:digits", "gsm8k", "anli", *SPLIT_DATASETS)
               or name.startswith("anli:"))
    options = (("--question-field", question_field, "question"),
               ("--answer-field", answer_field, "answer"),
               ("--dataset-config", config, ""), ("--dataset-task", task, "math"))
    given = [flag for flag, value, default in options if value != default]
    if builtin and given:
        arg_error(given[0], f"applies to a hub id or a local file, not to the built-in {name!r}")
    if name.startswith("jsonl:") or (name.endswith(".jsonl") and not Path(name).is_dir()):
        return local_jsonl(name, split, limit, skip_bad_rows, question_field, answer_field, task)
    data_file = Path(name).suffix in DATA_FILE_BUILDERS or Path(name).exists()
    if not builtin and ("/" in name or data_file):
        return dataset_records(name, split, limit, skip_bad_rows, question_field, answer_field,
                               config, task)
    if name in ARITH_KINDS:
        return arith_records(limit or 1000, split, seed, name)
    if name in SPLIT_DATASETS:
        return arith_split_records(limit or 1000, split, seed, num_agents, name)
    if name == "gsm8k" or name.startswith("anli"):
        from datasets import load_dataset

        if name == "gsm8k":
            table, convert = load_dataset("openai/gsm8k", "main", split=split), gsm8k_record
        else:
            rnd = name.split(":")[1] if ":" in name else "r3"
            if rnd not in ("r1", "r2", "r3"):
                arg_error("--dataset", f"{name}: the ANLI round must be r1, r2 or r3")
            split_name = {"validation": "dev"}.get(split, split)
            table, convert = load_dataset("facebook/anli", split=f"{split_name}_{rnd}"), anli_record
        records, skipped = [], 0
        for i, row in enumerate(table):
            if limit and len(records) >= limit:
                break
            try:
                records.append(convert(row, i, split))
            except ValueError as e:
                if not skip_bad_rows:
                    raise BadRow(f"{name} {split} row {i}: {e} "
                                 f"(use --skip-bad-rows to skip such rows)") from None
                skipped += 1
        if skipped:
            print(f"skipped {skipped} bad rows in {name} {split}")
        return records
    arg_error("--dataset", f"unknown dataset {name!r} (arith, arith:easy, arith:digits, "
                           f"{', '.join(SPLIT_DATASETS)}, gsm8k, anli[:r1|r2|r3], jsonl:PATH, "
                           f"reasoning-gym:NAME, a hub id owner/name, "
                           f"or a local .json/.jsonl/.csv/.parquet file or folder)")


def step_indices(num_items: int, per_step: int, step: int, seed: str,
                 drop_last: bool = False) -> list[int]:
    """Indices of the items of step `step`: consecutive slices of a seeded shuffle, reshuffled every
    epoch, so a resumed run continues exactly where it stopped. drop_last: an epoch ends before a
    short final slice."""
    steps_per_epoch = num_items // per_step if drop_last else math.ceil(num_items / per_step)
    epoch, i = divmod(step, steps_per_epoch)
    order = list(range(num_items))
    random.Random(f"{seed}-{epoch}").shuffle(order)
    return order[i * per_step:(i + 1) * per_step]


def split_records(records: list[dict], fractions: dict[str, float],
                  seed: int) -> dict[str, list[dict]]:
    """A seeded, explicit, disjoint split of records, e.g. {'verifier': 0.3, 'rl': 0.7}."""
    if abs(sum(fractions.values()) - 1) > 1e-6 or min(fractions.values()) < 0:
        raise ValueError(f"split fractions must be >= 0 and sum to 1, got {fractions}")
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    out, start = {}, 0
    names = list(fractions)
    for k, name in enumerate(names):
        end = len(order) if k == len(names) - 1 else start + round(fractions[name] * len(order))
        out[name] = [records[i] for i in order[start:end]]
        start = end
    return out


_NUMBER = r"-?(?:\d+(?:\.\d+)?|\.\d+)(?:/\d+)?"


def normalize_number(text: str) -> str | None:
    """GSM8K-style number normalisation: '1,000'->'1000', '18.0'->'18', '$5'->'5', '−3'->'-3',
    '\\frac{10}{2}'->'5', '1/4'->'0.25', '18 dollars'->'18'; several numbers -> the last one; none
    -> None."""
    text = text.replace("\u2212", "-").replace("\u2013", "-").replace("\\$", "").replace("$", "")
    text = text.replace("\\!", "").replace("\\,", "").replace("{,}", ",").replace("\\ ", "")
    text = re.sub(r"(\d+)\s*\\[dt]?frac\{(\d+)\}\{(\d+)\}",  # mixed number 4\frac{1}{2} -> 9/2
                  lambda m: str(Fraction(int(m[1])) + Fraction(int(m[2]), int(m[3]))), text)
    text = re.sub(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}", r"\1/\2", text)
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # thousands separators only
    text = re.sub(r"-\s+(?=\d)", "-", text)
    numbers = re.findall(_NUMBER, text)
    if not numbers:
        return None
    try:
        value = Fraction(numbers[-1])
    except (ValueError, ZeroDivisionError):
        return None
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.6f}".rstrip("0").rstrip(".")


def normalize_label(text: str) -> str | None:
    """ANLI label word: the first of entail*/neutral/contradict* that is not negated ('not
    entailment', 'non-entailment' are skipped), as a canonical label; None if there is none."""
    for m in re.finditer(r"(not\s+|non-?\s*)?(entail|neutral|contradict)", text.lower()):
        if not m.group(1):
            return {"entail": "entailment", "neutral": "neutral",
                    "contradict": "contradiction"}[m.group(2)]
    return None
