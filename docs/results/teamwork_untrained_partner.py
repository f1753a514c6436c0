"""Each trained teamwork agent beside an untrained partner (the base model, no adapter) on the
held-out pairs, greedy, scored as magrpo.py's own evaluation: which agent learned to deviate?

    python docs/results/teamwork_untrained_partner.py RUN [RUN ...]
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
    torch.set_num_threads(2)
    for run in sys.argv[1:]:
        saved = json.loads((Path(run) / "args.json").read_text())
        fields = magrpo.Args.__dataclass_fields__
        args = magrpo.Args(**{k: v for k, v in saved.items() if k in fields})
        model = load_adapters(load_model(args.model), Path(run) / "adapters")
        tokenizer = load_tokenizer(args.model)
        problems = magrpo.load_problems(args.dataset, "eval", args.eval_problems)
        task = magrpo.make_task(args, problems[0]["kind"])
        for names in (["agent0", "agent1"], ["__base__", "agent1"], ["agent0", "__base__"],
                      ["__base__", "__base__"]):
            team = magrpo.Agents(models=[model, model], names=names)
            metrics = magrpo.evaluate_team(team, tokenizer, problems, task, args)
            print(f"{run}: seat 1 {names[0]}, seat 2 {names[1]}: pass rate "
                  f"{metrics['eval/pass_rate']:.3f}, reward {metrics['eval/reward/mean']:.3f}",
                  flush=True)
