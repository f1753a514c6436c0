"""arith:split-many's training wordings: each composed from one phrase per slot (the number, the
partner, the goal, the opening sentence asked for, the calculation, the answer) in one of a few
orders, so that no one template is all a reader learns. Written before any training on them, and
kept apart from the held-out words of arith:split-w1 and -w2: no phrase of four words is shared
with them but the answer's own ("The answer is" and the number; tests/test_split_wordings.py).
A wording is a dict of split.py's SPLIT_WORDINGS shape; composed_wordings(n) returns n of them.
"""
from __future__ import annotations

import random

# the opening sentence each view asks for, its agent's number in it
CANONICALS = ("My value is {}.", "I've got {}.", "The number I see is {}.",
              "My secret number is {}.", "I was dealt {}.", "On my side there is {}.")
# turn 1: one phrase a slot; {canonical} is the opening sentence with the agent's number in it
VIEW = dict(
    own=("Your number is {own}.", "You were dealt the number {own}.",
         "The number in front of you is {own}.", "You alone can see the number {own}."),
    other=("{knows}.", "{missing}.", "Meanwhile {sees}."),
    goal=("Together you must find {goal}.", "The team's job is to find {goal}.",
          "Your shared task: determine {goal}.", "Between you, figure out {goal}."),
    opening=("Start with \"{canonical}\"", "Your opening sentence is \"{canonical}\"",
             "Begin by saying \"{canonical}\"", "Lead with the words \"{canonical}\""),
    compute=("Then take {theirs} from the message you get and do the arithmetic.",
             "Next, combine your number with {theirs} once you learn it.",
             "Then use {theirs} to calculate the result."),
    answer=("Show the calculation, then end with \"The answer is\" and the number.",
            "Write the arithmetic out and put \"The answer is\" and the number last.",
            "Lay out each step; your reply ends with \"The answer is\" and the number."))
VIEW_ORDERS = (("own", "other", "goal", "opening", "compute", "answer"),
               ("goal", "own", "other", "opening", "compute", "answer"),
               ("opening", "own", "other", "goal", "compute", "answer"),
               ("answer", "goal", "own", "other", "opening", "compute"))
# turn 2: {{said}} is where the partners' first sentences are quoted in
FOLLOWUP = dict(
    heard=("{says}: {{said}}", "{told}: {{said}}", "Message from {teammate}: {{said}}"),
    own=("Your number is {own}.", "You were dealt {own}.", "Remember that your number is {own}.",
         "You still have {own}."),
    goal=("Find {goal}.", "Now determine {goal}.", "The job is {goal}.", "Figure out {goal}."),
    answer=("First write \"The numbers are {own}, \" and {theirs}, then show the calculation and "
            "end with \"The answer is\" and the number.",
            "Start your reply with \"{own} and\" followed by {theirs}, then write the arithmetic "
            "and put \"The answer is\" and the number last.",
            "Begin with \"So: {own} and\" then {theirs}, lay out each step, and close with \"The "
            "answer is\" and the number."))
FOLLOWUP_ORDERS = (("heard", "own", "goal", "answer"), ("own", "heard", "goal", "answer"),
                   ("goal", "own", "heard", "answer"))
GOALS = dict(sum=("the combined value of the numbers", "the sum of every number",
                  "the result of adding the numbers"),
             difference=("the larger number minus the smaller",
                         "the difference between the numbers (larger minus smaller)",
                         "the smaller number subtracted from the larger one"))
QUESTIONS = ("The numbers are {numbers}. Find {goal}.",
             "Numbers on the table: {numbers}. Determine {goal}.",
             "Given {numbers}, figure out {goal}.")
# the words that differ with two agents and with more (split.py's "partners")
PARTNERS = dict(knows=("Your partner knows the other number",
                       "Your partners know the other numbers"),
                missing=("The missing number is with your teammate",
                         "The missing numbers are with your teammates"),
                sees=("your partner sees the other number", "your partners see the other numbers"),
                theirs=("your partner's number", "your partners' numbers"),
                teammate=("your teammate", "your teammates"),
                says=("Your partner says", "Your partners say"),
                told=("Your partner told you", "Your partners told you"))


def composed_wording(k: int) -> dict:
    """Training wording k: one phrase a slot and one order each, drawn by a generator seeded
    by k."""
    rng = random.Random(f"arith:split-many-{k}")
    canonical = rng.choice(CANONICALS)
    view = [rng.choice(VIEW[slot]) for slot in rng.choice(VIEW_ORDERS)]
    followup = [rng.choice(FOLLOWUP[slot]) for slot in rng.choice(FOLLOWUP_ORDERS)]
    goal = {kind: rng.choice(phrases) for kind, phrases in GOALS.items()}
    return dict(view=" ".join(view).replace("{canonical}", canonical.format("{own}")),
                followup=" ".join(followup), goals=goal, question=rng.choice(QUESTIONS),
                canonical=canonical, partners=PARTNERS)


def composed_wordings(n: int) -> tuple[dict, ...]:
    """Training wordings 0 to n - 1 (composed_wording's)."""
    return tuple(composed_wording(k) for k in range(n))
