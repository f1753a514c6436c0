"""Tests for toy_game.py: backward induction against brute-force enumeration of all action histories,
hand-computed one-turn games, τ -> 0 and R_syn = 0 limits, the learning dynamics, and the sweep CLI."""
import csv
import itertools
import math
import sys

import numpy as np
import pytest

import toy_game as tg

JOINT_ACTIONS = list(itertools.product((0, 1), repeat=2))


# ----------------------------------------------------------------------------------------------
# Brute force: enumerate every joint action history; nothing here uses the solvers' state machinery
# ----------------------------------------------------------------------------------------------


def synergy_reached(history, C, count_rule):
    if count_rule == "joint":
        return sum(a1 * a2 for a1, a2 in history) >= C
    return min(sum(a[0] for a in history), sum(a[1] for a in history)) >= C


def history_return(history, agent, r_ind, r_col, T, C, args):
    """Agent's undiscounted return of one full history, straight from the game's definition."""
    w = 1.0 / T if args.average_rewards else 1.0
    total = sum(w * (r_col[agent] if a[agent] else r_ind[agent]) for a in history)
    if args.synergy_timing == "end":
        total += args.r_syn * synergy_reached(history, C, args.count_rule)
    else:
        total += sum(w * args.r_syn * synergy_reached(history[:t + 1], C, args.count_rule) for t in range(T))
    return total


def state_of(prefix, C, T, count_rule):
    """The solvers' state index for a history prefix (only used to look the policy up)."""
    if count_rule == "joint":
        return max(C - sum(a1 * a2 for a1, a2 in prefix), 0)
    n1, n2 = (max(C - sum(a[i] for a in prefix), 0) for i in (0, 1))
    return n1 * (T + 1) + n2


def expected_continuation(prefix, agent, probs, r_ind, r_col, T, C, args):
    """E[full return + τ * sum of the agent's entropies at turns len(prefix)..T-1 | prefix], by enumerating
    every continuation. probs(t, state) -> (P(agent 1 collaborates), P(agent 2 collaborates))."""
    total = 0.0
    for suffix in itertools.product(JOINT_ACTIONS, repeat=T - len(prefix)):
        history, prob, entropy = list(prefix), 1.0, 0.0
        for a in suffix:
            p = probs(len(history), state_of(history, C, T, args.count_rule))
            prob *= (p[0] if a[0] else 1 - p[0]) * (p[1] if a[1] else 1 - p[1])
            entropy += -p[agent] * math.log(p[agent]) - (1 - p[agent]) * math.log(1 - p[agent])
            history.append(a)
        total += prob * (history_return(history, agent, r_ind, r_col, T, C, args) + args.tau * entropy)
    return total


def check_against_brute_force(logits, values, probs, agent, r_ind, r_col, T, C, args, tol=1e-9):
    """(1) the solver's turn-1 value equals the enumerated objective; (2) at every history prefix the agent's
    policy is the soft best response σ(ΔQ/τ), with ΔQ enumerated over the full tree."""
    s0 = state_of([], C, T, args.count_rule)
    J = expected_continuation([], agent, probs, r_ind, r_col, T, C, args)
    assert abs(J - values[0, 0, s0, agent]) < tol
    checked = 0
    for t in range(T):
        for prefix in itertools.product(JOINT_ACTIONS, repeat=t):
            p = probs(t, state_of(prefix, C, T, args.count_rule))
            q_own = [0.0, 0.0]
            for a_own in (0, 1):
                for a_other in (0, 1):
                    a = (a_own, a_other) if agent == 0 else (a_other, a_own)
                    p_other = p[1 - agent] if a_other else 1 - p[1 - agent]
                    q_own[a_own] += p_other * expected_continuation(list(prefix) + [a], agent, probs, r_ind, r_col, T, C, args)
            soft_best_response = 1 / (1 + math.exp(-(q_own[1] - q_own[0]) / args.tau))
            assert abs(p[agent] - soft_best_response) < tol, (t, prefix, p[agent], soft_best_response)
            checked += 1
    return checked


