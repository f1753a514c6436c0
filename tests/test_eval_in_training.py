"""Both trainers measure the team on a fixed held-out set before the first update, every
--eval-every updates and at the end, with the numbers evaluate.py reports; the rows land in metrics.jsonl."""
import json
from types import SimpleNamespace

import pytest

import cotrain
import magrpo
from conftest import run_script
from nanomarl.cotrain_run import eval_due, heldout_records
from nanomarl.runs import projected_time
from nanomarl.tasks.debate import load_task


def mask(rows: int, ones: list[int], width: int = 8):
    """A [rows, width] 0/1 mask whose row i holds ones[i] ones."""
    import torch
    return torch.tensor([[1.0] * k + [0.0] * (width - k) for k in ones[:rows]])


def test_cotrain_evaluate_team_hand_computed(monkeypatch):
    """3 questions, 2 agents, 2 turns; the debate and the self-consistency control are faked so
    every number can be computed by hand."""
    import torch
    records = [dict(question=f"q{i}", answer=gold, task="math") for i, gold in enumerate(["1", "2", "3"])]
    # answers[b][t][a]. Turn 1: agent 0 right on q0; agent 1 right on all. Turn 2: agent 0 right
    # on all; agent 1 wrong on q0
    answers = [[["1", "1"], ["1", "9"]],  # q0
               [["9", "2"], ["2", "2"]],  # q1
               [[None, "3"], ["3", "3"]]]  # q2
    # every debate response on q0, q1, q2 is 1, 2, 5 tokens: 4 responses -> budgets 4, 8, 20 tokens
    response = dict(response_mask=mask(3, [1, 2, 5]), query_mask=mask(3, [6, 6, 6]))
    debate_rollout = {(t, a): response for t in range(2) for a in range(2)}
    # the control: agent 0's turn-1 policy, 4 (= A x T) seats per round, 2 tokens per answer
    rounds = {("q0", "q1", "q2"): [["1", "2", "3"], ["7", "2", "4"], ["7", "5", None],
                                   [None, "5", None]],
              ("q2",): [["3"], ["3"], ["9"], ["9"]]}  # [seat][question]
    calls, draws = [], []

    def played(recs, answers, rollout):  # a cotrain.Debate with these answers [b][t][a]
        correct = torch.tensor([[[float(x == r["answer"]) for x in turn] for turn in per_question]
                                for per_question, r in zip(answers, recs)])
        texts = [[["text"] * len(turn) for turn in per_question] for per_question in answers]
        return cotrain.Debate(recs, texts, texts, answers, correct, None, rollout)

    def fake_debate(recs, models, tokenizers, adapter_names, max_new_tokens, greedy=False,
                    temperature=None, **kwargs):
        calls.append(dict(greedy=greedy, questions=tuple(r["question"] for r in recs),
                          names=adapter_names, temperature=temperature))
        if greedy:
            return played(recs, answers, debate_rollout)
        draws.append(torch.rand(1).item())  # sampling uses the global random state
        seats, b = rounds[calls[-1]["questions"]], len(recs)
        return played(recs, [[[seat[i] for seat in seats]] for i in range(b)],  # one turn
                      {(0, s): dict(response_mask=mask(b, [2] * b), query_mask=mask(b, [5] * b))
                       for s in range(len(seats))})

    monkeypatch.setattr(cotrain, "run_debate", fake_debate)
    team = type("T", (), dict(models=lambda self: [None, None], agent_tokenizers=lambda self: [None, None],
                              adapter_names=[["a0", "a1"], ["a0", "a1"]]))()
    args = cotrain.Args(num_agents=2, num_turns=2, seed=5)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    m = cotrain.evaluate_team(team, args, records, scorer=None)
    assert torch.equal(torch.get_rng_state(), state)  # the training's random state is untouched
    torch.manual_seed(5)
    assert draws[0] == torch.rand(1).item()  # the control samples from --seed
    assert [(c["greedy"], c["questions"]) for c in calls] == [
        (True, ("q0", "q1", "q2")), (False, ("q0", "q1", "q2")), (False, ("q2",))]
    assert calls[1]["names"] == [["a0"] * 4] and calls[1]["temperature"] == args.temperature
    # majority vote with tie expectation: turn 1 q0 {1,1} -> 1; q1 {9,2} tie -> 0.5; q2 {None,3} -> 1
    assert m["eval/turn1/accuracy"] == pytest.approx((1 + 0.5 + 1) / 3)
    # turn 2: q0 {1,9} -> 0.5; q1 {2,2} -> 1; q2 {3,3} -> 1
    assert m["eval/turn2/accuracy"] == pytest.approx((0.5 + 1 + 1) / 3)
    assert m["eval/turn1/agent_accuracy"] == pytest.approx((1 / 3 + 1) / 2)
    assert m["eval/turn1/invalid_rate"] == pytest.approx(1 / 6)
    # (question, agent) pairs from turn 1 to 2: agent 0 W->R on q1 and q2; agent 1 R->W on q0
    assert m["eval/turn2/wrong_to_right"] == pytest.approx(2 / 6)
    assert m["eval/turn2/right_to_wrong"] == pytest.approx(1 / 6)
    # each agent: accuracy per turn, and its transitions as fractions of the 3 questions
    assert [m[f"eval/turn{t}/agent{a}/accuracy"] for t in (1, 2) for a in (0, 1)] == pytest.approx(
        [1 / 3, 1, 1, 2 / 3])
    assert [m[f"eval/turn2/agent{a}/{k}"] for a in (0, 1)
            for k in ("wrong_to_right", "right_to_wrong")] == pytest.approx([2 / 3, 0, 0, 1 / 3])
    # the debate's tokens per question: 4 responses of 1, 2, 5 tokens; 4 prompts of 6
    assert m["eval/tokens_per_question"] == pytest.approx((4 + 8 + 20) / 3)
    assert m["eval/prompt_tokens_per_question"] == pytest.approx(24)
    # the control's first 4 answers: q0 [1, 7, 7, None] -> 7 wins: 0; q1 [2, 2, 5, 5] -> tie: 0.5;
    # q2 [3, 4, None, None] -> None wins outright: 0
    assert m["eval/sc/num_samples"] == 4
    assert m["eval/sc/vote_accuracy"] == pytest.approx((0 + 0.5 + 0) / 3)
    assert m["eval/sc/sample_accuracy"] == pytest.approx((1 / 4 + 2 / 4 + 1 / 4) / 3)
    assert m["eval/sc/invalid_rate"] == pytest.approx((1 / 4 + 0 + 2 / 4) / 3)
    assert m["eval/sc/tokens_per_question"] == 8 and m["eval/sc/prompt_tokens_per_question"] == 20
    # within the debate's tokens (2 per answer): q0 budget 4 -> 2 answers [1, 7]: 0.5; q1 budget
    # 8 -> 4 answers: 0.5; q2 budget 20: a second round, capped at 8 answers (16 tokens, short of
    # 20) with three 3s: 1
    assert m["eval/sc/budget_vote_accuracy"] == pytest.approx((0.5 + 0.5 + 1) / 3)
    assert m["eval/sc/budget_samples"] == pytest.approx((2 + 4 + 8) / 3)
    assert m["eval/sc/budget_tokens_per_question"] == pytest.approx((4 + 8 + 16) / 3)
    assert m["eval/sc/budget_per_question"] == pytest.approx((4 + 8 + 20) / 3)
    assert m["eval/sc/budget_short"] == pytest.approx(1 / 3)
    assert m["eval/num_questions"] == 3 and m["timing/eval_s"] >= m["timing/eval_sc_s"] >= 0
    # --no-eval-self-consistency: the debate alone
    calls.clear()
    args = cotrain.Args(num_agents=2, num_turns=2, eval_self_consistency=False)
    off = cotrain.evaluate_team(team, args, records, scorer=None)
    assert len(calls) == 1 and not any(k.startswith("eval/sc/") for k in off)
    assert off["eval/tokens_per_question"] == m["eval/tokens_per_question"]


