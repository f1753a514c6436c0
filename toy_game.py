"""toy_game.py: MAPoRL's collaboration game (paper Section 2, Figure 5), reconstructed and solved.

Two agents answer a question over T turns. At every turn each agent collaborates (a = 1, paying
R_col) or acts individually (a = 0, paying R_ind > R_col: the short-term temptation is to act
alone); if the two have collaborated together at least C times they earn a synergy reward R_syn.
The paper computes the entropy-regularised Nash equilibrium (tau = 0.1) by backward induction
(both agents optimised: co-training) and compares it with the best response of one agent to a
partner who collaborates with probability q in {0.5, 0.6, 0.7} (one agent trained). Figure 5 plots
the turn-1 collaboration probability against C (T-1 down to floor((T-1)/2)) for T = 10 and 20,
R_syn = 1, each point the mean over 5000 random (R_ind, R_col). The claim: the jointly optimised
agents collaborate more, even at turn 1.
  1. the game: reward draws, the states "collaborations still needed", stage rewards
  2-3. the equilibria of one stage game: bracketed exactly (symmetric) or by a grid scan (general)
  4. backward induction: the regularised equilibrium, and the best response to a fixed q
  5. learning dynamics: exact policy gradient on tabular softmax policies
  6. the Figure-5 sweep: a CSV, a markdown table and a two-panel PNG in --output-dir
  7. --learn: the learned policies against the solvers' equilibria and best responses

Simplifications and differences from the paper:
  1) the paper's game text is not available to the project, so every uncertain choice is a flag
     (--count-rule, --synergy-timing, --reward-dist, --asymmetric, --average-rewards, --select)
     and docs/toy_game_reconstruction.md lists each default beside the alternatives;
  2) each agent maximises E[sum_t r_t + synergy] + tau * sum_t H(pi_t): soft values
     V = E[Q] + tau * H, each agent regularised by its own policy's entropy;
  3) a stage game can have three equilibria: --select picks one (default: the one that damped
     learning from p = 0.5 reaches), and the sweep reports all three.

python toy_game.py                              # Figure 5, the defaults
python toy_game.py --synergy-timing every_turn  # one sensitivity variant
python toy_game.py --learn                      # learning on a small instance
"""
import csv
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from nanomarl.cli import arg_error, parse_args
from nanomarl.runs import writable_dir


@dataclass
class Args:
    horizons: str = "10,20"  # comma-separated horizons T, one plot panel each (paper: 10,20)
    tau: float = 0.1  # entropy temperature τ (paper: 0.1)
    r_syn: float = 1.0  # synergy reward R_syn (paper: 1)
    qs: str = "0.5,0.6,0.7"  # the fixed partner's collaboration probabilities (paper: 0.5,0.6,0.7)
    num_samples: int = 5000  # random (R_ind, R_col) draws averaged per point (paper: 5000)
    reward_dist: str = "boxes"  # boxes (R_ind ~ U[.4,.6], R_col ~ U[.2,.4]) | sorted | iid
    asymmetric: bool = False  # each agent draws its own (R_ind, R_col); default: one shared draw
    count_rule: str = "joint"  # joint: C turns where both collaborated | each: each one C times
    synergy_timing: str = "end"  # end: R_syn once after turn T | every_turn: from the count on
    average_rewards: bool = False  # scale stage rewards (and every-turn synergy) by 1/T
    select: str = "learn"  # equilibrium of a stage game with several: learn | low | high
    seed: int = 0  # seed of the reward draws
    output_dir: str = ""  # for fig5.{csv,md,png} or learn.md (default: runs/toy_game-<time>)
    learn: bool = False  # run the learning dynamics instead of the sweep
    learn_horizon: int = 5  # --learn: horizon T of the instance
    learn_threshold: int = 3  # --learn: threshold C of the instance
    learn_samples: int = 16  # --learn: reward draws trained in parallel
    learn_steps: int = 10000  # --learn: exact policy-gradient steps
    learn_lr: float = 20.0  # --learn: gradient-ascent step size on the logits


SELECTIONS = ("learn", "low", "high")


