"""pipeline.py: a three-agent coding task of ours, offline: the pipeline parse -> transform ->
aggregate.

Each problem is a small pipeline over a list of integers,
solve(text) = aggregate(transform(parse(text))). Agent 0 writes parse(text), agent 1
transform(numbers), agent 2 aggregate(numbers): each sees the whole specification and writes only
its own function, without seeing the others' code. The joint reward runs every function's own unit
tests and the composed pipeline's end-to-end tests in the sandbox, so the team is paid for each part
and, most, for parts that fit together. The 4 x 6 x 5 = 120 problems are every combination of the
stages below; every 5th is held out for evaluation.
"""
from __future__ import annotations

import ast
import itertools
import random
import re

from nanomarl.sandbox import run_tests_in_sandbox
from nanomarl.tasks.code import extract_function
from nanomarl.tasks.code_prompts import CODE_RULES

PIPELINE_ROLES = ["parse", "transform", "aggregate"]
PIPELINE_WEIGHT = 1.2  # the end-to-end level's maximum: every pipeline assert passed
PIPELINE_SIGNATURES = ["parse(text)", "transform(numbers)", "aggregate(numbers)"]
# (specification, reference, how a test input is written from a list of integers)
PIPELINE_PARSE = [
    ("the integers in `text`, separated by commas, e.g. '3,-1,2' -> [3, -1, 2]",
     lambda s: [int(x) for x in s.split(",")], lambda xs, rng: ",".join(map(str, xs))),
    ("the integers in `text`, separated by single spaces, e.g. '3 -1 2' -> [3, -1, 2]",
     lambda s: [int(x) for x in s.split(" ")], lambda xs, rng: " ".join(map(str, xs))),
    ("the integers in `text`, separated by semicolons, e.g. '3;-1;2' -> [3, -1, 2]",
     lambda s: [int(x) for x in s.split(";")], lambda xs, rng: ";".join(map(str, xs))),
    ("every digit in `text` as an integer, other characters ignored, e.g. 'a3b12' -> [3, 1, 2]",
     lambda s: [int(c) for c in s if c.isdigit()],
     lambda xs, rng: "".join(rng.choice("xyz") + str(abs(x) % 10) for x in xs)),
]
PIPELINE_TRANSFORM = [
    ("keep only the even numbers, in order", lambda xs: [x for x in xs if x % 2 == 0]),
    ("square every number", lambda xs: [x * x for x in xs]),
    ("sort the numbers in ascending order", lambda xs: sorted(xs)),
    ("drop the negative numbers, keep the order", lambda xs: [x for x in xs if x >= 0]),
    ("reverse the order", lambda xs: xs[::-1]),
    ("add its 0-based position to each number, e.g. [5, 5] -> [5, 6]",
     lambda xs: [x + i for i, x in enumerate(xs)]),
]
PIPELINE_AGGREGATE = [
    ("the sum of the numbers (0 for an empty list)", lambda xs: sum(xs)),
    ("the largest number (0 for an empty list)", lambda xs: max(xs, default=0)),
    ("how many numbers there are", lambda xs: len(xs)),
    ("the largest minus the smallest number (0 for an empty list)",
     lambda xs: max(xs) - min(xs) if xs else 0),
    ("the sum of the first two numbers (or fewer if the list is shorter)", lambda xs: sum(xs[:2])),
]


def pipeline_problems(split: str, tests_per_part: int = 3) -> list[dict]:
    """The pipeline task's problems with their tests (asserts): tests_per_part for each function, on
    seeded inputs, and as many for the composed pipeline. split: 'train' (96 problems) or 'eval'
    (24, every 5th)."""
    problems = []
    stages = itertools.product(PIPELINE_PARSE, PIPELINE_TRANSFORM, PIPELINE_AGGREGATE)
    for index, ((parse_spec, parse, write), (transform_spec, transform),
                (aggregate_spec, aggregate)) in enumerate(stages):
        if (index % 5 == 0) != (split == "eval"):
            continue
        rng = random.Random(f"pipeline-{index}")
        inputs = [write([rng.randint(-9, 20) for _ in range(rng.randint(3, 6))], rng)
                  for _ in range(tests_per_part)]
        parsed = [parse(s) for s in inputs]
        transformed = [transform(xs) for xs in parsed]
        tests = dict(parse=[f"assert parse({s!r}) == {xs!r}" for s, xs in zip(inputs, parsed)],
                     transform=[f"assert transform({xs!r}) == {transform(xs)!r}" for xs in parsed],
                     aggregate=[f"assert aggregate({ys!r}) == {aggregate(ys)!r}"
                                for ys in transformed],
                     pipeline=[f"assert aggregate(transform(parse({s!r}))) == {aggregate(ys)!r}"
                               for s, ys in zip(inputs, transformed)])
        problems.append(dict(id=f"pipeline/{index}", kind="pipeline", parse=parse_spec,
                             transform=transform_spec, aggregate=aggregate_spec, tests=tests))
    return problems


def pipeline_prompts(problem: dict) -> list[str]:
    """One prompt per role: the whole pipeline's specification, then 'write ONLY your function'."""
    spec = ("Three programmers write a pipeline together: "
            "solve(text) = aggregate(transform(parse(text))).\n\n"
            f"- parse(text) returns {problem['parse']}\n"
            f"- transform(numbers) returns a new list: {problem['transform']}\n"
            f"- aggregate(numbers) returns one integer: {problem['aggregate']}\n\n")
    return [spec + f"You write ONLY the function {role}; your teammates write the other two.\n\n"
                   f"IMPORTANT INSTRUCTIONS:\n{CODE_RULES}\n"
                   "Your output should follow this format:\n\n"
                   f"def {signature}:\n    # your function code here\n    return result\n"
            for role, signature in zip(PIPELINE_ROLES, PIPELINE_SIGNATURES)]


def pipeline_reward(problem: dict, texts: list[str], timeout: float = 3.0,
                    memory_mb: int = 512) -> tuple[float, dict]:
    """The pipeline task's joint reward (max 3.0), from one sandbox run of the three functions and
    all the tests:
      structure (0.6):  0.2 for each function defined (extract_function) with a return;
      unit_tests (1.2): 0.4 x the fraction of its own asserts each function passes;
      pipeline (1.2):   1.2 x the fraction of end-to-end asserts
                        aggregate(transform(parse(s))) == y passed.
    A function that does not parse is left out of the program (its tests then fail with a
    NameError), so one agent's syntax error does not cost the others their unit tests. Levels also
    hold each role's pass rate."""
    parts, levels = [], dict(structure=0.0, unit_tests=0.0, pipeline=0.0)
    for role, text in zip(PIPELINE_ROLES, texts):
        code = extract_function(text, role)
        try:
            ast.parse(code)
        except SyntaxError:
            continue
        if code:
            parts.append(code)
            levels["structure"] += 0.2 * (re.search(r"return\s+", code) is not None)
    tests = [test for role in PIPELINE_ROLES + ["pipeline"] for test in problem["tests"][role]]
    if parts:
        passed = run_tests_in_sandbox("\n\n".join(parts), tests, timeout, memory_mb)["passed"]
    else:
        passed = [False] * len(tests)
    start = 0
    for role in PIPELINE_ROLES + ["pipeline"]:
        count = len(problem["tests"][role])
        fraction = sum(passed[start:start + count]) / count
        start += count
        if role == "pipeline":
            levels["pipeline"] = PIPELINE_WEIGHT * fraction
        else:
            levels[f"{role}_tests"] = fraction
            levels["unit_tests"] += 0.4 * fraction
    return levels["structure"] + levels["unit_tests"] + levels["pipeline"], levels
