"""kinds.py: MAGRPO's built-in tasks by problem kind (problems.py names a problem's kind): the
roles, the first-turn prompts, the joint reward of one joint action, and when a problem counts as
solved (eval/pass_rate); the two-turn tasks (arith:split, costs) bring all of their fields.
"""
from __future__ import annotations

from nanomarl.tasks.code import code_reward
from nanomarl.tasks.code_prompts import aux_prompt, main_prompt
from nanomarl.tasks.costs import costs_task
from nanomarl.tasks.pipeline import (PIPELINE_ROLES, PIPELINE_WEIGHT, pipeline_prompts,
                                     pipeline_reward)
from nanomarl.tasks.split_magrpo import split_task
from nanomarl.tasks.teamwork import TEAMWORK_ROLES, teamwork_prompts, teamwork_reward
from nanomarl.tasks.writing import writing_prompts, writing_reward

# the roles of each built-in problem kind (agent i plays ROLES[kind][i])
ROLES = {"code": ["aux", "main"], "tldr": ["summary", "elaboration"],
         "arxiv": ["background", "method"], "pipeline": PIPELINE_ROLES,
         "teamwork": TEAMWORK_ROLES}
SOLVABLE_KINDS = ("code", "pipeline", "teamwork")  # the kinds with an eval/pass_rate
# the two-turn kinds (turn 2 hears the partner's turn 1): kind -> fn(parse, reward) -> Task fields
TWO_TURN_TASKS = {"split": split_task, "costs": costs_task}


def format_prompts(problem: dict) -> list[str]:
    """The first-turn prompt of each agent (raw text, before any chat template)."""
    if problem["kind"] == "code":
        return [aux_prompt(problem), main_prompt(problem)]
    if problem["kind"] == "pipeline":
        return pipeline_prompts(problem)
    if problem["kind"] == "teamwork":
        return teamwork_prompts(problem)
    return writing_prompts(problem)


def joint_reward(problem: dict, texts: list[str], timeout: float = 3.0, memory_mb: int = 512,
                 extraction: str = "ast") -> tuple[float, dict]:
    """The task's joint reward of one joint action (one completion per agent): (total, levels)."""
    if problem["kind"] == "code":
        return code_reward(texts[0], texts[1], problem, timeout, memory_mb, extraction)
    if problem["kind"] == "pipeline":
        return pipeline_reward(problem, texts, timeout, memory_mb)
    if problem["kind"] == "teamwork":
        return teamwork_reward(problem, texts)
    return writing_reward(texts[0], texts[1], problem["kind"])


def pass_rate(kind: str, all_levels: list[dict]) -> float | None:
    """The fraction of problems solved, from each problem's reward levels: code, every test passed;
    pipeline, every end-to-end assert; teamwork, every item once. None: not this kind's levels (a
    --reward-fn may log others) or a kind without tests."""
    if kind == "code" and "tests_total" in all_levels[0]:
        solved = [0 < lv.get("tests_total", 0) == lv.get("tests_passed") for lv in all_levels]
    elif kind == "pipeline" and "pipeline" in all_levels[0]:
        solved = [lv["pipeline"] >= PIPELINE_WEIGHT - 1e-9 for lv in all_levels]
    elif kind == "teamwork" and "solved" in all_levels[0]:
        solved = [lv["solved"] for lv in all_levels]
    else:
        return None
    return sum(solved) / len(all_levels)
