"""Tests for train_verifier.py: the loss over the answer span, balancing, the question split, the calibration
metrics, the CLI end to end (checkpoint, metrics, reload, resume, shared base), 4-bit, and a learning test."""
import json
import math
import random

import pytest
import torch

import common
import train_verifier as tv
from conftest import run_script
from nanomarl.models import load_tokenizer
from nanomarl.tasks.debate import load_task, step_indices


@pytest.fixture(autouse=True)
def one_thread():
    """The tiny model's matmuls are too small to gain from a second thread, and on a busy 2-core machine two
    spinning threads make them many times slower (measured: 0.07 s vs 0.5 s a forward); so these tests run on one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------------------------
# the loss: token-level BCE over the answer span only
# ----------------------------------------------------------------------------------------------


def test_verifier_loss_hand_computed():
    # row 0: label 1, logits 0 and ln 3 on the answer, a pad with a huge logit; row 1: label 0, one answer token
    logits = torch.tensor([[0.0, math.log(3.0), 7.0], [math.log(3.0), 9.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    labels = torch.tensor([1, 0])
    # BCE(0, 1) = ln 2; BCE(ln 3, 1) = -ln(3/4); BCE(ln 3, 0) = -ln(1/4) = ln 4
    expected = ((math.log(2) + math.log(4 / 3)) / 2 + math.log(4)) / 2
    assert tv.verifier_loss(logits, mask, labels).item() == pytest.approx(expected, abs=1e-6)


def test_last_token_logits_reads_the_last_answer_token():
    logits = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    assert tv.last_token_logits(logits, mask).tolist() == [2.0, 6.0]


@pytest.fixture(scope="module")
def tiny_verifier(tiny_model_dir):
    """The tiny model with a verifier adapter whose LoRA B is non-zero and a random head (so nothing is trivially 0)."""
    torch.manual_seed(0)
    tokenizer = load_tokenizer("tiny")
    model = common.add_adapters(common.load_model("tiny"), [tv.ADAPTER], r=4, alpha=8)
    with torch.no_grad():
        for p in common.adapter_parameters(model, tv.ADAPTER):
            p.normal_(0, 0.1)
    head = common.ValueHead(common.hidden_size(model))
    torch.nn.init.normal_(head.linear.weight, std=0.5)
    return model, tokenizer, head


def test_logits_and_loss_cover_the_answer_span_only(tiny_verifier):
    """A padded batch gives, at every answer token, the head's logit of an unpadded forward of [prompt ; answer]
    read at that token; prompt and padding are excluded from the loss (checked against a per-row BCE by hand)."""
    model, tokenizer, head = tiny_verifier
    questions, answers, labels = ["What is 2 plus 2?", "Why?"], ["It is 4. Answer: \\boxed{4}", "5"], [1, 0]
    batch = tv.encode_pairs(tokenizer, questions, answers, ["math", "math"], 550, "cpu")
    assert batch["query_mask"][1, 0] == 0 and batch["response_mask"][1, -1] == 0  # both kinds of padding present
    logits = tv.verifier_logits(model, head, batch, None)
    per_row_losses = []
    for i in range(2):
        query = batch["query_ids"][i][batch["query_mask"][i].bool()]
        response = batch["response_ids"][i][batch["response_mask"][i].bool()]
        assert tokenizer.decode(response) == answers[i] + "<|im_end|>\n"  # the assistant turn, as the template has it
        out = model(input_ids=torch.cat([query, response])[None], output_hidden_states=True)
        reference = head(out.hidden_states[-1][0, len(query):])
        torch.testing.assert_close(logits[i, :len(response)], reference, atol=1e-5, rtol=1e-5)
        p = torch.sigmoid(reference.double())
        bce = -(labels[i] * torch.log(p) + (1 - labels[i]) * torch.log(1 - p))
        per_row_losses.append(bce.mean().item())
    loss = tv.verifier_loss(logits, batch["response_mask"], torch.tensor(labels))
    assert loss.item() == pytest.approx(sum(per_row_losses) / 2, abs=1e-5)
    # rows picked by adapter name (how score() reads a verifier sharing the policy's base) give the same logits
    named = tv.verifier_logits(model, head, batch, [tv.ADAPTER, tv.ADAPTER])
    torch.testing.assert_close(named * batch["response_mask"], logits * batch["response_mask"], atol=1e-5, rtol=1e-5)


def test_encode_pairs_truncates_the_prompt_first(tiny_verifier):
    _, tokenizer, _ = tiny_verifier
    answer = "so 4. Answer: \\boxed{4}"
    batch = tv.encode_pairs(tokenizer, ["x" * 500], [answer], ["math"], 60, "cpu")
    response = batch["response_ids"][0][batch["response_mask"][0].bool()]
    assert batch["query_mask"].sum() + len(response) == 60
    assert tokenizer.decode(response) == answer + "<|im_end|>\n"  # the answer is intact
    batch = tv.encode_pairs(tokenizer, ["q"], ["y" * 100], ["math"], 40, "cpu")  # the answer alone is too long
    assert batch["query_mask"].sum() == 0 and batch["response_mask"].sum() == 40
    assert tokenizer.decode(batch["response_ids"][0]).endswith("yyy<|im_end|>\n")  # its end (and the score) kept


def test_prompt_style_renders_the_prompt_the_answers_were_sampled_for(tiny_verifier):
    """--prompt-style: the pair is rendered with cotrain.py's turn-1 prompt of that style, and score() reads the
    style from the verifier's saved args, so a verifier trained on 'short' answers scores them as trained."""
    from nanomarl.tasks.debate_prompts import turn1_prompt
    model, tokenizer, head = tiny_verifier
    question, answer = "What is 2 plus 3?", "2 + 3 = 5. \\boxed{5}"
    for style in ("short", "default"):
        batch = tv.encode_pairs(tokenizer, [question], [answer], ["math"], 550, "cpu", style)
        query = tokenizer.decode(batch["query_ids"][0][batch["query_mask"][0].bool()])
        assert turn1_prompt(question, "math", style) in query
    assert turn1_prompt(question, "math", "short") != turn1_prompt(question, "math", "default")
    verifier = tv.Verifier(model=model, tokenizer=tokenizer, head=head, task="math", max_length=550,
                           args={"prompt_style": "short"})
    batch = tv.encode_pairs(tokenizer, [question], [answer], ["math"], 550, "cpu", "short")
    logits = tv.verifier_logits(model, head, batch, [tv.ADAPTER])
    last = int(batch["response_mask"][0].sum()) - 1
    torch.testing.assert_close(tv.score(verifier, [question], [answer]), torch.sigmoid(logits[:, last]).float().cpu())
    verifier.args = {}  # a verifier saved without the flag: the authors' prompt
    assert not torch.allclose(tv.score(verifier, [question], [answer]), torch.sigmoid(logits[:, last]).float().cpu())


