"""common.py: what the algorithms share and a reader needs: one base model with many LoRA agents.

  1. models      load_model, add_adapters (named LoRA adapters on one frozen base),
                 adapter_parameters, ValueHead, the peft guard (single_adapter)
  2. generation  generate(): one batched sampling call, each row on its own adapter
  3. log-probs   log_policy(): π_θ at the sampling temperature, its one definition;
                 forward_responses(): per-token log-probs of given responses (and
                 forward_conversation: every turn of a conversation in one forward, --fast)
  4. maths       masked_mean / masked_whiten
  5. answers     extract_answer and has_degenerate_repetition (a well-formed answer), the debate
                 metrics (the majority vote with the authors' tie rule: nanomarl/vote.py)

Conventions used everywhere:
  * Prompts are left-padded; responses are right-padded. `query_mask`/`response_mask` are 1 on real
    tokens. `response_mask` covers the response up to and including the first EOS. The response is
    found by the prompt's length, never by searching for pad tokens (pad == EOS in SmolLM2).
  * The model always stays in eval() mode: dropout is off (PPO's ratio must be exactly 1 on the
    first minibatch) and peft only accepts per-row `adapter_names` in eval mode. Gradients flow.
  * fast=True (the scripts' --fast, their default) takes the fast paths of nanomarl/fast.py and
    nanomarl/fast_decode.py where they apply: the same outputs; fast=False runs only this file.
The machinery (flags, runs, checkpoints, model aliases, fast paths) lives in nanomarl/, which never
imports this file.
"""
from __future__ import annotations

import contextlib
import functools
import re

import torch
import torch.nn as nn
import torch.nn.functional as F
from nanomarl.cli import arg_error
from nanomarl.distributed import allreduce_sum
from nanomarl.fast import shared_prefill, stackable_lora, stacked_lora_routing
from nanomarl.fast_decode import fast_decoder
from nanomarl.models import (hide_bitsandbytes_unless_quantised, prepare_quantized,
                             quantization_kwargs, resolve_model)
from nanomarl.tasks.debate import normalize_label, normalize_number
from nanomarl.vote import majority_vote_accuracy

# 1. Models, adapters, value heads -----------------------------------------------------------------


def load_model(name: str, dtype: str = "float32", quant: str = "none", device: str = "cpu"):
    """A frozen causal LM in eval mode. quant: none | 4bit (QLoRA nf4) | 8bit, through bitsandbytes
    (its settings and workarounds: nanomarl/models.py)."""
    hide_bitsandbytes_unless_quantised(quant)  # imports peft; bitsandbytes only with --quant
    from transformers import AutoModelForCausalLM

    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    torch_dtype = dtypes.get(dtype)
    if torch_dtype is None:
        arg_error("--dtype", f"expected float32, bfloat16 or float16, got {dtype!r}")
    model = AutoModelForCausalLM.from_pretrained(resolve_model(name), dtype=torch_dtype,
                                                 **quantization_kwargs(quant, torch_dtype, device))
    model = model.to(device) if quant == "none" else prepare_quantized(model)
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    return model


def add_adapters(model, names: list[str], r: int = 8, alpha: int = 16, dropout: float = 0.0,
                 target_modules: str | list[str] = "all-linear"):
    """Named LoRA adapters on one frozen base (peft). Every adapter's weights are trainable; each
    agent's optimiser is built from its own parameters only (adapter_parameters), never from
    model.parameters(). dropout defaults to 0: PPO's ratio must be exactly 1 on the first
    minibatch."""
    from peft import LoraConfig, PeftModel, get_peft_model

    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules,
                        bias="none", task_type="CAUSAL_LM")
    for i, name in enumerate(names):
        if i == 0 and not isinstance(model, PeftModel):
            model = get_peft_model(model, config, adapter_name=name)
        else:
            model.add_adapter(name, config)
    make_lora_trainable(model)
    model.eval()
    return model


def make_lora_trainable(model):
    """requires_grad = True on every LoRA weight, False elsewhere. Call it after any peft
    set_adapter(): set_adapter silently freezes the adapters it does not activate (peft issues
    #1303, #2436)."""
    for n, p in model.named_parameters():
        p.requires_grad_(".lora_" in n)


