"""cotrain_run.py: cotrain.py's run machinery, which a reader of the algorithm may skip: the
settings a run trains with (settle_args: --resume's saved ones, RESUME_MUST_MATCH, the refusals of
check_args, agent_models, train_turn_indices), your scorer (user_scorer, custom_scorer), the
held-out questions and when to evaluate on them (heldout_records, eval_due, eval_started,
eval_metrics; the controls beside them: self_consistency.eval_controls), checkpoints (save_state,
load_state), the runaway-KL stop (stop_if_kl_exceeds), printed samples and the logged metrics
(rollout_metrics, ppo_metrics, log_update) and the closing lines (finish_run).
Nothing here changes what is trained."""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from tqdm import tqdm

from nanomarl.vote import majority_vote_accuracy

from nanomarl.cli import arg_error, check_numbers, load_function, parse_int_list
from nanomarl.distributed import (
    allreduce_sum,
    finish_distributed,
    is_main_process,
    world_info,
)
from nanomarl.models import (
    adapter_state_dict,
    check_device,
    check_model_name,
    load_adapter_state_dict,
    save_adapters,
)
from nanomarl.runs import (all_rng_states, atomic_write_text, finish_writes_first, format_metrics,
                           load_checkpoint, log_metrics, log_samples, print_eval_table,
                           projected_time, restore_rng_state, resumed_args, save_checkpoint)
from nanomarl.tasks.debate import dataset_options, load_task
from nanomarl.trackers import finish_tracker, plot_run

MAX_KL = 50.0  # an agent's mean KL per response to the reference that stops the run (runaway)


def check_args(args):
    """The refusals of settings, before anything heavy loads: one line `error: --flag: ...`, exit
    code 2. Each agent's model (agent_models) and --train-turns (train_turn_indices) are checked
    too; heldout_records refuses what needs the data, user_scorer what needs --reward-fn."""
    check_numbers(args, positive=("num_agents", "num_turns", "lora_r", "lora_alpha",
                                  "max_new_tokens", "temperature", "forward_batch_size",
                                  "max_steps", "questions_per_update", "samples_per_question",
                                  "ppo_epochs", "lr", "cliprange"),
                  non_negative=("generate_batch_size", "min_response_tokens", "minibatch_questions",
                                "micro_batch_questions", "lr_decay_steps", "max_grad_norm",
                                "kl_coef", "vf_coef", "log_every", "sample_every", "save_every",
                                "eval_questions", "eval_every"),
                  unit_interval=("influence_gamma", "gae_lambda"))
    for model in agent_models(args):
        check_model_name(model, "--models" if args.models else "--model")
    check_device(args.device)
    if args.use_vllm:
        from nanomarl.vllm_rollout import check_vllm_args
        check_vllm_args(args)
    if args.reward_fn and (args.scorer != "ground-truth" or args.verifier):
        arg_error("--reward-fn", "replaces --scorer; drop --scorer verifier and --verifier")
    if args.verifier and not Path(args.verifier).exists():
        arg_error("--verifier", f"{args.verifier} does not exist "
                                f"(give a train_verifier.py run folder)")
    if args.scorer == "verifier" and not args.verifier:
        arg_error("--verifier", "--scorer verifier needs --verifier PATH "
                                "(a train_verifier.py checkpoint)")
    if args.verifier and args.scorer != "verifier":
        arg_error("--verifier", "is given but --scorer is ground-truth; add --scorer verifier")
    if args.feedback_in_prompt and args.scorer != "verifier":
        arg_error("--feedback-in-prompt", "shows a verifier's scores: with --scorer ground-truth "
                                          "it would write the gold 0/1 labels into the prompts "
                                          "(add --scorer verifier --verifier PATH)")
    if args.advantage == "group" and args.samples_per_question < 2:
        arg_error("--samples-per-question", f"--advantage group compares the debates of each "
                                            f"question: needs >= 2, got "
                                            f"{args.samples_per_question}")
    if args.advantage == "group" and args.value_model == "separate":
        arg_error("--value-model", "separate trains a critic adapter, which --advantage group "
                                   "never reads (use --advantage gae, or drop --value-model)")
    if args.advantage_std and args.advantage != "group":
        arg_error("--advantage-std", "scales --advantage group's advantages (gae whitens its own)")
    train_turn_indices(args)
    incentive_values(args)