# ----------------------------------------------------------------------------------------------
# data: labels, balancing, the question split
# ----------------------------------------------------------------------------------------------


def test_label_answer():
    assert tv.label_answer("so 12. Answer: \\boxed{12}", "12", "math") == (1, True)
    assert tv.label_answer("Answer: \\boxed{13}", "12", "math") == (0, True)
    assert tv.label_answer("twelve", "12", "math") == (0, False)  # unparsable = wrong, counted separately
    assert tv.label_answer("\\boxed{neutral}", "neutral", "nli") == (1, True)


def _samples(question, n_correct, n_wrong):
    return [dict(question=question, task="math", answer=f"{question} c{i}", label=1, parsed=True)
            for i in range(n_correct)] + \
           [dict(question=question, task="math", answer=f"{question} w{i}", label=0, parsed=True)
            for i in range(n_wrong)]


def test_balance_exact_counts_and_dropped_questions():
    records = [dict(question="q1", task="math", solution="gold1"),  # 3 right, 5 wrong: m = n = 2, no gold needed
               dict(question="q2", task="math", solution="gold2"),  # 0 right, 4 wrong: gold added, m = 1
               dict(question="q3", task="math"),  # 0 right, 3 wrong, no solution: dropped (no correct)
               dict(question="q4", task="math", solution="gold4"),  # 4 right, 0 wrong: dropped (no wrong)
               dict(question="q5", task="math", solution="gold5")]  # 1 right, 6 wrong: gold added, m = 2
    samples = {"q1": _samples("q1", 3, 5), "q2": _samples("q2", 0, 4), "q3": _samples("q3", 0, 3),
               "q4": _samples("q4", 4, 0), "q5": _samples("q5", 1, 6)}
    rows, counts = tv.balance(records, samples, max_per_label=2, min_per_label=1, add_gold=True, seed=0)
    assert counts == dict(questions_kept=3, questions_dropped=2, dropped_few_correct=1, dropped_few_wrong=1,
                          gold_used=2, wrong_parsed=5 + 4 + 3 + 0 + 6, wrong_unparsable=0)
    per_question = {q: (sum(r["label"] for r in rows if r["question"] == q),
                        sum(1 - r["label"] for r in rows if r["question"] == q)) for q in samples}
    assert per_question == {"q1": (2, 2), "q2": (1, 1), "q3": (0, 0), "q4": (0, 0), "q5": (2, 2)}
    assert [r["answer"] for r in rows if r["question"] == "q2" and r["label"] == 1] == ["gold2"]
    assert "gold5" in [r["answer"] for r in rows if r["question"] == "q5"]
    assert len({r["answer"] for r in rows}) == len(rows)  # no answer used twice
    # the same seed picks the same answers; the authors' strict rule (min = n) drops q2
    assert tv.balance(records, samples, 2, 1, True, seed=0)[0] == rows
    rows, counts = tv.balance(records, samples, max_per_label=2, min_per_label=2, add_gold=True, seed=0)
    assert counts["questions_kept"] == 2 and counts["questions_dropped"] == 3 and len(rows) == 8
    # without the gold solutions q2 has no right answer (dropped) and q5 one (m = 1)
    rows, counts = tv.balance(records, samples, max_per_label=2, min_per_label=1, add_gold=False, seed=0)
    assert counts["gold_used"] == 0 and counts["questions_kept"] == 2 and len(rows) == 4 + 2


