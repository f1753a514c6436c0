"""teamwork.py: a MAGRPO task that needs a division of labour (ours, offline). Two agents together
list every item of a short sequence (the numbers from 13 to 20, the letters from D to I), each
agent writing its own half, every item exactly once between them. Each
half is easy for the base model alone; the joint answer is right only when the two halves are
complementary, so the one thing the team has to learn is who writes which half.

Both agents read the same prompt but for their seat ("You are writer 1."), and they never see
each other's answer (MAGRPO's decentralised execution). The joint reward (max 1.0) is the fraction
of the sequence covered, less the items written twice, the items outside it and the items an agent
writes past its half; a problem is solved when each agent writes its half and the halves together
hold every item exactly once.

Held out: a problem's split is a hash of its family, start and length, so the held-out sequences
start elsewhere and many have another length than any training one.
"""
from __future__ import annotations

import random
import re
import string
import zlib

TEAMWORK_ROLES = ["first", "second"]  # seat names (the prompts say only "agent 1" / "agent 2")

FAMILIES = {  # family -> (the items from a start, the words the prompt uses for them)
    "numbers": (lambda start, n: [str(start + i) for i in range(n)], "numbers"),
    "letters": (lambda start, n: list(string.ascii_uppercase[start:start + n]), "letters"),
}
STARTS = {"numbers": range(1, 41), "letters": range(0, 10)}
HALVES = (2, 3, 4)  # items per agent: sequences of 4, 6 or 8

TEAMWORK_PROMPT = (  # the task first: a seat named first sends SmolLM2-135M into role play
    "Write {half} of the {words} from {first} to {last}, separated by commas. Another writer "
    "writes the other {half}; between you every one of the {total} must appear exactly once. "
    "(You are writer {seat}.)")


def teamwork_split(family: str, start: int, half: int) -> str:
    """'eval' for about a quarter of the sequences (a hash of family, start and length), else
    'train'."""
    return "eval" if zlib.crc32(f"{family}-{start}-{half}".encode()) % 4 == 0 else "train"


def teamwork_problems(split: str) -> list[dict]:
    """Every sequence of the split in a fixed shuffled order (the first few cover every family):
    {id, kind 'teamwork', family, words, items, half}."""
    problems = []
    for family, (items_of, words) in FAMILIES.items():
        for start in STARTS[family]:
            for half in HALVES:
                if teamwork_split(family, start, half) == split:
                    items = items_of(start, 2 * half)
                    problems.append(dict(id=f"teamwork/{family}/{start}/{2 * half}", words=words,
                                         kind="teamwork", family=family, items=items, half=half))
    random.Random(f"teamwork-{split}").shuffle(problems)
    return problems


def teamwork_prompts(problem: dict) -> list[str]:
    """The two agents' prompts: the same words but for the seat number."""
    items = problem["items"]
    return [TEAMWORK_PROMPT.format(seat=seat, words=problem["words"], first=items[0],
                                   last=items[-1], total=len(items), half=problem["half"])
            for seat in (1, 2)]


def listed_items(text: str, family: str) -> list[str]:
    """The items an answer writes, in order: whole numbers, or single capital letters standing
    alone (the letters family)."""
    if family == "letters":
        return re.findall(r"(?<![A-Za-z])[A-Z](?![A-Za-z])", text)
    return re.findall(r"(?<!\d)\d+(?!\d)", text)


def teamwork_reward(problem: dict, texts: list[str]) -> tuple[float, dict]:
    """The joint reward of one answer per agent: (coverage - repeats - extras) / items, floored at
    -1. An agent's share is the first `half` items it writes; every item past it is an extra (one
    agent writing the whole list is no division of labour). coverage counts the sequence's items in
    the shares, repeats every further writing of an item (by either agent), extras the items outside
    the sequence and past a share. Levels: coverage, overlap (items in both shares), repeats,
    extras, solved (1: the two shares hold every item exactly once, and nothing else is written)."""
    target, half = problem["items"], problem["half"]
    written = [listed_items(text, problem["family"]) for text in texts]
    shares = [items[:half] for items in written]
    every = [item for share in shares for item in share]
    counts = {item: every.count(item) for item in set(every)}
    covered = sum(item in counts for item in target)
    repeats = sum(c - 1 for c in counts.values())
    extras = (sum(c for item, c in counts.items() if item not in target)
              + sum(len(items) - len(share) for items, share in zip(written, shares)))
    both = len(set(shares[0]) & set(shares[1]))  # two writers, always
    n = len(target)
    solved = float(covered == n and repeats == 0 and extras == 0)
    reward = max(-1.0, (covered - repeats - extras) / n)
    return reward, dict(coverage=covered / n, overlap=both / n, repeats=repeats / n,
                        extras=extras / n, solved=solved)
