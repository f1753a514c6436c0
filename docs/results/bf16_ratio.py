"""bf16_ratio.py: PPO's first-epoch ratio below fp32, π_old as sampled against π_old recomputed.

With the weights unchanged (lr 0) every minibatch of cotrain.py's first PPO epoch should see a ratio
of exactly 1. For each setting this runs one rollout (2 questions x 2 debates, 2 agents x 2 turns)
and one epoch of cotrain.ppo_update in 2 minibatches, and prints the largest |log ratio| over all
tokens and minibatches, and the mean over tokens.

    python docs/results/bf16_ratio.py --model smollm2-135m                  # CPU
    python docs/results/bf16_ratio.py --model tiny --device cuda
    python docs/results/bf16_ratio.py --random-init-from DIR --device cuda  # DIR: config + tokenizer
"""
import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
import cotrain  # noqa: E402
from nanomarl.cli import parse_args  # noqa: E402
from nanomarl.cotrain_run import settle_args  # noqa: E402
from nanomarl.tasks.debate import load_task  # noqa: E402


def random_model(source: str) -> str:
    """A folder with source's config and tokenizer and random bf16 weights (seed 0)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = Path(tempfile.mkdtemp()) / "random"
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder),
                                             dtype=torch.bfloat16)
    model.save_pretrained(folder)
    return str(folder)


def first_epoch(model: str, device: str, dtype: str, mode: str, micro: int, tokens: int) -> dict:
    args, _ = settle_args(parse_args(cotrain.Args, [
        "--model", model, "--device", device, "--dtype", dtype, "--old-logprobs", mode,
        "--questions-per-update", "2", "--samples-per-question", "2", "--ppo-epochs", "1",
        "--minibatch-questions", "2", "--micro-batch-questions", str(micro),
        "--max-new-tokens", str(tokens), "--sample-every", "0", "--log-every", "0",
        "--eval-questions", "0"]))
    args.lr = 0.0  # every minibatch sees the policy that sampled
    torch.manual_seed(0)
    team = cotrain.build_team(args, device)
    records = [r for r in load_task("arith:digits", "train", limit=2) for _ in range(2)]
    scorer = lambda recs, texts: torch.rand(len(texts))  # noqa: E731 (any reward will do)
    _, exp, _ = cotrain.rollout_step(team, args, records, scorer)
    stats = cotrain.ppo_update(team, exp, args)
    rows = [s for key in exp for s in stats[key]]
    tokens = sum(float(s["tokens"]) for s in rows)
    return dict(model=model, device=device, dtype=dtype, old_logprobs=mode, micro_batch=micro,
                max_abs_logratio=max(float(s["max_abs_logratio"]) for s in rows),
                approxkl_per_token=sum(float(s["approxkl"]) for s in rows) / tokens)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--random-init-from", default="", help="a folder: config and tokenizer")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtypes", default="bfloat16")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    opts = parser.parse_args()
    model = random_model(opts.random_init_from) if opts.random_init_from else opts.model
    for dtype in opts.dtypes.split(","):
        for mode in ("sampling", "recompute"):
            for micro in (1, 2):
                print(json.dumps(first_epoch(model, opts.device, dtype, mode, micro,
                                             opts.max_new_tokens)), flush=True)


if __name__ == "__main__":
    main()
