"""Single-agent self-consistency: the control a debate is measured against. One policy answers each
question several times on its own (sampled, the debate's turn-1 prompt), and the majority of its
answers is its answer, scored with the debate's vote (vote.majority_vote_accuracy). Matched to a
debate two ways: as many answers per question (agents x turns), and at most as many generated tokens
per question. cotrain.py's held-out evaluation (eval_controls) and evaluate.py (methods sc-base,
sc-maporl) use it. A learner may skip this module."""
from __future__ import annotations

import time

import torch

from nanomarl.vote import majority_vote_accuracy
from nanomarl.split_controls import whole_question


def debate_tokens(debate) -> tuple[list[int], list[int]]:
    """Per question, the tokens a cotrain.run_debate spent over every turn and agent: (generated,
    read in prompts)."""
    rollouts = [debate.rollout[key] for key in sorted(debate.rollout)]
    generated = sum(ro["response_mask"].sum(1) for ro in rollouts)
    read = sum(ro["query_mask"].sum(1) for ro in rollouts)
    return [int(x) for x in generated], [int(x) for x in read]


def sample_answers(play, model, tokenizer, adapter: str, records: list[dict], n: int,
                   budgets: list[int] | None = None, max_samples: int = 0, **generation) -> dict:
    """Each question answered n times by one policy (adapter on model; '__base__': none): `play` is
    cotrain.run_debate with one turn and n seats on one model, so a round is one generate call.
    With budgets (generated tokens per question), further rounds of n follow for the questions whose
    answers have spent less than their budget, up to max_samples answers each. Returns answers,
    responses, tokens (generated) and prompt_tokens, each [question][sample] in sampling order."""
    keys = ("answers", "responses", "tokens", "prompt_tokens")
    out = {key: [[] for _ in records] for key in keys}
    todo = list(range(len(records)))
    while todo:
        debate = play([records[q] for q in todo], [model] * n, [tokenizer] * n, [[adapter] * n],
                      **generation)
        for seat in range(n):
            ro = debate.rollout[(0, seat)]
            tokens, read = ro["response_mask"].sum(1).tolist(), ro["query_mask"].sum(1).tolist()
            for i, q in enumerate(todo):
                out["answers"][q].append(debate.answers[i][0][seat])
                out["responses"][q].append(debate.responses[i][0][seat])
                out["tokens"][q].append(int(tokens[i]))
                out["prompt_tokens"][q].append(int(read[i]))
        todo = [q for q in todo if budgets is not None and sum(out["tokens"][q]) < budgets[q]
                and len(out["tokens"][q]) + n <= max_samples]
    return out


def within_budget(tokens: list[int], budget: int) -> int:
    """How many answers, in sampling order, fit in a token budget: the longest prefix whose tokens
    do not exceed it, and at least one."""
    spent, k = 0, 0
    for used in tokens:
        if spent + used > budget:
            break
        spent, k = spent + used, k + 1
    return max(k, 1)


def self_consistency_metrics(samples: dict, golds: list[str], n: int,
                             budgets: list[int] | None = None) -> dict:
    """The control's numbers over questions: one answer's accuracy (mean over its first n), the vote
    of its first k answers for k = 1..n (vote_accuracy: k = n, as many answers as the debate's),
    unparsable rate and tokens per question; with budgets (the debate's generated tokens on each
    question), the vote of the answers within_budget, how many they are, their tokens and the
    fraction of questions where the answers ran out below the budget (budget_short)."""
    answers, tokens, q = samples["answers"], samples["tokens"], len(golds)
    mean = lambda values: sum(values) / q  # noqa: E731  (over questions)
    vote_at = [mean([majority_vote_accuracy(a[:k], g) for a, g in zip(answers, golds)])
               for k in range(1, n + 1)]
    out = dict(num_questions=q, num_samples=n, vote_accuracy=vote_at[-1], vote_at_k=vote_at,
               sample_accuracy=mean([sum(x == g for x in a[:n]) / n
                                     for a, g in zip(answers, golds)]),
               invalid_rate=mean([sum(x is None for x in a[:n]) / n for a in answers]),
               tokens_per_question=mean([sum(t[:n]) for t in tokens]),
               prompt_tokens_per_question=mean([sum(t[:n]) for t in samples["prompt_tokens"]]))
    if budgets is not None:
        used = [within_budget(t, b) for t, b in zip(tokens, budgets)]
        out.update(budget_per_question=mean(budgets),
                   budget_vote_accuracy=mean([majority_vote_accuracy(a[:k], g)
                                              for a, g, k in zip(answers, golds, used)]),
                   budget_samples=mean(used),
                   budget_tokens_per_question=mean([sum(t[:k]) for t, k in zip(tokens, used)]),
                   budget_short=mean([sum(t) < b for t, b in zip(tokens, budgets)]))
    return out


def eval_controls(play, team, args, records: list[dict], debate, t0: float) -> dict:
    """Beside the held-out debate: its tokens per question, and (--eval-self-consistency) agent 0's
    turn-1 policy alone answering each (whole) question A x T times (sampled at --temperature from
    --seed, the training's random state untouched), its answers voted (self_consistency_metrics:
    the same number of answers, and within the debate's generated tokens, up to 2 A x T answers);
    then the evaluation's size and seconds since t0. play: cotrain.run_debate."""
    spent, read = debate_tokens(debate)
    metrics = {"eval/tokens_per_question": sum(spent) / len(records),
               "eval/prompt_tokens_per_question": sum(read) / len(records)}
    if args.eval_self_consistency:
        t1, n = time.time(), args.num_agents * args.num_turns
        with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
            torch.manual_seed(args.seed)
            whole = [whole_question(r) for r in records]  # split information: it sees it all
            samples = sample_answers(play, team.models()[0], team.agent_tokenizers()[0],
                                     team.adapter_names[0][0], whole, n, spent, 2 * n,
                                     max_new_tokens=args.max_new_tokens,
                                     temperature=args.temperature, prompt_style=args.prompt_style,
                                     generate_batch_size=args.generate_batch_size)
        numbers = self_consistency_metrics(samples, [r["answer"] for r in records], n, spent)
        metrics.update({f"eval/sc/{k}": v for k, v in numbers.items()
                        if k not in ("num_questions", "vote_at_k")})
        metrics["timing/eval_sc_s"] = time.time() - t1
    return dict(metrics, **{"eval/num_questions": len(records), "timing/eval_s": time.time() - t0})