def check_args(args: Args) -> tuple[list[int], list[float]]:
    """Validate the flags (errors name the flag); returns the parsed horizons and q values."""
    try:
        horizons = [int(x) for x in args.horizons.split(",") if x.strip()]
    except ValueError:
        arg_error("--horizons", f"expected comma-separated integers, got {args.horizons!r}")
    try:
        qs = [float(x) for x in args.qs.split(",") if x.strip()]
    except ValueError:
        arg_error("--qs", f"expected comma-separated numbers, got {args.qs!r}")
    if not horizons or min(horizons) < 1:
        arg_error("--horizons", f"need at least one horizon, each >= 1, got {args.horizons!r}")
    if not qs or not all(0.0 <= q <= 1.0 for q in qs):
        arg_error("--qs", f"need probabilities in [0, 1], got {args.qs!r}")
    if not args.tau > 0:
        arg_error("--tau", f"must be > 0 (the entropy temperature), got {args.tau}")
    if args.num_samples < 1:
        arg_error("--num-samples", f"must be >= 1, got {args.num_samples}")
    choices = dict(reward_dist=("boxes", "sorted", "iid"), count_rule=("joint", "each"),
                   synergy_timing=("end", "every_turn"), select=SELECTIONS)
    for name, allowed in choices.items():
        if getattr(args, name) not in allowed:
            arg_error("--" + name.replace("_", "-"),
                      f"expected one of {', '.join(allowed)}, got {getattr(args, name)!r}")
    if args.learn_horizon < 1 or not 0 <= args.learn_threshold <= args.learn_horizon:
        arg_error("--learn-threshold",
                  f"need 0 <= C <= T, got C={args.learn_threshold}, T={args.learn_horizon}")
    if args.learn_samples < 1:
        arg_error("--learn-samples", f"must be >= 1, got {args.learn_samples}")
    if args.learn_steps < 0:
        arg_error("--learn-steps", f"must be >= 0, got {args.learn_steps}")
    if not args.learn_lr > 0:
        arg_error("--learn-lr", f"must be > 0, got {args.learn_lr}")
    return horizons, qs


# ----------------------------------------------------------------------------------------------
# 1. The game: reward draws, states, stage rewards
# ----------------------------------------------------------------------------------------------


def sample_rewards(reward_dist: str, num_samples: int, asymmetric: bool, rng: np.random.Generator):
    """(R_ind, R_col), each [num_samples, 2]: column i is agent i's reward (equal columns unless
    asymmetric)."""
    num_draws = 2 if asymmetric else 1
    if reward_dist == "boxes":  # the default
        r_ind = rng.uniform(0.4, 0.6, (num_samples, num_draws))
        r_col = rng.uniform(0.2, 0.4, (num_samples, num_draws))
    elif reward_dist == "sorted":
        u = rng.uniform(0.0, 1.0, (2, num_samples, num_draws))
        r_ind, r_col = u.max(0), u.min(0)
    else:  # iid
        r_ind, r_col = rng.uniform(0.0, 1.0, (2, num_samples, num_draws))
    if not asymmetric:
        r_ind, r_col = np.repeat(r_ind, 2, axis=1), np.repeat(r_col, 2, axis=1)
    return r_ind, r_col


def build_states(T: int, count_rule: str):
    """The states one turn can be in, for every threshold C <= T at once.

    A state is "how many collaborations are still needed for the synergy": n in 0..T (joint rule)
    or (n_1, n_2) in 0..T x 0..T (each rule, index n_1 (T + 1) + n_2), floored at 0. Returns
      next_state  [S, 2, 2]  state index after the joint action (a_1, a_2)
      reached     [S]        synergy condition met (nothing more needed)
    """
    n = np.arange(T + 1)
    if count_rule == "joint":
        needed = np.stack([n, n], axis=1)
    else:
        needed = np.stack(np.meshgrid(n, n, indexing="ij"), axis=-1).reshape(-1, 2)
    a = np.array([0, 1])
    a1, a2 = a[:, None], a[None, :]
    if count_rule == "joint":  # n' = max(n - a_1 a_2, 0)
        next_state = np.maximum(needed[:, 0, None, None] - a1 * a2, 0)
    else:  # n_i' = max(n_i - a_i, 0)
        next_n1 = np.maximum(needed[:, 0, None, None] - a1, 0)
        next_n2 = np.maximum(needed[:, 1, None, None] - a2, 0)
        next_state = next_n1 * (T + 1) + next_n2
    reached = (needed == 0).all(axis=1)
    return next_state, reached


def start_state(C: int, T: int, count_rule: str) -> int:
    """Index of the turn-1 state of the game with threshold C: nothing collaborated, C needed."""
    return C if count_rule == "joint" else C * (T + 1) + C


