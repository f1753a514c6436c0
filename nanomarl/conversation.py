"""conversation.py: which rows cotrain.py's fast forward (--fast) serves. Where an agent plays
several trained turns on one adapter, its last turn's prompt holds its earlier prompts and responses
token for token, so one forward over the last turn reads every turn's log-probs
(common.forward_conversation; stages 4-6 run their forwards once per agent, not once per turn).
Rows where that does not hold (a template that rewrites turns, the random tiny model's broken
characters) take cotrain.forward_pairs' plain loop; a test holds the two equal. The forwards come
from the caller: this module does not import common.py. A learner may skip this module."""
from __future__ import annotations

import torch

KEYS = ("query_ids", "query_mask", "response_ids", "response_mask")


def conversation_forward(team, exp: dict, rows: torch.Tensor, adapter: str | None, chunk: int,
                         read, plain, **outputs) -> dict:
    """cotrain.forward_pairs' {(t, a): outputs} for the rows, `chunk` at a time (0: all): from
    read(model, {turn: batch}, adapter, **outputs) (common.forward_conversation) where a row's
    turns are one conversation on one adapter, else from plain(rows) (cotrain's loop)."""
    turns = sorted({t for t, _ in exp})
    agents = sorted({a for _, a in exp})
    names = {a: adapter or team.adapter_names[turns[-1]][a] for a in agents}
    pairs = [(t, a) for t in turns for a in agents]
    if (len(turns) < 2 or any(key not in exp for key in pairs)
            or any((adapter or team.adapter_names[t][a]) != names[a] for t, a in pairs)):
        return plain(rows)
    held = torch.ones(len(rows), dtype=torch.bool)
    for t, a in pairs[:-len(agents)]:
        held &= holds(exp[(t, a)], exp[(turns[-1], a)], rows)
    if not held.any():
        return plain(rows)
    out = {}
    for a in agents:
        model = team.bases[team.agent_base[a]]
        pieces = [read(model, {t: {k: getattr(exp[(t, a)], k)[part] for k in KEYS}
                               for t in turns}, names[a], **outputs)
                  for part in rows[held].split(chunk or len(rows))]
        for t in turns:
            out[(t, a)] = {k: None if pieces[0][t][k] is None
                           else torch.cat([p[t][k] for p in pieces])
                           for k in ("logprobs", "entropy", "hidden")}
    if held.all():
        return out
    rest = plain(rows[~held])  # in the rows' order again:
    order = torch.cat([held.nonzero(), (~held).nonzero()])[:, 0].argsort()
    return {key: {k: None if v is None else torch.cat([v, rest[key][k]])[order]
                  for k, v in out[key].items()} for key in out}


def holds(earlier, later, rows: torch.Tensor) -> torch.Tensor:
    """For each row: does its earlier prompt and sampled response (padding removed) start, token
    for token, the same row's later prompt? A bool [len(rows)]. earlier, later: cotrain's
    Experience of one agent at two turns."""
    def real(batch, key, b):
        return getattr(batch, key)[b][getattr(batch, key.replace("ids", "mask"))[b].bool()]
    held = []
    for b in rows.tolist():
        conversation = torch.cat([real(earlier, "query_ids", b), real(earlier, "response_ids", b)])
        held.append(torch.equal(real(later, "query_ids", b)[:len(conversation)], conversation))
    return torch.tensor(held, dtype=torch.bool)
