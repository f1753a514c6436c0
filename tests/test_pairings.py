"""evaluate.py --speakers/--readers (nanomarl/pairings.py): the speakers' turn-1 adapters write the
turn-1 messages and the readers' later adapters read them, checked against a debate played by hand
on the two runs' saved adapters; the matrix equals the pairings evaluated one by one; bad input is
refused in one line before a model loads."""
import dataclasses
import json
import shutil

import pytest
import torch

import cotrain
import evaluate
from nanomarl.cli import parse_args
from nanomarl.models import load_tokenizer
from test_evaluate import fake_cotrain_run


def split_run(folder, seed: int, **overrides):
    """A finished cotrain.py run folder (save_state) of 2 agents on arith:split with an adapter per
    agent and turn, untrained: random non-zero B matrices drawn from --seed, so that each adapter
    changes the generations and two seeds' differ."""
    return fake_cotrain_run(folder, 2, seed, **{**dict(dataset="arith:split", eval_questions=2,
                                                    policy_sharing="agent-turn"), **overrides})


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    """Two seeds' runs and a third on another dataset."""
    root = tmp_path_factory.mktemp("pairings")
    return dict(a=split_run(root / "a", 0), b=split_run(root / "b", 1),
                digits=split_run(root / "digits", 2, dataset="arith:digits"))


def evaluate_pairs(tmp_path, name: str, *flags: str) -> tuple[dict, list[dict]]:
    """evaluate.main in process: results.json's pairings and the samples.jsonl rows."""
    out = tmp_path / name
    evaluate.main(parse_args(evaluate.Args, [*flags, "--max-new-tokens", "6", "--output-dir",
                                             str(out)]))
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return json.loads((out / "results.json").read_text())["pairings"], rows


