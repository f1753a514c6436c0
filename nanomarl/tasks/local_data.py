"""Local JSONL files: the one reader of every local JSONL file (read_jsonl: a bad row is named by
its file and line), and the splits of a file whose rows have none of their own (hash_split,
jsonl_split). nanomarl/tasks/debate.py turns the rows into records; a learner may skip this module.
"""
from __future__ import annotations

import json
import zlib
from pathlib import Path

from nanomarl.cli import BadRow, arg_error


def read_jsonl(path: str | Path, required: tuple[str, ...], skip_bad_rows: bool = False,
               convert=None, flag: str = "--dataset") -> tuple[list[dict], int]:
    """Read a JSONL file; each row must be a JSON object with the `required` keys, and
    `convert(row)` (if given) may raise ValueError for rows it cannot use. A bad row raises
    BadRow("path:line: why") unless skip_bad_rows, which skips it. Returns (rows, number_skipped). A
    missing or unreadable file: one line naming `flag`, exit code 2."""
    path = Path(path)
    if not path.exists():
        arg_error(flag, f"data file {path} does not exist")
    rows, skipped = [], 0
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (UnicodeDecodeError, IsADirectoryError) as e:
        arg_error(flag, f"cannot read data file {path}: {e}")
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
            missing = [k for k in required if k not in row]
            if missing:
                raise ValueError(f"missing field(s) {', '.join(missing)}")
            rows.append(convert(row) if convert else row)
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            if not skip_bad_rows:
                raise BadRow(f"{path}:{line_no}: {e} (use --skip-bad-rows to skip such rows)") \
                    from None
            skipped += 1
    return rows, skipped


def hash_split(question: str) -> str:
    """The split of a question without a split of its own, from a hash of its text (arith_records
    too): crc32 % 10 = 0 test, 1 validation, 2-9 train. The same text always gets the same
    split."""
    bucket = zlib.crc32(question.encode()) % 10
    return "test" if bucket == 0 else "validation" if bucket == 1 else "train"


def jsonl_split(rows: list[dict], split: str, path: str) -> list[dict]:
    """The rows of one split of a local JSONL file: a row's own "split" field where it has one,
    else hash_split(question). So training and evaluation never share a question unless the file
    says so."""
    found = {str(row.get("split") or hash_split(row["question"])) for row in rows}
    if split not in found | {"train", "validation", "test"}:
        arg_error("--dataset", f"{path} has the splits {', '.join(sorted(found))}, not {split!r}")
    return [row for row in rows if str(row.get("split") or hash_split(row["question"])) == split]
