"""The behaviour log-probs generate() returns (sampling_logprobs: q, what each token was drawn
from, after top-k / top-p) against a hand computation from a plain forward, and the truncation gap
log q - log π that magrpo.py and cotrain.py log from them (tiny model, CPU)."""
import functools

import pytest
import torch

import common
import cotrain
import magrpo as M
from common import generate, load_model
from nanomarl.cli import parse_args
from nanomarl.cotrain_run import rollout_metrics
from nanomarl.distributed import seed_everything
from nanomarl.models import load_tokenizer
from nanomarl.tasks.debate import load_task

PROMPTS = ["q one", "question two is longer", "3", "four four", "five", "six six six"]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_tokenizer("tiny"), load_model("tiny")


def kept_mass(probs: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """[V] probabilities at the temperature -> the kept set as a bool [V], by the definitions:
    top-k keeps the k most probable tokens; top-p (on what top-k kept, renormalised) the most
    probable ones until their mass reaches p (a token is kept while the mass of the tokens before
    it is below p)."""
    keep = torch.ones_like(probs, dtype=torch.bool)
    if top_k:
        keep[probs.argsort(descending=True)[top_k:]] = False
    if top_p < 1.0:
        renormalised = torch.where(keep, probs, 0.0) / probs[keep].sum()
        order = renormalised.argsort(descending=True)
        before = renormalised[order].cumsum(0) - renormalised[order]
        keep[order[before >= top_p]] = False
    return keep


def hand_sampling_logprobs(model, rollout, temperature: float, top_k: int, top_p: float):
    """log q of each sampled token, from one plain forward per row (no padding):
    log π_T(x) - log(kept mass)."""
    expected = torch.zeros_like(rollout["logprobs"])
    for b in range(len(rollout["query_ids"])):
        query = rollout["query_ids"][b][rollout["query_mask"][b].bool()]
        response = rollout["response_ids"][b][rollout["response_mask"][b].bool()]
        with torch.no_grad():
            logits = model(input_ids=torch.cat([query, response])[None]).logits[0].double()
        start = len(query) - 1
        probs = torch.softmax(logits[start:start + len(response)] / temperature, dim=-1)
        for j, token in enumerate(response.tolist()):
            keep = kept_mass(probs[j], top_k, top_p)
            assert keep[token], (b, j)  # generate never samples a token the warpers cut
            expected[b, j] = torch.log(probs[j, token]) - torch.log(probs[j][keep].sum())
    return expected


def mean_gap(rollout, sampling_logprobs=None):
    sampled = rollout["sampling_logprobs"] if sampling_logprobs is None else sampling_logprobs
    mask = rollout["response_mask"]
    return float(((sampled - rollout["logprobs"]) * mask).sum() / mask.sum())


@pytest.mark.parametrize("settings", [dict(temperature=0.7, top_k=2),
                                      dict(temperature=1.0, top_p=0.3),
                                      dict(temperature=0.7, top_k=20, top_p=0.5),
                                      dict(temperature=0.7)])
def test_sampling_logprobs_are_the_truncated_distribution(tiny, settings):
    tok, model = tiny
    torch.manual_seed(0)
    rollout = generate(model, tok, PROMPTS, None, max_new_tokens=12, **settings)
    mask = rollout["response_mask"]
    assert mask.sum() > 30
    top_k, top_p = settings.get("top_k", 0), settings.get("top_p", 1.0)
    expected = hand_sampling_logprobs(model, rollout, settings["temperature"], top_k, top_p)
    torch.testing.assert_close(rollout["sampling_logprobs"], expected.float() * mask, atol=1e-5,
                               rtol=0)
    assert rollout["sampling_logprobs"][mask == 0].abs().sum() == 0
    gap = mean_gap(rollout)  # the mean over response tokens of -log(kept mass)
    assert abs(gap - mean_gap(rollout, expected.float())) < 1e-5
    if top_k or top_p < 1.0:
        assert gap > 0.1  # the truncation is visible: log q > log π on every kept token
        assert ((rollout["sampling_logprobs"] - rollout["logprobs"]) * mask >= -1e-6).all()
    else:  # top_k = 0, top_p = 1: q is π
        assert abs(gap) < 1e-6
        torch.testing.assert_close(rollout["sampling_logprobs"], rollout["logprobs"], atol=1e-6,
                                   rtol=0)


def test_greedy_sampling_logprobs_are_zero(tiny):
    tok, model = tiny
    rollout = generate(model, tok, PROMPTS, None, max_new_tokens=8, greedy=True)
    # the argmax: log 1
    assert torch.equal(rollout["sampling_logprobs"], torch.zeros_like(rollout["logprobs"]))
    assert (rollout["logprobs"][rollout["response_mask"] == 1] < 0).all()


@pytest.mark.parametrize("fast", [True, False])
def test_sampling_logprobs_of_a_mixed_adapter_batch_in_chunks(tiny, fast):
    """Rows on several adapters (fast=True: stacked routing; fast=False: peft's) and generate's
    chunks: each row's q is its own adapter's."""
    tok, _ = tiny
    model = common.add_adapters(load_model("tiny"), ["a0", "a1"], r=4, alpha=8)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    names = ["a0", "a1", "__base__", "a1", "a0", "__base__"]
    torch.manual_seed(0)
    rollout = generate(model, tok, PROMPTS, names, max_new_tokens=10, temperature=0.7, top_k=3,
                       batch_size=4, fast=fast)
    for name in set(names):
        rows = [i for i, n in enumerate(names) if n == name]
        part = {k: v[rows] for k, v in rollout.items()}
        with common.single_adapter(model, name):
            expected = hand_sampling_logprobs(model, part, 0.7, 3, 1.0)
        torch.testing.assert_close(part["sampling_logprobs"],
                                   expected.float() * part["response_mask"], atol=1e-5, rtol=0)


def test_magrpo_logs_the_truncation_gap(tiny):
    """magrpo.py's agentI/truncation_gap: the mean over the update's response tokens of
    -log(kept mass) by hand; logprob_gap stays the check that the update's forward reads the
    sampling pass's π."""
    tok, _ = tiny
    seed_everything(0)
    args = M.Args(model="tiny", num_generations=4, max_new_tokens=6, chat_template=False,
                  temperature=0.7, top_p=1.0, top_k=2, sandbox_workers=1, lr=0.03)
    agents = M.build_agents(args, "cpu")
    task = M.Task(prompts=lambda p: [p["text"], p["text"] + " b"],
                  reward=lambda p, t: (float(len(t[0])), {}))
    problems = [dict(id=f"toy/{i}", kind="toy", text=f"Q{i}:") for i in range(2)]
    roots, batches = M.rollout(agents, tok, problems, task, args)
    batch = batches[0][1]
    advantages = torch.ones(len(batch["response_mask"]))
    stats = M.accumulate_agent_loss(agents, 1, batch, advantages, len(roots), args)
    with common.single_adapter(agents.models[0], agents.names[1]):
        expected = hand_sampling_logprobs(agents.models[0], batch, 0.7, 2, 1.0)
    assert stats["truncation_gap"] == pytest.approx(mean_gap(batch, expected.float()), abs=1e-5)
    assert stats["truncation_gap"] > 0.1
    assert stats["logprob_gap"] < 1e-5


@pytest.mark.parametrize("top_k", [2, 0])
def test_cotrain_logs_the_truncation_gap(tiny_model_dir, monkeypatch, top_k):
    """cotrain.py samples from π itself (its gap is 0); a truncation slipped into its sampling
    shows in objective/truncation_gap and agentA/turnT/truncation_gap."""
    monkeypatch.setattr(cotrain, "generate", functools.partial(generate, top_k=top_k))
    args = parse_args(cotrain.Args, ["--model", "tiny", "--device", "cpu",
                                     "--questions-per-update", "2", "--samples-per-question", "2",
                                     "--max-new-tokens", "6"])
    team = cotrain.build_team(args, "cpu")
    records = [r for r in load_task("arith", "train", limit=2) for _ in range(2)]
    scorer = lambda recs, texts: torch.zeros(len(texts))  # noqa: E731
    debate, _, r = cotrain.rollout_step(team, args, records, scorer)
    metrics = rollout_metrics(debate, *r.values())
    gaps = [metrics[f"agent{a}/turn{t + 1}/truncation_gap"] for t in range(2) for a in range(2)]
    rollouts = [debate.rollout[(t, a)] for t in range(2) for a in range(2)]
    for gap, ro in zip(gaps, rollouts):
        assert gap == pytest.approx(mean_gap(ro), abs=1e-6)
    tokens = sum(ro["response_mask"].sum() for ro in rollouts)
    overall = sum(g * ro["response_mask"].sum() for g, ro in zip(gaps, rollouts)) / tokens
    assert metrics["objective/truncation_gap"] == pytest.approx(float(overall), abs=1e-6)
    if top_k:
        assert min(gaps) > 0.1
    else:
        assert max(abs(g) for g in gaps) < 1e-6
