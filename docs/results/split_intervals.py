"""The split debate's held-out numbers with their 95 % intervals, from evaluate.py's per-problem
answers (samples.jsonl) on the test split: one folder per trained seed (method maporl, with the
controls' rows maporl/silent, maporl/shuffled, maporl/oracle, maporl/wrong) and one folder for the
untrained team (method offtheshelf, greedy: the same for every seed). --method magrpo: magrpo.py
run folders instead (eval_samples.jsonl, method magrpo and magrpo/CONTROL): each seed's last
held-out evaluation, and the base's first (step 0, the untrained team).

A problem's score is its agents' mean accuracy at the last turn. Each row gives the mean over
seeds and two 95 % intervals:
- problems: a bootstrap over the problems (the same draws for every seed and every row, so
  rows compare paired), the seeds fixed: what another draw of test problems could give;
- seeds and problems: a bootstrap over the seeds, then over the problems: what another seed
  could give too.
Then one line per seed. The no-information bound of the problems is exact (no interval: the
test set is fixed; its interval over problems is given beside it for the differences).

    python docs/results/split_intervals.py --base runs/eval-split-base runs/eval-split-s0 ...
    python docs/results/split_intervals.py --method magrpo --base RUN0 RUN0 RUN1 ...
    (--dataset arith:split-w1: the problems in another wording; --ids FILE: only the problems
    whose ids the JSON list in FILE holds; --against F0 F1 ...: another recipe's seeds, in the
    same order, for the paired difference "trained - against")
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from nanomarl.split_controls import heard_result, no_information_bound  # noqa: E402
from nanomarl.tasks.debate import load_task  # noqa: E402

CONTROLS = ("silent", "shuffled", "oracle", "wrong")
RESAMPLES = 10_000


def method_rows(folder: Path, method: str, first: bool = False) -> list[dict]:
    """The rows of `method` in an evaluate.py folder (samples.jsonl) or in a magrpo.py run's
    held-out answers (eval_samples.jsonl): those of its last evaluation (first: its first)."""
    path = folder / ("eval_samples.jsonl" if method.startswith("magrpo") else "samples.jsonl")
    if not path.is_file():
        sys.exit(f"{folder}: no {path.name} (--method {method.split('/')[0]})")
    rows = [row for row in map(json.loads, path.read_text().splitlines())
            if row["method"] == method]
    steps = [row.get("step", 0) for row in rows]
    step = min(steps, default=0) if first else max(steps, default=0)
    return [row for row in rows if row.get("step", 0) == step]


def problem_scores(folder: Path, method: str, records: dict | None = None,
                   first: bool = False) -> dict[str, float]:
    """{problem id: its agents' mean accuracy at the last turn} of `method` in a folder
    (method_rows); with records (id -> record): the share of answers computed with the wrong
    control's numbers instead (follows)."""
    scores = {}
    for row in method_rows(folder, method, first):
        last, q = row["answers"][-1], row["question"]
        targets = ([heard_result(records[q], a) for a in range(len(last))] if records
                   else [row["gold"]] * len(last))
        scores[q] = sum(a == t for a, t in zip(last, targets)) / len(last)
    return scores


def intervals(per_seed: np.ndarray) -> tuple[float, tuple, tuple]:
    """per_seed [S, P] -> (mean, 95 % over problems, 95 % over seeds and problems). Every call
    draws the same problems (a fresh generator, seed 0): each row resamples as the others do."""
    s, p = per_seed.shape
    rng = np.random.default_rng(0)
    problems = rng.integers(0, p, size=(RESAMPLES, p))
    seeds = rng.integers(0, s, size=(RESAMPLES, s))
    over_problems = per_seed[:, problems].mean(axis=(0, 2))
    over_both = np.array([per_seed[np.ix_(seeds[k], problems[k])].mean()
                          for k in range(RESAMPLES)])
    return (per_seed.mean(), tuple(np.percentile(over_problems, [2.5, 97.5])),
            tuple(np.percentile(over_both, [2.5, 97.5])))


def row(name: str, per_seed: np.ndarray) -> str:
    """One table row, in %: the mean, its two intervals (intervals) and each seed's mean."""
    mean, (a, b), (c, d) = intervals(per_seed)
    seeds = " ".join(f"{100 * x:.1f}" for x in per_seed.mean(axis=1))
    return (f"| {name} | {100 * mean:.1f} | {100 * a:.1f} to {100 * b:.1f} | "
            f"{100 * c:.1f} to {100 * d:.1f} | {seeds} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seeds", nargs="+", help="the trained seeds' evaluate.py folders (or runs)")
    parser.add_argument("--base", required=True, help="the untrained team's folder (or a run)")
    parser.add_argument("--method", default="maporl", choices=["maporl", "magrpo"],
                        help="magrpo: the folders are magrpo.py runs")
    parser.add_argument("--split", default="test", help="the arith:split split evaluated")
    parser.add_argument("--dataset", default="arith:split",
                        help="its wording: arith:split, arith:split-w1, arith:split-w2")
    parser.add_argument("--ids", default="", help="a JSON list of problem ids: only these")
    parser.add_argument("--against", nargs="*", default=[],
                        help="another recipe's folders, seed for seed: their paired difference")
    args = parser.parse_args()
    records = {r["id"]: r for r in load_task(args.dataset, args.split, limit=None)}
    method = args.method
    base = problem_scores(Path(args.base), "offtheshelf" if method == "maporl" else method,
                          first=True)
    ids = sorted(base)
    if args.ids:
        ids = sorted(set(ids) & set(json.loads(Path(args.ids).read_text())))
    missing = set(ids) - set(records)
    if missing:
        sys.exit(f"--base {args.base}: {len(missing)} problems are not {args.dataset} {args.split}")
    folders = [Path(f) for f in args.seeds]

    if args.against and len(args.against) != len(folders):
        sys.exit(f"--against: {len(args.against)} folders for {len(folders)} seeds")

    def table(runs: list, name: str, follows: bool = False) -> np.ndarray:
        found = [problem_scores(f, name, records if follows else None) for f in runs]
        for f, scores in zip(runs, found):
            if not set(ids) <= set(scores):
                sys.exit(f"{f}: {name} lacks problems of the base's {len(ids)}")
        return np.array([[scores[q] for q in ids] for scores in found])

    trained = table(folders, method)
    untrained = np.array([[base[q] for q in ids]])
    bound = np.array([[no_information_bound([records[q]]) for q in ids]])
    print(f"{args.dataset} {args.split}: {len(ids)} problems, {len(folders)} seeds; turn-2 agent "
          f"accuracy, % (mean; 95 % over problems; over seeds and problems; each seed)\n")
    print("| | mean | problems | seeds and problems | seeds |\n|---|---|---|---|---|")
    print(row("trained, as played", trained))
    for control in CONTROLS:
        print(row(f"trained, {control} partner", table(folders, f"{method}/{control}")))
    print(row("trained, wrong partner: follows", table(folders, f"{method}/wrong", follows=True)))
    print(row("untrained, as played", untrained))
    print(row("no-information bound", bound))
    print(row("trained - untrained", trained - untrained))
    print(row("trained - bound", trained - bound))
    if args.against:
        against = table([Path(f) for f in args.against], method)
        print(row("trained - against", trained - against))


if __name__ == "__main__":
    main()
