"""Tests of evaluate.py: debate metrics, pass@k, the cooperation-scheme classifier, writers, CLI smoke runs."""
import itertools
import json
import math
import random

import pytest

import common
import cotrain
import evaluate
from common import majority_vote_accuracy, transition_counts
from nanomarl import eval_report, eval_runs, sample_metrics, sft_baseline
from nanomarl.cli import parse_args
from nanomarl.sample_metrics import pass_at_k_first, pass_at_k_unbiased
from nanomarl.tasks import baseline_prompts, cooperation
from nanomarl.tasks.cooperation import classify_cooperation
from nanomarl.models import adapter_state_dict, load_tokenizer, save_adapters

# ---------------------------------------------------------------------------------------------- debate metrics


@pytest.mark.parametrize("answers, gold, expected", [
    (["5", "5", "7"], "5", 1.0),             # clear majority, right
    (["5", "7", "7"], "5", 0.0),             # clear majority, wrong
    (["5", "7"], "5", 0.5),                  # 2-way tie, gold in it
    (["5", "7"], "9", 0.0),                  # 2-way tie, gold not in it
    (["5", "7", "9"], "7", 1 / 3),           # 3-way tie
    (["5", "5", "7", "7", "9"], "7", 0.5),   # 2-way tie at the top, a loser below
    (["5", None], "5", 1.0),                 # unparsable leaves the tie set
    (["5", None, "7"], "5", 0.5),            # ... also from a 3-way tie
    ([None, None, "5"], "5", 0.0),           # unparsable wins outright: wrong
    ([None, None], "5", 0.0),                # nothing parsable
    (["5", "5", None, None], "5", 1.0),      # tie between an answer and None: the answer
    (["5"], "5", 1.0),                       # one agent
])
def test_majority_vote_accuracy(answers, gold, expected):
    assert majority_vote_accuracy(answers, gold) == pytest.approx(expected)


def test_transition_counts_hand_made_table():
    # 3 questions x 3 turns x 2 agents; True = right. Agent 0: q0 W R R, q1 R W W, q2 R R R
    #                                                  Agent 1: q0 W W R, q1 W W W, q2 R W R
    correct = [
        [[False, False], [True, False], [True, True]],
        [[True, False], [False, False], [False, False]],
        [[True, True], [True, False], [True, True]],
    ]
    pairs = transition_counts(correct)
    assert [p["turns"] for p in pairs] == [[0, 1], [1, 2]]
    # turns 0->1: agent 0: q0 W→R, q1 R→W, q2 R→R; agent 1: q0 W→W, q1 W→W, q2 R→W
    assert pairs[0]["agents"][0] == {"W→R": 1, "R→W": 1, "R→R": 1, "W→W": 0}
    assert pairs[0]["agents"][1] == {"W→R": 0, "R→W": 1, "R→R": 0, "W→W": 2}
    assert pairs[0]["pooled"] == {"W→R": 1, "R→W": 2, "R→R": 1, "W→W": 2}
    # turns 1->2: agent 0: q0 R→R, q1 W→W, q2 R→R; agent 1: q0 W→R, q1 W→W, q2 W→R
    assert pairs[1]["agents"][0] == {"W→R": 0, "R→W": 0, "R→R": 2, "W→W": 1}
    assert pairs[1]["agents"][1] == {"W→R": 2, "R→W": 0, "R→R": 0, "W→W": 1}
    assert pairs[1]["pooled"] == {"W→R": 2, "R→W": 0, "R→R": 2, "W→W": 2}
    assert all(p["total"] == 6 for p in pairs)


def test_debate_metrics_hand_made():
    # 2 questions, 2 turns, 3 agents; gold 4 and 9
    answers = [[["4", "5", None], ["4", "4", "5"]],
               [["9", "8", "7"], ["8", "8", None]]]
    m = evaluate.debate_metrics(answers, ["4", "9"])
    # turn 0: q0 tie {4, 5} (None dropped) -> 1/2, q1 3-way tie -> 1/3; turn 1: q0 -> 1, q1 -> 0
    assert m["accuracy"]["majority"] == pytest.approx([(1 / 2 + 1 / 3) / 2, 0.5])
    assert m["accuracy"]["agents"] == [[1.0, 0.5], [0.0, 0.5], [0.0, 0.0]]
    assert m["accuracy"]["mean_agent"] == pytest.approx([1 / 3, 1 / 3])
    assert m["invalid_rate"] == pytest.approx([1 / 6, 1 / 6])
    assert m["transitions"][0]["pooled"] == {"W→R": 1, "R→W": 1, "R→R": 1, "W→W": 3}
    assert m["transitions"][0]["pooled_fractions"]["W→W"] == pytest.approx(0.5)
    assert m["transitions"][0]["agent_fractions"][0] == {"W→R": 0.0, "R→W": 0.5, "R→R": 0.5, "W→W": 0.0}
    assert m["majority_transitions"] == [dict(turns=[0, 1], improve=1, decline=1, same=0)]


def test_mean_agent_accuracy_leads_and_an_unparsable_partner_cannot_raise_it(tmp_path):
    """Two agents: the authors' vote scores [right, unparsable] 1 but [right, wrong] 0.5; the mean
    agent accuracy scores both 0.5. The console line, results.md and the plot lead with it."""
    assert evaluate.debate_metrics([[["5", None]]], ["5"])["accuracy"] == dict(
        majority=[1.0], agents=[[1.0], [0.0]], mean_agent=[0.5])
    assert evaluate.debate_metrics([[["5", "7"]]], ["5"])["accuracy"]["majority"] == [0.5]
    # gold 5 and 3; q0 [5, 7] -> [5, None] (agent 1 turns unparsable), q1 [4, 4] -> [4, 3]
    answers = [[["5", "7"], ["5", None]], [["4", "4"], ["4", "3"]]]
    gamed = evaluate.debate_metrics(answers, ["5", "3"])
    # agents: turn 1 (1/2 + 0) / 2, turn 2 (1/2 + 1/2) / 2
    # vote: turn 1 (1/2 + 0) / 2, turn 2 (1 + 1/2) / 2: agent 1's unparsable answer raises it
    assert gamed["accuracy"]["mean_agent"] == pytest.approx([0.25, 0.5])
    assert gamed["accuracy"]["majority"] == pytest.approx([0.25, 0.75])
    assert (eval_report.accuracy_summary(gamed["accuracy"])
            == "mean agent accuracy per turn 0.250 0.500 | vote (authors' tie rule) 0.250 0.750")
    honest = evaluate.debate_metrics([[["5", "7"], ["5", "7"]]], ["5"])
    gamed.update(answers_per_question=4, tokens_per_question=30.5, prompt_tokens_per_question=80.0)
    lines = eval_report.debate_table(dict(gamed=gamed, honest=honest)).splitlines()
    assert lines[0] == ("| method | turn 1 | turn 2 | vote turn 1 | vote turn 2 | W→R / R→W 1→2 "
                        "| answers / q | tokens / q | prompt tokens / q |")
    # pooled transitions of gamed: agent 1 on q1 W→R, nothing R→W, of 4 (question, agent) pairs
    assert lines[2] == "| gamed | 25.0 | 50.0 | 25.0 | 75.0 | 25.0 / 0.0 | 4 | 30.5 | 80.0 |"
    assert lines[3] == "| honest | 50.0 | 50.0 | 50.0 | 50.0 | 0.0 / 0.0 |  |  |  |"
    assert "mean agent accuracy" in lines[5] and "the authors' rule" in lines[5]
    # each agent of gamed: agent 0 [5, 4] -> [5, 4]: 50 / 50, no change; agent 1 [7, 4] ->
    # [None, 3]: 0 / 50, W→R on q1 (1 of 2 questions)
    agents = eval_report.agents_table(dict(gamed=gamed)).splitlines()
    assert agents[0] == "| method | agent | turn 1 | turn 2 | W→R / R→W 1→2 |"
    assert agents[2:4] == ["| gamed | 0 | 50.0 | 50.0 | 0.0 / 0.0 |",
                           "| gamed | 1 | 0.0 | 50.0 | 50.0 / 0.0 |"]
    pytest.importorskip("matplotlib", reason="plots are optional")
    paths = eval_report.plot_debate(dict(gamed=gamed, honest=honest), tmp_path)
    assert [p.name for p in paths] == ["accuracy_per_turn.png", "transitions.png"]
    assert all(p.stat().st_size > 0 for p in paths)


