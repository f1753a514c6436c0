"""bench.py: speed and memory of nanomarl's design, measured side by side against the naive way.

A benchmark, not a test. Each figure is a median over --repeats (with min and max), and every pair being
compared runs in the same process on the same model, prompts and number of generated tokens
(min_new_tokens = max_new_tokens, so EOS never shortens one side).

  1. rollout: one debate turn of A agents x B questions as ONE mixed-adapter generate call (each row on its
     own LoRA adapter) versus one generate call per agent (one adapter active, its B rows); and where the mixed
     call's time goes: the same rows generated on the base model alone and all on one adapter.
  2. decode ceiling: the same batch as a plain loop of single-token forwards with the KV cache on the base
     model (no sampling, no adapter routing, no stopping checks); generation tok/s as a fraction of it.
  3. training pass: padded batched log-prob forward + backward over all A x B responses (one forward per
     adapter, as the scripts do) versus one completion at a time (the CoMLRL way: batch size 1, unpadded), and
     versus all rows in one mixed-adapter forward (peft's per-row routing).
  4. memory: peak memory during a steady-state training step (optimiser state allocated, the peak reset
     before the step), each configuration in its own subprocess (peak RSS via /proc on CPU, max allocated on
     CUDA): one base + 1 adapter; one base + A x T adapters + critic + value heads (cotrain's agent-turn
     layout); A full copies of the model with AdamW state (full fine-tuning per agent, as the MAGRPO authors do).
  5. end to end: seconds per update of cotrain.py and magrpo.py at their default settings (subprocess runs), of
     this working tree or, side by side in one run, of git revisions and flag sets (--end-to-end-variants).

Examples:
  python bench.py                                   # tiny model and smollm2-135m on CPU
  python bench.py --models tiny --parts speed,memory   # seconds
  python bench.py --parts end-to-end --end-to-end-scripts cotrain.py \\
      --end-to-end-variants "e51a436;. --value-model separate;."   # cotrain before issue 17 / separate / shared
  python bench.py --models qwen2.5-1.5b --random-init --device cuda --dtype bfloat16   # GPU, random weights
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

import torch

import common
from common import parse_args


@dataclasses.dataclass
class Args:
    # ---- what to measure on
    models: str = "tiny,smollm2-135m"  # comma-separated model names (tiny, smollm2-135m, a hub id/path, or a --random-init config)
    random_init: bool = False  # build each model from its config with random weights (qwen2.5-1.5b, qwen2.5-3b, or a config.json path)
    device: str = ""  # cpu or cuda; empty = cuda when present
    dtype: str = "float32"  # float32 | bfloat16
    # ---- sizes
    agents: str = "2,3"  # numbers of agents A to benchmark the rollout with
    questions: int = 4  # questions B per debate turn (batch = A x B rows)
    max_new_tokens: int = 32  # generated tokens per row (min_new_tokens is set equal, for fair timing)
    turns: int = 3  # turns T for the memory layout A x T adapters
    lora_r: int = 8  # LoRA rank of every adapter
    repeats: int = 3  # timed repeats per figure (median, min, max); one untimed warm-up first
    # ---- what to run
    parts: str = "speed,memory,end-to-end"  # what to measure: speed (items 1-3), memory (4), end-to-end (5)
    end_to_end_updates: int = 2  # timed updates per end-to-end run of cotrain.py / magrpo.py (after one untimed warm-up update)
    end_to_end_scripts: str = "cotrain.py,magrpo.py"  # the scripts the end-to-end part runs
    end_to_end_variants: str = "."  # ';'-separated versions to run one after another, each 'REV [FLAGS]': REV '.' = this working tree or a git revision (exported by git archive), FLAGS passed to every script; e.g. 'e51a436;.' (before/after) or '. --value-model separate;.'
    # ---- output
    out_dir: str = "runs/bench"  # where bench.json is written
    seed: int = 0  # random seed
    memory_config: str = ""  # internal: run one memory configuration in this process and print JSON


# Configs for --random-init without the hub (from the models' published config.json files).
RANDOM_INIT_CONFIGS = {
    "qwen2.5-1.5b": dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                         max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6),
    "qwen2.5-3b": dict(model_type="qwen2", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                       num_attention_heads=16, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                       max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6),
}


def load(args, name):
    """(model, tokenizer). --random-init builds the architecture with random weights and the tiny byte tokenizer."""
    device = args.device or common.default_device()
    if not args.random_init:
        return common.load_model(name, args.dtype, "none", device), common.load_tokenizer(name)
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = RANDOM_INIT_CONFIGS.get(name) or json.loads(Path(name).read_text())
    config = AutoConfig.for_model(**spec)
    torch.manual_seed(args.seed)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, common.load_tokenizer("tiny")


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
    questions = [r["question"] for r in common.load_task("arith", "test", limit=n)]
    return [common.chat_prompt(tokenizer, [{"role": "user", "content": q}]) for q in questions]


# ---------------------------------------------------------------------------------------------- 1-3


def bench_rollout(args, model, tokenizer, num_agents, device):
    """1. one mixed-adapter generate call vs one call per agent; 2. the KV-cache decode ceiling."""
    names = [f"agent{a}" for a in range(num_agents)]
    prompts = prompts_for(tokenizer, args.questions)
    rows = [(a, p) for a in names for p in prompts]  # A x B rows, agent-major
    gen = dict(max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens, temperature=1.0)

    def all_rows(row_adapters: list[str]):  # one generate call over the A x B rows
        common.generate(model, tokenizer, [p for _, p in rows], row_adapters, **gen)

    def per_agent():  # one adapter for all rows of a call: generate() uses peft's ordinary path (set_adapter)
        for a in names:
            common.generate(model, tokenizer, prompts, [a] * len(prompts), **gen)

    query_ids, query_mask = common.tokenize_prompts(tokenizer, [p for _, p in rows], device)

    @torch.no_grad()
    def decode_ceiling():  # prefill + (max_new_tokens - 1) single-token steps with the KV cache, base model only
        with common.adapters_disabled(model):
            position_ids = (query_mask.cumsum(1) - 1).clamp(min=0)
            out = model(input_ids=query_ids, attention_mask=query_mask, position_ids=position_ids, use_cache=True,
                        logits_to_keep=1)
            cache, mask, pos = out.past_key_values, query_mask, position_ids[:, -1:]
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            for _ in range(args.max_new_tokens - 1):
                mask = torch.cat([mask, torch.ones_like(token)], 1)
                pos = pos + 1
                out = model(input_ids=token, attention_mask=mask, position_ids=pos, past_key_values=cache,
                            use_cache=True)
                cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)

    tokens = len(rows) * args.max_new_tokens
    t_mixed = timed(lambda: all_rows([a for a, _ in rows]), args.repeats, device)
    t_per_agent = timed(per_agent, args.repeats, device)
    t_ceiling = timed(decode_ceiling, args.repeats, device)
    # where the mixed call's time goes, on the same rows: no adapter at all, and one adapter on every row (LoRA
    # compute but no per-row routing)
    t_base = timed(lambda: all_rows(["__base__"] * len(rows)), args.repeats, device)
    t_one = timed(lambda: all_rows([names[0]] * len(rows)), args.repeats, device)
    return dict(agents=num_agents, rows=len(rows), tokens=tokens,
                mixed_tok_s=tokens / t_mixed["median"], per_agent_tok_s=tokens / t_per_agent["median"],
                ceiling_tok_s=tokens / t_ceiling["median"], speedup=t_per_agent["median"] / t_mixed["median"],
                fraction_of_ceiling=t_ceiling["median"] / t_mixed["median"],
                base_generate_tok_s=tokens / t_base["median"], one_adapter_generate_tok_s=tokens / t_one["median"],
                seconds=dict(mixed=t_mixed, per_agent=t_per_agent, ceiling=t_ceiling, base_generate=t_base,
                             one_adapter_generate=t_one))


def bench_training_pass(args, model, tokenizer, num_agents, device):
    """3. padded batched log-prob forward + backward vs one completion at a time (and vs one mixed-adapter batch)."""
    names = [f"agent{a}" for a in range(num_agents)]
    prompts = prompts_for(tokenizer, args.questions)
    adapters = [a for a in names for _ in prompts]
    torch.manual_seed(args.seed)
    rollout = common.generate(model, tokenizer, prompts * num_agents, adapters, max_new_tokens=args.max_new_tokens,
                              min_new_tokens=args.max_new_tokens, temperature=1.0)
    keys = ("query_ids", "query_mask", "response_ids", "response_mask")

    def padded_pass(group_by_adapter: bool):
        # True: what the scripts do under autograd, one padded forward per adapter; False: all A x B rows in one
        # forward, peft routing each row to its adapter
        out = common.forward_responses(model, *(rollout[k] for k in keys), adapters, 1.0,
                                       group_by_adapter=group_by_adapter)
        (-out["logprobs"].sum()).backward()

    def one_at_a_time():
        for i, adapter in enumerate(adapters):
            q = rollout["query_ids"][i][rollout["query_mask"][i].bool()][None]
            n = int(rollout["response_mask"][i].sum())
            r = rollout["response_ids"][i, :n][None]
            out = common.forward_responses(model, q, torch.ones_like(q), r, torch.ones_like(r).float(), [adapter], 1.0)
            (-out["logprobs"].sum()).backward()

    tokens = int(rollout["response_mask"].sum())
    real_positions = int(rollout["query_mask"].sum()) + tokens  # what one-at-a-time forwards; padding is extra
    padded_positions = rollout["query_ids"].numel() + rollout["response_ids"].numel()
    t_batched = timed(lambda: padded_pass(True), args.repeats, device)
    t_single = timed(one_at_a_time, args.repeats, device)
    t_mixed = timed(lambda: padded_pass(False), args.repeats, device)
    model.zero_grad(set_to_none=True)
    return dict(agents=num_agents, rows=len(adapters), tokens=tokens, batched_tok_s=tokens / t_batched["median"],
                one_at_a_time_tok_s=tokens / t_single["median"], speedup=t_single["median"] / t_batched["median"],
                padding_overhead=padded_positions / real_positions, mixed_batch_tok_s=tokens / t_mixed["median"],
                seconds=dict(batched=t_batched, one_at_a_time=t_single, mixed_batch=t_mixed))


# ---------------------------------------------------------------------------------------------- 4. memory


def rss_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (peak since start or the last reset) of this process from /proc (Linux), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"{field} not in /proc/self/status (bench.py's CPU memory figures need Linux)")


def reset_peak_memory(device):
    """Forget the loading peak: from here on, peak memory is what training on the loaded model needs.
    (ru_maxrss cannot be reset, and loading SmolLM2 from GGUF peaks at about twice the model's size.)"""
    if str(device).startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # Linux >= 4.0: reset VmHWM to the current RSS


def peak_memory_mb(device) -> float:
    if str(device).startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return rss_mb("VmHWM")


def memory_config_run(args):
    """Run one memory configuration (in its own subprocess) and print JSON with the model's resident size after
    loading and the peak during a training step (forward, backward, AdamW step of every trainable parameter) in
    steady state: a first step allocates every optimiser's state (AdamW does it lazily, in step()), the
    gradients are dropped, the peak is reset, and the second step is measured. So neither the loading peak nor
    a missing optimiser state skews what the layout costs. All layouts push the same A x T rows through the
    model. On CPU every figure is counted from the RSS before loading (Python, torch and transformers)."""
    name, layout = args.memory_config.split("|")
    num_agents = max(common.parse_int_list(args.agents, "--agents"))
    device = args.device or common.default_device()
    runtime_mb = 0.0 if device.startswith("cuda") else rss_mb("VmRSS")  # Python + torch + transformers, no model
    model, tokenizer = load(args, name)
    with torch.no_grad():  # read every weight once: safetensors may be memory-mapped and paged in lazily
        [p.sum() for p in model.parameters()]
    gc.collect()
    loaded_mb = torch.cuda.memory_allocated() / 2**20 if device.startswith("cuda") else rss_mb("VmRSS")
    rows = num_agents * args.turns
    query_ids, query_mask = common.tokenize_prompts(tokenizer, prompts_for(tokenizer, rows), device)
    response_ids = torch.randint(0, 200, (rows, args.max_new_tokens), device=device)
    response_mask = torch.ones(rows, args.max_new_tokens, device=device)
    if layout == "full-copies":  # A full models, each trainable with its own AdamW, each trained on its T rows
        copies = [model] + [copy.deepcopy(model) for _ in range(num_agents - 1)]
        for m in copies:
            for p in m.parameters():
                p.requires_grad_(True)
        optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-5) for m in copies]
        trainable = sum(p.numel() for m in copies for p in m.parameters())

        def train_step():
            for a, (m, optimizer) in enumerate(zip(copies, optimizers)):
                mine = slice(a * args.turns, (a + 1) * args.turns)
                out = common.forward_responses(m, query_ids[mine], query_mask[mine], response_ids[mine],
                                               response_mask[mine], None)
                (-out["logprobs"].sum()).backward()
                optimizer.step()
    else:  # LoRA adapters on one frozen base: one adapter, or cotrain's A x T agent-turn adapters + critic + heads
        names = ["agent0"] if layout == "one-adapter" else [f"agent{a}_turn{t}" for a in range(num_agents)
                                                             for t in range(args.turns)]
        critic = [] if layout == "one-adapter" else ["critic"]
        model = common.add_adapters(model, names + critic, r=args.lora_r, alpha=2 * args.lora_r)
        heads = [common.ValueHead(common.hidden_size(model)).to(device) for _ in range(args.turns)] if critic else []
        groups = [common.adapter_parameters(model, n) for n in names]
        if critic:
            groups.append(common.adapter_parameters(model, "critic") + [p for h in heads for p in h.parameters()])
        optimizers = [torch.optim.AdamW(g, lr=1e-5) for g in groups]
        trainable = sum(p.numel() for g in groups for p in g)
        row_adapters = [names[i % len(names)] for i in range(rows)]  # every adapter gets rows, hence gradients

        def train_step():
            out = common.forward_responses(model, query_ids, query_mask, response_ids, response_mask, row_adapters)
            (-out["logprobs"].sum()).backward()
            if critic:  # then the critic, one graph alive at a time (as cotrain.py's ppo_update)
                hidden = common.forward_responses(model, query_ids, query_mask, response_ids, response_mask,
                                                  ["critic"] * rows, output_hidden=True)["hidden"]
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
    print(json.dumps(dict(runtime_mb=runtime_mb, loaded_mb=loaded_mb - runtime_mb, peak_mb=peak_mb - runtime_mb,
                          trainable_params=trainable)))