def test_cotrain_heldout_questions_never_train(tmp_path):
    args = cotrain.Args(dataset="arith:easy", eval_questions=30)
    train = load_task("arith:easy", "train", limit=1000, seed=3)
    held = heldout_records(args, train)
    assert len(held) == 30 and not {r["question"] for r in held} & {r["question"] for r in train}
    # the same held-out set whatever the training seed: the "before" number is comparable across seeds
    assert [r["question"] for r in held] == [r["question"] for r in heldout_records(args, [])]
    # a split that shares questions with training is refused before any model loads
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(dict(question=f"{i} + 1?", answer=i + 1)) + "\n" for i in range(5)))
    with pytest.raises(SystemExit):
        heldout_records(cotrain.Args(dataset=f"jsonl:{data}", eval_split="train"),
                                load_task(f"jsonl:{data}", "train"))


def test_a_small_file_held_out_says_how_many_it_holds(tmp_path, capsys):
    """60 rows: the hash split holds out a few, not --eval-questions 40, and the run says so."""
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(dict(question=f"{i} + 1?", answer=i + 1)) + "\n"
                            for i in range(60)))
    held = heldout_records(cotrain.Args(dataset=f"jsonl:{data}"), load_task(f"jsonl:{data}"))
    assert 0 < len(held) < 40
    assert (f"note: --eval-questions 40, but split 'test' of jsonl:{data} holds {len(held)}: the "
            f"held-out evaluation has {len(held)}") in capsys.readouterr().out


