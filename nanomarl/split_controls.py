"""The controls of a debate on split information (arith:split and its held-out variants: each
agent sees only its own number), which say whether a gain is communication. Each replays turns
2..T of the greedy debate from its turn 1, on the same adapters, with the partners' words replaced:
  silent    a neutral text of the heard length (neutral_message);
  shuffled  the partner's real turn-1 message on another problem, with three agents never a
            seat-swap of the same one (in distribution, no information);
  oracle    the sentence the record's views ask for (its "canonical": "My number is Y." in
            arith:split) with the partner's true number: the reader's ceiling;
  wrong     the same sentence with a wrong number (wrong_number), and how often the answer is the
            one computed with the number heard (follows).
Beside them: the no-information bound (the best answer from one's own number alone, exactly, over
the record's "numbers"), agent 0's turn-1 policy alone on the whole question, and how often an
agent's message carries its own number (the channel in use). They read the fields every record
of nanomarl/tasks/split.py carries: "kind", "parts", "canonical" and "numbers". cotrain.py's
held-out evaluation and evaluate.py report them beside the debate. A learner may skip this
module.
"""
from __future__ import annotations

import itertools
import re
from collections import Counter

import torch

from nanomarl.tasks.split import SPLIT_NUMBERS, split_problem
from nanomarl.tasks.debate_prompts import first_sentence, followup_message

NEUTRAL_WORDS = "I have read the question and I am still thinking about it".split()
CONTROLS = ("shuffled", "oracle", "wrong")  # beside silent: the replays of control_messages


def neutral_message(text: str) -> str:
    """The silent partner's stand-in for a partner's answer: a neutral sentence cycled to as many
    words as the part of the answer a partner hears (its first sentence, first_sentence), so the
    turn keeps its shape and its length but carries nothing."""
    n = max(1, len(first_sentence(text).split()))
    return " ".join(NEUTRAL_WORDS[k % len(NEUTRAL_WORDS)] for k in range(n)) + "."


def whole_question(record: dict) -> dict:
    """The record as one agent that sees everything gets it: its views and followups dropped, so
    every agent's question is the whole one."""
    return {key: value for key, value in record.items() if key not in ("views", "followups")}


def carries_number(text: str, number: int) -> bool:
    """True when the text writes `number` as a whole number (7 in "My number is 7.", not in
    "17")."""
    return re.search(rf"(?<!\d){number}(?!\d)", text) is not None


def informative_rates(debate, records: list[dict], heard: bool = False) -> list[float]:
    """Per turn, the fraction of the agents' messages that carry the agent's own number: anywhere,
    or (heard) in the first sentence, the part a partner hears (followup_message)."""
    rates = []
    for t in range(len(debate.responses[0])):
        said = [carries_number(first_sentence(text) if heard else text, r["parts"][a])
                for turns, r in zip(debate.responses, records) for a, text in enumerate(turns[t])]
        rates.append(sum(said) / len(said))
    return rates


def channel_metrics(debate, records: list[dict]) -> dict:
    """eval/turn{t}/informative and eval/turn{t}/heard of a debate: informative_rates anywhere in
    the message and in its first sentence."""
    kinds = (("informative", False), ("heard", True))
    return {f"eval/turn{t + 1}/{name}": rate for name, heard in kinds
            for t, rate in enumerate(informative_rates(debate, records, heard=heard))}


def from_second_turn(records: list[dict], debate, show_partner) -> list[dict]:
    """The records with each agent's first view replaced by its turn-2 message in `debate`, the
    partners' turn-1 words shown as show_partner(words): a debate on them, on the adapters of turns
    2..T, plays turns 2..T of `debate` replayed with show_partner, without generating turn 1 again
    (greedy: the same turn 1; tests/test_teamwork.py)."""
    agents = range(len(debate.responses[0][0]))
    return [dict(r, views=[followup_message(r, a, [show_partner(debate.responses[b][0][j])
                                                   for j in agents if j != a]) for a in agents])
            for b, r in enumerate(records)]


def drawn_numbers(record: dict) -> range:
    """The numbers a split record's parts were drawn from: its "numbers" [lo, hi]."""
    lo, hi = record["numbers"]
    return range(lo, hi + 1)