def bench_memory(args, name):
    results = {}
    for layout in ("one-adapter", "agent-turn-adapters", "full-copies"):
        cmd = [sys.executable, __file__, "--memory-config", f"{name}|{layout}", "--models", name,
               "--agents", args.agents, "--turns", str(args.turns), "--max-new-tokens", str(args.max_new_tokens),
               "--lora-r", str(args.lora_r), "--dtype", args.dtype, "--device", args.device,
               "--random-init" if args.random_init else "--no-random-init"]
        # glibc keeps freed large blocks in its heap once its adaptive mmap threshold has grown, and peak RSS then
        # counts activations that were already freed; a fixed threshold returns them, so RSS tracks live memory
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"memory run {layout} failed:\n{done.stderr[-2000:]}")
        results[layout] = json.loads(done.stdout.strip().splitlines()[-1])
    one, adapters, full = (results[k]["peak_mb"] for k in ("one-adapter", "agent-turn-adapters", "full-copies"))
    results["adapters_vs_one_adapter"] = adapters / one  # target: <= 1.2
    results["full_copies_vs_adapters"] = full / adapters
    return results


# ---------------------------------------------------------------------------------------------- 5. end to end


def export_revision(revision: str, folder: Path) -> Path:
    """The repository's files at a git revision, written to folder/<revision> (git archive): its scripts run there."""
    target = folder / revision.replace("/", "_")
    target.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", "--format=tar", revision], cwd=Path(__file__).resolve().parent,
                             capture_output=True)
    if archive.returncode != 0:
        common.arg_error("--end-to-end-variants", f"git archive {revision} failed: {archive.stderr.decode()[-300:]}")
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def bench_end_to_end(args):
    """Seconds per update of cotrain.py and magrpo.py at their default settings: one subprocess run each of
    1 + --end-to-end-updates updates; the per-update figures are the scripts' own timing/step_s of every
    update but the first (which warms up), and the rest (loading, checkpoints) = wall time - the sum of all updates.
    Each --end-to-end-variants entry ('REV [FLAGS]') runs the scripts of the working tree ('.') or of a git
    revision, with FLAGS, one run at a time; speedup = the first variant's seconds per update / this one's."""
    results, first = {}, {}
    out_dir = Path(args.out_dir).resolve()
    variants = [v.split() for v in args.end_to_end_variants.split(";") if v.strip()]
    for revision, *flags in variants:
        folder = Path(__file__).resolve().parent if revision == "." else export_revision(revision, out_dir / "revisions")
        for script in args.end_to_end_scripts.split(","):
            steps_flag = {"cotrain.py": "--updates", "magrpo.py": "--steps"}[script]
            run_dir = out_dir / f"e2e-{script[:-3]}-{time.strftime('%Y%m%d-%H%M%S')}"
            start = time.perf_counter()
            done = subprocess.run([sys.executable, str(folder / script), steps_flag, str(1 + args.end_to_end_updates),
                                   "--run-dir", str(run_dir), *flags], capture_output=True, text=True, cwd=folder)
            wall = time.perf_counter() - start
            if done.returncode != 0:
                raise RuntimeError(f"{script} ({revision} {' '.join(flags)}) failed:\n{done.stderr[-2000:]}")
            steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
            seconds = [m["timing/step_s"] for m in steps]
            per_update = statistics.median(seconds[1:])
            first.setdefault(script, per_update)
            key = script if len(variants) == 1 else f"{script} @ {' '.join([revision, *flags])}"
            results[key] = dict(seconds_per_update=per_update, min=min(seconds[1:]), max=max(seconds[1:]),
                                updates_per_hour=3600 / per_update, first_update_seconds=seconds[0],
                                rollout_fraction=statistics.median(m["timing/rollout_s"] / m["timing/step_s"]
                                                                   for m in steps[1:]),
                                after_rollout_seconds=statistics.median(m["timing/step_s"] - m["timing/rollout_s"]
                                                                        for m in steps[1:]),
                                speedup=first[script] / per_update, outside_updates_seconds=wall - sum(seconds),
                                revision=revision, command=" ".join(done.args[1:]))
            print(f"end to end: {key}: {per_update:.1f} s per update (x{first[script] / per_update:.2f} against the "
                  f"first variant), {results[key]['after_rollout_seconds']:.1f} s of it after the rollout", flush=True)
    return results


