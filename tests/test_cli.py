"""The command line as a new user meets it: bad input is refused with ONE line `error: --flag: ...`
and exit code 2 before any model loads, a refusal leaves an existing run folder byte for byte as it
was, and --resume means what was typed (layered over the run's settings and its earlier resumes),
trims metrics.jsonl to the checkpoint and keeps the learning-rate schedule; a run saved by another
version is refused. Also: --config files and Literal choices. In-process calls go through
parse_args -> main, as `python script.py ...` does; two rows run as real subprocesses for the exit
code and the output of the process itself."""
import json
import os
import subprocess
import sys

import pytest
import torch

import cotrain
import magrpo
from conftest import ROOT, ModelLoaded
from nanomarl.cli import parse_args
from nanomarl.cotrain_run import RESUME_MUST_MATCH
from nanomarl.runs import (_RUN, clean_exits, load_checkpoint, log_metrics, resumed_args,
                           save_checkpoint, start_run)

TINY = ["--model", "tiny", "--device", "cpu"]


def start(script, argv):
    """Run `script.py argv` in-process up to the first model load (the run folder is made by then);
    returns the folder."""
    module = {"cotrain": cotrain, "magrpo": magrpo}[script]
    with pytest.raises(ModelLoaded):
        module.main(parse_args(module.Args, argv))
    return _RUN["run_dir"]


