"""Every number the scripts produce is the one the papers define. One test per defect found in review,
each written to fail on the code before its fix and run in the order real use does."""
import json
import random
import zlib

import pytest
import torch

import common
import cotrain
import evaluate
import train_verifier as tv
from conftest import PAPER_PPO
from nanomarl import eval_report, eval_runs, sft_baseline
from nanomarl.cli import parse_args
from nanomarl.cotrain_run import check_args
from nanomarl.models import load_tokenizer
from nanomarl.tasks.debate import load_task

COTRAIN_TINY = ["--model", "tiny", "--device", "cpu", *PAPER_PPO, "--micro-batch-questions", "0", "--max-new-tokens", "6",
                "--no-penalize-format", "--missing-eos-penalty", "0", "--sample-every", "0", "--log-every", "0"]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _questions_and_cache(folder, n_questions=40, k=4):
    """A JSONL task (short 'nli' questions, every row marked train) and a complete answer cache: per question
    k answers, cycling right / wrong / unparsable / wrong, so train_verifier samples nothing."""
    rng = random.Random(0)
    labels = ["entailment", "neutral", "contradiction"]
    questions, cache = [], []
    for i in range(n_questions):
        question, gold = f"Q{i}: premise {rng.randint(0, 999)} then hypothesis", rng.choice(labels)
        questions.append(dict(question=question, answer=gold, task="nli", split="train"))
        for j in range(k):
            kind = ("right", "wrong", "unparsable", "wrong")[j % 4]
            value = gold if kind == "right" else [x for x in labels if x != gold][j % 2]
            answer = "no idea at all" if kind == "unparsable" else f"so \\boxed{{{value}}}"
            cache.append(dict(question=question, task="nli", gold=gold, answer=answer, label=int(kind == "right"),
                              parsed=kind != "unparsable", generator="tiny"))
    (folder / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (folder / "cache.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cache))
    return folder / "questions.jsonl", cache


# ---------------------------------------------------------------------------------------------- the verifier


def test_verifier_questions_never_reach_rl_and_the_verifier_shares_the_base(tmp_path, tiny_model_dir, monkeypatch,
                                                                            capsys):
    """A verifier trained with a non-default split (fraction 0.5, split seed 7), then cotrain.py --scorer verifier
    given only the verifier's folder: (1) no question PPO trains on is a verifier train or held-out question, and
    the RL questions are exactly the rest; (4) the base is loaded once and the verifier, an adapter on the
    policy's base, scores exactly as a standalone one; (6) unparsable answers are left out of the balancing and
    of the held-out set by default, and counted."""
    data, cache = _questions_and_cache(tmp_path)
    vdir = tmp_path / "verifier"
    report = tv.main(tv.Args(model="tiny", dataset=f"jsonl:{data}", data_cache=str(tmp_path / "cache.jsonl"),
                             output_dir=str(vdir), samples_per_question=4, verifier_fraction=0.5, heldout_fraction=0.3,
                             split_seed=7, max_steps=1, batch_size=4, max_per_label=2, log_every=1, sample_every=0,
                             save_every=1000))
    records = load_task(f"jsonl:{data}")
    parts = tv.split_questions(records, 0.5, 0.3, 7)  # the verifier's own split of these questions
    verifier_qs = {r["question"] for r in parts["verifier_train"] + parts["verifier_heldout"]}
    assert parts["verifier_train"] and parts["verifier_heldout"] and parts["rl"]
    # (6) per question: 1 right, 2 wrong, 1 unparsable answer -> m = 1 (1 right + 1 parsable wrong); the wrong
    # answers are counted both ways (2 parsable, 1 unparsable); the held-out set keeps the 3 parsable answers
    n_train, n_heldout = len(parts["verifier_train"]), len(parts["verifier_heldout"])
    data_counts = report["data"]
    assert data_counts["data/wrong_parsed"] == 2 * n_train and data_counts["data/wrong_unparsable"] == n_train
    assert data_counts["data/train_answers"] == 2 * n_train
    assert data_counts["data/heldout_answers"] == 3 * n_heldout
    assert data_counts["data/sampled_unparsable"] == n_train + n_heldout

    loads = []
    for module in (cotrain, tv):  # every base the run loads, whichever script loads it
        original = module.load_model
        monkeypatch.setattr(module, "load_model", lambda *a, _f=original, **k: loads.append(a[0]) or _f(*a, **k))
    scored = []
    original_score = tv.score

    def recording_score(verifier, questions, answers, *a, **k):
        probs = original_score(verifier, questions, answers, *a, **k)
        scored.append((list(questions), list(answers), probs))
        return probs

    monkeypatch.setattr(tv, "score", recording_score)
    args = parse_args(cotrain.Args, [*COTRAIN_TINY, "--dataset", f"jsonl:{data}", "--scorer", "verifier",
                                     "--verifier", str(vdir), "--questions-per-update", "4", "--num-turns", "1",
                                     "--max-steps", "3", "--ppo-epochs", "1", "--eval-questions", "0",
                                     "--output-dir", str(tmp_path / "rl")])
    capsys.readouterr()
    assert tv.rl_records(args, records) == [r for r in records if r["question"] not in verifier_qs]
    # the verifier learned answers to the authors' prompt (its default); the debate asks with the short one
    assert "learned answers to the default turn-1 prompt; the debate uses --prompt-style short" in capsys.readouterr().out
    cotrain.main(args)
    monkeypatch.undo()
    seen = {q for questions, _, _ in scored for q in questions}
    assert len(seen) >= 4 and not seen & verifier_qs
    assert loads == ["tiny"]  # one base: the policy's, which also carries the verifier's adapter
    standalone = tv.load_verifier(vdir)
    for questions, answers, probs in scored:
        torch.testing.assert_close(tv.score(standalone, questions, answers), probs, atol=1e-5, rtol=0)


def test_balance_leaves_unparsable_answers_out_unless_asked():
    def answers(q, right, wrong, unparsable):
        return ([dict(question=q, answer=f"{q} r{i}", label=1, parsed=True) for i in range(right)]
                + [dict(question=q, answer=f"{q} w{i}", label=0, parsed=True) for i in range(wrong)]
                + [dict(question=q, answer=f"{q} u{i}", label=0, parsed=False) for i in range(unparsable)])

    records = [dict(question="a", task="math"), dict(question="b", task="math")]
    samples = {"a": answers("a", 3, 1, 4), "b": answers("b", 2, 0, 3)}
    rows, counts = tv.balance(records, samples, max_per_label=10, min_per_label=1, add_gold=False, seed=0)
    # the authors' rule: a -> m = min(10, 3, 1) = 1; b has no parsable wrong answer -> dropped
    assert len(rows) == 2 and all(r["question"] == "a" for r in rows) and all("u" not in r["answer"] for r in rows)
    assert counts["questions_kept"] == 1 and counts["dropped_few_wrong"] == 1
    assert counts["wrong_parsed"] == 1 and counts["wrong_unparsable"] == 7
    rows, counts = tv.balance(records, samples, 10, 1, False, 0, unparsable_wrong=True)
    # the old rule: a -> m = min(10, 3, 5) = 3, b -> m = min(10, 2, 3) = 2
    assert len(rows) == 2 * 3 + 2 * 2 and counts["questions_kept"] == 2
    assert counts["wrong_parsed"] == 1 and counts["wrong_unparsable"] == 7


# ---------------------------------------------------------------------------------------------- 4-bit


def test_4bit_training_after_generate_keeps_the_gradients(tiny_model_dir, monkeypatch):
    """On a CPU with AVX512-BF16, bitsandbytes repacks a Linear4bit's weight on its first no-grad eval forward
    (our generate); training forwards afterwards crashed or lost gradients. The CPU here lacks the instruction
    set, so the test makes bitsandbytes believe it has it, then trains in the real order: generate, forward,
    backward. The LoRA gradients must equal those computed before any generate, bit for bit."""
    bnb_modules = pytest.importorskip("bitsandbytes.nn.modules", reason="--quant 4bit needs bitsandbytes")
    monkeypatch.setattr(bnb_modules, "has_avx512bf16", lambda: True)
    torch.manual_seed(0)
    model = common.add_adapters(common.load_model("tiny", quant="4bit"), ["agent0"], r=4, alpha=8)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.3)
    ids = torch.randint(0, 200, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 12)

    def lora_grads():
        model.zero_grad(set_to_none=True)
        out = common.forward_responses(model, ids[:, :6], mask[:, :6].long(), ids[:, 6:], mask[:, 6:], ["agent0"] * 2)
        out["logprobs"].sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if ".lora_" in n and p.grad is not None}

    before = lora_grads()
    common.generate(model, load_tokenizer("tiny"), ["ab", "cd"], ["agent0", "agent0"], max_new_tokens=4)
    after = lora_grads()
    assert len(before) == len(common.adapter_parameters(model, "agent0")) and before.keys() == after.keys()
    for name in before:
        assert torch.equal(before[name], after[name]), name
    assert not any(getattr(getattr(m.weight, "quant_state", None), "packing_format_for_cpu", False)
                   for m in model.modules() if type(m).__name__ == "Linear4bit")


