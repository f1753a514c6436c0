"""The MAGRPO evaluation's metrics over k samples per problem: the paper's pass@k (any of the first
k) and the unbiased pass@k of Chen et al., accuracy@k, MaxCoop@k and the cooperation rate, and their
averages over problems for the coding task (code_metrics) and the writing tasks (writing_metrics).
evaluate.py --mode magrpo calls them on its scored samples. A learner may skip this module.
"""
from __future__ import annotations

import math

from nanomarl.tasks.cooperation import COOPERATION_SCHEMES


def pass_at_k_first(passed: list[bool], k: int) -> float:
    """The MAGRPO paper's pass@k (the authors' PassOrNot@k): 1 if any of the FIRST k samples passes
    all tests."""
    if not 1 <= k <= len(passed):
        raise ValueError(f"pass@k needs 1 <= k <= n samples, got k={k}, n={len(passed)}")
    return float(any(passed[:k]))


def pass_at_k_unbiased(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. 2021 (Codex paper, eq. 1): 1 − C(n−c, k)/C(n, k), for n
    samples of which c pass, computed as the numerically stable product
    1 − Π_{i=n−c+1..n} (1 − k/i)."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset contains a passing sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def accuracy_at_k(pass_fractions: list[float], k: int) -> float:
    """Accuracy@k: the best fraction of passed asserts among the first k samples."""
    return max(pass_fractions[:k])


def max_coop_at_k(bonuses: list[float], k: int) -> float:
    """MaxCoop@k: the largest cooperation bonus among the first k samples (the authors'
    MaxCoop@k)."""
    return max(bonuses[:k])


def cooperation_rate(bonuses: list[float]) -> float:
    """The fraction of samples with a positive cooperation bonus (the authors'
    `cooperation_rate`)."""
    return sum(b > 0 for b in bonuses) / len(bonuses)


def code_metrics(samples: list[list[dict]], k_values: list[int]) -> dict:
    """samples[problem][j] (in sampling order) -> the authors' coding metrics: pass@k (any of the
    first k passes every assert), the unbiased pass@k, accuracy@k, MaxCoop@k (each averaged over
    problems), and over all samples the cooperation rate, structure / syntax / full-pass rates, and
    the cooperation schemes of the passing pairs."""
    flat = [s for per_p in samples for s in per_p]
    n = len(samples[0])
    out = {}
    per_problem = lambda f: sum(f(per_p) for per_p in samples) / len(samples)  # noqa: E731
    for k in k_values:
        out[f"pass@{k}"] = per_problem(lambda ss: pass_at_k_first([s["passed_all"] for s in ss], k))
        out[f"pass@{k}_unbiased"] = per_problem(
            lambda ss: pass_at_k_unbiased(n, sum(s["passed_all"] for s in ss), k))
        out[f"accuracy@{k}"] = per_problem(lambda ss: accuracy_at_k([s["accuracy"] for s in ss], k))
        out[f"maxcoop@{k}"] = per_problem(lambda ss: max_coop_at_k([s["bonus"] for s in ss], k))
    out["cooperation_rate"] = cooperation_rate([s["bonus"] for s in flat])
    out["structure_rate"] = sum(s["main_defined"] for s in flat) / len(flat)
    out["syntax_rate"] = sum(s["syntax_ok"] for s in flat) / len(flat)
    out["full_pass_rate"] = sum(s["passed_all"] for s in flat) / len(flat)
    labelled = [s["scheme"] for s in flat if s.get("scheme")]
    out["schemes"] = {label: labelled.count(label) for label in COOPERATION_SCHEMES}
    out["schemes_labelled"] = len(labelled)
    return out


def writing_metrics(samples: list[list[dict]]) -> dict:
    """The writing reward (max 3) and its four levels, averaged over every sample."""
    flat = [s for per_p in samples for s in per_p]
    out = {f"level/{name}": sum(s["levels"][name] for s in flat) / len(flat)
           for name in flat[0]["levels"]}
    out["reward_max_of_k"] = (sum(max(s["reward"] for s in per_p) for per_p in samples)
                              / len(samples))
    return out
