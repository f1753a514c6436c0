"""One MAGRPO update timed with --fast (each distinct prompt forwarded once:
nanomarl/fast.py:shared_prefix_forward) against --no-fast (common.forward_responses), side by side:
one rollout of a recipe, then magrpo_update on those trees alternately with each choice, every time
from the same adapters and optimiser states. Prints the median seconds of each and their ratio, and
the largest difference between the two choices' metrics of the first pair.

    python docs/results/magrpo_update_timing.py --config recipes/magrpo-split.yaml --threads 2
"""
import copy
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import magrpo  # noqa: E402
from nanomarl.cli import parse_args  # noqa: E402
from nanomarl.models import load_tokenizer  # noqa: E402
from nanomarl.distributed import seed_everything  # noqa: E402
from nanomarl.runs import set_torch_threads  # noqa: E402


def main():
    repeats = 3
    if "--repeats" in sys.argv:
        at = sys.argv.index("--repeats")
        repeats, sys.argv[at:at + 2] = int(sys.argv[at + 1]), []
    args = parse_args(magrpo.Args)
    print(set_torch_threads(args.threads))
    problems = magrpo.load_problems(args.dataset, "train", args.train_limit)
    task = magrpo.make_task(args, problems[0]["kind"])
    seed_everything(args.seed)
    tokenizer = load_tokenizer(args.model)
    agents = magrpo.build_agents(args, "cpu")
    roots, batches = magrpo.rollout(agents, tokenizer, problems[:args.problems_per_step], task,
                                    args)
    rows = sum(b["response_mask"].shape[0] for turn in batches for b in turn)
    print(f"{args.dataset}: {args.problems_per_step} trees, {rows} rows in all")
    start = [copy.deepcopy(p.detach()) for params in agents.params for p in params]
    states = [copy.deepcopy(o.state_dict()) for o in agents.optimizers]
    seconds, metrics = {True: [], False: []}, {}
    for _ in range(repeats):
        for fast in (True, False):
            with torch.no_grad():
                for p, saved in zip((p for ps in agents.params for p in ps), start):
                    p.copy_(saved)
            for optimizer, state in zip(agents.optimizers, states):
                optimizer.load_state_dict(copy.deepcopy(state))
            t0 = time.perf_counter()
            out = magrpo.magrpo_update(agents, copy.deepcopy(roots), batches,
                                       dataclasses.replace(args, fast=fast))
            seconds[fast].append(time.perf_counter() - t0)
            metrics.setdefault(fast, out)
    fast, plain = statistics.median(seconds[True]), statistics.median(seconds[False])
    print(f"update --fast {fast:.1f} s, --no-fast {plain:.1f} s (medians of {repeats}): "
          f"x{plain / fast:.2f}")
    gap = max(abs(metrics[True][k] - metrics[False][k]) for k in metrics[True])
    print(f"largest difference of the first pair's metrics: {gap:.2e}")


if __name__ == "__main__":
    main()
