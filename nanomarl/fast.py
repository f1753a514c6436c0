"""fast.py: stacked-LoRA routing, the fast path of common.generate (fast=True, the scripts'
--fast): rows on several adapters share one generate call, two stacked matmuls per LoRA layer
instead of peft's per-adapter gather and scatter. The plain path is peft's per-row routing
(common.generate with fast=False); tests/test_routing.py holds both equal. The other fast paths:
nanomarl/conversation.py (cotrain.py's forward), nanomarl/fast_decode.py (CUDA), vLLM
(nanomarl/vllm_rollout.py). A learner may skip this module.

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
own (read at entry): storage does not change."""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F


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
    """Inference with row i on adapter adapter_names[i] ('__base__': none) in two stacked matmuls
    per LoRA layer (the module's docstring). No gradients; check stackable_lora() first."""
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