# ---------------------------------------------------------------------------------------------- main


def bench_speed(args, name, device) -> dict:
    """Items 1-3 for every A in --agents, on one model with max(A) non-zero adapters."""
    model, tokenizer = load(args, name)
    agent_counts = common.parse_int_list(args.agents, "--agents")
    model = common.add_adapters(model, [f"agent{a}" for a in range(max(agent_counts))], r=args.lora_r,
                                alpha=2 * args.lora_r)
    with torch.no_grad():  # non-zero adapters, so every row really runs its own LoRA
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.01)
    entry = dict(rollout=[], training=[])
    for num_agents in agent_counts:
        entry["rollout"].append(bench_rollout(args, model, tokenizer, num_agents, device))
        entry["training"].append(bench_training_pass(args, model, tokenizer, num_agents, device))
        r, t = entry["rollout"][-1], entry["training"][-1]
        print(f"A={num_agents} rollout: mixed {r['mixed_tok_s']:.0f} tok/s, per-agent {r['per_agent_tok_s']:.0f} "
              f"tok/s (x{r['speedup']:.2f}); ceiling {r['ceiling_tok_s']:.0f} tok/s "
              f"({100 * r['fraction_of_ceiling']:.0f}%); base-model generate {r['base_generate_tok_s']:.0f}, "
              f"one adapter {r['one_adapter_generate_tok_s']:.0f} tok/s | training: batched "
              f"{t['batched_tok_s']:.0f} tok/s, one-at-a-time {t['one_at_a_time_tok_s']:.0f} tok/s "
              f"(x{t['speedup']:.2f}, padding x{t['padding_overhead']:.2f}), one mixed-adapter batch "
              f"{t['mixed_batch_tok_s']:.0f} tok/s")
    return entry


