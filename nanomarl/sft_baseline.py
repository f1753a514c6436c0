"""The debate baseline "SFT on collaboration trajectories" (MAPoRL): which off-the-shelf debates
it keeps (correct_debate_examples), the batches (encode_sft_batch), the LoRA fine-tuning with a
masked NLL (sft_lora) and the base it fine-tunes (sft_base). evaluate.py's train_sft_baseline plays
the debates and calls them; the model functions of common.py come in as the argument `common`
(nanomarl/ does not import the scripts). A learner may skip this module.
"""
from __future__ import annotations

import random
from types import ModuleType

import torch

from nanomarl.cli import arg_error
from nanomarl.eval_runs import read_debate_run
from nanomarl.vote import majority_vote_accuracy


def correct_debate_examples(debate, records: list[dict]) -> list[tuple[str, str]]:
    """Keep the debates whose FINAL-turn majority vote is right outright (tie expectation = 1: the
    gold wins, or every tied answer is the gold; a 50/50 tie is not kept), and return every (prompt,
    response) of every agent and turn in them: the collaboration trajectories the SFT baseline
    imitates. debate: cotrain.run_debate's Debate (prompts, responses, answers: [b][t][a])."""
    examples = []
    for b, record in enumerate(records):
        if majority_vote_accuracy(debate.answers[b][-1], record["answer"]) == 1.0:
            examples += [(debate.prompts[b][t][a], debate.responses[b][t][a])
                         for t in range(len(debate.answers[b]))
                         for a in range(len(debate.answers[b][t]))]
    return examples


def encode_sft_batch(tokenizer, prompts: list[str], responses: list[str], max_response_tokens: int,
                     device, common: ModuleType) -> dict:
    """Left-padded prompts and right-padded responses (+ EOS, so the model learns to stop), in the
    layout common.forward_responses expects. Responses longer than max_response_tokens are cut."""
    query_ids, query_mask = common.tokenize_prompts(tokenizer, prompts, device)
    rows = [tokenizer(r, add_special_tokens=False)["input_ids"][:max_response_tokens - 1]
            + [tokenizer.eos_token_id] for r in responses]
    width = max(len(r) for r in rows)
    response_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    response_mask = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        response_ids[i, :len(r)] = torch.tensor(r)
        response_mask[i, :len(r)] = 1.0
    return dict(query_ids=query_ids, query_mask=query_mask, response_ids=response_ids.to(device),
                response_mask=response_mask.to(device))


def sft_lora(model, tokenizer, examples: list[tuple[str, str]], adapter: str, epochs: int,
             lr: float, batch_size: int, max_response_tokens: int, seed: int,
             common: ModuleType) -> list[float]:
    """Fine-tune the LoRA adapter `adapter` (already on the model) on (prompt, response) pairs with
    a plain masked NLL: −Σ log π(response token | prompt, earlier tokens) / #response tokens. Only
    this adapter's parameters are optimised (AdamW). Returns the loss of every step. The forward:
    common.forward_responses."""
    device = next(model.parameters()).device
    params = common.adapter_parameters(model, adapter)
    optimizer = torch.optim.AdamW(params, lr=lr)
    rng = random.Random(seed)
    losses = []
    for _ in range(epochs):
        order = list(range(len(examples)))
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            chosen = [examples[i] for i in order[start:start + batch_size]]
            batch = encode_sft_batch(tokenizer, [p for p, _ in chosen], [r for _, r in chosen],
                                     max_response_tokens, device, common)
            out = common.forward_responses(model, **batch,
                                           adapter_names=[adapter] * len(chosen))
            logprobs = out["logprobs"]
            # masked NLL per response token
            loss = -common.masked_mean(logprobs, batch["response_mask"])
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            losses.append(loss.item())
    return losses


def sft_base(args) -> str:
    """The base the SFT baseline fine-tunes and plays: the --run's base, so that it is compared with
    the trained agents on the same model (a heterogeneous run has no single base: refused), else
    --model."""
    if not getattr(args, "run", ""):
        return args.model
    models = sorted(set(read_debate_run(args.run, "--run")["models"]))
    if len(models) > 1:
        arg_error("--methods", f"sft fine-tunes one base, but {args.run} has several "
                               f"({', '.join(models)}): leave sft out of --methods")
    return models[0]

