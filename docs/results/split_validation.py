"""The split debate's arms on the validation split, the figures that choose a recipe: each arm's
held-out turn-2 accuracy (mean over agents, greedy, the 72 validation problems) at update 30,
read from each run's training metrics (cotrain.py evaluates validation at updates 0 and 30), per
seed and the mean over seeds; the arm with the best mean is the one chosen.

    python docs/results/split_validation.py
"""
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent
ARMS = RESULTS / "maporl-split-arms"
CANDIDATES = RESULTS / "maporl-split-candidates"  # recipes tried on validation after the arms
RUNS = {  # arm: its seeds' metrics files; the recipe's seed 0 is the test row's own run
    "both trained, the team's last-turn score (the earlier recipe)":
        [RESULTS / "maporl-split-test/s0-train-metrics.jsonl"]
        + [ARMS / f"recipe-s{s}-train-metrics.jsonl" for s in (1, 2)],
    "both trained, Definition 1 (`--reward-rule influence`)":
        [ARMS / f"influence-s{s}-train-metrics.jsonl" for s in range(3)],
    "both trained, the own score (`--reward-rule current`)":
        [ARMS / f"current-s{s}-train-metrics.jsonl" for s in range(3)],
    "the reader alone (`--train-turns 2`)": [ARMS / f"reader-s{s}-train-metrics.jsonl"
                                             for s in range(3)],
    "the speaker alone (`--train-turns 1`)": [ARMS / f"speaker-s{s}-train-metrics.jsonl"
                                              for s in range(3)],
    "the own score, the lr held near 1e-4 (`--lr-decay-steps 1000`)":
        [CANDIDATES / f"lr-constant-s{s}-metrics.jsonl" for s in range(3)],
}
KEY = "eval/turn2/agent_accuracy"


def validation(path: Path) -> tuple[float, float]:
    """(accuracy at update 0, accuracy at update 30) of one run."""
    rows = [row for row in map(json.loads, path.open()) if KEY in row]
    assert [row["step"] for row in (rows[0], rows[-1])] == [0, 30], path
    return rows[0][KEY], rows[-1][KEY]


def main():
    print("| arm | seed 0 | seed 1 | seed 2 | mean |\n|---|---|---|---|---|")
    means, untrained = {}, set()
    for arm, paths in RUNS.items():
        firsts, lasts = zip(*map(validation, paths))
        untrained.update(firsts)
        means[arm] = sum(lasts) / len(lasts)
        cells = " | ".join(f"{100 * last:.1f}" for last in lasts)
        print(f"| {arm} | {cells} | {100 * means[arm]:.1f} |")
    assert len(untrained) == 1, untrained  # every run starts from the same untrained team
    print(f"\nuntrained: {100 * untrained.pop():.1f} % (update 0, every run); chosen: "
          f"{max(means, key=means.get)}")


if __name__ == "__main__":
    main()
