"""merge_adapter.py: one trained agent's LoRA adapter folded into its base, saved as a model folder.

A heterogeneous team needs two different bases; offline there is one real model. Folding a
trained agent's adapter into it gives a second, stronger base that `cotrain.py --models` loads
like any model folder (config.json, safetensors, tokenizer):

  python docs/results/merge_adapter.py runs/default-s0/adapters/agent1 runs/strong-s0
  python cotrain.py --models runs/strong-s0,smollm2-135m --train-turns 2

The adapter's base is the one its run trained on (args.json's --model, two folders up).
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from common import load_model  # noqa: E402
from nanomarl.models import load_adapters, load_tokenizer  # noqa: E402


def merge_adapter(adapter_dir: str, out_dir: str) -> None:
    """Save base + adapter (W + B A alpha / r in every adapted layer) to out_dir, with the
    adapter folder's tokenizer."""
    adapter = Path(adapter_dir)
    if not (adapter / "adapter_config.json").exists():
        raise SystemExit(f"error: {adapter} holds no adapter_config.json")
    base = json.loads((adapter.parents[1] / "args.json").read_text())["model"]
    merged = load_adapters(load_model(base), adapter.parent, [adapter.name]).merge_and_unload()
    merged.save_pretrained(out_dir)
    load_tokenizer(str(adapter)).save_pretrained(out_dir)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    merge_adapter(sys.argv[1], sys.argv[2])
