"""disagreements.py: what each agent does at turn 2 with its partner's turn-1 answer, from an
evaluate.py --mode debate samples.jsonl of a two-agent, two-turn debate.

Discussion can only pay where the agents disagree at turn 1 and one of them is right; there it
pays when the agent keeps its own right answer or adopts its partner's right one. For every agent
and question this sorts the turn-1 situation (both right, both wrong, own right and the partner
wrong, own wrong and the partner right: an unparsable answer counts as wrong) and what the agent
answered at turn 2 (its own answer again, the partner's, or another), per method, or per method
and agent with --per-agent (a heterogeneous pair, whose agents differ). The rows of the controls
(sc-base, sc-maporl: one 'turn' of one agent's answers, no partner) are left out:

  python docs/results/disagreements.py [--per-agent] runs/eval-RUN/samples.jsonl [more files]
"""
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

SITUATIONS = ["both right", "both wrong", "own right, partner wrong", "own wrong, partner right"]


def situation(own_right: bool, partner_right: bool) -> str:
    if own_right == partner_right:
        return "both right" if own_right else "both wrong"
    return "own right, partner wrong" if own_right else "own wrong, partner right"


def main(paths: list[str], per_agent: bool = False):
    counts = defaultdict(Counter)  # (method[ agent], situation) -> what happened at turn 2
    for path in paths:
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            if len(row["answers"]) == 1:  # a control's row: no second turn, no partner
                continue
            (first, second), gold = row["answers"][:2], row["gold"]
            if len(first) != 2:
                sys.exit(f"{path}: {len(first)} agents; this reads two-agent debates")
            for a in (0, 1):
                own, partner, after = first[a], first[1 - a], second[a]
                name = f"{row['method']} agent {a}" if per_agent else row["method"]
                key = (name, situation(own == gold, partner == gold))
                outcome = ("other" if after is None else "kept own" if after == own
                           else "took partner's" if after == partner else "other")
                counts[key][outcome] += 1
                counts[key]["right at turn 2"] += after == gold
                counts[key]["agents"] += 1
    columns = ["kept own", "took partner's", "other", "right at turn 2"]
    print("| method | turn 1 | agents | " + " | ".join(columns) + " |")
    print("|---|---|---|" + "---|" * len(columns))
    for method in dict.fromkeys(m for m, _ in counts):
        for s in SITUATIONS:
            c = counts[(method, s)]
            if c["agents"]:
                shares = [f"{c[k]} ({100 * c[k] / c['agents']:.0f} %)" for k in columns]
                print(f"| {method} | {s} | {c['agents']} | " + " | ".join(shares) + " |")


if __name__ == "__main__":
    files = [arg for arg in sys.argv[1:] if arg != "--per-agent"]
    if not files:
        sys.exit("usage: python docs/results/disagreements.py [--per-agent] SAMPLES.jsonl [...]")
    main(files, per_agent="--per-agent" in sys.argv[1:])