# ---------------------------------------------------------------------------------------------- feedback


def test_feedback_in_prompt_needs_a_verifier(tmp_path):
    with pytest.raises(SystemExit, match="--feedback-in-prompt"):
        check_args(parse_args(cotrain.Args, ["--feedback-in-prompt"]))
    check_args(parse_args(cotrain.Args, ["--feedback-in-prompt", "--scorer", "verifier",
                                         "--verifier", str(tmp_path)]))


# ---------------------------------------------------------------------------------------------- data splits


def test_jsonl_has_real_splits(tmp_path):
    path = tmp_path / "data.jsonl"
    rows = [dict(question=f"How much is {i} + {i}?", answer=str(2 * i)) for i in range(60)]
    rows += [dict(question="Pinned to test", answer="1", split="test"), dict(question="q", answer="2", split="dev")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    splits = {name: load_task(f"jsonl:{path}", name) for name in ("train", "validation", "test", "dev")}
    questions = {name: [r["question"] for r in records] for name, records in splits.items()}
    assert sum(map(len, questions.values())) == len(rows) and len({q for v in questions.values() for q in v}) == len(rows)
    assert "Pinned to test" in questions["test"] and questions["dev"] == ["q"]
    expected = {0: "test", 1: "validation"}
    for r in rows[:60]:
        assert r["question"] in questions[expected.get(zlib.crc32(r["question"].encode()) % 10, "train")]
    assert 0 < len(questions["test"]) < len(questions["train"])
    assert load_task(f"jsonl:{path}", "train", limit=3) == splits["train"][:3]
    with pytest.raises(SystemExit, match="--dataset"):
        load_task(f"jsonl:{path}", "holdout")


def test_sft_baseline_uses_the_runs_base_and_never_the_eval_questions(tmp_path, tiny_model_dir, monkeypatch):
    """--model names another base than the run's; the SFT data are the train split of a JSONL file, the eval
    questions its test split plus (forced) two train questions: neither reaches the SFT debates."""
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(dict(question=f"What is {i} + 1?", answer=str(i + 1))) + "\n"
                            for i in range(40)))
    run = tmp_path / "run"
    run.mkdir()
    (run / "debate.json").write_text(json.dumps(dict(models=["tiny", "tiny"])))
    (run / "args.json").write_text(json.dumps(dict(dataset=f"jsonl:{path}", seed=0)))
    eval_records = load_task(f"jsonl:{path}", "test") + load_task(f"jsonl:{path}", "train")[:2]
    assert eval_records and eval_runs.train_overlap(eval_records, str(run)) == 2
    debated = []

    def canned_debate(records, models, tokenizers, adapter_names, *a, **kw):
        debated.extend(r["question"] for r in records)
        T, A, B = len(adapter_names), len(models), len(records)
        return cotrain.Debate(
            records, [[[f"Q{b}"] * A for _ in range(T)] for b in range(B)],
            [[[f"\\boxed{{{b}}}"] * A for _ in range(T)] for b in range(B)],
            [[[r["answer"]] * A for _ in range(T)] for r in records], torch.ones(B, T, A), None,
            {(t, a): dict(response_mask=torch.ones(B, 3), query_mask=torch.ones(B, 5))
             for t in range(T) for a in range(A)})

    monkeypatch.setattr(evaluate.cotrain, "run_debate", canned_debate)
    from types import SimpleNamespace
    args = SimpleNamespace(model="not-the-runs-base", run=str(run), dtype="float32", quant="none",
                           dataset=f"jsonl:{path}", sft_questions=0, seed=0, question_seed=0,
                           num_agents=2, num_turns=1, batch_size=64, max_new_tokens=8, generate_batch_size=0,
                           temperature=1.0, feedback_in_prompt=False, prompt_style="default",
                           lora_r=4, lora_alpha=8, sft_epochs=1, sft_lr=1e-3, sft_batch_size=64,
                           dataset_config="", question_field="question", answer_field="answer",
                           dataset_task="math", fast=False)
    bases = evaluate.Bases(args, "cpu")
    stats = evaluate.train_sft_baseline(bases, args, None, exclude={r["question"] for r in eval_records})
    train_questions = {r["question"] for r in load_task(f"jsonl:{path}", "train")}
    assert stats["base"] == "tiny" and list(bases.models) == ["tiny"]
    assert set(debated) == train_questions - {r["question"] for r in eval_records} and stats["steps"] == 1
    assert evaluate.method_agents("sft", bases, args) == [("tiny", ["sft"])] * 2
    (run / "debate.json").write_text(json.dumps(dict(models=["tiny", "other"])))
    with pytest.raises(SystemExit, match="sft"):
        sft_baseline.sft_base(args)