# ---------------------------------------------------------------------------------------------- pass@k


def test_pass_at_k_first_hand_computed():
    passed = [False, False, True, False]
    assert [pass_at_k_first(passed, k) for k in (1, 2, 3, 4)] == [0.0, 0.0, 1.0, 1.0]
    with pytest.raises(ValueError):
        pass_at_k_first(passed, 5)


def test_pass_at_k_unbiased_hand_computed():
    assert pass_at_k_unbiased(5, 0, 1) == 0.0
    assert pass_at_k_unbiased(5, 1, 1) == pytest.approx(0.2)       # c/n for k = 1
    assert pass_at_k_unbiased(4, 1, 2) == pytest.approx(0.5)       # 1 − C(3,2)/C(4,2) = 1 − 3/6
    assert pass_at_k_unbiased(5, 2, 2) == pytest.approx(0.7)       # 1 − C(3,2)/C(5,2) = 1 − 3/10
    assert pass_at_k_unbiased(5, 4, 2) == 1.0                      # n − c < k: every pair has a pass
    assert pass_at_k_unbiased(200, 3, 100) == pytest.approx(1 - (100 * 99 * 98) / (200 * 199 * 198))


def test_pass_at_k_unbiased_equals_closed_form_and_enumeration():
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                closed = 1 - math.comb(n - c, k) / math.comb(n, k)
                # enumeration: the fraction of k-subsets of the n samples that contain a passing one
                samples = [True] * c + [False] * (n - c)
                subsets = list(itertools.combinations(samples, k))
                enumerated = sum(any(s) for s in subsets) / len(subsets)
                assert pass_at_k_unbiased(n, c, k) == pytest.approx(closed, abs=1e-12)
                assert pass_at_k_unbiased(n, c, k) == pytest.approx(enumerated, abs=1e-12)


def test_pass_at_k_unbiased_is_the_mean_of_first_k_over_orders():
    # the unbiased estimator is the expectation of the paper's first-k pass@k over random sample orders
    rng = random.Random(0)
    passed = [True, False, False, True, False, False]
    k = 2
    trials = [pass_at_k_first(rng.sample(passed, len(passed)), k) for _ in range(20000)]
    assert sum(trials) / len(trials) == pytest.approx(pass_at_k_unbiased(6, 2, 2), abs=0.01)  # 1 − 6/15 = 0.6


def test_accuracy_coop_at_k():
    assert sample_metrics.accuracy_at_k([0.2, 0.5, 1.0], 2) == 0.5
    assert sample_metrics.max_coop_at_k([0.0, 1.5, 0.5], 1) == 0.0
    assert sample_metrics.max_coop_at_k([0.0, 1.5, 0.5], 3) == 1.5
    assert sample_metrics.cooperation_rate([0.0, 1.5, 0.5, -0.5]) == 0.5


# ---------------------------------------------------------------------------------------------- cooperation schemes

AUX = "def aux(n):\n    return [p for p in range(2, n) if all(p % d for d in range(2, p))]\n"

SCHEME_EXAMPLES = {
    "aux-unused": [
        "def f(n):\n    return n * 2\n",                                   # never mentioned
        "def f(n):\n    aux(n)\n    return n * 2\n",                       # called, result ignored
        "def f(n):\n    r = aux(n)\n    return n + 1\n",                   # assigned, never used
        "def f(n):\n    aux = lambda m: m\n    return aux(n)\n",           # shadows the helper
        "def f(n):\n    def aux(m):\n        return m\n    return aux(n)\n",  # redefines it
    ],
    "fallback": [
        "def f(n):\n    try:\n        return own(n)\n    except ValueError:\n        return aux(n)\n",
        "def f(n):\n    return own(n) or aux(n)\n",
        "def f(n):\n    r = own(n)\n    if r is None:\n        r = aux(n)\n    return r\n",
        "def f(n):\n    r = [x for x in range(n) if x % 3 == 0]\n    if len(r) > 2:\n        return r\n"
        "    return aux(n)\n",
        "def f(n):\n    r = own(n)\n    return r if r else aux(n)\n",
    ],
    "strategy-filter": [
        "def f(xs):\n    return [x for x in xs if aux(x)]\n",
        "def f(xs):\n    out = []\n    for x in xs:\n        if aux(x):\n            out.append(x * x)\n    return out\n",
        "def f(xs):\n    return sorted(xs, key=aux)[0]\n",
        "def f(xs):\n    return list(filter(aux, xs))\n",
        "def f(n):\n    i = 0\n    while aux(i) < n:\n        i += 1\n    return i\n",
    ],
    "coordinator": [
        "def f(a, b):\n    x = aux(a)\n    y = aux(b)\n    return x + y\n",
        "def f(xs):\n    total = 0\n    for x in xs:\n        total += aux(x)\n    return total\n",
        "def f(xs):\n    return [aux(x) for x in xs]\n",
        "def f(xs):\n    return sum(map(aux, xs))\n",
    ],
    "thin-wrapper": [
        "def f(n):\n    return aux(n)\n",
        "def f(n):\n    result = aux(n)\n    return result\n",
        'def f(n):\n    """Docstring."""\n    if n < 0:\n        return []\n    return aux(n * 2)\n',
    ],
    "decorator": [
        "def f(n):\n    return aux(n) + 1\n",
        "def f(n):\n    r = aux(n)\n    return [p ** 3 for p in r]\n",
        "def f(n):\n    if n <= 0:\n        return []\n    primes = aux(n)\n    return primes[-1] ** 3\n",
        "def f(n):\n    r = aux(n)\n    r.sort(reverse=True)\n    return r\n",
        "def f(n):\n    total = 0\n    for p in aux(n):\n        total += p\n    return total\n",
    ],
}


@pytest.mark.parametrize("label, main", [(label, main) for label, mains in SCHEME_EXAMPLES.items() for main in mains])
def test_classify_cooperation_hand_written(label, main):
    assert classify_cooperation(AUX, main, "f") == label


def test_classify_cooperation_edge_cases():
    wrapper = "def f(n):\n    return aux(n)\n"
    assert classify_cooperation("", wrapper, "f") == "aux-unused"            # no aux defined
    assert classify_cooperation("def aux(:", wrapper, "f") == "aux-unused"   # aux does not parse
    assert classify_cooperation(AUX, "def f(n:\n    return 1", "f") is None  # main does not parse
    assert classify_cooperation(AUX, wrapper, "g") is None                   # no entry point
    # a guard on a parameter is not a fallback; math.* calls do not carry aux's result
    main = "import math\ndef f(n):\n    if n < 2:\n        return math.pi\n    return math.sqrt(aux(n)[0])\n"
    assert classify_cooperation(AUX, main, "f") == "decorator"
    assert set(cooperation.COOPERATION_SCHEMES) == set(SCHEME_EXAMPLES)