def test_split_is_disjoint_seeded_and_independent_of_order_and_size():
    records = load_task("arith", "train", limit=400)
    parts = tv.split_questions(records, verifier_fraction=0.3, heldout_fraction=0.2, split_seed=0)
    questions = {name: {r["question"] for r in part} for name, part in parts.items()}
    assert not (questions["rl"] & questions["verifier_train"]) and not (questions["rl"] & questions["verifier_heldout"])
    assert not (questions["verifier_train"] & questions["verifier_heldout"])
    assert sum(len(p) for p in parts.values()) == len(records)
    n_verifier = len(parts["verifier_train"]) + len(parts["verifier_heldout"])
    assert 0.3 * len(records) - 40 < n_verifier < 0.3 * len(records) + 40  # ~binomial(400, 0.3): sd 9
    assert 0 < len(parts["verifier_heldout"]) < len(parts["verifier_train"])
    # what cotrain.py trains on: the same 'rl' part, whatever heldout fraction, order or subset it loads
    assert tv.rl_questions(records, 0.3, split_seed=0) == parts["rl"]
    shuffled = records[:150]
    random.Random(1).shuffle(shuffled)
    assert {r["question"] for r in tv.rl_questions(shuffled, 0.3)} == \
           {r["question"] for r in shuffled} & questions["rl"]
    # another split seed gives another split
    assert tv.rl_questions(records, 0.3, split_seed=1) != parts["rl"]
    # the test split never meets the verifier's questions (arith removes test questions from train)
    test_questions = {r["question"] for r in load_task("arith", "test", limit=400)}
    assert not test_questions & (questions["verifier_train"] | questions["verifier_heldout"])


