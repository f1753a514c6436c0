"""Who learned what in a debate on split information (arith:split): the speakers' turn-1 adapters
write the turn-1 messages, the readers' adapters of turns 2..T read them and answer. evaluate.py
--mode debate --speakers RUN,... --readers RUN,... (cotrain.py run folders, or `base`: the base
model without adapters) plays one greedy debate per (speakers, readers) pairing on the held-out
questions of the runs, with the split controls (nanomarl/split_controls.py) where the questions
have views. A trained reader beside an untrained speaker says how much of a gain is the reader's;
the reverse, the speaker's; speakers and readers of different seeds (off the matrix's diagonal),
whether the protocol is the team's own or one that any trained reader follows. A learner may skip
this module.
"""
from __future__ import annotations

from pathlib import Path

from nanomarl.cli import arg_error, given_fields
from nanomarl.eval_runs import (RUN_EVAL_SETTINGS, read_debate_run, read_run, run_agent,
                                train_overlap)
from nanomarl.split_controls import no_information_bound
from nanomarl.tasks.debate import dataset_options, load_task

BASE = "base"  # a source without adapters: the base model in every turn
CONTROLS = ("silent", "shuffled", "oracle", "wrong")  # nanomarl/split_controls.py's replays


def sources(text: str) -> list[str]:
    """'A, base,B' -> ['A', 'base', 'B']."""
    return [s.strip() for s in text.split(",") if s.strip()]


def read_source(source: str, flag: str) -> dict:
    """{} for `base`; for a cotrain.py run folder, dict(args=its args.json, debate=its debate.json).
    Refused with one line naming the flag when it is neither."""
    if source == BASE:
        return {}
    if not Path(source).is_dir():
        arg_error(flag, f"{source} is not a folder (give cotrain.py run folders or {BASE})")
    run = read_run(source, flag)
    if run.get("script", "cotrain") != "cotrain":
        arg_error(flag, f"{source} is a {run['script']}.py run, not a cotrain.py one")
    return dict(args=run, debate=read_debate_run(source, flag))


def use_pairing_settings(args):
    """--speakers/--readers, before any model loads: every refusal in one line (a folder that is not
    a cotrain.py run, runs of different datasets, base models or numbers of agents, a reader without
    a turn 2), then what is not typed follows the first run's held-out evaluation as evaluate.py
    --run does (eval_runs.RUN_EVAL_SETTINGS: agents, turns, tokens, prompts, questions) on its
    base model and dataset; greedy unless --no-greedy is typed."""
    if not args.speakers and not args.readers:
        return
    if not (args.speakers and args.readers):
        arg_error("--speakers" if args.speakers else "--readers",
                  "--speakers and --readers go together (each: cotrain.py runs or base)")
    if args.mode != "debate" or args.run or args.runs or args.single_run or args.agents \
            or args.methods or args.use_vllm:
        arg_error("--speakers", "evaluates speakers x readers alone: --mode debate, without --run, "
                                "--runs, --single-run, --agents, --methods and --use-vllm")
    runs = [(flag, s, read_source(s, flag))
            for flag, text in (("--speakers", args.speakers), ("--readers", args.readers))
            for s in sources(text)]
    runs = [(flag, s, run) for flag, s, run in runs if run]
    given = given_fields(args)
    if runs:
        first = runs[0][2]
        values = {flag: first["args"][key] for flag, key in RUN_EVAL_SETTINGS.items()
                  if key in first["args"]}
        if not values.get("limit"):  # no held-out evaluation: evaluate.py's questions
            values.pop("limit", None)
            values.pop("split", None)
        values.update(model=first["debate"]["models"][0], dataset=run_dataset(first),
                      generate_batch_size=first["args"].get("generate_batch_size") or 0)
        if "limit" not in given and "batch_size" not in given:  # all in one call, as it did
            values["batch_size"] = max(values.get("limit", args.limit), 1)
        for key, value in values.items():
            if key not in given:
                setattr(args, key, value)
        if args.dataset != values["dataset"]:  # e.g. arith:split-w1: arith:split in other words
            print(f"note: the runs were trained on --dataset {values['dataset']}; the pairings "
                  f"play {args.dataset} (typed): words or questions they never trained on")
    args.greedy = args.greedy or "greedy" not in given  # as the runs' held-out evaluation
    for flag, source, run in runs:
        check_run(flag, source, run, runs[0], args)
    if args.feedback_in_prompt:
        arg_error("--feedback-in-prompt", "pairings play without a verifier's scores in the "
                                          "prompt: a run trained with them cannot be paired")
    if args.num_turns < 2:
        arg_error("--num-turns", f"a pairing needs turn 1 (speakers) and turn 2 (readers), got "
                                 f"{args.num_turns}")


