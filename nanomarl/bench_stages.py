"""bench_stages.py: bench.py --parts cpu, its second half: where a default cotrain.py update and a
held-out evaluation spend their time, stage by stage.

cotrain.main runs as it is (python cotrain.py --max-steps N, plus --cpu-stage-flags), in this
process, with timers wrapped around the functions its stages call (run_debate, generate, the
scorer, make_experience, forward_pairs, ppo_loss, the backward, clip_grad_norm_, the optimisers'
step, evaluate_team, the control's sample_answers...); the originals come back when it ends. Each
stage's seconds are its own, the stages it calls subtracted: the stages of an update (rollout_step,
stop_if_kl_exceeds, ppo_update) sum to the update, those of evaluate_team to the evaluation. Every
generate call is listed too: its rows, prompt tokens, decoding steps and generated tokens. The
callers hand cotrain and common over (no module of nanomarl/ imports them). A learner may skip
this module.
"""
from __future__ import annotations

import contextlib
import functools
import json
import time
from pathlib import Path

import torch

# the stages, by the function timed, in the order they run; {n}: the turn (a debate) or the round
# (the control) of a generate call
UPDATE = {"run_debate": "1 rollout: prompts, decoding, answers",
          "generate": "1 rollout: generate, turn {n}",
          "policy_outputs": "1 rollout: log-probs and entropy of the samples",
          "scorer": "2 scorer",
          "rollout_step": "2-3 format gate, penalties, rewards",
          "forward_pairs": "4 reference log-probs: forwards",
          "critic_values": "4 values: forwards",
          "make_experience": "5 KL-shaped rewards, advantages",
          "stop_if_kl_exceeds": "5 KL check",
          "ppo_forward_pairs": "6 PPO: forwards",
          "ppo_critic_values": "6 PPO: value forwards",
          "ppo_loss": "6 PPO: losses",
          "backward": "6 PPO: backwards",
          "clip_grad_norm_": "6 PPO: gradient norms, clipping",
          "step": "6 PPO: optimiser steps",
          "ppo_update": "6 PPO: shuffle, zero_grad, statistics"}
EVALUATION = {"run_debate": "debate: prompts, decoding, answers",
              "generate": "debate: generate, turn {n}",
              "policy_outputs": "debate: log-probs and entropy",
              "scorer": "debate: scorer",
              "evaluate_team": "debate: metrics",
              "split_controls": "split controls (arith:split)",
              "control_run_debate": "control: prompts, decoding, answers",
              "control_generate": "control: generate, round {n}",
              "control_policy_outputs": "control: log-probs and entropy",
              "control_scorer": "control: scorer",
              "sample_answers": "control: collecting the answers",
              "eval_controls": "control: token counts, metrics"}
ROOTS = {"rollout_step": "update", "stop_if_kl_exceeds": "update", "ppo_update": "update",
         "evaluate_team": "evaluation"}


