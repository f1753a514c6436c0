"""arith:split, the debate task that needs a partner: each agent sees only its own number, and
the sum or the difference needs both. Its words (the turn-1 view and the later turns' followup),
its problem space and its splits, and its variants: arith:split-w1 and arith:split-w2 (the same
records in two held-out wordings, written once and never tuned or trained on), arith:split-wide
(numbers 13 to 99, never trained on), arith:split-mix (the same problems as arith:split, each
record in one of three training wordings, 0, 3 and 4, cycled by its index: a recipe that holds in
other words, judged in the never-seen ones by -w1 and -w2) and arith:split-many (the same, in 30
training wordings: mix's and 27 composed of drawn phrases, split_grammar.py). cotrain.py reads them
through load_task (nanomarl/tasks/debate.py); their controls are nanomarl/split_controls.py's.
"""
from __future__ import annotations

import itertools
import random
import zlib

from nanomarl.cli import arg_error
from nanomarl.tasks.split_grammar import composed_wordings

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
# -w2), written before any training on them: another opening sentence, goal and instruction order;
# 3 and 4, training words of arith:split-mix beside 0, as unlike 0, 1 and 2 as 1 and 2 are unlike 0.
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
    dict(view=("The number {own} is yours, and {rest} known only to {partner}. Make \"I was given "
               "{own}.\" your first sentence, so that {partner} can hear your number. The task: "
               "calculate {goal}. Write out each step and close with \"The answer is\" and the "
               "number."),
         followup=("The number {own} is yours. {messages}: {{said}} Calculate {goal}. Your reply "
                   "opens with \"Using {own} and\" followed by {received}, writes out each step "
                   "and closes with \"The answer is\" and the number."),
         goals={"sum": "the result of adding every number together",
                "difference": "the larger number minus the smaller number"},
         question="Given the numbers {numbers}, calculate {goal}.", canonical="I was given {}.",
         partners=dict(rest=("the other number is", "the other numbers are"),
                       partner=("your partner", "your partners"),
                       messages=("From your partner", "From your partners"),
                       received=("the number you received", "the numbers you received"))),
    dict(view=("Your reply must end with \"The answer is\" and the number, and its first sentence "
               "must be \"My card shows {own}.\" You drew a card with {own} on it and {partner} "
               "drew {cards}; no one sees another's card. The team wants {goal}: work it out step "
               "by step from what {shows}."),
         followup=("End with \"The answer is\" and the number. Your card: {own}. {heard}: {{said}} "
                   "The team wants {goal}. Open your reply with \"Cards {own} and\" plus {theirs}, "
                   "then work it out step by step."),
         goals={"sum": "the total of all the cards added up",
                "difference": "the gap between the two cards (high card minus low card)"},
         question="The cards read {numbers}. What is {goal}?", canonical="My card shows {}.",
         partners=dict(partner=("your partner", "your partners"),
                       cards=("the other card", "the other cards"),
                       shows=("the other card shows", "the other cards show"),
                       theirs=("the other card's number", "the other cards' numbers"),
                       heard=("Your partner's message", "Your partners' messages"))),
) + composed_wordings(27)  # 5 to 31: arith:split-many's, each composed of drawn phrases
SPLIT_NUMBERS = range(1, 13)  # the numbers arith:split draws, one per agent
WIDE_NUMBERS = range(13, 100)  # arith:split-wide's: two digits, never trained on
# each dataset: (its wordings, SPLIT_WORDINGS[k], record i in wordings[i % len]; its numbers)
SPLIT_DATASETS = {"arith:split": ((0,), SPLIT_NUMBERS), "arith:split-w1": ((1,), SPLIT_NUMBERS),
                  "arith:split-w2": ((2,), SPLIT_NUMBERS), "arith:split-wide": ((0,), WIDE_NUMBERS),
                  "arith:split-mix": ((0, 3, 4), SPLIT_NUMBERS),
                  "arith:split-many": ((0, 3, 4, *range(5, len(SPLIT_WORDINGS))), SPLIT_NUMBERS)}


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
    sets the numbers its controls read and the wordings, record i in wordings[i % len(wordings)]
    (arith:split-mix: 0, 3, 4, 0, ...; arith_split_records)."""
    wordings, drawn = SPLIT_DATASETS[name]
    records = []
    for i, (kind, parts) in enumerate(problems):
        words = SPLIT_WORDINGS[wordings[i % len(wordings)]]
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
    `name`, a key of SPLIT_DATASETS, sets the numbers and the wordings (one a record, cycled by its
    index in the list: problem_records); every record keeps what its controls read: "kind",
    "canonical" (the opening sentence its views ask for) and "numbers" ([lo, hi] drawn)."""
    if split not in ("train", "test", "validation"):
        arg_error("--dataset", f"{name} has splits train, test, validation; got {split!r}")
    problems = split_problem_list(split, num_agents, name)
    # the same seeds in every variant: -w1, -w2 and -mix hold arith:split's problems in its order
    if split != "train":  # held out: each problem once, in an order no training seed changes
        random.Random(f"arith:split-{split}-{num_agents}").shuffle(problems)
        problems = problems[:n]
    else:
        rng = random.Random(f"arith:split-{seed}-{num_agents}")
        problems = [rng.choice(problems) for _ in range(n)]
    return problem_records(problems, split, name)
