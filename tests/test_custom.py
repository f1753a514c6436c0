"""Your own reward, your own data, n agents: --reward-fn MODULE:FUNCTION for cotrain.py
(a scorer; the built-in penalties and incentives off unless --reward-fn-rules) and magrpo.py (a joint reward), with
examples/my_reward.py; --dataset as a hub id or a local json/jsonl/csv/parquet file with --question-field /
--answer-field, checked before any model loads; MAGRPO with three agents on the built-in
pipeline task, end to end on the tiny model."""
import csv
import json

import pandas as pd
import pytest
import torch
from conftest import PAPER_PPO, ROOT

import cotrain
import magrpo as M
from common import adapter_parameters
from nanomarl.cli import BadRow, load_function, parse_args
from nanomarl.cotrain_run import custom_scorer
from nanomarl.distributed import seed_everything
from nanomarl.models import load_tokenizer
from nanomarl.tasks.debate import dataset_options, load_task
from nanomarl.tasks.pipeline import PIPELINE_ROLES, pipeline_prompts, pipeline_reward


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------------------------
# --reward-fn: loading, the example file
# ----------------------------------------------------------------------------------------------


def test_load_function_by_path_and_by_dotted_name_and_bad_specs(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    brief = load_function("examples/my_reward.py:correct_and_brief", "--reward-fn")
    record = dict(question="2+2?", answer="4", task="math")
    long_right = "word " * 150 + "The answer is \\boxed{4}."  # 154 words: 1 - 0.5 * (154 - 50) / 200
    assert brief([record] * 3, ["So \\boxed{4}.", long_right, "\\boxed{5}"]) == [1.0, pytest.approx(0.74), 0.0]
    distinct = load_function("examples.my_reward:distinct_and_short", "--reward-fn")
    # word sets {a,b} {c,d} {a,c}: Jaccard 0, 1/3, 1/3 -> distinct 1 - 2/9; all three are 1..80 words -> short 1
    total, levels = distinct({}, ["a b", "c d", "a c"])
    assert total == pytest.approx(1 + 7 / 9) and levels == {"short": 1.0, "distinct": pytest.approx(7 / 9)}

    (tmp_path / "broken.py").write_text("def f(:\n")
    for spec, message in [("examples/my_reward.py", "expected MODULE:FUNCTION"),
                          ("missing/reward.py:f", "missing/reward.py is not a file"),
                          ("examples/my_reward.py:nothing", "has no function 'nothing'"),
                          (f"{tmp_path / 'broken.py'}:f", "failed: SyntaxError"),
                          ("no_such_module_h5:f", "importing no_such_module_h5 failed: ModuleNotFoundError")]:
        with pytest.raises(SystemExit, match="^error: --reward-fn: .*" + message):
            load_function(spec, "--reward-fn")


# ----------------------------------------------------------------------------------------------
# cotrain.py --reward-fn
# ----------------------------------------------------------------------------------------------

TINY = ["--model", "tiny", "--device", "cpu", "--questions-per-update", "2", *PAPER_PPO, "--micro-batch-questions", "0",
        "--max-new-tokens", "6", "--max-steps", "1", "--ppo-epochs", "1", "--sample-every", "0", "--log-every", "0",
        "--eval-questions", "0"]
SCORER = '''SEEN = []


def quarter(records, responses):
    SEEN.append([(r["id"], r["answer"], r["task"]) for r in records])
    return [0.25] * len(responses)
'''


def last_metrics(run_dir) -> dict:
    return json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])


