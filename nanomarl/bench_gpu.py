"""bench_gpu.py: bench.py --parts gpu, the GPU path measured against the plain one and the hardware.

In one run, printed as it goes (a failing figure prints FAILED and the run goes on; a failing
preflight stops it at once):
  0. preflight   versions, the card, its memory bandwidth (a device-to-device copy), the sandbox,
                 and the fast path against the plain one on the tiny model (tokens, log-probs);
  1. rollouts    tokens/s of common.generate, plain (transformers, --no-fast) and fast
                 (nanomarl/fast_decode.py), at 8 and 32 rows on two LoRA adapters, every row
                 running to its token limit, against the HBM roofline (the weights read once per
                 decoding step at the measured bandwidth), for SmolLM2-135M's architecture and
                 Qwen2.5-1.5B's (random weights, bf16, the tiny byte-level tokenizer: no download);
  2. updates     seconds per update of cotrain.py and per step of magrpo.py on the 135M
                 architecture, the plain code (--no-fast, one debate / 8 completions per
                 forward) and the default (--fast: fast decoding, micro-batches sized by free
                 memory).
--gpu-smoke runs all of it at tiny sizes (CPU too): the check that the one GPU run cannot die of a
Python error. Results: gpu.json in --output-dir.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

from nanomarl import fast_decode

common = None  # common.py, handed over by bench.py (no module of nanomarl/ imports it)

# SmolLM2-135M's published config.json (a Llama); Qwen2.5-1.5B's comes from bench.py
SMOLLM2_135M = dict(model_type="llama", hidden_size=576, intermediate_size=1536,
                    num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                    vocab_size=49152, tie_word_embeddings=True, max_position_embeddings=8192,
                    rope_theta=100000.0, rms_norm_eps=1e-5, hidden_act="silu")
SMOKE = {"llama-smoke": dict(model_type="llama", hidden_size=64, intermediate_size=128,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             vocab_size=512, tie_word_embeddings=True, rms_norm_eps=1e-5,
                             max_position_embeddings=4096),
         "qwen2-smoke": dict(model_type="qwen2", hidden_size=64, intermediate_size=128,
                             num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
                             vocab_size=700, tie_word_embeddings=False, rms_norm_eps=1e-6,
                             max_position_embeddings=4096)}


def say(text: str):
    print(text, flush=True)


def build(spec: dict, dtype: torch.dtype, device: str, tokenizer, seed: int = 0):
    """A random-weight causal LM of this config (pad/EOS from the tiny tokenizer), frozen, eval."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**spec, pad_token_id=tokenizer.pad_token_id,
                                  eos_token_id=tokenizer.eos_token_id,
                                  bos_token_id=tokenizer.bos_token_id)
    torch.manual_seed(seed)
    with torch.device(device):  # initialised where it runs (a 1.5B model: seconds, not a minute)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def with_adapters(model, names=("agent0", "agent1"), r: int = 8):
    """LoRA adapters (common.add_adapters) with random B, so each moves the logits."""
    model = common.add_adapters(model, list(names), r=r, alpha=2 * r)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_B." in n:
                p.normal_(0, 0.02)
    return model


