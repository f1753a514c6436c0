"""teamwork.py: a MAGRPO task that needs a division of labour (ours, offline). Two items are on the
table (two numbers, two letters, two colours); each of two agents takes one, and the team scores
only when between them they take both. Taking one item is easy for the base model alone; the joint
answer is right only when the two agents take different ones, so the one thing the team has to
learn is who takes which (a convention: the first-named item for agent 1, say).

Both agents read the same prompt but for their seat ("You are player 1."), and they never see
each other's answer (MAGRPO's decentralised execution): the untrained pair, greedy, takes the same
item. The joint reward (max 1.0) is the fraction of the two items taken, less every item an agent
writes past its choice or outside the pair. Writing the partner's item twice costs nothing more
than the item not taken, so keeping quiet never pays better than taking an item.

Held out: a problem's split is a hash of its unordered pair, so no held-out pair is seen in
training in either order, and the held-out problems mix the three families.
"""
from __future__ import annotations

import itertools
import random
import re
import string
import zlib

TEAMWORK_ROLES = ["first", "second"]  # seat names (the prompts say only "player 1" / "player 2")

COLOURS = ["red", "blue", "green", "yellow", "black", "white", "orange", "purple", "pink", "brown"]
LETTERS = [c for c in string.ascii_uppercase if c not in "AI"]  # A, I: also words, never items
FAMILIES = {  # family -> (its items, the pairs drawn from them; None: every pair)
    "numbers": ([str(n) for n in range(10, 100)], 240),
    "letters": (LETTERS, 120),
    "colours": (COLOURS, None),
}

TEAMWORK_PROMPT = (
    "Choose one: {first} or {second}? Your partner chooses too, and the team scores only if you "
    "choose differently. Reply with your choice only. (You are player {seat}.)")


def teamwork_split(pair: list[str]) -> str:
    """'eval' for about a quarter of the pairs (a hash of the unordered pair), else 'train'."""
    return "eval" if zlib.crc32("-".join(sorted(pair)).encode()) % 4 == 0 else "train"


def teamwork_problems(split: str) -> list[dict]:
    """Every pair of the split in a fixed shuffled order, each pair in a fixed random order:
    {id, kind 'teamwork', family, items (the two, as the prompt names them)}."""
    rng = random.Random("teamwork")
    problems = []
    for family, (items, count) in FAMILIES.items():
        pairs = list(itertools.combinations(items, 2))
        for pair in (rng.sample(pairs, count) if count else pairs):
            pair = list(pair) if rng.random() < 0.5 else [pair[1], pair[0]]
            if teamwork_split(pair) == split:
                problems.append(dict(id=f"teamwork/{family}/{'-'.join(pair)}", kind="teamwork",
                                     family=family, items=pair))
    random.Random(f"teamwork-{split}").shuffle(problems)
    return problems


def teamwork_prompts(problem: dict) -> list[str]:
    """The two agents' prompts: the same words but for the seat number."""
    first, second = problem["items"]
    return [TEAMWORK_PROMPT.format(first=first, second=second, seat=seat) for seat in (1, 2)]


def listed_items(text: str, family: str) -> list[str]:
    """The items an answer writes, in order: whole numbers, single capital letters standing alone
    but the words "A" and "I" ("I choose O." chooses O), or colour words (any case)."""
    if family == "letters":
        return re.findall(rf"(?<![A-Za-z])[{''.join(LETTERS)}](?![A-Za-z])", text)
    if family == "colours":
        return re.findall(r"(?<![a-z])(" + "|".join(COLOURS) + r")(?![a-z])", text.lower())
    return re.findall(r"(?<!\d)\d+(?!\d)", text)


def teamwork_reward(problem: dict, texts: list[str]) -> tuple[float, dict]:
    """The joint reward of one answer per agent: (taken - extras) / 2, floored at -1. An agent's
    choice is the first item it writes; taken counts the pair's items chosen (each once), extras
    every item written past a choice and every choice outside the pair. Levels: coverage (taken /
    2), overlap (1: both chose the same item), extras (/ 2), solved (1: the two choices are the two
    items and nothing else is written)."""
    pair = problem["items"]
    written = [listed_items(text, problem["family"]) for text in texts]
    choices = [items[0] for items in written if items]
    taken = len(set(choices) & set(pair))
    extras = sum(len(items) - 1 for items in written if items) + sum(c not in pair for c in choices)
    overlap = float(len(choices) == 2 and choices[0] == choices[1])
    solved = float(taken == 2 and extras == 0)
    reward = max(-1.0, (taken - extras) / 2)
    return reward, dict(coverage=taken / 2, overlap=overlap, extras=extras / 2, solved=solved)
