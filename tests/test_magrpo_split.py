"""arith:split as a two-turn MAGRPO task (nanomarl/tasks/split_magrpo.py): its problems are
arith:split's own, turn 2 quotes the partner's turn-1 first sentence, the joint reward on literal
answers, the held-out evaluation and its controls on a scripted team, and one magrpo.py step end to
end on the tiny model."""
import json
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

import magrpo
from common import extract_answer
from nanomarl.cli import parse_args
from nanomarl.tasks.debate import load_task
from nanomarl.tasks.debate_prompts import followup_message
from nanomarl.tasks.problems import load_problems
from nanomarl.tasks.split import split_problem_list
from nanomarl.tasks.split_magrpo import (split_evaluation, split_feedback, split_problems,
                                         split_prompts, split_reward)

ROOT = Path(__file__).resolve().parents[1]


def test_the_problems_are_arith_splits_own():
    held_out = load_problems("arith:split", "eval")
    test = load_problems("arith:split:test", "eval")
    # the held-out problems of cotrain.py's --eval-split, in its order: 72 and 114
    assert [p["record"] for p in held_out] == load_task("arith:split", "validation")
    assert [p["record"] for p in test] == load_task("arith:split", "test")
    assert [p["id"] for p in held_out[:2]] == ["arith:split/validation/0",
                                               "arith:split/validation/1"]
    assert load_problems("arith:split", "eval", 5) == held_out[:5]
    assert {p["kind"] for p in held_out + test} == {"split"}
    train = load_problems("arith:split", "train")
    questions = [p["record"]["question"] for p in train]
    # every training problem once: the 102 distinct questions cotrain.py's training draws hold
    assert len(questions) == len(set(questions)) == 102
    # in split.py's fixed order, numbered from 0
    assert [(p["record"]["kind"], tuple(p["record"]["parts"])) for p in train] == \
        split_problem_list("train")
    assert [p["id"] for p in train[:2]] == ["arith:split/train/0", "arith:split/train/1"]
    drawn = load_task("arith:split", "train", 1000, seed=0)
    assert set(questions) == {r["question"] for r in drawn}
    assert not set(questions) & {p["record"]["question"] for p in held_out + test}
    assert load_problems("arith:split:test", "train") == train


def test_the_wordings_are_the_same_problems_in_their_own_words():
    """--dataset arith:split-mix trains on arith:split's problems, problem i in wording i % 3
    (0, 3, 4); arith:split-w1:test holds the test split in held-out words; nothing else parses."""
    train, mix = load_problems("arith:split", "train"), load_problems("arith:split-mix", "train")
    assert [p["record"]["parts"] for p in mix] == [p["record"]["parts"] for p in train]
    assert [p["record"]["views"] == q["record"]["views"] for p, q in zip(mix, train)][:6] == \
        [True, False, False, True, False, False]
    assert mix[1]["record"]["views"][0].startswith("The number 1 is yours")
    assert [p["record"] for p in load_problems("arith:split-mix", "eval")] == \
        load_task("arith:split-mix", "validation")
    assert [p["record"] for p in load_problems("arith:split-w1:test", "eval")] == \
        load_task("arith:split-w1", "test")
    for wrong in ("arith:split-w3", "arith:split:validation", "arith:split-w1:test:test"):
        with pytest.raises(SystemExit, match="--dataset"):
            load_problems(wrong, "train")


def test_turn_1_is_the_view_and_turn_2_quotes_the_partners_first_sentence():
    problem = split_problems("eval")[0]
    record = problem["record"]
    assert record["parts"] == [6, 8] and record["answer"] == "2"  # validation 0: 8 - 6
    assert split_prompts(problem) == record["views"]
    said = ["My number is 6. So the answer is 14.\nThe answer is 14.",
            "Hmm, let me see\nMy number is 8."]
    prompts = split_feedback(problem, [record["views"]], [[said[0]], [said[1]]])
    assert prompts[0].startswith(
        'Your number is 6. Your partner says: "Hmm, let me see" Find the difference')
    assert prompts[1].startswith(
        'Your number is 8. Your partner says: "My number is 6." Find the difference')
    assert "14" not in prompts[1] and "8." not in prompts[0].split("Find")[0]
    assert prompts == [followup_message(record, 0, [said[1]]),
                       followup_message(record, 1, [said[0]])]


