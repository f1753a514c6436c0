"""evaluate.py's controls of the tasks that need a partner: the split-information controls of a cotrain.py
arith:split run (silent, shuffled, oracle and wrong partners, the no-information bound, one agent
on the whole question, the informative messages), and the cross-play and swapped
roles of magrpo.py runs (nanomarl/crossplay.py): which adapter plays which seat.
"""
import dataclasses
import json

import pytest

import evaluate
import magrpo
from nanomarl.cli import parse_args
from nanomarl.crossplay import crossplay, crossplay_table, summarize
from nanomarl.eval_runs import check_args
from nanomarl.split_controls import neutral_message
from common import load_model
from nanomarl.models import load_adapters, load_tokenizer

SPLIT_KEYS = ("eval/turn1/informative", "eval/turn2/informative", "eval/turn1/heard",
              "eval/turn2/heard", "eval/whole_question/accuracy",
              "eval/silent/turn1/agent_accuracy", "eval/silent/turn2/agent_accuracy",
              "eval/shuffled/turn2/agent_accuracy", "eval/oracle/turn2/agent_accuracy",
              "eval/wrong/turn2/agent_accuracy", "eval/wrong/turn2/follows",
              "eval/no_information_bound")


def test_crossplay_pairs_every_agent0_with_every_agent1_and_swaps_each_team():
    teams = [["a0", "a1"], ["b0", "b1"], ["c0", "c1"]]
    score = {"a0": 1, "b0": 2, "c0": 3, "a1": 10, "b1": 20, "c1": 30}
    played = []

    def play(names):
        played.append(list(names))
        return {"eval/pass_rate": score[names[0]] + score[names[1]], "eval/reward/mean": 0.5}

    out = crossplay(play, teams)
    assert [[c["adapters"] for c in row] for row in out["pairs"]] == [
        [["a0", "a1"], ["a0", "b1"], ["a0", "c1"]],
        [["b0", "a1"], ["b0", "b1"], ["b0", "c1"]],
        [["c0", "a1"], ["c0", "b1"], ["c0", "c1"]]]
    assert [c["adapters"] for c in out["swapped"]] == [["a1", "a0"], ["b1", "b0"], ["c1", "c0"]]
    assert len(played) == 9 + 3
    summary = summarize(out, ["A", "B", "C"])
    assert summary["pass rate"]["matrix"] == [[11, 21, 31], [12, 22, 32], [13, 23, 33]]
    assert summary["pass rate"]["swapped"] == [11, 22, 33]
    assert summary["pass rate"]["trained_mean"] == (11 + 22 + 33) / 3
    assert summary["pass rate"]["cross_mean"] == (21 + 31 + 12 + 32 + 13 + 23) / 6
    assert summary["reward"]["swapped_mean"] == 0.5
    table = crossplay_table(summary)
    assert "| run 1 | 12.000 | 22.000 | 32.000 | 22.000 |" in table and "run 2 = C" in table


def test_crossplay_in_evaluate_plays_each_seat_with_the_right_runs_adapter(tmp_path, monkeypatch, tiny_model_dir):
    from test_evaluate import fake_run

    run_args = dataclasses.asdict(magrpo.Args(model="tiny", dataset="teamwork"))
    runs = [fake_run(tmp_path / f"seed{k}", run_args, ["agent0", "agent1"], seed=k) for k in range(2)]
    generate = magrpo.generate_joint_action
    calls = []  # (the adapter names of the seats, the texts [problem][seat][sample])

    def spy(agents, tokenizer, prompts, *a, **kw):
        out = generate(agents, tokenizer, prompts, *a, **kw)
        calls.append((list(agents.names), out["texts"], prompts, a, kw))
        return out

    monkeypatch.setattr(magrpo, "generate_joint_action", spy)
    out_dir = tmp_path / "eval"
    evaluate.main(parse_args(evaluate.Args, [
        "--mode", "magrpo", "--runs", ",".join(map(str, runs)), "--limit", "2", "--max-new-tokens", "6",
        "--device", "cpu", "--sandbox-workers", "1", "--output-dir", str(out_dir)]))
    assert [names for names, *_ in calls] == [
        ["s0_agent0", "s0_agent1"], ["s0_agent0", "s1_agent1"], ["s1_agent0", "s0_agent1"], ["s1_agent0", "s1_agent1"],
        ["s0_agent1", "s0_agent0"], ["s1_agent1", "s1_agent0"]]
    prompts, a, kw = calls[0][2:]
    assert len(prompts) == 2 and kw["greedy"] is True

    # each run's adapters loaded alone, under their own names, on a fresh base: the seats' direct generations
    def direct(k, names):
        model = load_adapters(load_model("tiny"), runs[k] / "adapters")
        team = magrpo.Agents(models=[model, model], names=names)
        texts = generate(team, load_tokenizer("tiny"), prompts, *a, **kw)["texts"]
        return [[texts[p][seat][0] for p in range(len(prompts))] for seat in range(2)]

    own = [direct(k, ["agent0", "agent1"]) for k in range(2)]
    swapped = [direct(k, ["agent1", "agent0"]) for k in range(2)]
    assert own[0][0] != own[1][0] and own[0][1] != own[1][1]  # the two runs write differently
    seats = lambda texts: [[texts[p][seat][0] for p in range(len(prompts))] for seat in range(2)]  # noqa: E731
    for (i, j), (_, texts, *_) in zip([(0, 0), (0, 1), (1, 0), (1, 1)], calls):
        assert seats(texts) == [own[i][0], own[j][1]]  # seat 0: run i's agent 0; seat 1: run j's agent 1
    for k, (_, texts, *_) in enumerate(calls[4:]):
        assert seats(texts) == swapped[k]

    results = json.loads((out_dir / "results.json").read_text())["crossplay"]
    assert results["runs"] == [str(r) for r in runs] and results["dataset"] == "teamwork"
    assert results["adapters"][0][1] == ["s0_agent0", "s1_agent1"]
    assert results["swapped_adapters"] == [["s0_agent1", "s0_agent0"], ["s1_agent1", "s1_agent0"]]
    for name in ("pass rate", "reward"):
        matrix = results[name]["matrix"]
        assert len(matrix) == 2 and all(len(row) == 2 for row in matrix) and len(results[name]["swapped"]) == 2
        assert all((0.0 if name == "pass rate" else -2.0) <= x <= 1.0 for row in matrix for x in row)
    # the reward of each cell is teamwork's reward of the texts its seats wrote
    problems = magrpo.load_problems("teamwork", "eval", 2)
    for (i, j), (_, texts, *_) in zip([(0, 0), (0, 1), (1, 0), (1, 1)], calls):
        rewards = [magrpo.joint_reward(p, [texts[q][0][0], texts[q][1][0]])[0] for q, p in enumerate(problems)]
        assert results["reward"]["matrix"][i][j] == pytest.approx(sum(rewards) / len(rewards))
    assert "swapped" in (out_dir / "results.md").read_text()


