"""The controls of a debate on split information (arith:split: each agent sees only its own
number), which say whether a gain is communication: the silent partner (every partner message
replaced by a neutral one of about the same length: if the team's gain is talking, it falls back to
about its turn-1 level), the ceiling (one agent that sees the whole question), and how often an
agent's message carries its own number (the channel in use). cotrain.py's held-out evaluation and
evaluate.py report them beside the debate. A learner may skip this module.
"""
from __future__ import annotations

import re

import torch

from nanomarl.tasks.debate_prompts import first_sentence, followup_message

NEUTRAL_WORDS = "I have read the question and I am still thinking about it".split()


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


def from_second_turn(records: list[dict], debate, show_partner) -> list[dict]:
    """The records with each agent's first view replaced by its turn-2 message in `debate`, the
    partners' turn-1 words shown as show_partner(words): a debate on them, on the adapters of turns
    2..T, plays turns 2..T of `debate` replayed with show_partner, without generating turn 1 again
    (greedy: the same turn 1; tests/test_teamwork.py)."""
    agents = range(len(debate.responses[0][0]))
    return [dict(r, views=[followup_message(r, a, [show_partner(debate.responses[b][0][j])
                                                   for j in agents if j != a]) for a in agents])
            for b, r in enumerate(records)]


def mean_agent_accuracy(debate) -> list[float]:
    """Per turn, the agents' mean accuracy (correct is [B, T, A])."""
    return debate.correct.float().mean(dim=(0, 2)).tolist()


@torch.no_grad()
def split_controls(play, team, args, records: list[dict], debate,
                   greedy_debate: bool = True) -> dict:
    """The held-out debate's channel (eval/turn{t}/informative, and /heard: in the first sentence;
    at the last turn, what a partner would hear), the same team with silent partners (greedy,
    eval/silent/turn{t}/agent_accuracy) and agent 0's turn-1 policy answering the whole question
    alone, greedily (eval/ceiling/accuracy). play: cotrain.run_debate; debate: its debate on
    records. greedy_debate: one greedy call of play played it (cotrain.py's), so its turn 1 is the
    silent debate's, and the silent partner plays from turn 2 on (from_second_turn: the same
    numbers, a fifth less generation); False: the whole silent debate is played. Empty for
    records without views."""
    if not records or "views" not in records[0]:
        return {}
    common = dict(greedy=True, prompt_style=args.prompt_style,
                  generate_batch_size=args.generate_batch_size)
    metrics = {f"eval/turn{t + 1}/informative": rate
               for t, rate in enumerate(informative_rates(debate, records))}
    metrics.update({f"eval/turn{t + 1}/heard": rate
                    for t, rate in enumerate(informative_rates(debate, records, heard=True))})
    if not greedy_debate:  # the plain path: the whole debate again, every partner message neutral
        silent = mean_agent_accuracy(play(records, team.models(), team.agent_tokenizers(),
                                          team.adapter_names, args.max_new_tokens,
                                          show_partner=neutral_message, **common))
    else:  # turn 1 as played (no partner words yet), then the silent turns 2..T
        silent = mean_agent_accuracy(debate)[:1]
        if len(team.adapter_names) > 1:
            silent += mean_agent_accuracy(play(
                from_second_turn(records, debate, neutral_message), team.models(),
                team.agent_tokenizers(), team.adapter_names[1:], args.max_new_tokens,
                show_partner=neutral_message, **common))
    metrics.update({f"eval/silent/turn{t + 1}/agent_accuracy": acc
                    for t, acc in enumerate(silent)})
    alone = play([whole_question(r) for r in records], team.models()[:1],
                 team.agent_tokenizers()[:1], [team.adapter_names[0][:1]], args.max_new_tokens,
                 **common)
    metrics["eval/ceiling/accuracy"] = mean_agent_accuracy(alone)[0]
    return metrics