def test_cotrain_cli_logs_eval_rows_before_and_after(tmp_path):
    run = tmp_path / "run"
    out = run_script(["cotrain.py", "--model", "tiny", "--max-steps", "2", "--max-new-tokens", "8", "--eval-questions", "4",
                      "--eval-every", "1", "--questions-per-update", "2", "--ppo-epochs", "1", "--output-dir", str(run)])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]  # every step exactly once; step 0 = before any update
    # each evaluation first says what it runs (minutes on a CPU with no bar moving)
    said = "held-out evaluation: 4 questions, 2 agents x 2 turns, greedy, up to 8 tokens; then agent 0"
    assert out.stdout.count(said) == 3
    assert "objective/scores" not in rows[0] and all("objective/scores" in r for r in rows[1:])
    for r in rows:
        assert {"eval/turn1/accuracy", "eval/turn2/accuracy", "eval/turn2/wrong_to_right"} <= set(r)
        assert r["eval/num_questions"] == 4 and 0 <= r["eval/turn2/accuracy"] <= 1
    assert all("eval/turn2/agent_accuracy" in r for r in rows)
    assert all({"eval/turn2/agent1/accuracy", "eval/turn2/agent0/right_to_wrong",
                "eval/sc/vote_accuracy", "eval/sc/budget_vote_accuracy",
                "eval/tokens_per_question"} <= set(r) for r in rows)
    assert all(r["eval/sc/num_samples"] == 4 and 0 < r["eval/sc/tokens_per_question"] <= 4 * 8
               for r in rows)
    # the headline is the last turn's mean agent accuracy; the authors' vote stays in the table
    assert "held-out evaluation" in out.stdout and "eval/turn2/agent_accuracy:" in out.stdout
    assert "eval/turn2/accuracy:" not in out.stdout and " eval/turn2/accuracy |" in out.stdout
    assert " eval/sc/vote_accuracy | eval/sc/budget_vote_accuracy |" in out.stdout
    # the control samples from its own random state: without it, training is the same, number for
    # number
    alone = tmp_path / "alone"
    run_script(["cotrain.py", "--model", "tiny", "--max-steps", "2", "--max-new-tokens", "8",
                "--eval-questions", "4", "--eval-every", "1", "--questions-per-update", "2",
                "--ppo-epochs", "1", "--output-dir", str(alone), "--no-eval-self-consistency"])
    same = [json.loads(line) for line in (alone / "metrics.jsonl").read_text().splitlines()]
    strip = lambda r: {k: v for k, v in r.items()  # noqa: E731
                       if not k.startswith(("timing/", "eval/sc/"))}
    assert [strip(r) for r in same] == [strip(r) for r in rows]
    assert not any(k.startswith("eval/sc/") for r in same for k in r)


def test_evaluating_between_updates_changes_no_training_number(tmp_path):
    """arith:split's held-out evaluation (the debate and its controls) is greedy and
    draws no random number: with --eval-every 1 the training rows equal those of a run evaluated
    only before and after, number for number. And --max-steps sets nothing the updates before the
    last see but the lr's decay: 2 updates with --lr-decay-steps 3 are the 3-update run's first 2."""
    from test_cotrain import ascii_fraction, tiny_args

    def training_rows(eval_every, *flags):
        out = tmp_path / "_".join(("every", eval_every, *flags))  # a folder per run
        run = cotrain.main(tiny_args("--max-steps", "3", "--dataset", "arith:split",
                                     "--eval-questions", "2", "--eval-every", eval_every, *flags,
                                     "--output-dir", str(out)),
                           score_fn=ascii_fraction)
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        evaluated = [r["step"] for r in rows if "eval/silent/turn2/agent_accuracy" in r]
        kept = [{k: v for k, v in r.items() if not k.startswith(("eval/", "timing/"))}
                for r in rows]
        return evaluated, kept

    evaluated, every = training_rows("1")
    ends, ends_only = training_rows("0")
    assert (evaluated, ends) == ([0, 1, 2, 3], [0, 3])
    assert every == ends_only and len(every[1]) > 10
    ends, shorter = training_rows("0", "--max-steps", "2", "--lr-decay-steps", "3")
    assert ends == [0, 2] and shorter == every[:3] and shorter[2]["lr"] < shorter[1]["lr"]


