"""fast.py: two fast paths of the scripts' --fast, each with its plain path beside it and a test
that both agree. A learner may skip this module.

  * stacked_lora_routing, inside common.generate (fast=True): rows on several adapters share one
    generate call, two stacked matmuls per LoRA layer instead of peft's per-adapter gather and
    scatter. Plain: peft's per-row routing (fast=False); tests/test_routing.py.
  * shared_prefill, inside common.generate (fast=True): rows that repeat a prompt on the same
    adapter (the K samples of a question) run generate's prefill once. Plain: every row's own
    prefill: the same samples (bit for bit where a matmul rounds alike at every batch size);
    tests/test_routing.py.
  * shared_prefix_forward, magrpo.py's update: forward_responses' outputs with each distinct
    prompt forwarded once, not once per sampled completion. Plain: common.forward_responses;
    tests/test_magrpo.py.
The other fast paths: nanomarl/conversation.py (cotrain.py's forward), nanomarl/fast_decode.py
(CUDA), vLLM (nanomarl/vllm_rollout.py). This module does not import common.py: the function
that needs it takes it as an argument.

peft's mixed-adapter forward gathers each adapter's rows, runs its LoRA and scatters the result
back, in every layer, at every decoding step (about a quarter of a mixed generate call on CPU,
docs/speed.md). stacked_lora_routing replaces each LoRA layer's forward, for the duration of the
block, by
    y = W x + B_cat ((A_cat x) ⊙ s_row)
with A_cat [Σr, d_in] and B_cat [d_out, Σr] the used adapters' LoRA weights stacked along the
rank, and s_row [rows, 1, Σr] holding each row's own scaling (lora_alpha / r) on its adapter's
block, 0 elsewhere (so a '__base__' row gets no LoRA delta). That is the LoRA update of Hu et al.
2021 (eq. 3), h = W₀x + BAx, for every row in two matmuls; the other adapters' blocks cost
|adapters| x r extra columns, and nothing grows with the number of rows. The weights are peft's
own (read at entry): storage does not change.

In MAGRPO every agent samples G completions of the same prompt, and prompts are long beside their
completions (a turn-2 prompt of 150 tokens, completions of 25): forwarding each row as [prompt ;
completion] computes each prompt G times. shared_prefix_forward runs every distinct prompt once,
with a KV cache, selects each row's prompt keys and values from it (an index, so the gradients of
the rows that share a prompt add up in it, as they do across their separate forwards), then
forwards only the completions on that cache. The logits that predict the completion are the
prompt's last position's, then the completion's own but the last: forward_responses' numbers, up
to float rounding."""
from __future__ import annotations

import contextlib
import functools

import torch
import torch.nn.functional as F


def stackable_lora(model, adapter_names: list[str]) -> bool:
    """Can stacked_lora_routing serve these rows? Plain LoRA on unquantised nn.Linear layers (no
    DoRA, LoRA bias, merge or hook), in eval mode, every name an adapter or '__base__'."""
    from peft import PeftModel
    from peft.tuners.lora import Linear as LoraLinear, LoraLayer

    if not isinstance(model, PeftModel) or model.training:
        return False
    used = set(adapter_names) - {"__base__"}
    return used <= set(model.peft_config) and not any(  # else peft's routing reports the name
        type(layer) is not LoraLinear or layer.merged or layer.disable_adapters
        or "forward" in vars(layer)
        or layer._forward_pre_hooks  # e.g. peft's adapter_names hooks, left when a forward raised
        or any(n in layer.lora_variant or layer.lora_B[n].bias is not None
               for n in used & set(layer.lora_A))
        for layer in model.modules() if isinstance(layer, LoraLayer))


@contextlib.contextmanager
def stacked_lora_routing(model, adapter_names: list[str]):
    """Inference with row i on adapter adapter_names[i] ('__base__': none) in two stacked matmuls
    per LoRA layer (the module's docstring). Inference only, where stackable_lora says yes."""
    if torch.is_grad_enabled() or not stackable_lora(model, adapter_names):
        raise ValueError("stacked_lora_routing: inference only (torch.no_grad()), on a model and "
                         "adapters stackable_lora accepts (else peft's routing)")
    from peft.tuners.lora import LoraLayer

    used = list(dict.fromkeys(n for n in adapter_names if n != "__base__"))
    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    for layer in layers:
        names = [n for n in used if n in layer.lora_A]
        if not names:
            continue  # no used adapter targets this layer: its forward already is the base layer's
        a_cat = torch.cat([layer.lora_A[n].weight for n in names])  # [Σr, d_in]
        b_cat = torch.cat([layer.lora_B[n].weight for n in names], dim=1)  # [d_out, Σr]
        # s_row [rows, 1, Σr]: row i's scaling on its adapter's block of ranks, 0 elsewhere
        blocks = torch.block_diag(*[torch.full((1, layer.r[n]), layer.scaling[n]) for n in names])
        row = torch.tensor([names.index(n) if n in names else len(names) for n in adapter_names])
        row_scale = F.pad(blocks, (0, 0, 0, 1))[row].to(a_cat)[:, None, :]  # pad: no adapter
        layer.forward = functools.partial(_stacked_lora_forward, layer, a_cat, b_cat, row_scale)
    try:
        yield model
    finally:
        for layer in layers:
            vars(layer).pop("forward", None)  # the class's forward (peft's) again