def test_the_joint_reward_on_literal_answers():
    problem = dict(id="p", kind="split", record=dict(answer="2", parts=[6, 8]))

    def reward(*texts):
        return split_reward(problem, list(texts), extract_answer)
    both = reward("My number is 6. The answer is 2.",
                  "The numbers are 8, 6. 8 - 6 = 2. The answer is 2.")
    assert both == (1.0, dict(solved=1.0, answered=1.0, heard=1.0))
    assert reward("The answer is 2.", "The answer is 12.") == (
        0.5, dict(solved=0.0, answered=1.0, heard=0.0))
    assert reward("Answer: \\boxed{2}", "My number is 8. I need yours.") == (
        0.5, dict(solved=0.0, answered=0.5, heard=0.5))
    assert reward("2", "I think it is 2") == (  # no "answer is": unparsable
        0.0, dict(solved=0.0, answered=0.0, heard=0.0))


def scripted_play(calls: list):
    """A team without a model: turn 1, "My number is X." first when X is even, else after "Hmm.";
    turn 2, the result computed with the first number in the partner's quoted words (none: no
    answer); the whole question, always the sum. Records every call's prompts."""
    def reply(prompt: str) -> str:
        followup = re.match(r'Your number is (\d+)\. Your partner says: "([^"]*)"', prompt)
        if followup:
            own, heard = int(followup.group(1)), re.findall(r"\d+", followup.group(2))
            if not heard:
                return "I cannot tell."
            other = int(heard[0])
            result = abs(own - other) if "difference" in prompt else own + other
            return f"The numbers are {own}, {other}. The answer is {result}."
        if prompt.startswith("The numbers are"):  # the whole question
            numbers = re.findall(r"\d+", prompt.split(".")[0])
            return f"The answer is {sum(map(int, numbers))}."
        own = int(re.search(r"Your number is (\d+)\.", prompt).group(1))
        if own % 2:
            return f"Hmm. My number is {own}."
        return f"My number is {own}. The answer is 2."

    def play(prompts):
        calls.append(prompts)
        return [[reply(p) for p in per_problem] for per_problem in prompts]
    return play


def heard_by(prompt: str) -> str:
    """The partner's words a followup quotes."""
    return re.search(r'says: ("[^"]*")', prompt).group(1)


