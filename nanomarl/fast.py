"""fast.py: the optimisations, each behind one function with the plain path beside it in the
script that calls it, and a test that both agree (tests/test_fast_paths.py, tests/test_routing.py):

  * stacked-LoRA routing: rows on several adapters share one generate call, two stacked matmuls
    per LoRA layer instead of peft's per-adapter gather and scatter (common.generate);
  * padding columns no row uses are not computed (common.forward_responses, cotrain.py's batches);
  * the conversation forward: one forward over a debate's last turn also reads the earlier turns'
    responses, which its prompt holds (cotrain.py, whenever conversation_forward_applies).
A learner may skip this module."""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from nanomarl.distributed import allreduce_sum


def stackable_lora(model, adapter_names: list[str]) -> bool:
    """Can stacked_lora_routing serve these rows? Only plain LoRA on unquantised nn.Linear layers
    (peft's lora.Linear: no DoRA or other variant, no LoRA bias, nothing merged, no hooks on the
    layer), in eval mode, with every name an adapter of the model or '__base__'. Anything else keeps
    peft's own routing."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer
    from peft.tuners.lora.layer import Linear as LoraLinear

    if not isinstance(model, PeftModel) or model.training:
        return False
    used = set(adapter_names) - {"__base__"}
    if not used <= set(model.peft_config):
        return False  # peft's routing reports the unknown name
    for layer in model.modules():
        if not isinstance(layer, LoraLayer):
            continue
        if (type(layer) is not LoraLinear or layer.merged or layer.disable_adapters
                or "forward" in vars(layer)
                # e.g. peft's adapter_names hooks, left behind when a forward raised
                or layer._forward_pre_hooks
                or any(n in layer.lora_variant or layer.lora_B[n].bias is not None
                       for n in used & set(layer.lora_A))):
            return False
    return True


@contextlib.contextmanager
def stacked_lora_routing(model, adapter_names: list[str]):
    """Inference with row i on adapter adapter_names[i] ('__base__': none), without peft's per-row
    routing.

    peft's mixed-adapter forward gathers each adapter's rows, runs its LoRA and scatters the result
    back, in every layer, at every decoding step (about a quarter of a mixed generate call on CPU,
    docs/speed.md). Here each LoRA layer's forward is replaced, for the duration of the
    block, by
        y = W x + B_cat ((A_cat x) ⊙ s_row)
    with A_cat [Σr, d_in] and B_cat [d_out, Σr] the used adapters' LoRA weights stacked along the
    rank, and s_row [rows, 1, Σr] holding each row's own scaling (lora_alpha / r) on its adapter's
    block, 0 elsewhere (so a '__base__' row gets no LoRA delta). That is the LoRA update of Hu et
    al. 2021 (eq. 3), h = W₀x + BAx, for every row in two matmuls; the other adapters' blocks cost
    |adapters| x r extra columns, and nothing grows with the number of rows. The weights are peft's
    own (read at entry): storage does not change. No gradients (the weights are read once); check
    stackable_lora() first."""
    if torch.is_grad_enabled():
        raise RuntimeError("stacked_lora_routing is for inference only (wrap the call in "
                           "torch.no_grad())")
    if not stackable_lora(model, adapter_names):
        raise ValueError("stacked_lora_routing: this model or these adapters need peft's routing "
                         "(stackable_lora)")
    from peft.tuners.lora import LoraLayer

    used = list(dict.fromkeys(n for n in adapter_names if n != "__base__"))
    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    for layer in layers:
        names = [n for n in used if n in layer.lora_A]
        if not names:
            continue  # no used adapter targets this layer: its forward already is the base layer's
        a_cat = torch.cat([layer.lora_A[n].weight for n in names])  # [Σr, d_in]
        b_cat = torch.cat([layer.lora_B[n].weight for n in names], dim=1)  # [d_out, Σr]
        block = torch.cat([torch.full((layer.r[n],), i)
                           for i, n in enumerate(names)]).to(a_cat.device)
        row = torch.tensor([names.index(n) if n in names else -1 for n in adapter_names],
                           device=a_cat.device)
        scale = torch.tensor([layer.scaling[n] for n in names], dtype=a_cat.dtype,
                             device=a_cat.device)[block]
        row_scale = ((row[:, None] == block[None]) * scale)[:, None, :]  # [rows, 1, Σr]
        layer.forward = _stacked_lora_forward(layer, a_cat, b_cat, row_scale)
    try:
        yield model
    finally:
        for layer in layers:
            vars(layer).pop("forward", None)  # the class's forward (peft's) again


def _stacked_lora_forward(layer, a_cat, b_cat, row_scale):
    def forward(x, *args, **kwargs):
        if x.shape[0] != row_scale.shape[0]:
            raise ValueError(f"stacked_lora_routing: {x.shape[0]} rows in the batch, "
                             f"{row_scale.shape[0]} adapter names")
        result = layer.base_layer(x, *args, **kwargs)
        delta = F.linear(F.linear(x.to(a_cat.dtype), a_cat) * row_scale, b_cat)
        return result + delta.to(result.dtype)
    return forward


def read_responses_inside(model, inputs: dict, query_mask, response_ids, response_mask,
                          earlier: list[tuple], output_hidden: bool) -> list[tuple]:
    """One forward that reads the response after the query AND responses that sit inside the query.

    In a multi-turn chat a later turn's prompt holds an earlier turn's prompt and response, so one
    forward over the last turn gives every turn's log-probs (cotrain.py's conversation forward).
    earlier: one (response_ids [B, L], response_mask [B, L], start [B]) per earlier response, row
    b's tokens beginning start[b] real tokens into its query. The logits at position p predict token
    p + 1, so response token j is read at position (first real query column) + start + j - 1; the
    model computes the logits of the union of these positions only (logits_to_keep as positions) and
    every row reads its own. The caller checks that the tokens really are there (the forward reads
    the query's). inputs: the model's keyword arguments for [query ; response] (queries and
    responses already trimmed of unused columns). Returns [(logits [B, L, V], hidden [B, L, H] or
    None, ids, mask)]: the response's, then each earlier one's."""
    q_len, r_len = query_mask.shape[1], response_ids.shape[1]
    rows = torch.arange(len(response_ids), device=response_ids.device)[:, None]
    first_real = q_len - query_mask.sum(1).long()
    reads = [(q_len - 1 + torch.arange(r_len, device=response_ids.device))
             .expand(len(response_ids), -1)]
    targets = [(response_ids, response_mask)]
    for ids, mask, start in earlier:
        used = mask.any(0).nonzero()
        width = int(used.max()) + 1 if len(used) else 1
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


def conversation_holds(pairs: list[tuple[dict, dict]]) -> bool:
    """For each (earlier, later) pair of batches (as generate() returns them, the same questions in
    the same rows): does every row's earlier prompt and sampled response (padding removed) start,
    token for token, the same row's later prompt? Agreed on by all ranks (the collectives that
    follow must match everywhere)."""
    holds = True
    for earlier, later in pairs:
        for b in range(len(later["query_ids"])):
            conversation = torch.cat([
                earlier["query_ids"][b][earlier["query_mask"][b].bool()],
                earlier["response_ids"][b][earlier["response_mask"][b].bool()]])
            prompt = later["query_ids"][b][later["query_mask"][b].bool()]
            holds = (holds and len(prompt) >= len(conversation)
                     and torch.equal(prompt[:len(conversation)], conversation))
    device = pairs[0][1]["response_mask"].device
    return bool(allreduce_sum(torch.tensor(float(not holds), device=device)) == 0)


def conversation_forward_applies(team, exp: dict, args) -> bool:
    """The conversation forward: can one forward per agent over its LAST trained turn give every
    trained (turn, agent)'s outputs? Yes when no separate critic is forwarded, each agent plays its
    trained turns on one adapter, and every earlier turn's prompt and sampled response start the
    last turn's prompt token for token (conversation_holds). exp: {(turn, agent): generate()'s
    batch}; team: cotrain.Team."""
    trained, adapter_names = team.trained, team.adapter_names
    turns = sorted({t for t, _ in trained})
    last = turns[-1]
    separate_critic = args.advantage == "gae" and args.value_model == "separate"
    if separate_critic or len(turns) < 2:
        return False
    if not all((last, a) in exp and adapter_names[t][a] == adapter_names[last][a]
               for t, a in trained):
        return False
    return conversation_holds([(exp[(t, a)], exp[(last, a)]) for t, a in trained if t != last])


def conversation_forward(forward, model, batches: dict, names: list[str], temperature: float,
                         **outputs) -> dict:
    """{turn: outputs} of the same rows at several turns from ONE forward over the last turn, whose
    prompts hold each earlier turn's prompt and response: forward (common.forward_responses) with
    `earlier` reads those responses inside the prompts. batches: {turn: (query_ids, query_mask,
    response_ids, response_mask)}; an earlier response starts after its own prompt's tokens."""
    turns = sorted(batches)
    earlier = [(ids, mask, query_mask.sum(1)) for _, query_mask, ids, mask in
               (batches[t] for t in turns[:-1])]
    out = forward(model, *batches[turns[-1]], names, temperature, earlier=earlier, **outputs)
    return dict(zip(turns, out.pop("earlier") + [out]))