# ---------------------------------------------------------------------------------------------- SFT baseline


def test_correct_debate_examples_keeps_final_majority_right():
    import torch

    # run_debate's Debate, layout [b][t][a]: 4 questions (all gold 4), 2 turns, 2 agents
    finals = [["4", "4"], ["4", "5"], ["5", "5"], [None, "4"]]  # per question: agent 0, agent 1 at the last turn
    records = [{"answer": "4"}] * 4
    answers = [[["1", "2"], finals[b]] for b in range(4)]
    debate = cotrain.Debate(records, [[[f"p{t}{a}{b}" for a in range(2)] for t in range(2)] for b in range(4)],
                            [[[f"r{t}{a}{b}" for a in range(2)] for t in range(2)] for b in range(4)], answers,
                            torch.tensor([[[float(x == "4") for x in turn] for turn in q] for q in answers]),
                            None, {})
    examples = sft_baseline.correct_debate_examples(debate, records)
    # kept: question 0 (4, 4) and question 3 (None drops out of the tie); the 4/5 tie (0.5) and 5/5 are not
    assert examples == [(f"p{t}{a}{b}", f"r{t}{a}{b}") for b in (0, 3) for t in range(2) for a in range(2)]


def test_sft_lora_fits_trajectories_and_touches_only_its_adapter(tiny_model_dir):
    import torch
    from common import add_adapters, load_model

    torch.manual_seed(0)
    tok = load_tokenizer("tiny")
    model = add_adapters(load_model("tiny"), ["sft", "other"], r=8, alpha=16)
    other_before = adapter_state_dict(model, "other")
    base_before = {n: p.clone() for n, p in model.named_parameters() if ".lora_" not in n}
    examples = [("Q: 2+2?", "Answer: \\boxed{4}"), ("Q: 3+4?", "Answer: \\boxed{7}")]
    batch = sft_baseline.encode_sft_batch(tok, [p for p, _ in examples], [r for _, r in examples], 64, "cpu",
                                          common)
    # responses are byte tokens + EOS, right-padded, masked on real tokens only
    assert batch["response_mask"].sum(1).tolist() == [len("Answer: \\boxed{4}") + 1] * 2
    assert batch["response_ids"][0, int(batch["response_mask"][0].sum()) - 1].item() == tok.eos_token_id
    losses = sft_baseline.sft_lora(model, tok, examples, "sft", epochs=12, lr=1e-2, batch_size=2,
                                   max_response_tokens=64, seed=0, common=common)
    assert len(losses) == 12
    # the NLL falls on the two trajectories (the tiny random model's small logits cap it near 4.4 from ln 262)
    assert sum(losses[-3:]) / 3 < 0.88 * sum(losses[:3]) / 3
    after = adapter_state_dict(model, "other")
    assert all(torch.equal(other_before[k], after[k]) for k in other_before)
    assert all(torch.equal(p, base_before[n]) for n, p in model.named_parameters() if ".lora_" not in n)


# ---------------------------------------------------------------------------------------------- MAGRPO scoring

PROBLEM = dict(id="toy/0", kind="code", entry_point="sum_cubes",
               prompt='def sum_cubes(n):\n    """Sum of the cubes of the primes below n."""\n',
               test="def check(candidate):\n    assert candidate(2) == 0\n    assert candidate(4) == 35\n"
                    "    assert candidate(6) == 160\n")
AUX_PRIMES = "def aux(n):\n    return [p for p in range(2, n) if all(p % d for d in range(2, p))]\n"


def test_score_sample_and_code_metrics_on_hand_written_answers():
    one_line = "def sum_cubes(n):\n    return sum(p ** 3 for p in aux(n))\n"
    two_lines = "def sum_cubes(n):\n    primes = aux(n)\n    return sum(p ** 3 for p in primes)\n"
    partial = "def sum_cubes(n):\n    return 0 if n < 3 else 1\n"  # passes 1 of 3
    own = "def sum_cubes(n):\n    return sum(p ** 3 for p in range(2, n) if all(p % d for d in range(2, p)))\n"
    broken = "def sum_cubes(n):\n    return (\n"
    score = lambda main: evaluate.score_sample(PROBLEM, [AUX_PRIMES, main], 3.0, 512)  # noqa: E731
    samples = [[score(broken), score(two_lines)], [score(partial), score(own)], [score(one_line), score(one_line)]]
    (broken_s, two), (part, own_s), (one, _) = samples
    assert two["passed_all"] and two["scheme"] == "decorator" and two["bonus"] == 1.5 and two["reward"] == 4.0
    # the reward's line-based wrapper check calls a one-line `return f(aux(x))` a wrapper (no +1.0); the
    # classifier calls it a decorator (its thin wrapper returns aux's result unchanged)
    assert one["passed_all"] and one["scheme"] == "decorator" and one["bonus"] == 0.5
    assert not part["passed_all"] and part["accuracy"] == pytest.approx(1 / 3) and "scheme" not in part
    assert own_s["passed_all"] and own_s["scheme"] == "aux-unused" and own_s["bonus"] == 0.0
    assert not broken_s["syntax_ok"] and broken_s["main_defined"] and broken_s["accuracy"] == 0.0
    m = sample_metrics.code_metrics(samples, [1, 2])
    # problem 0: [fail, pass]; problem 1: [1/3, pass]; problem 2: [pass, pass]
    assert m["pass@1"] == pytest.approx(1 / 3) and m["pass@2"] == 1.0
    assert m["pass@1_unbiased"] == pytest.approx((0.5 + 0.5 + 1) / 3) and m["pass@2_unbiased"] == 1.0
    assert m["accuracy@1"] == pytest.approx((0 + 1 / 3 + 1) / 3) and m["accuracy@2"] == 1.0
    assert m["maxcoop@1"] == pytest.approx(0.5 / 3) and m["maxcoop@2"] == pytest.approx((1.5 + 0.0 + 0.5) / 3)
    assert m["cooperation_rate"] == pytest.approx(3 / 6) and m["full_pass_rate"] == pytest.approx(4 / 6)
    assert m["syntax_rate"] == pytest.approx(5 / 6) and m["structure_rate"] == 1.0
    assert m["schemes"] == {**{s: 0 for s in cooperation.COOPERATION_SCHEMES}, "decorator": 3, "aux-unused": 1}
    assert m["schemes_labelled"] == 4


def test_split_paragraphs():
    assert baseline_prompts.split_paragraphs("Paragraph 1: short. [PARAGRAPH_SPLIT] Paragraph 2: long one.", "tldr") == \
        ("short.", "long one.")
    first, second = baseline_prompts.split_paragraphs("a " * 35, "tldr")  # no marker: part 2 is ~2.5x part 1
    assert len(first.split()) == 10 and len(second.split()) == 25


# ---------------------------------------------------------------------------------------------- smoke runs


