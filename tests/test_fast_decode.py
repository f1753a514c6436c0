"""nanomarl/fast_decode.py (the GPU's generation: a static KV cache and a captured decoding step)
against the plain path, common.generate(fast=False) through transformers, on the tiny model on CPU.
The fast path runs eagerly here (no CUDA graph, which needs a GPU; torch.compile only in the test
that asks for it), set as the model's sampling_engine and reached through common.generate(fast=True)
as on a GPU: the code the GPU captures, so the greedy tokens must be equal token for token, the
log-probs within 1e-5, and a seeded sampling run the same tokens (one multinomial draw per step over
the real rows, as transformers draws)."""
import pytest
import torch

import common
from nanomarl import fast_decode
from nanomarl.fast_decode import FastDecoder
from nanomarl.models import load_tokenizer

ADAPTERS = {"a0": (8, 16), "a1": (4, 32)}
ROWS = ["a0", "__base__", "a1", "a0", "a1"]  # 5 rows: the bucket (8) adds 3 padding rows
TEXTS = ["2+2?", "a longer question about apples and pears, twice as long", "hi", "count to five",
         "x"]
KEYS = ("response_ids", "response_mask", "truncated", "query_ids", "query_mask")


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return load_tokenizer("tiny")


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    model = common.load_model("tiny")
    for name, (r, alpha) in ADAPTERS.items():
        model = common.add_adapters(model, [name], r=r, alpha=alpha)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # random B (peft starts it at 0): every adapter moves the logits
        for n, p in model.named_parameters():
            if ".lora_" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model


def prompts(tok):
    return [common.chat_prompt(tok, [{"role": "user", "content": t}]) for t in TEXTS]


def decoded(model, decoder, tok, texts, names, **kwargs) -> dict:
    """common.generate(fast=True) with `decoder` as the model's sampling_engine (on CUDA
    fast_decoder gives it; on CPU it is set by hand), taken off the module's model afterwards."""
    model.sampling_engine = decoder
    try:
        return common.generate(model, tok, texts, names, fast=True, **kwargs)
    finally:
        del model.sampling_engine


def plain_generate(model, tok, texts, names, **kwargs) -> dict:
    return common.generate(model, tok, texts, names, fast=False, **kwargs)


def assert_same(fast, plain, logprob_tol=1e-5):
    for key in KEYS:
        assert torch.equal(fast[key], plain[key]), key
    for key in ("logprobs", "entropy", "sampling_logprobs"):
        torch.testing.assert_close(fast[key], plain[key], atol=logprob_tol, rtol=0, msg=key)


def test_greedy_tokens_and_logprobs_equal_the_plain_path(model, tok):
    kwargs = dict(max_new_tokens=12, greedy=True)
    plain = plain_generate(model, tok, prompts(tok), ROWS, **kwargs)
    fast = decoded(model, FastDecoder(model), tok, prompts(tok), ROWS, **kwargs)
    assert_same(fast, plain)
    assert plain["response_mask"].sum() > 20  # something to compare


@pytest.mark.parametrize("sampling", [dict(temperature=0.7),
                                      dict(temperature=0.5, top_p=0.9, top_k=50)])
def test_seeded_sampling_draws_the_same_tokens(model, tok, sampling):
    kwargs = dict(max_new_tokens=10, min_new_tokens=3, **sampling)
    torch.manual_seed(3)
    plain = plain_generate(model, tok, prompts(tok), ROWS, **kwargs)
    torch.manual_seed(3)
    fast = decoded(model, FastDecoder(model), tok, prompts(tok), ROWS, **kwargs)
    assert_same(fast, plain)


def test_one_adapter_base_model_and_batch_size(model, tok):
    """Rows on one adapter (the plain path: peft's set_adapter), on the base, in chunks of 2."""
    decoder = FastDecoder(model)
    for names, batch_size in ((["a1"] * 5, None), (["__base__"] * 5, 2), (ROWS, 2)):
        plain = plain_generate(model, tok, prompts(tok), names, max_new_tokens=8, greedy=True,
                                batch_size=batch_size)
        fast = decoded(model, decoder, tok, prompts(tok), names, max_new_tokens=8, greedy=True,
                       batch_size=batch_size)
        assert_same(fast, plain)


def test_an_update_reaches_the_next_call(model, tok):
    """The decoder's stacked LoRA buffers follow the adapters' weights (copied when one changed)."""
    decoder = FastDecoder(model)
    before = decoded(model, decoder, tok, prompts(tok), ROWS, max_new_tokens=6, greedy=True)
    weight = next(p for n, p in model.named_parameters() if "lora_B.a1" in n)
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight.add_(0.5)
        plain = plain_generate(model, tok, prompts(tok), ROWS, max_new_tokens=6, greedy=True)
        after = decoded(model, decoder, tok, prompts(tok), ROWS, max_new_tokens=6, greedy=True)
        assert_same(after, plain)
        assert not torch.allclose(after["logprobs"][2], before["logprobs"][2])  # row 2 is on a1
    finally:
        with torch.no_grad():
            weight.copy_(saved)


