"""vote.py: the debate's majority vote with the authors' tie rule (MAPoRL Sec. 4.1). common.py's
debate metrics, cotrain's rollout metrics and the self-consistency control read it."""
from __future__ import annotations

from collections import Counter


def majority_vote_accuracy(answers: list[str | None], gold: str) -> float:
    """Majority vote with tie expectation (MAPoRL Sec. 4.1; the authors' `stat_all`).

    The tie set is the answers with the top vote count. An unparsable answer (None) leaves the tie
    set when other answers are in it. Score = 1/|tie set| if the gold is in the tie set, else 0: the
    expected accuracy of breaking the tie uniformly at random. E.g. ['5', '5', '7'] -> 1 (gold 5);
    ['5', '7'] -> 0.5; ['5', None] -> 1; [None, None, '5'] -> 0 (None won outright)."""
    counts = Counter(answers)
    top = max(counts.values())
    tie_set = [a for a, c in counts.items() if c == top]
    if None in tie_set and len(tie_set) > 1:
        tie_set.remove(None)
    return 1.0 / len(tie_set) if gold in tie_set else 0.0
