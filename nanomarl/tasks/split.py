"""arith:split, the debate task that needs a partner: each agent sees only its own number, and
the sum or the difference needs both. Its words (the turn-1 view and the later turns' followup),
its problem space and its splits, and its held-out variants: arith:split-w1 and arith:split-w2 (the
same records in two other wordings, written once and never tuned on) and arith:split-wide (numbers
13 to 99). cotrain.py reads them through load_task (nanomarl/tasks/debate.py); their controls are
nanomarl/split_controls.py's.
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


# The wordings: 0, arith:split's above; 1 and 2, the same records in held-out words (arith:split-w1,
# -w2), written before any training on them: another opening sentence, goal and instruction order.
# Each view asks its agent to open with "canonical" (its number in it) and to end with "The answer
# is" and the number; "partners": the words that differ with two agents and with more.
SPLIT_WORDINGS = (
    dict(view=SPLIT_VIEW, followup=SPLIT_FOLLOWUP, goals=SPLIT_GOALS,
         question="The numbers are {numbers}. Find {goal}.", canonical="My number is {}.",
         partners=dict(partners=("Your partner says", "Your partners say"),
                       theirs=("your partner's number", "your partners' numbers"))),
    dict(view=("As a team, work out {goal}. You hold the number {own}, and {partner} can see what "
               "you cannot. Open with the sentence \"I hold {own}.\" and then use what you hear "
               "from {partner} to get the result. Give the working and finish with \"The answer "
               "is\" and the number."),
         followup=("Here is what {partner} said: {{said}} You hold {own}. Work out {goal}. Open "
                   "with \"I hold {own},\" then say {heard}, give the working and finish with "
                   "\"The answer is\" and the number."),
         goals={"sum": "the total of all the numbers",
                "difference": "how far apart the two numbers are (the bigger one minus the "
                              "smaller one)"},
         question="Here are the numbers: {numbers}. Work out {goal}.", canonical="I hold {}.",
         partners=dict(partner=("your partner", "your partners"),
                       heard=("what your partner holds", "what your partners hold"))),
    dict(view=("Say \"Mine is {own}.\" as your first sentence: {own} is your number, and only "
               "{partner} can see the rest. Then, with what {partner} will tell you, compute "
               "{goal}. Show your steps; the final sentence must be \"The answer is\" followed "
               "by the number."),
         followup=("Compute {goal}. You have {own}; {partner} wrote: {{said}} Begin your reply "
                   "with \"We have {own} and\" plus {told}, then show your steps; the final "
                   "sentence must be \"The answer is\" followed by the number."),
         goals={"sum": "what all the numbers add up to",
                "difference": "by how much the larger number exceeds the smaller one"},
         question="Numbers: {numbers}. Compute {goal}.", canonical="Mine is {}.",
         partners=dict(partner=("your partner", "your partners"),
                       told=("the number you were told", "the numbers you were told"))),
)
SPLIT_NUMBERS = range(1, 13)  # the numbers arith:split draws, one per agent
WIDE_NUMBERS = range(13, 100)  # arith:split-wide's: two digits, never trained on
# each dataset: (its wording, SPLIT_WORDINGS[k]; the numbers it draws)
SPLIT_DATASETS = {"arith:split": (0, SPLIT_NUMBERS), "arith:split-w1": (1, SPLIT_NUMBERS),
                  "arith:split-w2": (2, SPLIT_NUMBERS), "arith:split-wide": (0, WIDE_NUMBERS)}


def split_of_problem(kind: str, parts: tuple[int, ...]) -> str:
    """A split problem's split from a hash of its kind and its numbers in sorted order, so a
    problem and its seat-swaps share a split: 45 % test (arith:split: 114 two-agent problems), 25 %
    validation (72), 30 % train (102)."""
    bucket = zlib.crc32(f"{kind}{tuple(sorted(parts))}".encode()) % 20
    return "test" if bucket < 9 else "validation" if bucket < 14 else "train"


def split_problem(kind: str, parts: tuple[int, ...]) -> int:
    """The gold of a split question: the sum of every agent's number, or (two agents) the larger
    minus the smaller."""
    return sum(parts) if kind == "sum" else max(parts) - min(parts)


def split_problem_list(split: str, num_agents: int = 2,
                       name: str = "arith:split") -> list[tuple[str, tuple[int, ...]]]:
    """The distinct problems (kind, parts) of one split of a SPLIT_DATASETS name, in a fixed
    order: the kinds (sum, then difference; with more than two agents, sum only), each with its
    parts in itertools.product order. A problem's split is split_of_problem's."""
    drawn = SPLIT_DATASETS[name][1]
    kinds = ["sum", "difference"] if num_agents == 2 else ["sum"]
    return [(kind, parts) for kind in kinds
            for parts in itertools.product(drawn, repeat=num_agents)
            if split_of_problem(kind, parts) == split]


def problem_records(problems: list[tuple[str, tuple[int, ...]]], split: str,
                    name: str = "arith:split") -> list[dict]:
    """The records of `problems` (kind, parts), in order: record i has the id name/split/i; `name`
    sets the wording and the numbers its controls read (arith_split_records)."""
    wording, drawn = SPLIT_DATASETS[name]
    words = SPLIT_WORDINGS[wording]
    records = []
    for i, (kind, parts) in enumerate(problems):
        num_agents = len(parts)
        fill = {key: pair[num_agents > 2] for key, pair in words["partners"].items()}
        goal = words["goals"][kind].format(count="two" if num_agents == 2 else num_agents)
        numbers = ", ".join(map(str, parts))
        records.append(dict(
            id=f"{name}/{split}/{i}", task="math", answer=str(split_problem(kind, parts)),
            question=words["question"].format(numbers=numbers, goal=goal), parts=list(parts),
            views=[words["view"].format(goal=goal, own=x, **fill) for x in parts],
            followups=[words["followup"].format(goal=goal, own=x, **fill) for x in parts],
            kind=kind, canonical=words["canonical"], numbers=[min(drawn), max(drawn)]))
    return records


def arith_split_records(n: int, split: str, seed: int = 0, num_agents: int = 2,
                        name: str = "arith:split") -> list[dict]:
    """arith:split, information split between the agents: a sum (or, with two agents, a
    difference) of one number per agent (SPLIT_NUMBERS), where agent a's view shows only its own
    number (the record's "views", one turn-1 message per agent; "followups", its message at a later
    turn, the partners' words filled in as {said}) and "question" shows them all (the control of
    one agent that sees everything). The gold is the full result. A question's split is a hash of
    its kind and numbers, so the held-out splits share no problem with training in any wording or
    seat order (split_of_problem); n training records are drawn with repetition from the training
    problems (split_problem_list), the held-out splits hold each problem once (seeded order).
    `name`, a key of SPLIT_DATASETS, sets the wording and the numbers; every record keeps what its
    controls read: "kind", "canonical" (the opening sentence its views ask for) and "numbers" ([lo,
    hi] drawn)."""
    if split not in ("train", "test", "validation"):
        arg_error("--dataset", f"{name} has splits train, test, validation; got {split!r}")
    problems = split_problem_list(split, num_agents, name)
    # the same seeds in every variant: -w1 and -w2 hold arith:split's problems in its order
    if split != "train":  # held out: each problem once, in an order no training seed changes
        random.Random(f"arith:split-{split}-{num_agents}").shuffle(problems)
        problems = problems[:n]
    else:
        rng = random.Random(f"arith:split-{seed}-{num_agents}")
        problems = [rng.choice(problems) for _ in range(n)]
    return problem_records(problems, split, name)
