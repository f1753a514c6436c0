"""A magrpo.py arith:split run's team on every problem of the test split, greedy, with the controls
(magrpo.py's own held-out evaluation, magrpo.evaluate_team): its metrics (metrics.jsonl) and its
answers per problem (eval_samples.jsonl, with its checkpoint's step) in OUT; --base: the untrained
team (both seats the base model, step 0) instead. The run's settings (args.json, or after a resume
args_resume.json): its model, dtype, quantisation, threads, tokens and sampling fast paths. For a
run whose in-training evaluation held fewer problems than the split (--eval-problems below 114).

    python docs/results/magrpo_split_test.py RUN OUT [--base] [--limit N: the first N problems]
        [--dataset arith:split-w1:test: the test split in other words; arith:split:test unless]
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import magrpo  # noqa: E402
from common import load_model  # noqa: E402
from nanomarl.models import load_adapters, load_tokenizer  # noqa: E402
from nanomarl.runs import checkpoint_step, set_torch_threads  # noqa: E402

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a magrpo.py run on arith:split")
    parser.add_argument("out", type=Path, help="the folder to write")
    parser.add_argument("--base", action="store_true", help="the untrained team instead")
    parser.add_argument("--limit", type=int, default=None, help="the first N problems only")
    parser.add_argument("--dataset", default="arith:split:test",
                        help="the held-out problems (arith:split-w1:test: the test split in w1)")
    cli = parser.parse_args()
    if not (cli.dataset.startswith("arith:split") and cli.dataset.endswith(":test")):
        sys.exit(f"--dataset: {cli.dataset}: a test split of arith:split or its wordings")
    run, out, base = cli.run, cli.out, cli.base
    settings = run / "args_resume.json"
    saved = json.loads((settings if settings.is_file() else run / "args.json").read_text())
    args = magrpo.Args(**{k: v for k, v in saved.items() if k in magrpo.Args.__dataclass_fields__})
    if not args.dataset.startswith("arith:split") or args.full_finetune:
        sys.exit(f"{run}: not a LoRA run on arith:split ({args.dataset})")
    print(set_torch_threads(args.threads))
    model = load_adapters(load_model(args.model, args.dtype, args.quant), run / "adapters")
    tokenizer = load_tokenizer(args.model)
    problems = magrpo.load_problems(cli.dataset, "eval", cli.limit)
    task = magrpo.make_task(args, "split")
    step = 0 if base else checkpoint_step(run / "checkpoint.pt")
    names = ["__base__"] * 2 if base else ["agent0", "agent1"]
    out.mkdir(parents=True, exist_ok=True)
    team = magrpo.Agents(models=[model, model], names=names)
    metrics = magrpo.evaluate_team(team, tokenizer, problems, task, args, out, step)
    with open(out / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": step, **metrics}) + "\n")
    print(f"{run} ({'untrained' if base else 'trained'}), {len(problems)} test problems of "
          f"{cli.dataset}: turn 2 "
          f"{metrics['eval/turn2/agent_accuracy']:.3f}, bound "
          f"{metrics['eval/no_information_bound']:.3f}, silent "
          f"{metrics['eval/silent/turn2/agent_accuracy']:.3f}, oracle "
          f"{metrics['eval/oracle/turn2/agent_accuracy']:.3f}", flush=True)