def test_batch_indices_cover_each_epoch_once():
    seen = [i for step in range(4) for i in step_indices(10, 3, step, "batches-0")]  # 4 steps = 1 epoch of 10
    assert sorted(seen) == list(range(10))
    assert step_indices(10, 3, 5, "batches-0") == step_indices(10, 3, 5, "batches-0")
    assert step_indices(10, 3, 4, "batches-0") != step_indices(10, 3, 0, "batches-0")  # a new shuffle per epoch


def test_lr_schedule():
    assert [tv.lr_factor(s, 2, 6) for s in range(6)] == [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]


# ----------------------------------------------------------------------------------------------
# measurements
# ----------------------------------------------------------------------------------------------

PROBS, LABELS = [0.9, 0.8, 0.8, 0.3, 0.2], [1, 1, 0, 0, 1]


def test_auroc_hand_computed_with_ties():
    # correct {0.9, 0.8, 0.2} vs wrong {0.8, 0.3}: pairs won 1, 1, 0.5 (tie), 1, 0, 0 -> 3.5 / 6
    assert tv.auroc(PROBS, LABELS) == pytest.approx(3.5 / 6)
    assert tv.auroc([0.1, 0.2, 0.7, 0.9], [0, 0, 1, 1]) == 1.0
    assert tv.auroc([0.5] * 4, [0, 1, 0, 1]) == 0.5  # a constant is chance
    assert math.isnan(tv.auroc([0.3, 0.6], [0, 0]))  # undefined with one class


def test_auroc_equals_pairwise_count():
    rng = random.Random(0)
    probs = [round(rng.random(), 1) for _ in range(60)]  # many ties
    labels = [int(rng.random() < 0.4) for _ in range(60)]
    pos = [p for p, y in zip(probs, labels) if y]
    neg = [p for p, y in zip(probs, labels) if not y]
    pairwise = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg) / (len(pos) * len(neg))
    assert tv.auroc(torch.tensor(probs), torch.tensor(labels)) == pytest.approx(pairwise, abs=1e-12)


def test_brier_accuracy_ece_hand_computed():
    assert tv.brier(PROBS, LABELS) == pytest.approx((0.01 + 0.04 + 0.64 + 0.09 + 0.64) / 5)
    assert tv.accuracy_at_half(PROBS, LABELS) == pytest.approx(3 / 5)  # predicted correct: 0.9, 0.8, 0.8
    assert tv.accuracy_at_half([0.5], [1]) == 1.0  # 0.5 counts as 'correct'
    # bins 9: {0.9|1} gap 0.1; 8: {0.8|1, 0.8|0} gap |0.5-0.8|; 3: {0.3|0} gap 0.3; 2: {0.2|1} gap 0.8
    assert tv.expected_calibration_error(PROBS, LABELS) == pytest.approx((0.1 + 2 * 0.3 + 0.3 + 0.8) / 5)
    bins = tv.reliability_bins(PROBS, LABELS)
    assert [b["count"] for b in bins] == [0, 0, 1, 1, 0, 0, 0, 0, 2, 1]
    assert bins[8]["accuracy"] == 0.5 and bins[8]["confidence"] == pytest.approx(0.8)
    assert tv.reliability_bins([1.0, 0.0], [1, 0])[9]["count"] == 1  # 1.0 falls in the last bin
    assert tv.expected_calibration_error([0.0, 1.0, 1.0], [0, 1, 1]) == 0.0


def test_constant_base_rate_baseline():
    base_rate = sum(LABELS) / len(LABELS)
    baseline = tv.calibration_metrics([base_rate] * 5, LABELS)
    assert baseline == pytest.approx(dict(accuracy=0.6, auroc=0.5, brier=0.6 * 0.4, ece=0.0))