def wrong_number(number: int, largest: int = max(SPLIT_NUMBERS)) -> int:
    """The number the wrong control says instead of `number`: one more (the largest drawn: one
    less), so the result computed with it is never the gold (a sum or a difference moves by exactly
    one)."""
    return number + 1 if number < largest else number - 1


def heard_result(record: dict, agent: int) -> str:
    """The result of the record's operation on agent's own number and its partners' wrong ones:
    what an agent that computes with what the wrong control told it answers."""
    largest = drawn_numbers(record)[-1]
    parts = [x if j == agent else wrong_number(x, largest) for j, x in enumerate(record["parts"])]
    return str(split_problem(record["kind"], tuple(parts)))


def no_information_bound(records: list[dict]) -> float:
    """The accuracy on `records` of the best answer from one's own number alone, exactly: for each
    record and seat, the answers most likely given what the seat sees (the operation and its own
    number; its partners' numbers uniform over the record's drawn_numbers, as drawn), one of them at
    random, scored against the gold; the mean over records and seats."""
    hits, seats, cache = 0.0, 0, {}
    for r in records:
        kind, parts, drawn = r["kind"], r["parts"], drawn_numbers(r)
        for own in parts:
            key = (kind, own, len(parts), drawn)
            if key not in cache:  # the best answers depend on what the seat sees, nothing else
                others = itertools.product(drawn, repeat=len(parts) - 1)
                results = Counter(split_problem(kind, (own, *rest)) for rest in others)
                cache[key] = [x for x, n in results.items() if n == max(results.values())]
            best = cache[key]
            hits, seats = hits + (int(r["answer"]) in best) / len(best), seats + 1
    return hits / seats


def source_key(record: dict) -> tuple:
    """A split record's problem as the shuffled control tells problems apart: its kind and its
    numbers, sorted with three agents or more (there a seat-swap tells an agent its partners' true
    numbers: 1, 3, 2 tells the agent of 1 in 1, 2, 3 the numbers 3 and 2), in seat order with two
    (a swap tells each agent its own number, no information)."""
    parts = record["parts"]
    return record["kind"], tuple(sorted(parts) if len(parts) > 2 else parts)


def shuffled_sources(records: list[dict]) -> list[int]:
    """For each record, the next one (cyclically) with another problem (source_key): the one
    whose partners' turn-1 messages the shuffled control shows, never the record's own problem nor,
    with three agents or more, a seat-swap of it (needs two problems)."""
    n, keys = len(records), [source_key(r) for r in records]
    return [next(k % n for k in range(b + 1, b + n) if keys[k % n] != key)
            for b, key in enumerate(keys)]


def control_messages(records: list[dict], debate, control: str) -> list[list[list[str]]]:
    """[b][a]: what agent a of record b hears from each partner j (in order) in `control`:
    'oracle', the record's "canonical" sentence with j's number; 'wrong', with wrong_number of it;
    'shuffled', j's turn-1 message in `debate` on the record shuffled_sources names."""
    sources = shuffled_sources(records) if control == "shuffled" else None
    agents = range(len(records[0]["parts"]))

    def said(b: int, j: int) -> str:
        if control == "shuffled":
            return debate.responses[sources[b]][0][j]
        r, number = records[b], records[b]["parts"][j]
        told = number if control == "oracle" else wrong_number(number, drawn_numbers(r)[-1])
        return r["canonical"].format(told)
    return [[[said(b, j) for j in agents if j != a] for a in agents] for b in range(len(records))]


def replay_records(records: list[dict], heard: list[list[list[str]]]) -> list[dict]:
    """The records for a debate of turns 2..T (on their adapters) in which agent a of record b hears
    heard[b][a] at every turn, whatever its partners say: its first view and its followups are the
    followup message quoting those words (the followups' braces doubled: no {said} left to fill)."""
    def fixed(text: str) -> str:
        return text.replace("{", "{{").replace("}", "}}")
    return [dict(r, views=[followup_message(r, a, said) for a, said in enumerate(per_agent)],
                 followups=[fixed(followup_message(r, a, said))
                            for a, said in enumerate(per_agent)])
            for r, per_agent in zip(records, heard)]


