"""The untrained team on arith:split's TRAINING split with the task's own messages, sampled at each
temperature given (default 0.7): the per-turn accuracy that says whether RL has something to climb
(>= 5 % at the last turn), and how often a message carries its agent's number. Never the held-out
questions.

    python docs/results/split_prompt_probe.py 0.7 0.3
    python docs/results/split_prompt_probe.py relay-view 0.3   # turn 1 as in the second format
    python docs/results/split_prompt_probe.py ask-view 0.3     # turn 1: the number, then a question

A partner is heard up to its first full stop (followup_message); before the fourth format the
whole message was quoted (commit d5fcb81 and earlier: `git checkout d5fcb81` to probe that).
"""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import cotrain  # noqa: E402
from nanomarl.split_controls import informative_rates  # noqa: E402
import nanomarl.tasks.debate as debate  # noqa: E402
from common import load_model  # noqa: E402
from nanomarl.models import load_tokenizer  # noqa: E402

# the second format's turn-1 message (commit e04d38a)
RELAY_VIEW = ("You and your partner each hold one number; together you must find {goal}. Your "
              "number is {own}. Your partner knows the other number. First tell your partner: "
              "reply with one sentence, \"My number is {own}.\"")
# a turn-1 message that starts like the first format's but asks instead of answering
ASK_VIEW = ("You and your partner each hold one number; together you must find {goal}. Your "
            "number is {own}. Your partner knows the other number. Start with \"My number is "
            "{own}.\" Then ask your partner for their number.")
VIEWS = {"relay-view": RELAY_VIEW, "ask-view": ASK_VIEW}


if __name__ == "__main__":
    for name in [a for a in sys.argv[1:] if a in VIEWS]:
        sys.argv.remove(name)
        debate.SPLIT_VIEW = VIEWS[name]
    torch.set_num_threads(2)
    model, tok = load_model("smollm2-135m"), load_tokenizer("smollm2-135m")
    questions = list({r["question"]: r for r in debate.load_task("arith:split", "train", limit=400,
                                                                  seed=5)}.values())[:16]
    rows = [r for r in questions for _ in range(4)]  # 4 sampled debates per question
    for temperature in [float(x) for x in sys.argv[1:]] or [0.7]:
        torch.manual_seed(0)
        t0 = time.time()
        played = cotrain.run_debate(rows, [model] * 2, [tok] * 2, [["__base__"] * 2] * 2, 40,
                                    temperature=temperature, prompt_style="short")
        accuracy = [round(float(played.correct[:, t, :].mean()), 3) for t in range(2)]
        informative = [round(rate, 3) for rate in informative_rates(played, rows)]
        print(f"sampled at T {temperature}, training split, 16 questions x 4: per-turn accuracy "
              f"{accuracy}, informative {informative} ({time.time() - t0:.0f} s)")
        print("  e.g.", [played.responses[0][t][0] for t in range(2)])  # question 0, agent 0
