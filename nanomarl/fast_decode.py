"""fast_decode.py: generation on a GPU with a static KV cache and a captured decoding step.

common.generate with fast=True (the scripts' --fast) samples a CUDA model's rollouts and
evaluations here (fast_decoder()); the plain path is common.generate's own loop through
transformers, and tests/test_fast_decode.py checks that both give the same tokens and log-probs.
The decoding loop is short, in the spirit of nanochat's engine:

  1. prefill   one forward over the left-padded prompts writes every layer's keys and values into
               a preallocated cache [rows, kv heads, columns, head dim] (static: no growth, no
               copies) and gives the first token's logits;
  2. decode    one token per row per step, at cache column prompt length + step. The step reads
               its inputs (token, position, column) from fixed buffers, so on CUDA it is captured
               once in a CUDA graph and replayed: one launch per step instead of thousands. Each
               layer's step is compiled by torch.compile (inductor, its pointwise work fused);
               all layers share one compiled function, so a new shape costs one layer's compile;
  3. sampling  outside the graph, on the real rows only, with transformers' processors in their
               order (min_new_tokens, temperature, top-k, top-p), so a seeded run draws the same
               tokens as the plain path.

Each row runs on its own LoRA adapter ('__base__': none) the way nanomarl/fast.py's stacked
routing does it: y = W x + B_cat ((A_cat x) ⊙ s_row), with A_cat, B_cat every adapter's weights
stacked along the rank (copied into fixed buffers before each call, so the graph sees the weights
of the latest update) and s_row each row's scaling on its adapter's block. The step is bound by
its number of kernels more than by its bytes, so the linears that read one input share their
LoRA products (lora_linears: q, k and v, whose base weights are also copied into one matrix;
gate and up), and the head reads its bf16 weights into fp32 logits (head_logits).

Shapes are bucketed: rows to a power of two (at least 8), cache columns to a multiple of 256, so a
run captures and compiles a handful of times. Applies to Llama, Qwen2 and Qwen3 architectures with
full attention, unquantised, with plain LoRA adapters (stackable_lora); anything else, and every
CPU model, keeps the plain path. On CPU the same code runs eagerly (the tests).
A learner may skip this module."""
from __future__ import annotations

import weakref

import torch
import torch.nn as nn
import torch.nn.functional as F

from nanomarl.fast import stackable_lora
from nanomarl.fast_layers import head_logits, layer_forward, mixed_head_works, rms_norm