def test_adapters_on_different_linears(tiny_model_dir, tok):
    """Adapters on some linears only (a group's member without LoRA adds zero ranks, a group
    without any adds nothing): the grouped LoRA products of lora_linears."""
    model = common.load_model("tiny")
    for name, modules in (("a0", ["q_proj", "v_proj"]), ("a1", ["o_proj", "up_proj"])):
        model = common.add_adapters(model, [name], r=4, alpha=8, target_modules=modules)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    kwargs = dict(max_new_tokens=8, greedy=True)
    plain = plain_generate(model, tok, prompts(tok), ROWS, **kwargs)
    fast = decoded(model, FastDecoder(model), tok, prompts(tok), ROWS, **kwargs)
    assert_same(fast, plain)


def test_head_logits_are_the_fp32_heads():
    """head_logits: fp32 logits from a bf16 head (its mixed product where the device has one, on
    CPU the fp32 copy FastDecoder keeps) equal to the fp32 head's up to the order of the sums."""
    g = torch.Generator().manual_seed(0)
    weight = torch.randn((300, 64), generator=g).bfloat16()
    x = torch.randn((5, 64), generator=g).bfloat16()
    expected = torch.nn.functional.linear(x.float(), weight.float())
    operand = weight if fast_decode.mixed_head_works(weight) else weight.float()
    logits = fast_decode.head_logits(x, operand)
    assert logits.dtype == torch.float32
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)


def test_plain_path_on_cpu_and_where_unsupported(model, tok, monkeypatch):
    """common.generate takes the decoder only on CUDA: on CPU fast_decoder is never asked, so
    generate(fast=True) samples through transformers (the stacked routing); an engine set on the
    model serves only fast=True."""
    monkeypatch.setattr(common, "fast_decoder", lambda *args: pytest.fail("asked on CPU"))
    calls = []

    def sample(self, *args):
        calls.append(args)
        raise RuntimeError("the decoder sampled")
    monkeypatch.setattr(FastDecoder, "sample", sample)
    kwargs = dict(max_new_tokens=4, greedy=True)
    fast = common.generate(model, tok, prompts(tok), ROWS, fast=True, **kwargs)
    assert calls == [] and not hasattr(model, "sampling_engine")
    assert_same(fast, plain_generate(model, tok, prompts(tok), ROWS, **kwargs))
    model.sampling_engine = FastDecoder(model)
    try:
        plain_generate(model, tok, prompts(tok), ROWS, **kwargs)  # fast=False: not the engine
        assert calls == []
        with pytest.raises(RuntimeError, match="the decoder sampled"):  # fast=True: the engine
            common.generate(model, tok, prompts(tok), ROWS, fast=True, **kwargs)
        assert len(calls) == 1
    finally:
        del model.sampling_engine
    assert fast_decode.supports(model, ROWS)
    assert not fast_decode.supports(model, None)  # a peft model: every row names its adapter
    assert not fast_decode.supports(model, ["nope"] * 5)


def test_compiled_layer_step_equals_the_plain_path(model, tok):
    """torch.compile (inductor; on CPU it needs a C++ compiler) of the step's layer function."""
    pytest.importorskip("torch._inductor")
    import shutil
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("no C++ compiler: inductor cannot compile on this CPU")
    kwargs = dict(max_new_tokens=6, greedy=True)
    plain = plain_generate(model, tok, prompts(tok), ROWS, **kwargs)
    fast = decoded(model, FastDecoder(model, compile=True), tok, prompts(tok), ROWS, **kwargs)
    assert_same(fast, plain)


def test_the_gpu_bench_runs_at_tiny_sizes_on_cpu(tiny_model_dir, tmp_path, monkeypatch):
    """bench.py --parts gpu's preflight and rollout figures (nanomarl/bench_gpu.py) at --gpu-smoke
    sizes on CPU: the one GPU run must not die of a Python error (the update figures: the whole
    `bench.py --device cpu --parts gpu --gpu-smoke`, about 2 minutes)."""
    from nanomarl import bench_gpu

    monkeypatch.setattr(bench_gpu, "common", common)  # bench.py hands common.py over (bench_gpu)
    tok = load_tokenizer("tiny")
    info = bench_gpu.preflight("cpu", tok, smoke=True)
    assert info["tiny_agreement"]["rows_identical"] == info["tiny_agreement"]["rows"]
    out = bench_gpu.rollout("llama-smoke", bench_gpu.SMOKE["llama-smoke"], (2,), 4, 1, "cpu",
                            torch.float32, tok, None)
    assert out[2]["fast"]["tokens"] == out[2]["plain"]["tokens"] == 8
    assert out[2]["greedy_agreement"]["rows_identical"] == 2
