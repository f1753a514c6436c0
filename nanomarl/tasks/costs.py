"""costs.py: a division of labour that no fixed rule solves, as a two-turn MAGRPO task (magrpo.py
--dataset costs; ours, offline). Each of 2 players does one of two jobs (teamwork.py's letters or
colours) and sees only its OWN costs of the two (1 to 9); the team pays each player's cost of its
job, so the cheaper split depends on both players' costs and they have to tell each other:
  turn 1  each player sees its own costs and speaks (one message to its partner);
  turn 2  each player gets a followup with its partner's turn-1 first sentence quoted in
          (followup_message, as split_magrpo.py) and answers "I take X."
Joint reward (turn 2; turn 1 is not scored: Task.last_turn_only): 1 when the two take different
jobs and the cheaper split, DEARER (0.5) for different jobs and the dearer split, 0 when they take
the same job or either takes none, so keeping quiet never pays better than taking a job (as in
teamwork.py). An answer takes the first job named right after an "I take" or "I choose" ("the"
skipped; "I'll", "I am taking" too; never "you take" or "takes"; "I take O." and "I take K or
M" take nothing).

Every cost table comes twice, once per seat (the players' costs exchanged, the jobs in the same
order), and the two seats' cheaper splits differ: a rule that ignores the costs (player 0 takes
the first job) earns exactly (1 + DEARER) / 2 = 0.75 on any split, and each player taking its own
cheaper job collides whenever both want the same one. One message pays: a player that takes its
own cheaper job and says so, its partner taking the job left, earns 0.89 on validation and 0.92 on
test (costs_baselines). Held out: a table's split is a hash of its unordered jobs and sorted costs,
so no held-out problem is a seat swap or a reordering of a training one: validation 64 problems
(--dataset costs), test 112 (costs:test).
Simplifications: whole costs, a player's two costs differ, the two splits never cost the same.
"""
from __future__ import annotations

import random
import re
import zlib

from nanomarl.split_controls import neutral_message
from nanomarl.tasks.debate_prompts import followup_message
from nanomarl.tasks.teamwork import COLOURS, LETTERS

COSTS_ROLES = ["first", "second"]  # seat names: player a holds the problem's costs[a]
DEARER = 0.5  # the joint reward of a division of labour on the dearer split
FAMILIES = {"letters": LETTERS, "colours": COLOURS}
TABLES = {"train": 240, "validation": 32, "test": 56}  # cost tables per split, 2 problems each

VIEW = ("You and your partner share two jobs, {0} and {1}: each of you does one. Your cost for {0} "
        "is {2} and for {1} is {3}; your partner has its own costs, which you cannot see. The team "
        "pays your cost for your job plus your partner's cost for the other job and wants that "
        "total small. Tell your partner your costs in one sentence. Start with \"My costs: {0} "
        "{2}, {1} {3}.\"")
FOLLOWUP = ("Your costs: {0} {2}, {1} {3}. Your partner says: {{said}} You do one of the jobs {0} "
            "and {1} and your partner the other; the team pays your cost for your job plus your "
            "partner's cost for the other. Take the job that makes the total smaller. Answer "
            "\"I take {0}.\" or \"I take {1}.\"")
TAKE = re.compile(r"\bI(?:'ll|'d|\s+will|\s+would|\s+am)?\s+(?:take|taking|took|choose|choosing|"
                  r"chose)\s+(?:the\s+)?([A-Za-z]+)\b(?!\s+or\b)", re.I)  # "I take K or M": none


def table_key(items: list[str], costs: list[list[int]]) -> str:
    """A table's identity whatever the seats and the jobs' order: the jobs sorted, each player's
    costs in that order, the players sorted."""
    order = sorted(range(2), key=lambda i: items[i])
    rows = sorted(tuple(row[i] for i in order) for row in costs)
    return f"{items[order[0]]}-{items[order[1]]}:{rows}"