def fake_run(folder, script_args: dict, adapter_names: list[str], seed: int):
    """A run folder as cotrain.py / magrpo.py leave it (args.json + adapters/), with random LoRA weights
    (non-zero B, so the adapters change what the model generates)."""
    import torch
    from common import add_adapters, load_model

    torch.manual_seed(seed)
    model = add_adapters(load_model("tiny"), adapter_names, r=4, alpha=8)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_B." in n:
                p.normal_(0, 0.5)
    folder.mkdir(parents=True)
    save_adapters(model, adapter_names, folder / "adapters")
    (folder / "args.json").write_text(json.dumps(script_args))
    return folder


def test_magrpo_mode_smoke(tmp_path, tiny_model_dir):
    import dataclasses

    import magrpo
    from conftest import run_script

    st = fake_run(tmp_path / "st", dataclasses.asdict(magrpo.Args(model="tiny")), ["agent0", "agent1"], 0)
    mt = fake_run(tmp_path / "mt", dataclasses.asdict(magrpo.Args(model="tiny", turns=2)), ["agent0", "agent1"], 1)
    out = tmp_path / "eval"
    result = run_script(["evaluate.py", "--mode", "magrpo", "--model", "tiny", "--dataset", "humaneval", "--limit", "1",
                         "--num-samples", "2", "--k-values", "1,2", "--max-new-tokens", "8", "--run", str(st),
                         "--mt-run", str(mt), "--output-dir", str(out), "--sandbox-workers", "2"], timeout=300)
    results = json.loads((out / "results.json").read_text())
    methods = results["methods"]
    assert list(methods) == list(evaluate.MAGRPO_METHODS)
    calls = {m: methods[m]["sequential_generations"] for m in methods}
    assert calls == {"single": 1, "parallel": 1, "pipeline": 2, "discussion": 2, "magrpo": 1, "mt-magrpo": 2}
    for name, m in methods.items():
        assert m["num_problems"] == 1 and m["num_samples"] == 2
        assert 0 < m["tokens_per_problem"] <= 8 * 2 * (1 if name == "single" else 2) * calls[name]
        assert m["time_per_problem_s"] > 0 and 0 <= m["pass@1"] <= m["pass@2"] <= 1
        assert ("reward_round1" in m) == (name in ("discussion", "mt-magrpo"))
    assert methods["mt-magrpo"]["turns"] == 2
    table = (out / "results.md").read_text().splitlines()
    assert [row.split("|")[1].strip() for row in table[2:]] == list(evaluate.MAGRPO_METHODS)
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 6 * 2 and {r["method"] for r in rows} == set(evaluate.MAGRPO_METHODS)
    pytest.importorskip("matplotlib", reason="plots are optional")
    assert (out / "quality_vs_time.png").stat().st_size > 0
    assert "results:" in result.stdout


def fake_cotrain_run(folder, num_agents: int, seed: int, **overrides):
    """A finished cotrain.py run folder written by cotrain's own save_state (args.json, adapters/, debate.json),
    without training: the policy adapters get random non-zero B matrices, so they change the generations."""
    import dataclasses

    import torch

    import cotrain

    args = cotrain.Args(**{**dict(model="tiny", num_agents=num_agents, num_turns=2, seed=seed,
                                  output_dir=str(folder)), **overrides})
    team = cotrain.build_team(args, "cpu")  # seeds with --seed
    with torch.no_grad():
        for n, p in team.bases[0].named_parameters():
            if ".lora_B." in n and ".critic." not in n:
                p.normal_(0, 0.5)
    folder.mkdir(parents=True)
    (folder / "args.json").write_text(json.dumps(dataclasses.asdict(args)))
    cotrain.save_state(folder, team, 0, args)
    return folder


def test_debate_seats_from_runs(tmp_path, tiny_model_dir):
    from types import SimpleNamespace

    per_turn = fake_cotrain_run(tmp_path / "per_turn", 2, 0, policy_sharing="agent-turn", train_turns="2")
    alone = fake_cotrain_run(tmp_path / "alone", 1, 1)
    args = SimpleNamespace(model="tiny", dtype="float32", quant="none", num_agents=3, num_turns=3, run=str(per_turn),
                           single_run=str(alone), agents=f"{per_turn}:1,base,{per_turn}")
    bases = evaluate.Bases(args, "cpu")
    # trained with 2 agents x 2 turns (turn 1 untrained), evaluated with 3 x 3: seat 2 is agent 0 again, and
    # turn 3 keeps the last trained turn's adapter
    assert evaluate.method_agents("maporl", bases, args) == [
        ("tiny", ["__base__", "r0_agent0_turn2", "r0_agent0_turn2"]),
        ("tiny", ["__base__", "r0_agent1_turn2", "r0_agent1_turn2"]),
        ("tiny", ["__base__", "r0_agent0_turn2", "r0_agent0_turn2"])]
    assert evaluate.method_agents("single", bases, args) == [("tiny", ["r1_agent0"] * 3)] * 3
    assert evaluate.method_agents("offtheshelf", bases, args) == [("tiny", ["__base__"] * 3)] * 3
    assert evaluate.method_agents("mix", bases, args) == [
        ("tiny", ["__base__", "r0_agent1_turn2", "r0_agent1_turn2"]), ("tiny", ["__base__"] * 3),
        ("tiny", ["__base__", "r0_agent0_turn2", "r0_agent0_turn2"])]
    assert {n for (_, n) in bases.loaded} == {"r0_agent0_turn2", "r0_agent1_turn2", "r1_agent0"}
    with pytest.raises(SystemExit, match="--single-run"):
        evaluate.method_agents("single", bases, SimpleNamespace(**{**vars(args), "single_run": str(per_turn)}))
    with pytest.raises(SystemExit, match="--agents"):
        evaluate.method_agents("mix", bases, SimpleNamespace(**{**vars(args), "agents": "base,base"}))
    # the loaded adapters are used: a greedy debate with them differs from the off-the-shelf one
    play = SimpleNamespace(num_turns=3, batch_size=1, max_new_tokens=6, temperature=1.0, feedback_in_prompt=False,
                           prompt_style="default", generate_batch_size=0, fast=False)
    records = [dict(id=f"q{i}", question=f"What is 2 + {i}?", answer=str(2 + i), task="math") for i in range(2)]
    debates = {m: evaluate.play_debates(bases, evaluate.method_agents(m, bases, args), records, play, None, True)
               for m in ("offtheshelf", "single")}
    assert debates["offtheshelf"][0].responses != debates["single"][0].responses
    # chunks of --batch-size 1 are joined into one Debate [b][t][a] (no rollout tensors, no scores);
    # every response counted its tokens
    debate, generated, read, seconds = debates["single"]
    assert [[[len(turn) for turn in per_question] for per_question in getattr(debate, k)]
            for k in ("responses", "answers", "prompts")] == [[[3] * 3] * 2] * 3
    assert debate.records == records and debate.correct.shape == (2, 3, 3)
    assert debate.scores is None and debate.rollout == {}
    assert 0 < sum(generated) <= 6 * 3 * 3 * 2 and seconds > 0
    # and per question: the tokens generated (each within 3 agents x 3 turns x 6) and read
    assert len(generated) == 2 and all(0 <= g <= 6 * 3 * 3 for g in generated)
    assert len(read) == 2 and min(read) > 9


