"""What evaluate.py writes and prints: the console line of each method, the markdown tables of
results.md (debates, their agents, the self-consistency controls, the split-information controls;
the MAGRPO methods), results.json, and the PNG plots (matplotlib optional). evaluate.py calls them
once its methods are evaluated. A learner may skip this module.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from nanomarl.tasks.cooperation import COOPERATION_SCHEMES

VOTE_RULE = ("majority vote with tie expectation, the authors' rule (two agents: [right, "
             "unparsable] scores 1, [right, wrong] 0.5)")


def accuracy_summary(accuracy: dict) -> str:
    """The console line of one method: the mean agent accuracy per turn, then the authors' vote."""
    agents, vote = (" ".join(f"{a:.3f}" for a in accuracy[k]) for k in ("mean_agent", "majority"))
    return f"mean agent accuracy per turn {agents} | vote (authors' tie rule) {vote}"


def control_summary(m: dict) -> str:
    """The console line of a control: one answer's accuracy, the vote of as many answers as the
    debate's, tokens; the vote within the paired debate's tokens where it was evaluated."""
    line = (f"one answer {m['sample_accuracy']:.3f} | vote of {m['num_samples']} "
            f"{m['vote_accuracy']:.3f} | tokens/question {m['tokens_per_question']:.1f}")
    if "budget_vote_accuracy" in m:
        line += (f" | within {m['control_of']}'s {m['budget_per_question']:.1f} tokens/question: "
                 f"vote {m['budget_vote_accuracy']:.3f} of {m['budget_samples']:.1f} answers")
    return line