def adapter_parameters(model, name: str) -> list[nn.Parameter]:
    """The LoRA parameters of one named adapter (matched by `.lora_A.<name>.` /
    `.lora_B.<name>.`)."""
    params = [p for n, p in model.named_parameters()
              if f".lora_A.{name}." in n or f".lora_B.{name}." in n]
    if not params:
        raise ValueError(f"no LoRA parameters for adapter {name!r}")
    return params


class ValueHead(nn.Module):
    """V(s) = w·h + b on the last hidden state; zero-initialised, so every value starts at 0
    (OpenAI/[N] choice)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # [B, L, H] -> [B, L]
        return self.linear(hidden.float()).squeeze(-1)


def hidden_size(model) -> int:
    return getattr(model.config, "hidden_size", None) or model.config.get_text_config().hidden_size


def chat_prompt(tokenizer, messages: list[dict]) -> str:
    """Render a chat (list of {role, content}) into the text the assistant continues from."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


# 2. Generation: one batched call, each row on its own adapter -------------------------------------


def stop_token_ids(tokenizer, model=None) -> list[int]:
    ids = {tokenizer.eos_token_id}
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
    return sorted(i for i in ids if i is not None)


def response_mask_from_ids(response_ids: torch.Tensor, stop_ids: list[int]):
    """(mask [B, L] float: 1 up to and including the first stop token, truncated [B] bool)."""
    is_stop = torch.isin(response_ids, torch.tensor(stop_ids, device=response_ids.device))
    stops_before = torch.cumsum(is_stop.long(), dim=1) - is_stop.long()  # strictly before
    return (stops_before == 0).float(), ~is_stop.any(dim=1)


