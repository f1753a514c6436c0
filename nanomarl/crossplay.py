"""Cross-play and swapped roles, the controls of a convention learned by a MAGRPO team (AT-GRPO's):
agent 0 of one seed's team with agent 1 of another seed's, and each team with its two agents in
each other's seat. A convention that only one team shares (who writes which half) works on the
diagonal of the seeds x seeds matrix and may fail off it; a team whose agents learned the task
rather than their seat keeps its score when swapped. evaluate.py --mode magrpo --runs A,B,C reports
them. A learner may skip this module.
"""
from __future__ import annotations

CROSSPLAY_METRICS = {"pass rate": "eval/pass_rate", "reward": "eval/reward/mean"}


def crossplay(play, teams: list[list[str]]) -> dict:
    """teams[k]: run k's adapter names [agent 0, agent 1]; play(names) -> the metrics of the team
    whose seat s is played by adapter names[s]. Returns pairs[i][j] (agent 0 of run i, agent 1 of
    run j) and swapped[k] (run k's agent 1 in seat 0, its agent 0 in seat 1), the names and metrics
    of each."""
    def cell(names):
        return dict(adapters=names, metrics=play(names))

    pairs = [[cell([first, second]) for _, second in teams] for first, _ in teams]
    swapped = [cell([second, first]) for first, second in teams]
    return dict(pairs=pairs, swapped=swapped)


def summarize(played: dict, runs: list[str]) -> dict:
    """Per metric (pass rate, reward): the seeds x seeds matrix (row: agent 0's run, column: agent
    1's run), the swapped teams, and the means of the trained teams (the diagonal), of the
    cross-play pairs (off it) and of the swapped teams. A metric no cell has is left out."""
    out = dict(runs=runs, adapters=[[c["adapters"] for c in row] for row in played["pairs"]],
               swapped_adapters=[c["adapters"] for c in played["swapped"]])
    n = len(runs)
    for name, key in CROSSPLAY_METRICS.items():
        if key not in played["pairs"][0][0]["metrics"]:
            continue
        matrix = [[c["metrics"][key] for c in row] for row in played["pairs"]]
        swapped = [c["metrics"][key] for c in played["swapped"]]
        cross = [matrix[i][j] for i in range(n) for j in range(n) if i != j]
        out[name] = dict(matrix=matrix, swapped=swapped,
                         trained_mean=sum(matrix[i][i] for i in range(n)) / n,
                         cross_mean=sum(cross) / len(cross) if cross else None,
                         swapped_mean=sum(swapped) / n)
    return out


def crossplay_table(summary: dict) -> str:
    """Markdown: per metric, the matrix (rows: agent 0's run, columns: agent 1's run) with each
    row's swapped team in the last column, then the means; the runs are named under the tables."""
    runs, n, parts = summary["runs"], len(summary["runs"]), []
    for name in CROSSPLAY_METRICS:
        if name not in summary:
            continue
        m = summary[name]
        head = [f"{name}: agent 0 of \\ agent 1 of"] + [f"run {j}" for j in range(n)] + ["swapped"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for i in range(n):
            cells = [f"{x:.3f}" for x in m["matrix"][i]] + [f"{m['swapped'][i]:.3f}"]
            lines.append("| " + " | ".join([f"run {i}"] + cells) + " |")
        cross = "" if m["cross_mean"] is None else f", cross-play {m['cross_mean']:.3f}"
        parts.append("\n".join(lines) + f"\n\nmean: trained teams {m['trained_mean']:.3f}"
                     f"{cross}, swapped roles {m['swapped_mean']:.3f}\n")
    names = "; ".join(f"run {k} = {run}" for k, run in enumerate(runs))
    return ("\n".join(parts) + "\nHeld-out problems, greedy. Diagonal: the trained teams; "
            f"swapped: the run's agent 1 in seat 0 and its agent 0 in seat 1. {names}.\n")