def run_dataset(run: dict) -> str:
    """The dataset a run (read_source) was trained on."""
    return run["debate"].get("dataset", run["args"].get("dataset"))


def check_run(flag: str, source: str, run: dict, first: tuple, args):
    """One run of a pairing against the first (flag, source, run) and the settings: one line when
    it differs."""
    info = run["debate"]
    if run_dataset(run) != run_dataset(first[2]):
        arg_error(flag, f"{source} was trained on --dataset {run_dataset(run)}, {first[1]} on "
                        f"{run_dataset(first[2])}")
    if set(info["models"]) != {args.model}:
        arg_error(flag, f"{source}'s agents are on {', '.join(dict.fromkeys(info['models']))}, "
                        f"the pairings on --model {args.model} (one base model for every run)")
    if len(info["models"]) != args.num_agents:
        arg_error(flag, f"{source} has {len(info['models'])} agents, the pairings "
                        f"{args.num_agents} (--num-agents: every run's number of agents)")
    if flag == "--readers" and len(info["adapters"]) < 2:
        arg_error(flag, f"{source} debates 1 turn: it has no turn-2 adapters to read with")


def team(bases, source: str, flag: str, args) -> list[tuple[str, list[str]]]:
    """A source's agents, [(base, [T] adapter names)]: `base`, the base model in every turn; a run,
    its agent a in seat a (eval_runs.run_agent: its adapters loaded as r<k>_<name>)."""
    if source == BASE:
        return [(args.model, ["__base__"] * args.num_turns)] * args.num_agents
    return run_agent(bases, source, flag, None, args.num_agents, args.num_turns)


def pair_agents(speakers: list, readers: list) -> list[tuple[str, list[str]]]:
    """Seat a of a pairing: the speakers' turn-1 adapter of seat a, then the readers' adapters of
    turns 2..T of seat a (one base: use_pairing_settings checked it)."""
    return [(base, said[:1] + read[1:]) for (base, said), (_, read) in zip(speakers, readers)]


def pairing_numbers(metrics: dict) -> dict[str, float]:
    """The numbers of one pairing, by their table names: the mean agent accuracy at turns 1 and T,
    each agent's at turn T, and where the questions have views the split controls at turn T, the
    answers that compute with the wrong number, agent 0's speaker alone on the whole question, and
    the turn-1 messages that carry the speaker's number where a partner hears it."""
    T, acc = metrics["num_turns"], metrics["accuracy"]
    out = {"turn 1": acc["mean_agent"][0], f"turn {T}": acc["mean_agent"][-1]}
    out.update({f"agent {a} turn {T}": per_turn[-1] for a, per_turn in enumerate(acc["agents"])})
    c = metrics.get("split_controls") or {}
    keys = {f"{name} turn {T}": f"eval/{name}/turn{T}/agent_accuracy" for name in CONTROLS}
    keys.update({f"follows wrong turn {T}": f"eval/wrong/turn{T}/follows",
                 "whole question": "eval/whole_question/accuracy",
                 "heard turn 1": "eval/turn1/heard"})
    out.update({name: c[key] for name, key in keys.items() if key in c})
    return out


def labels(speakers: list[str], readers: list[str]) -> dict[str, str]:
    """Each source's short name: `base`, or run k in order of appearance."""
    runs = [s for s in dict.fromkeys(speakers + readers) if s != BASE]
    return {BASE: BASE, **{s: f"run {k}" for k, s in enumerate(runs)}}