def tokenize_prompts(tokenizer, prompts: list, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids and mask of texts, or of token ids taken as they are (continue_chat's)."""
    rows = [torch.tensor([tokenizer(p, add_special_tokens=False)["input_ids"] if isinstance(p, str)
                          else list(p)], dtype=torch.long) for p in prompts]
    return (pad_cat(rows, tokenizer.pad_token_id, left=True).to(device),
            pad_cat([torch.ones_like(r) for r in rows], 0, left=True).to(device))


# every logits processor a model's generation_config may carry (repetition_penalty, min_p, ...)
# would make the rollout off-policy without the returned log-probs showing it: all off
NO_PROCESSORS = dict(repetition_penalty=1.0, no_repeat_ngram_size=0, suppress_tokens=None,
                     begin_suppress_tokens=None, bad_words_ids=None, min_p=None, typical_p=1.0,
                     epsilon_cutoff=0.0, eta_cutoff=0.0)


@torch.no_grad()
def generate(model, tokenizer, prompts: list, adapter_names: list[str] | None, max_new_tokens: int,
             temperature: float = 0.7, top_p: float = 1.0, top_k: int = 0, min_new_tokens: int = 0,
             greedy: bool = False, batch_size: int | None = None, fast: bool = False,
             logprobs: bool = True) -> dict:
    """Sample one response per prompt (a text, or token ids used as they are); row i on adapter
    adapter_names[i] ('__base__': none), batch_size rows per call (None: all). Returns query_ids,
    query_mask [B, Lq] (left-padded), response_ids/mask [B, Lr], truncated [B] (no EOS) and, 0
    where masked, [B, Lr]: logprobs and entropy of π (log_policy), sampling_logprobs of q, what
    each token was drawn from (top-k/top-p; greedy: 0). logprobs=False: same samples, those 0."""
    engine = getattr(model, "sampling_engine", None) if fast else None  # vllm_rollout.start's
    if batch_size and batch_size < len(prompts) and not engine:  # a memory bound (vLLM: its own)
        rows = functools.partial(generate, model, tokenizer, max_new_tokens=max_new_tokens,
                                 temperature=temperature, top_p=top_p, top_k=top_k, fast=fast,
                                 min_new_tokens=min_new_tokens, greedy=greedy, logprobs=logprobs)
        return in_chunks(batch_size, tokenizer.pad_token_id, prompts, adapter_names, rows)
    stops = stop_token_ids(tokenizer, model)
    query_ids, query_mask = tokenize_prompts(tokenizer, prompts, next(model.parameters()).device)
    names = None if adapter_names is None else list(adapter_names)
    temperature = 1.0 if greedy else temperature  # greedy: π's log-probs at T = 1
    if fast and not engine and query_ids.is_cuda:  # the static-cache decoder, where it applies
        engine = fast_decoder(model, names)  # nanomarl/fast_decode.py
    sample_args = (query_ids, query_mask, names, stops, tokenizer.pad_token_id, max_new_tokens,
                   temperature, top_p, top_k, min_new_tokens, greedy)  # both samplers take these
    out = (engine.sample(*sample_args, log_policy) if engine  # the fast path's samples
           else sample_with_transformers(model, *sample_args, fast, logprobs))
    response_ids = out["response_ids"]
    response_mask, truncated = response_mask_from_ids(response_ids, stops)
    if out["logprobs"] is None:  # vLLM: π from the training forward, batch_size rows at a time
        rows = dict(query_ids=query_ids, query_mask=query_mask, response_ids=response_ids,
                    response_mask=response_mask, adapter_names=names)
        out.update(batched(forward_responses, rows, batch_size or len(prompts), model=model,
                           temperature=temperature, output_entropy=True))
    return dict(query_ids=query_ids, query_mask=query_mask,
                response_ids=response_ids.masked_fill(response_mask == 0, tokenizer.pad_token_id),
                response_mask=response_mask, logprobs=out["logprobs"] * response_mask,
                sampling_logprobs=out["sampling_logprobs"].where(response_mask.bool(), 0.0),
                entropy=out["entropy"] * response_mask, truncated=truncated)


def in_chunks(batch_size: int, pad_id: int, prompts: list, adapter_names, generate_rows) -> dict:
    """generate_rows(prompts, adapter_names) on batch_size rows at a time, the outputs joined as one
    call's: queries left-padded, responses right-padded."""
    parts = [generate_rows(prompts[i:i + batch_size],
                           adapter_names and adapter_names[i:i + batch_size])
             for i in range(0, len(prompts), batch_size)]
    pads = dict(query_ids=pad_id, response_ids=pad_id)
    return {k: torch.cat([p[k] for p in parts]) if k == "truncated" else
            pad_cat([p[k] for p in parts], pads.get(k, 0), left=k.startswith("query"))
            for k in parts[0]}


def sample_with_transformers(model, query_ids, query_mask, names, stops, pad_id: int,
                             max_new_tokens, temperature, top_p, top_k, min_new_tokens, greedy,
                             fast, logprobs: bool = True) -> dict:
    """transformers' generate on the left-padded prompts: response_ids [B, Lr], π's logprobs and
    entropy (log_policy), sampling_logprobs of q (greedy: 0), unmasked (logprobs=False: zeros)."""
    one_adapter = names is not None and len(set(names)) == 1  # peft's ordinary path
    mixed = names is not None and not one_adapter
    stacked = fast and mixed and stackable_lora(model, names)  # else peft's routing: the same
    def route(rows):  # a forward of these rows, each on its adapter
        return (stacked_lora_routing(model, rows) if stacked else
                single_adapter(model, rows[0]) if one_adapter else contextlib.nullcontext())
    routing = (shared_prefill(model, query_ids, query_mask, names, route)  # once per prompt
               if fast and (one_adapter or stacked) else route(names))
    sampling = (dict(do_sample=False) if greedy
                else dict(do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k))
    with routing, fp32_head(model):
        out = model.generate(input_ids=query_ids, attention_mask=query_mask,
                             max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                             eos_token_id=stops, pad_token_id=pad_id,
                             return_dict_in_generate=True, output_logits=logprobs,
                             output_scores=logprobs and not greedy, **sampling, **NO_PROCESSORS,
                             **({"adapter_names": names} if mixed and not stacked else {}))
    response_ids = out.sequences[:, query_ids.shape[1]:]  # from the prompt's length on
    if not logprobs:  # the same draws: recording the logits and scores takes no random numbers
        zero = torch.zeros(response_ids.shape, device=response_ids.device)
        return dict(response_ids=response_ids, logprobs=zero, entropy=zero, sampling_logprobs=zero)
    pi = policy_outputs(torch.stack(out.logits, dim=1), temperature, response_ids,
                        output_entropy=True)
    sampled = torch.zeros_like(pi["logprobs"])  # greedy: the argmax, log 1 = 0
    if not greedy:  # q: the scores after temperature, top-k and top-p, -inf where they cut
        scores = torch.stack(out.scores, dim=1)
        sampled = scores.gather(2, response_ids.unsqueeze(-1)).squeeze(-1) - scores.logsumexp(-1)
    return dict(response_ids=response_ids, sampling_logprobs=sampled, **pi)


# 3. π_θ at the temperature: log-probs (and hidden states for value heads) of given responses -----


def log_policy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """log π_θ(· | s) over the vocabulary, [..., V]: the softmax of the logits at the sampling
    temperature, in fp32. THE one definition: every path reads it (vLLM samples at the same T)."""
    return F.log_softmax(logits.float() / temperature, dim=-1)


def policy_outputs(logits, temperature: float, response_ids, hidden=None,
                   output_entropy: bool = False) -> dict:
    """From the logits [B, L, V] that predict response_ids [B, L]: logprobs [B, L] of those tokens
    under π (log_policy), entropy [B, L] of π (output_entropy, else None), hidden as given."""
    all_logprobs = log_policy(logits, temperature)
    logprobs = torch.gather(all_logprobs, 2, response_ids.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if output_entropy:
        with torch.no_grad():  # row by row: one [L, V] temporary at a time
            entropy = torch.stack([-(x.exp() * x).sum(-1) for x in all_logprobs])
    return dict(logprobs=logprobs, entropy=entropy, hidden=hidden)


def forward_responses(model, query_ids, query_mask, response_ids, response_mask,
                      adapter_names: list[str] | None, temperature: float = 1.0,
                      output_hidden: bool = False, output_entropy: bool = False):
    """One padded forward over [query ; response]; row i on adapter adapter_names[i] (None: the
    active setup): logprobs [B, Lr] (0 where masked), entropy [B, Lr] or None, hidden [B, Lr, H]
    (the states V(s) is read from) or None. Only the columns some row uses are computed, and the
    position ids count only real tokens: padding changes nothing."""
    full_width = response_ids.shape[1]
    first, width = first_used_column(query_mask), used_width(response_mask)
    query_ids, query_mask = query_ids[:, first:], query_mask[:, first:]
    response_ids, response_mask = response_ids[:, :width], response_mask[:, :width]
    one = adapter_names is not None and len(set(adapter_names)) == 1  # peft's ordinary forward
    routing = single_adapter(model, adapter_names[0]) if one else contextlib.nullcontext()
    extra = {"adapter_names": list(adapter_names)} if adapter_names is not None and not one else {}
    q_len, r_len = query_ids.shape[1], response_ids.shape[1]
    input_ids = torch.cat([query_ids, response_ids], dim=1)
    attention_mask = torch.cat([query_mask.long(), response_mask.long()], dim=1)
    with routing, fp32_head(model):  # the logits in fp32 on a bf16 base
        out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                    position_ids=(attention_mask.cumsum(1) - 1).clamp(min=0),
                    output_hidden_states=output_hidden, logits_to_keep=r_len + 1, **extra)
    # [B, Lr, V]: the logits at p predict token p+1, so positions [Lq-1, Lq+Lr-1) the response
    hidden = out.hidden_states[-1][:, q_len - 1: q_len + r_len - 1] if output_hidden else None
    result = policy_outputs(out.logits[:, :-1], temperature, response_ids, hidden, output_entropy)
    return padded_outputs(result, response_mask, full_width)


def batched(fn, batch: dict[str, torch.Tensor], size: int, **kwargs) -> dict[str, torch.Tensor]:
    """Apply fn(**rows) to row-chunks of a dict of tensors (or lists, or None) and concatenate the
    outputs (to bound memory)."""
    n = next(iter(batch.values())).shape[0]
    outs = [fn(**{k: None if v is None else v[i:i + size] for k, v in batch.items()}, **kwargs)
            for i in range(0, n, size)]
    if isinstance(outs[0], torch.Tensor):
        return torch.cat(outs)
    return {k: (torch.cat([o[k] for o in outs]) if outs[0][k] is not None else None)
            for k in outs[0]}


def pad_cat(tensors: list[torch.Tensor], value, left: bool) -> torch.Tensor:
    """Rows [1 or n, L_i] padded with `value` to one width (on the left or the right), stacked."""
    width = max(t.shape[1] for t in tensors)
    return torch.cat([F.pad(t, (width - t.shape[1], 0) if left else (0, width - t.shape[1]),
                            value=value) for t in tensors])


def padded_outputs(result: dict, response_mask, full_width: int) -> dict:
    """The outputs padded with 0 to full_width columns; logprobs and entropy 0 on padding."""
    pad = (0, full_width - response_mask.shape[1])
    return {k: None if v is None else F.pad(v, (0, 0, *pad)) if k == "hidden" else
            F.pad(v * response_mask, pad) for k, v in result.items()}


def first_used_column(mask: torch.Tensor) -> int:
    """The first column any row of mask [B, L] uses (0 if none): the left padding all rows have."""
    return int(mask.any(0).float().argmax())


def used_width(mask: torch.Tensor) -> int:
    """1 + the last column any row of mask [B, L] uses (at least 1): cuts the right padding."""
    used = mask.any(0).nonzero()
    return int(used.max()) + 1 if len(used) else 1


def forward_conversation(model, batches: dict, name: str, temperature: float,
                         output_hidden: bool = False, output_entropy: bool = False) -> dict:
    """forward_responses' outputs for the same rows at several turns ({turn: batch}) from one
    forward on adapter `name` over the last turn, whose prompt holds every earlier prompt and
    response token for token (cotrain.py's --fast): a turn's token j is predicted at column (first
    real column) + (its prompt's length) + j - 1, the only columns whose logits are computed."""
    turns = sorted(batches)
    last = batches[turns[-1]]
    first, width = first_used_column(last["query_mask"]), used_width(last["response_mask"])
    query_mask = last["query_mask"][:, first:]
    input_ids = torch.cat([last["query_ids"][:, first:], last["response_ids"][:, :width]], dim=1)
    attention_mask = torch.cat([query_mask, last["response_mask"][:, :width]], dim=1).long()
    q_len, first_real = query_mask.shape[1], query_mask.shape[1] - query_mask.sum(1).long()
    reads = []  # per turn [B, its width]: the columns whose logits predict its response
    for t in turns:
        mask = batches[t]["response_mask"][:, :used_width(batches[t]["response_mask"])]
        read = ((first_real + batches[t]["query_mask"].sum(1).long())[:, None] - 1
                + torch.arange(mask.shape[1], device=mask.device))
        reads.append(read if t == turns[-1]  # the last turn: every column, its padding too
                     else torch.where(mask.bool(), read.clamp(0, q_len - 1), q_len - 1))
    keep = torch.unique(torch.cat([r.reshape(-1) for r in reads]))  # sorted
    with single_adapter(model, name), fp32_head(model):
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    position_ids=(attention_mask.cumsum(1) - 1).clamp(min=0),
                    output_hidden_states=output_hidden, use_cache=False, logits_to_keep=keep)
    rows = torch.arange(len(input_ids), device=input_ids.device)[:, None]
    result = {}
    for t, read in zip(turns, reads):
        ids, mask = (batches[t][k][:, :read.shape[1]] for k in ("response_ids", "response_mask"))
        pi = policy_outputs(out.logits[rows, torch.searchsorted(keep, read.contiguous())],
                            temperature, ids, out.hidden_states[-1][rows, read]
                            if output_hidden else None, output_entropy)
        result[t] = padded_outputs(pi, mask, batches[t]["response_ids"].shape[1])
    return result


@contextlib.contextmanager
def fp32_head(model):
    """The output layer in fp32 on a bf16/fp16 base: logits = h.float() @ W.float()ᵀ, not rounded
    to 8 significant bits (a bf16 logit of 20: ±0.06, 0.2 nats at T 0.3). An fp32 head: as is."""
    head = model.get_output_embeddings()
    if (type(head) is not nn.Linear or head.bias is not None
            or head.weight.dtype == torch.float32 or "forward" in vars(head)):
        yield  # not a bias-free linear head, fp32 already, or inside this block already
        return
    copy = None if head.weight.requires_grad else head.weight.float()  # once per block
    head.forward = lambda h: F.linear(h.float(), head.weight.float() if copy is None else copy)
    try:
        yield
    finally:
        del head.forward


@contextlib.contextmanager
def single_adapter(model, name: str):
    """Run with only adapter `name` active ('__base__': none, the reference policy), through peft's
    ordinary (not mixed-batch) forward. Restores the active adapter and every requires_grad
    afterwards: peft's set_adapter and leaving disable_adapter() freeze the adapters not active."""
    from peft import PeftModel

    if not isinstance(model, PeftModel) and name != "__base__":
        raise ValueError(f"adapter {name!r} asked for, but the model has no LoRA adapters")
    if not isinstance(model, PeftModel) or name == model.active_adapter:  # as it is already
        yield model
        return
    active = model.active_adapter
    trainable = {n: p.requires_grad for n, p in model.named_parameters()}
    try:
        if name != "__base__":
            model.set_adapter(name)
        with model.disable_adapter() if name == "__base__" else contextlib.nullcontext():
            yield model
    finally:
        model.set_adapter(active)
        for n, p in model.named_parameters():  # a frozen adapter (a verifier's) stays frozen
            p.requires_grad_(trainable[n])


# 4. Masked statistics -----------------------------------------------------------------------------


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """Σ mask·x / Σ mask (over `dim`, or everything)."""
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1e-8)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1e-8)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(x - mean) / sqrt(var + 1e-8) over the masked entries (TRL's); masked entries stay 0. Under
    torchrun over EVERY process's entries: N processes x B rows whiten like one with N·B rows."""
    count = allreduce_sum(mask.sum())
    mean = allreduce_sum((x * mask).sum()) / count.clamp(min=1e-8)
    var = allreduce_sum(((x - mean) ** 2 * mask).sum()) / count.clamp(min=1e-8)
    var = var * count / (count - 1).clamp(min=1)  # Bessel's correction, as torch.var
    return (x - mean) * torch.rsqrt(var + 1e-8) * mask


# 5. Answers: extraction, the majority vote and the debate metrics ---------------------------------


def last_boxed(text: str) -> str | None:
    """The content of the last closed \\boxed{...} or \\fbox{...} (braces balanced), else None."""
    for start in reversed([m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]):
        depth, i = 1, start
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start:i - 1]
    return None


