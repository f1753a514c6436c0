"""answer_shapes.py: what kind of answer each agent gave, from an evaluate.py --mode debate samples.jsonl.

docs/results.md uses it to say *why* a team is right or wrong on the arithmetic tasks. Every answer of every
(method, turn) falls in one of four shapes:
  answer first   the response starts with "The answer is" (before any working)
  unparsable     no final answer extract_answer can read (e.g. "4 + 4 = 8 pencils." without "The answer is")
  computed, right / computed, wrong   the working comes first and the final answer is read

  python docs/results/answer_shapes.py runs/evaluate-debate-RUN/samples.jsonl
"""
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for common.py
from common import extract_answer  # noqa: E402


def shape(response: str, gold: str) -> str:
    if response.strip().lower().startswith("the answer is"):
        return "answer first"
    answer = extract_answer(response, "math")
    if answer is None:
        return "unparsable"
    return "computed, right" if answer == gold else "computed, wrong"


def main(path: str):
    counts = defaultdict(Counter)  # (method, turn) -> shape -> answers
    for line in open(path):
        row = json.loads(line)
        for t, responses in enumerate(row["responses"]):
            for response in responses:
                counts[(row["method"], t + 1)][shape(response, row["gold"])] += 1
    shapes = ["answer first", "unparsable", "computed, right", "computed, wrong"]
    print("| method | turn | " + " | ".join(shapes) + " | right when computed |")
    print("|---|---|" + "---|" * (len(shapes) + 1))
    for (method, turn), c in sorted(counts.items()):
        total = sum(c.values())
        computed = c["computed, right"] + c["computed, wrong"]
        cells = [f"{100 * c[s] / total:.1f} %" for s in shapes]
        print(f"| {method} | {turn} | " + " | ".join(cells) + f" | {100 * c['computed, right'] / max(computed, 1):.1f} % |")


if __name__ == "__main__":
    main(sys.argv[1])
