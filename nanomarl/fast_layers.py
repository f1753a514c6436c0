"""fast_layers.py: the maths of fast_decode.py's decoding step, written out: one decoder layer of
Llama, Qwen2 and Qwen3 (RMSNorm, rotary embedding, grouped-query attention over a static KV cache,
the MLP), its linears with every row's LoRA adapter stacked (lora_linears), and the head's fp32
logits (head_logits). tests/test_fast_decode.py holds them equal to transformers' modules.
A learner may skip this module."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps: float):
    """transformers' Llama/Qwen2 RMSNorm, written out: fp32 statistics, the weight in x's dtype."""
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def lora_linears(x, group):
    """The outputs of the linears that read x, y_i = W_i x + b_i (+ its rows of
    B_g ((A_g x) ⊙ s_row)): the stacked LoRA of nanomarl/fast.py for a group of linears in three
    products, not three per linear. group: (bases, A_g, B_g, s_row), bases ((W_i, b_i), ...);
    A_g every member's A_cat stacked along the rank, B_g block-diagonal (each member's B_cat on
    its own output rows and ranks, zeros elsewhere: they add exact zeros)."""
    bases, a_g, b_g, scale = group
    ys = [F.linear(x, weight, bias) for weight, bias in bases]
    if a_g is None:
        return ys
    delta = F.linear(F.linear(x.to(a_g.dtype), a_g) * scale, b_g)
    parts = delta.split([y.shape[-1] for y in ys], dim=-1)
    return [y + d.to(y.dtype) for y, d in zip(ys, parts)]


def head_logits(x, weight):
    """Logits [rows, V] in fp32 of the final hidden states x [rows, H] (common.fp32_head's values):
    an fp32 weight (FastDecoder keeps an fp32 copy where the next line is unavailable) in fp32; a
    bf16/fp16 weight in one product with fp32 accumulation and output (torch.mm's out_dtype, CUDA),
    reading 2 bytes per weight, not 4: bf16 x bf16 products are exact in fp32, so only the order
    of the sums differs from the fp32 head's."""
    if weight.dtype == torch.float32:
        return F.linear(x.float(), weight)
    return torch.mm(x.to(weight.dtype), weight.t(), out_dtype=torch.float32)


def mixed_head_works(weight) -> bool:
    """Does head_logits' mixed product run here and agree with the fp32 head? (The head's first
    rows against themselves: no random draw, so seeded runs keep their numbers.)"""
    if weight.dtype == torch.float32:
        return True
    try:
        x, rows = weight[:4], weight[:64]
        expected = F.linear(x.float(), rows.float())
        return bool((head_logits(x, rows) - expected).abs().max() <= 1e-4 * expected.abs().max())
    except Exception:  # no mm.dtype for this device or dtype: the fp32 copy
        return False


def rotate(x, cos, sin):
    """Rotary position embedding (transformers' apply_rotary_pos_emb on [B, H, T, D])."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def layer_forward(x, cos, sin, mask, cols, k_cache, v_cache, weights, dims):
    """One decoder layer over T new tokens at cache columns cols [T]: its keys and values are
    written into the cache, its queries attend over every column that mask allows (additive,
    [B, 1, G x T, C], attention_mask's). weights: (input norm, qkv, o, post norm, gate-up, down,
    q norm, k norm), the linears as lora_linears groups; dims: (heads, kv heads, head dim, eps).
    Grouped-query attention without repeating the cache: the G query heads of one kv head attend
    as G x T queries."""
    ln1, qkv, o_lin, ln2, gate_up, down, q_norm, k_norm = weights
    heads, kv_heads, head_dim, eps = dims
    b, t, _ = x.shape
    group = heads // kv_heads
    h = rms_norm(x, ln1, eps)
    q, k, v = lora_linears(h, qkv)[0].split(
        [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    q = q.reshape(b, t, heads, head_dim)
    k = k.reshape(b, t, kv_heads, head_dim)
    v = v.reshape(b, t, kv_heads, head_dim).transpose(1, 2)
    if q_norm is not None:  # Qwen3: an RMSNorm on each head's queries and keys
        q, k = rms_norm(q, q_norm, eps), rms_norm(k, k_norm, eps)
    q, k = rotate(q.transpose(1, 2), cos, sin), rotate(k.transpose(1, 2), cos, sin)
    k_cache.index_copy_(2, cols, k.to(k_cache.dtype))
    v_cache.index_copy_(2, cols, v.to(v_cache.dtype))
    q = q.reshape(b, kv_heads, group * t, head_dim)  # query head kv·G + g: repeat_kv's order
    attn = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask,
                                          scale=head_dim ** -0.5)
    attn = attn.view(b, heads, t, head_dim).transpose(1, 2).reshape(b, t, heads * head_dim)
    x = x + lora_linears(attn, o_lin)[0]
    h = rms_norm(x, ln2, eps)
    gate, up = lora_linears(h, gate_up)
    return x + lora_linears(F.silu(gate) * up, down)[0]
