"""conversation.py: cotrain.py's fast forward (--fast). Where an agent plays several trained turns
on one adapter, its last turn's prompt holds its earlier prompts and responses token for token, so
one forward over the last turn reads every turn's log-probs (stages 4-6 run their forwards once per
agent, not once per turn). Rows where that does not hold (a template that rewrites turns, the
random tiny model's broken characters) take cotrain.forward_pairs' plain loop; a test holds the two
equal. π comes from the caller (common.policy_outputs, its one definition): this module does not
import common.py. A learner may skip this module.

read_responses_inside: earlier responses sit inside the last prompt, row b's tokens beginning
start[b] real tokens into its query. The logits at position p predict token p + 1, so response
token j is read at position (first real query column) + start + j - 1; the model computes the
logits of the union of these positions only (logits_to_keep as positions) and every row reads its
own."""
from __future__ import annotations

import torch

from nanomarl.models import fp32_head, single_adapter
from nanomarl.padding import first_used_column, padded_outputs, used_width

KEYS = ("query_ids", "query_mask", "response_ids", "response_mask")


def conversation_forward(team, exp: dict, rows: torch.Tensor, temperature: float,
                         adapter: str | None, chunk: int, policy_outputs, plain, **outputs) -> dict:
    """cotrain.forward_pairs' {(t, a): outputs} for the rows, `chunk` at a time (0: all): those
    whose turns are one conversation from one forward per agent over its last trained turn, the
    others from plain(rows) (cotrain's loop; all of them where an agent's turns run on several
    adapters, as with a LoRA per turn)."""
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
        pieces = [read_conversation(model, {t: {k: getattr(exp[(t, a)], k)[part] for k in KEYS}
                                            for t in turns}, names[a], temperature,
                                    policy_outputs, **outputs)
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


def read_conversation(model, batches: dict, name: str, temperature: float, policy_outputs,
                      output_hidden: bool = False, output_entropy: bool = False) -> dict:
    """common.forward_responses' outputs for the same rows at several turns ({turn: batch}), from
    one forward on adapter `name` over the last turn's prompt and response: each earlier response
    is read where it sits in that prompt, after its own prompt's tokens."""
    turns = sorted(batches)
    last = batches[turns[-1]]
    query_ids, query_mask, response_ids, response_mask = (last[k] for k in KEYS)
    full_width = response_ids.shape[1]
    first, width = first_used_column(query_mask), used_width(response_mask)
    query_ids, query_mask = query_ids[:, first:], query_mask[:, first:]
    response_ids, response_mask = response_ids[:, :width], response_mask[:, :width]
    attention_mask = torch.cat([query_mask.long(), response_mask.long()], dim=1)
    inputs = dict(input_ids=torch.cat([query_ids, response_ids], dim=1),
                  attention_mask=attention_mask,
                  position_ids=(attention_mask.cumsum(1) - 1).clamp(min=0),
                  output_hidden_states=output_hidden, use_cache=False)
    earlier = [(b["response_ids"], b["response_mask"], b["query_mask"].sum(1))
               for b in (batches[t] for t in turns[:-1])]
    with single_adapter(model, name), fp32_head(model):
        parts = read_responses_inside(model, inputs, query_mask, response_ids, response_mask,
                                      earlier, output_hidden)
    results = [padded_outputs(policy_outputs(logits, temperature, ids, hidden, output_entropy),
                              mask, full)
               for (logits, hidden, ids, mask), full
               in zip(parts, [full_width] + [ids.shape[1] for ids, _, _ in earlier])]
    return dict(zip(turns, results[1:] + results[:1]))


def read_responses_inside(model, inputs: dict, query_mask, response_ids, response_mask,
                          earlier: list[tuple], output_hidden: bool) -> list[tuple]:
    """One forward over inputs ([query ; response], trimmed) that reads the response after the
    query and each earlier one (response_ids, response_mask, start [B]) inside it (the module's
    docstring). Returns [(logits, hidden or None, ids, mask)]: the response's, then the earlier."""
    q_len, r_len = query_mask.shape[1], response_ids.shape[1]
    rows = torch.arange(len(response_ids), device=response_ids.device)[:, None]
    first_real = q_len - query_mask.sum(1).long()
    reads = [(q_len - 1 + torch.arange(r_len, device=response_ids.device))
             .expand(len(response_ids), -1)]
    targets = [(response_ids, response_mask)]
    for ids, mask, start in earlier:
        width = used_width(mask)
        targets.append((ids[:, :width], mask[:, :width]))
        read = ((first_real + start.to(first_real))[:, None] - 1
                + torch.arange(width, device=ids.device))
        reads.append(torch.where(mask[:, :width].bool(), read.clamp(0, q_len - 1),
                                 q_len - 1))  # padding: any
    keep = torch.unique(torch.cat([r.reshape(-1) for r in reads]))  # sorted
    out = model(**inputs, logits_to_keep=keep)
    return [(out.logits[rows, torch.searchsorted(keep, read.contiguous())],
             out.hidden_states[-1][rows, read] if output_hidden else None, ids, mask)
            for read, (ids, mask) in zip(reads, targets)]
