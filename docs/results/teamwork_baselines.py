"""Two fixed teams on teamwork's held-out pairs, no model: how much of the task a rule or a coin
solves. Scored by the task's own joint reward (nanomarl/tasks/kinds.py:joint_reward, as magrpo.py's
evaluate_team scores a trained team) on the held-out pairs magrpo.py evaluates: the first
eval_problems of the eval split (recipes/magrpo-teamwork.yaml), and the whole eval split beside it.

- positional rule: player 1 answers the first-named item, player 2 the second, each answer the
  item alone (the prompt: "Reply with your choice only.");
- random choice: each player takes one of the two items uniformly at random, a clean answer: the
  exact expectation over the 4 equally likely joint answers of every pair (nothing is sampled).

Prints the table and writes it to docs/results/magrpo-teamwork/baselines.txt.

    python docs/results/teamwork_baselines.py
"""
import itertools
import sys
from fractions import Fraction
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from nanomarl.tasks.kinds import joint_reward, pass_rate  # noqa: E402
from nanomarl.tasks.problems import load_problems  # noqa: E402

RECIPE = ROOT / "recipes" / "magrpo-teamwork.yaml"
OUT = ROOT / "docs" / "results" / "magrpo-teamwork" / "baselines.txt"


def held_out_pairs(limit: int | None = None) -> list[dict]:
    """magrpo.py's held-out problems for --dataset teamwork: the first `limit` of the eval split
    (None: the recipe's eval_problems; 0: the whole split)."""
    if limit is None:
        limit = yaml.safe_load(RECIPE.read_text())["eval_problems"]
    return load_problems("teamwork", "eval", limit)


def expected(problems: list[dict], joint_answers) -> tuple[float, float]:
    """(pass rate, mean joint reward) of a team whose joint answer to a problem is each of
    joint_answers(problem) with equal probability: exact expectations, pair by pair."""
    passed, reward = Fraction(0), 0.0
    for problem in problems:
        answers = joint_answers(problem)
        scored = [joint_reward(problem, texts) for texts in answers]
        passed += Fraction(pass_rate("teamwork", [levels for _, levels in scored]))
        reward += sum(total for total, _ in scored) / len(scored)
    return float(passed / len(problems)), reward / len(problems)


def positional_rule(problems: list[dict]) -> tuple[float, float]:
    """Player 1 takes the first-named item, player 2 the second."""
    return expected(problems, lambda problem: [list(problem["items"])])


def random_choice(problems: list[dict]) -> tuple[float, float]:
    """Each player takes either item with probability 1/2, independently: 4 joint answers."""
    return expected(problems, lambda problem: [list(texts) for texts in
                                               itertools.product(problem["items"], repeat=2)])


def table() -> str:
    rows = ["| baseline | held-out pairs | pass rate | mean joint reward (max 1) |",
            "|---|---|---|---|"]
    for limit, which in ((None, "the recipe's"), (0, "the whole eval split")):
        problems = held_out_pairs(limit)
        for name, baseline in (("positional rule", positional_rule),
                               ("random choice (exact expectation)", random_choice)):
            solved, reward = baseline(problems)
            rows.append(f"| {name} | {len(problems)} ({which}) | {solved * 100:.1f} % "
                        f"| {reward:.3f} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    text = table()
    print(text, end="")
    OUT.write_text(text)