def test_cotrain_bad_reward_fn_stops_before_any_model(tmp_path, no_models):
    for flags, message in [(["--reward-fn", "nope.py:f"], "--reward-fn: nope.py is not a file"),
                           (["--reward-fn-rules"], "--reward-fn-rules: only applies with --reward-fn"),
                           (["--reward-fn", "examples/my_reward.py:correct_and_brief", "--scorer", "verifier",
                             "--verifier", "x"], "--reward-fn: replaces --scorer")]:
        with pytest.raises(SystemExit, match=message):
            cotrain.main(parse_args(cotrain.Args, [*TINY, "--output-dir", str(tmp_path / "run"), *flags]))
    assert not (tmp_path / "run").exists()
    with pytest.raises(SystemExit, match=r"--reward-fn: returned 1.5 for response 1: scores must be in \[0, 1\]"):
        custom_scorer(lambda records, responses: [0.5, 1.5], "--reward-fn")([{}, {}], ["a", "b"])
    with pytest.raises(SystemExit, match="--reward-fn: returned 1 scores for 2 responses"):
        custom_scorer(lambda records, responses: [0.5], "--reward-fn")([{}, {}], ["a", "b"])


def test_cotrain_reward_fn_replaces_the_scorer_and_the_rules_apply_only_when_asked(tmp_path, monkeypatch, capsys):
    """A constant scorer 0.25 with the default penalties (format -10, missing EOS -1) and incentives: without
    --reward-fn-rules every score, penalised score and reward is exactly 0.25 (γ-weighted means of 0.25), no
    bonus; with it the tiny model's answers (never a \\boxed{}) get the format penalty, as the built-in scorers."""
    (tmp_path / "h5_quarter_scorer.py").write_text(SCORER)
    run = cotrain.main(parse_args(cotrain.Args, [*TINY, "--output-dir", str(tmp_path / "off"),
                                                 "--reward-fn", f"{tmp_path / 'h5_quarter_scorer.py'}:quarter"]))
    m = last_metrics(run)
    assert (m["objective/scores"], m["objective/penalized_scores"], m["objective/rewards"], m["objective/bonus"]) == \
        (0.25, 0.25, 0.25, 0.0)
    assert "penalties and incentives: off (--reward-fn-rules)" in capsys.readouterr().out

    monkeypatch.syspath_prepend(str(tmp_path))  # the dotted form: MODULE importable from sys.path / the cwd
    run = cotrain.main(parse_args(cotrain.Args, [*TINY, "--output-dir", str(tmp_path / "on"), "--reward-fn-rules",
                                                 "--reward-fn", "h5_quarter_scorer:quarter"]))
    m = last_metrics(run)
    assert m["objective/scores"] == 0.25 and m["objective/format_penalized_frac"] == 1.0
    assert m["objective/penalized_scores"] == pytest.approx(-10.0 - m["completions/clipped_ratio"])
    assert "penalties and incentives: ON (--reward-fn-rules)" in capsys.readouterr().out
    import h5_quarter_scorer  # the scorer saw the load_task records: arith questions with their integer golds
    calls = h5_quarter_scorer.SEEN
    assert len(calls) == 2 and all(len(records) == 2 * 2 for records in calls)  # 2 turns x (2 agents x 2 questions)
    for records in calls:
        for record_id, answer, task in records:
            assert record_id.startswith("arith/train/") and answer.lstrip("-").isdigit() and task == "math"


# ----------------------------------------------------------------------------------------------
# --dataset: local files, hub ids, fields and splits
# ----------------------------------------------------------------------------------------------

ROWS = [{"problem": "Tom has 2 and gets 2. How many?", "solution": "2 + 2 = 4"},
        {"problem": "A big one?", "solution": "It costs 1,000 + 234\n#### 1,234"},
        {"problem": "Below zero?", "solution": "-3"}]


def write_rows(path, rows):
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".csv":
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        pd.DataFrame(rows).to_parquet(path)
    return path


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".csv", ".parquet"])
def test_local_file_with_field_names(tmp_path, suffix):
    path = write_rows(tmp_path / f"mine{suffix}", ROWS)
    records = load_task(str(path), "train", question_field="problem", answer_field="solution")
    assert [r["answer"] for r in records] == ["4", "1234", "-3"]  # normalize_number: the last number
    assert [r["question"] for r in records] == [row["problem"] for row in ROWS]
    assert [r["id"] for r in records] == ["mine/train/0", "mine/train/1", "mine/train/2"]
    assert {r["task"] for r in records} == {"math"}
    assert len(load_task(str(path), question_field="problem", answer_field="solution", limit=2)) == 2


