"""What a split debate's partner hears: per printed update of a run's samples.jsonl, how many turn-1
messages carry the speaker's own number in their first sentence (the part followup_message
quotes), how many anywhere, and how many begin "My number is"; and how many questions' K debates
end differently at the last turn (which agents are right): the groups whose last-turn scores give
an advantage that is not 0 (the incentives of Tables 1-2 can move the others a little).

    python docs/results/split_heard.py docs/results/maporl-split/s0-narrow-samples.jsonl
"""
import json
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from nanomarl.split_controls import carries_number  # noqa: E402
from nanomarl.tasks.debate_prompts import first_sentence  # noqa: E402

if __name__ == "__main__":
    counts = Counter()
    endings = {}  # (update, question): the last turn's correct, row by row (debate, agent)
    rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
    last_turn = max(row["turn"] for row in rows)
    for row in rows:
        if row["turn"] == last_turn:
            endings.setdefault((row["step"], row["question"]), []).append(row["correct"])
        if row["turn"] != 1:
            continue
        own = int(re.search(r"Your number is (\d+)\.", row["prompt"]).group(1))
        heard = first_sentence(row["response"])
        counts[row["step"], "messages"] += 1
        counts[row["step"], "number heard"] += carries_number(heard, own)
        counts[row["step"], "number anywhere"] += carries_number(row["response"], own)
        counts[row["step"], "begins 'My number is'"] += heard.startswith("My number is")
    num_agents = len({row["agent"] for row in rows})
    for (step, _), correct in endings.items():
        counts[step, "questions"] += 1
        debates = {tuple(correct[i:i + num_agents]) for i in range(0, len(correct), num_agents)}
        counts[step, "questions whose debates end differently"] += len(debates) > 1
    for step in sorted({step for step, _ in counts}):
        print(f"update {step}:", ", ".join(f"{key} {n}" for (s, key), n in counts.items()
                                           if s == step))
