"""evaluate.py's trained runs and settings: reading a cotrain.py or magrpo.py run folder (args.json,
debate.json), loading its saved adapters onto a base under new names, which evaluation questions it
trained on, the flags a --run fills in (its dataset, its held-out evaluation's settings), the
refusals of a setting before anything heavy loads, and how to make the evaluated questions again.
evaluate.py calls them. A learner may skip this module.
"""
from __future__ import annotations

import json
from pathlib import Path

from nanomarl.cli import arg_error, check_numbers, given_fields
from nanomarl.models import check_device, check_model_name
from nanomarl.runs import resumes_given
from nanomarl.tasks.debate import load_task, reasoning_gym_config

# --dataset '': cotrain.py's and magrpo.py's CPU defaults
DEFAULT_DATASET = dict(debate="arith:digits", magrpo="minicode")


def read_run(run_dir: str, flag: str, need: tuple[str, ...] = ()) -> dict:
    """A training run's settings as it last trained: args.json, or args_resume.json after a resume
    (which may have changed its dataset); refused with one line naming the flag when args.json is
    missing or a setting in `need` is (a run saved by another version of the script)."""
    path = Path(run_dir) / "args.json"
    if not path.exists():
        arg_error(flag, f"{run_dir} has no args.json: not a run folder of cotrain.py or magrpo.py")
    if path.with_name("args_resume.json").exists():
        path = path.with_name("args_resume.json")
    run = json.loads(path.read_text())
    missing = [key for key in need if key not in run]
    if missing:
        arg_error(flag, f"{path} has no {', '.join(missing)}: a run saved by another version of "
                        f"the script (evaluate it with that version)")
    return run


def read_debate_run(run_dir: str, flag: str) -> dict:
    """cotrain.py's debate.json: the base of each agent, the adapter of each (turn, agent), their
    folders."""
    path = Path(run_dir) / "debate.json"
    if not path.exists():
        arg_error(flag, f"{path} does not exist: not a finished cotrain.py run folder")
    return json.loads(path.read_text())


def load_adapter_as(model, folder: Path, name: str):
    """Load a saved peft adapter folder (save_adapters) under a new name, so that several runs'
    `agent0` can sit on one base; the weights are frozen."""
    from peft import PeftModel

    if not (folder / "adapter_config.json").exists():
        raise SystemExit(f"error: {folder} is not a saved adapter (no adapter_config.json)")
    if isinstance(model, PeftModel):
        model.load_adapter(str(folder), adapter_name=name)
    else:
        model = PeftModel.from_pretrained(model, str(folder), adapter_name=name)
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    return model


def run_agent(bases, run_dir: str, flag: str, agent: int | None, num_agents: int,
              num_turns: int) -> list[tuple[str, list[str]]]:
    """Evaluation agents played by a cotrain.py run: [(base, [T] adapter names)] for each of
    num_agents agents. Agent a is the run's agent `agent` (or a mod A_run when None); turn t uses
    the run's adapter of turn min(t, T_run) (a run trained with fewer turns keeps its last turn's
    adapter). The adapters are loaded onto the run agent's base (through `bases`, evaluate.py's
    Bases), renamed r<k>_<name> so that several runs' agent0 can coexist."""
    info = read_debate_run(run_dir, flag)
    run_agents, run_turns = len(info["models"]), len(info["adapters"])
    if agent is not None and not 0 <= agent < run_agents:
        arg_error(flag, f"{run_dir} has agents 0..{run_agents - 1}, not {agent}")
    prefix = bases.prefix(run_dir)
    out = []
    for a in range(num_agents):
        src = agent if agent is not None else a % run_agents
        base = info["models"][src]
        names = []
        for t in range(num_turns):
            name = info["adapters"][min(t, run_turns - 1)][src]
            if name != "__base__":
                folder = Path(run_dir) / info["adapter_dirs"][src] / name
                bases.load_adapter(base, folder, prefix + name)
                name = prefix + name
            names.append(name)
        out.append((base, names))
    return out


