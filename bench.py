"""bench.py: speed and memory of nanomarl's design, measured side by side against the naive way.

A benchmark, not a test. Each figure is a median over --repeats (with min and max), and every pair being
compared runs in the same process on the same model, prompts and number of generated tokens
(min_new_tokens = max_new_tokens, so EOS never shortens one side).

  1. rollout: one debate turn of A agents x B questions as ONE mixed-adapter generate call (each row on its
     own LoRA adapter) versus one generate call per agent (set_adapter, then generate its B rows).
  2. decode ceiling: the same batch as a plain loop of single-token forwards with the KV cache on the base
     model (no sampling, no adapter routing, no stopping checks); generation tok/s as a fraction of it.
  3. training pass: padded batched log-prob forward + backward over all A x B responses versus one completion
     at a time (the CoMLRL way: batch size 1, unpadded).
  4. memory: peak memory, each configuration in its own subprocess (peak RSS on CPU, max allocated on CUDA):
     one base + 1 adapter; one base + A x T adapters + value heads (cotrain's agent-turn layout); A full
     copies of the model with AdamW state (full fine-tuning per agent, as the MAGRPO authors do).
  5. end to end: seconds per update of cotrain.py and magrpo.py at their default settings (subprocess runs).

Examples:
  python bench.py                                   # tiny model and smollm2-135m on CPU
  python bench.py --models tiny --skip-end-to-end   # seconds
  python bench.py --models qwen2.5-1.5b --random-init --device cuda --dtype bfloat16   # GPU, random weights
"""
from __future__ import annotations

import copy
import dataclasses
import json
import resource
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
    # ---- end to end
    skip_end_to_end: bool = False  # skip item 5 (the cotrain.py / magrpo.py runs)
    end_to_end_updates: int = 2  # updates per end-to-end run (the first one includes model loading)
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

    def mixed():
        common.generate(model, tokenizer, [p for _, p in rows], [a for a, _ in rows], **gen)

    def per_agent():
        for a in names:
            model.set_adapter(a)
            common.generate(model, tokenizer, prompts, None, **gen)
        common.make_lora_trainable(model)  # set_adapter froze the other adapters

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
    t_mixed, t_per_agent = timed(mixed, args.repeats, device), timed(per_agent, args.repeats, device)
    t_ceiling = timed(decode_ceiling, args.repeats, device)
    return dict(agents=num_agents, rows=len(rows), tokens=tokens,
                mixed_tok_s=tokens / t_mixed["median"], per_agent_tok_s=tokens / t_per_agent["median"],
                ceiling_tok_s=tokens / t_ceiling["median"], speedup=t_per_agent["median"] / t_mixed["median"],
                fraction_of_ceiling=t_ceiling["median"] / t_mixed["median"],
                seconds=dict(mixed=t_mixed, per_agent=t_per_agent, ceiling=t_ceiling))


def bench_training_pass(args, model, tokenizer, num_agents, device):
    """3. padded batched log-prob forward + backward vs one completion at a time."""
    names = [f"agent{a}" for a in range(num_agents)]
    prompts = prompts_for(tokenizer, args.questions)
    adapters = [a for a in names for _ in prompts]
    torch.manual_seed(args.seed)
    rollout = common.generate(model, tokenizer, prompts * num_agents, adapters, max_new_tokens=args.max_new_tokens,
                              min_new_tokens=args.max_new_tokens, temperature=1.0)
    keys = ("query_ids", "query_mask", "response_ids", "response_mask")

    def batched_pass():
        out = common.forward_responses(model, *(rollout[k] for k in keys), adapters, 1.0)
        (-out["logprobs"].sum()).backward()

    def one_at_a_time():
        for i, adapter in enumerate(adapters):
            q = rollout["query_ids"][i][rollout["query_mask"][i].bool()][None]
            n = int(rollout["response_mask"][i].sum())
            r = rollout["response_ids"][i, :n][None]
            out = common.forward_responses(model, q, torch.ones_like(q), r, torch.ones_like(r).float(), [adapter], 1.0)
            (-out["logprobs"].sum()).backward()

    tokens = int(rollout["response_mask"].sum())
    t_batched, t_single = timed(batched_pass, args.repeats, device), timed(one_at_a_time, args.repeats, device)
    model.zero_grad(set_to_none=True)
    return dict(agents=num_agents, rows=len(adapters), tokens=tokens, batched_tok_s=tokens / t_batched["median"],
                one_at_a_time_tok_s=tokens / t_single["median"], speedup=t_single["median"] / t_batched["median"],
                seconds=dict(batched=t_batched, one_at_a_time=t_single))


