"""The costs task (nanomarl/tasks/costs.py), a division of labour that no fixed rule solves: its
problems (splits disjoint up to seat swaps, a unique cheaper split, the sizes), the prompts (each
player sees only its own costs), the parse and the joint reward on hand-written answers, the two
baselines by hand, the held-out evaluation on a scripted team, and one magrpo.py step end to end
on the tiny model."""
import json
import re

import pytest

import magrpo
from nanomarl.cli import parse_args
from nanomarl.tasks.costs import (DEARER, TABLES, cheaper_job, costs_baselines, costs_evaluation,
                                  costs_feedback, costs_problems, costs_prompts, costs_reward,
                                  table_key, taken_item)
from nanomarl.tasks.debate_prompts import followup_message
from nanomarl.tasks.problems import load_problems
from test_magrpo_split import one_two_turn_step

SPLITS = {"train": costs_problems("train"), "validation": costs_problems("eval"),
          "test": costs_problems("eval", "test")}


def total(problem: dict, job0: str) -> int:
    """The team's cost when player 0 does job0 and player 1 the other."""
    a = problem["items"].index(job0)
    return problem["costs"][0][a] + problem["costs"][1][1 - a]


def test_the_splits_are_sized_fixed_and_disjoint_up_to_seat_swaps():
    assert [len(SPLITS[s]) for s in SPLITS] == [480, 64, 112]  # each table at both seats
    assert {s: len(SPLITS[s]) // 2 for s in SPLITS} == TABLES
    assert load_problems("costs", "eval") == SPLITS["validation"]
    assert load_problems("costs:test", "eval") == SPLITS["test"]
    assert load_problems("costs", "train") == load_problems("costs:test", "train") == \
        SPLITS["train"]
    assert load_problems("costs", "eval", 6) == SPLITS["validation"][:6]
    assert costs_problems("eval") == SPLITS["validation"]  # fixed, whatever the seed
    ids = [p["id"] for s in SPLITS for p in SPLITS[s]]
    assert len(ids) == len(set(ids))
    keys = {s: [table_key(p["items"], p["costs"]) for p in SPLITS[s]] for s in SPLITS}
    for s, problems in SPLITS.items():
        assert {p["kind"] for p in problems} == {"costs"}
        assert {p["family"] for p in problems} == {"letters", "colours"}
        # two problems in a row per table: its seats exchanged, the jobs in the same order
        for one, two in zip(problems[::2], problems[1::2]):
            assert one["items"] == two["items"] and one["costs"] == two["costs"][::-1]
        assert len(set(keys[s])) == len(keys[s]) // 2
    # a seat swap and a reordering of the jobs are the same key: none crosses a split
    p = SPLITS["test"][0]
    swapped = [p["costs"][1][::-1], p["costs"][0][::-1]]
    assert table_key(p["items"][::-1], swapped) == table_key(p["items"], p["costs"])
    assert not set(keys["train"]) & set(keys["validation"])
    assert not set(keys["train"]) & set(keys["test"])
    assert not set(keys["validation"]) & set(keys["test"])


def test_the_cheaper_split_is_unique_and_the_other_at_the_other_seat():
    for problems in SPLITS.values():
        for p in problems:
            first, second = p["items"]
            assert first != second and all(1 <= c <= 9 for row in p["costs"] for c in row)
            assert all(row[0] != row[1] for row in p["costs"])  # a player's own cheaper job
            assert total(p, first) != total(p, second)
            other = second if cheaper_job(p) == first else first
            assert total(p, cheaper_job(p)) < total(p, other)
        assert all(cheaper_job(one) != cheaper_job(two)
                   for one, two in zip(problems[::2], problems[1::2]))


def test_each_player_sees_only_its_own_costs():
    for p in SPLITS["validation"] + SPLITS["test"][:20]:
        first, second = p["items"]
        prompts = costs_prompts(p)
        for a, prompt in enumerate(prompts):
            own = p["costs"][a]
            assert f"Your cost for {first} is {own[0]} and for {second} is {own[1]};" in prompt
            assert f'Start with "My costs: {first} {own[0]}, {second} {own[1]}."' in prompt
            assert set(re.findall(r"\d+", prompt)) == {str(c) for c in own}  # never the partner's
        # turn 2: its own costs again and the partner's first sentence, nothing else of it
        said = [f"My costs: {first} 12, {second} 13. So I take {first}.", "Hmm\nMy costs: 14."]
        followups = costs_feedback(p, [prompts], [[said[0]], [said[1]]])
        assert followups[0].startswith(f'Your costs: {first} {p["costs"][0][0]}, {second} '
                                       f'{p["costs"][0][1]}. Your partner says: "Hmm" You do')
        assert f'Your partner says: "My costs: {first} 12, {second} 13." You do' in followups[1]
        assert set(re.findall(r"\d+", followups[1])) == {str(c) for c in p["costs"][1]} | {
            "12", "13"}
        assert followups[1].endswith(f'Answer "I take {first}." or "I take {second}."')
        record = dict(followups=[f.replace('"Hmm"', "{said}") for f in followups])
        assert followups[0] == followup_message(record, 0, [said[1]])


def test_the_parse_reads_the_job_named_after_take_or_choose():
    letters, colours = ["D", "K"], ["red", "blue"]
    assert taken_item("I take K.", letters) == "K"
    assert taken_item("I take O.", letters) is None  # "I" is never the job; O is not on the table
    assert taken_item("I choose O.", letters) is None
    assert taken_item("I, I take D", letters) == "D"
    assert taken_item("I take k", letters) == "K"  # any case
    assert taken_item("Take the job that makes the total smaller. I take D.", letters) == "D"
    assert taken_item("My partner takes D, so I take K.", letters) == "K"  # never "takes"
    assert taken_item("D is mine. K is yours.", letters) is None  # no take/choose
    assert taken_item("It is a mistake D", letters) is None
    assert taken_item("I'll choose the Blue one!", colours) == "blue"
    assert taken_item("I am taking red, you blue", colours) == "red"
    assert taken_item("I take bluegreen", colours) is None
    assert taken_item("You can choose to either take K or D.", letters) is None  # no choice
    assert taken_item("Take K or D? I take D.", letters) == "D"
    assert taken_item("You take K.", letters) is None  # the partner's job, not the speaker's
    assert taken_item("Take K. I'll take D.", letters) == "D"


def test_the_joint_reward_on_hand_written_answers():
    # split D|K: 3 + 9 = 12; split K|D: 7 + 2 = 9, the cheaper one
    p = dict(id="p", kind="costs", items=["D", "K"], costs=[[3, 7], [2, 9]])
    assert cheaper_job(p) == "K"
    assert costs_reward(p, ["I take K.", "I choose D."]) == (1.0, dict(
        cheaper=1.0, dearer=0.0, collision=0.0, answered=1.0))
    assert costs_reward(p, ["I take D.", "I take K."]) == (DEARER, dict(
        cheaper=0.0, dearer=1.0, collision=0.0, answered=1.0))
    assert DEARER == 0.5
    assert costs_reward(p, ["I take K.", "I'll take K"]) == (0.0, dict(
        cheaper=0.0, dearer=0.0, collision=1.0, answered=1.0))
    assert costs_reward(p, ["I take K.", "I take O."]) == (0.0, dict(  # keeping quiet: no better
        cheaper=0.0, dearer=0.0, collision=0.0, answered=0.5))
    assert costs_reward(p, ["K", "D"])[0] == 0.0  # no "take": nothing taken


def test_the_baselines_by_hand_and_on_the_held_out_splits():
    one = dict(items=["D", "K"], costs=[[3, 7], [2, 9]])  # cheaper: K|D; both prefer D
    two = dict(items=["D", "K"], costs=[[1, 5], [6, 2]])  # cheaper: D|K (3 < 11); D and K
    swap = dict(items=["D", "K"], costs=[[6, 2], [1, 5]])  # cheaper: K|D (3 < 11); K and D
    # agent 0 takes the first job: dearer, cheaper, dearer; the reverse: cheaper, dearer, cheaper
    # own cheaper job: a collision, then the cheaper split twice
    # player 0 leads (takes its own cheaper job, 1 the other): dearer, cheaper, cheaper; player 1
    # leads: K|D, D|K, K|D, the cheaper split each time
    assert costs_baselines([one, two, swap]) == {
        "eval/positional_rule": pytest.approx((1 + 0.5 + 1) / 3),
        "eval/own_costs_rule": pytest.approx((0 + 1 + 1) / 3), "eval/leader_rule": 1.0}
    assert costs_baselines([one, two])["eval/positional_rule"] == 0.75
    # every table at both seats: any rule blind to the costs earns (1 + 0.5) / 2 exactly; one
    # message (the leader's job) earns more
    assert costs_baselines(SPLITS["validation"]) == {"eval/positional_rule": 0.75,
                                                     "eval/own_costs_rule": 36 / 64,
                                                     "eval/leader_rule": 57 / 64}
    assert costs_baselines(SPLITS["test"]) == {"eval/positional_rule": 0.75,
                                               "eval/own_costs_rule": 74 / 112,
                                               "eval/leader_rule": 102.5 / 112}


def scripted_play(calls: list):
    """A team without a model: turn 1, its costs in the asked-for sentence; turn 2, with the
    partner's costs heard, the job of the cheaper split, else its own cheaper job."""
    def reply(prompt: str) -> str:
        if prompt.startswith("You and your partner"):
            return re.search(r'Start with "([^"]*)"', prompt).group(1) + " Thanks."
        (x, cx), (y, cy) = re.findall(r"(\w+) (\d)", prompt.split(".")[0])
        heard = re.match(r'"My costs: \w+ (\d), \w+ (\d)\."', prompt.split("says: ")[1])
        if heard is None:
            return f"I take {x if int(cx) < int(cy) else y}."
        px, py = map(int, heard.groups())
        return f"I take {x if int(cx) + py < int(cy) + px else y}."

    def play(prompts):
        calls.append(prompts)
        return [[reply(p) for p in per_problem] for per_problem in prompts]
    return play


def test_the_held_out_evaluation_on_a_scripted_team():
    problems = SPLITS["validation"]
    calls, rows = [], []
    m = costs_evaluation(scripted_play(calls), problems, rows)
    first, second, silent = calls
    assert first == [costs_prompts(p) for p in problems]
    assert second[0][0].split('says: "')[1].startswith("My costs: ")
    assert silent[0][0].split('says: "')[1].startswith("I have read")
    # told the partner's costs, the team always finds the cheaper split; silent, each takes its
    # own cheaper job: the own-costs rule, exactly
    assert m["eval/reward/mean"] == m["eval/reward/cheaper"] == m["eval/reward/answered"] == 1.0
    assert m["eval/silent/reward/mean"] == m["eval/own_costs_rule"] == 36 / 64
    assert m["eval/silent/reward/collision"] == 28 / 64 and m["eval/positional_rule"] == 0.75
    assert [(r["method"], r["question"]) for r in rows] == [
        (method, p["id"]) for method in ("magrpo", "magrpo/silent") for p in problems]
    assert all(r["answers"][1][0] == r["gold"] for r in rows[:64])
    assert rows[0]["responses"][0][0].startswith("My costs: ")


@pytest.mark.parametrize("dataset", ["costs", "arith:split"])
def test_a_two_turn_task_needs_two_turns(tmp_path, dataset):
    run = ["--model", "tiny", "--dataset", dataset, "--output-dir", str(tmp_path / "run")]
    with pytest.raises(SystemExit, match=f"^error: --turns: --dataset {dataset} has 2 turns"):
        magrpo.main(parse_args(magrpo.Args, run))
    assert not (tmp_path / "run").exists()  # refused before anything starts


def test_one_magrpo_step_on_costs_end_to_end(tmp_path):
    run = tmp_path / "run"
    rows, samples, problem = one_two_turn_step(run, "costs", 4, SPLITS["train"], costs_feedback)
    for row in rows:
        assert row["eval/num_questions"] == 4
        assert row["eval/positional_rule"] == 0.75  # two tables, each at both seats
        assert all(0.0 <= row[k] <= 1.0 for k in ("eval/reward/mean", "eval/silent/reward/mean",
                                                  "eval/own_costs_rule", "eval/reward/answered"))
    assert samples[0]["prompts"] == costs_prompts(problem)
    held_out = [json.loads(line) for line in (run / "eval_samples.jsonl").read_text().splitlines()]
    assert [(r["step"], r["method"]) for r in held_out] == [
        (s, m) for s in (0, 1) for m in ("magrpo", "magrpo/silent") for _ in range(4)]