def test_runs_refused_outside_magrpo_mode(tmp_path):
    with pytest.raises(SystemExit):
        check_args(parse_args(evaluate.Args, ["--runs", str(tmp_path), "--model", "tiny"]))
    with pytest.raises(SystemExit):
        check_args(parse_args(evaluate.Args, ["--mode", "magrpo", "--runs", str(tmp_path / "missing"),
                                              "--model", "tiny"]))


def test_split_controls_in_evaluate_results_of_an_arith_split_run(tmp_path, monkeypatch, tiny_model_dir):
    import cotrain
    from test_cotrain import ascii_fraction, tiny_args

    run = cotrain.main(tiny_args("--max-steps", "1", "--dataset", "arith:split", "--eval-questions", "4",
                                 "--output-dir", str(tmp_path / "run"), "--prompt-style", "short"),
                       score_fn=ascii_fraction)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # the held-out evaluation after the update
    trained = [r for r in rows if "eval/whole_question/accuracy" in r][-1]
    out_dir = tmp_path / "eval"
    play, calls = cotrain.run_debate, []  # (adapter names [T][A], silent, records have views)
    played = []  # what each call returned

    def spy(records, models, tokenizers, adapter_names, *a, **kw):
        silent = kw.get("show_partner", str) is neutral_message
        calls.append((adapter_names, silent, "views" in records[0]))
        played.append(play(records, models, tokenizers, adapter_names, *a, **kw))
        return played[-1]

    monkeypatch.setattr(cotrain, "run_debate", spy)
    evaluate.main(parse_args(evaluate.Args, ["--run", str(run), "--methods", "maporl", "--device", "cpu",
                                             "--output-dir", str(out_dir)]))
    results = json.loads((out_dir / "results.json").read_text())
    # the debate, its greedy turn 1, turns 2..T with silent, shuffled, oracle and wrong partners,
    # and agent 0's turn-1 adapter alone on the whole question
    seats = [agent["adapters"] for agent in results["methods"]["maporl"]["agents"]]
    names = [[seats[a][t] for a in range(2)] for t in range(2)]
    assert all(n.startswith("r0_agent") for turn in names for n in turn) and names[0][0] != names[0][1]
    assert calls == [(names, False, True), (names[:1], False, True), (names[1:], True, True)] + [
        (names[1:], False, True)] * 3 + [([names[0][:1]], False, False)]
    assert results["args"]["dataset"] == "arith:split" and results["args"]["limit"] == 4
    controls = results["methods"]["maporl"]["split_controls"]
    assert sorted(controls) == sorted(SPLIT_KEYS)
    for key in SPLIT_KEYS:  # evaluate.py --run reproduces the run's own held-out controls
        assert controls[key] == pytest.approx(trained[key]), key
    assert controls["eval/silent/turn1/agent_accuracy"] == results["methods"]["maporl"]["accuracy"]["mean_agent"][0]
    # samples.jsonl: each replay's answers per problem, turns 2..T, as the replay returned them
    samples = [json.loads(line) for line in (out_dir / "samples.jsonl").read_text().splitlines()]
    for k, control in enumerate(("silent", "shuffled", "oracle", "wrong")):
        rows = [r for r in samples if r["method"] == f"maporl/{control}"]
        assert [r["question"] for r in rows] == [q["id"] for q in results["questions"]]
        assert [r["answers"] for r in rows] == played[2 + k].answers
    table = (out_dir / "results.md").read_text()
    head = ("| method | turn 2 | silent turn 2 | shuffled turn 2 | oracle turn 2 | wrong turn 2 "
            "| follows wrong turn 2 | no-information bound | whole question | informative turn 1 "
            "| informative turn 2 | heard turn 1 |")
    assert head in table
    row = "| maporl | " + " | ".join(f"{100 * x:.1f}" for x in [
        results["methods"]["maporl"]["accuracy"]["mean_agent"][-1]] + [controls[k] for k in (
            "eval/silent/turn2/agent_accuracy", "eval/shuffled/turn2/agent_accuracy",
            "eval/oracle/turn2/agent_accuracy", "eval/wrong/turn2/agent_accuracy",
            "eval/wrong/turn2/follows", "eval/no_information_bound", "eval/whole_question/accuracy",
            "eval/turn1/informative", "eval/turn2/informative", "eval/turn1/heard")])
    assert row + " |" in table.splitlines()