def control_replays(records: list[dict], first) -> dict[str, list[dict]]:
    """{control: the records of its replay of turns 2..T from `first`'s turn 1}, in the order they
    are played: silent (from_second_turn: the partners' words as neutral_message), then CONTROLS
    (replay_records of control_messages; shuffled only where another problem can be heard)."""
    replays = {"silent": from_second_turn(records, first, neutral_message)}
    for control in CONTROLS:
        if control != "shuffled" or len({source_key(r) for r in records}) > 1:
            replays[control] = replay_records(records, control_messages(records, first, control))
    return replays


def follows_rates(debate, records: list[dict]) -> list[float]:
    """Per turn of a wrong-control replay, the fraction of answers equal to the result computed
    with the numbers heard (heard_result) instead of the true ones."""
    return [sum(turns[t][a] == heard_result(r, a) for turns, r in zip(debate.answers, records)
                for a in range(len(r["parts"]))) / (len(records) * len(records[0]["parts"]))
            for t in range(len(debate.answers[0]))]


def mean_agent_accuracy(debate) -> list[float]:
    """Per turn, the agents' mean accuracy (correct is [B, T, A])."""
    return debate.correct.float().mean(dim=(0, 2)).tolist()


@torch.no_grad()
def split_controls(play, team, args, records: list[dict], debate, greedy_debate: bool = True,
                   answers: dict | None = None) -> dict:
    """The held-out debate's controls, greedy, on the team's adapters. Of `debate`: its channel
    (eval/turn{t}/informative, and /heard: in the first sentence; at the last turn, what a partner
    would hear). From its greedy turn 1, turns 2..T replayed with silent partners
    (eval/silent/turn{t}/agent_accuracy, turn 1 as played), shuffled, oracle and wrong ones
    (eval/{control}/turn{t}/agent_accuracy, t >= 2; eval/wrong/turn{t}/follows); the
    no-information bound of the records (eval/no_information_bound); agent 0's turn-1 policy
    answering the whole question alone (eval/whole_question/accuracy). play: cotrain.run_debate;
    debate: its debate on records. greedy_debate: one greedy call of play played it (cotrain.py's),
    so its turn 1 is the replays'; False: a greedy turn 1 is played first. No random number is
    drawn. Empty for records without views. answers: filled with each replay's answers per
    problem, turns 2..T ({control: [b][t][a]}), when given."""
    if not records or "views" not in records[0]:
        return {}
    common = dict(greedy=True, prompt_style=args.prompt_style,
                  generate_batch_size=args.generate_batch_size)
    metrics = channel_metrics(debate, records)
    names = team.adapter_names
    first = debate if greedy_debate else play(  # evaluate.py's may be sampled, or in chunks
        records, team.models(), team.agent_tokenizers(), names[:1], args.max_new_tokens, **common)
    silent = mean_agent_accuracy(first)[:1]  # turn 1 as played: no partner words yet

    def replay(replayed: list[dict], show_partner):  # turns 2..T
        return play(replayed, team.models(), team.agent_tokenizers(), names[1:],
                    args.max_new_tokens, show_partner=show_partner, **common)
    if len(names) > 1:
        answers = {} if answers is None else answers
        for control, replayed in control_replays(records, first).items():
            # silent: the partners' later words are neutral too; the others hear fixed words
            played = replay(replayed, neutral_message if control == "silent" else str)
            answers[control] = played.answers
            if control == "silent":
                silent += mean_agent_accuracy(played)
                continue
            metrics.update({f"eval/{control}/turn{t + 2}/agent_accuracy": acc
                            for t, acc in enumerate(mean_agent_accuracy(played))})
            if control == "wrong":
                metrics.update({f"eval/wrong/turn{t + 2}/follows": rate
                                for t, rate in enumerate(follows_rates(played, records))})
    metrics.update({f"eval/silent/turn{t + 1}/agent_accuracy": acc
                    for t, acc in enumerate(silent)})
    metrics["eval/no_information_bound"] = no_information_bound(records)
    alone = play([whole_question(r) for r in records], team.models()[:1],
                 team.agent_tokenizers()[:1], [names[0][:1]], args.max_new_tokens, **common)
    metrics["eval/whole_question/accuracy"] = mean_agent_accuracy(alone)[0]
    return metrics
