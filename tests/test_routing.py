"""fast.stacked_lora_routing: mixed-adapter inference in two stacked matmuls per LoRA layer (common.generate with
fast=True), checked against peft's own per-row routing (adapter_names=; fast=False) on the tiny model: logits, greedy
and sampled tokens, log-probs."""
import pytest
import torch
from peft import LoraConfig

import common
from common import generate, load_model
from nanomarl import fast
from nanomarl.models import load_adapters, load_tokenizer, save_adapters

# three adapters with different ranks and lora_alpha / r scalings (2, 8, 0.5), so a scaling applied to the
# wrong block or a rank padded wrongly shows up
ADAPTERS = {"a0": (8, 16), "a1": (4, 32), "a2": (2, 1)}
ROWS = ["a0", "__base__", "a1", "a2", "a0", "a1", "__base__", "a2"]


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return load_tokenizer("tiny")


def make_model(seed=0):
    model = load_model("tiny")
    for name, (r, alpha) in ADAPTERS.items():
        model = common.add_adapters(model, [name], r=r, alpha=alpha)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # peft starts B at zero (every adapter = the base): random B, so adapters differ; A from
        for n, p in model.named_parameters():  # the same generator, so every run tests the same model
            if ".lora_" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return make_model()


def prompts(tok, n):
    texts = ["2+2?", "a longer question about apples and pears", "hi", "count to five", "x", "why is the sky blue",
             "ok", "the end"]
    return [common.chat_prompt(tok, [{"role": "user", "content": t}]) for t in texts[:n]]


@torch.no_grad()
def test_logits_equal_peft_mixed_forward(model, tok):
    ids, mask = common.tokenize_prompts(tok, prompts(tok, len(ROWS)), "cpu")
    position_ids = (mask.cumsum(1) - 1).clamp(min=0)
    inputs = dict(input_ids=ids, attention_mask=mask, position_ids=position_ids)
    peft_logits = model(**inputs, adapter_names=ROWS).logits
    with fast.stacked_lora_routing(model, ROWS):
        stacked_logits = model(**inputs).logits
    # peft runs each adapter's rows as a batch of their own: other shapes, so other rounding on some
    # CPUs (~1e-6); a row on the wrong adapter moves its logits by more than 1e-2 (below)
    torch.testing.assert_close(stacked_logits, peft_logits, atol=1e-4, rtol=0)
    with common.single_adapter(model, "__base__"):
        base_logits = model(**inputs).logits
    for i, name in enumerate(ROWS):  # base rows are the base model; adapter rows really move the logits
        real = mask[i].bool()
        gap = (stacked_logits[i][real] - base_logits[i][real]).abs().max().item()
        assert gap < 1e-5 if name == "__base__" else gap > 1e-2, (name, gap)
    # afterwards every layer is peft's again: the plain forward uses the active adapter on every row
    assert not any("forward" in vars(m) for m in model.modules())
    torch.testing.assert_close(model(**inputs).logits, model(**inputs, adapter_names=["a0"] * len(ROWS)).logits)


@pytest.mark.parametrize("greedy", [True, False])
def test_generate_stacked_equals_peft(model, tok, greedy):
    """The same tokens (greedy, and sampled with the same seed) and log-probs from both routings: fast=True
    (stacked) and fast=False (peft's)."""
    outs = {}
    for routing, fast_path in (("peft", False), ("stacked", True)):
        torch.manual_seed(0)
        outs[routing] = generate(model, tok, prompts(tok, len(ROWS)), ROWS, max_new_tokens=12, min_new_tokens=12,
                                 temperature=1.0, greedy=greedy, fast=fast_path)
    assert torch.equal(outs["stacked"]["response_ids"], outs["peft"]["response_ids"])
    # other batch shapes (peft: one batch per adapter); a wrong adapter moves them by > 1e-3 (below)
    torch.testing.assert_close(outs["stacked"]["logprobs"], outs["peft"]["logprobs"], atol=1e-4, rtol=0)
    torch.manual_seed(0)  # and the rows differ from the base model's, so the adapters were applied
    base = generate(model, tok, prompts(tok, len(ROWS)), ["__base__"] * len(ROWS), max_new_tokens=12,
                    min_new_tokens=12, temperature=1.0, greedy=greedy)
    assert not torch.allclose(base["logprobs"], outs["stacked"]["logprobs"], atol=1e-3)


def test_generate_does_not_call_peft_routing(tok, monkeypatch):
    """A mixed batch in generate(fast=True) goes through the stacked routing, never peft's per-row path."""
    from peft.tuners.lora.layer import Linear

    def refuse(*args, **kwargs):
        raise AssertionError("peft's _mixed_batch_forward was called")

    model = make_model()  # its own: peft leaves its adapter_names hooks on the layers when a forward raises
    monkeypatch.setattr(Linear, "_mixed_batch_forward", refuse)
    out = generate(model, tok, prompts(tok, 4), ROWS[:4], max_new_tokens=3, fast=True)
    assert out["response_ids"].shape[0] == 4
    with pytest.raises(AssertionError, match="_mixed_batch_forward"):  # the check itself works: fast=False is peft's
        generate(model, tok, prompts(tok, 4), ROWS[:4], max_new_tokens=3, fast=False)
    assert not fast.stackable_lora(model, ROWS)  # ... and those leftover hooks send it back to peft's routing