ARCHITECTURES = ("llama", "qwen2", "qwen3")
ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # positions alone set the angles
ROW_BUCKET_MIN, COLUMN_BUCKET = 8, 256
# the linears of a decoder layer by input, in layer_forward's order; True: one base matrix
GROUPS = ((("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), True),
          (("self_attn.o_proj",), False), (("mlp.gate_proj", "mlp.up_proj"), False),
          (("mlp.down_proj",), False))
_DECODERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def fast_decoder(model, adapter_names: list[str] | None):
    """The model's FastDecoder when it serves these rows (common.generate with fast=True, on
    CUDA): a supported architecture and adapters (supports); else None."""
    if not supports(model, adapter_names):
        return None
    if model not in _DECODERS:
        _DECODERS[model] = FastDecoder(model)
    return _DECODERS[model]


def supports(model, adapter_names: list[str] | None) -> bool:
    """Llama/Qwen2/Qwen3 with full attention, SiLU MLPs, a bias-free linear head, unquantised;
    rows on named adapters that stacked routing serves (a peft model: every row named; no peft:
    none or '__base__')."""
    from peft import PeftModel

    peft = isinstance(model, PeftModel)
    base = model.get_base_model() if peft else model
    config = base.config
    head = base.get_output_embeddings()
    if (config.model_type not in ARCHITECTURES or getattr(config, "quantization_config", None)
            or getattr(config, "use_sliding_window", False) or config.hidden_act != "silu"
            or any(t != "full_attention" for t in getattr(config, "layer_types", None) or [])
            or type(head) is not nn.Linear or head.bias is not None
            or not hasattr(getattr(base, "model", None), "layers") or model.training
            or getattr(base.model.rotary_emb, "rope_type", "default") not in ROPE_TYPES):
        return False
    if peft:
        return adapter_names is not None and stackable_lora(model, list(adapter_names))
    return adapter_names is None or set(adapter_names) == {"__base__"}


def bucket(n: int, minimum: int) -> int:
    """The next power of two >= n (at least minimum): the rows of a captured step."""
    size = minimum
    while size < n:
        size *= 2
    return size


class FastDecoder:
    """One model's fast generation: the stacked LoRA buffers, and per (rows, columns) bucket a
    static cache with its captured step (Slot). sample() gives common.generate its samples."""

    def __init__(self, model, compile: bool | None = None, graphs: bool | None = None):
        from peft import PeftModel

        self.model = model
        self.peft = isinstance(model, PeftModel)
        self.base = model.get_base_model() if self.peft else model
        self.config = self.base.config
        on_cuda = next(model.parameters()).device.type == "cuda"
        self.compile = on_cuda if compile is None else compile
        self.graphs = on_cuda if graphs is None else graphs
        self.layer_step = None
        if self.compile:  # one dynamic-shape compile serves every layer and bucket
            config = torch._dynamo.config
            for limit in ("recompile_limit", "cache_size_limit"):
                if hasattr(config, limit):
                    setattr(config, limit, max(getattr(config, limit), 64))
            self.layer_step = torch.compile(layer_forward, fullgraph=True, dynamic=True)
        head = self.base.get_output_embeddings().weight
        # head_logits' operand: the weight itself where its mixed product runs, else an fp32 copy
        self.head = head if mixed_head_works(head) else head.float()
        self.slots: dict = {}
        self.adapters = None  # the adapter set the LoRA buffers were built for

    # -- the fixed buffers: per layer and group of linears (GROUPS), every member's adapters'
    # A and B stacked (lora_linears), and q, k, v's base weights in one matrix --
    def _lora_plan(self):
        from peft.tuners.lora import LoraLayer

        names = tuple(self.model.peft_config) if self.peft else ()
        if names == self.adapters:
            return
        self.adapters, self.signatures, self.versions = names, {}, None
        self.groups = []  # per layer: [(members, base copy or None, A_g, B_g, signature)]
        for layer in self.base.model.layers:
            groups = []
            for paths, join in GROUPS:
                modules = [layer.get_submodule(path) for path in paths]
                members, rank, out = [], 0, 0  # (module, base, adapters, first rank, first row)
                for module in modules:
                    base = module.base_layer if hasattr(module, "base_layer") else module
                    used = ([n for n in names if n in module.lora_A]
                            if isinstance(module, LoraLayer) else [])
                    members.append((module, base, used, rank, out))
                    rank += sum(module.r[n] for n in used)
                    out += base.out_features
                joined = None
                if join:  # one base matrix (and bias) for the group: a copy, refreshed below
                    bases = [m[1] for m in members]
                    joined = (torch.cat([b.weight.detach() for b in bases]),
                              None if all(b.bias is None for b in bases) else
                              torch.cat([torch.zeros(b.out_features, dtype=b.weight.dtype,
                                                     device=b.weight.device)
                                         if b.bias is None else b.bias.detach() for b in bases]))
                a_g = b_g = signature = None
                if rank:
                    signature = tuple((n, m.r[n], float(m.scaling[n]))
                                      for m, _, used, _, _ in members for n in used)
                    weights = [m.lora_A[n].weight for m, _, used, _, _ in members for n in used]
                    dtype, device = weights[0].dtype, weights[0].device
                    a_g = torch.zeros((rank, members[0][1].in_features), dtype=dtype,
                                      device=device)
                    b_g = torch.zeros((out, rank), dtype=dtype, device=device)
                    self.signatures[signature] = dtype
                groups.append((members, joined, a_g, b_g, signature))
            self.groups.append(groups)
        self.slots = {}  # captured steps read the old buffers: capture again

    def _refresh_lora(self):
        """Copy the adapters' current weights (and the joined base weights) into the buffers,
        skipped when no weight changed."""
        versions = tuple((id(w), w._version) for w in self._sources())  # which tensor, which write
        if versions == self.versions:
            return
        for groups in self.groups:
            for members, joined, a_g, b_g, _ in groups:
                for module, base, used, rank, out in members:
                    rows = slice(out, out + base.out_features)
                    if joined is not None:
                        joined[0][rows].copy_(base.weight)
                        if joined[1] is not None and base.bias is not None:
                            joined[1][rows].copy_(base.bias)
                    for n in used:
                        r = module.r[n]
                        a_g[rank:rank + r].copy_(module.lora_A[n].weight)
                        b_g[rows, rank:rank + r].copy_(module.lora_B[n].weight)
                        rank += r
        self.versions = versions

    def _sources(self):
        """The weights the buffers copy: every used A and B, and the joined groups' bases."""
        for groups in self.groups:
            for members, joined, _, _, _ in groups:
                for module, base, used, _, _ in members:
                    if joined is not None:
                        yield from (w for w in (base.weight, base.bias) if w is not None)
                    for n in used:
                        yield from (module.lora_A[n].weight, module.lora_B[n].weight)

    def _row_scales(self, slot, adapter_names: list[str]):
        """Each row's LoRA scaling on its adapter's block (0 elsewhere, and for '__base__' and the
        bucket's padding rows), one buffer per distinct layer signature."""
        for signature, buffer in slot.scales.items():
            values = []
            for name in list(adapter_names) + ["__base__"] * (slot.rows - len(adapter_names)):
                values.append(torch.cat([torch.full((r,), s if n == name else 0.0)
                                         for n, r, s in signature]))
            buffer.copy_(torch.stack(values)[:, None, :])

    def _weights(self, slot):
        """Per layer, layer_forward's weights (lora_linears groups, this slot's scale buffers)."""
        def group(members, joined, a_g, b_g, signature):
            bases = ((joined,) if joined is not None
                     else tuple((base.weight, base.bias) for _, base, _, _, _ in members))
            return (bases, a_g, b_g, None if signature is None else slot.scales[signature])

        out = []
        for layer, (qkv, o, gate_up, down) in zip(self.base.model.layers, self.groups):
            attn = layer.self_attn
            q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
            out.append((layer.input_layernorm.weight, group(*qkv), group(*o),
                        layer.post_attention_layernorm.weight, group(*gate_up), group(*down),
                        None if q_norm is None else q_norm.weight,
                        None if k_norm is None else k_norm.weight))
        return out

    def _slot(self, rows: int, columns: int):
        key = (rows, columns)
        if key not in self.slots:
            if len(self.slots) >= 8:  # bound the memory: drop the oldest shape
                self.slots.pop(next(iter(self.slots)))
            self.slots[key] = Slot(self, rows, columns)
        return self.slots[key]

    # -- the forward (prefill: eager; decode: the captured step) --
    def forward(self, slot, ids, pos, cols, step: bool):
        """Logits [rows, V] (fp32, as common.fp32_head: head_logits) of the last of the T tokens
        ids [rows, T] at positions pos [rows, T] written at cache columns cols [T]."""
        config, model = self.config, self.base.model
        x = model.embed_tokens(ids)
        cos, sin = model.rotary_emb(x, pos)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        column = torch.arange(slot.columns, device=ids.device)
        allowed = (column[None, :] <= cols[:, None])[None]  # causal, by cache column
        mask = (allowed & (slot.key_valid[:, None, :] | (column[None, :] == cols[:, None])[None]))
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        dims = (heads, config.num_key_value_heads, head_dim, config.rms_norm_eps)
        # [B, 1, G x T, C], once for every layer; a padding query sees itself (no empty softmax)
        mask = torch.zeros(mask.shape, dtype=x.dtype, device=x.device).masked_fill(
            ~mask, float("-inf"))[:, None].repeat(1, 1, heads // dims[1], 1)
        run = self.layer_step if step and self.layer_step is not None else layer_forward
        for i, weights in enumerate(slot.weights):
            x = run(x, cos, sin, mask, cols, slot.k[i], slot.v[i], weights, dims)
        x = rms_norm(x[:, -1], model.norm.weight, model.norm.variance_epsilon)
        return head_logits(x, self.head)

    @torch.no_grad()
    def sample(self, query_ids, query_mask, names, stops: list[int], pad_id: int,
               max_new_tokens: int, temperature: float, top_p: float, top_k: int,
               min_new_tokens: int, greedy: bool, log_policy) -> dict:
        """common.generate's samples for the left-padded prompts: response_ids [B, Lr], and before
        any masking π's logprobs and entropy (log_policy(logits, temperature): common.py's one
        definition) and sampling_logprobs of q (after top-k, top-p; greedy: 0)."""
        device = query_ids.device
        n, q_len = query_ids.shape
        self._lora_plan()
        self._refresh_lora()
        slot = self._slot(bucket(n, ROW_BUCKET_MIN),
                          -(-(q_len + max_new_tokens) // COLUMN_BUCKET) * COLUMN_BUCKET)
        self._row_scales(slot, names or ["__base__"] * n)
        # 1. prefill: the prompts (bucket rows: one padding token each, masked) into the cache
        ids = torch.full((slot.rows, q_len), pad_id, device=device)
        mask = torch.zeros((slot.rows, q_len), dtype=torch.long, device=device)
        ids[:n], mask[:n] = query_ids, query_mask
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        slot.key_valid.zero_()
        slot.key_valid[:, :q_len] = mask.bool()
        logits = self.forward(slot, ids, pos, torch.arange(q_len, device=device), step=False)[:n]
        slot.pos.copy_(pos[:, -1:] + 1)
        slot.col.fill_(q_len)
        # 2. decode, 3. sample
        stop_ids = torch.tensor(stops, device=device)
        tokens = torch.full((n, max_new_tokens), pad_id, device=device)
        logprobs, sampled, entropy = (torch.zeros((n, max_new_tokens), device=device)
                                      for _ in range(3))
        unfinished = torch.ones(n, dtype=torch.bool, device=device)
        steps = max_new_tokens
        for t in range(max_new_tokens):
            if t > 0:
                logits = slot.step()[:n]
            all_logprobs = log_policy(logits, temperature)
            scores = process_scores(logits / temperature, t, min_new_tokens, stop_ids, greedy,
                                    top_k, top_p)
            token = (scores.argmax(-1) if greedy
                     else torch.multinomial(F.softmax(scores, dim=-1), num_samples=1).squeeze(1))
            token = torch.where(unfinished, token, pad_id)
            tokens[:, t] = token
            logprobs[:, t] = all_logprobs.gather(1, token[:, None]).squeeze(1)
            entropy[:, t] = -(all_logprobs.exp() * all_logprobs).sum(-1)
            if not greedy:
                sampled[:, t] = (scores.gather(1, token[:, None]).squeeze(1)
                                 - scores.logsumexp(-1))
            unfinished &= ~torch.isin(token, stop_ids)
            if t + 1 < max_new_tokens:
                slot.ids[:n, 0] = token
            if (t + 1) % 8 == 0 and not bool(unfinished.any()):
                steps = t + 1
                break
        # the plain path stops at the first step where every row has finished: the same width
        done = torch.isin(tokens[:, :steps], stop_ids)
        if bool(done.any(1).all()):
            steps = int(done.float().argmax(1).max()) + 1
        return dict(response_ids=tokens[:, :steps], logprobs=logprobs[:, :steps],
                    sampling_logprobs=sampled[:, :steps], entropy=entropy[:, :steps])


def process_scores(scores, step: int, min_new_tokens: int, stop_ids, greedy: bool, top_k: int,
                   top_p: float):
    """transformers' logits processors in generate's order, on the logits / temperature: EOS
    banned before min_new_tokens, then (sampling) top-k and top-p, -inf where they cut."""
    if step < min_new_tokens:
        scores = scores.index_fill(1, stop_ids, float("-inf"))
    if greedy:
        return scores
    if top_k:
        kth = torch.topk(scores, min(top_k, scores.shape[-1]))[0][..., -1, None]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False)
        cut = sorted_scores.softmax(dim=-1).cumsum(dim=-1) <= (1 - top_p)
        cut[..., -1:] = False
        scores = scores.masked_fill(cut.scatter(1, order, cut), float("-inf"))
    return scores


class Slot:
    """One (rows, columns) bucket: the static cache, the step's input buffers (token, position,
    column) and, on CUDA, the step captured in a CUDA graph."""

    def __init__(self, decoder: FastDecoder, rows: int, columns: int):
        config, base = decoder.config, decoder.base
        p = next(base.parameters())
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        shape = (rows, config.num_key_value_heads, columns, head_dim)
        self.decoder, self.rows, self.columns = decoder, rows, columns
        self.k = [torch.zeros(shape, dtype=p.dtype, device=p.device) for _ in base.model.layers]
        self.v = [torch.zeros(shape, dtype=p.dtype, device=p.device) for _ in base.model.layers]
        self.key_valid = torch.zeros((rows, columns), dtype=torch.bool, device=p.device)
        self.ids = torch.zeros((rows, 1), dtype=torch.long, device=p.device)
        self.pos = torch.zeros((rows, 1), dtype=torch.long, device=p.device)
        self.col = torch.zeros(1, dtype=torch.long, device=p.device)
        self.scales = {s: torch.zeros((rows, 1, sum(r for _, r, _ in s)), dtype=dtype,
                                      device=p.device) for s, dtype in decoder.signatures.items()}
        self.weights = decoder._weights(self)
        self.logits = torch.zeros((rows, decoder.head.shape[0]), device=p.device)
        self.graph = None
        if decoder.graphs:
            try:
                self._capture()
            except Exception as e:  # loud, but the run goes on uncaptured
                print(f"fast_decode: CUDA GRAPH CAPTURE FAILED ({type(e).__name__}: {e}); "
                      f"decoding steps run uncaptured")
                self.graph, decoder.graphs = None, False

    def _step_eager(self):
        self.key_valid.index_fill_(1, self.col, True)
        self.logits.copy_(self.decoder.forward(self, self.ids, self.pos, self.col, step=True))
        self.pos += 1
        self.col += 1

    def step(self) -> torch.Tensor:
        """Feed self.ids at self.col: the next logits [rows, V]; advances position and column."""
        if self.graph is None:
            self._step_eager()
        else:
            self.graph.replay()
        return self.logits

    def _capture(self):
        """Warm up (compiles) on a side stream, then capture one step; the buffers are reset by the
        prefill of each call."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            try:
                for _ in range(2):
                    self._step_eager()
            except Exception as e:  # a compiler failure costs speed, never the run
                if self.decoder.layer_step is None:
                    raise
                print(f"fast_decode: torch.compile failed ({type(e).__name__}: {e}); "
                      f"the captured step runs uncompiled")
                self.decoder.layer_step = None
                for _ in range(2):
                    self._step_eager()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self._step_eager()


def size_micro_batches(args, field: str, rows_per_unit: int, tokens_per_row: int):
    """Before the model loads (the trainers' main): on CUDA the micro-batch flag `field`, unless
    typed, as many units (rows_per_unit rows of about tokens_per_row tokens each) as fit in half
    the GPU's free memory (micro_batch_units). On CPU the flag keeps its default."""
    from nanomarl.cli import given_fields

    device = getattr(args, "device", "") or ("cuda" if torch.cuda.is_available() else "cpu")
    if not device.startswith("cuda") or field in given_fields(args):
        return
    try:
        from transformers import AutoConfig

        from nanomarl.models import resolve_model
        config = AutoConfig.from_pretrained(resolve_model(args.model))
    except Exception as e:  # no config to size by: the default stays
        print(f"micro-batches: --{field.replace('_', '-')} stays {getattr(args, field)} ({e})")
        return
    free = torch.cuda.mem_get_info(torch.device(device))[0]
    units = micro_batch_units(config, args.dtype, free, rows_per_unit, tokens_per_row)
    setattr(args, field, units)
    print(f"micro-batches: --{field.replace('_', '-')} {units} ({free / 2**30:.0f} GiB free "
          f"on {device}; typing the flag overrides it)")


def micro_batch_units(config, dtype: str, free_bytes: int, rows_per_unit: int,
                      tokens_per_row: int) -> int:
    """How many units of rows_per_unit rows fit one forward and backward in half of free_bytes.
    Per token: the fp32 logits and their copies (log-softmax, its gradient: 16 bytes x vocabulary)
    and each layer's saved activations (about 17 x hidden values, Korthikanti et al. 2022 without
    the attention matrix, which SDPA does not keep). A documented estimate, on the safe side."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    size = 4 if dtype == "float32" else 2
    per_token = 16 * text.vocab_size + text.num_hidden_layers * 17 * text.hidden_size * size
    rows = int(0.5 * free_bytes) // (per_token * max(tokens_per_row, 1))
    return max(1, rows // max(rows_per_unit, 1))
