"""docs/results/sandbox_fidelity.py: its two judges (the reward path's sandbox and plain Python in a
throwaway process) on four hand-written programs for HumanEval/0, each verdict known by hand: a
right program passes all 7 tests, `return False` passes exactly the 3 tests that expect False, a
program that raises fails all 7, and one that loops times out on 3 tests (the tests' shared budget
of 3 timeouts) and fails the 4 it never runs. Offline, no model."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 0.5  # seconds per test: the looping program costs 3 of them on each side


def _script():
    spec = importlib.util.spec_from_file_location(
        "sandbox_fidelity", ROOT / "docs" / "results" / "sandbox_fidelity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fidelity = _script()
HEAD = "def has_close_elements(numbers, threshold):\n"
RIGHT = HEAD + ("    return any(abs(a - b) < threshold\n"
                "               for i, a in enumerate(numbers) for b in numbers[i + 1:])\n")
F, P, T = "fail", "pass", "timeout"
PROGRAMS = {  # main's completion -> the verdict of each of HumanEval/0's 7 asserts
    "right": (RIGHT, [P] * 7),
    "wrong": (HEAD + "    return False\n", [F, P, F, P, F, F, P]),
    "raises": (HEAD + "    raise ValueError('no')\n", [F] * 7),
    "loops": (HEAD + "    while True:\n        pass\n", [T, T, T, F, F, F, F]),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_sandbox_and_plain_python_judge_hand_written_programs_as_known(name):
    problem = fidelity.code_problems()["HumanEval/0"]
    main, expected = PROGRAMS[name]
    program, tests, sandbox, _ = fidelity.judge_sandbox(problem, "", main, TIMEOUT)
    assert len(tests) == 7 and "def has_close_elements" in program
    assert sandbox == expected
    plain, errors = fidelity.judge_plain(program, tests, TIMEOUT)
    assert plain == expected
    if name == "raises":
        assert all(error.startswith("ValueError") for error in errors)
    assert fidelity.kind(sandbox, plain) == "agree"


def test_disagreements_are_sorted_by_kind():
    assert fidelity.kind([P, F], [P, F]) == "agree"
    assert fidelity.kind([P, F], [F, F]) == "sandbox-only"
    assert fidelity.kind([F, F], [P, F]) == "plain-only"
    assert fidelity.kind([P, F], [F, P]) == "mixed"
    assert fidelity.kind([T, P], [P, P]) == "timeout"