def test_sft_baseline_trains_on_kept_debates(monkeypatch, tiny_model_dir):
    from types import SimpleNamespace

    import torch

    def canned_debate(records, models, tokenizers, adapter_names, *a, **kw):
        assert all(n == "__base__" for turn in adapter_names for n in turn)  # collected off the shelf
        T, A, B = len(adapter_names), len(models), len(records)
        answers = [[[r["answer"] if b % 2 == 0 else "-1" for _ in range(A)] for _ in range(T)]
                   for b, r in enumerate(records)]  # even questions: every agent right; odd: every agent wrong
        return cotrain.Debate(records, [[[f"Q{b} t{t}" for _ in range(A)] for t in range(T)] for b in range(B)],
                              [[[f"Answer: \\boxed{{{b}}}" for _ in range(A)] for _ in range(T)] for b in range(B)],
                              answers, torch.tensor([[[float(b % 2 == 0)] * A] * T for b in range(B)]), None,
                              {(t, a): dict(response_mask=torch.ones(B, 3), query_mask=torch.ones(B, 5))
                               for t in range(T) for a in range(A)})

    monkeypatch.setattr(evaluate.cotrain, "run_debate", canned_debate)
    args = SimpleNamespace(model="tiny", dtype="float32", quant="none", dataset="arith", sft_questions=4, seed=0,
                           question_seed=0, num_agents=2, num_turns=2, batch_size=4,
                           max_new_tokens=16, temperature=1.0, feedback_in_prompt=False,
                           prompt_style="default", lora_r=4, lora_alpha=8, sft_epochs=2,
                           generate_batch_size=0, sft_lr=1e-2, sft_batch_size=4,
                           question_field="question", answer_field="answer",
                           dataset_config="", dataset_task="math", fast=False)
    bases = evaluate.Bases(args, "cpu")
    stats = evaluate.train_sft_baseline(bases, args, None)
    # 2 of 4 debates kept, each 2 turns x 2 agents = 8 pairs; 2 epochs of 2 steps
    assert stats["kept_debates"] == 2 and stats["examples"] == 8 and stats["steps"] == 4
    assert stats["last_loss"] < stats["first_loss"]
    model = bases.models["tiny"]
    assert any(v.abs().sum() > 0 for k, v in adapter_state_dict(model, "sft").items() if ".lora_B." in k)
    assert not any(p.requires_grad for p in model.parameters())  # frozen for evaluation


def test_debate_mode_smoke(tmp_path, tiny_model_dir):
    from conftest import run_script

    pair, alone = fake_cotrain_run(tmp_path / "pair", 2, 0), fake_cotrain_run(tmp_path / "alone", 1, 1)
    out = tmp_path / "eval"
    result = run_script(["evaluate.py", "--model", "tiny", "--limit", "2", "--num-agents", "3", "--num-turns", "2",
                         "--max-new-tokens", "6", "--run", str(pair), "--single-run", str(alone), "--agents",
                         f"{pair},base,{alone}", "--sft-questions", "2", "--output-dir", str(out),
                         "--methods", ",".join(evaluate.DEBATE_METHODS), "--sc-max-samples", "24"],
                        timeout=300)
    results = json.loads((out / "results.json").read_text())
    methods = results["methods"]
    assert list(methods) == list(evaluate.DEBATE_METHODS)
    debates = [m for name, m in methods.items() if name not in evaluate.SC_PAIRS]
    for m in debates:
        assert m["num_questions"] == 2 and m["num_turns"] == 2 and m["num_agents"] == 3
        assert len(m["accuracy"]["majority"]) == 2 and len(m["accuracy"]["agents"]) == 3
        assert len(m["transitions"]) == 1 and m["transitions"][0]["total"] == 6
        assert sum(m["transitions"][0]["pooled"].values()) == 6
        assert 0 < m["tokens_per_question"] <= 6 * 3 * 2 and m["time_per_question_s"] > 0
    assert [a["adapters"] for a in methods["maporl"]["agents"]] == [["r0_agent0"] * 2, ["r0_agent1"] * 2,
                                                                   ["r0_agent0"] * 2]
    assert methods["sft"]["sft"]["questions"] == 2
    # the controls: 3 x 2 = 6 answers per question, as many as the debate's, and within its tokens
    assert methods["sc-maporl"]["agent"] == dict(base="tiny", adapter="r0_agent0")
    assert methods["sc-base"]["agent"] == dict(base="tiny", adapter="__base__")
    for name, pair in evaluate.SC_PAIRS.items():
        m = methods[name]
        assert m["control_of"] == pair and m["num_samples"] == 6 and len(m["vote_at_k"]) == 6
        assert 0 < m["tokens_per_question"] <= 6 * 6 and m["max_samples"] == 24
        assert m["budget_per_question"] == methods[pair]["tokens_per_question"]
        assert (m["budget_tokens_per_question"] <= m["budget_per_question"]
                or m["budget_samples"] == 1)
    assert [q["id"] for q in results["questions"]] == ["arith/test/0", "arith/test/1"]
    assert results["dataset_source"] == dict(dataset="arith:digits", split="test", question_seed=0,
                                             limit=2)
    table = (out / "results.md").read_text().splitlines()
    assert table[0].startswith("| method | turn 1 | turn 2 | vote turn 1 | vote turn 2 |")
    n = len(evaluate.DEBATE_METHODS) - len(evaluate.SC_PAIRS)
    assert ([row.split("|")[1].strip() for row in table[2:2 + n]]
            == list(evaluate.DEBATE_METHODS)[:n])
    assert table[2 + n] == "" and "the authors' rule" in table[3 + n]
    controls = table.index(next(line for line in table
                                if line.startswith("| control | one answer |")))
    assert [(row.split("|")[1], row.split("|")[10])
            for row in table[controls + 2:controls + 4]] == [(" sc-base ", " offtheshelf "),
                                                             (" sc-maporl ", " maporl ")]
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 7 * 2
    assert all(len(r["answers"]) == 2 and len(r["answers"][0]) == 3
               for r in rows if r["method"] not in evaluate.SC_PAIRS)
    assert all(len(r["answers"]) == 1 and len(r["answers"][0]) >= 6
               for r in rows if r["method"] in evaluate.SC_PAIRS)
    pytest.importorskip("matplotlib", reason="plots are optional")
    assert (out / "accuracy_per_turn.png").stat().st_size > 0 and (out / "transitions.png").stat().st_size > 0
    assert "results:" in result.stdout
    assert "offtheshelf: mean agent accuracy per turn " in result.stdout  # then the authors' vote
    assert "sc-maporl: one answer " in result.stdout and "within maporl's " in result.stdout


def test_writing_methods_in_process(tiny_model_dir):
    from types import SimpleNamespace

    import magrpo
    from common import load_model

    model, tok = evaluate.with_peft(load_model("tiny")), load_tokenizer("tiny")
    team = magrpo.Agents(models=[model, model], names=["__base__", "__base__"], optimizers=[], params=[])
    problems = [dict(id="post/0", kind="tldr", text="I moved to a new city and my cat hates the new flat.")]
    args = SimpleNamespace(num_samples=2, max_new_tokens=4, temperature=1.0, top_p=1.0, top_k=0, greedy=False,
                           chat_template=True, sandbox_workers=1, test_timeout=3.0, sandbox_memory_mb=512, seed=0,
                           fast=False)
    # (method, generate calls one after the other, most tokens: 4 per row x 2 samples x acting agents x calls)
    for method, calls, most in (("single", 1, 8), ("pipeline", 2, 16), ("discussion", 2, 32)):
        metrics, rows = evaluate.evaluate_magrpo_method(method, team, tok, problems, args, [1, 2])
        assert metrics["sequential_generations"] == calls and len(rows) == 2
        assert set(metrics) >= {"reward", "reward_max_of_k", "level/structure", "level/coordination",
                                "level/vocabulary", "level/style", "time_per_problem_s", "tokens_per_problem"}
        assert 0 < metrics["tokens_per_problem"] <= most
        assert all(len(r["texts"]) == 2 for r in rows)  # the single agent's text is split into two parts
        assert ("reward_round1" in metrics) == (method == "discussion")