def test_local_nli_labels_folder_splits_and_every_error(tmp_path):
    nli = write_rows(tmp_path / "nli.jsonl", [{"q": "P/H 1", "label": 0}, {"q": "P/H 2", "label": 2},
                                              {"q": "P/H 3", "label": 1}])
    records = load_task(str(nli), question_field="q", answer_field="label", task="nli")
    assert [r["answer"] for r in records] == ["entailment", "contradiction", "neutral"]  # ANLI's 0/1/2
    words = write_rows(tmp_path / "words.csv", [{"q": "a", "a": "Neutral."}, {"q": "b", "a": "not entailment; contradiction"}])
    assert [r["answer"] for r in load_task(str(words), question_field="q", answer_field="a", task="nli")] == \
        ["neutral", "contradiction"]
    folder = tmp_path / "folder"
    folder.mkdir()
    write_rows(folder / "train.jsonl", ROWS)
    write_rows(folder / "test.jsonl", ROWS[:1])
    test = load_task(str(folder), "test", question_field="problem", answer_field="solution")
    assert [(r["id"], r["answer"]) for r in test] == [("folder/test/0", "4")]

    mine = write_rows(tmp_path / "mine.jsonl", ROWS + [{"problem": "Q?", "solution": "lots"}])
    for call, message in [
            (lambda: load_task(str(mine)), r"^error: --question-field: .*mine.jsonl has no column 'question' "
                                           r"\(its columns: problem, solution\)"),
            (lambda: load_task(str(mine), question_field="problem"), "^error: --answer-field: .*no column 'answer'"),
            (lambda: load_task(str(mine), "test", question_field="problem", answer_field="solution"),
             r"^error: --dataset: .*mine.jsonl has no split 'test', only train \(a single file is the split"),
            (lambda: load_task(str(tmp_path / "absent.csv")), "^error: --dataset: .*absent.csv does not exist"),
            (lambda: load_task(str(mine), question_field="problem", answer_field="solution", task="code"),
             "^error: --dataset-task: expected math or nli"),
            (lambda: load_task("gsm8k", answer_field="solution"), "^error: --answer-field: applies to a hub id"),
            (lambda: load_task("owner/not-here"), "^error: --dataset: cannot load 'owner/not-here'"),  # offline hub
            (lambda: load_task(str(words), question_field="q", answer_field="a", task="math", skip_bad_rows=True),
             "^error: --dataset: .* has no usable rows")]:
        with pytest.raises(SystemExit, match=message):
            call()
    with pytest.raises(BadRow, match=r"mine\.jsonl:4: unparsable gold answer 'lots'"):  # file, line
        load_task(str(mine), question_field="problem", answer_field="solution")
    assert len(load_task(str(mine), question_field="problem", answer_field="solution", skip_bad_rows=True)) == 3