def debate_table(methods: dict[str, dict]) -> str:
    """Markdown: rows = methods, columns = turns (the mean agent accuracy in %), the same turns'
    majority vote with tie expectation (the authors' rule, in %), the pooled W→R / R→W fractions
    between consecutive turns, then the budget: answers, generated and read tokens per question; a
    note under the table names the two accuracies."""
    n_turns = max(m["num_turns"] for m in methods.values())
    head = (["method"] + [f"turn {t + 1}" for t in range(n_turns)]
            + [f"vote turn {t + 1}" for t in range(n_turns)]
            + [f"W→R / R→W {t + 1}→{t + 2}" for t in range(n_turns - 1)]
            + ["answers / q", "tokens / q", "prompt tokens / q"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in methods.items():
        agents, vote = ([f"{100 * a:.1f}" for a in m["accuracy"][k]]
                        for k in ("mean_agent", "majority"))
        trans = [f"{100 * p['pooled_fractions']['W→R']:.1f} / "
                 f"{100 * p['pooled_fractions']['R→W']:.1f}"
                 for p in m["transitions"]]
        budget = [str(m.get("answers_per_question", ""))] + [
            f"{m[k]:.1f}" if k in m else "" for k in ("tokens_per_question",
                                                      "prompt_tokens_per_question")]
        cells = (agents + [""] * (n_turns - len(agents)) + vote + [""] * (n_turns - len(vote))
                 + trans + [""] * (n_turns - 1 - len(trans)) + budget)
        lines.append("| " + " | ".join([name] + cells) + " |")
    return ("\n".join(lines) + f"\n\nturn t: the mean agent accuracy (%), which an unparsable "
            f"partner cannot raise; vote turn t: the {VOTE_RULE}; tokens: generated, per "
            f"question, every agent and turn.\n")


def agents_table(methods: dict[str, dict]) -> str:
    """Markdown: each agent of each debate method: its accuracy per turn (%) and its W→R / R→W
    between consecutive turns (% of the questions)."""
    n_turns = max(m["num_turns"] for m in methods.values())
    head = (["method", "agent"] + [f"turn {t + 1}" for t in range(n_turns)]
            + [f"W→R / R→W {t + 1}→{t + 2}" for t in range(n_turns - 1)])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in methods.items():
        for a, per_turn in enumerate(m["accuracy"]["agents"]):
            trans = [f"{100 * p['agent_fractions'][a]['W→R']:.1f} / "
                     f"{100 * p['agent_fractions'][a]['R→W']:.1f}" for p in m["transitions"]]
            cells = ([f"{100 * x:.1f}" for x in per_turn] + [""] * (n_turns - len(per_turn))
                     + trans + [""] * (n_turns - 1 - len(trans)))
            lines.append("| " + " | ".join([name, str(a)] + cells) + " |")
    return "\n".join(lines) + "\n\nEach agent: its accuracy per turn (%), its W→R / R→W (% of "\
        "the questions).\n"


def controls_table(controls: dict[str, dict], debates: dict[str, dict]) -> str:
    """Markdown: each self-consistency control (%): one answer's accuracy; the vote of as many
    answers as the debate's, with their tokens per question; the vote of the answers within the
    debate's generated tokens, how many answers and tokens that is and the questions that fell
    short; then the debate it matches: its last turn's mean agent accuracy and vote, its answers
    and tokens per question."""
    head = ["control", "one answer", "vote, same answers", "answers / q", "tokens / q",
            "vote, same tokens", "answers / q", "tokens / q", "short", "debate",
            "debate last turn", "debate vote", "answers / q", "tokens / q"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in controls.items():
        budget = ([f"{100 * m['budget_vote_accuracy']:.1f}", f"{m['budget_samples']:.1f}",
                   f"{m['budget_tokens_per_question']:.1f}", f"{100 * m['budget_short']:.1f} %"]
                  if "budget_vote_accuracy" in m else [""] * 4)
        d = debates.get(m["control_of"])
        debate = ([f"{100 * d['accuracy']['mean_agent'][-1]:.1f}",
                   f"{100 * d['accuracy']['majority'][-1]:.1f}", str(d["answers_per_question"]),
                   f"{d['tokens_per_question']:.1f}"] if d else ["not evaluated", "", "", ""])
        cells = ([f"{100 * m['sample_accuracy']:.1f}", f"{100 * m['vote_accuracy']:.1f}",
                  str(m["num_samples"]), f"{m['tokens_per_question']:.1f}"] + budget
                 + [m["control_of"]] + debate)
        lines.append("| " + " | ".join([name] + cells) + " |")
    temperature = next(iter(controls.values()))["temperature"]
    return ("\n".join(lines) + f"\n\nA control: one agent alone answers each question, sampled at "
            f"T = {temperature}; one answer: its mean accuracy; vote: the same tie rule, over as "
            "many answers as the debate's (same answers) or over the answers, in sampling order, "
            "whose generated tokens do not exceed the debate's on that question (same tokens; at "
            "least one; short: the questions where the answers ran out first).\n")


def split_table(debates: dict[str, dict]) -> str:
    """Markdown: the split-information controls of each debate method that has them (%): its last
    turn's mean agent accuracy, the same with silent, shuffled, oracle and wrong partners, the
    answers that compute with the wrong number, the no-information bound, agent 0's turn-1 policy on
    the whole question, per turn the messages that carry the agent's own number, and before the
    last turn those that carry it in the first sentence (what a partner hears)."""
    chosen = {name: m for name, m in debates.items() if "split_controls" in m}
    if not chosen:
        return ""
    T = max(m["num_turns"] for m in chosen.values())
    controls = ["silent", "shuffled", "oracle", "wrong"]
    head = (["method", f"turn {T}"] + [f"{c} turn {T}" for c in controls]
            + [f"follows wrong turn {T}", "no-information bound", "whole question"]
            + [f"informative turn {t + 1}" for t in range(T)]
            + [f"heard turn {t + 1}" for t in range(T - 1)])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in chosen.items():
        c = m["split_controls"]
        keys = ([f"eval/{control}/turn{T}/agent_accuracy" for control in controls]
                + [f"eval/wrong/turn{T}/follows", "eval/no_information_bound",
                   "eval/whole_question/accuracy"]
                + [f"eval/turn{t + 1}/informative" for t in range(T)]
                + [f"eval/turn{t + 1}/heard" for t in range(T - 1)])
        cells = [f"{100 * m['accuracy']['mean_agent'][-1]:.1f}"] + [
            f"{100 * c[k]:.1f}" if k in c else "" for k in keys]
        lines.append("| " + " | ".join([name] + cells) + " |")
    return ("\n".join(lines) + "\n\nSplit information (each agent sees its own number): the mean "
            "agent accuracy; the same team, greedy, from its turn 1, with every partner message "
            "replaced by a neutral one (silent), by the partner's turn-1 message on another "
            "problem (shuffled), by the task's opening sentence (\"My number is Y.\" in "
            "arith:split's words) with the partner's true number (oracle) or a wrong one "
            "(wrong), and the answers that compute with the wrong number (follows wrong); the "
            "accuracy of the best answer from one's own number alone (no-information bound); "
            "agent 0's turn-1 policy alone on the whole question (whole question); the messages "
            "that carry the agent's own number (informative), and in their first sentence, what a "
            "partner hears (heard).\n")


def samples_table(methods: dict[str, dict], columns: list[str]) -> str:
    """Markdown: rows = methods, columns = the given metric keys (missing -> blank)."""
    lines = ["| method | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 1)]
    for name, m in methods.items():
        cells = [f"{m[c]:.3g}" if isinstance(m.get(c), (int, float)) else "" for c in columns]
        lines.append("| " + " | ".join([name] + cells) + " |")
    return "\n".join(lines) + "\n"


def magrpo_columns(k_values: list[int], code: bool) -> list[str]:
    """results.md's columns in magrpo mode: for code, pass@k, unbiased pass@k, accuracy@k and
    MaxCoop@k for every k of --k-values; for writing, the reward levels; then reward, latency and
    tokens."""
    kinds = (("pass", ""), ("pass", "_unbiased"), ("accuracy", ""), ("maxcoop", ""))
    columns = ([f"{metric}@{k}{suffix}" for metric, suffix in kinds for k in k_values]
               + ["cooperation_rate"] if code else
               ["reward_max_of_k", "level/structure", "level/coordination", "level/vocabulary",
                "level/style"])
    return columns + ["reward", "reward_round1", "time_per_problem_s", "tokens_per_problem",
                      "sequential_generations"]


def write_results(out_dir: Path, results: dict, table: str) -> tuple[Path, Path]:
    """results.json (every number; non-finite floats become null) and results.md (the table)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    clean = lambda x: (None if isinstance(x, float) and not math.isfinite(x) else  # noqa: E731
                       {k: clean(v) for k, v in x.items()} if isinstance(x, dict) else
                       [clean(v) for v in x] if isinstance(x, (list, tuple)) else x)
    json_path, md_path = out_dir / "results.json", out_dir / "results.md"
    json_path.write_text(json.dumps(clean(results), indent=2, ensure_ascii=False))
    md_path.write_text(table)
    return json_path, md_path


def _pyplot():
    """matplotlib.pyplot with a file-only backend, or None (and a note) when matplotlib is not
    installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots (pip install matplotlib)")
        return None
    return plt


def plot_debate(methods: dict[str, dict], out_dir: Path,
                controls: dict | None = None) -> list[Path]:
    """accuracy_per_turn.png (per method and turn, the mean agent accuracy, solid, and the
    authors' majority vote, dashed; each control's vote, dotted) and, with T >= 2,
    transitions.png (pooled W→R and R→W fractions per pair of consecutive turns, a pair of bars
    per method: MAPoRL Figs. 3-4)."""
    plt = _pyplot()
    if plt is None:
        return []
    n_turns = next(iter(methods.values()))["num_turns"]  # every method plays the same T
    paths = [out_dir / "accuracy_per_turn.png"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for i, (name, m) in enumerate(methods.items()):
        ax.plot(range(1, n_turns + 1), [100 * a for a in m["accuracy"]["mean_agent"]], marker="o",
                color=f"C{i}", label=f"{name}: mean agent")
        ax.plot(range(1, n_turns + 1), [100 * a for a in m["accuracy"]["majority"]], marker="x",
                color=f"C{i}", linestyle="--", label=f"{name}: vote (authors' tie rule)")
    for i, (name, m) in enumerate((controls or {}).items(), start=len(methods)):
        ax.axhline(100 * m["vote_accuracy"], color=f"C{i}", linestyle=":",
                   label=f"{name}: vote of {m['num_samples']} answers")
    ax.set(xlabel="turn", ylabel="accuracy (%)", title="Accuracy per turn", ylim=(0, 100))
    ax.set_xticks(range(1, n_turns + 1))
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.savefig(paths[0], dpi=120, bbox_inches="tight")
    plt.close(fig)
    if n_turns < 2:
        return paths
    paths.append(out_dir / "transitions.png")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / (2 * len(methods))
    for i, (name, m) in enumerate(methods.items()):
        for j, kind in enumerate(("W→R", "R→W")):
            ax.bar([x + (2 * i + j) * width for x in range(n_turns - 1)],
                   [100 * pair["pooled_fractions"][kind] for pair in m["transitions"]], width,
                   color=f"C{i}", hatch="" if kind == "W→R" else "//", label=f"{name} {kind}")
    ax.set_xticks([x + 0.4 - width / 2 for x in range(n_turns - 1)],
                  [f"{t + 1}→{t + 2}" for t in range(n_turns - 1)])
    ax.set(xlabel="turns", ylabel="% of (question, agent) pairs",
           title="Answer changes between turns")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.savefig(paths[1], dpi=120, bbox_inches="tight")
    plt.close(fig)
    return paths


def plot_magrpo(methods: dict[str, dict], out_dir: Path, code: bool) -> list[Path]:
    """quality_vs_time.png (pass@k for every k of --k-values, or the reward, against generation
    seconds per problem: the efficiency claim) and, for code, schemes.png (the cooperation schemes
    of each method's passing pairs)."""
    plt = _pyplot()
    if plt is None:
        return []
    keys = sorted({key for m in methods.values() for key in m if re.fullmatch(r"pass@\d+", key)},
                  key=lambda key: int(key[5:])) if code else ["reward"]
    paths = [out_dir / "quality_vs_time.png"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    scale = 100 if code else 1  # pass@k in %
    for i, key in enumerate(keys):  # one marker per k, one point per method
        points = [(name, m["time_per_problem_s"], scale * m[key]) for name, m in methods.items()
                  if m.get(key) is not None]
        ax.scatter([x for _, x, _ in points], [y for _, _, y in points], marker="os^Dv<>p*"[i % 9],
                   label=key)
        xs, ys, placed = [x for _, x, _ in points] or [0], [y for _, _, y in points] or [0], []
        near_x = 0.08 * (max(xs) - min(xs) or 1)  # names closer than this stack, not overlap
        near_y = 0.08 * (100 if code else max(ys) - min(ys) or 1)
        for name, x, y in points if i == 0 else []:  # a method's points share x: its name once
            stack = sum(abs(x - px) <= near_x and abs(y - py) <= near_y for px, py in placed)
            placed.append((x, y))
            ax.annotate(name, (x, y), fontsize=8, xytext=(3, 3 + 10 * stack),
                        textcoords="offset points")
    if code:
        ax.legend(fontsize=8)
    ax.set(xlabel="generation wall-clock per problem (s)", title="Quality against latency",
           ylabel="pass@k (%)" if code else "reward", **(dict(ylim=(0, 100)) if code else {}))
    fig.tight_layout()
    fig.savefig(paths[0], dpi=120)
    plt.close(fig)
    labelled = {name: m for name, m in methods.items() if code and m.get("schemes_labelled")}
    if labelled:
        paths.append(out_dir / "schemes.png")
        fig, ax = plt.subplots(figsize=(6, 1.2 + 0.4 * len(labelled)))
        left = [0.0] * len(labelled)
        for scheme in COOPERATION_SCHEMES:
            widths = [m["schemes"][scheme] / m["schemes_labelled"] for m in labelled.values()]
            ax.barh(list(labelled), widths, left=left, label=scheme)
            left = [a + b for a, b in zip(left, widths)]
        ax.set(xlabel="fraction of passing (aux, main) pairs", title="Cooperation schemes")
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
        fig.savefig(paths[1], dpi=120, bbox_inches="tight")
        plt.close(fig)
    return paths