def sync(device: str):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def bandwidth(device: str) -> float | None:
    """Bytes/s of a device-to-device copy (bytes read + written), the best of 10; None on CPU."""
    if not device.startswith("cuda"):
        return None
    x = torch.empty(2 << 30, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    best = float("inf")
    for _ in range(10):
        sync(device)
        start = time.perf_counter()
        y.copy_(x)
        sync(device)
        best = min(best, time.perf_counter() - start)
    del x, y
    return 2 * (2 << 30) / best


def prompts(tokenizer, n: int) -> list[str]:
    from nanomarl.tasks.debate import load_task

    questions = [r["question"] for r in load_task("arith", "test", limit=n)]
    questions = (questions * n)[:n]
    return [common.chat_prompt(tokenizer, [{"role": "user", "content": q}]) for q in questions]


def fast_generate(model, device: str):
    """The fast path as common.generate reaches it (CUDA: fast_decoder, which must apply), or on
    CPU a FastDecoder run eagerly (set as the model's sampling_engine)."""
    def run(tokenizer, texts, names, **kwargs):
        if device.startswith("cuda") and fast_decode.fast_decoder(model, names) is None:
            raise RuntimeError("the fast path does not apply to this model on CUDA")
        if not device.startswith("cuda") and "sampling_engine" not in vars(model):
            model.sampling_engine = fast_decode.FastDecoder(model)
        return common.generate(model, tokenizer, texts, names, fast=True, **kwargs)
    return run


def plain_generate(model):
    def run(tokenizer, texts, names, **kwargs):
        return common.generate(model, tokenizer, texts, names, fast=False, **kwargs)
    return run


def agreement(fast: dict, plain: dict) -> dict:
    """How far the fast outputs are from the plain ones: rows with identical tokens, and the largest
    log-prob gap over the tokens before each row's first difference."""
    same_rows, gap = 0, 0.0
    for f_ids, p_ids, f_lp, p_lp in zip(fast["response_ids"], plain["response_ids"],
                                        fast["logprobs"], plain["logprobs"]):
        width = min(len(f_ids), len(p_ids))
        differ = (f_ids[:width] != p_ids[:width]).nonzero()
        until = int(differ[0]) if len(differ) else width
        same_rows += bool(until == width and len(f_ids) == len(p_ids))
        if until:
            gap = max(gap, float((f_lp[:until] - p_lp[:until]).abs().max()))
    return dict(rows_identical=same_rows, rows=len(fast["response_ids"]), max_logprob_gap=gap)


def check_finite(out: dict, label: str):
    if not torch.isfinite(out["logprobs"]).all():
        raise RuntimeError(f"{label}: non-finite log-probs")


def preflight(device: str, tokenizer, smoke: bool) -> dict:
    """Stop at once (an exception) when the fast path is broken on this device: the tiny model,
    fp32, greedy, fast against plain (every row's tokens; log-probs within 1e-3)."""
    import peft
    import transformers

    info = dict(torch=torch.__version__, transformers=transformers.__version__,
                peft=peft.__version__, device=device,
                card=torch.cuda.get_device_name() if device.startswith("cuda") else "CPU")
    say(f"preflight: {info}")
    info["bandwidth_bytes_per_s"] = bw = bandwidth(device)
    if bw:
        say(f"preflight: device-to-device copy {bw / 1e12:.2f} TB/s (read + written)")
    model = with_adapters(build(SMOKE["qwen2-smoke"], torch.float32, device, tokenizer))
    texts, names = prompts(tokenizer, 5), ["agent0", "agent1", "__base__", "agent0", "agent1"]
    kwargs = dict(max_new_tokens=12, greedy=True)
    plain = plain_generate(model)(tokenizer, texts, names, **kwargs)
    fast = fast_generate(model, device)(tokenizer, texts, names, **kwargs)
    for out, label in ((plain, "plain"), (fast, "fast")):
        check_finite(out, label)
    info["tiny_agreement"] = agree = agreement(fast, plain)
    say(f"preflight: tiny model fp32 greedy, fast vs plain: {agree}")
    if agree["rows_identical"] < agree["rows"] or agree["max_logprob_gap"] > 1e-3:
        raise RuntimeError(f"the fast path disagrees with the plain one on the tiny model: {agree}")
    try:
        from nanomarl.sandbox import run_tests_in_sandbox
        run_tests_in_sandbox("x = 1", [])
        info["sandbox"] = "ok"
    except Exception as e:  # magrpo's code tasks need it: its figures are skipped
        info["sandbox"] = f"{type(e).__name__}: {e}"
        say(f"preflight: SANDBOX FAILED ({info['sandbox']}): magrpo.py is skipped")
    return info


def rollout(name: str, spec: dict, rows_list, new_tokens: int, repeats: int, device: str,
            dtype: torch.dtype, tokenizer, bw: float | None) -> dict:
    """Tokens/s, plain and fast, per number of rows; every row generates new_tokens tokens."""
    model = with_adapters(build(spec, dtype, device, tokenizer))
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    results = {}
    for rows in rows_list:
        texts = prompts(tokenizer, rows)
        names = [("agent0", "agent1")[i % 2] for i in range(rows)]
        kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, temperature=0.7)
        entry = results[rows] = dict(
            roofline_tokens_per_s=rows * bw / weight_bytes if bw else None)
        outputs = {}
        for path, run in (("fast", fast_generate(model, device)), ("plain", plain_generate(model))):
            try:
                sync(device)
                start = time.perf_counter()
                out = run(tokenizer, texts, names, **kwargs)  # warm-up: captures and compiles
                sync(device)
                warm = time.perf_counter() - start
                check_finite(out, path)
                seconds = []
                for _ in range(repeats if path == "fast" else 1):  # the plain path: slow, steady
                    start = time.perf_counter()
                    out = run(tokenizer, texts, names, **kwargs)
                    sync(device)
                    seconds.append(time.perf_counter() - start)
                tokens = int(out["response_mask"].sum())
                entry[path] = dict(tokens_per_s=tokens / statistics.median(seconds),
                                   seconds=seconds, first_call_seconds=warm, tokens=tokens)
                torch.manual_seed(0)
                outputs[path] = run(tokenizer, texts, names, max_new_tokens=new_tokens,
                                    greedy=True)
            except Exception as e:
                entry[path] = dict(error=f"{type(e).__name__}: {e}")
                say(f"rollout {name} {rows} rows {path}: FAILED {entry[path]['error']}\n"
                    + traceback.format_exc(limit=6))
        if len(outputs) == 2:
            entry["greedy_agreement"] = agreement(outputs["fast"], outputs["plain"])
        say(rollout_line(name, rows, entry))
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return results