def check_questions(args, train_records: list[dict], world: int) -> list[dict]:
    """Every refusal about the questions, before any model loads: a --questions-per-update (the
    global batch) that the `world` processes cannot divide or that exceeds the training questions,
    and held-out questions that are also training questions. Returns the held-out questions."""
    if args.questions_per_update % world:
        arg_error("--questions-per-update", f"is the global batch: it must be divisible by the "
                                            f"{world} processes, got {args.questions_per_update}")
    if len(train_records) < args.questions_per_update:
        arg_error("--questions-per-update", f"is {args.questions_per_update} but {args.dataset} "
                                            f"has {len(train_records)} questions")
    return heldout_records(args, train_records)


def heldout_records(args, train_records: list[dict]) -> list[dict]:
    """The fixed held-out questions of the in-training evaluation: the first --eval-questions of
    --eval-split. Refused (before any model loads) when one of them is also a training question."""
    if not args.eval_questions or not is_main_process():
        return []
    # a single local data file is one split ('train'): nothing is held out
    if Path(args.dataset).is_file():
        print(f"note: {args.dataset} is a single file (the split 'train'): no in-training "
              f"evaluation; hold questions out in a folder with a test file, or measure with "
              f"evaluate.py")
        return []
    records = load_task(args.dataset, args.eval_split, limit=args.eval_questions,
                        seed=0,  # the same set for every --seed
                        skip_bad_rows=args.skip_bad_rows, **dataset_options(args))
    shared = {r["question"] for r in records} & {r["question"] for r in train_records}
    if shared:
        arg_error("--eval-split", f"{len(shared)} of the {len(records)} held-out questions of "
                                  f"split {args.eval_split!r} are also training questions (e.g. "
                                  f"{sorted(shared)[0][:60]!r}); choose a disjoint split")
    if not records:
        arg_error("--eval-split", f"{args.dataset} has no questions in split {args.eval_split!r} "
                                  f"(or --eval-questions 0 to skip)")
    if len(records) < args.eval_questions:  # a small file: say so, a noisy measure
        print(f"note: --eval-questions {args.eval_questions}, but split {args.eval_split!r} of "
              f"{args.dataset} holds {len(records)}: the held-out evaluation has {len(records)}")
    return records


def custom_scorer(fn, name: str):
    """Your scorer (--reward-fn, or main(score_fn=...)) as the trainer calls it: fn(records,
    responses) gets the load_task records (dicts with question, answer (the normalised gold), task,
    id and the dataset's other fields) and one response string per record, and returns one score in
    [0, 1] per response (a list or a tensor). A wrong length or a score outside [0, 1] stops the run
    with an error naming `name` (NaN passes: PPO skips a non-finite loss with a warning)."""
    def scorer(records, responses):
        scores = torch.as_tensor(fn(records, responses), dtype=torch.float).detach().cpu().flatten()
        if scores.shape[0] != len(responses):
            arg_error(name, f"returned {scores.shape[0]} scores for {len(responses)} responses")
        bad = ((scores < 0) | (scores > 1)).nonzero().flatten().tolist()
        if bad:
            arg_error(name, f"returned {scores[bad[0]].item()} for response {bad[0]}: scores must "
                            f"be in [0, 1]")
        return scores
    return scorer