GAME_VARIANTS = [  # (count_rule, synergy_timing, average_rewards)
    ("joint", "end", False), ("joint", "every_turn", True), ("each", "end", True), ("each", "every_turn", False)]


@pytest.mark.parametrize("count_rule,synergy_timing,average", GAME_VARIANTS)
@pytest.mark.parametrize("select", tg.SELECTIONS)
@pytest.mark.parametrize("asymmetric", [False, True])
def test_equilibrium_matches_brute_force(count_rule, synergy_timing, average, select, asymmetric):
    # draws where the synergy is worth chasing and stage games have 3 equilibria, so selection matters
    r_ind = np.array([[0.7, 0.6]]) if asymmetric else np.array([[0.7, 0.7]])
    r_col = np.array([[0.3, 0.35]]) if asymmetric else np.array([[0.3, 0.3]])
    args = tg.Args(count_rule=count_rule, synergy_timing=synergy_timing, average_rewards=average)
    T = 3
    logits, values, num_eq = tg.solve_equilibrium(r_ind, r_col, T, args, select=select)
    for C in range(T + 1):
        probs = lambda t, s: tg.sigmoid(logits[t, 0, s])
        for agent in (0, 1):
            check_against_brute_force(logits, values, probs, agent, r_ind[0], r_col[0], T, C, args)
    if (count_rule, synergy_timing, average) == ("joint", "end", False):
        assert num_eq.max() == 3  # the instance really has several equilibria


@pytest.mark.parametrize("count_rule,synergy_timing,average", GAME_VARIANTS)
def test_best_response_matches_brute_force(count_rule, synergy_timing, average):
    r_ind, r_col = np.array([[0.55, 0.5]]), np.array([[0.3, 0.4]])
    args = tg.Args(count_rule=count_rule, synergy_timing=synergy_timing, average_rewards=average, tau=0.2)
    T = 3
    for q in (0.3, 0.7):
        logits, values = tg.best_response(r_ind, r_col, T, q, args)
        for C in range(T + 1):
            for agent in (0, 1):
                probs = lambda t, s: tuple(tg.sigmoid(logits[t, 0, s, i]) if i == agent else q for i in (0, 1))
                check_against_brute_force(logits, values, probs, agent, r_ind[0], r_col[0], T, C, args)


def test_brute_force_at_T4_default_game():
    """The spec's default game at T = 4 (256 histories), every threshold, both solvers."""
    args = tg.Args()
    r_ind, r_col = np.array([[0.62, 0.62]]), np.array([[0.35, 0.35]])
    T = 4
    logits, values, _ = tg.solve_equilibrium(r_ind, r_col, T, args)
    br_logits, br_values = tg.best_response(r_ind, r_col, T, 0.6, args)
    for C in range(T + 1):
        check_against_brute_force(logits, values, lambda t, s: tg.sigmoid(logits[t, 0, s]), 0, r_ind[0], r_col[0], T, C, args)
        check_against_brute_force(br_logits, br_values, lambda t, s: (tg.sigmoid(br_logits[t, 0, s, 0]), 0.6), 0,
                                  r_ind[0], r_col[0], T, C, args)


# ----------------------------------------------------------------------------------------------
# Hand-computed one-turn games
# ----------------------------------------------------------------------------------------------


def test_one_turn_best_response_by_hand():
    # T = C = 1, R_ind = 0.5, R_col = 0.3, q = 0.5: Q(ind) = 0.5, Q(col) = 0.3 + 0.5 * 1 = 0.8
    logits, values = tg.best_response(np.array([[0.5, 0.5]]), np.array([[0.3, 0.3]]), 1, 0.5, tg.Args())
    assert tg.sigmoid(logits[0, 0, 1, 0]) == pytest.approx(1 / (1 + math.exp(-3.0)), abs=1e-12)  # σ(0.3/0.1)
    assert values[0, 0, 1, 0] == pytest.approx(0.8 + 0.1 * math.log(1 + math.exp(-3.0)), abs=1e-12)  # τ logsumexp
    assert tg.sigmoid(logits[0, 0, 0, 0]) == pytest.approx(1 / (1 + math.exp(2.0)), abs=1e-12)  # C = 0: σ(-0.2/0.1)


