"""Can the untrained base read a partner's number? One user message per agent (no debate), the
partner's message given as the true "My number is N.", on arith:split's TRAINING split (32
questions x 2 agents): accuracy greedy and sampled (two draws) at TEMPERATURE (default 0.7). The
formats differ only in how the two numbers and the instruction are worded; `followup` is the task's
own later-turn message (nanomarl/tasks/debate.py SPLIT_FOLLOWUP). Never the held-out questions.

    python docs/results/split_reading_probe.py ceiling stated quoted followup
    TEMPERATURE=0.3 python docs/results/split_reading_probe.py ceiling stated followup
"""
import os
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from common import chat_prompt, extract_answer, generate, load_model  # noqa: E402
from nanomarl.models import load_tokenizer  # noqa: E402
from nanomarl.tasks.split import SPLIT_GOALS, arith_split_records  # noqa: E402
from nanomarl.tasks.debate_prompts import followup_message  # noqa: E402

END = " Show the calculation, then end with \"The answer is\" and the number."
TEMPERATURE = float(os.environ.get("TEMPERATURE", "0.7"))


def goal(r: dict) -> str:
    return SPLIT_GOALS["sum" if "sum" in r["question"] else "difference"].format(count="two")


FORMATS = {  # name: the message of the agent holding `own`, its partner holding `other`
    "ceiling": lambda r, a, own, other: r["question"] + END,  # both numbers as the task states them
    "stated": lambda r, a, own, other: (f"Your number is {own}. Your partner's number is {other}. "
                                        f"Find {goal(r)}." + END),
    "quoted": lambda r, a, own, other: (f"Your number is {own}. Your partner says: \"My number is "
                                        f"{other}.\" Find {goal(r)}." + END),
    "numbers": lambda r, a, own, other: (f"You have {own}. Your partner has {other}. Find "
                                         f"{goal(r)}." + END),
    "both-quoted": lambda r, a, own, other: (f"Agent 1 says: \"My number is {own}.\" Agent 2 says: "
                                             f"\"My number is {other}.\" Find {goal(r)}." + END),
    "followup": lambda r, a, own, other: followup_message(r, a, [f"My number is {other}."]),
}

if __name__ == "__main__":
    torch.set_num_threads(2)
    model, tok = load_model("smollm2-135m"), load_tokenizer("smollm2-135m")
    records = arith_split_records(400, "train", seed=5)
    records = list({r["question"]: r for r in records}.values())[:32]
    for name in sys.argv[1:] or list(FORMATS):
        random.seed(0)
        torch.manual_seed(0)
        rows = [chat_prompt(tok, [{"role": "user", "content": FORMATS[name](
                    r, a, r["parts"][a], r["parts"][1 - a])}]) for r in records for a in range(2)]
        golds = [r["answer"] for r in records for _ in range(2)]
        kinds = ["sum" if "sum" in r["question"] else "difference"
                 for r in records for _ in range(2)]
        t0 = time.time()
        out = {}
        for mode, draws in (("greedy", 1), ("sampled", 2)):
            right = {"sum": [], "difference": []}
            for _ in range(draws):
                g = generate(model, tok, rows, None, 40, temperature=TEMPERATURE,
                             greedy=mode == "greedy")
                for i in range(len(rows)):
                    text = tok.decode(g["response_ids"][i][g["response_mask"][i].bool()],
                                      skip_special_tokens=True)
                    right[kinds[i]].append(extract_answer(text, "math") == golds[i])
            every = right["sum"] + right["difference"]
            out[mode] = (f"{sum(every) / len(every):.3f} (sums "
                         f"{sum(right['sum']) / len(right['sum']):.2f}, differences "
                         f"{sum(right['difference']) / len(right['difference']):.2f})")
        print(f"{name} at T {TEMPERATURE}: greedy {out['greedy']}, sampled {out['sampled']} "
              f"({time.time() - t0:.0f} s)", flush=True)