def save_state(run_dir: Path, team, step: int, args):
    """checkpoint.pt (everything --resume needs, written atomically) plus peft adapter folders, the
    value heads (value_heads.pt; --advantage gae only) and debate.json (which adapter plays which
    turn and agent) for evaluate.py. Every rank calls it (the RNG states are gathered); only rank 0
    writes."""
    rngs = all_rng_states()
    if not is_main_process():
        return
    # Ctrl-C waits for the whole set; each file is written atomically (SIGKILL-safe)
    with finish_writes_first():
        state = dict(step=step, rng=rngs,
                     optimizers={name: opt.state_dict() for name, opt in team.optimizers.items()},
                     adapters=[{name: adapter_state_dict(m, name) for name in names}
                               for m, names in zip(team.bases, team.base_adapters)])
        if team.heads:  # --advantage gae; a group run has none (build_team)
            state["heads"] = team.heads.state_dict()
        save_checkpoint(run_dir / "checkpoint.pt", state)
        dirs = ["adapters" if len(team.bases) == 1 else f"adapters_base{i}"
                for i in range(len(team.bases))]
        for model, names, folder in zip(team.bases, team.base_adapters, dirs):
            save_adapters(model, names, run_dir / folder)
        if team.heads:
            save_checkpoint(run_dir / "value_heads.pt", team.heads.state_dict())
        info = dict(models=[team.base_names[i] for i in team.agent_base],
                    adapters=team.adapter_names, adapter_dirs=[dirs[i] for i in team.agent_base],
                    prompt_style=args.prompt_style, step=step,
                    feedback_in_prompt=args.feedback_in_prompt, num_turns=args.num_turns,
                    dataset=args.dataset)
        atomic_write_text(run_dir / "debate.json", json.dumps(info, indent=2))


def load_state(run_dir: Path, team) -> int:
    """Restore what save_state wrote: adapters, value heads, optimisers and this rank's RNG
    states."""
    state = load_checkpoint(run_dir / "checkpoint.pt")
    for model, adapters in zip(team.bases, state["adapters"]):
        for name, tensors in adapters.items():
            load_adapter_state_dict(model, name, tensors)
    if team.heads:  # the team's own heads only (build_team: none for --advantage group)
        team.heads.load_state_dict(state["heads"])
    for name, opt in team.optimizers.items():
        opt.load_state_dict(state["optimizers"][name])
    restore_rng_state(state["rng"])  # this rank's
    return state["step"]


def print_sample(step: int, debate, scores: torch.Tensor, penalized: torch.Tensor,
                 rewards: torch.Tensor, chars: int = 400):
    """The first question's debate (cotrain.Debate), printed above the progress bar."""
    record = debate.records[0]
    lines = [f"\n=== sample debate, update {step} | gold {record['answer']} ===\n"
             f"Q: {record['question']}"]
    for t, turn in enumerate(debate.responses[0]):
        for a, text in enumerate(turn):
            text = text if len(text) <= chars else text[:chars] + " [...]"
            lines.append(f"--- turn {t + 1}, agent {a}: answer={debate.answers[0][t][a]} "
                         f"score={scores[0, t, a]:.3f} penalised={penalized[0, t, a]:.3f} "
                         f"reward={rewards[0, t, a]:.3f}\n{text}")
    tqdm.write("\n".join(lines + ["=" * 40]))


def debate_samples(step: int, debate, scores: torch.Tensor, penalized: torch.Tensor,
                   rewards: torch.Tensor) -> list[dict]:
    """samples.jsonl rows of one update: every (question, turn, agent) response with its prompt,
    parsed answer, score, penalised score and reward (this process's questions)."""
    return [dict(step=step, question=record["question"], gold=record["answer"], turn=t + 1, agent=a,
                 prompt=debate.prompts[b][t][a], response=debate.responses[b][t][a],
                 answer=debate.answers[b][t][a], correct=debate.correct[b, t, a].item(),
                 score=scores[b, t, a].item(), penalized_score=penalized[b, t, a].item(),
                 reward=rewards[b, t, a].item())
            for b, record in enumerate(debate.records) for t in range(scores.shape[1])
            for a in range(scores.shape[2])]


