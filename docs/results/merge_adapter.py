"""merge_adapter.py: one trained agent's LoRA adapter folded into its base, saved as a model folder.

A heterogeneous team needs two different bases; offline there is one real model. Folding a
trained agent's adapter into it gives a second, stronger base that `cotrain.py --models` loads
like any model folder (config.json, safetensors, tokenizer):

  python docs/results/merge_adapter.py runs/default-s0/adapters/agent1 runs/strong-s0
  python cotrain.py --models runs/strong-s0,smollm2-135m --train-turns 2

The adapter's base is the one its agent trained on: debate.json's model of the agent whose adapter
folder holds it (a cotrain.py run, --models included), else args.json's --model (magrpo.py);
refused when adapter_config.json names another base.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from common import load_model  # noqa: E402
from nanomarl.models import (base_model_id, load_adapters, load_tokenizer,  # noqa: E402
                             resolve_model)


def same_model(a: str, b: str) -> bool:
    """Two names of one model: equal, or paths to the same folder."""
    return a == b or (Path(a).exists() and Path(b).exists()
                      and Path(a).resolve() == Path(b).resolve())


def adapter_base(adapter: Path) -> str:
    """The base model the adapter in folder `adapter` (RUN/<adapters folder>/<name>) trained on,
    as its run names it; SystemExit when the run and the adapter's config disagree."""
    run = adapter.parents[1]
    if (run / "debate.json").exists():
        info = json.loads((run / "debate.json").read_text())
        bases = {info["models"][a] for a in range(len(info["models"]))
                 if info["adapter_dirs"][a] == adapter.parent.name
                 and any(turn[a] == adapter.name for turn in info["adapters"])}
        if len(bases) != 1:
            raise SystemExit(f"error: {run / 'debate.json'} gives {adapter.parent.name}/"
                             f"{adapter.name} {len(bases)} bases ({', '.join(sorted(bases))})")
        base = bases.pop()
    else:
        base = json.loads((run / "args.json").read_text())["model"]
    named = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    if not same_model(base_model_id(resolve_model(base)), named):
        raise SystemExit(f"error: {adapter} was saved on the base {named}, but its run names "
                         f"{base}: merge it by hand onto the right one")
    return base


def merge_adapter(adapter_dir: str, out_dir: str) -> None:
    """Save base + adapter (W + B A alpha / r in every adapted layer) to out_dir, with the
    adapter folder's tokenizer."""
    adapter = Path(adapter_dir)
    if not (adapter / "adapter_config.json").exists():
        raise SystemExit(f"error: {adapter} holds no adapter_config.json")
    base = adapter_base(adapter)
    merged = load_adapters(load_model(base), adapter.parent, [adapter.name]).merge_and_unload()
    merged.save_pretrained(out_dir)
    load_tokenizer(str(adapter)).save_pretrained(out_dir)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    merge_adapter(sys.argv[1], sys.argv[2])