def rollout_line(name: str, rows: int, entry: dict) -> str:
    def rate(path):
        e = entry.get(path, {})
        return f"{e['tokens_per_s']:,.0f}" if "tokens_per_s" in e else "FAILED"

    roof = entry.get("roofline_tokens_per_s")
    fast, plain = entry.get("fast", {}), entry.get("plain", {})
    speedup = (f"x{fast['tokens_per_s'] / plain['tokens_per_s']:.1f}"
               if "tokens_per_s" in fast and "tokens_per_s" in plain else "x?")
    share = (f", {100 * fast['tokens_per_s'] / roof:.1f} % of the roofline {roof:,.0f}"
             if roof and "tokens_per_s" in fast else "")
    first = (f", first fast call {fast['first_call_seconds']:.1f} s"
             if "first_call_seconds" in fast else "")
    return (f"rollout {name} {rows} rows: plain {rate('plain')} tok/s, fast {rate('fast')} tok/s "
            f"({speedup}{share}{first}); greedy agreement {entry.get('greedy_agreement')}")


def save_model(spec: dict, folder: Path, tokenizer, dtype: torch.dtype) -> Path:
    """The random-weight model and the tiny tokenizer in one folder, for the scripts' --model."""
    if not (folder / "config.json").exists():
        build(spec, dtype, "cpu", tokenizer).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder


