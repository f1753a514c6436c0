"""A magrpo.py arith:split run's team on every problem of the test split, greedy, with the controls
(magrpo.py's own held-out evaluation, magrpo.evaluate_team): its metrics (metrics.jsonl) and its
answers per problem (eval_samples.jsonl, with the run's last step) in OUT; --base: the untrained
team (both seats the base model, step 0) instead. For a run whose in-training evaluation held fewer
problems than the split (--eval-problems below its 114).

    python docs/results/magrpo_split_test.py RUN OUT [--base]
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import magrpo  # noqa: E402
from common import load_model  # noqa: E402
from nanomarl.models import load_adapters, load_tokenizer  # noqa: E402

if __name__ == "__main__":
    run, out, base = Path(sys.argv[1]), Path(sys.argv[2]), "--base" in sys.argv[3:]
    torch.set_num_threads(2)
    saved = json.loads((run / "args.json").read_text())
    args = magrpo.Args(**{k: v for k, v in saved.items() if k in magrpo.Args.__dataclass_fields__})
    if not args.dataset.startswith("arith:split"):
        sys.exit(f"{run}: a run on {args.dataset}, not arith:split")
    model = load_adapters(load_model(args.model), run / "adapters")
    tokenizer = load_tokenizer(args.model)
    problems = magrpo.load_problems("arith:split:test", "eval", None)
    task = magrpo.make_task(args, "split")
    names, step = (["__base__"] * 2, 0) if base else (["agent0", "agent1"], args.max_steps)
    out.mkdir(parents=True, exist_ok=True)
    team = magrpo.Agents(models=[model, model], names=names)
    metrics = magrpo.evaluate_team(team, tokenizer, problems, task, args, out, step)
    with open(out / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": step, **metrics}) + "\n")
    print(f"{run} ({'untrained' if base else 'trained'}), {len(problems)} test problems: turn 2 "
          f"{metrics['eval/turn2/agent_accuracy']:.3f}, bound "
          f"{metrics['eval/no_information_bound']:.3f}, silent "
          f"{metrics['eval/silent/turn2/agent_accuracy']:.3f}, oracle "
          f"{metrics['eval/oracle/turn2/agent_accuracy']:.3f}", flush=True)