def table_split(key: str) -> str:
    """'validation' for a tenth of the keys (by a hash), 'test' for a fifth, else 'train'."""
    h = zlib.crc32(key.encode()) % 10
    return "validation" if h == 0 else "test" if h < 3 else "train"


def cost_tables(split: str) -> list[tuple[str, list[str], list[list[int]]]]:
    """The TABLES[split] (family, jobs, costs) of a split: drawn in one fixed sequence for all the
    splits, each kept by its table_split until that split is full (each table once)."""
    rng, seen, tables = random.Random("costs"), set(), {s: [] for s in TABLES}
    while any(len(tables[s]) < TABLES[s] for s in TABLES):
        family = rng.choice(sorted(FAMILIES))
        items, costs = rng.sample(FAMILIES[family], 2), [rng.sample(range(1, 10), 2) for _ in "ab"]
        key = table_key(items, costs)
        side = table_split(key)
        if costs[0][0] - costs[0][1] != costs[1][0] - costs[1][1] and key not in seen and \
                len(tables[side]) < TABLES[side]:  # the cheaper split is unique
            seen.add(key)
            tables[side].append((family, items, costs))
    return tables[split]


def costs_problems(split: str, held_out: str = "validation") -> list[dict]:
    """magrpo.py's problems: 'train', or 'eval' (the `held_out` split). Each table as two problems
    in a row, one per seat: {id, kind 'costs', family, items (the jobs, in the prompts' order),
    costs ([player][job])}."""
    name = "train" if split == "train" else held_out
    problems = []
    for family, items, costs in cost_tables(name):
        for seats in (costs, costs[::-1]):
            problems.append(dict(id=f"costs/{name}/{len(problems)}", kind="costs", family=family,
                                 items=list(items), costs=[list(row) for row in seats]))
    return problems


def costs_prompts(problem: dict) -> list[str]:
    """Turn 1: each player's own costs, never its partner's."""
    return [VIEW.format(*problem["items"], *row) for row in problem["costs"]]


def costs_feedback(problem: dict, prompt_history: list[list[str]],
                   response_history: list[list[str]]) -> list[str]:
    """Turn 2 (magrpo.py's Task.feedback): each player's own costs again with the first sentence of
    its partner's last answer quoted in (followup_message)."""
    record = dict(followups=[FOLLOWUP.format(*problem["items"], *row) for row in problem["costs"]])
    return [followup_message(record, a, [response_history[1 - a][-1]]) for a in range(2)]


def taken_item(text: str, items: list[str]) -> str | None:
    """The job an answer takes: the first of `items` (any case) named right after an "I take" or
    "I choose"; None if none is ("Take the job ... I take K." takes K; "You take K." nothing)."""
    jobs = {item.lower(): item for item in items}
    return next((jobs[w.lower()] for w in TAKE.findall(text) if w.lower() in jobs), None)


def jobs_taken(problem: dict, texts: list[str]) -> list[str | None]:
    """Each answer's job (taken_item)."""
    return [taken_item(text, problem["items"]) for text in texts]


def cheaper_job(problem: dict) -> str:
    """The job player 0 does in the cheaper split."""
    (a0, b0), (a1, b1) = problem["costs"]
    return problem["items"][0] if a0 + b1 < b0 + a1 else problem["items"][1]


def costs_reward(problem: dict, texts: list[str]) -> tuple[float, dict]:
    """The joint reward of one answer per player: 1 (different jobs, the cheaper split), DEARER
    (different jobs, the dearer one) or 0. Levels: cheaper, dearer, collision (both took the same
    job), answered (the fraction of players that took a job)."""
    taken = jobs_taken(problem, texts)
    divided = None not in taken and taken[0] != taken[1]
    cheaper = divided and taken[0] == cheaper_job(problem)
    reward = 1.0 if cheaper else DEARER if divided else 0.0
    return reward, dict(cheaper=float(cheaper), dearer=float(divided and not cheaper),
                        collision=float(None not in taken and not divided),
                        answered=sum(t is not None for t in taken) / 2)