def load_run_adapters(model, run_dir: str, flag: str, args, prefix: str):
    """Every adapter in RUN_DIR/adapters/, loaded as prefix + its name. Returns (model, names, run
    args)."""
    run_args = read_run(run_dir, flag, need=("model", "turns", "feedback", "feedback_tests",
                                               "code_extraction"))
    if run_args["model"] != args.model:
        arg_error(flag, f"{run_dir} was trained on --model {run_args['model']!r}, but --model "
                        f"is {args.model!r}")
    folder = Path(run_dir) / "adapters"
    found = sorted(p.name for p in folder.iterdir()
                   if (p / "adapter_config.json").exists()) if folder.is_dir() else []
    if not found:
        arg_error(flag, f"{folder} holds no saved adapters (a LoRA run saves them when it "
                        "finishes; --full-finetune runs, saved as agents/, are not supported here)")
    for name in found:
        model = load_adapter_as(model, folder / name, prefix + name)
    return model, [prefix + name for name in found], run_args


def train_overlap(records: list[dict], run_dir: str) -> int | None:
    """How many of the evaluation records are questions the cotrain.py run in run_dir loaded for
    training (the split 'train' of its dataset and of each dataset a resume gave it, read again
    with the seed of its args.json); None when they cannot be read."""
    path = Path(run_dir) / "args.json"
    if not path.exists():
        return None
    run, given = json.loads(path.read_text()), resumes_given(Path(run_dir))
    options = (("question_field", "question_field"), ("answer_field", "answer_field"),
               ("config", "dataset_config"), ("task", "dataset_task"))
    fields = {k: run[v] for k, v in options if v in run}
    questions = set()
    datasets = [run["dataset"]] + [g["dataset"] for g in given if "dataset" in g]
    for dataset in dict.fromkeys(datasets):
        try:
            trained = load_task(dataset, "train", None, run["seed"], skip_bad_rows=True, **fields)
        except (SystemExit, Exception) as e:  # e.g. a hub dataset that is not cached
            print(f"note: could not read the training questions of {run_dir} to check the "
                  f"overlap ({e})")
            return None
        questions |= {r["question"] for r in trained}
    return sum(r["question"] in questions for r in records)


def use_run_data(args):
    """--dataset '' is the mode's default; with --run and no --dataset typed: the run's own, read
    from its args.json."""
    args.dataset = args.dataset or DEFAULT_DATASET[args.mode]
    if not args.run or "dataset" in given_fields(args):
        return
    if not (Path(args.run) / "args.json").is_file():
        return
    run = read_run(args.run, "--run")
    if "dataset" not in run:
        arg_error("--run", f"{args.run}/args.json names no dataset (a run saved by another version "
                           f"of the script): type the --dataset to evaluate on")
    value = run["dataset"]
    if value and value != args.dataset:
        print(f"--dataset {value}: the one {args.run} was trained on (--dataset chooses another)")
        args.dataset = value


# evaluate.py's flag <- the cotrain.py run's setting that its held-out evaluation used
RUN_EVAL_SETTINGS = dict(num_agents="num_agents", num_turns="num_turns",
                         max_new_tokens="max_new_tokens", prompt_style="prompt_style",
                         feedback_in_prompt="feedback_in_prompt", verifier="verifier",
                         temperature="temperature", seed="seed", split="eval_split",
                         limit="eval_questions", dataset_config="dataset_config",
                         question_field="question_field", answer_field="answer_field",
                         dataset_task="dataset_task")


def use_run_settings(args):
    """Debate mode with a cotrain.py --run: what is not typed follows the run's own held-out
    evaluation (its agents, turns, tokens, prompts, questions, greedy debates, one generate call per
    turn, its controls' samples; methods offtheshelf and maporl, and the controls if it had them):
    the numbers the training printed. A typed flag that differs gets a note."""
    if args.mode != "debate" or not args.run or not (Path(args.run) / "args.json").is_file():
        return
    run, given = read_run(args.run, "--run"), given_fields(args)
    if run.get("script", "cotrain") != "cotrain":
        return
    run_values = {flag: run[key] for flag, key in RUN_EVAL_SETTINGS.items() if key in run}
    run_values["greedy"] = True
    if not run_values.get("limit"):  # a run without a held-out evaluation: its training questions
        run_values.pop("limit", None)
        run_values.pop("split", None)
    if run.get("model") and not run.get("models") and "model" not in given:
        args.model = run["model"]  # the base its agents were trained on (offtheshelf's either way)
    for flag, value in run_values.items():
        if flag not in given:
            setattr(args, flag, value)
        elif getattr(args, flag) != value:
            print(f"note: {args.run}'s held-out evaluation used --{flag.replace('_', '-')} "
                  f"{value}; evaluating with {getattr(args, flag)} (typed)")
    n = args.sc_samples or args.num_agents * args.num_turns
    if "limit" not in given and "batch_size" not in given:  # all questions in one call, as it did
        args.batch_size = max(args.limit, 1)
    if "generate_batch_size" not in given:  # its 0: a whole turn, or a round of answers, at once
        args.generate_batch_size = run.get("generate_batch_size") or args.batch_size * n
    if "sc_max_samples" not in given:
        args.sc_max_samples = 2 * n
    if "methods" not in given:
        controls = ",sc-base,sc-maporl" if run.get("eval_self_consistency", True) else ""
        args.methods = "offtheshelf,maporl" + controls
    settings = " ".join(f"--{f.replace('_', '-')} {getattr(args, f)}" for f in
                        ("num_agents", "num_turns", "max_new_tokens", "limit", "split", "seed")
                        if f not in given)
    print(f"evaluating as {args.run}'s held-out evaluation: {settings}"
          f"{' --greedy' if 'greedy' not in given else ''} --methods {args.methods} (typed flags "
          f"override; --methods adds sft, single, mix)")