# ---------------------------------------------------------------------------------------------- pass@k


def test_every_k_is_plotted_and_tabulated(tmp_path, monkeypatch):
    methods = {name: {"time_per_problem_s": t, "pass@3": p3, "pass@5": p5, "pass@3_unbiased": p3 - 0.1,
                      "pass@5_unbiased": p5 - 0.1, "accuracy@3": 0.3, "accuracy@5": 0.5, "maxcoop@3": 0.03,
                      "maxcoop@5": 0.05, "cooperation_rate": 0.1, "reward": 1.0}
               for name, t, p3, p5 in (("parallel", 1.0, 0.4, 0.6), ("pipeline", 2.0, 0.5, 0.7))}
    columns = eval_report.magrpo_columns([3, 5], code=True)
    for k in (3, 5):
        for key in (f"pass@{k}", f"pass@{k}_unbiased", f"accuracy@{k}", f"maxcoop@{k}"):
            assert key in columns, key
    table = eval_report.samples_table(methods, columns).splitlines()
    header = [c.strip() for c in table[0].split("|")[1:-1]]
    row = [c.strip() for c in table[2].split("|")[1:-1]]
    assert row[header.index("pass@3_unbiased")] == "0.3" and row[header.index("maxcoop@5")] == "0.05"
    matplotlib = pytest.importorskip("matplotlib", reason="plots are optional")
    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    drawn = []
    original = Axes.scatter
    monkeypatch.setattr(Axes, "scatter", lambda self, x, y, *a, **k: drawn.append((k.get("label"), list(x), list(y)))
                        or original(self, x, y, *a, **k))
    eval_report.plot_magrpo(methods, tmp_path, code=True)
    assert drawn == [("pass@3", [1.0, 2.0], [40.0, 50.0]), ("pass@5", [1.0, 2.0], [60.0, 70.0])]  # in %
    assert (tmp_path / "quality_vs_time.png").stat().st_size > 0