def test_cotrain_finish_run_headline_is_the_mean_agent_accuracy(tmp_path, capsys, monkeypatch):
    """The end-of-run table: per turn the authors' vote beside the mean agent accuracy, and the
    before -> after line on the last turn's mean agent accuracy, which an unparsable partner cannot
    raise (here the vote rises 0.5 -> 1.0 while the agents stay at 0.5)."""
    from nanomarl import cotrain_run
    monkeypatch.setattr(cotrain_run, "plot_run", lambda run_dir: None)
    rows = [dict(step=step, **{"eval/num_questions": 4, "eval/turn2/wrong_to_right": 0.0,
                               "eval/turn2/right_to_wrong": 0.0, "eval/turn1/accuracy": 0.5,
                               "eval/turn1/agent_accuracy": 0.5, "eval/turn2/accuracy": vote,
                               "eval/turn2/agent_accuracy": 0.5})
            for step, vote in ((0, 0.5), (3, 1.0))]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cotrain_run.finish_run(tmp_path, cotrain.Args(num_agents=2, num_turns=2))
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith(" step |"))
    assert header.split(" | ")[-4:] == ["eval/turn1/accuracy", "eval/turn1/agent_accuracy",
                                        "eval/turn2/accuracy", "eval/turn2/agent_accuracy"]
    assert "eval/turn2/agent_accuracy: 0.500 (step 0) -> 0.500 (step 3)" in out
    assert "the authors' rule" in out


def test_magrpo_evaluate_team_uses_greedy_joint_actions_and_the_task_reward(monkeypatch):
    problems = [dict(id=f"p{i}", kind="code") for i in range(4)]
    calls = {}

    def fake_joint_action(agents, tokenizer, prompts, num_samples, max_new_tokens, greedy=False, **kwargs):
        calls.update(num_samples=num_samples, greedy=greedy, problems=len(prompts),
                     logprobs=kwargs["logprobs"])
        return dict(texts=[[[f"{p}-aux"], [f"{p}-main"]] for p in range(len(prompts))])

    def reward(problem, texts):  # problem i: i of 3 tests pass; 1.5 + fraction
        i = int(problem["id"][1:])
        assert texts == [f"{i}-aux", f"{i}-main"]
        return 1.5 + min(i, 3) / 3, dict(structure=1.0, tests_passed=min(i, 3), tests_total=3)

    monkeypatch.setattr(magrpo, "generate_joint_action", fake_joint_action)
    task = magrpo.Task(prompts=lambda p: ["a", "m"], reward=reward, roles=["aux", "main"])
    args = magrpo.Args(sandbox_workers=1)
    m = magrpo.evaluate_team(None, None, problems, task, args)
    assert calls == dict(num_samples=1, greedy=True, problems=4, logprobs=False)  # nothing reads π
    assert m["eval/reward/mean"] == pytest.approx(1.5 + (0 + 1 / 3 + 2 / 3 + 1) / 4)
    assert m["eval/reward/structure"] == 1.0 and m["eval/reward/tests_passed"] == pytest.approx(6 / 4)
    assert m["eval/pass_rate"] == pytest.approx(1 / 4)  # only problem 3 passes every test


def test_magrpo_cli_logs_eval_rows_before_and_after(tmp_path):
    run = tmp_path / "run"
    out = run_script(["magrpo.py", "--model", "tiny", "--dataset", "minicode", "--max-steps", "2", "--max-new-tokens", "8",
                      "--num-generations", "2", "--eval-problems", "3", "--sandbox-workers", "1", "--output-dir", str(run)])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert "reward/mean" not in rows[0] and "reward/mean" in rows[1]
    assert all("eval/reward/mean" in r and "eval/pass_rate" in r for r in (rows[0], rows[2]))
    assert "eval/reward/mean" not in rows[1]  # --eval-every 0: before and after only
    assert "eval/reward/mean:" in out.stdout
    # after the first step: 1 step left at its seconds, 1 evaluation (after the last) at step 0's
    step_s, eval_s = rows[1]["timing/step_s"], rows[0]["timing/eval_s"]
    assert (f"projected on this machine: {(step_s + eval_s) / 60:.1f} more minutes (1 updates of "
            f"{step_s:.0f} s, 1 held-out evaluations of {eval_s:.0f} s)") in out.stdout


def test_projected_time_counts_the_updates_and_evaluations_left(tmp_path):
    """The line after a run's first update: the updates left at its seconds, the held-out
    evaluations left (every 4 updates and after the last) at the last one's seconds."""
    args = SimpleNamespace(max_steps=10, eval_questions=40, eval_every=4)
    rows = [{"step": 0, "timing/eval_s": 90.0}, {"step": 1, "timing/step_s": 60.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evaluations = sum(eval_due(args, step) for step in range(2, 11))  # after 4, 8 and 10
    assert evaluations == 3
    # 9 updates x 60 s + 3 evaluations x 90 s = 810 s
    assert projected_time(tmp_path, 60.0, 9, evaluations) == (
        "projected on this machine: 13.5 more minutes (9 updates of 60 s, 3 held-out "
        "evaluations of 90 s)")
