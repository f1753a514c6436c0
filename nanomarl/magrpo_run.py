"""magrpo_run.py: the parts of magrpo.py's run a learner may skip: the refusals of bad settings,
the check of a --reward-fn's output, the held-out problems, the checkpoint (save and resume), a
step's metrics, and the joint actions a step prints and saves to samples.jsonl.

The functions take magrpo.py's objects (Args, Agents, the rollout tree's Nodes) by their fields;
this module does not import magrpo.py.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
from tqdm import tqdm

from nanomarl.cli import arg_error, check_numbers
from nanomarl.distributed import finish_distributed, is_main_process
from nanomarl.models import (adapter_state_dict, check_device, check_model_name,
                             load_adapter_state_dict, save_adapters)
from nanomarl.runs import (all_rng_states, finish_writes_first, load_checkpoint, print_eval_table,
                           restore_rng_state, save_checkpoint)
from nanomarl.tasks.kinds import SOLVABLE_KINDS, TWO_TURN_TASKS
from nanomarl.tasks.problems import load_problems
from nanomarl.trackers import finish_tracker, plot_run

# the settings that fix the checkpoint's shapes: --resume refuses to change them. --dataset may
# change (a curriculum: the next stage trains the same agents on other problems or wordings)
RESUME_MUST_MATCH = ("model", "num_agents", "turns", "full_finetune", "lora_r", "lora_alpha")


def check_args(args):
    """Every refusal of a setting, before anything heavy loads: one line `error: --flag: ...`, exit
    code 2."""
    if args.use_vllm:
        from nanomarl.vllm_rollout import check_vllm_args
        check_vllm_args(args)
    check_numbers(args, positive=("max_steps", "problems_per_step", "num_generations", "turns",
                                  "max_new_tokens", "micro_batch_size", "log_every", "save_every",
                                  "lora_r", "lora_alpha", "lr", "temperature", "top_p"),
                  non_negative=("train_limit", "max_grad_norm", "beta", "generate_batch_size",
                                "top_k", "sandbox_workers", "eval_problems", "eval_every",
                                "sample_every"),
                  unit_interval=("discount", "top_p"))
    check_model_name(args.model, "--model")
    check_device(args.device)
    if args.num_agents < 1:  # main() checks it against the task's roles
        arg_error("--num-agents", f"must be >= 1, got {args.num_agents}")
    if args.adv_mode == "rloo" and args.num_generations < 2:
        arg_error("--num-generations", "--adv-mode rloo needs at least 2")
    if args.full_finetune and args.quant != "none":
        arg_error("--full-finetune", "a quantised base cannot be fully fine-tuned; use LoRA agents")
    if args.temperature <= 0:
        arg_error("--temperature", f"must be > 0 (sampling), got {args.temperature}")
    if args.test_timeout <= 0 or args.sandbox_memory_mb < 64:
        arg_error("--test-timeout", "need --test-timeout > 0 and --sandbox-memory-mb >= 64")


def check_task(args, problems: list[dict], task):
    """The refusals that need the task: one agent per role, more than one turn only for the
    aux/main coding tasks (their feedback) and the two-turn tasks, arith:split and costs (exactly
    2), and a --reward-fn that cannot take a problem."""
    if args.num_agents != len(task.roles):
        arg_error("--num-agents", f"--dataset {args.dataset} has {len(task.roles)} roles "
                                  f"({', '.join(task.roles)}): pass --num-agents "
                                  f"{len(task.roles)}, got {args.num_agents}")
    if problems[0]["kind"] in TWO_TURN_TASKS and args.turns != 2:
        arg_error("--turns", f"--dataset {args.dataset} has 2 turns (turn 2 hears the partner's "
                             f"turn 1): pass --turns 2, got {args.turns}")
    if args.turns > 1 and problems[0]["kind"] not in ("code", *TWO_TURN_TASKS):
        arg_error("--turns", f"--dataset {args.dataset} is single-turn (multi-turn feedback is "
                             f"defined for the aux/main coding tasks)")
    if args.reward_fn:  # one call before any model loads: a cotrain.py scorer fails here
        try:
            task.reward(problems[0], [""] * len(task.roles))
        except (TypeError, KeyError, AttributeError, IndexError) as e:
            arg_error("--reward-fn", f"{args.reward_fn} failed on --dataset's first problem and "
                                     f"empty completions ({type(e).__name__}: {e}): magrpo.py "
                                     f"calls fn(problem, completions) -> reward; cotrain.py's "
                                     f"scorers are fn(records, responses) -> scores")


def held_out_problems(args, problems: list[dict]) -> list[dict]:
    """The first --eval-problems problems of the task's eval split; none if that split is the
    training problems themselves (e.g. a jsonl file)."""
    if not args.eval_problems:
        return []
    eval_problems = load_problems(args.dataset, "eval", args.eval_problems)
    if {p["id"] for p in eval_problems} & {p["id"] for p in problems}:
        print(f"note: --dataset {args.dataset} has no held-out split apart from its training "
              f"problems: no in-training evaluation (evaluate.py with a separate file measures "
              f"the team)")
        eval_problems = []
    return eval_problems


def custom_reward(fn, name: str):
    """Your joint reward (--reward-fn): fn(problem, completions) gets the problem dict and one
    completion per agent (role order) and returns a number, or (number, levels) with levels a dict
    of numbers logged as reward/<level>. Anything else stops with an error."""
    def reward(problem, texts):
        out = fn(problem, texts)
        total, levels = out if isinstance(out, tuple) and len(out) == 2 else (out, {})
        try:
            total, levels = float(total), {str(k): float(v) for k, v in levels.items()}
        except (TypeError, ValueError, AttributeError):
            total = math.nan
        if not math.isfinite(total):
            arg_error(name, f"expected a finite number or (number, dict of numbers), got {out!r}")
        return total, levels
    return reward


def agent_states(agents) -> list[dict]:
    """Each agent's trainable weights on the CPU: its LoRA adapter, or its whole model copy."""
    if agents.names is None:
        return [{k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
                for model in agents.models]
    return [adapter_state_dict(agents.models[0], name) for name in agents.names]


def load_agent_states(agents, states: list[dict]):
    for i, state in enumerate(states):
        if agents.names is None:
            agents.models[i].load_state_dict(state)
        else:
            load_adapter_state_dict(agents.models[0], agents.names[i], state)


def print_sample(step: int, roots: list):
    """The first tree's first joint action, printed above the progress bar (tqdm.write)."""
    node = roots[0]
    levels = "  ".join(f"{k}={v:.3g}" for k, v in node.levels[0].items())
    lines = [f"\n--- step {step}: problem {node.problem['id']}, joint action 0: "
             f"reward {node.rewards[0]:.3f} ({levels})"]
    for agent, k in enumerate(node.joint[0]):
        lines += [f"[agent{agent} prompt, end] ...{node.prompts[agent][-200:]!r}",
                  f"[agent{agent} completion] {node.texts[agent][k][:600]!r}"]
    tqdm.write("\n".join(lines))


def tree_samples(step: int, roots: list) -> list[dict]:
    """samples.jsonl rows of one step: every joint action of every node of this process's trees,
    with each agent's prompt and completion, the joint reward, its levels and its return (turn:
    1..--turns)."""
    rows, stack = [], list(roots)
    while stack:
        node = stack.pop(0)
        for j, joint in enumerate(node.joint):
            rows.append(dict(step=step, problem=node.problem["id"], turn=node.turn + 1,
                             joint_action=j,
                             prompts=list(node.prompts),
                             completions=[node.texts[i][k] for i, k in enumerate(joint)],
                             reward=node.rewards[j], levels=node.levels[j],
                             **{"return": node.returns[j]}))
        stack += [child for child in node.children if child is not None]
    return rows


def load_state(run_dir: Path, agents) -> int:
    """--resume: the agents' weights, their optimisers and this rank's RNG state from
    checkpoint.pt. Returns the step to continue from."""
    state = load_checkpoint(run_dir / "checkpoint.pt")
    load_agent_states(agents, state["agents"])
    for optimizer, saved in zip(agents.optimizers, state["optimizers"]):
        optimizer.load_state_dict(saved)
    restore_rng_state(state["rng"])  # this rank's
    print(f"resumed {run_dir} at step {state['step']}")
    return state["step"]


def save_state(run_dir: Path, agents, step: int):
    """checkpoint.pt (and the LoRA agents in peft format): every rank calls it (the RNG states are
    gathered), rank 0 writes."""
    rngs = all_rng_states()
    with finish_writes_first():  # Ctrl-C waits for both; each is written atomically
        save_checkpoint(run_dir / "checkpoint.pt",
                        dict(step=step, agents=agent_states(agents), rng=rngs,
                             optimizers=[o.state_dict() for o in agents.optimizers]))
        if agents.names is not None:
            save_adapters(agents.models[0], agents.names, run_dir / "adapters")


def rollout_metrics(turns: list[list], roots: list, batches: list[list[dict]],
                    num_generations: int) -> dict:
    """The rollout's metrics (TRL/CleanRL-style names; per agent prefixed agentI/): rewards and
    their levels per turn, completion lengths, returns, the groups with nothing to learn from."""
    metrics = {}
    num_agents = len(batches[0])
    for turn, nodes in enumerate(turns):
        rewards = [r for node in nodes for r in node.rewards]
        key = "reward" if turn == 0 else f"turn{turn}/reward"
        metrics[f"{key}/mean"] = sum(rewards) / len(rewards)
        metrics[f"{key}/max"] = max(rewards)
        for level in nodes[0].levels[0]:
            metrics[f"{key}/{level}"] = sum(lv[level] for node in nodes
                                            for lv in node.levels) / len(rewards)
        for agent in range(num_agents):
            batch = batches[turn][agent]
            mask, truncated = batch["response_mask"], batch["truncated"]
            prefix = f"agent{agent}/" if turn == 0 else f"agent{agent}/turn{turn}_"
            metrics[prefix + "mean_length"] = mask.sum(1).float().mean().item()
            metrics[prefix + "clipped_ratio"] = truncated.float().mean().item()
    metrics["return/mean"] = (sum(r for root in roots for r in root.returns)
                              / sum(len(root.returns) for root in roots))
    credits = torch.stack([node.credits for nodes in turns for node in nodes])  # [nodes, n, G]
    zero_std = (credits.std(dim=2) < 1e-8).float().mean().item() if num_generations > 1 else 1.0
    metrics["frac_reward_zero_std"] = zero_std
    metrics["tree/nodes"] = sum(len(nodes) for nodes in turns)
    return metrics


def team_means(metrics: dict, num_agents: int) -> dict:
    """The agents' means of their per-agent metrics, under TRL's names."""
    return {name: sum(metrics[f"agent{i}/{key}"] for i in range(num_agents)) / num_agents
            for name, key in (("completions/mean_length", "mean_length"),
                              ("completions/clipped_ratio", "clipped_ratio"),
                              ("objective/entropy", "entropy"), ("objective/kl", "kl"))}


def finish_run(run_dir: Path, agents, tokenizer, eval_problems: list[dict]):
    """The end of a run: full-copy agents saved whole (the LoRA agents: the last save_state wrote
    them), where everything is, the held-out before -> after table, the plots, the trackers."""
    if agents.names is None and is_main_process():
        for i, model in enumerate(agents.models):
            model.save_pretrained(run_dir / "agents" / f"agent{i}")
            tokenizer.save_pretrained(run_dir / "agents" / f"agent{i}")
    print(f"metrics: {run_dir / 'metrics.jsonl'}")
    print(f"{'adapters' if agents.names is not None else 'agent models'}: "
          f"{run_dir / ('adapters' if agents.names is not None else 'agents')}")
    print(f"checkpoint: {run_dir / 'checkpoint.pt'} "
          f"(continue with --resume {run_dir} --max-steps N)")
    coding = eval_problems and eval_problems[0]["kind"] in SOLVABLE_KINDS
    columns = ["eval/pass_rate"] if coding else []
    if eval_problems and eval_problems[0]["kind"] == "split":  # turn 2 silent, told the number
        columns = ["eval/silent/turn2/agent_accuracy", "eval/oracle/turn2/agent_accuracy"]
    if eval_problems and eval_problems[0]["kind"] == "costs":  # the rules, the team silenced
        columns = ["eval/positional_rule", "eval/leader_rule", "eval/silent/reward/mean"]
    print_eval_table(run_dir, columns + ["eval/reward/mean"])  # held-out: before -> after
    plot_run(run_dir)  # training_curves.png (needs matplotlib)
    finish_tracker()  # --report-to: flush and close
    finish_distributed()  # leave the process group (without it gloo aborts at exit)