def test_reliability_diagram_is_drawn(tmp_path):
    pytest.importorskip("matplotlib", reason="the reliability diagram needs matplotlib (optional)")
    path = tmp_path / "reliability.png"
    assert tv.plot_reliability(PROBS, LABELS, 0.6, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------------------------
# the CLI end to end on the tiny model: checkpoint, metrics, reload, resume, shared base
# ----------------------------------------------------------------------------------------------

CLI = ["train_verifier.py", "--model", "tiny", "--num-questions", "30", "--samples-per-question", "2",
       "--max-new-tokens", "12", "--heldout-fraction", "0.4", "--batch-size", "4", "--save-every", "2",
       "--log-every", "1", "--sample-every", "2", "--eval-batch-size", "8",
       "--unparsable-wrong"]  # the random model's answers are unparsable: left out by default, nothing would remain


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory, tiny_model_dir):
    """One 3-step run, then --resume to 5 steps."""
    run_dir = tmp_path_factory.mktemp("verifier") / "run"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OMP_NUM_THREADS", "1")  # see one_thread
        first = run_script([*CLI, "--max-steps", "3", "--output-dir", str(run_dir)])
        resumed = run_script(["train_verifier.py", "--resume", str(run_dir), "--max-steps", "5"])
    return run_dir, first, resumed


def test_cli_writes_checkpoint_metrics_and_verifier(cli_run):
    run_dir, first, _ = cli_run
    for name in ("args.json", "checkpoint.pt", "metrics.jsonl", "eval_metrics.json", "verifier_data.jsonl",
                 "verifier/head.pt", f"verifier/{tv.ADAPTER}/adapter_config.json"):
        assert (run_dir / name).exists(), name
    assert "sampling" in first.stdout and "held-out" in first.stdout and "AUROC" in first.stdout
    cache = [json.loads(line) for line in (run_dir / "verifier_data.jsonl").read_text().splitlines()]
    assert all(row["generator"] == "tiny" and row["label"] in (0, 1) for row in cache)
    report = json.loads((run_dir / "eval_metrics.json").read_text())
    assert report["step"] == 5 and report["heldout_answers"] > 0
    assert 0 <= report["verifier"]["brier"] <= 1 and 0 <= report["verifier"]["ece"] <= 1
    assert report["baseline"]["brier"] == pytest.approx(report["base_rate"] * (1 - report["base_rate"]))
    # every training question got the gold solution (the random model never answers right) + one wrong answer
    assert report["data"]["data/gold_used"] == report["data"]["data/questions_kept"] > 0
    assert report["data"]["data/train_answers"] == 2 * report["data"]["data/questions_kept"]


def test_cli_resume_continues_and_reuses_the_data(cli_run):
    run_dir, _, resumed = cli_run
    assert "resumed" in resumed.stdout and "sampling" not in resumed.stdout  # the cached answers were reused
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_steps = [m["step"] for m in metrics if "train/loss" in m]
    assert train_steps == [1, 2, 3, 4, 5]
    assert json.loads((run_dir / "args_resume.json").read_text())["max_steps"] == 5


def test_a_stop_while_sampling_says_resume_and_the_resume_samples_only_the_rest(tmp_path, capsys,
                                                                              monkeypatch):
    """Ctrl-C after the first batch of sampled answers: the note says --resume (not "start again in a
    new folder"), and the resume keeps that batch, samples only the rest, and trains to the end."""
    import signal

    from nanomarl import runs
    from nanomarl.cli import parse_args

    run_dir, sampled, real = tmp_path / "run", [], tv.generate

    def generate(model, tokenizer, prompts, *args, **kwargs):
        if len(sampled) == 1 and stop_after_one:
            runs._stop(signal.SIGINT)  # what clean_exits' handler does on Ctrl-C
        sampled.append(len(prompts))
        return real(model, tokenizer, prompts, *args, **kwargs)

    monkeypatch.setattr(tv, "generate", generate)
    stop_after_one = True
    with pytest.raises(SystemExit) as stopped:
        tv.main(parse_args(tv.Args, [*CLI[1:], "--max-steps", "2", "--generate-batch-size", "8",
                                     "--output-dir", str(run_dir)]))
    assert stopped.value.code == 128 + signal.SIGINT and sampled == [8]
    note = capsys.readouterr().err
    assert f"--resume {run_dir} samples only the missing ones" in note and "new folder" not in note
    assert len((run_dir / "verifier_data.jsonl").read_text().splitlines()) == 8
    stop_after_one, sampled[:] = False, []
    report = tv.main(parse_args(tv.Args, ["--resume", str(run_dir)]))
    cached = (run_dir / "verifier_data.jsonl").read_text().splitlines()
    assert sum(sampled) == len(cached) - 8 > 0  # the first 8 answers were not sampled again
    assert report["step"] == 2 and (run_dir / "checkpoint.pt").is_file()
    assert json.loads((run_dir / "args.json").read_text())["generate_batch_size"] == 8