def test_one_turn_equilibria_by_hand():
    # T = C = 1, gap R_ind - R_col = 0.4, R_syn = 1: p = σ((-0.4 + p)/0.1) has three roots
    r_ind, r_col = np.array([[0.7, 0.7]]), np.array([[0.3, 0.3]])
    found = {}
    for select in tg.SELECTIONS:
        logits, values, num_eq = tg.solve_equilibrium(r_ind, r_col, 1, tg.Args(), select=select)
        p = tg.sigmoid(logits[0, 0, 1, 0])
        assert p == pytest.approx(1 / (1 + math.exp(-(-0.4 + p) / 0.1)), abs=1e-12)  # a fixed point
        assert num_eq[0, 0, 1] == 3
        found[select] = p
    x = tg.symmetric_stage_roots(np.array([-0.4]), np.array([1.0]), 0.1)[:, 0]
    low, middle, high = 1 / (1 + np.exp(-x))
    assert low == pytest.approx(0.022401, abs=1e-6) and middle == pytest.approx(0.328504, abs=1e-6)
    assert high == pytest.approx(0.997464, abs=1e-6)
    # learning from p = 0.5 drifts up (h(0.5) = -0.4 + 0.5 > 0) past the unstable middle root to the high one
    assert found == pytest.approx({"learn": high, "low": low, "high": high}, abs=1e-12)


def test_general_stage_solver_agrees_with_exact_symmetric_solver():
    rng = np.random.default_rng(0)
    A, B = rng.uniform(-1, 1, 3000), rng.uniform(0, 2, 3000)
    for select in tg.SELECTIONS:
        x_sym, _, n_sym = tg.solve_stage_games(A, B, A, B, 0.1, select, symmetric=True)
        x1, x2, n_gen = tg.solve_stage_games(A, B, A, B, 0.1, select, symmetric=False)
        same = n_sym == n_gen  # the grid scan may miss two nearly coincident roots (documented)
        assert same.mean() > 0.998 and (n_sym == 3).mean() > 0.1
        np.testing.assert_allclose(x1[same], x_sym[same], atol=1e-9)
        np.testing.assert_allclose(x2[same], x_sym[same], atol=1e-9)


# ----------------------------------------------------------------------------------------------
# Limits: τ -> 0 and R_syn = 0
# ----------------------------------------------------------------------------------------------


def hard_expectimax(prefix, q, r_ind, r_col, T, C, args):
    """Unregularised optimum of agent 1 against q, over the full history tree: (value, ΔQ at this node)."""
    if len(prefix) == T:
        return history_return(prefix, 0, r_ind, r_col, T, C, args), 0.0
    q_own = [sum((q if a2 else 1 - q) * hard_expectimax(list(prefix) + [(a1, a2)], q, r_ind, r_col, T, C, args)[0]
                 for a2 in (0, 1)) for a1 in (0, 1)]
    return max(q_own), q_own[1] - q_own[0]