def test_choose_methods_follows_the_flags():
    pass

    args = lambda *flags: parse_args(evaluate.Args, list(flags))  # noqa: E731
    assert evaluate.choose_methods(args()) == ["offtheshelf", "sft", "sc-base"]
    assert evaluate.choose_methods(args("--run", "R", "--single-run", "S")) == [
        "offtheshelf", "maporl", "single", "sft", "sc-base", "sc-maporl"]
    with pytest.raises(SystemExit, match="--methods: method sc-maporl needs --run"):
        evaluate.choose_methods(args("--methods", "sc-maporl"))
    with pytest.raises(SystemExit, match="--sc-max-samples"):
        # fewer than the 3 x 3 answers per question
        eval_runs.check_args(args("--sc-max-samples", "5"))
    assert evaluate.choose_methods(args("--mode", "magrpo")) == ["single", "parallel", "pipeline", "discussion"]
    assert evaluate.choose_methods(args("--mode", "magrpo", "--mt-run", "M"))[-1] == "mt-magrpo"
    with pytest.raises(SystemExit, match="--methods: method maporl needs --run"):
        evaluate.choose_methods(args("--methods", "offtheshelf,maporl"))
    with pytest.raises(SystemExit, match="--methods: unknown magrpo method 'sft'"):
        evaluate.choose_methods(args("--mode", "magrpo", "--methods", "sft"))
    with pytest.raises(SystemExit, match="--feedback-in-prompt"):
        eval_runs.check_args(args("--feedback-in-prompt"))


def test_an_unwritable_output_dir_is_refused_before_a_model_loads(monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the unwritable folder was reported")

    monkeypatch.setattr(evaluate, "load_model", refuse)
    monkeypatch.setattr(evaluate, "load_tokenizer", refuse)
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        evaluate.main(parse_args(evaluate.Args, ["--model", "tiny", "--limit", "2", "--output-dir",
                                                 "/proc/nanomarl-no/eval"]))
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --output-dir: cannot write to /proc/nanomarl-no")


def test_plots_pin_accuracy_to_0_100_and_keep_method_names_apart(tmp_path, monkeypatch):
    """quality_vs_time.png: pass@k in % on a 0-100 axis, and methods at (nearly) the same point get
    their names stacked, not printed over each other; accuracy_per_turn.png: 0-100 too."""
    pytest.importorskip("matplotlib", reason="plots are optional")
    import matplotlib.figure

    drawn, savefig = [], matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda fig, *args, **kw: drawn.append(fig) or savefig(fig, *args, **kw))
    same = dict(time_per_problem_s=2.0, **{"pass@1": 0.0, "pass@3": 0.0})
    methods = {"single": same, "parallel": dict(same, time_per_problem_s=2.05),
               "pipeline": dict(time_per_problem_s=4.0, **{"pass@1": 0.5, "pass@3": 0.75})}
    eval_report.plot_magrpo(methods, tmp_path, code=True)
    ax = drawn[0].axes[0]
    assert ax.get_ylim() == (0, 100) and ax.get_ylabel() == "pass@k (%)"
    offsets = {text.get_text(): text.xyann for text in ax.texts}
    assert offsets == {"single": (3, 3), "parallel": (3, 13), "pipeline": (3, 3)}
    debate = dict(num_turns=2, accuracy=dict(mean_agent=[0.4, 0.5], majority=[0.45, 0.5]),
                  transitions=[dict(pooled_fractions={"W→R": 0.1, "R→W": 0.05})])
    eval_report.plot_debate({"maporl": debate}, tmp_path)
    assert drawn[-2].axes[0].get_ylim() == (0, 100)


def test_write_results_and_tables(tmp_path):
    methods = {"a": dict(x=0.5, y=float("nan")), "b": dict(x=1 / 3)}
    table = eval_report.samples_table(methods, ["x", "y", "z"])
    assert table.splitlines()[2:] == ["| a | 0.5 | nan |  |", "| b | 0.333 |  |  |"]
    json_path, md_path = eval_report.write_results(tmp_path, dict(methods=methods), table)
    assert json.loads(json_path.read_text())["methods"]["a"]["y"] is None  # NaN -> null, valid JSON
    assert md_path.read_text() == table


