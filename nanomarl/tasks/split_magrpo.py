"""split_magrpo.py: arith:split as a two-turn MAGRPO task (magrpo.py --dataset arith:split), so that
MAGRPO and MAPoRL (cotrain.py) train on one collaboration task. Each of the 2 agents sees only its
own number (1 to 12) and the sum or the difference needs both (nanomarl/tasks/split.py):
  turn 1  each agent gets its own view (the record's "views") and speaks;
  turn 2  each agent gets its followup with its partner's turn-1 first sentence quoted in, as
          cotrain.py quotes it (followup_message; a fresh chat), and answers.
The joint reward is the team's turn-2 correctness: the mean over the agents of answer == gold, the
answer read as cotrain.py reads it ("The answer is N": common.extract_answer, handed in as `parse`,
since no module of this package imports common.py). Turn 1 is not scored (Task.last_turn_only):
its joint reward is 0, so by MAGRPO's return R = r + γ·mean(child returns) the return of a turn-1
joint action is γ times the mean team correctness of the G turn-2 joint actions played after it,
the children's mean in place of the one continuation of cotrain.py's final-mean rule.

A problem is {id, kind 'split', record}: the record is arith:split's own (nanomarl/tasks/split.py),
untouched, so split_controls.py reads it as it reads cotrain.py's. Training: the distinct training
problems, each once, in split.py's fixed order; held out: the validation split (--dataset
arith:split:test: the test split), the problems and the order of cotrain.py's --eval-split. The
variants of split.py's SPLIT_DATASETS are the same problems in other words (--dataset
arith:split-mix: training problem i in wording i % 3; arith:split-w1:test: held-out words).
split_evaluation plays both turns greedily with the controls of split_controls.py, under
cotrain.py's metric names.
"""
from __future__ import annotations

from functools import partial
from types import SimpleNamespace

from nanomarl.split_controls import (carries_number, channel_metrics, control_replays,
                                     follows_rates, no_information_bound, whole_question)
from nanomarl.tasks.debate import load_task
from nanomarl.tasks.debate_prompts import first_message, first_sentence, followup_message
from nanomarl.tasks.split import problem_records, split_problem_list

SPLIT_ROLES = ["first", "second"]  # agent a holds the record's parts[a]


def split_problems(split: str, held_out: str = "validation",
                   name: str = "arith:split") -> list[dict]:
    """magrpo.py's problems of arith:split (or `name`, a variant in SPLIT_DATASETS): 'train', its
    distinct training problems (102) in split_problem_list's fixed order (--seed orders them
    through magrpo.py's step_indices); 'eval', every problem of the `held_out` split in
    load_task's order. Each is {id (the record's), kind 'split', record (arith:split's record)}."""
    if split == "train":
        records = problem_records(split_problem_list("train", name=name), "train", name)
    else:
        records = load_task(name, held_out)
    return [dict(id=record["id"], kind="split", record=record) for record in records]


def split_prompts(problem: dict) -> list[str]:
    """Turn 1: each agent's own view, which shows only its own number."""
    return list(problem["record"]["views"])


def split_feedback(problem: dict, prompt_history: list[list[str]],
                   response_history: list[list[str]]) -> list[str]:
    """The transition to the next turn (magrpo.py's Task.feedback): each agent's followup with the
    first sentence of its partner's last answer quoted in, as cotrain.py shows it."""
    agents = range(len(response_history))
    return [followup_message(problem["record"], a, [response_history[j][-1] for j in agents
                                                    if j != a]) for a in agents]


def split_reward(problem: dict, texts: list[str], parse) -> tuple[float, dict]:
    """The joint reward of one answer per agent: the fraction of agents whose answer (parse(text,
    'math'); None: unparsable, wrong) is the gold. Levels: solved (1: every agent right), answered
    (the fraction with an answer), heard (the fraction whose first sentence, what a partner hears,
    carries the agent's own number)."""
    record = problem["record"]
    answers = [parse(text, "math") for text in texts]
    correct = [answer is not None and answer == record["answer"] for answer in answers]
    heard = [carries_number(first_sentence(text), number)
             for text, number in zip(texts, record["parts"])]
    n = len(texts)
    answered = sum(answer is not None for answer in answers)
    return sum(correct) / n, dict(solved=float(all(correct)), answered=answered / n,
                                  heard=sum(heard) / n)


def answers_of(texts: list[list[str]], parse) -> list[list[str | None]]:
    """[b][a]: each answer as parse reads it."""
    return [[parse(text, "math") for text in per_problem] for per_problem in texts]