@pytest.mark.parametrize("synergy_timing", ["end", "every_turn"])
def test_tau_to_zero_recovers_unregularised_best_response(synergy_timing):
    tau, T, q = 1e-4, 4, 0.6
    args = tg.Args(tau=tau, synergy_timing=synergy_timing)
    r_ind, r_col = np.array([[0.55, 0.55]]), np.array([[0.35, 0.35]])
    logits, values = tg.best_response(r_ind, r_col, T, q, args)
    for C in range(T + 1):
        hard_value, gap = hard_expectimax([], q, r_ind[0], r_col[0], T, C, args)
        assert 0 <= values[0, 0, C, 0] - hard_value <= T * tau * math.log(2) + 1e-12  # soft value: at most τ log 2 a turn
        for t in range(T):  # every decision node: the soft policy is the hard argmax
            for prefix in itertools.product(JOINT_ACTIONS, repeat=t):
                _, gap = hard_expectimax(list(prefix), q, r_ind[0], r_col[0], T, C, args)
                if abs(gap) > 1e-3:
                    p = tg.sigmoid(logits[t, 0, state_of(prefix, C, T, "joint"), 0])
                    assert p == pytest.approx(float(gap > 0), abs=1e-6)
    # by hand, T = C = 1: Q(col) = 0.35 + q R_syn vs Q(ind) = 0.55 -> collaborate iff q > 0.2
    for q, collaborate in ((0.6, 1.0), (0.1, 0.0)):
        logits, values = tg.best_response(r_ind, r_col, 1, q, args)
        assert tg.sigmoid(logits[0, 0, 1, 0]) == pytest.approx(collaborate, abs=1e-9)
        assert values[0, 0, 1, 0] == pytest.approx(max(0.35 + q, 0.55), abs=1e-9)


@pytest.mark.parametrize("count_rule", ["joint", "each"])
@pytest.mark.parametrize("synergy_timing", ["end", "every_turn"])
@pytest.mark.parametrize("average", [False, True])
def test_no_synergy_never_prefers_collaborating(count_rule, synergy_timing, average):
    args = tg.Args(r_syn=0.0, count_rule=count_rule, synergy_timing=synergy_timing, average_rewards=average,
                   asymmetric=True)
    r_ind, r_col = tg.sample_rewards("sorted", 50, True, np.random.default_rng(0))
    T = 4
    w = 1 / T if average else 1.0
    myopic = (w * (r_col - r_ind) / args.tau)[:, None, :]  # every state: p = σ(w (R_col - R_ind)/τ) < 1/2
    eq_logits = tg.solve_equilibrium(r_ind, r_col, T, args)[0]
    br_logits = tg.best_response(r_ind, r_col, T, 0.7, args)[0]
    for logits in (eq_logits, br_logits):
        np.testing.assert_allclose(logits, np.broadcast_to(myopic, logits.shape), atol=1e-9)
        assert (tg.sigmoid(logits) < 0.5).all()


# ----------------------------------------------------------------------------------------------
# Learning dynamics
# ----------------------------------------------------------------------------------------------


def test_learning_reaches_equilibrium_and_best_response():
    args = tg.Args(learn_steps=2500, learn_lr=20.0)
    T, C = 3, 2
    r_ind, r_col = np.array([[0.5, 0.5], [0.45, 0.45], [0.58, 0.52]]), np.array([[0.3, 0.3], [0.38, 0.38], [0.25, 0.4]])
    target = tg.solve_equilibrium(r_ind, r_col, T, args)[0]
    assert (tg.solve_equilibrium(r_ind, r_col, T, args)[2] == 1).all()  # a unique equilibrium: no selection question
    learned, _, visits = tg.policy_gradient_learning(r_ind, r_col, T, C, args)
    on_path = visits[..., None] > 1e-3
    assert on_path.sum() > 10
    np.testing.assert_allclose(np.where(on_path, tg.sigmoid(learned), 0), np.where(on_path, tg.sigmoid(target), 0), atol=0.02)
    q = 0.6
    br = tg.best_response(r_ind, r_col, T, q, args)[0]
    learned, _, visits = tg.policy_gradient_learning(r_ind, r_col, T, C, args, q=q)
    on_path = visits > 1e-3
    np.testing.assert_allclose(tg.sigmoid(learned[..., 1]), q)  # the opponent never moves
    np.testing.assert_allclose(np.where(on_path, tg.sigmoid(learned[..., 0]), 0), np.where(on_path, tg.sigmoid(br[..., 0]), 0), atol=0.02)
    # and the co-trained agents collaborate more at turn 1 than the agent trained against q here
    assert (tg.sigmoid(target[0, :, C, 0]) != tg.sigmoid(br[0, :, C, 0])).all()