def rollout_metrics(debate, scores: torch.Tensor, penalized: torch.Tensor,
                    rewards: torch.Tensor, bonus: torch.Tensor) -> dict:
    """Per turn: the majority vote's accuracy (the authors' rule); per (agent, turn): correctness,
    scores, rewards, bonuses, lengths."""
    metrics, records = {}, debate.records
    num_turns, num_agents = scores.shape[1], scores.shape[2]
    for t in range(num_turns):
        metrics[f"turn{t + 1}/accuracy"] = sum(majority_vote_accuracy(
            debate.answers[b][t], r["answer"])
            for b, r in enumerate(records)) / len(records)
        for a in range(num_agents):
            ro = debate.rollout[(t, a)]
            p = f"agent{a}/turn{t + 1}/"
            metrics.update({
                p + "correct": debate.correct[:, t, a].mean().item(),
                p + "score": scores[:, t, a].mean().item(),
                p + "penalized_score": penalized[:, t, a].mean().item(),
                p + "reward": rewards[:, t, a].mean().item(),
                p + "bonus": bonus[:, t, a].mean().item(),
                p + "completions/mean_length": ro["response_mask"].sum(1).float().mean().item(),
                p + "completions/clipped_ratio": ro["truncated"].float().mean().item(),
                p + "truncation_gap": truncation_gap([ro])})
    metrics.update({"objective/scores": scores.mean().item(),
                    "objective/penalized_scores": penalized.mean().item(),
                    "objective/rewards": rewards.mean().item(),
                    "objective/bonus": bonus.mean().item(),
                    "objective/correct": debate.correct.mean().item(),
                    "objective/format_penalized_frac":
                        (penalized < scores - 1e-6).float().mean().item(),
                    "objective/truncation_gap":
                        truncation_gap([debate.rollout[key] for key in sorted(debate.rollout)])})
    lengths = torch.cat([debate.rollout[key]["response_mask"].sum(1).float().cpu()
                         for key in sorted(debate.rollout)])
    truncated = torch.cat([debate.rollout[key]["truncated"].float().cpu()
                           for key in sorted(debate.rollout)])
    metrics.update({"completions/mean_length": lengths.mean().item(),
                    "completions/clipped_ratio": truncated.mean().item()})
    return metrics


def truncation_gap(rollouts: list[dict]) -> float:
    """Mean log q - log π of the sampled tokens: -log(the mass top-k/top-p kept; docs/maporl.md)."""
    masks = [r["response_mask"] for r in rollouts]
    gap = sum(((r["sampling_logprobs"] - r["logprobs"]) * m).sum() for r, m in zip(rollouts, masks))
    return float(gap / max(sum(m.sum() for m in masks), 1))