def dataset_source(args) -> dict:
    """How to make the evaluated questions again: the dataset, split, question seed, limit, and for
    reasoning-gym:NAME the library's version and every generator setting."""
    source = dict(dataset=args.dataset, split=args.split, question_seed=args.question_seed,
                  limit=args.limit)
    if args.dataset.startswith("reasoning-gym:"):
        import importlib.metadata
        source.update(library="reasoning-gym", version=importlib.metadata.version("reasoning-gym"),
                      settings=reasoning_gym_config(args.dataset, args.dataset_config))
    return source


def check_args(args):
    """Every refusal of a setting, before anything heavy loads: one line `error: --flag: ...`, exit
    code 2."""
    if args.use_vllm:
        from nanomarl.vllm_rollout import check_vllm_args
        check_vllm_args(args)
    check_numbers(args, positive=("top_p", "num_samples", "batch_size", "sft_lr", "sft_batch_size",
                                  "lora_r", "lora_alpha", "test_timeout"),
                  non_negative=("limit", "max_new_tokens", "top_k", "sft_questions", "sft_epochs",
                                "sandbox_workers", "sc_samples", "sc_max_samples", "sc_agent"),
                  unit_interval=("top_p",))
    check_model_name(args.model, "--model")
    check_device(args.device)
    for flag in ("run", "mt_run", "single_run", "verifier"):
        if getattr(args, flag) and not Path(getattr(args, flag)).is_dir():
            arg_error("--" + flag.replace("_", "-"),
                      f"{getattr(args, flag)} is not a folder (give a run folder)")
    if args.mode == "debate" and (args.num_agents < 1 or args.num_turns < 1):
        arg_error("--num-agents", "need --num-agents >= 1 and --num-turns >= 1")
    sc_samples = args.sc_samples or args.num_agents * args.num_turns
    if args.sc_max_samples and args.sc_max_samples < sc_samples:
        arg_error("--sc-max-samples", f"must be >= the answers per question ({sc_samples}), got "
                                      f"{args.sc_max_samples}")
    if args.runs and (args.mode != "magrpo" or args.run or args.mt_run or args.methods):
        arg_error("--runs", "evaluates the cross-play of magrpo.py runs alone: --mode magrpo, "
                            "without --run, --mt-run and --methods")
    for run_dir in args.runs.split(",") if args.runs else []:
        if not Path(run_dir.strip()).is_dir():
            arg_error("--runs", f"{run_dir.strip()} is not a folder (give magrpo.py run folders)")
    if args.mode == "magrpo" and args.num_samples < 1:
        arg_error("--num-samples", f"must be >= 1, got {args.num_samples}")
    if args.mode == "magrpo" and args.dataset == "pipeline":  # the methods here play 2 agents
        arg_error("--dataset", "pipeline has 3 agents; evaluate.py scores 2-agent teams only "
                               "(minicode, humaneval, coophumaneval, tldr, arxiv, jsonl:PATH)")
    if args.feedback_in_prompt and not args.verifier:
        arg_error("--feedback-in-prompt", "needs --verifier (a train_verifier.py run folder)")
    if not args.greedy and args.temperature <= 0:
        arg_error("--temperature", "must be > 0 when sampling (or pass --greedy), got "
                                   f"{args.temperature}")