def extract_answer(text: str, task: str) -> str | None:
    """The final answer of a response, normalised like the gold, else None: the last \\boxed{...},
    else the clause after the last 'answer is' / 'Answer:' to its sentence's end (a bare number is
    no answer); in it 'math' takes the last number, 'nli' the first label not negated."""
    boxed = last_boxed(text)
    if boxed is None:
        m = list(re.finditer(r"answer\**\s*(?:is|:)\**\s*:?", text, flags=re.IGNORECASE))
        if not m:
            return None
        boxed = re.split(r"[.,;!?](?!\d)|\n", text[m[-1].end():].strip())[0]
    return {"math": normalize_number, "nli": normalize_label}[task](boxed)


def has_degenerate_repetition(token_ids: list[int], max_period: int = 20, max_repeats: int = 3,
                              decode=None) -> bool:
    """True when a block of 1..max_period tokens repeats consecutively more than max_repeats times
    (the authors' rule); with `decode`, blocks of digits only (e.g. "1000000") are allowed."""
    for period in range(1, max_period + 1):
        run = 0  # consecutive positions i with ids[i] == ids[i - period]
        for i in range(period, len(token_ids)):
            run = run + 1 if token_ids[i] == token_ids[i - period] else 0
            if run >= period * max_repeats:  # ids[i-period+1 .. i], max_repeats + 1 times in a row
                if decode is None or not decode(token_ids[i - period + 1: i + 1]).strip().isdigit():
                    return True
    return False