def _stacked_lora_forward(layer, a_cat, b_cat, row_scale, x, *args, **kwargs):
    """A LoRA layer's forward inside stacked_lora_routing: y = W x + B_cat ((A_cat x) ⊙ s_row)."""
    if x.shape[0] != row_scale.shape[0]:
        raise ValueError(f"stacked_lora_routing: {x.shape[0]} rows in the batch, "
                         f"{row_scale.shape[0]} adapter names")
    result = layer.base_layer(x, *args, **kwargs)
    delta = F.linear(F.linear(x.to(a_cat.dtype), a_cat) * row_scale, b_cat)
    return result + delta.to(result.dtype)


@contextlib.contextmanager
def shared_prefill(model, query_ids, query_mask, names: list[str], route):
    """generate (transformers') inside this block, rows routed by route(names), prefills each
    distinct row (prompt and adapter) once and hands its keys, values and logits to the rows that
    repeat it: each row's arithmetic is that of one batch of every row, so the samples are too (up
    to the rounding of a CPU whose matmuls round by the batch's shape)."""
    tags = torch.tensor([sorted(set(names)).index(n) for n in names], device=query_ids.device)
    _, group = torch.unique(torch.cat([query_ids, query_mask, tags[:, None]], 1), dim=0,
                            return_inverse=True)  # group[i]: row i's distinct row
    first = torch.zeros_like(group[:int(group.max()) + 1]).scatter(  # a row of each (all equal)
        0, group, torch.arange(len(group), device=group.device))
    inner = getattr(model, "get_base_model", lambda: model)()  # peft's wrapped model
    decoding = contextlib.ExitStack()

    @functools.wraps(inner.forward)  # generate reads the signature (it passes position_ids)
    def prefill(**inputs):
        del inner.forward  # the first call only: the decoding steps call the model's own
        with route([names[i] for i in first.tolist()]):
            out = inner(**{k: v[first] if torch.is_tensor(v) else v for k, v in inputs.items()})
        out.cache.batch_select_indices(group)  # [distinct rows, ...] -> [rows, ...]
        out.logits = out.logits[group]
        decoding.enter_context(route(names))
        return out
    if len(first) == len(group):  # no row repeats another: generate as it is
        decoding.enter_context(route(names))
    else:
        inner.forward = prefill
    try:
        with decoding:
            yield
    finally:
        vars(inner).pop("forward", None)


def shared_prefix_forward(common, model, query_ids, query_mask, response_ids, response_mask,
                          adapter_names: list[str] | None, temperature: float = 1.0,
                          output_hidden: bool = False, output_entropy: bool = False) -> dict:
    """common.forward_responses' outputs for the same arguments (`common`: the module common.py),
    each distinct prompt (ids and mask) forwarded once (the module's docstring); forward_responses
    itself serves the rest: no prompt repeated, rows on several adapters, or output_hidden."""
    plain = functools.partial(common.forward_responses, model, query_ids, query_mask, response_ids,
                              response_mask, adapter_names, temperature,
                              output_hidden=output_hidden, output_entropy=output_entropy)
    full_width = response_ids.shape[1]
    first, width = common.first_used_column(query_mask), common.used_width(response_mask)
    query_ids, query_mask = query_ids[:, first:], query_mask[:, first:].long()
    response_ids, response_mask = response_ids[:, :width], response_mask[:, :width]
    # the distinct prompts (ids ; mask), and group[i]: row i's among them
    prompts, group = torch.unique(torch.cat([query_ids, query_mask], 1), dim=0,
                                  return_inverse=True)
    mixed = adapter_names is not None and len(set(adapter_names)) > 1
    if output_hidden or mixed or len(prompts) == len(group):
        return plain()
    q_len = query_ids.shape[1]
    prompt_ids, prompt_mask = prompts[:, :q_len], prompts[:, q_len:]
    attention_mask = torch.cat([query_mask, response_mask.long()], dim=1)
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)  # forward_responses' own
    routing = (contextlib.nullcontext() if adapter_names is None
               else common.single_adapter(model, adapter_names[0]))
    with routing, common.fp32_head(model):
        prefix = model(input_ids=prompt_ids, attention_mask=prompt_mask,
                       position_ids=(prompt_mask.cumsum(1) - 1).clamp(min=0), use_cache=True,
                       logits_to_keep=1)
        prefix.cache.batch_select_indices(group)  # [prompts, ...] -> [rows, ...], differentiable
        out = model(input_ids=response_ids, attention_mask=attention_mask,
                    position_ids=position_ids[:, q_len:], cache=prefix.cache, use_cache=True)
    # the prompt's last position predicts the completion's first token, column j its token j + 1
    logits = torch.cat([prefix.logits[group], out.logits[:, :-1]], dim=1)
    result = common.policy_outputs(logits, temperature, response_ids, None, output_entropy)
    return common.padded_outputs(result, response_mask, full_width)
