"""The budgets the README promises: short teaching files, a short README, a short reading path.

Each test measures files of the repository (paths relative to this file) and, on failure, names the file and the
number it measured. The reading path of main is measured by tests/reading_path.py (static: the definitions a
function reaches through calls, within the files named); what one update RUNS by tests/executed_path.py (every
project function that executes inside it, counted whole), on the tiny model, with --fast and with --no-fast.
"""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

FILE_BUDGETS = {"README.md": 250, "cotrain.py": 700, "magrpo.py": 700, "common.py": 600}
README_WORDS = 1500
SUPPORT_MODULE_BUDGET = 500
LONG_LINE = 100
LONG_LINE_SHARE = 0.02
READING_PATH_BUDGETS = {"cotrain.py:main": 1100, "magrpo.py:main": 1000}
READING_PATH_FILES = ["cotrain.py", "magrpo.py", "common.py"]
# executed, every project file counted: one MAPoRL update (stages 1-6), its stages 4-6, one MAGRPO step;
# the plain code (--no-fast) and the default (--fast: the fast paths' functions run too, see the README).
EXECUTED_PATH_BUDGETS = {("cotrain", "rollout_step,ppo_update"): {"--no-fast": 700, "--fast": 700},
                         ("cotrain", "make_experience,ppo_update"): {"--no-fast": 400, "--fast": 400},
                         ("magrpo", "magrpo_step"): {"--no-fast": 600, "--fast": 600}}
HASH_LIKE = re.compile(r"\b[0-9a-f]{7,40}\b")


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def top_level_py() -> list[Path]:
    return sorted(ROOT.glob("*.py"))


def support_py() -> list[Path]:
    return sorted((ROOT / "nanomarl").rglob("*.py"))


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_readme_and_teaching_files_within_their_line_budgets():
    over = [f"{name}: {line_count(ROOT / name)} lines > {limit}" for name, limit in FILE_BUDGETS.items()
            if line_count(ROOT / name) > limit]
    assert not over, "over budget: " + "; ".join(over)


def test_readme_within_1500_words():
    """A 5-minute read: detail goes to docs/, the README links to it."""
    words = len((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert words <= README_WORDS, f"README.md: {words} words > {README_WORDS}: move detail to docs/"


def test_every_support_module_within_500_lines():
    files = support_py()
    assert files, "no .py files under nanomarl/"
    over = [f"{rel(p)}: {line_count(p)} lines > {SUPPORT_MODULE_BUDGET}" for p in files
            if line_count(p) > SUPPORT_MODULE_BUDGET]
    assert not over, "over budget: " + "; ".join(over)


def test_at_most_2_percent_of_top_level_lines_over_100_characters():
    total, long_lines, per_file = 0, 0, []
    for p in top_level_py():
        lines = p.read_text(encoding="utf-8").splitlines()
        n = sum(len(line) > LONG_LINE for line in lines)
        total += len(lines)
        long_lines += n
        if n:
            per_file.append(f"{p.name} {n}/{len(lines)}")
    share = long_lines / max(total, 1)
    assert share <= LONG_LINE_SHARE, (
        f"{long_lines} of {total} lines ({share:.1%}) in the top-level .py files are longer than {LONG_LINE} "
        f"characters, budget {LONG_LINE_SHARE:.0%}: " + ", ".join(per_file))


def test_no_commit_hashes_in_code():
    found = []
    for p in top_level_py() + support_py():
        for number, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            for token in HASH_LIKE.findall(line):
                if re.search(r"[0-9]", token) and re.search(r"[a-f]", token):
                    found.append(f"{rel(p)}:{number}: {token}")
    shown = "; ".join(found[:20]) + (f"; ... {len(found) - 20} more" if len(found) > 20 else "")
    assert not found, f"{len(found)} commit-hash-like tokens in .py files: {shown}"


def test_no_legacy_settings_or_renamed_flag_tables():
    """No compatibility with unreleased versions: no `legacy_settings`, no old-flag alias tables (`renamed`)."""
    here = Path(__file__).resolve()
    files = [p for p in sorted(ROOT.rglob("*.py"))
             if p.resolve() != here and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    found = []
    for p in files:
        source = p.read_text(encoding="utf-8")
        for number, line in enumerate(source.splitlines(), 1):
            if re.search(r"legacy", line, re.IGNORECASE):
                found.append(f"{rel(p)}:{number}: legacy")
        try:
            tree = ast.parse(source, filename=str(p))
        except SyntaxError:  # a file mid-edit: the rest of the suite reports it
            continue
        for node in ast.walk(tree):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if name is not None and name.lower() == "renamed":
                found.append(f"{rel(p)}:{node.lineno}: {name}")
    found = sorted(set(found))
    assert not found, f"{len(found)} compatibility names in .py files: " + "; ".join(found)


def reading_path(entry: str, files: list[str] = READING_PATH_FILES) -> tuple[int, int, str]:
    """(definitions, lines, the tool's output) for `reading_path.py ENTRY FILES` (globs expanded), by default
    `cotrain.py magrpo.py common.py`."""
    paths = [rel(p) for pattern in files for p in sorted(ROOT.glob(pattern))]
    result = subprocess.run([sys.executable, str(TESTS / "reading_path.py"), entry, *paths],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    output = (result.stdout + result.stderr).strip()
    match = re.search(r"reaches (\d+) definitions, (\d+) lines", output)
    assert result.returncode == 0 and match, f"reading_path.py {entry} failed (exit {result.returncode}): {output}"
    return int(match.group(1)), int(match.group(2)), output


def test_cotrain_main_reading_path_within_1100_lines():
    definitions, lines, output = reading_path("cotrain.py:main")
    limit = READING_PATH_BUDGETS["cotrain.py:main"]
    assert lines <= limit, f"cotrain.py:main reaches {lines} lines > {limit} ({output})"


def test_magrpo_main_reading_path_within_1000_lines():
    definitions, lines, output = reading_path("magrpo.py:main")
    limit = READING_PATH_BUDGETS["magrpo.py:main"]
    assert lines <= limit, f"magrpo.py:main reaches {lines} lines > {limit} ({output})"


@pytest.mark.parametrize("choice", ["--fast", "--no-fast"])
@pytest.mark.parametrize("script,entries", sorted(EXECUTED_PATH_BUDGETS))
def test_what_one_update_runs_within_budget(script, entries, choice):
    """What a reader follows through one real update: every project function that runs in it, counted whole
    (tests/executed_path.py), on the tiny model, with the fast paths and with the plain code."""
    result = subprocess.run([sys.executable, str(TESTS / "executed_path.py"), script, entries, "--model",
                             "tiny", "--threads", "1", choice], cwd=ROOT, capture_output=True, text=True,
                            timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    output = (result.stdout + result.stderr).strip()
    match = re.search(r"executed reading path of \S+: (\d+) lines in (\d+) functions", output)
    assert result.returncode == 0 and match, f"executed_path.py {script} failed: {output[-2000:]}"
    limit = EXECUTED_PATH_BUDGETS[(script, entries)][choice]
    assert int(match.group(1)) <= limit, f"{script}.py:{entries} {choice} runs {match.group(0)} > {limit}"