def test_learn_cli_writes_table(tmp_path):
    rows = tg.main(["--learn", "--learn-horizon", "3", "--learn-threshold", "2", "--learn-samples", "2",
                    "--learn-steps", "300", "--qs", "0.6", "--output-dir", str(tmp_path)])
    assert [r["compared with"] for r in rows] == ["NE, select=learn", "NE, select=low", "NE, select=high",
                                                  "any selection", "best response"]
    assert (tmp_path / "learn.md").exists()


# ----------------------------------------------------------------------------------------------
# The sweep command
# ----------------------------------------------------------------------------------------------


def test_sweep_writes_table_and_plot(tmp_path):
    rows = tg.main(["--horizons", "4,6", "--num-samples", "200", "--output-dir", str(tmp_path)])
    with open(tmp_path / "fig5.csv") as f:
        table = list(csv.DictReader(f))
    # C = T-1 down to floor((T-1)/2): T=4 -> 3,2,1 and T=6 -> 5,4,3,2
    assert [(int(r["T"]), int(r["C"])) for r in table] == [(4, 3), (4, 2), (4, 1), (6, 5), (6, 4), (6, 3), (6, 2)]
    assert list(table[0]) == ["T", "C", "ne", "ne_low", "ne_high", "multi_eq", "br_q0.5", "br_q0.6", "br_q0.7",
                              "ne_minus_best_br"]
    for r in table:
        assert all(0 <= float(r[k]) <= 1 for k in list(r)[2:-1])
        assert float(r["ne_minus_best_br"]) == pytest.approx(
            float(r["ne"]) - max(float(r[k]) for k in ("br_q0.5", "br_q0.6", "br_q0.7")), abs=2e-6)
    assert len(rows) == 7 and (tmp_path / "fig5.md").read_text().count("\n|") >= 8
    assert (tmp_path / "fig5.png").stat().st_size > 10_000


def test_sweep_without_matplotlib(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    tg.main(["--horizons", "3", "--num-samples", "10", "--output-dir", str(tmp_path)])
    assert "skipped the plot" in capsys.readouterr().out
    assert (tmp_path / "fig5.csv").exists() and not (tmp_path / "fig5.png").exists()


@pytest.mark.parametrize("argv,flag", [(["--tau", "0"], "--tau"), (["--horizons", "10,x"], "--horizons"),
                                       (["--qs", "1.5"], "--qs"), (["--reward-dist", "normal"], "--reward-dist"),
                                       (["--select", "best"], "--select"), (["--count-rule", "any"], "--count-rule"),
                                       (["--num-samples", "0"], "--num-samples")])
def test_bad_flags_name_the_flag(argv, flag, tmp_path):
    with pytest.raises(SystemExit, match=flag):
        tg.main(argv + ["--output-dir", str(tmp_path)])


def test_output_folder_is_a_new_run_folder_or_refused_at_once(tmp_path, monkeypatch, capsys):
    """Without --output-dir a sweep writes to a folder of its own, runs/toy_game-<time>, so a second
    sweep never overwrites the first; an unwritable one is refused in one line before any work."""
    monkeypatch.chdir(tmp_path)
    tg.main(["--horizons", "3", "--num-samples", "10"])
    folders = list((tmp_path / "runs").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("toy_game-")
    assert (folders[0] / "fig5.csv").is_file() and (folders[0] / "args.json").is_file()
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        tg.main(["--horizons", "3", "--output-dir", "/proc/nanomarl-no/run"])
    assert refused.value.code == 2
    assert capsys.readouterr().err.strip().startswith("error: --output-dir: cannot write to ")