# ---------------------------------------------------------------------------------------------- 4. memory


def memory_config_run(args):
    """Run one memory configuration (in its own subprocess) and print {"peak_mb": ...}. The configuration
    includes one training step (forward, backward, AdamW step) so optimiser state is allocated."""
    name, layout = args.memory_config.split("|")
    num_agents = int(args.agents.split(",")[-1])
    device = args.device or common.default_device()
    model, tokenizer = load(args, name)
    prompts = prompts_for(tokenizer, 2)
    query_ids, query_mask = common.tokenize_prompts(tokenizer, prompts, device)
    response_ids = torch.randint(0, 200, (2, args.max_new_tokens), device=device)
    response_mask = torch.ones(2, args.max_new_tokens, device=device)
    if layout == "full-copies":  # A full models, each trainable with its own AdamW
        copies = [model] + [copy.deepcopy(model) for _ in range(num_agents - 1)]
        for m in copies:
            for p in m.parameters():
                p.requires_grad_(True)
            optimizer = torch.optim.AdamW(m.parameters(), lr=1e-5)
            out = common.forward_responses(m, query_ids, query_mask, response_ids, response_mask, None)
            (-out["logprobs"].sum()).backward()
            optimizer.step()
    else:
        names = ["agent0"] if layout == "one-adapter" else [f"agent{a}_turn{t}" for a in range(num_agents)
                                                             for t in range(args.turns)]
        model = common.add_adapters(model, names + ([] if layout == "one-adapter" else ["critic"]), r=args.lora_r,
                                    alpha=2 * args.lora_r)
        heads = [] if layout == "one-adapter" else [common.ValueHead(common.hidden_size(model)).to(device)
                                                    for _ in range(args.turns)]
        optimizers = [torch.optim.AdamW(common.adapter_parameters(model, n), lr=1e-5) for n in names]
        if heads:
            optimizers.append(torch.optim.AdamW(common.adapter_parameters(model, "critic") +
                                                [p for h in heads for p in h.parameters()], lr=1e-5))
        out = common.forward_responses(model, query_ids, query_mask, response_ids, response_mask, names[:1] * 2,
                                       output_hidden=bool(heads))
        loss = -out["logprobs"].sum() + (sum(h(out["hidden"]).sum() for h in heads) if heads else 0)
        loss.backward()
        for optimizer in optimizers:
            optimizer.step()
    if str(device).startswith("cuda"):
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(json.dumps(dict(peak_mb=peak_mb)))


def bench_memory(args, name):
    results = {}
    for layout in ("one-adapter", "agent-turn-adapters", "full-copies"):
        cmd = [sys.executable, __file__, "--memory-config", f"{name}|{layout}", "--models", name,
               "--agents", args.agents, "--turns", str(args.turns), "--max-new-tokens", str(args.max_new_tokens),
               "--lora-r", str(args.lora_r), "--dtype", args.dtype, "--device", args.device,
               "--random-init" if args.random_init else "--no-random-init"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"memory run {layout} failed:\n{done.stderr[-2000:]}")
        results[layout] = json.loads(done.stdout.strip().splitlines()[-1])["peak_mb"]
    results["adapters_vs_one_adapter"] = results["agent-turn-adapters"] / results["one-adapter"]
    results["full_copies_vs_adapters"] = results["full-copies"] / results["agent-turn-adapters"]
    return results