def explained_variance(predicted: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var[target - predicted] / Var[target] over valid tokens (CleanRL's
    explained_variance)."""
    def var(x):  # unbiased, over the masked entries
        n = mask.sum()
        mean = (x * mask).sum() / n.clamp(min=1e-8)
        return ((x - mean) ** 2 * mask).sum() / n.clamp(min=1e-8) * n / (n - 1).clamp(min=1)
    var_target = var(target)
    return (float("nan") if var_target.item() == 0
            else (1 - var(target - predicted) / var_target).item())


def add_minibatch_stats(stats: dict, mb_stats: dict):
    """cotrain.ppo_update's statistics of one minibatch, per (turn, agent): its micro-batches' token
    sums added up (and the largest |log ratio|), appended to stats[key]; a rank may hold none."""
    for key, pieces in mb_stats.items():
        if pieces:
            total = {k: float(sum(p[k] for p in pieces)) for k in pieces[0]}
            total["max_abs_logratio"] = float(max(p["max_abs_logratio"] for p in pieces))
            stats[key].append(total)


def ppo_metrics(exp: dict, stats: dict, num_agents: int) -> dict:
    """PPO statistics per agent (token-weighted over its trained turns and all minibatches) and
    overall."""
    metrics, per_agent = {}, {a: [] for a in range(num_agents)}
    for (t, a) in exp:
        per_agent[a].append((t, a))
    for a, keys in list(per_agent.items()) + [(None, list(exp))]:
        if not keys:
            continue
        prefix = "" if a is None else f"agent{a}/"
        mb = [s for key in keys for s in stats[key]]
        tokens = sum(s["tokens"] for s in mb) or float("nan")
        masks = [exp[k].response_mask for k in keys]
        metrics.update({
            prefix + "objective/kl": (sum(exp[k].kl.sum() for k in keys).item()
                                      / sum(m.shape[0] for m in masks)),
            prefix + "objective/entropy": (sum((exp[k].entropy * m).sum()
                                               for k, m in zip(keys, masks)).item()
                                           / sum(m.sum() for m in masks).item()),
            prefix + "policy/approxkl": sum(s["approxkl"] for s in mb) / tokens,
            prefix + "policy/clipfrac": sum(s["clipfrac"] for s in mb) / tokens,
            prefix + "val/ratio": sum(s["ratio"] for s in mb) / tokens,
            prefix + "loss/policy": sum(s["pg_loss"] for s in mb) / tokens,
        })
        if mb and "vf_loss" in mb[0]:  # --advantage gae: the value heads' fit
            metrics.update({
                prefix + "val/clipfrac": sum(s["vf_clipfrac"] for s in mb) / tokens,
                prefix + "loss/value": sum(s["vf_loss"] for s in mb) / tokens,
                prefix + "val/explained_variance": sum(explained_variance(exp[k].old_values,
                                                                          exp[k].returns,
                                                                          exp[k].response_mask)
                                                       for k in keys) / len(keys),
            })
    for key, value in stats.items():
        if isinstance(key, str) and key.startswith("grad_norm/") and value:
            metrics[key] = sum(value) / len(value)
    metrics["train/skipped_minibatches"] = stats["skipped"]
    return metrics


# the settings that fix the checkpoint's shapes: --resume refuses to change them. --dataset may
# change (a curriculum: the next stage trains the same agents on other questions or wordings, from
# the next update, and the held-out evaluations after it debate its --eval-split)
RESUME_MUST_MATCH = ("model", "models", "num_agents", "num_turns", "train_turns", "policy_sharing",
                     "value_model", "lora_r", "lora_alpha")


def user_scorer(args, score_fn=None):
    """Your scorer: --reward-fn MODULE:FUNCTION (imported now, before anything heavy) or main()'s
    score_fn; None when the built-in scorers apply."""
    if args.reward_fn:
        if score_fn is not None:
            arg_error("--reward-fn", "main() was also given score_fn; pass one of them")
        score_fn = load_function(args.reward_fn, "--reward-fn")
    if args.reward_fn_rules and score_fn is None:
        arg_error("--reward-fn-rules", "only applies with --reward-fn (the built-in scorers always "
                                       "use the rules)")
    if score_fn is not None:
        rules = "ON (--reward-fn-rules)" if args.reward_fn_rules else "off (--reward-fn-rules)"
        print(f"scorer: {args.reward_fn or 'score_fn'}; the format/EOS penalties and incentives: "
              f"{rules}")
    return score_fn


def eval_due(args, step: int) -> bool:
    """Evaluate before the first update (step 0), every --eval-every updates and after the last."""
    return bool(args.eval_questions) and is_main_process() and (
        step == 0 or step == args.max_steps
        or bool(args.eval_every and step % args.eval_every == 0))


def eval_started(args, records: list[dict]) -> float:
    """One line on what the held-out evaluation runs (minutes on a CPU, no bar); its start time."""
    control = "; then agent 0 alone (the control)" if args.eval_self_consistency else ""
    tqdm.write(f"held-out evaluation: {len(records)} questions, {args.num_agents} agents x "
               f"{args.num_turns} turns, greedy, up to {args.max_new_tokens} tokens{control}")
    return time.time()


def eval_metrics(numbers: dict) -> dict:
    """common.debate_metrics' numbers as the logged eval/turn{t}/... metrics: pooled over agents,
    then each agent's (eval/turn{t}/agent{a}/...: its accuracy, its W->R and R->W from turn t-1)."""
    metrics = {}
    for t, accuracy in enumerate(numbers["accuracy"]["majority"]):
        metrics[f"eval/turn{t + 1}/accuracy"] = accuracy
        metrics[f"eval/turn{t + 1}/agent_accuracy"] = numbers["accuracy"]["mean_agent"][t]
        metrics[f"eval/turn{t + 1}/invalid_rate"] = numbers["invalid_rate"][t]
        for a, per_turn in enumerate(numbers["accuracy"]["agents"]):
            metrics[f"eval/turn{t + 1}/agent{a}/accuracy"] = per_turn[t]
    for pair in numbers["transitions"]:  # turn t -> t+1, fractions of (question, agent) pairs
        into = pair["turns"][1] + 1
        metrics[f"eval/turn{into}/wrong_to_right"] = pair["pooled_fractions"]["W→R"]
        metrics[f"eval/turn{into}/right_to_wrong"] = pair["pooled_fractions"]["R→W"]
        for a, fractions in enumerate(pair["agent_fractions"]):  # of the questions
            metrics[f"eval/turn{into}/agent{a}/wrong_to_right"] = fractions["W→R"]
            metrics[f"eval/turn{into}/agent{a}/right_to_wrong"] = fractions["R→W"]
    return metrics


def stop_if_kl_exceeds(run_dir: Path, team, step: int, exp: dict, args):
    """Stop (checkpoint kept) when a (turn, agent)'s mean KL per response, over all ranks'
    responses, exceeds MAX_KL: the policy has run away; every rank takes the same decision."""
    world = world_info()[1]
    kl = {key: (allreduce_sum(e.kl.sum()) / (e.kl.shape[0] * world)).item()
          for key, e in exp.items()}
    worst = max(kl, key=kl.get)
    if kl[worst] > MAX_KL:
        save_state(run_dir, team, step, args)
        finish_distributed()
        raise SystemExit(f"stopped at update {step}: turn {worst[0] + 1} agent {worst[1]} has KL "
                         f"{kl[worst]:.2f} > {MAX_KL} to the reference. The "
                         f"checkpoint of update {step} is kept in {run_dir}; lower --lr or raise "
                         f"--kl-coef.")


def log_update(run_dir: Path, metrics: dict, stats: dict, debate, r: dict, args, bar):
    """metrics.jsonl (rank 0, its own questions), the progress bar, a summary line every --log-every
    updates, and a sample debate (printed and in samples.jsonl) every --sample-every."""
    step = metrics["step"]
    log_metrics(run_dir, metrics)
    bar.set_postfix(acc=f"{metrics[f'turn{args.num_turns}/accuracy']:.2f}",
                    score=f"{metrics['objective/scores']:.2f}", kl=f"{metrics['objective/kl']:.3f}",
                    clip=f"{metrics['policy/clipfrac']:.3f}")
    if stats["skipped"]:
        tqdm.write(f"warning: update {step}: skipped {stats['skipped']} step(s) with a non-finite "
                   f"loss")
    if args.log_every and step % args.log_every == 0:
        keys = [f"turn{t + 1}/accuracy" for t in range(args.num_turns)] + [
            "objective/scores", "objective/penalized_scores", "objective/rewards", "objective/kl",
            "policy/clipfrac", "val/clipfrac", "loss/value", "objective/entropy",
            "timing/rollout_s", "timing/update_s"]
        tqdm.write(f"update {step}: " + format_metrics(metrics, keys))
    first = is_main_process() and step == bar.initial + 1  # the first update this run made
    if first and step < args.max_steps:
        evals = sum(eval_due(args, s) for s in range(step + 1, args.max_steps + 1))
        tqdm.write(projected_time(run_dir, metrics["timing/step_s"], args.max_steps - step, evals))
    if args.sample_every and step % args.sample_every == 0:
        print_sample(step, debate, r["scores"], r["penalized"], r["rewards"])
        log_samples(run_dir, debate_samples(step, debate, r["scores"], r["penalized"],
                                            r["rewards"]))


def finish_run(run_dir: Path, args):
    """The closing lines: where everything is, the held-out table (per turn the authors' majority
    vote and the mean agent accuracy, the headline), the plot; trackers and the process group
    closed."""
    bases = len(dict.fromkeys(agent_models(args)))  # save_state: a folder per distinct base
    folders = ["adapters"] if bases == 1 else [f"adapters_base{i}" for i in range(bases)]
    print(f"done. metrics: {run_dir / 'metrics.jsonl'} | adapters: "
          f"{', '.join(str(run_dir / f) for f in folders)} (agents and turns: "
          f"{run_dir / 'debate.json'}) | checkpoint: {run_dir / 'checkpoint.pt'}")
    # per turn the vote, then the mean agent accuracy: the last column, the headline
    sc = [f"eval/sc/{k}vote_accuracy" for k in ("", "budget_") if args.eval_self_consistency]
    print_eval_table(run_dir, [f"eval/turn{t}/{k}" for t in range(2, args.num_turns + 1)
                               for k in ("wrong_to_right", "right_to_wrong")] + sc
                     + [f"eval/turn{t}/{k}" for t in range(1, args.num_turns + 1)
                        for k in ("accuracy", "agent_accuracy")])
    if args.eval_questions and is_main_process() and (run_dir / "metrics.jsonl").exists():
        print("  agent_accuracy = the mean over agents (the headline: an unparsable partner cannot "
              "raise it);\n  accuracy = the majority vote with tie expectation, the authors' "
              "rule (two agents: [right, unparsable] scores 1, [right, wrong] 0.5)")
        if sc:
            print("  eval/sc = the control: agent 0 alone, its sampled answers voted (the same "
                  "rule), as many as the debate's (vote_accuracy) or within its tokens (budget_)")
    plot_run(run_dir)  # training_curves.png (needs matplotlib)
    finish_tracker()  # --report-to: flush and close
    finish_distributed()  # multi-process: leave the process group (gloo aborts at exit otherwise)


def agent_models(args) -> list[str]:
    """The base model of each agent: --models a,b,... or --model for everyone."""
    names = ([m.strip() for m in args.models.split(",")] if args.models
             else [args.model] * args.num_agents)
    if len(names) != args.num_agents:
        arg_error("--models", f"gives {len(names)} models but --num-agents is {args.num_agents}")
    return names


def train_turn_indices(args) -> list[int]:
    """--train-turns (1-based) as 0-based turn indices; all turns by default."""
    turns = ([t - 1 for t in parse_int_list(args.train_turns, "--train-turns")]
             or list(range(args.num_turns)))
    if any(not 0 <= t < args.num_turns for t in turns):
        arg_error("--train-turns", f"turns are 1..{args.num_turns}, got {args.train_turns!r}")
    return sorted(set(turns))


def incentive_values(args) -> list[float]:
    """--incentives as incentive_bonus's four numbers: α0, α1, β0, β1 (the paper's Tables 1-2)."""
    try:
        values = [float(x) for x in args.incentives.split(",")]
    except ValueError:
        values = []
    if len(values) != 4:
        arg_error("--incentives", f"expected four comma-separated numbers α0,α1,β0,β1, got "
                                  f"{args.incentives!r}")
    return values


def settle_args(args, score_fn=None):
    """The settings a run trains with: --resume's saved ones under the flags typed now (a structural
    change refused), every refusal before anything heavy loads, and your scorer (--reward-fn)
    imported."""
    if args.resume:
        args = resumed_args(args, "cotrain", RESUME_MUST_MATCH, ("eval_questions", "eval_split"))
    check_args(args)
    return args, user_scorer(args, score_fn)