def accuracy(records: list[dict], answers: list[list[str | None]],
             agent: int | None = None) -> float:
    """The fraction of answers equal to their record's gold: every agent's, or one agent's."""
    hits = [answer == record["answer"] for record, per_problem in zip(records, answers)
            for a, answer in enumerate(per_problem) if agent is None or a == agent]
    return sum(hits) / len(hits)


def split_evaluation(play, problems: list[dict], parse, rows: list | None = None) -> dict:
    """The held-out evaluation (magrpo.py's Task.evaluate), greedy. play(prompts [b][a]) -> each
    agent's greedy answer [b][a]. Played: turn 1, then turn 2 on the partners' turn-1 words:
    eval/reward/mean (the joint reward at turn 2) and its levels, eval/turn{t}/agent_accuracy,
    eval/turn{t}/agent{a}/accuracy, eval/turn{t}/informative and /heard (the agent's number anywhere
    / in the first sentence). Turn 2 replayed from the played turn 1 with the partner's words
    replaced (split_controls.py): a neutral text (eval/silent/turn2/agent_accuracy; turn1: as
    played), its message on another problem (eval/shuffled/...), "My number is Y." with its true
    number (eval/oracle/...) or a wrong one (eval/wrong/...; eval/wrong/turn2/follows: answers
    computed with the number heard). Also eval/no_information_bound and each agent alone on the
    whole question (eval/whole_question/accuracy: agent 0, as cotrain.py; /agent1/accuracy).
    rows: filled with each problem's answers, as evaluate.py's samples.jsonl holds them (method
    "magrpo": answers [t][a], responses [t][a]; "magrpo/CONTROL": turn 2's answers [[a]])."""
    records = [problem["record"] for problem in problems]
    rows = [] if rows is None else rows
    first = play([split_prompts(problem) for problem in problems])
    turn1 = SimpleNamespace(responses=[[texts] for texts in first])  # [b][t][a], as cotrain's
    second = play([split_feedback(problem, [], [[text] for text in texts])
                   for problem, texts in zip(problems, first)])
    scores = [split_reward(problem, texts, parse) for problem, texts in zip(problems, second)]
    metrics = {"eval/reward/mean": sum(total for total, _ in scores) / len(scores)}
    metrics.update({f"eval/reward/{key}": sum(levels[key] for _, levels in scores) / len(scores)
                    for key in scores[0][1]})
    answered = [answers_of(texts, parse) for texts in (first, second)]  # [t][b][a]
    rows += [dict(method="magrpo", question=r["id"], gold=r["answer"],
                  answers=[answered[0][b], answered[1][b]], responses=[first[b], second[b]])
             for b, r in enumerate(records)]
    for t, answers in enumerate(answered):
        metrics[f"eval/turn{t + 1}/agent_accuracy"] = accuracy(records, answers)
        for a in range(len(answers[0])):
            metrics[f"eval/turn{t + 1}/agent{a}/accuracy"] = accuracy(records, answers, a)
    played = SimpleNamespace(responses=[[one, two] for one, two in zip(first, second)])
    metrics.update(channel_metrics(played, records))
    metrics["eval/silent/turn1/agent_accuracy"] = metrics["eval/turn1/agent_accuracy"]
    for control, replayed in control_replays(records, turn1).items():
        answers = answers_of(play([r["views"] for r in replayed]), parse)
        rows += [dict(method=f"magrpo/{control}", question=r["id"], gold=r["answer"],
                      answers=[answers[b]]) for b, r in enumerate(records)]
        metrics[f"eval/{control}/turn2/agent_accuracy"] = accuracy(records, answers)
        if control == "wrong":  # follows_rates reads answers [b][t][a]: turn 2 alone
            turn2 = SimpleNamespace(answers=[[per_problem] for per_problem in answers])
            metrics["eval/wrong/turn2/follows"] = follows_rates(turn2, records)[0]
    metrics["eval/no_information_bound"] = no_information_bound(records)
    alone = answers_of(play([[first_message(whole_question(r), a, "short") for a in range(2)]
                             for r in records]), parse)
    metrics["eval/whole_question/accuracy"] = accuracy(records, alone, 0)
    metrics["eval/whole_question/agent1/accuracy"] = accuracy(records, alone, 1)
    return metrics


def split_task(parse, reward=None) -> dict:
    """The fields of magrpo.py's Task for arith:split: the views, the partner's words as the
    feedback, the joint reward at the last turn only (or `reward`: a --reward-fn; the held-out
    evaluation keeps split_reward), the evaluation with controls. parse: common.extract_answer."""
    return dict(prompts=split_prompts, reward=reward or partial(split_reward, parse=parse),
                feedback=split_feedback, roles=SPLIT_ROLES, last_turn_only=True,
                evaluate=partial(split_evaluation, parse=parse))