def answer_correctness(answers: list, golds: list[str]) -> list[list[list[bool]]]:
    """answers[q][t][a] (question, turn, agent) -> correct[q][t][a]; an unparsable answer is
    wrong."""
    return [[[a is not None and a == gold for a in turn] for turn in per_q]
            for per_q, gold in zip(answers, golds)]


def per_turn_accuracy(answers: list[list[list[str | None]]], golds: list[str]) -> dict:
    """Per turn: majority-vote accuracy (tie expectation), each agent's accuracy, and the mean over
    agents. Returns {"majority": [T], "agents": [A][T], "mean_agent": [T]} averaged over
    questions."""
    correct = answer_correctness(answers, golds)
    n_q, n_t, n_a = len(answers), len(answers[0]), len(answers[0][0])
    majority = [sum(majority_vote_accuracy(answers[q][t], golds[q]) for q in range(n_q)) / n_q
                for t in range(n_t)]
    agents = [[sum(correct[q][t][a] for q in range(n_q)) / n_q for t in range(n_t)]
              for a in range(n_a)]
    mean_agent = [sum(agents[a][t] for a in range(n_a)) / n_a for t in range(n_t)]
    return dict(majority=majority, agents=agents, mean_agent=mean_agent)


TRANSITIONS = ("W→R", "R→W", "R→R", "W→W")