class StageClock:
    """Own seconds per stage of the update or evaluation in progress (updates, evaluations: one
    {label: {seconds, calls, order}} each), and one entry per generate call (generate_calls)."""

    def __init__(self, device: str):
        self.cuda = str(device).startswith("cuda")
        self.stack = []  # the stages running, outermost first (their seconds so far inside)
        self.updates, self.evaluations, self.generate_calls = [], [], []
        self.section, self.record = None, None

    def now(self) -> float:
        if self.cuda:  # a stage's kernels finish inside it
            torch.cuda.synchronize()
        return time.perf_counter()

    def label(self, kind: str):
        """The stage a call of `kind` is, from the calls it sits in (None: not a stage of its own,
        its time stays with its caller)."""
        kinds = [f["kind"] for f in self.stack]
        if self.section == "evaluation":
            if "split_controls" in kinds:  # its replays: one stage
                return None
            if kind == "policy_outputs" and kinds[-1:] != ["generate"]:
                return None
            name = f"control_{kind}" if "sample_answers" in kinds and kind in (
                "run_debate", "generate", "policy_outputs", "scorer") else kind
            return EVALUATION.get(name)
        if kind == "policy_outputs" and kinds[-1:] != ["generate"]:
            return None
        if kind in ("forward_pairs", "critic_values") and "ppo_loss" in kinds:
            kind = f"ppo_{kind}"
        if kind == "forward_pairs" and "critic_values" in kinds:
            return None  # the values' forwards stay with critic_values
        return UPDATE.get(kind)

    @contextlib.contextmanager
    def stage(self, kind: str):
        if not self.stack and kind in ROOTS:  # a new update, or the same one's next part
            self.section = ROOTS[kind]
            if kind == "evaluate_team" or kind == "rollout_step" or not self.updates:
                records = self.evaluations if kind == "evaluate_team" else self.updates
                records.append({})
            self.record = (self.evaluations if kind == "evaluate_team" else self.updates)[-1]
        label = self.label(kind) if self.section else None
        if label is None or self.record is None:
            yield None
            return
        # n: the how-manieth call of its kind in its caller (a debate's generate: its turn; the
        # control's run_debate: its round, which its generate takes over)
        parent = self.stack[-1] if self.stack else dict(counts={})
        n = parent["counts"][kind] = parent["counts"].get(kind, 0) + 1
        if kind == "generate" and label.startswith("control"):
            n = parent.get("n", n)
        frame = dict(kind=kind, label=label.format(n=n), n=n, section=self.section, counts={},
                     start=self.now(), inner=0.0)
        self.stack.append(frame)
        try:
            yield frame
        finally:
            self.stack.pop()
            elapsed = self.now() - frame["start"]
            order = list((EVALUATION if frame["section"] == "evaluation" else UPDATE).values())
            entry = self.record.setdefault(frame["label"], dict(
                seconds=0.0, calls=0, order=(order.index(label), n)))
            entry["seconds"] += elapsed - frame["inner"]
            entry["calls"] += 1
            frame["seconds"] = elapsed
            if self.stack:
                self.stack[-1]["inner"] += elapsed
            else:
                self.section = None

    def timed(self, kind: str, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.stage(kind) as frame:
                out = fn(*args, **kwargs)
            if kind == "generate" and frame is not None:
                runs = self.evaluations if frame["section"] == "evaluation" else self.updates
                self.generate_calls.append(dict(during=f"{frame['section']} {len(runs)}",
                                                **generate_figures(frame, out)))
            return out
        return wrapper


def generate_figures(frame: dict, out: dict) -> dict:
    """What one generate call did: rows, prompt tokens (and the padded width), decoding steps (the
    batch runs until its last row stops), generated tokens, the longest row, rows without EOS."""
    lengths = out["response_mask"].sum(1)
    return dict(stage=frame["label"], seconds=frame["seconds"], rows=len(lengths),
                prompt_tokens=int(out["query_mask"].sum()), prompt_width=out["query_ids"].shape[1],
                steps=out["response_ids"].shape[1], generated_tokens=int(lengths.sum()),
                longest=int(lengths.max()) if len(lengths) else 0,
                without_eos=int(out["truncated"].sum()))


def shares(record: dict) -> dict:
    """{label: seconds, share, calls} and the total seconds of one update or evaluation."""
    total = sum(s["seconds"] for s in record.values())
    ordered = sorted(record.items(), key=lambda item: item[1]["order"])  # as they run
    return dict(seconds=total, stages={
        label: dict(seconds=s["seconds"], share=s["seconds"] / total if total else 0.0,
                    calls=s["calls"]) for label, s in ordered})


@contextlib.contextmanager
def patched(clock: StageClock, cotrain, common):
    """cotrain's stage functions wrapped with the clock's timers, the originals back after."""
    from nanomarl import self_consistency

    saved = []

    def wrap(owner, attr, kind):
        saved.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, clock.timed(kind, getattr(owner, attr)))

    for name in ("run_debate", "generate", "make_experience", "forward_pairs", "critic_values",
                 "rollout_step", "stop_if_kl_exceeds", "ppo_update", "ppo_loss", "evaluate_team",
                 "split_controls", "eval_controls"):
        wrap(cotrain, name, name)
    wrap(self_consistency, "sample_answers", "sample_answers")
    wrap(common, "policy_outputs", "policy_outputs")
    wrap(torch.Tensor, "backward", "backward")
    wrap(torch.nn.utils, "clip_grad_norm_", "clip_grad_norm_")
    make_scorer, build_team = cotrain.make_scorer, cotrain.build_team

    def timed_scorer(*args, **kwargs):
        return clock.timed("scorer", make_scorer(*args, **kwargs))

    def timed_team(*args, **kwargs):
        team = build_team(*args, **kwargs)
        for opt in team.optimizers.values():
            opt.step = clock.timed("step", opt.step)
        return team

    saved += [(cotrain, "make_scorer", make_scorer), (cotrain, "build_team", build_team)]
    cotrain.make_scorer, cotrain.build_team = timed_scorer, timed_team
    try:
        yield
    finally:
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)