def stage_rewards(r_ind, r_col, T: int, next_state, reached, args: Args):
    """stage[N, S, a_1, a_2, i]: agent i's reward at one turn; terminal[N, S, i]: paid after T."""
    w = 1.0 / T if args.average_rewards else 1.0
    own = np.stack([r_ind, r_col], axis=-1)  # [N, agent, own action]
    N, S = r_ind.shape[0], next_state.shape[0]
    stage = np.zeros((N, S, 2, 2, 2))
    stage[..., 0] += w * own[:, None, 0, :, None]  # agent 1's own action is axis a_1
    stage[..., 1] += w * own[:, None, 1, None, :]  # agent 2's own action is axis a_2
    terminal = np.zeros((N, S, 2))
    if args.synergy_timing == "every_turn":
        stage += w * args.r_syn * reached[next_state][None, :, :, :, None]
    else:
        terminal += args.r_syn * reached[None, :, None]
    return stage, terminal


# ----------------------------------------------------------------------------------------------
# 2. Small maths: sigmoid, entropy, bisection
# ----------------------------------------------------------------------------------------------


def sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def entropy(x):
    """Entropy of a Bernoulli with logit x, H = p softplus(-x) + (1 - p) softplus(x), stable for
    any x."""
    p = sigmoid(x)
    return p * np.logaddexp(0.0, -x) + (1.0 - p) * np.logaddexp(0.0, x)


def joint_action_probs(x1, x2):
    """P(a_1, a_2) [..., 2, 2] when the agents collaborate independently with logits x1, x2."""
    p1, p2 = sigmoid(x1)[..., None], sigmoid(x2)[..., None]
    second = np.concatenate([1 - p2, p2], -1)
    return np.stack([(1 - p1) * second, p1 * second], -2)


def bisect(f, a, b, iters: int = 64):
    """Elementwise root of f on [a, b] given f(a) <= 0 <= f(b)."""
    for _ in range(iters):
        mid = 0.5 * (a + b)
        root_is_right = f(mid) < 0
        a, b = np.where(root_is_right, mid, a), np.where(root_is_right, b, mid)
    return 0.5 * (a + b)


# ----------------------------------------------------------------------------------------------
# 3. One stage game: p_1 = σ((A_1 + B_1 p_2)/τ), p_2 = σ((A_2 + B_2 p_1)/τ)
#    (A_i + B_i p_j = Q_i(collaborate) - Q_i(individual) when the other collaborates w.p. p_j)
# ----------------------------------------------------------------------------------------------


def symmetric_stage_roots(A, B, tau: float):
    """All symmetric equilibria of a symmetric stage game, as logits x = (A + B p)/τ: [3, ...]
    (low, middle, high; NaN where absent). Exact: h(x) = A + B σ(x) - τ x is zero exactly at an
    equilibrium; h' = B σ'(x) - τ vanishes at most at x = ±x_turn (σ(x_turn) = (1 + sqrt(1 -
    4τ/B))/2, only when B > 4τ), so h is monotone on [lo, -x_turn], [-x_turn, x_turn], [x_turn, hi]
    and each piece holds at most one root. With B >= 0 a symmetric game has no asymmetric
    equilibria (both best responses increase)."""
    h = lambda x, A, B: A + B * sigmoid(x) - tau * x
    lo, hi = np.minimum(A, A + B) / tau - 1.0, np.maximum(A, A + B) / tau + 1.0  # h(lo) > 0 > h(hi)
    s = np.sqrt(1.0 - 4.0 * tau / np.maximum(B, 4.0 * tau))  # 0 when B <= 4τ: h only decreases
    x_turn = np.log1p(s) - np.log1p(-s)
    c1, c2 = np.clip(-x_turn, lo, hi), np.clip(x_turn, lo, hi)
    h1, h2 = h(c1, A, B), h(c2, A, B)
    pieces = [(h1 <= 0, lo, c1, -1.0), ((h1 < 0) & (h2 > 0), c1, c2, 1.0), (h2 > 0, c2, hi, -1.0)]
    roots = np.full((3,) + A.shape, np.nan)
    # the other's action does not matter (synergy reached or out of reach): x = A/τ
    flat = np.abs(B) <= 1e-12
    roots[0][flat] = A[flat] / tau
    for k, (has_root, a, b, sign) in enumerate(pieces):  # bisect only where a root exists
        has_root = has_root & ~flat
        Am, Bm = A[has_root], B[has_root]
        roots[k][has_root] = bisect(lambda x: sign * h(x, Am, Bm), a[has_root], b[has_root])
    return roots