def test_a_local_jsonl_file_reads_one_way_with_or_without_jsonl(tmp_path):
    """`jsonl:PATH` and `PATH` read a JSONL file the same way (only their splits differ: the rows'
    own or a hash of the question, and 'train'): a bad row named by file and line (and the flag of
    a field it lacks), a field that no row has by its flag, an empty file by the file."""
    good, lacking, unparsable = ({"problem": f"{i} + 1?", "solution": str(i + 1), "split": "train"}
                                 for i in range(3))
    del lacking["solution"]
    unparsable["solution"] = "lots"
    fields = dict(question_field="problem", answer_field="solution")
    data = write_rows(tmp_path / "f.jsonl", [good, lacking, unparsable])
    for name in (f"jsonl:{data}", str(data)):
        with pytest.raises(BadRow, match=r"f\.jsonl:2: no field 'solution' \(--answer-field names"):
            load_task(name, **fields)
        with pytest.raises(SystemExit, match=r"^error: --question-field: .*f\.jsonl has no column "
                                             r"'question' \(its columns: problem, solution, split\)"):
            load_task(name)
        assert [(r["question"], r["answer"]) for r in load_task(name, skip_bad_rows=True, **fields)] \
            == [("0 + 1?", "1")]
    data = write_rows(tmp_path / "g.jsonl", [good, good, unparsable])
    for name in (f"jsonl:{data}", str(data)):
        with pytest.raises(BadRow, match=r"g\.jsonl:3: unparsable gold answer 'lots'"):
            load_task(name, **fields)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    for name in (f"jsonl:{empty}", str(empty)):
        with pytest.raises(SystemExit, match=r"^error: --dataset: .*empty\.jsonl has no usable rows"):
            load_task(name)