def main(args):
    if args.memory_config:
        return memory_config_run(args)
    device = args.device or common.default_device()
    common.seed_everything(args.seed)
    report = dict(device=device, machine=torch.cuda.get_device_name() if device.startswith("cuda") else
                  f"{torch.get_num_threads()} CPU threads", torch=torch.__version__,
                  date=time.strftime("%Y-%m-%d"), args=dataclasses.asdict(args), models={})
    parts = set(args.parts.split(","))
    if not parts or parts - {"speed", "memory", "end-to-end"}:
        common.arg_error("--parts", f"{args.parts!r}: give a comma-separated subset of speed, memory, end-to-end")
    for name in args.models.split(",") if parts & {"speed", "memory"} else []:
        print(f"== {name}")
        entry = report["models"][name] = {}
        if "speed" in parts:
            entry.update(bench_speed(args, name, device))
        if "memory" in parts:
            entry["memory_mb"] = m = bench_memory(args, name)
            print(f"memory (peak MB during a training step; model alone {m['one-adapter']['loaded_mb']:.0f}): "
                  f"1 adapter {m['one-adapter']['peak_mb']:.0f}, A x T adapters + critic + heads "
                  f"{m['agent-turn-adapters']['peak_mb']:.0f} (x{m['adapters_vs_one_adapter']:.2f}), A full copies + "
                  f"AdamW {m['full-copies']['peak_mb']:.0f} (x{m['full_copies_vs_adapters']:.2f} of the adapters)")
    if "end-to-end" in parts:
        report["end_to_end"] = bench_end_to_end(args)
        print("end to end:", json.dumps(report["end_to_end"]))
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    common.atomic_write_text(out / "bench.json", json.dumps(report, indent=2))
    print(f"wrote {out / 'bench.json'}")


if __name__ == "__main__":
    main(parse_args(Args))