def test_saved_and_loaded_adapters_route_the_same(model, tok, tmp_path):
    """Storage is peft's: adapters saved and loaded again give the same stacked outputs."""
    save_adapters(model, list(ADAPTERS), tmp_path / "adapters")
    loaded = load_adapters(load_model("tiny"), tmp_path / "adapters")
    ids, mask = common.tokenize_prompts(tok, prompts(tok, len(ROWS)), "cpu")
    with torch.no_grad():
        with fast.stacked_lora_routing(model, ROWS):
            before = model(input_ids=ids, attention_mask=mask).logits
        with fast.stacked_lora_routing(loaded, ROWS):
            after = loaded(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(after, before, atol=1e-6, rtol=0)


def test_refuses_autograd_and_unsupported_layers(model, tok):
    with pytest.raises(ValueError, match="inference only"):
        with fast.stacked_lora_routing(model, ROWS):
            pass
    assert fast.stackable_lora(model, ROWS)
    assert not fast.stackable_lora(model, ["a0", "nope"])  # unknown name: peft's routing raises its own error
    assert not fast.stackable_lora(load_model("tiny"), ["__base__"])  # no adapters at all
    biased = make_model()  # an adapter whose B has a bias (lora_bias): not stacked
    biased.add_adapter("b", LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_bias=True))
    biased.eval()
    assert fast.stackable_lora(biased, ["a0", "a1"]) and not fast.stackable_lora(biased, ["a0", "b"])
    with torch.no_grad(), pytest.raises(ValueError, match="peft's routing"):
        with fast.stacked_lora_routing(biased, ["a0", "b"]):
            pass
    # generate(fast=True) falls back to peft's routing for those rows: the same tokens as fast=False
    rows = ["a0", "b", "__base__", "b"]
    greedy = [generate(biased, tok, prompts(tok, 4), rows, max_new_tokens=6, greedy=True, fast=fast_path)
              for fast_path in (True, False)]
    assert torch.equal(greedy[0]["response_ids"], greedy[1]["response_ids"])
    torch.testing.assert_close(greedy[0]["logprobs"], greedy[1]["logprobs"], atol=1e-6, rtol=0)


def test_4bit_layers_keep_peft_routing(tiny_model_dir):
    """bitsandbytes layers are not stacked (not verified): stackable_lora says no, generate(fast=True) still works."""
    pytest.importorskip("bitsandbytes", reason="bitsandbytes cannot import on this machine")
    model = common.add_adapters(load_model("tiny", quant="4bit"), ["a0", "a1"], r=4, alpha=8)
    assert not fast.stackable_lora(model, ["a0", "a1"])
    out = generate(model, load_tokenizer("tiny"), ["ab", "cd"], ["a0", "a1"], max_new_tokens=3, fast=True)
    assert torch.isfinite(out["logprobs"]).all()


@pytest.mark.parametrize("names, distinct", [
    (["a0", "a0", "a1", "a1", "__base__", "__base__"] * 2, 6),  # cotrain: agents' K samples
    (["a1"] * 12, 2)])  # magrpo: one agent's G samples of each prompt
def test_shared_prefill_runs_each_distinct_row_once_with_every_rows_numbers(model, tok, monkeypatch,
                                                                             names, distinct):
    """generate(fast=True) prefills each distinct (prompt, adapter) row once, and its samples,
    log-probs and entropies equal those of the same call prefilling every row."""
    texts = prompts(tok, 2)
    rows = [texts[i // 6] for i in range(12)]  # two prompts, each repeated on its adapters
    widths = []
    inner = model.get_base_model()  # its decoder counts the rows of each forward
    hook = inner.get_decoder().register_forward_pre_hook(lambda m, a, kw: widths.append(len(kw["input_ids"])),
                                           with_kwargs=True)
    outs = []
    try:
        for shared in (True, False):
            if not shared:  # every row's own prefill: the same routing, no sharing
                monkeypatch.setattr(common, "shared_prefill", lambda *a: a[-1](a[-2]))
            torch.manual_seed(0)
            outs.append(generate(model, tok, rows, names, max_new_tokens=10, min_new_tokens=10,
                                 temperature=1.0, fast=True))
    finally:
        hook.remove()
    assert widths[0] == distinct and widths[1:10] == [12] * 9  # the prefill, then 9 steps
    assert widths[10] == 12  # the other call prefills every row
    assert torch.equal(outs[0]["response_ids"], outs[1]["response_ids"])
    # bit for bit where a row's matmuls round alike in batches of any size (this project's AMD
    # EPYC); some CPUs round by the batch's shape (~1e-6, as peft's routing against the stacked)
    for key in ("logprobs", "sampling_logprobs", "entropy"):
        torch.testing.assert_close(outs[0][key], outs[1][key], atol=1e-5, rtol=0, msg=key)
    assert len({tuple(r.tolist()) for r in outs[0]["response_ids"]}) > distinct  # sampled apart
    assert "forward" not in vars(inner)  # the model's own forward again