def script_run(script: str, flags: list[str], run_dir: Path, timeout: int) -> dict:
    """One subprocess run of a script; its own timing of every update but the first (warm-up)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, script, "--output-dir", str(run_dir), *flags],
                          capture_output=True, text=True, timeout=timeout,
                          cwd=Path(__file__).resolve().parents[1],
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(flags)} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in rows if "timing/step_s" in m]
    timed = steps[1:] or steps

    def median(key):
        values = [m[key] for m in timed if key in m]
        return statistics.median(values) if values else None

    for m in timed:  # magrpo.py logs the step and its rollout
        m.setdefault("timing/update_s", m["timing/step_s"] - m.get("timing/rollout_s", 0.0))
    chosen = [line for line in done.stdout.splitlines() if line.startswith("micro-batches:")]
    return dict(seconds_per_update=median("timing/step_s"), generate_s=median("timing/generate_s"),
                rollout_s=median("timing/rollout_s"), update_s=median("timing/update_s"),
                first_update_s=steps[0]["timing/step_s"], all_updates_s=[m["timing/step_s"]
                                                                         for m in steps],
                wall_s=wall, micro_batches=chosen, flags=flags)


def seconds(value) -> str:
    return "?" if value is None else f"{value:.2f}"


def updates(folder: Path, device: str, dtype: str, out_dir: Path, smoke: bool,
            sandbox_ok: bool) -> dict:
    """cotrain.py and magrpo.py, today's path then the default, on the model in folder."""
    common_flags = ["--model", str(folder), "--dtype", dtype, "--device", device, "--max-steps",
                    "3", "--threads", "0"]
    small = {"cotrain.py": ["--max-new-tokens", "8", "--questions-per-update", "1"],
             "magrpo.py": ["--max-new-tokens", "8", "--num-generations", "2"]} if smoke else {}
    plans = {"cotrain.py": (["--eval-questions", "0"],
                            ["--no-fast", "--micro-batch-questions", "1"]),
             "magrpo.py": (["--eval-problems", "0"],
                           ["--no-fast", "--micro-batch-size", "8"])}
    results = {}
    for script, (flags, plain_flags) in plans.items():
        if script == "magrpo.py" and not sandbox_ok:
            continue
        for path, extra in (("plain", plain_flags), ("fast", [])):
            key = f"{script} {path}"
            run_dir = out_dir / f"gpu-{script[:-3]}-{path}-{time.strftime('%H%M%S')}"
            try:
                results[key] = r = script_run(script, [*common_flags, *flags,
                                                       *small.get(script, []), *extra],
                                              run_dir, timeout=600)
                say(f"update {key}: {r['seconds_per_update']:.2f} s per update (generation "
                    f"{seconds(r['generate_s'])}, rollout {seconds(r['rollout_s'])}, after it "
                    f"{seconds(r['update_s'])}; first {r['first_update_s']:.1f} s; wall "
                    f"{r['wall_s']:.0f} s) {' '.join(r['micro_batches'])}")
            except Exception as e:
                results[key] = dict(error=f"{type(e).__name__}: {e}"[-3000:])
                say(f"update {key}: FAILED {results[key]['error']}")
        plain, fast = results.get(f"{script} plain", {}), results.get(f"{script} fast", {})
        if plain.get("seconds_per_update") and fast.get("seconds_per_update"):
            say(f"update {script}: x{plain['seconds_per_update'] / fast['seconds_per_update']:.1f}"
                f" ({plain['seconds_per_update']:.2f} -> {fast['seconds_per_update']:.2f} s)")
    return results


def bench_gpu(args, device: str, big_spec: dict, common_module) -> dict:
    """bench.py --parts gpu (module docstring). big_spec: the 1.5B architecture's config;
    common_module: common.py, from bench.py."""
    global common
    common = common_module
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: random weights only
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from nanomarl.models import load_tokenizer

    smoke = args.gpu_smoke
    cuda = device.startswith("cuda")
    dtype = torch.bfloat16 if cuda and not smoke else torch.float32
    dtype_name = "bfloat16" if dtype == torch.bfloat16 else "float32"
    tokenizer = load_tokenizer("tiny")
    out_dir = Path(args.output_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    report = dict(preflight=preflight(device, tokenizer, smoke), rollouts={}, updates={})

    def save():
        report["seconds"] = time.perf_counter() - start
        (out_dir / "gpu.json").write_text(json.dumps(report, indent=2, default=str))

    specs = ({"smollm2-135m": SMOLLM2_135M, "qwen2.5-1.5b": big_spec} if not smoke else SMOKE)
    rows_list, new_tokens = ((8, 32), 128) if not smoke else ((2, 4), 8)
    bw = report["preflight"]["bandwidth_bytes_per_s"]
    for name, spec in specs.items():  # 1. rollouts
        report["rollouts"][name] = rollout(name, spec, rows_list, new_tokens, 2, device, dtype,
                                           tokenizer, bw)
        save()
    name, spec = next(iter(specs.items()))  # 2. updates, on the small architecture
    folder = save_model(spec, out_dir / f"gpu-model-{name}", tokenizer, dtype)
    report["updates"] = updates(folder, device, dtype_name, out_dir, smoke,
                                report["preflight"]["sandbox"] == "ok")
    save()
    say(f"gpu part: {time.perf_counter() - start:.0f} s; wrote {out_dir / 'gpu.json'}")
    return report