@pytest.fixture
def runs(tmp_path, no_models):
    """A cotrain run (started with --lr 1e-4 --max-steps 3, checkpoint at update 2, metrics for 3
    updates and a torn 4th line) and a magrpo run, as the scripts' own start_run wrote them."""
    data = tmp_path / "posts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"post {i}"}) + "\n" for i in range(3)))
    c = start("cotrain", [*TINY, "--lr", "1e-4", "--max-steps", "3",
                          "--output-dir", str(tmp_path / "cotrain-run")])
    m = start("magrpo", [*TINY, "--dataset", f"jsonl:{data}", "--max-steps", "2",
                         "--output-dir", str(tmp_path / "magrpo-run")])
    save_checkpoint(c / "checkpoint.pt", dict(step=2, heads={}))
    save_checkpoint(m / "checkpoint.pt", dict(step=1, agents=[]))
    for step in (1, 2, 3):
        log_metrics(c, {"step": step, "objective/kl": 0.1 * step})
    with open(c / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "objecti')  # a process killed mid-append
    return c, m


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refusal_rows(tmp_path, c, m):
    (tmp_path / "a_file").write_text("")
    new = str(tmp_path / "new-run")
    return [  # (script, argv, the flag the one line must name, a word the message must hold)
        ("cotrain", ["--resume", str(c), "--num-agents", "3"], "--num-agents",
         "trained with --num-agents 2"),
        ("cotrain", ["--resume", str(c), "--lora-r", "16"], "--lora-r", "--lora-r 8"),
        ("cotrain", ["--resume", str(c), "--num-turns", "3"], "--num-turns", "--num-turns 2"),
        ("cotrain", ["--resume", str(c), "--eval-questions", "4"], "--eval-questions",
         "evaluated before its first update with --eval-questions 40"),
        ("cotrain", ["--resume", str(c), "--eval-split", "train"], "--eval-split",
         "--eval-split test; a resumed run evaluates the same questions"),
        ("cotrain", ["--resume", str(m)], "--resume", "python magrpo.py --resume"),
        ("cotrain", ["--resume", str(c), "--ppo-epochs", "-1"], "--ppo-epochs", "-1"),
        ("cotrain", [*TINY, "--output-dir", new, "--ppo-epochs", "-1"], "--ppo-epochs", "> 0"),
        ("cotrain", [*TINY, "--output-dir", new, "--max-steps", "0"], "--max-steps", "> 0"),
        ("cotrain", [*TINY, "--output-dir", new, "--max-new-tokens", "0"], "--max-new-tokens",
         "> 0"),
        ("cotrain", [*TINY, "--output-dir", new, "--temperature", "0"], "--temperature", "> 0"),
        ("cotrain", [*TINY, "--output-dir", new, "--lr", "-1"], "--lr", "> 0"),
        ("cotrain", [*TINY, "--output-dir", new, "--lr", "-1e-4"], "--lr",
         "-1e-4 reads as a flag; write --lr=-1e-4"),
        ("cotrain", [*TINY, "--output-dir", new, "--incentives", "0.5,0.5"], "--incentives",
         "four comma-separated numbers"),
        ("cotrain", ["--model", "/no/such/dir", "--output-dir", new], "--model", "does not exist"),
        ("cotrain", [*TINY, "--output-dir", new, "--dataset", "gsm8K"], "--dataset",
         "unknown dataset"),
        ("cotrain", [*TINY, "--output-dir", new, "--dataset", "jsonl:/no/such.jsonl"], "--dataset",
         "does not exist"),
        ("cotrain", [*TINY, "--output-dir", new, "--eval-every", "-1"], "--eval-every", ">= 0"),
        ("cotrain", [*TINY, "--output-dir", str(tmp_path / "a_file" / "run")], "--output-dir",
         "Not a directory"),
        ("cotrain", [*TINY, "--output-dir", "/proc/nanomarl-no/run"], "--output-dir",
         "cannot write"),
        ("cotrain", [*TINY, "--output-dir", new, "--policy-sharing", "agnet"], "--policy-sharing",
         "agent-turn"),
        ("cotrain", [*TINY, "--output-dir", new, "--num-agent", "3"], "--num-agent",
         "did you mean --num-agents?"),
        ("cotrain", [*TINY, "--output-dir", str(c)], "--output-dir", f"--resume {c}"),
        ("magrpo", ["--resume", str(c)], "--resume", "python cotrain.py --resume"),
        ("magrpo", ["--resume", str(m), "--num-agents", "3"], "--num-agents",
         "trained with --num-agents 2"),
        ("magrpo", ["--resume", str(m), "--lora-r", "4"], "--lora-r", "trained with --lora-r 8"),
        ("magrpo", ["--resume", str(m), "--max-steps", "0"], "--max-steps", "> 0"),
        ("magrpo", ["--resume", str(m), "--max-steps", "1"], "--max-steps",
         "is already at step 1 of --max-steps 1: nothing to train"),
        ("cotrain", ["--resume", str(c), "--max-steps", "2"], "--max-steps",
         f"is already at step 2 of --max-steps 2: nothing to train (a longer run: --resume {c} "
         f"--max-steps N, N > 2)"),
        ("magrpo", ["--resume", str(m), "--eval-problems", "4"], "--eval-problems",
         "evaluated before its first update with --eval-problems 16"),
        ("magrpo", [*TINY, "--output-dir", new, "--temperature", "0"], "--temperature", "> 0"),
        ("magrpo", ["--model", "/no/such/dir", "--output-dir", new], "--model", "does not exist"),
        ("magrpo", ["--model", "smollm2-1.7b", "--output-dir", new], "--model",
         "the aliases tiny, smollm2-135m; a model folder; or a hub id owner/name"),
        ("cotrain", ["--model", "tiny", "--device", "cuda:99", "--output-dir", new], "--device",
         "(use --device cpu"),
        ("magrpo", ["--model", "tiny", "--device", "gpu", "--output-dir", new], "--device",
         "expected cpu, cuda, cuda:N or mps, got 'gpu'"),
        ("magrpo", [*TINY, "--output-dir", new, "--adv-mode", "loo"], "--adv-mode", "rloo"),
        ("magrpo", [*TINY, "--output-dir", new, "--reward-fn",
                    "examples/my_reward.py:correct_and_brief"], "--reward-fn",
         "magrpo.py calls fn(problem, completions) -> reward; cotrain.py's scorers are"),
    ]


def test_every_refusal_is_one_line_exit_2_before_loading_and_changes_nothing(tmp_path, runs,
                                                                             capsys):
    c, m = runs
    before = {c: snapshot(c), m: snapshot(m)}
    capsys.readouterr()
    for script, argv, flag, words in refusal_rows(tmp_path, c, m):
        module = {"cotrain": cotrain, "magrpo": magrpo}[script]
        with pytest.raises(SystemExit) as refused:  # ModelLoaded fails the test: a refusal too late
            module.main(parse_args(module.Args, argv))
        err = capsys.readouterr().err.strip().splitlines()
        row = f"{script}.py {' '.join(argv)}"
        assert refused.value.code == 2, row
        assert len(err) == 1 and err[0].startswith(f"error: {flag}: "), (row, err)
        assert words in err[0], (row, err)
        assert snapshot(c) == before[c] and snapshot(m) == before[m], row
        assert not (tmp_path / "new-run").exists(), row


def test_subprocess_refusals_exit_2_with_one_line(tmp_path, runs):
    """As a user's shell sees it: a malformed JSONL row (before any model loads) and a structural
    change on resume."""
    c, _ = runs
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "1+1?", "answer": "2"}\n{"question": "oops"\n')
    before = snapshot(c)
    for argv, flag in (([*TINY, "--dataset", f"jsonl:{bad}", "--output-dir", str(tmp_path / "r")],
                        "--dataset"), (["--resume", str(c), "--lora-r", "4"], "--lora-r")):
        out = subprocess.run([sys.executable, "cotrain.py", *argv], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1, out.stderr
        assert lines[0].startswith(f"error: {flag}: "), out.stderr
    out = subprocess.run([sys.executable, "cotrain.py", *TINY, "--dataset", f"jsonl:{bad}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "bad.jsonl:2" in out.stderr
    assert snapshot(c) == before and not (tmp_path / "r").exists()


def resume(run, *flags):
    """The settings `cotrain.py --resume RUN flags` trains with, after its run folder is opened
    (start_run)."""
    args = resumed_args(parse_args(cotrain.Args, ["--resume", str(run), *flags]), "cotrain",
                        RESUME_MUST_MATCH)
    start_run(args, "cotrain")
    return args


def test_a_hub_model_offline_is_refused_at_once_or_read_from_the_cache(monkeypatch, capsys):
    """The hub unreachable (HF_ENDPOINT on a closed local port, HF_HUB_OFFLINE unset): a hub id not
    in the local cache is refused in one line within seconds (no retries); one in the cache loads
    from it with a note, and the process goes offline (HF_HUB_OFFLINE=1): nothing retries later."""
    import time

    import huggingface_hub

    from nanomarl.models import check_model_name

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    start_time = time.monotonic()
    with pytest.raises(SystemExit) as refused:
        check_model_name("Qwen/Qwen2.5-Coder-3B", "--model")
    assert time.monotonic() - start_time < 10
    assert refused.value.code == 2
    assert str(refused.value).startswith("error: --model: Qwen/Qwen2.5-Coder-3B is not in the "
                                         "local hub cache and the hub (127.0.0.1:9) cannot be "
                                         "reached")
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache",
                        lambda *a, **k: "/cache/config.json")
    capsys.readouterr()
    check_model_name("Qwen/Qwen2.5-Coder-3B", "--model")
    assert "loads from the local hub cache, offline" in capsys.readouterr().out
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_resume_means_what_was_typed_and_layers_every_resume(runs):
    c, _ = runs
    assert resume(c).lr == 1e-4  # the run's own lr
    default = cotrain.Args()
    assert default.lr != 1e-4 and default.max_steps != 3
    assert resume(c, "--lr", str(default.lr)).lr == default.lr  # typed, although it is the default
    assert resume(c, "--max-steps", str(default.max_steps)).max_steps == default.max_steps  # typed
    first = resume(c, "--lr", "1e-3", "--max-new-tokens", "8")
    second = resume(c, "--max-steps", "7")  # remembers what the first resume changed
    assert (second.lr, second.max_new_tokens, second.max_steps) == (1e-3, 8, 7)
    assert first.max_steps == default.max_steps
    assert resume(c).max_steps == 7
    assert json.loads((c / "args_resume.json").read_text())["max_steps"] == 7
    assert json.loads((c / "args.json").read_text())["lr"] == 1e-4  # the first run's settings stay


def test_a_resume_evaluates_the_first_runs_questions_or_none(runs):
    """The final before -> after line compares the evaluation before the first update with the last:
    a resume may turn it off (0) and on again, never change its questions (the refusal: above)."""
    from nanomarl.cotrain_run import settle_args

    c, _ = runs
    for typed, expected in (("0", 0), ("40", 40)):  # off, then on again: the first run's 40
        args, _ = settle_args(parse_args(cotrain.Args, ["--resume", str(c), "--eval-questions", typed]))
        start_run(args, "cotrain")
        assert args.eval_questions == expected


def test_resume_trims_metrics_to_the_checkpoint(runs):
    c, _ = runs
    resume(c)
    steps = [json.loads(line)["step"] for line in (c / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]


def test_extending_updates_keeps_the_learning_rate_schedule(runs):
    """The run decays over its 3 updates (lr_decay_steps was saved as 3); a resume to 5 updates
    keeps every lr of the first 3 and continues at lr * LR_END_FACTOR, where recomputing over 5
    would jump at the checkpoint."""
    c, _ = runs
    saved = json.loads((c / "args.json").read_text())
    original = cotrain.Args(**{k: v for k, v in saved.items() if k != "script"})
    assert original.lr_decay_steps == 3
    extended = resume(c, "--max-steps", "5")
    lrs = [cotrain.learning_rate(extended, s) for s in range(5)]
    assert lrs[:3] == [cotrain.learning_rate(original, s) for s in range(3)]
    assert lrs == pytest.approx([1e-4, 7e-5, 4e-5, 1e-5, 1e-5])


def test_config_files_recipes_and_run_settings(tmp_path, runs, capsys):
    c, _ = runs
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: tiny\nnum-turns: 3\nlr: 3.0e-4\npenalize_format: false\n"
                      "policy_sharing: agent-turn\n")
    args = parse_args(cotrain.Args, ["--config", str(recipe), "--lr", "1e-3"])
    assert (args.model, args.num_turns, args.lr, args.penalize_format, args.policy_sharing) == (
        "tiny", 3, 1e-3, False, "agent-turn")  # the command line overrides the file
    again = parse_args(cotrain.Args, ["--config", str(c / "args.json")])  # a run's own args.json
    assert (again.lr, again.max_steps, again.output_dir) == (1e-4, 3, "")
    for text, words in (("num_agent: 3\n", "'num_agent' is not a flag"),
                        ("num_turns: two\n", "expected int"),
                        ("policy_sharing: agnet\n", "expected one of agent, agent-turn, shared")):
        recipe.write_text(text)
        with pytest.raises(SystemExit) as refused:
            parse_args(cotrain.Args, ["--config", str(recipe)])
        assert refused.value.code == 2 and words in str(refused.value)
    with pytest.raises(SystemExit, match="--config: .* a cotrain.py run, not of magrpo.py"):
        parse_args(magrpo.Args, ["--config", str(c / "args.json")])


def test_help_lists_choices(capsys):
    with pytest.raises(SystemExit):
        parse_args(magrpo.Args, ["--help"])
    text = capsys.readouterr().out
    assert "--joint-mode {aligned,cross}" in text and "--adv-mode {mean,std,rloo,max,raw}" in text


def test_help_is_grouped_with_one_default_each_and_the_examples_last(capsys):
    with pytest.raises(SystemExit):
        parse_args(cotrain.Args, ["--help"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "usage: cotrain.py [--flag VALUE ...]  (the flags below, by group)"
    groups = [line for line in lines if line and not line.startswith(" ") and line.endswith(":")]
    assert groups == ["options:", "cotrain.py:", "the flags that read questions from a hub dataset or "
                      "a local file:", "the base model and its LoRA adapters:", "the flags of a "
                      "training run and its machine, shared by the trainers:", "examples:"]
    assert lines[lines.index("cotrain.py:") + 1].startswith("  --models STR")  # its own flags first
    examples = lines[lines.index("examples:") + 1:]
    assert "  python cotrain.py --model tiny --max-steps 2    # each stage once, tiny model" \
        in examples and not any(line.lstrip().startswith("--") for line in examples)
    flags = [i for i, line in enumerate(lines) if line.startswith("  --")] + [lines.index("examples:")]
    for start, end in zip(flags, flags[1:]):  # each flag's help says its default once
        assert " ".join(lines[start:end]).count("(default") <= 1, lines[start:end]


def test_clean_exits_stop_with_a_note_after_the_write(tmp_path, monkeypatch, capsys):
    """A SIGTERM that arrives during a checkpoint write is handled after the write: the new
    checkpoint is complete, and the process exits 128 + 15 with the resume command."""
    import os
    import signal

    _RUN.update(script="cotrain", run_dir=tmp_path, step=None)
    handler_before = signal.getsignal(signal.SIGTERM)
    real_save = torch.save

    def save_and_get_signalled(obj, f, *a, **k):
        os.kill(os.getpid(), signal.SIGTERM)  # delivered now, handled only when the write is done
        real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", save_and_get_signalled)
    with pytest.raises(SystemExit) as stopped:
        with clean_exits():
            save_checkpoint(tmp_path / "checkpoint.pt", {"step": 3})
    monkeypatch.undo()
    assert stopped.value.code == 128 + signal.SIGTERM
    assert load_checkpoint(tmp_path / "checkpoint.pt")["step"] == 3
    err = capsys.readouterr().err
    assert f"at step 3; continue with python cotrain.py --resume {tmp_path}" in err
    assert signal.getsignal(signal.SIGTERM) is handler_before  # the handler is gone again


PHI3, QWEN3B = "microsoft/Phi-3-mini-128k-instruct", "Qwen/Qwen2.5-3B-Instruct"
RECIPES = {  # recipe -> (script, settings it must give: the paper-scale commands of docs/maporl.md and docs/magrpo.md)
    "maporl-gsm8k-phi3": (cotrain, dict(model=PHI3, dataset="gsm8k", quant="4bit",
                                        prompt_style="phi3", num_turns=3, max_new_tokens=300,
                                        max_steps=200)),
    "maporl-gsm8k-qwen2.5-3b": (cotrain, dict(model=QWEN3B, dataset="gsm8k",
                                              prompt_style="default")),
    "maporl-anli-phi3": (cotrain, dict(model=PHI3, dataset="anli", num_agents=2)),
    "maporl-anli-qwen2.5-3b": (cotrain, dict(model=QWEN3B, dataset="anli", scorer="verifier")),
    "magrpo-tldr": (magrpo, dict(model="Qwen/Qwen3-1.7B", dataset="tldr", full_finetune=True,
                                 chat_template=False, lr=5e-6, max_steps=2200)),
    "magrpo-arxiv": (magrpo, dict(model="Qwen/Qwen3-1.7B", dataset="arxiv", top_p=0.9)),
    "magrpo-humaneval": (magrpo, dict(model="Qwen/Qwen2.5-Coder-3B", dataset="humaneval", turns=2,
                                      lr=2e-5, max_steps=780)),
    "magrpo-coophumaneval": (magrpo, dict(dataset="coophumaneval", turns=2, temperature=0.6,
                                          max_steps=528)),
    # the CPU demonstrations of tasks that need a partner
    "maporl-split": (cotrain, dict(dataset="arith:split", max_new_tokens=40, min_response_tokens=4,
                                   eval_self_consistency=False, reward_rule="current",
                                   max_steps=30, lr_decay_steps=1000)),
    "maporl-split-words": (cotrain, dict(dataset="arith:split-mix", max_new_tokens=40,
                                         reward_rule="current", max_steps=30,
                                         lr_decay_steps=1000)),
    "magrpo-teamwork": (magrpo, dict(dataset="teamwork", max_new_tokens=16, eval_problems=40,
                                      joint_mode="cross")),
    "magrpo-split": (magrpo, dict(dataset="arith:split", turns=2, max_new_tokens=40,
                                  temperature=0.3, eval_problems=114)),
    "magrpo-costs": (magrpo, dict(dataset="costs", turns=2, max_new_tokens=40, temperature=0.3,
                                  eval_problems=112)),
}


def test_every_recipe_parses_and_typed_flags_override_it():
    assert sorted(p.stem for p in (ROOT / "recipes").glob("*.yaml")) == sorted(RECIPES)
    for name, (module, expected) in RECIPES.items():
        recipe = str(ROOT / "recipes" / f"{name}.yaml")
        args = parse_args(module.Args, ["--config", recipe, "--seed", "3"])
        assert {k: getattr(args, k) for k in expected} == expected and args.seed == 3, name
        assert args.output_dir == f"runs/{name}", name


def test_evaluate_dataset_defaults_by_mode_and_reads_the_runs_own(tmp_path, capsys):
    """evaluate.py's one --dataset: '' = the mode's default; with --run, the run's own; typed, it
    wins."""
    import evaluate
    from nanomarl.eval_runs import use_run_data

    def dataset(*flags):
        args = parse_args(evaluate.Args, list(flags))
        use_run_data(args)
        return args.dataset

    assert (dataset(), dataset("--mode", "magrpo")) == ("arith:digits", "minicode")
    run = tmp_path / "magrpo-run"
    run.mkdir()
    settings = {"script": "magrpo", "model": "tiny", "dataset": "tldr", "max_steps": 2}
    (run / "args.json").write_text(json.dumps(settings))
    assert dataset("--mode", "magrpo", "--run", str(run)) == "tldr"
    assert "--dataset tldr: the one" in capsys.readouterr().out
    assert dataset("--mode", "magrpo", "--run", str(run), "--dataset", "arxiv") == "arxiv"
    settings["task"] = settings.pop("dataset")  # a run of another version: refused, not mapped
    (run / "args.json").write_text(json.dumps(settings))
    with pytest.raises(SystemExit) as refused:
        dataset("--mode", "magrpo", "--run", str(run))
    assert refused.value.code == 2 and capsys.readouterr().err.strip() == (
        f"error: --run: {run}/args.json names no dataset (a run saved by another version of the "
        f"script): type the --dataset to evaluate on")
    assert dataset("--mode", "magrpo", "--run", str(run), "--dataset", "arxiv") == "arxiv"


def test_evaluate_reads_a_curriculum_runs_last_dataset_and_every_stages_training_questions(
        tmp_path, capsys):
    """A run resumed with another --dataset (a curriculum's next stage): evaluate.py's default
    --dataset is the one it trained on last (args_resume.json), and the overlap check counts the
    training questions of both stages."""
    import evaluate
    from nanomarl.eval_runs import train_overlap, use_run_data
    from nanomarl.tasks.debate import load_task

    paths = {}
    for name, offset in (("first", 0), ("second", 100)):
        paths[name] = tmp_path / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(dict(question=f"What is {i} + 1?",
                                                        answer=str(i + 1))) + "\n"
                                       for i in range(offset, offset + 40)))
    run = tmp_path / "run"
    run.mkdir()
    first, second = (f"jsonl:{paths[n]}" for n in ("first", "second"))
    settings = {"script": "cotrain", "model": "tiny", "dataset": first, "seed": 0}
    (run / "args.json").write_text(json.dumps(settings))
    args = parse_args(evaluate.Args, ["--run", str(run)])
    use_run_data(args)
    assert args.dataset == first
    one_train = load_task(first, "train")[:3] + load_task(second, "train")[:2]
    assert train_overlap(one_train, str(run)) == 3
    (run / "resumes.jsonl").write_text(json.dumps({"step": 1, "given": {"dataset": second}}) + "\n")
    (run / "args_resume.json").write_text(json.dumps(dict(settings, dataset=second)))
    args = parse_args(evaluate.Args, ["--run", str(run)])
    use_run_data(args)
    assert args.dataset == second and f"--dataset {second}: the one" in capsys.readouterr().out
    assert train_overlap(one_train, str(run)) == 5
    assert train_overlap(load_task(second, "test"), str(run)) == 0


def another_version(tmp_path, run, name, change):
    """A copy of `run` as another version of the script saved it: change(args.json's dict) edits the
    settings in place, and may return a list of resumes.jsonl rows."""
    import shutil

    old = tmp_path / name
    shutil.copytree(run, old)
    saved = json.loads((old / "args.json").read_text())
    resumes = change(saved)
    (old / "args.json").write_text(json.dumps(saved))
    if isinstance(resumes, list):
        (old / "resumes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in resumes))
    return old


def test_a_run_saved_by_another_version_is_refused_with_one_line(tmp_path, runs, capsys):
    """A run folder resumes with the version of the script that saved it: settings with a flag this
    version lacks (an old name), without one it has, without the script's name, or a resume that
    layered an unknown flag, all stop with one line naming --resume, before anything loads."""
    c, m = runs
    olds = [  # (a copy of the cotrain run as another version saved it, what the line says)
        (another_version(tmp_path, c, "old-name", lambda s: s.update(updates=s.pop("max_steps"))),
         "its flags differ: --max-steps, --updates"),
        (another_version(tmp_path, c, "lacks-a-flag", lambda s: s.pop("seed")),
         "its flags differ: --seed"),
        (another_version(tmp_path, c, "no-script", lambda s: s.pop("script")),
         "its args.json names no script"),
        (another_version(tmp_path, c, "old-resume",
                         lambda s: [dict(time="", step=2, given={"lr_decay_updates": 6})]),
         "its flags differ: --lr-decay-updates"),
    ]
    capsys.readouterr()
    for old, why in olds:
        before = snapshot(old)
        with pytest.raises(SystemExit) as refused:
            cotrain.main(parse_args(cotrain.Args, ["--resume", str(old)]))
        err = capsys.readouterr().err.strip().splitlines()
        assert refused.value.code == 2 and err == [
            f"error: --resume: {old} was saved by another version of cotrain.py ({why}); resume it "
            f"with that version, or start a new run"], (old.name, err)
        assert snapshot(old) == before, old.name
    old = another_version(tmp_path, m, "old-magrpo", lambda s: s.update(steps=s.pop("max_steps")))
    with pytest.raises(SystemExit, match=r"--resume: .* another version of magrpo.py \(its flags "
                                         r"differ: --max-steps, --steps\)"):
        magrpo.main(parse_args(magrpo.Args, ["--resume", str(old)]))
    assert resume(c).max_steps == 3  # a run of this version still resumes
