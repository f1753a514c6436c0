"""helper_use.py: what each method's programs do with the helper, from an evaluate.py --mode magrpo
samples.jsonl on minicode.

The joint reward's cooperation level pays only when main calls aux AND a test passes, so a team
that tries to use the helper but gets it wrong scores the same 0 as one that never tries. This
counts the attempt and its parts apart, per method, over every joint answer in the file:
  main calls aux    main's body has a call aux(...)
  aux right         aux's own docstring example holds (aux(example) == value, run in the sandbox)
  both              main calls aux and aux is right: the helper could have done its share
  a test passed     at least one of the problem's asserts passed (the reward's tests level)

  python docs/results/helper_use.py runs/eval-magrpo-RUN/samples.jsonl [more files]
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from nanomarl.sandbox import run_tests_in_sandbox  # noqa: E402
from nanomarl.tasks.code import calls_aux, extract_function  # noqa: E402
from nanomarl.tasks.minicode import minicode_problems  # noqa: E402


def aux_example_test(aux_spec: str) -> str:
    """The assert of aux's docstring example: `>>> aux(...)` and the line below it."""
    lines = [line.strip() for line in aux_spec.splitlines()]
    at = next(i for i, line in enumerate(lines) if line.startswith(">>> aux("))
    return f"assert {lines[at][4:]} == {lines[at + 1]}"


def helper_use(row: dict, problem: dict) -> dict:
    aux = extract_function(row["texts"][0], "aux")  # '' when the method writes no aux (single)
    main = extract_function(row["texts"][1], problem["entry_point"])
    aux_right = bool(aux) and all(run_tests_in_sandbox(
        aux, [aux_example_test(problem["aux_spec"])], timeout=3.0)["passed"])
    calls = bool(main) and calls_aux(main)
    return {"main calls aux": calls, "aux right": aux_right, "both": calls and aux_right,
            "a test passed": row["levels"]["tests_passed"] > 0}


def main(paths: list[str]):
    problems = {p["id"]: p for split in ("train", "eval") for p in minicode_problems(split)}
    counts, totals = defaultdict(lambda: defaultdict(int)), defaultdict(int)
    for path in paths:
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            totals[row["method"]] += 1
            for key, value in helper_use(row, problems[row["problem"]]).items():
                counts[row["method"]][key] += value
    keys = ["main calls aux", "aux right", "both", "a test passed"]
    print("| method | answers | " + " | ".join(keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for method, n in totals.items():
        print(f"| {method} | {n} | " + " | ".join(f"{counts[method][k]}" for k in keys) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2 or not all(p.endswith(".jsonl") for p in sys.argv[1:]):
        sys.exit("usage: python docs/results/helper_use.py SAMPLES.jsonl [...]")
    main(sys.argv[1:])