def evaluate_pairings(args, bases, play_debates, debate_metrics, split_controls) -> tuple:
    """Every (speakers, readers) pairing's greedy debates on the held-out questions, their metrics
    (common.debate_metrics) and split controls; evaluate.py passes its Bases, its play_debates and
    debate_split_controls. Every adapter is loaded first. Returns (the sources, the questions, per
    pairing [i][j] (speakers i, readers j) its agents and metrics, per number the speakers x
    readers matrix and the no-information bound of the questions; every pairing's answers, the rows
    of samples.jsonl)."""
    records = load_task(args.dataset, args.split, args.limit or None, args.question_seed,
                        **dataset_options(args))
    if not records:
        arg_error("--dataset", f"{args.dataset} {args.split} has no questions")
    speakers, readers = sources(args.speakers), sources(args.readers)
    names = labels(speakers, readers)
    for run_dir in names:
        overlap = train_overlap(records, run_dir) if run_dir != BASE else None
        if overlap:
            print(f"WARNING: {overlap} of the {len(records)} questions are training questions of "
                  f"{run_dir}: its accuracy on them measures recall, not generalisation")
    teams = {(flag, s): team(bases, s, flag, args)
             for flag, side in (("--speakers", speakers), ("--readers", readers)) for s in side}
    print(f"pairings: {len(speakers)} speakers x {len(readers)} readers, {len(records)} "
          f"{args.dataset} {args.split} questions, {args.num_agents} agents x {args.num_turns} "
          f"turns, greedy, up to {args.max_new_tokens} tokens an answer")
    pairs, rows = [], []
    for s in speakers:
        pairs.append([])
        for r in readers:
            agents = pair_agents(teams[("--speakers", s)], teams[("--readers", r)])
            desc = f"speakers {names[s]} x readers {names[r]}"
            debate = play_debates(bases, agents, records, args, None, True, desc=desc)[0]
            metrics = debate_metrics(debate.answers, [q["answer"] for q in records])
            if args.split_controls:
                metrics["split_controls"] = split_controls(bases, agents, records, args, debate)
            pairs[-1].append(dict(speakers=s, readers=r, metrics=metrics,
                                  agents=[dict(base=b, adapters=n) for b, n in agents]))
            rows += [dict(method=desc, question=q["id"], gold=q["answer"],
                          answers=debate.answers[b], responses=debate.responses[b])
                     for b, q in enumerate(records)]
            shown = pairing_numbers(metrics)
            print(f"{desc}: " + "  ".join(f"{k} {v:.3f}" for k, v in shown.items()))
    matrices = {k: [[pairing_numbers(c["metrics"])[k] for c in row] for row in pairs]
                for k in pairing_numbers(pairs[0][0]["metrics"])}
    bound = no_information_bound(records) if "views" in records[0] else None
    return dict(speakers=speakers, readers=readers, names=names, pairs=pairs, matrices=matrices,
                no_information_bound=bound, dataset=args.dataset, split=args.split,
                questions=[r["id"] for r in records]), rows


def pairings_table(summary: dict) -> str:
    """Markdown: the matrix of the last turn's mean agent accuracy (rows: speakers, columns:
    readers, %), the diagonal and off-diagonal means when speakers and readers are the same
    sources, then one row per pairing with every number of pairing_numbers; the sources and the
    no-information bound are named under the tables."""
    names, matrices = summary["names"], summary["matrices"]
    speakers, readers = summary["speakers"], summary["readers"]
    last = next(k for k in matrices if k != "turn 1" and k.startswith("turn "))
    head = [f"{last} (%): speakers \\ readers"] + [names[r] for r in readers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s, row in zip(speakers, matrices[last]):
        lines.append("| " + " | ".join([names[s]] + [f"{100 * x:.1f}" for x in row]) + " |")
    n = len(speakers)
    if speakers == readers and n > 1:
        m = matrices[last]
        cross = [m[i][j] for i in range(n) for j in range(n) if i != j]
        lines.append(f"\nmean: diagonal (each source with itself) "
                     f"{100 * sum(m[i][i] for i in range(n)) / n:.1f}, off it "
                     f"{100 * sum(cross) / len(cross):.1f}")
    head = ["speakers", "readers"] + list(matrices)
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, s in enumerate(speakers):
        for j, r in enumerate(readers):
            cells = [f"{100 * matrices[k][i][j]:.1f}" for k in matrices]
            lines.append("| " + " | ".join([names[s], names[r]] + cells) + " |")
    bound = summary["no_information_bound"]
    legend = "; ".join(f"{label} = {source}" for source, label in names.items() if source != BASE)
    return ("\n".join(lines) + f"\n\nHeld-out {summary['dataset']} {summary['split']} questions "
            f"({len(summary['questions'])}), greedy: the speakers' turn-1 adapters write the "
            "turn-1 messages, the readers' adapters of the later turns answer (base: no adapter)."
            + (" The controls replace what the readers hear (nanomarl/split_controls.py); whole "
               "question: the speakers' agent 0 alone at turn 1." if "whole question" in matrices
               else "")
            + (f" No-information bound: {100 * bound:.1f} %." if bound is not None else "")
            + (f" {legend}." if legend else "") + "\n")
