"""conversation.py: the conversation forward, a fast path of cotrain.forward_pairs with the same
outputs. An agent's prompt at turn t holds its own earlier prompts and sampled responses, so one
forward over its last trained turn also reads every earlier trained turn's response: one forward
per agent and debate instead of one per turn (half the forwards at two turns). It applies where
each agent plays its trained turns on one adapter and every row's earlier prompt and response start
its later prompt token for token; anywhere else cotrain.forward_pairs runs its loop, and a test
holds the two equal. A learner may skip this module."""
from __future__ import annotations

import torch

from common import _response_outputs, fp32_head, single_adapter
from nanomarl.fast import first_used_column, pad_outputs, used_width

KEYS = ("query_ids", "query_mask", "response_ids", "response_mask")


def conversation_forward(team, exp: dict, rows: torch.Tensor, temperature: float,
                         adapter: str | None, chunk: int, **outputs) -> dict | None:
    """cotrain.forward_pairs' {(t, a): outputs} from one forward per agent over its last trained
    turn, `chunk` rows at a time (0: all); None where that does not apply (the caller's loop runs).
    Decided on all of exp's rows, so every call of an update decides alike."""
    turns = sorted({t for t, _ in exp})
    agents = sorted({a for _, a in exp})
    if len(turns) < 2 or any((t, a) not in exp for t in turns for a in agents):
        return None
    names = {a: adapter or team.adapter_names[turns[-1]][a] for a in agents}
    if any((adapter or team.adapter_names[t][a]) != names[a] for t in turns for a in agents):
        return None  # a LoRA per turn: the earlier turns ran on other adapters
    if not all(holds(exp[(t, a)], exp[(turns[-1], a)]) for t in turns[:-1] for a in agents):
        return None
    out = {}
    for a in agents:
        model = team.bases[team.agent_base[a]]
        pieces = [read_conversation(model, {t: {k: exp[(t, a)][k][part] for k in KEYS}
                                            for t in turns}, names[a], temperature, **outputs)
                  for part in rows.split(chunk or len(rows))]
        for t in turns:
            out[(t, a)] = {k: None if pieces[0][t][k] is None
                           else torch.cat([p[t][k] for p in pieces])
                           for k in ("logprobs", "entropy", "hidden")}
    return out


def holds(earlier: dict, later: dict) -> bool:
    """Does every row's earlier prompt and sampled response (padding removed) start, token for
    token, the same row's later prompt?"""
    for b in range(len(later["query_ids"])):
        conversation = torch.cat([earlier["query_ids"][b][earlier["query_mask"][b].bool()],
                                  earlier["response_ids"][b][earlier["response_mask"][b].bool()]])
        prompt = later["query_ids"][b][later["query_mask"][b].bool()]
        if len(prompt) < len(conversation) or not torch.equal(prompt[:len(conversation)],
                                                               conversation):
            return False
    return True


def read_conversation(model, batches: dict, name: str, temperature: float,
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
    results = [_response_outputs(logits.float() / temperature, hidden, ids, mask, output_entropy)
               for logits, hidden, ids, mask in parts]
    padded = ([pad_outputs(r, ids.shape[1]) for r, (ids, _, _) in zip(results[1:], earlier)]
              + [pad_outputs(results[0], full_width)])
    return dict(zip(turns, padded))


def read_responses_inside(model, inputs: dict, query_mask, response_ids, response_mask,
                          earlier: list[tuple], output_hidden: bool) -> list[tuple]:
    """One forward that reads the response after the query AND responses that sit inside the query.

    earlier: one (response_ids [B, L], response_mask [B, L], start [B]) per earlier response, row
    b's tokens beginning start[b] real tokens into its query. The logits at position p predict token
    p + 1, so response token j is read at position (first real query column) + start + j - 1; the
    model computes the logits of the union of these positions only (logits_to_keep as positions) and
    every row reads its own. inputs: the model's keyword arguments for [query ; response] (trimmed
    of unused columns). Returns [(logits [B, L, V], hidden [B, L, H] or None, ids, mask)]: the
    response's, then each earlier one's."""
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
