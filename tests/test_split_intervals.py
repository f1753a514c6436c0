"""docs/results/split_intervals.py on hand-made evaluate.py folders: each row's mean and seeds by
hand, and intervals that hold the mean (and collapse where every problem scores the same)."""
import json
import subprocess
import sys
from pathlib import Path

from nanomarl.split_controls import heard_result
from nanomarl.tasks.debate import load_task

ROOT = Path(__file__).resolve().parents[1]
CONTROLS = ("silent", "shuffled", "oracle", "wrong")


def write_folder(folder: Path, rows: list[dict]):
    folder.mkdir()
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_split_intervals_by_hand(tmp_path):
    records = load_task("arith:split", "validation", limit=4)
    ids, golds = [r["id"] for r in records], [r["answer"] for r in records]
    # untrained: both agents right on problem 0 only -> 25 %
    write_folder(tmp_path / "base", [
        dict(method="offtheshelf", question=q, gold=g, answers=[["0", "0"], [g, g] if b == 0
                                                                 else ["0", "0"]])
        for b, (q, g) in enumerate(zip(ids, golds))])
    # seed A: every problem one agent right (50 %); seed B: every agent right (100 %);
    # every control wrong, except the wrong partner's follows: seed A computes with what it hears
    for name, right in (("a", 1), ("b", 2)):
        rows = [dict(method="maporl", question=q, gold=g, answers=[["0", "0"], [g] * right +
                                                                   ["0"] * (2 - right)])
                for q, g in zip(ids, golds)]
        for control in CONTROLS:
            heard = [[heard_result(r, a) for a in range(2)] for r in records]
            rows += [dict(method=f"maporl/{control}", question=q, gold=g,
                          answers=[heard[b] if control == "wrong" and name == "a" else ["x", "x"]])
                     for b, (q, g) in enumerate(zip(ids, golds))]
        write_folder(tmp_path / name, rows)
    out = subprocess.run([sys.executable, str(ROOT / "docs/results/split_intervals.py"),
                          "--split", "validation", "--base", str(tmp_path / "base"),
                          str(tmp_path / "a"), str(tmp_path / "b")],
                         capture_output=True, text=True, check=True).stdout
    table = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in out.splitlines()
             if line.startswith("| ") and not line.startswith("| |")}
    assert table["trained, as played"][0] == "75.0"
    assert table["trained, as played"][3] == "50.0 100.0 |"
    # each seed scores every problem the same: the interval over problems is the mean itself
    assert table["trained, as played"][1] == "75.0 to 75.0"
    low, high = map(float, table["trained, as played"][2].split(" to "))
    assert 50.0 <= low < 75.0 < high <= 100.0  # over seeds: 50 % or 100 % a draw, or between
    assert table["untrained, as played"][0] == "25.0"
    assert table["trained - untrained"][0] == "50.0"
    assert table["trained, wrong partner: follows"][0] == "50.0"  # seed A 100 %, seed B 0 %
    assert all(table[f"trained, {c} partner"][0] == "0.0" for c in CONTROLS)
    bound = float(table["no-information bound"][0])
    assert 0 < bound < 100 and abs(float(table["trained - bound"][0]) - (75.0 - bound)) < 0.11
    assert "trained - against" not in table
    # --against, seed for seed: (a, b) against (b, a): per seed 50 - 100 and 100 - 50, mean 0
    out = subprocess.run([sys.executable, str(ROOT / "docs/results/split_intervals.py"),
                          "--split", "validation", "--base", str(tmp_path / "base"),
                          str(tmp_path / "a"), str(tmp_path / "b"), "--against",
                          str(tmp_path / "b"), str(tmp_path / "a")],
                         capture_output=True, text=True, check=True).stdout
    against = [line for line in out.splitlines() if line.startswith("| trained - against |")]
    assert against == ["| trained - against | 0.0 | 0.0 to 0.0 | -50.0 to 50.0 | -50.0 50.0 |"]


def test_split_intervals_of_magrpo_runs(tmp_path):
    """--method magrpo reads magrpo.py run folders: eval_samples.jsonl (not the training samples
    beside it), each seed's last evaluation and the base's first (step 0, the untrained team)."""
    records = load_task("arith:split", "validation", limit=4)
    ids, golds = [r["id"] for r in records], [r["answer"] for r in records]

    def rows(step: int, right: int) -> list[dict]:  # every problem: `right` agents right
        played = [dict(step=step, method="magrpo", question=q, gold=g,
                       answers=[["0", "0"], [g] * right + ["0"] * (2 - right)])
                  for q, g in zip(ids, golds)]
        return played + [dict(step=step, method=f"magrpo/{c}", question=q, gold=g,
                              answers=[[g, g] if c == "oracle" else ["x", "x"]])
                         for c in CONTROLS for q, g in zip(ids, golds)]
    for name, right in (("s0", 1), ("s1", 2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "eval_samples.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows(0, 0) + rows(10, 2) + rows(20, right)))
        (tmp_path / name / "samples.jsonl").write_text(json.dumps(dict(step=5, turn=1)) + "\n")
    out = subprocess.run([sys.executable, str(ROOT / "docs/results/split_intervals.py"),
                          "--method", "magrpo", "--split", "validation", "--base",
                          str(tmp_path / "s0"), str(tmp_path / "s0"), str(tmp_path / "s1")],
                         capture_output=True, text=True, check=True).stdout
    table = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in out.splitlines()
             if line.startswith("| ") and not line.startswith("| |")}
    assert table["trained, as played"][0] == "75.0"  # step 20: 50 % and 100 %, not step 10's
    assert table["trained, as played"][3] == "50.0 100.0 |"
    assert table["untrained, as played"][0] == "0.0"  # step 0
    assert table["trained, oracle partner"][0] == "100.0"
    assert table["trained, silent partner"][0] == "0.0"


def test_split_validation_reads_each_arms_last_validation_and_chooses_the_best_mean():
    """docs/results/split_validation.py on the committed training metrics: every arm's update-30
    validation figure per seed (as each metrics file holds it), the means, and the choice."""
    out = subprocess.run([sys.executable, str(ROOT / "docs/results/split_validation.py")],
                         capture_output=True, text=True, check=True).stdout
    table = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in out.splitlines()
             if line.startswith("| ") and " | seed 0 |" not in line}
    own = table["both trained, the own score (`--reward-rule current`)"]
    assert own == ["24.3", "27.1", "44.4", "31.9 |"]  # 17.5, 19.5 and 32 of the 72 problems
    assert table["both trained, Definition 1 (`--reward-rule influence`)"][3] == "30.6 |"
    assert table["both trained, the team's last-turn score (the earlier recipe)"][0] == "29.9"
    assert "untrained: 12.5 % (update 0, every run)" in out
    held = table["the own score, the lr held near 1e-4 (`--lr-decay-steps 1000`)"]
    assert held == ["43.8", "36.8", "58.3", "46.3 |"]  # 31.5, 26.5 and 42 of the 72 problems
    assert out.rstrip().endswith("chosen: the own score, the lr held near 1e-4 "
                                 "(`--lr-decay-steps 1000`)")
