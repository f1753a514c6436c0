"""Other message formats for arith:split, probed on the TRAINING split like split_prompt_probe.py:
the untrained team, sampled at T 0.7, 16 training questions x 4 debates, 40 tokens, two threads.
Each format replaces the turn-1 view, the turn-2 message, or both; never the held-out questions.

    python docs/results/split_format_probe.py current compact relay relay-quoted

current: the task's own view and the 'short' discussion message. compact: the same view; turn 2
shows the partner's words and the view, no instruction to check solutions. relay: turn 1 only tells
the number ("Tell your partner your number in one short sentence."), turn 2 asks for the answer.
relay-quoted: relay with the sentence to say quoted ("My number is 7."). oracle: the task's format,
but every partner message at turn 2 is exactly "My number is N." with the partner's true number (a
perfect channel: what the reader does with it). numbers-first: turn 1 asks for "My number is N.", then
"The numbers are N, " and the partner's number, then the calculation. relay-fill: relay-quoted whose
turn 2 asks for "The numbers are N, " and the partner's number first.
"""
import os
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import cotrain  # noqa: E402
import nanomarl.tasks.debate as debate  # noqa: E402
from common import load_model  # noqa: E402
from nanomarl.models import load_tokenizer  # noqa: E402

SHARED = ("You and your partner each hold one number; together you must find {goal}. "
          "Your number is {own}. Your partner knows the other number.")
FORMATS = {  # name: (turn-1 view, turn-1 instruction after it, turn-2 message); None: the task's
    "current": (None, None, None),
    "compact": (None, None, "Your partner says: {said}\n{question}"),
    "relay": (SHARED, "\nTell your partner your number in one short sentence.",
              "Your partner says: {said}\n{question} Use your number and your partner's number. "
              "End with \"The answer is\" and the number."),
    "oracle": (None, None, "oracle"),
    "numbers-first": (SHARED + " Start with \"My number is {own}.\" Then write \"The numbers are "
                      "{own}, \" and your partner's number, and compute the answer.", None, None),
    "relay-fill": (SHARED + " First tell your partner: reply with one sentence, \"My number is "
                   "{own}.\"", "",
                   "Your partner says: {said}\nNow find {goal}. First write \"The numbers are {own}, "
                   "\" and your partner's number, then show the calculation and end with \"The "
                   "answer is\" and the number."),
    "relay-quoted": (SHARED + " First tell your partner: reply with one sentence, \"My number is "
                     "{own}.\"", "",
                     "Your partner says: {said}\nNow find {goal} from your number and your "
                     "partner's number. Show the calculation, then end with \"The answer is\" and "
                     "the number."),
}
TEMPERATURE = float(os.environ.get("TEMPERATURE", "0.7"))  # TEMPERATURE=0.3 python ...: another T
TASK_VIEW = debate.SPLIT_VIEW
TASK_TURN1 = cotrain.turn1_prompt
TASK_MESSAGE = cotrain.discussion_message
TASK_QUESTION = cotrain.agent_question


def use_format(name: str):
    """Patch the view, the turn-1 prompt and the turn-2 message of cotrain.run_debate."""
    view, instruction, message = FORMATS[name]
    debate.SPLIT_VIEW = view or TASK_VIEW
    cotrain.agent_question = TASK_QUESTION
    if message == "oracle":  # the partner's number rides on the question, after a NUL
        cotrain.agent_question = lambda r, a: f"{r['views'][a]}\0{r['parts'][1 - a]}"
        cotrain.turn1_prompt = lambda question, task, style: TASK_TURN1(question.split("\0")[0],
                                                                        task, style)
        cotrain.discussion_message = lambda question, others, **kw: TASK_MESSAGE(
            question.split("\0")[0], [(j, f"My number is {question.split(chr(0))[1]}.")
                                       for j, _ in others], **kw)
        return
    cotrain.turn1_prompt = (TASK_TURN1 if instruction is None
                            else lambda question, task, style="short": question + instruction)

    def turn2(question, other_answers, **unused):
        said = "".join(f"```{answer}```" for _, answer in other_answers)
        goal = re.search(r"must find (.*?)\. Your number", question).group(1)
        own = re.search(r"Your number is (\d+)", question).group(1)
        return message.format(said=said, question=question, goal=goal, own=own)
    cotrain.discussion_message = TASK_MESSAGE if message is None else turn2


if __name__ == "__main__":
    torch.set_num_threads(2)
    model, tok = load_model("smollm2-135m"), load_tokenizer("smollm2-135m")
    for name in sys.argv[1:] or ["current"]:
        use_format(name)
        torch.manual_seed(0)
        records = debate.load_task("arith:split", "train", limit=400, seed=5)
        questions = list({r["question"]: r for r in records}.values())[:16]
        rows = [r for r in questions for _ in range(4)]
        t0 = time.time()
        played = cotrain.run_debate(rows, [model] * 2, [tok] * 2, [["__base__"] * 2] * 2, 40,
                                    temperature=TEMPERATURE, prompt_style="short")
        accuracy = [round(float(played["correct"][:, t, :].mean()), 3) for t in range(2)]
        prompt = [round(float(played["rollout"][t][0]["query_mask"].sum(1).float().mean()))
                  for t in range(2)]
        print(f"{name}: per-turn accuracy {accuracy}, prompt tokens {prompt} "
              f"({time.time() - t0:.0f} s)")