# ---------------------------------------------------------------------------------------------- 5. end to end


def bench_end_to_end(args):
    """Seconds per update of the default cotrain.py / magrpo.py settings: two subprocess runs of
    `--num-updates 1` and `--num-updates 1 + end_to_end_updates`; the difference excludes start-up."""
    results = {}
    for script, steps_flag in (("cotrain.py", "--updates"), ("magrpo.py", "--steps")):
        times = []
        for updates in (1, 1 + args.end_to_end_updates):
            run_dir = Path(args.out_dir) / f"e2e-{script[:-3]}-{updates}-{time.strftime('%H%M%S')}"
            start = time.perf_counter()
            done = subprocess.run([sys.executable, script, steps_flag, str(updates), "--run-dir", str(run_dir)],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"{script} failed:\n{done.stderr[-2000:]}")
            times.append(time.perf_counter() - start)
        per_update = (times[1] - times[0]) / args.end_to_end_updates
        results[script] = dict(seconds_per_update=per_update, updates_per_hour=3600 / per_update,
                               first_run_seconds=times[0])
    return results


# ---------------------------------------------------------------------------------------------- main


def main(args):
    if args.memory_config:
        return memory_config_run(args)
    device = args.device or common.default_device()
    common.seed_everything(args.seed)
    report = dict(device=device, machine=torch.cuda.get_device_name() if device.startswith("cuda") else
                  f"{torch.get_num_threads()} CPU threads", torch=torch.__version__,
                  date=time.strftime("%Y-%m-%d"), args=dataclasses.asdict(args), models={})
    for name in args.models.split(","):
        print(f"== {name}")
        model, tokenizer = load(args, name)
        model = common.add_adapters(model, [f"agent{a}" for a in range(max(common.parse_int_list(args.agents, "--agents")))],
                                    r=args.lora_r, alpha=2 * args.lora_r)
        with torch.no_grad():  # non-zero adapters, so every row really runs its own LoRA
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(std=0.01)
        entry = dict(rollout=[], training=[])
        for num_agents in common.parse_int_list(args.agents, "--agents"):
            entry["rollout"].append(bench_rollout(args, model, tokenizer, num_agents, device))
            entry["training"].append(bench_training_pass(args, model, tokenizer, num_agents, device))
            r, t = entry["rollout"][-1], entry["training"][-1]
            print(f"A={num_agents} rollout: mixed {r['mixed_tok_s']:.0f} tok/s, per-agent {r['per_agent_tok_s']:.0f} "
                  f"tok/s (x{r['speedup']:.2f}); ceiling {r['ceiling_tok_s']:.0f} tok/s "
                  f"({100 * r['fraction_of_ceiling']:.0f}%) | training: batched {t['batched_tok_s']:.0f} tok/s, "
                  f"one-at-a-time {t['one_at_a_time_tok_s']:.0f} tok/s (x{t['speedup']:.2f})")
        del model
        entry["memory_mb"] = bench_memory(args, name)
        m = entry["memory_mb"]
        print(f"memory (peak MB): 1 adapter {m['one-adapter']:.0f}, A x T adapters + heads "
              f"{m['agent-turn-adapters']:.0f} (x{m['adapters_vs_one_adapter']:.2f}), A full copies + AdamW "
              f"{m['full-copies']:.0f} (x{m['full_copies_vs_adapters']:.2f} of the adapters)")
        report["models"][name] = entry
    if not args.skip_end_to_end:
        report["end_to_end"] = bench_end_to_end(args)
        print("end to end:", json.dumps(report["end_to_end"]))
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    common.atomic_write_text(out / "bench.json", json.dumps(report, indent=2))
    print(f"wrote {out / 'bench.json'}")


if __name__ == "__main__":
    main(parse_args(Args))