def cotrain_stages(cotrain, common, parse_args, model: str, device: str, updates: int,
                   flags: list[str], out_dir: Path) -> dict:
    """python cotrain.py --model MODEL --max-steps UPDATES [flags], in this process, timed stage by
    stage (StageClock). Returns every update's and evaluation's stages (the last of each as update
    and evaluation), every generate call, the run's own timing/ figures (metrics.jsonl) and its
    wall seconds."""
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in model)
    run_dir = out_dir / f"stages-{safe}-{time.strftime('%Y%m%d-%H%M%S')}"
    argv = ["--model", model, "--device", device, "--max-steps", str(updates),
            "--threads", str(torch.get_num_threads()), "--output-dir", str(run_dir), *flags]
    args = parse_args(cotrain.Args, argv)
    clock = StageClock(device)
    start = time.perf_counter()
    with patched(clock, cotrain, common):
        cotrain.main(args)
    wall = time.perf_counter() - start
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logged = {key: [line[key] for line in lines if key in line]
              for key in ("timing/step_s", "timing/generate_s", "timing/rollout_s",
                          "timing/update_s", "timing/eval_s", "timing/eval_sc_s")}
    result = dict(command="cotrain.py " + " ".join(argv), wall_seconds=wall,
                  updates=[shares(r) for r in clock.updates],
                  evaluations=[shares(r) for r in clock.evaluations],
                  generate_calls=clock.generate_calls, logged=logged)
    timed = sum(r["seconds"] for r in result["updates"] + result["evaluations"])
    result.update(update=result["updates"][-1] if result["updates"] else None,
                  evaluation=result["evaluations"][-1] if result["evaluations"] else None,
                  outside_seconds=wall - timed)  # loading, logging, checkpoints
    return result


def print_stages(name: str, result: dict):
    """The last update's and the last evaluation's stages, then every generate call."""
    for what in ("update", "evaluation"):
        record = result[what]
        if record is None:
            continue
        print(f"cpu stages, {name}: one {what} ({what}s timed: {len(result[what + 's'])}, the last "
              f"shown): {record['seconds']:.2f} s")
        for label, s in record["stages"].items():
            print(f"  {label:<48} {s['seconds']:8.2f} s {100 * s['share']:5.1f} %  "
                  f"({s['calls']} call{'s' * (s['calls'] != 1)})")
    for call in result["generate_calls"]:
        print(f"  {call['during']}, {call['stage']}: {call['rows']} rows, "
              f"{call['prompt_tokens']} prompt tokens (width {call['prompt_width']}), "
              f"{call['steps']} steps, "
              f"{call['generated_tokens']} tokens generated (longest {call['longest']}, "
              f"{call['without_eos']} without EOS), {call['seconds']:.2f} s")
    print(f"cpu stages, {name}: {result['wall_seconds']:.1f} s in all, "
          f"{result['outside_seconds']:.1f} s outside the updates and evaluations")
