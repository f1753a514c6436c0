"""The untrained team on arith:split's TRAINING split with its turn-1 view (the message format
"My number is N.", probed here first), sampled: the per-turn accuracy that says whether RL has
something to climb (>= 5 % at the last turn). Never the held-out questions.

    python docs/results/split_prompt_probe.py
"""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import cotrain  # noqa: E402
import nanomarl.tasks.debate as debate  # noqa: E402
from common import load_model  # noqa: E402
from nanomarl.models import load_tokenizer  # noqa: E402

if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model, tok = load_model("smollm2-135m"), load_tokenizer("smollm2-135m")
    questions = list({r["question"]: r for r in debate.load_task("arith:split", "train", limit=400,
                                                                  seed=5)}.values())[:16]
    rows = [r for r in questions for _ in range(4)]  # 4 sampled debates per question
    t0 = time.time()
    played = cotrain.run_debate(rows, [model] * 2, [tok] * 2, [["__base__"] * 2] * 2, 40,
                                temperature=0.7, prompt_style="short")
    accuracy = [round(float(played["correct"][:, t, :].mean()), 3) for t in range(2)]
    print(f"sampled at T 0.7, training split, 16 questions x 4: per-turn accuracy {accuracy} "
          f"({time.time() - t0:.0f} s)")