def _docs_script(name: str):
    """A script of docs/results/ (not a package) loaded as a module."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        name, Path(__file__).resolve().parents[1] / "docs" / "results" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_answer_shapes_classifies_and_counts_an_evaluate_samples_file(tmp_path, capsys):
    """docs/results/answer_shapes.py (docs/results.md uses its tables): the four shapes by hand, and the
    per-(method, turn) percentages of a samples.jsonl in evaluate.py's format."""
    shapes = _docs_script("answer_shapes")
    assert shapes.shape("The answer is 9.\nAva has 4 + 5 = 9.", "9") == "answer first"  # first, even when right
    assert shapes.shape("Ava has 4 + 5 = 9 pencils.", "9") == "unparsable"
    assert shapes.shape("4 + 5 = 9.\nThe answer is 9.", "9") == "computed, right"
    assert shapes.shape("4 + 5 = 8.\nThe answer is 8.", "9") == "computed, wrong"
    row = dict(method="maporl", question="arith/test/0", gold="9", answers=[["9", None], ["9", "8"]],
               responses=[["4 + 5 = 9.\nThe answer is 9.", "The answer is 4."],
                          ["4 + 5 = 9.\nThe answer is 9.", "4 + 5 = 8.\nThe answer is 8."]])
    (tmp_path / "samples.jsonl").write_text(json.dumps(row) + "\n")
    shapes.main(str(tmp_path / "samples.jsonl"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "| maporl | 1 | 50.0 % | 0.0 % | 50.0 % | 0.0 % | 100.0 % |"
    assert lines[3] == "| maporl | 2 | 0.0 % | 0.0 % | 50.0 % | 50.0 % | 50.0 % |"


def test_disagreements_sorts_each_agent_by_its_turn1_situation(tmp_path, capsys):
    """docs/results/disagreements.py (docs/results.md's split table): each agent's turn-1 situation and what it
    answered at turn 2, counted by hand on two debates; an unparsable answer is wrong and never 'kept'."""
    rows = [dict(method="maporl", gold="9", answers=[["9", "8"], ["8", "9"]]),  # a split; each takes the other's
            dict(method="maporl", gold="9", answers=[[None, "7"], [None, "9"]])]  # both wrong: other, then fixed
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _docs_script("disagreements").main([str(tmp_path / "samples.jsonl")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| method | turn 1 | agents | kept own | took partner's | other | right at turn 2 |"
    assert lines[2:] == [
        "| maporl | both wrong | 2 | 0 (0 %) | 0 (0 %) | 2 (100 %) | 1 (50 %) |",
        "| maporl | own right, partner wrong | 1 | 0 (0 %) | 1 (100 %) | 0 (0 %) | 0 (0 %) |",
        "| maporl | own wrong, partner right | 1 | 0 (0 %) | 1 (100 %) | 0 (0 %) | 1 (100 %) |"]
    _docs_script("disagreements").main([str(tmp_path / "samples.jsonl")], per_agent=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[2:] == [  # agent 0: right then wrong in debate 1; agent 1 fixed in debate 2
        "| maporl agent 0 | both wrong | 1 | 0 (0 %) | 0 (0 %) | 1 (100 %) | 0 (0 %) |",
        "| maporl agent 0 | own right, partner wrong | 1 | 0 (0 %) | 1 (100 %) | 0 (0 %) "
        "| 0 (0 %) |",
        "| maporl agent 1 | both wrong | 1 | 0 (0 %) | 0 (0 %) | 1 (100 %) | 1 (100 %) |",
        "| maporl agent 1 | own wrong, partner right | 1 | 0 (0 %) | 1 (100 %) | 0 (0 %) "
        "| 1 (100 %) |"]


def test_helper_use_counts_calls_and_a_right_aux_apart(tmp_path, capsys):
    """docs/results/helper_use.py (the MAGRPO cooperation evidence): main calling aux, aux right on its own
    docstring example (run in the sandbox) and both, per method, on minicode joint answers written by hand."""
    from nanomarl.tasks.minicode import minicode_problems
    use = _docs_script("helper_use")
    problem = next(p for p in minicode_problems("eval") if p["id"] == "minicode/binary/count_ones")
    assert use.aux_example_test(problem["aux_spec"]) == "assert aux(6) == '110'"
    right_aux = "def aux(n: int) -> str:\n    return bin(n)[2:]\n"
    caller = "def count_ones(n: int) -> int:\n    return aux(n).count('1')\n"
    alone = "def count_ones(n: int) -> int:\n    return bin(n).count('1')\n"
    rows = [dict(method="magrpo", problem=problem["id"], texts=[right_aux, caller], levels=dict(tests_passed=9)),
            dict(method="magrpo", problem=problem["id"], texts=["def aux(n):\n    return 5\n", caller],
                 levels=dict(tests_passed=0)),
            dict(method="single", problem=problem["id"], texts=["", alone], levels=dict(tests_passed=9))]
    assert use.helper_use(rows[0], problem) == {"main calls aux": True, "aux right": True, "both": True,
                                                "a test passed": True}
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    use.main([str(tmp_path / "samples.jsonl")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[2:] == ["| magrpo | 2 | 2 | 1 | 1 | 1 |", "| single | 1 | 0 | 0 | 0 | 1 |"]


def test_merge_adapter_saves_base_plus_adapter_as_a_model_folder(tmp_path, tiny_model_dir):
    """docs/results/merge_adapter.py (the heterogeneous team's stronger base): a run's trained
    adapter folded into its base loads as a plain model folder, its logits base + adapter's."""
    import torch
    from common import add_adapters, load_model
    model = add_adapters(load_model(str(tiny_model_dir)), ["agent0", "agent1"])
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B.agent1" in name:  # a trained adapter: B no longer zero
            p.data.normal_(0, 0.5)
    run = tmp_path / "run"
    run.mkdir()
    (run / "args.json").write_text(json.dumps({"model": str(tiny_model_dir)}))
    save_adapters(model, ["agent0", "agent1"], run / "adapters")
    _docs_script("merge_adapter").merge_adapter(str(run / "adapters" / "agent1"),
                                                str(tmp_path / "strong"))
    ids = torch.tensor([[1, 5, 9, 12, 3]])
    model.set_adapter("agent1")
    with torch.no_grad():
        expected = model(ids).logits
        with model.disable_adapter():
            base = model(ids).logits
        merged = load_model(str(tmp_path / "strong"))(ids).logits
    assert (expected - base).abs().max() > 1e-2  # the adapter changes the outputs
    torch.testing.assert_close(merged, expected, atol=1e-5, rtol=1e-5)
    assert load_tokenizer(str(tmp_path / "strong")).encode("12 + 3") == \
        load_tokenizer(str(tiny_model_dir)).encode("12 + 3")


# ------------------------------------------------------------------------------------ the controls


def test_within_budget():
    from nanomarl.self_consistency import within_budget
    # at least one answer
    assert [within_budget([3, 3, 3], b) for b in (10, 9, 8, 3, 2)] == [3, 3, 2, 1, 1]
    assert within_budget([10, 1], 5) == 1  # in sampling order: the first answer alone exceeds it


def test_self_consistency_metrics_hand_computed():
    from nanomarl.self_consistency import self_consistency_metrics
    samples = dict(answers=[["5", "5", "7", "7", "5"], [None, "-2", "3", None]],  # golds 5 and -2
                   tokens=[[3] * 5, [10, 2, 2, 2]], prompt_tokens=[[4] * 5, [6] * 4])
    m = self_consistency_metrics(samples, ["5", "-2"], 3, budgets=[7, 5])
    # first 3: q0 [5, 5, 7] -> 1; q1 [None, -2, 3] -> None leaves the tie {-2, 3}: 0.5
    assert m["vote_accuracy"] == pytest.approx(0.75)
    # k = 1: q0 1, q1 [None] -> 0; k = 2: q0 1, q1 [None, -2] -> -2: 1
    assert m["vote_at_k"] == pytest.approx([0.5, 1.0, 0.75])
    assert m["sample_accuracy"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert m["invalid_rate"] == pytest.approx((0 + 1 / 3) / 2)
    assert m["tokens_per_question"] == pytest.approx((9 + 14) / 2)
    assert m["prompt_tokens_per_question"] == 15
    # budgets: q0 7 tokens -> 2 answers [5, 5]: 1 (6 tokens); q1 5 -> its first answer alone (10
    # tokens): 0
    assert m["budget_vote_accuracy"] == pytest.approx(0.5)
    assert m["budget_samples"] == pytest.approx(1.5)
    assert m["budget_tokens_per_question"] == pytest.approx(8)
    assert m["budget_per_question"] == 6 and m["budget_short"] == 0
    assert m["num_samples"] == 3 and m["num_questions"] == 2
    # the answers ran out below a larger budget: short
    assert self_consistency_metrics(samples, ["5", "-2"], 3, budgets=[16, 5])["budget_short"] == 0.5
    assert "budget_vote_accuracy" not in self_consistency_metrics(samples, ["5", "-2"], 3)
    # the controls table: the control beside the debate it matches
    m.update(control_of="offtheshelf", temperature=0.3)
    debate = dict(accuracy=dict(mean_agent=[0.25, 0.5], majority=[0.5, 0.75]),
                  answers_per_question=4, tokens_per_question=12.0)
    lines = eval_report.controls_table({"sc-base": m}, {"offtheshelf": debate}).splitlines()
    assert lines[2] == ("| sc-base | 50.0 | 75.0 | 3 | 11.5 | 50.0 | 1.5 | 8.0 | 0.0 % "
                        "| offtheshelf | 50.0 | 75.0 | 4 | 12.0 |")
    assert "sampled at T = 0.3" in lines[4]
    assert eval_report.controls_table({"sc-base": m}, {}).splitlines()[2].endswith(
        "| offtheshelf | not evaluated |  |  |  |")
    assert eval_report.control_summary(m) == (
        "one answer 0.500 | vote of 3 0.750 | tokens/question 11.5 | within offtheshelf's 6.0 "
        "tokens/question: vote 0.500 of 1.5 answers")


def test_play_self_consistency_chunks_and_token_budgets(monkeypatch):
    """3 questions in chunks of --batch-size 2, 2 answers a round (A x T = 2 x 1), 2 tokens an
    answer: q0 (budget 4) and q1 (budget 1) stop after one round, q2 (budget 6) takes a second."""
    from types import SimpleNamespace

    import torch
    calls = []

    def fake_debate(recs, models, tokenizers, adapter_names, max_new_tokens, temperature=None,
                    greedy=False, prompt_style=None, generate_batch_size=0, fast=False,
                    logprobs=True):
        calls.append(dict(questions=[r["id"] for r in recs], seats=len(models),
                          names=adapter_names, greedy=greedy, temperature=temperature,
                          rows=generate_batch_size, model=models[0], fast=fast,
                          logprobs=logprobs))
        b, k = len(recs), len(calls)
        return cotrain.Debate(recs, [[["prompt"] * 2] for _ in recs], [[["text"] * 2] for _ in recs],
                              [[[f"{r['id']}-{k}-{s}" for s in range(2)]] for r in recs],
                              torch.zeros(b, 1, 2), None,
                              {(0, s): dict(response_mask=torch.ones(b, 2), query_mask=torch.ones(b, 7))
                               for s in range(2)})

    monkeypatch.setattr(evaluate.cotrain, "run_debate", fake_debate)
    bases = SimpleNamespace(model=lambda base: f"model of {base}", tokenizers={"tiny": "tok"})
    args = SimpleNamespace(sc_samples=0, sc_max_samples=0, num_agents=2, num_turns=1, batch_size=2,
                           max_new_tokens=8, temperature=0.3, prompt_style="short",
                           generate_batch_size=0, fast=True)
    records = [dict(id=f"q{i}", question=f"{i} + 1?", answer=str(i + 1), task="math")
               for i in range(3)]
    samples, _ = evaluate.play_self_consistency(bases, ("tiny", ["r0_agent0"]), records, args,
                                                [4, 1, 6])
    assert [c["questions"] for c in calls] == [["q0", "q1"], ["q2"], ["q2"]]
    assert all(c["seats"] == 2 and c["names"] == [["r0_agent0"] * 2] and not c["greedy"]
               and c["temperature"] == 0.3 and c["rows"] == 4 and c["model"] == "model of tiny"
               and c["fast"] and not c["logprobs"] for c in calls)  # --fast reaches run_debate
    assert samples["answers"] == [["q0-1-0", "q0-1-1"], ["q1-1-0", "q1-1-1"],
                                  ["q2-2-0", "q2-2-1", "q2-3-0", "q2-3-1"]]
    assert samples["tokens"] == [[2, 2], [2, 2], [2] * 4] and samples["prompt_tokens"][2] == [7] * 4


# ----------------------------------------------------------------------------------- reasoning-gym


@pytest.mark.parametrize("text, expected", [
    ("5 - 9 = -4.\nAnswer: \\boxed{-4}", "-4"),
    ("The answer is −7.", "-7"),  # a Unicode minus
    ("0 - 9 = -9. The answer is -9", "-9"),
    ("The answer is: - 3", "-3"),
    ("10 + 3 = 13. The answer is 13.", "13"),
    ("8 - 8 = 0, so the answer is 0.", "0"),
])
def test_negative_and_zero_answers_parse(text, expected):
    from common import extract_answer
    from nanomarl.tasks.debate import normalize_number
    assert extract_answer(text, "math") == expected == normalize_number(expected)


def test_reasoning_gym_missing_is_one_clear_line(monkeypatch, capsys):
    import sys

    from nanomarl.tasks.debate import load_task
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import fails, installed or not
    monkeypatch.setitem(sys.modules, "reasoning_gym.factory", None)
    with pytest.raises(SystemExit) as stop:
        load_task("reasoning-gym:basic_arithmetic", "test", 5)
    assert stop.value.code == 2
    assert capsys.readouterr().err == (
        "error: --dataset: reasoning-gym:basic_arithmetic needs the optional package reasoning-gym "
        "(pip install reasoning-gym)\n")


def test_reasoning_gym_questions_are_the_librarys():
    """Each question and answer is the library's item at its source_index, with the settings that
    match arith:digits; splits are disjoint; --dataset-config changes the settings; bad settings
    are refused."""
    import re

    rg = pytest.importorskip("reasoning_gym", reason="optional: pip install reasoning-gym")
    from nanomarl.tasks.debate import REASONING_GYM_DEFAULTS, hash_split, load_task
    name = "reasoning-gym:basic_arithmetic"
    records = load_task(name, "test", 30, seed=3)
    data = rg.create_dataset("basic_arithmetic", seed=3, size=5000,
                             **REASONING_GYM_DEFAULTS["basic_arithmetic"])
    assert len(records) == 30 and len({r["question"] for r in records}) == 30
    for r in records:
        item = data[r["source_index"]]
        assert (r["question"], r["answer"], r["task"]) == (item["question"], item["answer"], "math")
        m = re.fullmatch(r"(?:What is|Solve|Compute|Evaluate:) (\d+) ([+-]) (\d+)[?.]",
                         r["question"])
        a, op, b = int(m[1]), m[2], int(m[3])
        assert a <= 10 and b <= 10 and int(r["answer"]) == (a + b if op == "+" else a - b)
        assert hash_split(r["question"]) == "test"
    assert any(int(r["answer"]) < 0 for r in records)  # a difference may be negative
    assert load_task(name, "test", 30, seed=3) == records  # the same questions again
    train = load_task(name, "train", 200, seed=3)
    assert len(train) == 200
    assert not {r["question"] for r in train} & {r["question"] for r in records}
    sums = load_task(name, "test", 10, seed=3, config="operators=+,min_digits=2,max_digits=2")
    assert len(sums) == 10
    assert all(" + " in r["question"] and " - " not in r["question"] for r in sums)
    for bad in ("min_terms=x", "colour=red", "allow_negation=maybe", "min_terms=3", "seed=1"):
        with pytest.raises(SystemExit, match="--dataset-config"):
            load_task(name, "test", 5, config=bad)
    with pytest.raises(SystemExit, match="--answer-field"):
        load_task(name, "test", 5, answer_field="gold")


def test_debate_mode_on_reasoning_gym_saves_its_questions(tmp_path, tiny_model_dir):
    pytest.importorskip("reasoning_gym", reason="optional: pip install reasoning-gym")
    from conftest import run_script

    from nanomarl.tasks.debate import load_task
    out = tmp_path / "eval"
    run_script(["evaluate.py", "--model", "tiny", "--limit", "3", "--num-agents", "2",
                "--num-turns", "2", "--max-new-tokens", "6", "--methods", "offtheshelf,sc-base",
                "--dataset",
                "reasoning-gym:basic_arithmetic", "--dataset-config", "operators=+",
                "--question-seed", "4",
                "--output-dir", str(out)], timeout=300)
    results = json.loads((out / "results.json").read_text())
    expected = load_task("reasoning-gym:basic_arithmetic", "test", 3, seed=4, config="operators=+")
    assert results["questions"] == [dict(id=r["id"], question=r["question"], answer=r["answer"])
                                    for r in expected]
    source = results["dataset_source"]
    assert source["library"] == "reasoning-gym" and source["version"]
    assert source["question_seed"] == 4
    assert source["settings"]["operators"] == ["+"] and source["settings"]["max_digits"] == 1
    assert list(results["methods"]) == ["offtheshelf", "sc-base"]
    assert results["methods"]["sc-base"]["num_samples"] == 4