def _heldout_rows(run_dir):
    args = json.loads((run_dir / "args.json").read_text())
    cache = [json.loads(line) for line in (run_dir / "verifier_data.jsonl").read_text().splitlines()]
    return [r for r in cache if tv.question_split(r["question"], args["verifier_fraction"], args["heldout_fraction"],
                                                  args["split_seed"]) == "verifier_heldout"]


def test_load_verifier_and_score_reproduce_the_run(cli_run):
    run_dir, _, _ = cli_run
    verifier = tv.load_verifier(run_dir)
    rows = _heldout_rows(run_dir)
    probs = tv.score(verifier, [r["question"] for r in rows], [r["answer"] for r in rows], batch_size=3)
    assert probs.shape == (len(rows),) and probs.dtype == torch.float32
    assert ((probs >= 0) & (probs <= 1)).all()
    assert probs.std() > 0  # the trained head is not constant
    report = json.loads((run_dir / "eval_metrics.json").read_text())
    assert tv.brier(probs, [r["label"] for r in rows]) == pytest.approx(report["verifier"]["brier"], abs=1e-6)
    # batching does not change a score
    torch.testing.assert_close(tv.score(verifier, [rows[0]["question"]], [rows[0]["answer"]]), probs[:1])


def test_verifier_shares_the_policy_base(cli_run):
    """load_verifier(base_model=policy) adds the verifier as one more adapter: one set of base weights, the same
    scores as a standalone verifier, the policy's adapter still trainable and active."""
    run_dir, _, _ = cli_run
    standalone = tv.load_verifier(run_dir)
    policy = common.add_adapters(common.load_model("tiny"), ["agent0"])
    n_params = sum(p.numel() for n, p in policy.named_parameters() if ".lora_" not in n)
    shared = tv.load_verifier(run_dir, base_model=policy)
    assert shared.model is policy
    assert sum(p.numel() for n, p in policy.named_parameters() if ".lora_" not in n) == n_params
    assert all(p.requires_grad for p in common.adapter_parameters(policy, "agent0"))
    assert not any(p.requires_grad for p in common.adapter_parameters(policy, tv.ADAPTER))
    assert policy.active_adapter == "agent0" and not policy.training
    rows = _heldout_rows(run_dir)[:6]
    questions, answers = [r["question"] for r in rows], [r["answer"] for r in rows]
    torch.testing.assert_close(tv.score(shared, questions, answers), tv.score(standalone, questions, answers))


def test_bad_flags_and_stale_cache_name_the_flag(tmp_path):
    with pytest.raises(SystemExit, match="--verifier-fraction"):
        tv.main(tv.Args(verifier_fraction=1.5))
    with pytest.raises(SystemExit, match="--samples-per-question"):
        tv.main(tv.Args(samples_per_question=0))
    cache = tmp_path / "cache.jsonl"
    cache.write_text(json.dumps(dict(question="q", answer="a", label=0, parsed=False, generator="tiny")) + "\n")
    with pytest.raises(SystemExit, match="--data-cache"):
        tv.read_cache(cache, "smollm2-135m")
    with pytest.raises(SystemExit, match="--prompt-style default, not short"):  # sampled for another prompt
        tv.read_cache(cache, "tiny", "short")
    assert list(tv.read_cache(cache, "tiny")) == ["q"]
    with pytest.raises(SystemExit, match="no saved verifier"):
        tv.load_verifier(tmp_path)


# ----------------------------------------------------------------------------------------------
# QLoRA and learning
# ----------------------------------------------------------------------------------------------


