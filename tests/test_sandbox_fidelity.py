"""docs/results/sandbox_fidelity.py: its two judges (the reward path's sandbox and plain Python in a
throwaway process) on four hand-written programs for HumanEval/0, each verdict known by hand: a
right program passes all 7 tests, `return False` passes exactly the 3 tests that expect False, a
program that raises fails all 7, and one that loops times out on 3 tests (the tests' shared budget
of 3 timeouts) and fails the 4 it never runs. Offline; the batched sampling on the tiny model."""
import argparse
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


def _sampling(**changes) -> argparse.Namespace:
    """The script's sampling flags on the tiny model, 8 new tokens a completion."""
    flags = dict(sample=3, model="tiny", batch=4, max_new_tokens=8, temperature=0.5, top_p=0.9,
                 top_k=50, threads=1, seed=0, dtype="float32")
    return argparse.Namespace(**{**flags, **changes})


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_batched_sampling_returns_one_program_per_pick_alternating_humaneval_and_minicode(dtype):
    problems = fidelity.code_problems()
    programs = fidelity.sampled_programs(problems, _sampling(sample=5, batch=4, dtype=dtype))
    assert len(programs) == 5  # 10 completions: 3 generate calls of 4, 4 and 2 rows
    assert [p["problem"].split("/")[0] for p in programs] == ["HumanEval", "minicode"] * 2 + [
        "HumanEval"]
    for p in programs:
        assert set(p) == {"problem", "aux", "main", "source"} and p["source"] == "tiny"
        assert p["problem"] in problems
        assert len(p["aux"]) <= 8 and len(p["main"]) <= 8  # byte tokens: 8 new ones at most
    assert sum(len(p["aux"]) + len(p["main"]) for p in programs) > 0
    again = fidelity.sampled_programs(problems, _sampling(sample=5, batch=4, dtype=dtype))
    assert again == programs  # the same --seed and --batch: the same programs


def test_each_completion_comes_from_its_own_prompt_at_any_batch_size():
    from common import load_model
    from nanomarl.models import load_tokenizer
    problems = fidelity.code_problems()
    tokenizer, model = load_tokenizer("tiny"), load_model("tiny")
    picks = ["HumanEval/12", "minicode/digits/digit_sum", "HumanEval/0"]
    prompts = fidelity.program_prompts(tokenizer, problems, picks)
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    assert len(prompts) == 6 and [len(x) for x in ids] != sorted(len(x) for x in ids)  # reordered
    assert "Create a helper" in prompts[0] and "Solve this coding" in prompts[1]  # aux, main
    for batch in (1, 4):
        out = fidelity.sample_completions(model, tokenizer, prompts, _sampling(batch=batch))
        assert [query for query, _ in out] == ids  # each row read its own prompt, in order
        assert all(len(text) <= 8 for _, text in out)


def test_a_run_with_nothing_to_judge_stops_before_writing_its_report(tmp_path, monkeypatch):
    """No committed code program and no --sample: one line naming --sample, and --output (a
    committed report by default) is not overwritten with an empty table."""
    report = tmp_path / "report.md"
    report.write_text("the committed report\n")
    monkeypatch.setattr(fidelity, "committed_programs", lambda problems: ([], ["a/samples.jsonl"]))
    monkeypatch.setattr("sys.argv", ["sandbox_fidelity.py", "--output", str(report)])
    with pytest.raises(SystemExit) as stop:
        fidelity.main()
    assert "--sample N" in str(stop.value) and "code program" in str(stop.value)
    assert report.read_text() == "the committed report\n"
    assert not report.with_suffix(".json").exists()