def rule_reward(problems: list[dict], rule) -> float:
    """The mean joint reward of a rule without messages: rule(problem, seat) -> the job it takes."""
    return sum(costs_reward(p, [f"I take {rule(p, a)}." for a in range(2)])[0]
               for p in problems) / len(problems)


def own_cheaper_job(problem: dict, seat: int) -> str:
    """The job that costs player `seat` less."""
    row = problem["costs"][seat]
    return problem["items"][row.index(min(row))]


def leader_job(problem: dict, seat: int, leader: int) -> str:
    """The leader takes its own cheaper job and says so; its partner takes the job left."""
    job = own_cheaper_job(problem, leader)
    return job if seat == leader else next(item for item in problem["items"] if item != job)


def costs_baselines(problems: list[dict]) -> dict:
    """Exact on `problems`. The rules that need no message: eval/positional_rule, the better of
    'player 0 takes the first job, player 1 the second' and the reverse; eval/own_costs_rule, each
    player takes its own cheaper job. And the simplest that needs one: eval/leader_rule
    (leader_job), the better of player 0 and player 1 as the leader."""
    positional = max(rule_reward(problems, lambda p, a, f=f: p["items"][a ^ f]) for f in (0, 1))
    own = rule_reward(problems, own_cheaper_job)
    leader = max(rule_reward(problems, lambda p, a, b=b: leader_job(p, a, b)) for b in (0, 1))
    return {"eval/positional_rule": positional, "eval/own_costs_rule": own,
            "eval/leader_rule": leader}


def costs_evaluation(play, problems: list[dict], rows: list | None = None) -> dict:
    """The held-out evaluation (magrpo.py's Task.evaluate), greedy: turn 1, then turn 2 on the
    partners' turn-1 words (eval/reward/mean and its levels), turn 2 replayed with each partner's
    words replaced by a neutral text of their length (eval/silent/reward/...; neutral_message) and
    costs_baselines. rows: each problem's jobs taken [t][a] and responses (method "magrpo"; the
    silent replay's turn 2, "magrpo/silent")."""
    rows = [] if rows is None else rows
    first = play([costs_prompts(p) for p in problems])
    second = play([costs_feedback(p, [], [[t] for t in said]) for p, said in zip(problems, first)])
    silent = play([costs_feedback(p, [], [[neutral_message(t)] for t in said])
                   for p, said in zip(problems, first)])
    metrics = costs_baselines(problems)
    for name, played in (("", second), ("silent/", silent)):
        scores = [costs_reward(p, texts) for p, texts in zip(problems, played)]
        metrics[f"eval/{name}reward/mean"] = sum(total for total, _ in scores) / len(scores)
        metrics.update({f"eval/{name}reward/{key}": sum(lv[key] for _, lv in scores) / len(scores)
                        for key in scores[0][1]})
    rows += [dict(method="magrpo", question=p["id"], gold=cheaper_job(p),
                  answers=[jobs_taken(p, one), jobs_taken(p, two)], responses=[one, two])
             for p, one, two in zip(problems, first, second)]
    rows += [dict(method="magrpo/silent", question=p["id"], gold=cheaper_job(p),
                  answers=[jobs_taken(p, texts)]) for p, texts in zip(problems, silent)]
    return metrics


def costs_task(parse=None, reward=None) -> dict:
    """The fields of magrpo.py's Task (split_task's signature; parse: unused, taken_item reads the
    answers): the own costs, the partner's words as the feedback, the joint reward at the last turn
    only (or `reward`: a --reward-fn; the evaluation keeps costs_reward), the evaluation."""
    return dict(prompts=costs_prompts, reward=reward or costs_reward, feedback=costs_feedback,
                roles=COSTS_ROLES, last_turn_only=True, evaluate=costs_evaluation)