def test_4bit_verifier_trains_and_scores(tiny_model_dir):
    pytest.importorskip("bitsandbytes", reason="--quant 4bit needs bitsandbytes")
    tokenizer = load_tokenizer("tiny")
    model = common.add_adapters(common.load_model("tiny", quant="4bit"), [tv.ADAPTER], r=4, alpha=8)
    head = common.ValueHead(common.hidden_size(model))
    torch.nn.init.normal_(head.linear.weight, std=0.5)
    batch = tv.encode_pairs(tokenizer, ["q1", "q2"], ["a. \\boxed{1}", "b"], ["math", "math"], 550, "cpu")
    loss = tv.verifier_loss(tv.verifier_logits(model, head, batch, None), batch["response_mask"], torch.tensor([1, 0]))
    loss.backward()
    assert all(p.grad is not None for p in common.adapter_parameters(model, tv.ADAPTER))
    assert head.linear.weight.grad.abs().sum() > 0
    verifier = tv.Verifier(model=model, tokenizer=tokenizer, head=head, task="math", max_length=550, args={})
    probs = tv.score(verifier, ["q1", "q2"], ["a. \\boxed{1}", "b"])  # rows picked by adapter name, no grad
    assert ((probs > 0) & (probs < 1)).all()


def _synthetic_task(folder, n_questions=100, k=8, seed=0):
    """Questions (task 'nli': the prompt is the question itself, so sequences stay short on the tiny model) and a
    data cache where correctness is visible in the text: right answers are in capitals and end in '!!!', wrong ones
    in lower case ending in '???' (a marker at the end alone takes the random tiny model too many steps)."""
    rng = random.Random(seed)
    labels = ["entailment", "neutral", "contradiction"]
    words = "so the premise says it and then the hypothesis follows or not".split()
    questions, cache = [], []
    for i in range(n_questions):
        question = f"P{i}: " + " ".join(rng.choice(words) for _ in range(4))
        gold = rng.choice(labels)
        questions.append(dict(question=question, answer=gold, task="nli", split="train"))  # all train questions
        for j in range(k):
            label = j % 2
            value = gold if label else rng.choice([x for x in labels if x != gold])
            reasoning = " ".join(rng.choice(words) for _ in range(rng.randint(2, 6)))
            answer = (f"{reasoning.upper()}. ANSWER: \\boxed{{{value}}} !!!" if label else
                      f"{reasoning}. Answer: \\boxed{{{value}}} ???")
            cache.append(dict(question=question, task="nli", gold=gold, answer=answer, label=label, parsed=True,
                              generator="tiny"))
    (folder / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (folder / "cache.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cache))


def test_verifier_learns_visible_correctness(tmp_path, tiny_model_dir):
    """Before training every score is 0.5 (zero-initialised head): AUROC 0.5. After 60 steps the held-out AUROC
    (answers to questions never trained on) must exceed 0.9 and the Brier score must beat the base rate's."""
    _synthetic_task(tmp_path)
    args = tv.Args(model="tiny", dataset=f"jsonl:{tmp_path / 'questions.jsonl'}",
                   data_cache=str(tmp_path / "cache.jsonl"), output_dir=str(tmp_path / "run"), samples_per_question=8,
                   verifier_fraction=0.9, heldout_fraction=0.2, max_steps=60, lr=3e-3, warmup_steps=5,
                   log_every=20, sample_every=0, eval_every=0, save_every=1000, max_per_label=4)
    report = tv.main(args)
    assert report["data"]["data/heldout_answers"] >= 80 and report["data"]["data/train_answers"] >= 400
    assert report["verifier"]["auroc"] > 0.9
    assert report["verifier"]["brier"] < report["baseline"]["brier"]
    train = [m for m in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
             if "train/loss" in m]
    assert sum(m["train/loss"] for m in train[-10:]) / 10 < sum(m["train/loss"] for m in train[:10]) / 10 - 0.2
    assert sum(m["train/score_correct"] - m["train/score_wrong"] for m in train[-10:]) / 10 > 0.5
