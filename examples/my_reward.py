"""examples/my_reward.py: your own reward for cotrain.py and magrpo.py, from the command line (--reward-fn).

--reward-fn MODULE:FUNCTION names a function in a .py file (examples/my_reward.py:correct_and_brief) or in a dotted
module importable from the working directory (examples.my_reward:correct_and_brief). It is imported before any
model loads; a bad spec stops the run with `error: --reward-fn: ...`.

cotrain.py (MAPoRL) wants a SCORER: fn(records, responses) -> one score in [0, 1] per response.
  records[i]   the question's record: {"question", "answer" (the normalised gold), "task" ('math' | 'nli'), "id",
               and every other field of the dataset row}
  responses[i] the agent's response to records[i] (a string); every agent's and every turn's responses are scored
  The scores replace --scorer; they are what the influence-aware reward (Definition 1) averages. The built-in
  format and missing-EOS penalties and the collaboration incentives (Tables 1-2) are OFF with your scorer, unless
  you add --reward-fn-rules. The run prints which.

    python cotrain.py --model tiny --max-steps 2 --reward-fn examples/my_reward.py:correct_and_brief

magrpo.py (MAGRPO) wants a JOINT REWARD: fn(problem, completions) -> reward, or (reward, levels).
  problem      the problem dict of --dataset (e.g. {"id", "kind": "tldr", "text"} or a coding problem)
  completions  one completion per agent, in role order (len == --num-agents)
  levels       optional dict of named parts of the reward, logged as reward/<name> (the same keys every call)
  It replaces the task's reward; the prompts (and multi-turn feedback) stay the task's. --reward-shift
  still applies.

    python magrpo.py --model tiny --dataset pipeline --num-agents 3 --max-steps 2 --reward-fn examples/my_reward.py:distinct_and_short
"""
from common import extract_answer


def correct_and_brief(records: list[dict], responses: list[str]) -> list[float]:
    """cotrain.py scorer: 1 for the right final answer (\\boxed{} or 'the answer is'), minus up to 0.5 for length
    (0 below 50 words, 0.5 at 250 words or more); 0 for a wrong or missing answer."""
    scores = []
    for record, response in zip(records, responses):
        correct = extract_answer(response, record["task"]) == record["answer"]
        words = len(response.split())
        length_cost = 0.5 * min(1.0, max(0, words - 50) / 200)
        scores.append(1.0 - length_cost if correct else 0.0)
    return scores


def distinct_and_short(problem: dict, completions: list[str]) -> tuple[float, dict]:
    """magrpo.py joint reward for any number of agents: each agent writes something short (1 to 80 words), and the
    agents do not repeat each other (1 - the mean Jaccard overlap of their word sets over all pairs). Max 2.0."""
    words = [set(text.lower().split()) for text in completions]
    short = sum(1 <= len(text.split()) <= 80 for text in completions) / len(completions)
    pairs = [(i, j) for i in range(len(words)) for j in range(i + 1, len(words))]
    overlap = sum(len(words[i] & words[j]) / max(1, len(words[i] | words[j])) for i, j in pairs) / max(1, len(pairs))
    distinct = 1.0 - overlap if all(words) else 0.0
    return short + distinct, {"short": short, "distinct": distinct}