def test_the_held_out_evaluation_and_its_controls_by_hand():
    problems = split_problems("eval")[:3]
    assert [(p["record"]["parts"], p["record"]["answer"]) for p in problems] == [
        ([6, 8], "2"), ([3, 4], "1"), ([5, 3], "8")]  # difference, difference, sum
    calls, rows = [], []
    m = split_evaluation(scripted_play(calls), problems, extract_answer, rows)
    views, played, silent, shuffled, oracle, wrong, whole = calls
    assert views == [p["record"]["views"] for p in problems]
    # what agent 0 of problem 0 (own 6) hears from its partner (8) in each replay
    assert [heard_by(prompts[0][0]) for prompts in (played, silent, shuffled, oracle, wrong)] == [
        '"My number is 8."', '"I have read the."', '"My number is 4."', '"My number is 8."',
        '"My number is 9."']
    assert heard_by(played[1][1]) == '"Hmm."'  # problem 1, agent 1 hears agent 0 (3, odd)
    assert whole[2] == ["The numbers are 5, 3. Find the sum of the two numbers.\nShow the "
                        "calculation, then end with \"The answer is\" and the number."] * 2
    # turn 1: both agents of problem 0 say 2 (right), problem 1's agent 1 says 2 (wrong), the
    # others nothing; turn 2: a partner said "My number is Y." first in problem 0 (both ways) and
    # problem 1 (to agent 0)
    assert m["eval/turn1/agent_accuracy"] == pytest.approx(2 / 6)
    assert m["eval/silent/turn1/agent_accuracy"] == pytest.approx(2 / 6)
    assert m["eval/turn2/agent_accuracy"] == pytest.approx(3 / 6)
    assert m["eval/turn2/agent0/accuracy"] == pytest.approx(2 / 3)
    assert m["eval/turn2/agent1/accuracy"] == pytest.approx(1 / 3)
    assert m["eval/reward/mean"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert m["eval/reward/solved"] == pytest.approx(1 / 3)
    assert m["eval/reward/answered"] == m["eval/reward/heard"] == pytest.approx(0.5)
    assert m["eval/turn1/informative"] == 1.0
    assert m["eval/turn1/heard"] == pytest.approx(3 / 6)  # the even numbers
    assert m["eval/turn2/informative"] == m["eval/turn2/heard"] == pytest.approx(3 / 6)
    assert m["eval/silent/turn2/agent_accuracy"] == 0.0  # no number heard
    assert m["eval/oracle/turn2/agent_accuracy"] == 1.0
    assert m["eval/wrong/turn2/agent_accuracy"] == 0.0 and m["eval/wrong/turn2/follows"] == 1.0
    # shuffled: problem 0's agent 0 hears problem 1's agent 1, 4: |6 - 4| = 2, right by chance
    assert m["eval/shuffled/turn2/agent_accuracy"] == pytest.approx(1 / 6)
    # own number alone: problem 0 (1/5, 1/4), problem 1 (1/2, 1/3), problem 2 (1/12 each)
    bound = (Fraction(1, 5) + Fraction(1, 4) + Fraction(1, 2) + Fraction(1, 3)
             + Fraction(1, 6)) / 6
    assert bound == Fraction(29, 120) and m["eval/no_information_bound"] == pytest.approx(29 / 120)
    assert m["eval/whole_question/accuracy"] == pytest.approx(1 / 3)  # the sum: problem 2
    assert m["eval/whole_question/agent1/accuracy"] == pytest.approx(1 / 3)
    # the answers per problem, as evaluate.py's samples.jsonl holds them: turns [t][a]
    ids = [p["id"] for p in problems]
    assert [(r["method"], r["question"]) for r in rows] == [
        (method, q) for method in ("magrpo", "magrpo/silent", "magrpo/shuffled", "magrpo/oracle",
                                   "magrpo/wrong") for q in ids]
    assert [r["answers"] for r in rows[:3]] == [
        [["2", "2"], ["2", "2"]], [[None, "2"], ["1", None]], [[None, None], [None, None]]]
    assert rows[0]["responses"][1][0] == "The numbers are 6, 8. The answer is 2."
    assert [r["gold"] for r in rows[:3]] == ["2", "1", "8"]
    assert [r["answers"] for r in rows[3:6]] == [[[None, None]]] * 3  # silent: nothing heard
    assert [r["answers"] for r in rows[9:12]] == [[["2", "2"]], [["1", "1"]], [["8", "8"]]]
    assert rows[12]["answers"][0][0] == "3"  # wrong: agent 0 (6) hears 9, |6 - 9|


def one_two_turn_step(run: Path, dataset: str, eval_problems: int, problems: list[dict],
                      feedback) -> tuple[list[dict], list[dict], dict]:
    """One tiny-model magrpo.py step of a two-turn task (G = 2, 8 tokens), its held-out
    evaluations before and after, checked as every two-turn task's: a root and its G children,
    turn 1 unscored, turn 2's prompts the task's `feedback` on the partners' turn-1 completions.
    Returns the rows of its metrics.jsonl, its samples and their training problem (of `problems`)."""
    magrpo.main(parse_args(magrpo.Args, [
        "--model", "tiny", "--dataset", dataset, "--turns", "2", "--max-steps", "1",
        "--num-generations", "2", "--max-new-tokens", "8", "--eval-problems", str(eval_problems),
        "--sample-every", "1", "--threads", "1", "--output-dir", str(run)]))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    step = rows[1]
    assert step["tree/nodes"] == 3  # a root and its G = 2 children
    assert step["reward/mean"] == 0.0  # turn 1 is not scored
    assert step["return/mean"] == pytest.approx(step["turn1/reward/mean"])  # γ = 1
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert [s["turn"] for s in samples] == [1, 1, 2, 2, 2, 2]
    problem = next(p for p in problems if p["id"] == samples[0]["problem"])
    for j, root in enumerate(samples[:2]):
        child = samples[2 + 2 * j]  # the first joint action of root j's child
        assert child["prompts"] == feedback(problem, [], [[t] for t in root["completions"]])
    return rows, samples, problem


def test_one_magrpo_step_end_to_end_logs_the_held_out_controls(tmp_path):
    run = tmp_path / "run"
    # turn 2's prompts quote the first sentence of the partner's turn-1 completion
    rows, samples, problem = one_two_turn_step(run, "arith:split:test", 3,
                                               load_problems("arith:split", "train"), split_feedback)
    keys = ["eval/reward/mean", "eval/turn1/agent_accuracy", "eval/turn2/agent_accuracy",
            "eval/silent/turn2/agent_accuracy", "eval/shuffled/turn2/agent_accuracy",
            "eval/oracle/turn2/agent_accuracy", "eval/wrong/turn2/agent_accuracy",
            "eval/wrong/turn2/follows", "eval/no_information_bound",
            "eval/whole_question/accuracy", "eval/turn1/heard"]
    for row in rows:
        assert all(0.0 <= row[key] <= 1.0 for key in keys), row
        assert row["eval/num_questions"] == 3
        assert row["eval/reward/mean"] == pytest.approx(row["eval/turn2/agent_accuracy"])
    assert all(root["reward"] == 0.0 for root in samples[:2])
    # the held-out answers per problem, of each evaluation: each answer is its response's
    held_out = [json.loads(line) for line in (run / "eval_samples.jsonl").read_text().splitlines()]
    assert [(r["step"], r["method"]) for r in held_out] == [
        (s, m) for s in (0, 1) for m in ("magrpo", "magrpo/silent", "magrpo/shuffled",
                                         "magrpo/oracle", "magrpo/wrong") for _ in range(3)]
    played = [r for r in held_out if r["method"] == "magrpo"]
    assert all(r["answers"][t][a] == extract_answer(r["responses"][t][a], "math")
               for r in played for t in range(2) for a in range(2))
    # docs/results/magrpo_split_test.py on the same 3 test problems: the run's own evaluations,
    # answer for answer (the untrained team's at step 0, the trained one's at step 1)
    for flags, step in ((["--base"], 0), ([], 1)):
        out = tmp_path / f"test-{step}"
        done = subprocess.run([sys.executable, str(ROOT / "docs/results/magrpo_split_test.py"),
                               str(run), str(out), "--limit", "3", *flags],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        again = [json.loads(line) for line in (out / "eval_samples.jsonl").read_text().splitlines()]
        assert again == [r for r in held_out if r["step"] == step]
        (logged,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert logged["eval/num_questions"] == 3
        assert logged["eval/turn2/agent_accuracy"] == rows[step]["eval/turn2/agent_accuracy"]


def test_evaluate_py_magrpo_mode_refuses_arith_split(tmp_path):
    """evaluate.py's MAGRPO mode scores code and writing answers: an arith:split team would score 0
    there, so it is refused (magrpo.py's own held-out evaluation has both turns and the
    controls)."""
    import evaluate
    flags = ["--mode", "magrpo", "--model", "tiny", "--dataset", "arith:split", "--methods",
             "single", "--device", "cpu", "--output-dir", str(tmp_path / "eval")]
    with pytest.raises(SystemExit, match="^error: --dataset: arith:split in --mode magrpo"):
        evaluate.main(parse_args(evaluate.Args, flags))
