"""conversation.py: which rows cotrain.py's fast forward (--fast) serves. Where an agent plays
several trained turns on one adapter and its last turn's prompt holds its earlier prompts and
responses token for token (run_debate's as_sampled), one forward over the last turn reads every
turn's log-probs (common.forward_conversation): stages 4-6 run one forward per agent, not one per
turn. The other rows (a template that rewrites turns, the random tiny model's broken characters)
take cotrain.forward_pairs' plain loop; a test holds the two equal. The forwards come from the
caller: this module does not import common.py. A learner may skip this module."""
from __future__ import annotations

import torch

KEYS = ("query_ids", "query_mask", "response_ids", "response_mask")


def conversation_forward(team, exp: dict, rows: torch.Tensor, adapter: str | None, chunk: int,
                         read, plain, **outputs) -> dict:
    """cotrain.forward_pairs' {(t, a): outputs} for the rows, `chunk` at a time (0: all): read's
    (common.forward_conversation) where the last turn holds the others, plain(rows)'s elsewhere."""
    turns, agents = sorted({t for t, _ in exp}), sorted({a for _, a in exp})
    names = {a: adapter or team.adapter_names[turns[-1]][a] for a in agents}
    one_chat = len(turns) > 1 and len(exp) == len(turns) * len(agents) and all(
        (adapter or team.adapter_names[t][a]) == names[a] for t, a in exp)  # one adapter per agent
    held = torch.stack([e.as_sampled[rows] for e in exp.values()]).all(0) & one_chat
    if not held.any():
        return plain(rows)
    out = {}
    for a in agents:
        pieces = [read(team.bases[team.agent_base[a]],
                       {t: {k: getattr(exp[(t, a)], k)[part] for k in KEYS} for t in turns},
                       names[a], **outputs) for part in rows[held].split(chunk or len(rows))]
        for t in turns:
            out[(t, a)] = {k: None if v is None else torch.cat([p[t][k] for p in pieces])
                           for k, v in pieces[0][t].items()}
    if held.all():
        return out
    rest = plain(rows[~held])  # in the rows' order again:
    order = torch.cat([held.nonzero(), (~held).nonzero()])[:, 0].argsort()
    return {key: {k: None if v is None else torch.cat([v, rest[key][k]])[order]
                  for k, v in out[key].items()} for key in out}