def test_hub_id_goes_through_load_dataset(tmp_path, monkeypatch):
    """The real hub code path (offline here): load_dataset(id, config, split=...) is called as a user would."""
    import datasets

    source = write_rows(tmp_path / "gsm.jsonl", [{"question": "Q1", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"}])
    calls, real_load_dataset = [], datasets.load_dataset

    def fake_load_dataset(path, *args, split=None, **kwargs):
        calls.append((path, args, split))
        return real_load_dataset("json", data_files=str(source), split="train")

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    records = load_task("openai/gsm8k", "test", config="main")
    assert calls == [("openai/gsm8k", ("main",), "test")]
    assert [(r["id"], r["question"], r["answer"]) for r in records] == [("openai/gsm8k/test/0", "Q1", "7")]


def test_cotrain_reads_and_checks_the_data_before_any_model(tmp_path, no_models):
    path = write_rows(tmp_path / "mine.csv", ROWS)
    with pytest.raises(SystemExit, match="error: --question-field: .*no column 'question'"):
        cotrain.main(parse_args(cotrain.Args, [*TINY, "--output-dir", str(tmp_path / "run"), "--dataset", str(path)]))
    with pytest.raises(SystemExit, match="error: --questions-per-update: is 4 but .* has 3 questions"):
        cotrain.main(parse_args(cotrain.Args, [*TINY, "--output-dir", str(tmp_path / "run"), "--dataset", str(path),
                                               "--question-field", "problem", "--answer-field", "solution",
                                               "--questions-per-update", "4"]))
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------------------------
# MAGRPO with n = 3: the pipeline task, roles, --reward-fn
# ----------------------------------------------------------------------------------------------

PARSE = "def parse(text):\n    return [int(x) for x in text.split(',')]"
SQUARE = "Here it is:\n```python\ndef transform(numbers):\n    return [x * x for x in numbers]\n```"
FIRST_TWO = "def aggregate(numbers):\n    return sum(numbers[:2])"


def test_pipeline_problems_and_reward_by_hand():
    train, held_out = M.load_problems("pipeline", "train"), M.load_problems("pipeline", "eval")
    assert (len(train), len(held_out)) == (96, 24) and not {p["id"] for p in train} & {p["id"] for p in held_out}
    problem = train[7]  # commas | square every number | the sum of the first two numbers
    assert (problem["id"], problem["transform"]) == ("pipeline/9", "square every number")
    assert problem["tests"]["pipeline"][0] == "assert aggregate(transform(parse('-3,-6,1'))) == 45"
    assert [len(problem["tests"][k]) for k in ("parse", "transform", "aggregate", "pipeline")] == [3, 3, 3, 3]
    prompts = M.format_prompts(problem)
    assert len(prompts) == 3 and all("solve(text) = aggregate(transform(parse(text)))" in p for p in prompts)
    assert [p.split("You write ONLY the function ")[1].split(";")[0] for p in prompts] == PIPELINE_ROLES

    total, levels = M.joint_reward(problem, [PARSE, SQUARE, FIRST_TWO])
    assert total == pytest.approx(3.0) and levels["pipeline"] == pytest.approx(1.2)
    identity = "def transform(numbers):\n    return numbers"  # defined, fails its tests and the pipeline's
    total, levels = M.joint_reward(problem, [PARSE, identity, FIRST_TWO])
    assert total == pytest.approx(0.6 + 0.8) and levels["transform_tests"] == 0 and levels["pipeline"] == 0
    broken = PARSE.replace("')]", "')")  # a syntax error: left out, the others keep their unit tests
    total, levels = M.joint_reward(problem, [broken, SQUARE, FIRST_TWO])
    assert total == pytest.approx(0.4 + 0.8) and levels["parse_tests"] == 0
    assert M.joint_reward(problem, ["", "", ""])[0] == 0.0


def test_num_agents_must_match_the_roles_and_bad_reward_fn_stop_before_any_model(tmp_path, no_models):
    run = ["--model", "tiny", "--output-dir", str(tmp_path / "run")]
    for flags, message in [(["--dataset", "pipeline"], r"^error: --num-agents: --dataset pipeline has 3 roles "
                                                       r"\(parse, transform, aggregate\): pass --num-agents 3, got 2"),
                           (["--dataset", "humaneval", "--num-agents", "3"], "has 2 roles \\(aux, main\\)"),
                           (["--dataset", "pipeline", "--num-agents", "3", "--turns", "2"], "--turns: --dataset pipeline is single-turn"),
                           (["--dataset", "pipeline", "--num-agents", "3", "--reward-fn", "examples/my_reward.py:nothing"],
                            "^error: --reward-fn: examples/my_reward.py has no function 'nothing'")]:
        with pytest.raises(SystemExit, match=message):
            M.main(parse_args(M.Args, [*run, *flags]))
    assert not (tmp_path / "run").exists()
    with pytest.raises(SystemExit, match="--reward-fn: expected a finite number"):
        M.custom_reward(lambda problem, texts: "good", "--reward-fn")({}, ["a"])


def test_three_agents_rollout_reward_update_and_isolation():
    """n = 3 on the tiny model: every agent samples from its own role's prompt, each joint action gets the real
    pipeline reward (sandbox), an agent's loss reaches only its own adapter, and one MAGRPO update changes each
    of the three adapters and never the base. raw advantages + shift 1: non-zero advantages on a random model."""
    seed_everything(0)
    tokenizer = load_tokenizer("tiny")
    args = M.Args(model="tiny", dataset="pipeline", num_agents=3, num_generations=2, max_new_tokens=6, chat_template=False,
                  temperature=1.0, top_p=1.0, top_k=0, sandbox_workers=1, lr=0.03, adv_mode="raw", reward_shift=1.0)
    agents = M.build_agents(args, "cpu")
    task = M.make_task(args, "pipeline")
    assert task.roles == ["parse", "transform", "aggregate"]
    problem = M.load_problems("pipeline", "train", limit=1)[0]
    roots, batches = M.rollout(agents, tokenizer, [problem], task, args)
    root = roots[0]
    assert root.prompts == pipeline_prompts(problem) and len(root.texts) == 3 and len(batches[0]) == 3
    for action, reward in zip(root.joint, root.rewards):
        texts = [root.texts[i][k] for i, k in enumerate(action)]
        assert reward == pytest.approx(pipeline_reward(problem, texts)[0] + 1.0)
    model = agents.models[0]
    base_before = {n: p.clone() for n, p in model.named_parameters() if ".lora_" not in n}
    adapters_before = [[p.clone() for p in adapter_parameters(model, name)] for name in agents.names]
    M.compute_returns(root, 1.0)
    root.advantages = M.group_advantages(M.completion_credits(root, 3, 2), "raw")
    for agent in range(3):  # an agent's loss touches its own adapter only
        M.accumulate_agent_loss(agents, agent, batches[0][agent], root.advantages[agent], 1, args)
        for other, name in enumerate(agents.names):
            grads = [p.grad for p in adapter_parameters(model, name)]
            assert all(g is not None and g.abs().sum() > 0 for g in grads[1::2]) if other == agent else \
                all(g is None for g in grads), (agent, other)
        model.zero_grad(set_to_none=True)
    metrics = M.magrpo_update(agents, roots, batches, args)
    for i, name in enumerate(agents.names):
        assert metrics[f"agent{i}/grad_norm"] > 0
        assert any(not torch.equal(a, b) for a, b in zip(adapters_before[i], adapter_parameters(model, name))), name
    assert all(torch.equal(base_before[n], p) for n, p in model.named_parameters() if ".lora_" not in n)
    assert M.rollout_metrics([[root]], roots, batches, 2)["reward/mean"] == pytest.approx(sum(root.rewards) / len(root.rewards))


def test_three_agents_from_the_command_line_with_the_builtin_and_a_custom_reward(tmp_path, capsys):
    flags = ["--model", "tiny", "--dataset", "pipeline", "--num-agents", "3", "--max-steps", "1", "--num-generations", "2",
             "--max-new-tokens", "6", "--sandbox-workers", "1", "--adv-mode", "raw", "--reward-shift", "1.0",
             "--lr", "0.01", "--no-chat-template", "--eval-problems", "2"]
    M.main(parse_args(M.Args, [*flags, "--output-dir", str(tmp_path / "builtin")]))
    assert "3 agents parse/transform/aggregate" in capsys.readouterr().out
    m = last_metrics(tmp_path / "builtin")
    assert {"reward/pipeline", "reward/parse_tests", "agent2/loss", "agent2/grad_norm", "eval/pass_rate"} <= set(m)
    assert all((tmp_path / "builtin" / "adapters" / f"agent{i}" / "adapter_config.json").exists() for i in range(3))
    states = torch.load(tmp_path / "builtin" / "checkpoint.pt", weights_only=False)["agents"]
    for state in states:  # lora_B starts at zero: a non-zero one has been trained
        assert any(v.abs().sum() > 0 for k, v in state.items() if "lora_B" in k)

    (tmp_path / "h5_half_reward.py").write_text("def half(problem, completions):\n"
                                                "    assert len(completions) == 3\n"
                                                "    return 0.5, {'half': 0.5}\n")
    M.main(parse_args(M.Args, [*flags, "--output-dir", str(tmp_path / "custom"), "--reward-shift", "0",
                               "--reward-fn", f"{tmp_path / 'h5_half_reward.py'}:half"]))
    m = last_metrics(tmp_path / "custom")
    assert m["reward/mean"] == 0.5 and m["reward/half"] == 0.5 and "reward/pipeline" not in m
    assert m["eval/reward/mean"] == 0.5 and m["eval/reward/half"] == 0.5 and "eval/pass_rate" not in m


def test_every_script_reads_a_local_file_with_its_own_column_names(tmp_path, monkeypatch):
    """The data flags in train_verifier.py and evaluate.py too: the same four flags reach load_task."""
    import evaluate
    import train_verifier

    data = tmp_path / "mine.csv"
    data.write_text("problem,solution\nWhat is 2 + 3?,5\nWhat is 4 + 4?,8\n")
    flags = ["--dataset", str(data), "--question-field", "problem", "--answer-field", "solution"]
    for module in (train_verifier, evaluate):
        args = parse_args(module.Args, flags)
        records = load_task(args.dataset, "train", None, 0, **dataset_options(args))
        assert [(r["question"], r["answer"]) for r in records] == [("What is 2 + 3?", "5"), ("What is 4 + 4?", "8")]