def first_used_column(mask: torch.Tensor) -> int:
    """Left padding that every row has: the first column any row of mask [B, L] uses (0 if none
    does)."""
    return int(mask.any(0).float().argmax())


def used_width(mask: torch.Tensor) -> int:
    """Right padding that every row has: 1 + the last column any row of mask [B, L] uses (at least
    1)."""
    used = mask.any(0).nonzero()
    return int(used.max()) + 1 if len(used) else 1


def agent_rows(exp: dict, t: int, agents: list[int], rows: torch.Tensor | None,
               keys: list[str]) -> dict:
    """cotrain.py's batches: the chosen rows (None: all) of several agents' experience at turn t
    ({(turn, agent): tensors}), concatenated (one generate call made them: equal widths), without
    the columns no row uses."""
    out = {k: torch.cat([exp[(t, a)][k] if rows is None else exp[(t, a)][k][rows] for a in agents])
           for k in keys}
    if "query_mask" in out:  # left padding
        first = first_used_column(out["query_mask"])
        out["query_ids"] = out["query_ids"][:, first:]
        out["query_mask"] = out["query_mask"][:, first:]
    width = used_width(out["response_mask"])  # right padding
    for k in keys:
        if not k.startswith("query") and out[k].dim() == 2:
            out[k] = out[k][:, :width]
    return out