def general_stage_roots(A1, B1, A2, B2, tau: float, grid: int = 128, max_roots: int = 5):
    """All equilibria of any 2x2 stage game as logit pairs [max_roots, ..., 2] (NaN where absent):
    the roots of h(x_1) = A_1 + B_1 σ(x_2(x_1)) - τ x_1 with x_2(x_1) = (A_2 + B_2 σ(x_1))/τ.
    h' = B_1 B_2 σ'(x_2) σ'(x_1)/τ - τ <= B_1 B_2/(16τ) - τ: when B_1 B_2 <= 16τ² h is decreasing,
    the equilibrium is unique and one bisection finds it. Otherwise scan a grid, then bisect every
    sign change; two equilibria closer than (hi - lo)/grid in logit can be missed there (a nearly
    degenerate game)."""
    x2_of = lambda x1, A2, B2: (A2 + B2 * sigmoid(x1)) / tau
    h = lambda x1, A1, B1, A2, B2: A1 + B1 * sigmoid(x2_of(x1, A2, B2)) - tau * x1
    shape = A1.shape
    A1, B1, A2, B2 = (v.reshape(-1) for v in (A1, B1, A2, B2))
    lo = np.minimum(A1, A1 + B1) / tau - 1.0  # h(lo) > 0
    hi = np.maximum(A1, A1 + B1) / tau + 1.0  # h(hi) < 0
    x1 = np.full((max_roots, A1.size), np.nan)
    # one agent ignores the other: closed form
    b1_flat, b2_flat = np.abs(B1) <= 1e-12, np.abs(B2) <= 1e-12
    flat = b1_flat | b2_flat
    x1[0, flat] = np.where(b1_flat, A1, A1 + B1 * sigmoid(A2 / tau))[flat] / tau
    u = ~flat & (B1 * B2 <= 16 * tau**2)
    x1[0, u] = bisect(lambda x: -h(x, A1[u], B1[u], A2[u], B2[u]), lo[u], hi[u])
    several = np.flatnonzero(~flat & ~u)
    # chunks bound the memory of the [chunk, grid] scan
    for chunk in np.array_split(several, len(several) // 8192 + 1):
        a1, b1, a2, b2 = A1[chunk, None], B1[chunk, None], A2[chunk, None], B2[chunk, None]
        xs = lo[chunk, None] + (hi - lo)[chunk, None] * np.linspace(0.0, 1.0, grid)
        positive = h(xs, a1, b1, a2, b2) > 0
        crossing = positive[:, :-1] != positive[:, 1:]
        # the first sign changes, in order
        first = np.argsort(~crossing, axis=1, kind="stable")[:, :max_roots]
        a, b = np.take_along_axis(xs, first, 1), np.take_along_axis(xs, first + 1, 1)
        sign = np.where(np.take_along_axis(positive, first, 1), -1.0, 1.0)
        roots = bisect(lambda x: sign * h(x, a1, b1, a2, b2), a, b)
        x1[:, chunk] = np.where(np.take_along_axis(crossing, first, 1), roots, np.nan).T
    x = np.stack([x1, x2_of(x1, A2, B2)], -1)
    return x.reshape((max_roots,) + shape + (2,))


def solve_stage_games(A1, B1, A2, B2, tau: float, select: str, symmetric: bool):
    """The selected equilibrium of every stage game: logits x_1, x_2, the number of equilibria."""
    if symmetric and np.all(B1 >= -1e-9):  # (B_1 = 0 up to rounding where the count is moot)
        x = symmetric_stage_roots(A1, B1, tau)
        num_eq = np.isfinite(x).sum(0)
        if select == "low":
            chosen = np.nanmin(x, 0)
        elif select == "high":
            chosen = np.nanmax(x, 0)
        else:  # damped learning from p = 0.5 (x = 0) climbs to the first root along the drift h(0)
            drift_up = (A1 + 0.5 * B1 > 0)[None]
            ahead = np.where(drift_up, x >= 0, x <= 0)
            nearest = np.argmin(np.where(ahead, np.abs(x), np.inf), 0)
            chosen = np.take_along_axis(x, nearest[None], 0)[0]
        return chosen, chosen, num_eq
    x = general_stage_roots(A1, B1, A2, B2, tau)  # [K, ..., 2]
    num_eq = np.isfinite(x[..., 0]).sum(0)
    p = sigmoid(x)
    if select in ("low", "high"):
        total = np.where(np.isfinite(x[..., 0]), p.sum(-1), np.inf if select == "low" else -np.inf)
        k = np.argmin(total, 0) if select == "low" else np.argmax(total, 0)
    else:  # damped simultaneous soft best responses from (0.5, 0.5), then the nearest equilibrium
        k = np.zeros(A1.shape, int)
        several = num_eq > 1
        a1, b1, a2, b2 = A1[several], B1[several], A2[several], B2[several]
        p1, p2 = np.full(a1.shape, 0.5), np.full(a1.shape, 0.5)
        for _ in range(200):
            p1, p2 = (0.5 * p1 + 0.5 * sigmoid((a1 + b1 * p2) / tau),
                      0.5 * p2 + 0.5 * sigmoid((a2 + b2 * p1) / tau))
        ps = p[:, several]
        squared = (ps[..., 0] - p1) ** 2 + (ps[..., 1] - p2) ** 2
        distance = np.where(np.isfinite(ps[..., 0]), squared, np.inf)
        k[several] = np.argmin(distance, 0)
    chosen = np.take_along_axis(x, k[None, ..., None], 0)[0]
    return chosen[..., 0], chosen[..., 1], num_eq


# ----------------------------------------------------------------------------------------------
# 4. Backward induction: the regularised Nash equilibrium, and the best response to a fixed q
# ----------------------------------------------------------------------------------------------


def soft_values(Q, x1, x2):
    """V_i = E_{a ~ (p_1, p_2)}[Q_i(a_1, a_2)] + τ H(p_i), without τ: returns (E[Q_i], H_i) per
    agent, [..., 2]."""
    expected_q = (joint_action_probs(x1, x2)[..., None] * Q).sum((-3, -2))
    return expected_q, np.stack([entropy(x1), entropy(x2)], -1)


def stage_game_coefficients(Q):
    """Q[..., a_1, a_2, i] -> (A_1, B_1, A_2, B_2): Q_i(collaborate) - Q_i(individual) = A_i +
    B_i p_j."""
    A1 = Q[..., 1, 0, 0] - Q[..., 0, 0, 0]
    B1 = Q[..., 1, 1, 0] - Q[..., 0, 1, 0] - A1
    A2 = Q[..., 0, 1, 1] - Q[..., 0, 0, 1]
    B2 = Q[..., 1, 1, 1] - Q[..., 1, 0, 1] - A2
    return A1, B1, A2, B2


def solve_equilibrium(r_ind, r_col, T: int, args: Args, select: str | None = None):
    """Entropy-regularised Nash equilibrium by backward induction (paper Section 2), all thresholds
    at once.

    Returns logits [T, N, S, 2] (turn t = 0..T-1, draw, state, agent: the logit of collaborating),
    values [T+1, N, S, 2] (soft value before turn t; values[T] is the terminal payoff) and
    num_equilibria [T, N, S] (how many equilibria each stage game had)."""
    select = select or args.select
    next_state, reached = build_states(T, args.count_rule)
    stage, terminal = stage_rewards(r_ind, r_col, T, next_state, reached, args)
    symmetric = args.count_rule == "joint" and np.array_equal(r_ind[:, 0], r_ind[:, 1]) \
        and np.array_equal(r_col[:, 0], r_col[:, 1])
    N, S = stage.shape[:2]
    logits, values = np.zeros((T, N, S, 2)), np.zeros((T + 1, N, S, 2))
    num_equilibria = np.zeros((T, N, S), int)
    values[T] = terminal
    for t in reversed(range(T)):
        Q = stage + values[t + 1][:, next_state]  # Q_i(s, a_1, a_2) = r_i + V_i(s')
        coefficients = stage_game_coefficients(Q)
        x1, x2, num_equilibria[t] = solve_stage_games(*coefficients, args.tau, select, symmetric)
        expected_q, H = soft_values(Q, x1, x2)
        logits[t], values[t] = np.stack([x1, x2], -1), expected_q + args.tau * H  # V = E[Q] + τ H
    return logits, values, num_equilibria


def best_response(r_ind, r_col, T: int, q: float, args: Args):
    """Soft best response of each agent to an opponent who collaborates with probability q in every
    state.

    Single-agent soft DP: Q_i(a) = E_{a_j ~ q}[r_i + V_i(s')], policy σ((Q_i(1) - Q_i(0))/τ),
    V_i = τ log sum_a exp(Q_i(a)/τ). Agent i's answer is column i. Returns logits [T, N, S, 2],
    values [T+1, N, S, 2]."""
    next_state, reached = build_states(T, args.count_rule)
    stage, terminal = stage_rewards(r_ind, r_col, T, next_state, reached, args)
    N, S = stage.shape[:2]
    opponent = np.array([1.0 - q, q])
    logits, values = np.zeros((T, N, S, 2)), np.zeros((T + 1, N, S, 2))
    values[T] = terminal
    for t in reversed(range(T)):
        Q = stage + values[t + 1][:, next_state]
        q1 = (Q[..., 0] * opponent).sum(-1)  # agent 1: [N, S, a_1], averaged over a_2 ~ q
        q2 = (Q[..., 1] * opponent[:, None]).sum(-2)  # agent 2: [N, S, a_2], averaged over a_1 ~ q
        own_q = np.stack([q1, q2], -1)  # [N, S, own action, agent]
        logits[t] = (own_q[:, :, 1] - own_q[:, :, 0]) / args.tau
        values[t] = args.tau * np.logaddexp(own_q[:, :, 0] / args.tau, own_q[:, :, 1] / args.tau)
    return logits, values


# ----------------------------------------------------------------------------------------------
# 5. Learning dynamics: exact policy gradient on tabular softmax policies
# ----------------------------------------------------------------------------------------------


def evaluate_policies(logits, stage, terminal, next_state, tau: float):
    """Soft values of fixed policies (no optimisation): returns Q-gaps dQ [T, N, S, 2] (agent i's
    Q_i(collaborate) - Q_i(individual), the other agent drawn from its policy) and values
    [T+1, N, S, 2]."""
    T = logits.shape[0]
    gaps, values = np.zeros(logits.shape), np.zeros((T + 1,) + terminal.shape)
    values[T] = terminal
    for t in reversed(range(T)):
        Q = stage + values[t + 1][:, next_state]
        x1, x2 = logits[t, ..., 0], logits[t, ..., 1]
        A1, B1, A2, B2 = stage_game_coefficients(Q)
        gaps[t] = np.stack([A1 + B1 * sigmoid(x2), A2 + B2 * sigmoid(x1)], -1)
        expected_q, H = soft_values(Q, x1, x2)
        values[t] = expected_q + tau * H
    return gaps, values


def visitation(logits, next_state, start: int):
    """d[t, N, S]: probability that turn t starts in state s, from `start`, under the policies."""
    T, N, S, _ = logits.shape
    joint = joint_action_probs(logits[..., 0], logits[..., 1])  # [T, N, S, a_1, a_2]
    moves_to = np.eye(S)[next_state]  # [S, a_1, a_2, S']: one-hot of the next state
    d = np.zeros((T, N, S))
    d[0, :, start] = 1.0
    for t in range(T - 1):
        d[t + 1] = np.einsum("ns,nsab,sabz->nz", d[t], joint[t], moves_to)
    return d


def policy_gradient_learning(r_ind, r_col, T: int, C: int, args: Args, q: float | None = None,
                             log_every: int = 0):
    """Gradient ascent on J_i = E[return_i] + τ E[sum_t H_i] from uniform policies (logits 0).

    Exact tabular gradient (policy-gradient theorem):
      dJ_i/dx_i(t, s) = d(t, s) p(1 - p) (dQ_i(t, s) - τ x_i(t, s)),
    d = state visitation from the threshold-C start. q=None: both agents learn simultaneously
    (co-training); q given: only agent 1 learns and agent 2 collaborates with probability q
    everywhere (training one agent)."""
    next_state, reached = build_states(T, args.count_rule)
    stage, terminal = stage_rewards(r_ind, r_col, T, next_state, reached, args)
    start = start_state(C, T, args.count_rule)
    logits = np.zeros((T,) + stage.shape[:2] + (2,))
    if q is not None:
        logits[..., 1] = np.log(q) - np.log1p(-q) if 0 < q < 1 else np.sign(q - 0.5) * 50.0
    learners = [0, 1] if q is None else [0]
    for step in range(args.learn_steps + 1):
        gaps, values = evaluate_policies(logits, stage, terminal, next_state, args.tau)
        if log_every and step % log_every == 0:
            p = sigmoid(logits[0, :, start, learners]).mean()
            J = values[0, :, start, learners].mean()
            print(f"  step {step:6d}  turn-1 P(collaborate) {p:.4f}  J {J:.5f}")
        if step == args.learn_steps:
            break
        d = visitation(logits, next_state, start)[..., None]
        p = sigmoid(logits)
        grad = d * p * (1 - p) * (gaps - args.tau * logits)
        logits[..., learners] += args.learn_lr * grad[..., learners]
    return logits, values, visitation(logits, next_state, start)


# ----------------------------------------------------------------------------------------------
# 6. The Figure-5 sweep: turn-1 collaboration probability against the threshold C
# ----------------------------------------------------------------------------------------------


def run_sweep(args: Args) -> list[dict]:
    """One row per (T, C): the equilibrium's turn-1 collaboration probability under each selection
    rule and the best response's for each q, each the mean over the reward draws (and over the two
    agents)."""
    horizons, qs = check_args(args)
    rng = np.random.default_rng(args.seed)
    r_ind, r_col = sample_rewards(args.reward_dist, args.num_samples, args.asymmetric, rng)
    rows = []
    for T in horizons:
        equilibria = {sel: solve_equilibrium(r_ind, r_col, T, args, select=sel)
                      for sel in SELECTIONS}
        responses = {q: best_response(r_ind, r_col, T, q, args)[0] for q in qs}
        for C in range(T - 1, (T - 1) // 2 - 1, -1):  # paper Fig. 5: C = T-1 .. floor((T-1)/2)
            s = start_state(C, T, args.count_rule)
            row = dict(T=T, C=C)
            row["ne"] = sigmoid(equilibria[args.select][0][0, :, s]).mean()
            row["ne_low"] = sigmoid(equilibria["low"][0][0, :, s]).mean()
            row["ne_high"] = sigmoid(equilibria["high"][0][0, :, s]).mean()
            # share of draws whose turn-1 game has several equilibria
            row["multi_eq"] = (equilibria[args.select][2][0, :, s] > 1).mean()
            for q in qs:
                row[f"br_q{q:g}"] = sigmoid(responses[q][0, :, s]).mean()
            row["ne_minus_best_br"] = row["ne"] - max(row[f"br_q{q:g}"] for q in qs)
            rows.append(row)
    return rows


def markdown_table(rows: list[dict]) -> str:
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = ["" if isinstance(v, float) and np.isnan(v) else
                 f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def claim_summary(rows: list[dict], margin: float = 0.01) -> str:
    """The paper's qualitative claim, checked: the co-trained curve lies above every
    fixed-opponent curve. Differences within ±margin count as ties (all curves use the same reward
    draws)."""
    lines = []
    for T in sorted({r["T"] for r in rows}):
        gaps = np.array([r["ne_minus_best_br"] for r in rows if r["T"] == T])
        lines.append(f"T={T}: co-trained curve above every fixed-opponent curve at "
                     f"{(gaps > margin).sum()}/{len(gaps)} thresholds, tied (within "
                     f"±{margin:g}) at {(np.abs(gaps) <= margin).sum()}, below at "
                     f"{(gaps < -margin).sum()} "
                     f"(margins {gaps.min():+.3f} .. {gaps.max():+.3f})")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, args: Args) -> bool:
    """Two panels (one per T) like paper Fig. 5; returns False when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    horizons = sorted({r["T"] for r in rows})
    br_keys = [k for k in rows[0] if k.startswith("br_q")]
    fig, axes = plt.subplots(1, len(horizons), figsize=(5.2 * len(horizons), 4.0), squeeze=False)
    for ax, T in zip(axes[0], horizons):
        part = [r for r in rows if r["T"] == T]
        C = [r["C"] for r in part]
        selections = np.array([[r["ne"], r["ne_low"], r["ne_high"]] for r in part])
        ax.fill_between(C, selections.min(1), selections.max(1), color="tab:red", alpha=0.15,
                        label="NE range over selections learn/low/high")
        ax.plot(C, [r["ne"] for r in part], "-o", color="tab:red", lw=2,
                label=f"co-trained (NE, select={args.select})")
        colors = ["tab:blue", "tab:cyan", "tab:green", "tab:olive", "tab:purple"]
        for k, color in zip(br_keys, colors):
            ax.plot(C, [r[k] for r in part], "--s", color=color, ms=4,
                    label=f"best response to q={k[4:]}")
        ax.set(title=f"T = {T}", xlabel="threshold C", ylabel="turn-1 P(collaborate)",
               ylim=(-0.02, 1.02))
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="best")
    fig.suptitle(f"toy game (reconstruction): τ={args.tau:g}, R_syn={args.r_syn:g}, "
                 f"rewards={args.reward_dist}, count={args.count_rule}, "
                 f"synergy={args.synergy_timing}, average={args.average_rewards}"
                 + (", asymmetric" if args.asymmetric else ""), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# ----------------------------------------------------------------------------------------------
# 7. --learn: co-training reaches the equilibrium, training one agent reaches the best response
# ----------------------------------------------------------------------------------------------


def run_learning(args: Args) -> list[dict]:
    """Train on one (T, C) for a few reward draws and compare with the solvers. A learned policy
    "matches" a solver's policy when they differ by < 0.05 on every state either visits with
    probability >= 1e-3."""
    horizons, qs = check_args(args)
    T, C = args.learn_horizon, args.learn_threshold
    rng = np.random.default_rng(args.seed)
    r_ind, r_col = sample_rewards(args.reward_dist, args.learn_samples, args.asymmetric, rng)
    next_state, reached = build_states(T, args.count_rule)
    stage, terminal = stage_rewards(r_ind, r_col, T, next_state, reached, args)
    start = start_state(C, T, args.count_rule)
    rows = []
    for q in [None] + qs:
        name = "co-training (both learn)" if q is None else f"one learns vs q={q:g}"
        print(f"{name}: T={T}, C={C}, {args.learn_samples} reward draws, {args.learn_steps} steps, "
              f"lr {args.learn_lr:g}")
        logits, values, visits = policy_gradient_learning(r_ind, r_col, T, C, args, q=q,
                                                          log_every=max(1, args.learn_steps // 4))
        learners = [0, 1] if q is None else [0]
        gaps, _ = evaluate_policies(logits, stage, terminal, next_state, args.tau)
        # 0 at a soft best response
        residual = np.abs(sigmoid(logits) - sigmoid(gaps / args.tau))[..., learners]
        on_learned_path = np.where(visits[..., None] >= 1e-3, residual, 0).max()
        print(f"  soft best-response residual on the learned path: {on_learned_path:.2e}")
        if q is None:
            targets = {f"NE, select={sel}": solve_equilibrium(r_ind, r_col, T, args, select=sel)[0]
                       for sel in SELECTIONS}
        else:  # the opponent's column is q, as in training
            target = best_response(r_ind, r_col, T, q, args)[0]
            targets = {"best response": np.concatenate([target[..., :1], logits[..., 1:]], -1)}
        matched_any = np.zeros(args.learn_samples, bool)
        for target_name, target in targets.items():
            on_path = np.maximum(visitation(target, next_state, start), visits)[..., None] >= 1e-3
            gap = np.where(on_path, np.abs(sigmoid(logits) - sigmoid(target)), 0)
            error = gap[..., learners].max((0, 2, 3))
            matched_any |= error < 0.05
            rows.append({"learning": name, "compared with": target_name,
                         "turn-1 P learned": sigmoid(logits[0, :, start, learners]).mean(),
                         "turn-1 P solver": sigmoid(target[0, :, start, learners]).mean(),
                         "draws matched": f"{(error < 0.05).sum()}/{args.learn_samples}",
                         "max abs dP on path": error.max()})
        if q is None:
            rows.append({"learning": name, "compared with": "any selection",
                         "turn-1 P learned": np.nan, "turn-1 P solver": np.nan,
                         "draws matched": f"{matched_any.sum()}/{args.learn_samples}",
                         "max abs dP on path": np.nan})
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(Args, argv)
    check_args(args)
    out_dir = writable_dir(args.output_dir or f"runs/toy_game-{time.strftime('%Y%m%d-%H%M%S')}")
    settings = out_dir / ("args_learn.json" if args.learn else "args.json")
    settings.write_text(json.dumps(asdict(args), indent=2))
    started = time.time()
    if args.learn:
        rows = run_learning(args)
        table = markdown_table(rows)
        (out_dir / "learn.md").write_text(table + "\n")
        print(table)
        print(f"learning took {time.time() - started:.1f} s; wrote {out_dir / 'learn.md'}")
        return rows
    rows = run_sweep(args)
    with open(out_dir / "fig5.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({k: f"{v:.6f}" if isinstance(v, float) else v for k, v in row.items()}
                         for row in rows)
    table = markdown_table(rows)
    summary = claim_summary(rows)
    (out_dir / "fig5.md").write_text(table + "\n\n" + summary + "\n")
    print(table)
    print(summary)
    print(f"sweep took {time.time() - started:.1f} s; wrote {out_dir / 'fig5.csv'} and "
          f"{out_dir / 'fig5.md'}")
    if plot(rows, out_dir / "fig5.png", args):
        print(f"wrote {out_dir / 'fig5.png'}")
    else:
        print("matplotlib is not installed: skipped the plot (the table is written)")
    return rows


if __name__ == "__main__":
    main()