def transition_counts(correct: list[list[list[bool]]]) -> list[dict]:
    """Answer changes between consecutive turns (MAPoRL Figs. 3-4): for each pair (t, t+1), how many
    (question, agent) pairs went wrong->right, right->wrong, stayed right, stayed wrong.
    correct[q][t][a] -> a list of T-1 dicts {"turns": [t, t+1], "agents": [A] {W→R: n, ...},
    "pooled": {W→R: n, ...}, "total": questions*agents}; fractions are counts / questions (per
    agent) or counts / total (pooled)."""
    n_t, n_a = len(correct[0]), len(correct[0][0])
    out = []
    for t in range(n_t - 1):
        agents = [{k: 0 for k in TRANSITIONS} for _ in range(n_a)]
        for per_q in correct:
            for a in range(n_a):
                before, after = per_q[t][a], per_q[t + 1][a]
                agents[a][("R" if before else "W") + "→" + ("R" if after else "W")] += 1
        pooled = {k: sum(agent[k] for agent in agents) for k in TRANSITIONS}
        out.append(dict(turns=[t, t + 1], agents=agents, pooled=pooled, total=len(correct) * n_a))
    return out


def majority_transitions(answers: list[list[list[str | None]]], golds: list[str]) -> list[dict]:
    """The authors' per-question transitions (`stat_all`): between turns t and t+1, how many
    questions had a higher, lower or equal majority-vote accuracy (tie expectation)."""
    out = []
    for t in range(len(answers[0]) - 1):
        counts = dict(improve=0, decline=0, same=0)
        for per_q, gold in zip(answers, golds):
            before = majority_vote_accuracy(per_q[t], gold)
            after = majority_vote_accuracy(per_q[t + 1], gold)
            counts["improve" if after > before else "decline" if after < before else "same"] += 1
        out.append(dict(turns=[t, t + 1], **counts))
    return out


def debate_metrics(answers: list[list[list[str | None]]], golds: list[str]) -> dict:
    """Every debate number for one method: accuracies per turn, per-agent and pooled transitions
    (counts and fractions), the authors' majority transitions, and the unparsable-answer rate per
    turn."""
    acc = per_turn_accuracy(answers, golds)
    counts = transition_counts(answer_correctness(answers, golds))
    n_q = len(answers)
    for pair in counts:
        pair["agent_fractions"] = [{k: agent[k] / n_q for k in TRANSITIONS}
                                   for agent in pair["agents"]]
        pair["pooled_fractions"] = {k: pair["pooled"][k] / pair["total"] for k in TRANSITIONS}
    invalid = [sum(a is None for per_q in answers for a in per_q[t]) / (n_q * len(answers[0][t]))
               for t in range(len(answers[0]))]
    return dict(accuracy=acc, transitions=counts,
                majority_transitions=majority_transitions(answers, golds), invalid_rate=invalid,
                num_questions=n_q, num_turns=len(answers[0]), num_agents=len(answers[0][0]))
