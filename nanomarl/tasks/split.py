"""arith:split, the debate task that needs a partner: each agent sees only its own number, and
the sum or the difference needs both. Its words (the turn-1 view and the later turns' followup),
its problem space and its splits. cotrain.py reads it through load_task (nanomarl/tasks/debate.py);
its controls are nanomarl/split_controls.py's.
"""
from __future__ import annotations

import itertools
import random
import zlib

from nanomarl.cli import arg_error

# arith:split's words: turn 1 says the number, then guesses; turn t > 1 quotes first sentences
SPLIT_VIEW = ("You and your partner each hold one number; together you must find {goal}. Your "
              "number is {own}. Your partner knows the other number. Start with \"My number is "
              "{own}.\" Then read your partner's number and compute the answer.\nShow the "
              "calculation, then end with \"The answer is\" and the number.")
SPLIT_FOLLOWUP = ("Your number is {own}. {partners}: {{said}} Find {goal}. First write \"The "
                  "numbers are {own}, \" and {theirs}, then show the calculation "
                  "and end with \"The answer is\" and the number.")
SPLIT_GOALS = {"sum": "the sum of the {count} numbers",
               "difference": "the difference of the two numbers (the larger minus the smaller)"}


SPLIT_NUMBERS = range(1, 13)  # the numbers arith:split draws, one per agent


def split_of_problem(kind: str, parts: tuple[int, ...]) -> str:
    """A split problem's split from a hash of its kind and its numbers in sorted order, so a
    problem and its seat-swaps share a split: 45 % test (114 two-agent problems), 25 % validation
    (72), 30 % train (102)."""
    bucket = zlib.crc32(f"{kind}{tuple(sorted(parts))}".encode()) % 20
    return "test" if bucket < 9 else "validation" if bucket < 14 else "train"


def split_problem(kind: str, parts: tuple[int, ...]) -> int:
    """The gold of a split question: the sum of every agent's number, or (two agents) the larger
    minus the smaller."""
    return sum(parts) if kind == "sum" else max(parts) - min(parts)


def arith_split_records(n: int, split: str, seed: int = 0, num_agents: int = 2) -> list[dict]:
    """arith:split, information split between the agents: a sum (or, with two agents, a
    difference) of one number per agent (SPLIT_NUMBERS), where agent a's view shows only its own
    number (the record's "views", one turn-1 message per agent; "followups", its message at a later
    turn, the partners' words filled in as {said}) and "question" shows them all (the control of
    one agent that sees everything). The gold is the full result. A question's split is a hash of
    its kind and numbers, so the held-out splits share no problem with training in any wording or
    seat order (split_of_problem); n training records are drawn with repetition from the training
    problems, the held-out splits hold each problem once (seeded order)."""
    if split not in ("train", "test", "validation"):
        arg_error("--dataset", f"arith:split has splits train, test, validation; got {split!r}")
    kinds = ["sum", "difference"] if num_agents == 2 else ["sum"]
    problems = [(kind, parts) for kind in kinds
                for parts in itertools.product(SPLIT_NUMBERS, repeat=num_agents)
                if split_of_problem(kind, parts) == split]
    if split != "train":  # held out: each problem once, in an order no training seed changes
        random.Random(f"arith:split-{split}-{num_agents}").shuffle(problems)
        problems = problems[:n]
    else:
        rng = random.Random(f"arith:split-{seed}-{num_agents}")
        problems = [rng.choice(problems) for _ in range(n)]
    records = []
    for i, (kind, parts) in enumerate(problems):
        goal = SPLIT_GOALS[kind].format(count="two" if num_agents == 2 else num_agents)
        numbers = ", ".join(map(str, parts))
        partners = "Your partner says" if num_agents == 2 else "Your partners say"
        theirs = "your partner's number" if num_agents == 2 else "your partners' numbers"
        records.append(dict(
            id=f"arith:split/{split}/{i}", task="math", answer=str(split_problem(kind, parts)),
            question=f"The numbers are {numbers}. Find {goal}.", parts=list(parts),
            views=[SPLIT_VIEW.format(goal=goal, own=x) for x in parts],
            followups=[SPLIT_FOLLOWUP.format(goal=goal, own=x, partners=partners, theirs=theirs)
                       for x in parts]))
    return records