def test_speakers_speak_at_turn_1_and_readers_read(runs, tmp_path, monkeypatch):
    calls = []  # the adapter names of every generate round, [turn][agent]
    play = cotrain.run_debate

    def spy(records, models, tokenizers, adapter_names, *args, **kwargs):
        calls.append(adapter_names)
        return play(records, models, tokenizers, adapter_names, *args, **kwargs)

    monkeypatch.setattr(evaluate.cotrain, "run_debate", spy)
    pairings, rows = evaluate_pairs(tmp_path, "eval", "--speakers", f"{runs['a']},base",
                                    "--readers", str(runs["b"]))
    # the run's held-out evaluation: its 2 questions, 2 agents x 2 turns, its base and dataset
    assert (pairings["dataset"], len(pairings["questions"])) == ("arith:split", 2)
    assert pairings["names"] == {"base": "base", str(runs["a"]): "run 0", str(runs["b"]): "run 1"}
    assert [[c["agents"] for c in row] for row in pairings["pairs"]] == [
        [[dict(base="tiny", adapters=["r0_agent0_turn1", "r1_agent0_turn2"]),
          dict(base="tiny", adapters=["r0_agent1_turn1", "r1_agent1_turn2"])]],
        [[dict(base="tiny", adapters=["__base__", "r1_agent0_turn2"]),
          dict(base="tiny", adapters=["__base__", "r1_agent1_turn2"])]]]
    # every generate round of the first pairing: turn 1 on run a's turn-1 adapters, later turns
    # (the debate and the controls' replays) on run b's turn-2 ones; agent 0's turn 1 alone on the
    # whole question
    first = calls[:len(calls) // 2]
    assert first[0] == [["r0_agent0_turn1", "r0_agent1_turn1"],
                        ["r1_agent0_turn2", "r1_agent1_turn2"]]
    assert {n for names in first for turn in names for n in turn} == {
        "r0_agent0_turn1", "r0_agent1_turn1", "r1_agent0_turn2", "r1_agent1_turn2"}
    assert all(names[0] in (["r0_agent0_turn1", "r0_agent1_turn1"], ["r0_agent0_turn1"],
                            ["r1_agent0_turn2", "r1_agent1_turn2"]) for names in first)
    assert len(calls) == 2 * len(first) and calls[len(first)][0] == ["__base__", "__base__"]
    # the same debate played by hand on the saved folders: run a's turn 1, run b's turn 2
    from peft import PeftModel

    from nanomarl.tasks.debate import load_task
    model = evaluate.load_model("tiny")
    for name, run, turn in (("s0", "a", 1), ("s1", "a", 1), ("r0", "b", 2), ("r1", "b", 2)):
        folder = str(runs[run] / "adapters" / f"agent{name[1]}_turn{turn}")
        if isinstance(model, PeftModel):
            model.load_adapter(folder, adapter_name=name)
        else:
            model = PeftModel.from_pretrained(model, folder, adapter_name=name)
    records = load_task("arith:split", "test", 2, 0)
    tokenizer = load_tokenizer("tiny")
    by_hand = play(records, [model, model], [tokenizer, tokenizer], [["s0", "s1"], ["r0", "r1"]],
                   6, greedy=True, prompt_style="short", fast=True)
    played = {r["method"]: r["responses"] for r in rows if r["question"] == records[0]["id"]}
    assert played["speakers run 0 x readers run 1"] == by_hand.responses[0]
    assert played["speakers base x readers run 1"][0] != by_hand.responses[0][0]  # base speaks
    table = (tmp_path / "eval" / "results.md").read_text().splitlines()
    assert table[0] == "| turn 2 (%): speakers \\ readers | run 1 |"
    assert [line.split(" | ")[0] for line in table[2:4]] == ["| run 0", "| base"]


def test_the_matrix_is_the_pairings_one_by_one(runs, tmp_path):
    both = f"{runs['a']},{runs['b']}"
    matrix, rows = evaluate_pairs(tmp_path, "matrix", "--speakers", both, "--readers", both,
                                  "--limit", "2")
    assert {k: [len(row) for row in m] for k, m in matrix["matrices"].items()} == {
        k: [2, 2] for k in matrix["matrices"]}
    assert {"turn 2", "oracle turn 2", "follows wrong turn 2", "whole question"} <= set(
        matrix["matrices"])
    for i, speakers in enumerate("ab"):
        for j, readers in enumerate("ab"):
            one, one_rows = evaluate_pairs(tmp_path, f"{speakers}{readers}", "--speakers",
                                           str(runs[speakers]), "--readers", str(runs[readers]),
                                           "--limit", "2")
            assert {k: m[0][0] for k, m in one["matrices"].items()} == {
                k: m[i][j] for k, m in matrix["matrices"].items()}
            assert one["pairs"][0][0]["metrics"] == matrix["pairs"][i][j]["metrics"]
            name = f"speakers run {i} x readers run {j}"
            assert [r["responses"] for r in rows if r["method"] == name] == [
                r["responses"] for r in one_rows]
    said = {(i, j): [r["responses"] for r in rows if r["method"] == f"speakers run {i} x readers "
                                                                    f"run {j}"]
            for i in range(2) for j in range(2)}
    for i in range(2):  # a row's speakers say the same at turn 1; its readers answer otherwise
        assert [q[0] for q in said[(i, 0)]] == [q[0] for q in said[(i, 1)]]
        assert [q[1] for q in said[(i, 0)]] != [q[1] for q in said[(i, 1)]]
    assert [q[0] for q in said[(0, 0)]] != [q[0] for q in said[(1, 0)]]
    table = (tmp_path / "matrix" / "results.md").read_text()
    assert "mean: diagonal (each source with itself)" in table



def test_no_split_controls_plays_the_same_debates_alone(runs, tmp_path):
    a = str(runs["a"])
    full, full_rows = evaluate_pairs(tmp_path, "full", "--speakers", a, "--readers", a)
    bare, bare_rows = evaluate_pairs(tmp_path, "bare", "--speakers", a, "--readers", a,
                                     "--no-split-controls")
    metrics = full["pairs"][0][0]["metrics"]
    assert "split_controls" in metrics and "split_controls" not in bare["pairs"][0][0]["metrics"]
    assert bare["pairs"][0][0]["metrics"] == {k: v for k, v in metrics.items()
                                              if k != "split_controls"}
    assert bare_rows == full_rows  # the pairings' answers; no control adds a row
    assert set(bare["matrices"]) == {"turn 1", "turn 2", "agent 0 turn 2", "agent 1 turn 2"}
    bound = metrics["split_controls"]["eval/no_information_bound"]
    assert bare["no_information_bound"] == full["no_information_bound"] == bound
    assert "The controls replace" in (tmp_path / "full" / "results.md").read_text()
    assert "The controls replace" not in (tmp_path / "bare" / "results.md").read_text()

def test_bad_pairings_are_refused_before_a_model_loads(runs, tmp_path, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was reported")

    monkeypatch.setattr(evaluate, "load_model", refuse)
    monkeypatch.setattr(evaluate, "load_tokenizer", refuse)
    a = str(runs["a"])

    def edited(name, **changes):  # a copy of run a with debate.json changed
        folder = tmp_path / name
        shutil.copytree(runs["a"], folder)
        info = json.loads((folder / "debate.json").read_text())
        (folder / "debate.json").write_text(json.dumps({**info, **changes}))
        return str(folder)

    magrpo = tmp_path / "magrpo"
    magrpo.mkdir()
    (magrpo / "args.json").write_text(json.dumps(dict(script="magrpo", model="tiny")))
    (tmp_path / "empty").mkdir()
    cases = [
        (["--speakers", a], "--speakers: --speakers and --readers go together"),
        (["--speakers", a, "--readers", a, "--run", a],
         "--speakers: evaluates speakers x readers alone"),
        (["--speakers", a, "--readers", str(tmp_path / "nowhere")],
         f"--readers: {tmp_path / 'nowhere'} is not a folder"),
        (["--speakers", str(tmp_path / "empty"), "--readers", a],
         f"--speakers: {tmp_path / 'empty'} has no args.json"),
        (["--speakers", a, "--readers", str(magrpo)], f"--readers: {magrpo} is a magrpo.py run"),
        (["--speakers", a, "--readers", str(runs["digits"])],
         f"--readers: {runs['digits']} was trained on --dataset arith:digits, {a} on arith:split"),
        (["--speakers", a, "--readers", a, "--model", "smollm2-135m"],
         f"--speakers: {a}'s agents are on tiny, the pairings on --model smollm2-135m"),
        (["--speakers", f"base,{a}", "--readers", edited("other", models=["other"] * 2)],
         "'s agents are on other, the pairings on --model tiny (one base model for every run)"),
        (["--speakers", edited("three", models=["tiny"] * 3), "--readers", a],
         "has 3 agents, the pairings 2"),
        (["--speakers", a, "--readers", edited("one", adapters=[["agent0_turn1"] * 2])],
         "debates 1 turn: it has no turn-2 adapters to read with"),
        (["--speakers", a, "--readers", a, "--num-turns", "1"], "--num-turns: a pairing needs"),
    ]
    for flags, message in cases:
        capsys.readouterr()
        with pytest.raises(SystemExit) as refused:
            evaluate.main(parse_args(evaluate.Args, [*flags, "--output-dir", str(tmp_path / "o")]))
        err = capsys.readouterr().err.strip().splitlines()
        assert refused.value.code == 2 and len(err) == 1, (flags, err)
        assert err[0].startswith("error: ") and message in err[0], (flags, err[0])
