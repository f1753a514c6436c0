"""arith:split's variants: the same records in two held-out wordings (arith:split-w1, -w2), in
two-digit numbers (arith:split-wide) and in three training wordings cycled by record
(arith:split-mix). Each view holds only its agent's number and asks for its own opening sentence;
the records equal arith:split's apart from the words; the controls read the sentence and the
numbers from the record; arith:split's own words are fixed; a run trained on arith:split is
evaluated on them."""
import json
import re
from types import SimpleNamespace

import pytest

import evaluate
from nanomarl.cli import parse_args
from nanomarl.split_controls import (control_messages, heard_result, no_information_bound,
                                     replay_records, wrong_number)
from nanomarl.tasks.debate import load_task
from nanomarl.tasks.debate_prompts import first_sentence, followup_message
from nanomarl.tasks.split import SPLIT_DATASETS, SPLIT_WORDINGS, split_of_problem

WORDS = ("id", "question", "views", "followups", "canonical")  # what a wording changes


@pytest.mark.parametrize("num_agents", [2, 3])
@pytest.mark.parametrize("name", list(SPLIT_DATASETS))
def test_each_view_holds_only_its_own_number_and_asks_for_its_sentence(name, num_agents):
    records = load_task(name, "test", limit=60, num_agents=num_agents)
    wordings, drawn = SPLIT_DATASETS[name]
    for i, r in enumerate(records):
        canonical = SPLIT_WORDINGS[wordings[i % len(wordings)]]["canonical"]
        assert r["canonical"] == canonical and r["numbers"] == [min(drawn), max(drawn)]
        assert r["id"].startswith(f"{name}/test/")
        for a, own in enumerate(r["parts"]):
            opening = canonical.format(own)
            assert first_sentence(opening) == opening  # a partner hears all of it
            followup = followup_message(r, a, ["P"] * (num_agents - 1))
            for text in (r["views"][a], followup):
                # no number but its own (arith:split's goal says "3" with three agents)
                words = text.replace(" of the 3 numbers", "")
                assert set(re.findall(r"\d+", words)) == {str(own)}, text
                assert '"The answer is"' in text  # the answer parser's phrase
            assert f'"{opening}"' in r["views"][a]
            assert '"P"' in followup and "{" not in followup


@pytest.mark.parametrize("num_agents", [2, 3])
@pytest.mark.parametrize("name", ["arith:split-w1", "arith:split-w2"])
def test_the_wordings_change_the_words_and_nothing_else(name, num_agents):
    for split, seed in (("train", 0), ("train", 3), ("validation", 0), ("test", 0)):
        limit = 300 if split == "train" else None
        base = load_task("arith:split", split, limit, seed, num_agents=num_agents)
        other = load_task(name, split, limit, seed, num_agents=num_agents)
        assert [r["id"].split("/", 1)[1] for r in other] == [r["id"].split("/", 1)[1]
                                                             for r in base]
        assert [{k: v for k, v in r.items() if k not in WORDS} for r in other] == \
            [{k: v for k, v in r.items() if k not in WORDS} for r in base]
        for r, b in zip(other, base):  # other words everywhere: views, followups, question
            assert all(x != y for x, y in zip(r["views"] + r["followups"],
                                              b["views"] + b["followups"]))
            assert r["question"] != b["question"] and r["canonical"] != b["canonical"]
    w1, w2 = (load_task(f"arith:split-w{k}", "test", 1)[0] for k in (1, 2))
    assert len({w1["views"][0], w2["views"][0]}) == 2


def test_wide_draws_two_digit_numbers_with_disjoint_splits():
    train = load_task("arith:split-wide", "train", 3000, 0)
    held = {s: load_task("arith:split-wide", s, None) for s in ("validation", "test")}
    assert [len(held[s]) for s in held] == [1000, 1000]  # capped: load_task's limit or 1000
    assert len(load_task("arith:split-wide", "test", 20)) == 20
    for split, records in (("train", train), *held.items()):
        for r in records:
            assert all(13 <= x <= 99 for x in r["parts"]) and r["numbers"] == [13, 99]
            assert split_of_problem(r["kind"], tuple(r["parts"])) == split
            assert r["answer"] == str(sum(r["parts"]) if r["kind"] == "sum"
                                      else max(r["parts"]) - min(r["parts"]))
    assert any(max(r["parts"]) == 99 for r in held["test"])

    def problems(records):  # a problem and its seat-swaps are one
        return {(r["kind"], tuple(sorted(r["parts"]))) for r in records}
    # each problem once (a seat-swap is another problem in the same split)
    assert len({(r["kind"], tuple(r["parts"])) for r in held["test"]}) == 1000
    assert not problems(train) & problems(held["test"])
    assert not problems(train) & problems(held["validation"])
    assert not problems(held["validation"]) & problems(held["test"])
    # the held-out questions do not depend on the training seed
    assert load_task("arith:split-wide", "test", 50, 7) == held["test"][:50]


def test_the_controls_say_the_records_own_sentence_and_numbers():
    r = load_task("arith:split-w1", "test", limit=1)[0]
    assert r["parts"] == [7, 11] and r["kind"] == "difference"
    debate = SimpleNamespace(responses=[[["I hold 7.", "I hold 11."]]])
    assert control_messages([r], debate, "oracle") == [[["I hold 11."], ["I hold 7."]]]
    assert control_messages([r], debate, "wrong") == [[["I hold 12."], ["I hold 8."]]]
    replayed = replay_records([r], control_messages([r], debate, "wrong"))[0]
    assert replayed["views"][0].startswith('Here is what your partner said: "I hold 12." You hold '
                                           '7.')
    assert [heard_result(r, a) for a in range(2)] == ["5", "3"]  # 12 - 7, 11 - 8
    r2 = load_task("arith:split-w2", "test", limit=1)[0]
    assert control_messages([r2], debate, "oracle") == [[["Mine is 11."], ["Mine is 7."]]]
    # -wide: the largest number is 99, not 12 (its wrong number is 98)
    wide = dict(kind="sum", parts=[13, 99], answer="112", numbers=[13, 99],
                canonical="My number is {}.")
    assert wrong_number(12) == 11 and wrong_number(12, 99) == 13 and wrong_number(99, 99) == 98
    assert control_messages([wide], debate, "wrong") == [[["My number is 98."],
                                                          ["My number is 14."]]]
    assert [heard_result(wide, a) for a in range(2)] == ["111", "113"]  # 13 + 98, 14 + 99


def test_the_no_information_bound_by_hand_on_wide_numbers():
    def record(kind, parts):
        gold = sum(parts) if kind == "sum" else max(parts) - min(parts)
        return dict(kind=kind, parts=parts, answer=str(gold), numbers=[13, 99])
    # a sum of two: each of the 87 partners' numbers gives another result: 1/87 a seat
    assert no_information_bound([record("sum", [20, 57])]) == pytest.approx(1 / 87)
    # 60 - 56 = 4. From 56, |56 - y| for y in 13..99 is 1..43 twice each (y = 56 -+ d), 0 once:
    # 43 best answers, 4 among them. From 60, 1..39 twice (61..99 stops at 39), 40..47 and 0
    # once: 39 best answers, 4 among them
    assert no_information_bound([record("difference", [56, 60])]) == pytest.approx(
        (1 / 43 + 1 / 39) / 2)
    # 99 - 13 = 86: from 13 (or 99), 0..86 once each: 1/87 a seat
    assert no_information_bound([record("difference", [13, 99])]) == pytest.approx(1 / 87)
    records = load_task("arith:split-wide", "test", None)
    assert 0 < no_information_bound(records) < 0.05


# arith:split's first test record in full: its words stay fixed (logged numbers depend on them)
ARITH_SPLIT_TEST_0 = {
    "id": "arith:split/test/0", "task": "math", "answer": "4",
    "question": "The numbers are 7, 11. Find the difference of the two numbers (the larger minus "
                "the smaller).",
    "parts": [7, 11],
    "views": ["You and your partner each hold one number; together you must find the difference "
              "of the two numbers (the larger minus the smaller). Your number is 7. Your partner "
              "knows the other number. Start with \"My number is 7.\" Then read your partner's "
              "number and compute the answer.\nShow the calculation, then end with \"The answer "
              "is\" and the number.",
              "You and your partner each hold one number; together you must find the difference "
              "of the two numbers (the larger minus the smaller). Your number is 11. Your partner "
              "knows the other number. Start with \"My number is 11.\" Then read your partner's "
              "number and compute the answer.\nShow the calculation, then end with \"The answer "
              "is\" and the number."],
    "followups": ["Your number is 7. Your partner says: {said} Find the difference of the two "
                  "numbers (the larger minus the smaller). First write \"The numbers are 7, \" and "
                  "your partner's number, then show the calculation and end with \"The answer "
                  "is\" and the number.",
                  "Your number is 11. Your partner says: {said} Find the difference of the two "
                  "numbers (the larger minus the smaller). First write \"The numbers are 11, \" "
                  "and your partner's number, then show the calculation and end with \"The answer "
                  "is\" and the number."]}


def test_arith_split_words_are_fixed():
    r = load_task("arith:split", "test", limit=1)[0]
    assert json.dumps({k: v for k, v in r.items() if k in ARITH_SPLIT_TEST_0}) == \
        json.dumps(ARITH_SPLIT_TEST_0)
    assert (r["kind"], r["canonical"], r["numbers"]) == ("difference", "My number is {}.", [1, 12])
    three = load_task("arith:split", "test", limit=1, num_agents=3)[0]
    assert three["question"] == "The numbers are 6, 7, 4. Find the sum of the 3 numbers."
    assert three["followups"][1] == (
        "Your number is 7. Your partners say: {said} Find the sum of the 3 numbers. First write "
        "\"The numbers are 7, \" and your partners' numbers, then show the calculation and end "
        "with \"The answer is\" and the number.")
    assert three["views"][2].startswith("You and your partner each hold one number; together you "
                                        "must find the sum of the 3 numbers. Your number is 4.")


def test_load_task_names_the_variants(capsys):
    with pytest.raises(SystemExit):
        load_task("arith:split-w9")
    err = capsys.readouterr().err
    assert "arith:split, arith:split-w1, arith:split-w2, arith:split-wide" in err
    with pytest.raises(SystemExit):
        load_task("arith:split-wide", "dev")
    assert "arith:split-wide has splits train, test, validation" in capsys.readouterr().err


def test_a_run_trained_on_arith_split_is_evaluated_on_the_variants(tmp_path, tiny_model_dir,
                                                                   capsys):
    from test_evaluate import fake_cotrain_run

    run = str(fake_cotrain_run(tmp_path / "run", 2, 0, dataset="arith:split", eval_questions=2,
                               policy_sharing="agent-turn"))
    flags = ["--max-new-tokens", "6", "--device", "cpu", "--limit", "2"]
    evaluate.main(parse_args(evaluate.Args, ["--run", run, "--methods", "maporl", "--dataset",
                                             "arith:split-w1", *flags, "--output-dir",
                                             str(tmp_path / "w1")]))
    results = json.loads((tmp_path / "w1" / "results.json").read_text())
    assert [q["id"] for q in results["questions"]] == ["arith:split-w1/test/0",
                                                       "arith:split-w1/test/1"]
    assert "eval/oracle/turn2/agent_accuracy" in results["methods"]["maporl"]["split_controls"]
    assert "trained on arith:split, evaluated on arith:split-w1" in capsys.readouterr().out
    evaluate.main(parse_args(evaluate.Args, ["--speakers", run, "--readers", run, "--dataset",
                                             "arith:split-wide", *flags, "--output-dir",
                                             str(tmp_path / "wide")]))
    pairings = json.loads((tmp_path / "wide" / "results.json").read_text())["pairings"]
    assert pairings["dataset"] == "arith:split-wide" and len(pairings["questions"]) == 2
    assert "oracle turn 2" in pairings["matrices"]
    assert "the pairings play arith:split-wide (typed)" in capsys.readouterr().out


MIX = (0, 3, 4)  # arith:split-mix's training wordings, record i in MIX[i % 3]


def test_mix_cycles_its_training_wordings_by_record_index():
    first = load_task("arith:split-mix", "train", 3)
    assert [(r["parts"], r["kind"], r["canonical"]) for r in first] == [
        ([10, 12], "sum", "My number is {}."), ([3, 4], "sum", "I was given {}."),
        ([3, 8], "difference", "My card shows {}.")]
    assert first[1]["views"][0] == (
        "The number 3 is yours, and the other number is known only to your partner. Make \"I was "
        "given 3.\" your first sentence, so that your partner can hear your number. The task: "
        "calculate the result of adding every number together. Write out each step and close with "
        "\"The answer is\" and the number.")
    assert followup_message(first[1], 1, ["I was given 3. Then 7."]) == (
        "The number 4 is yours. From your partner: \"I was given 3.\" Calculate the result of "
        "adding every number together. Your reply opens with \"Using 4 and\" followed by the "
        "number you received, writes out each step and closes with \"The answer is\" and the "
        "number.")
    assert first[2]["views"][1] == (
        "Your reply must end with \"The answer is\" and the number, and its first sentence must "
        "be \"My card shows 8.\" You drew a card with 8 on it and your partner drew the other "
        "card; no one sees another's card. The team wants the gap between the two cards (high "
        "card minus low card): work it out step by step from what the other card shows.")
    assert first[2]["question"] == ("The cards read 3, 8. What is the gap between the two cards "
                                    "(high card minus low card)?")
    base = load_task("arith:split", "train", 300, 3)
    mix = load_task("arith:split-mix", "train", 300, 3)
    assert [r["id"] for r in mix] == [f"arith:split-mix/train/{i}" for i in range(300)]
    for i, (r, b) in enumerate(zip(mix, base)):
        words = SPLIT_WORDINGS[MIX[i % 3]]
        fill = {key: pair[0] for key, pair in words["partners"].items()}
        goal = words["goals"][r["kind"]].format(count="two")
        assert r["canonical"] == words["canonical"]
        assert r["views"] == [words["view"].format(goal=goal, own=x, **fill) for x in r["parts"]]
        assert r["followups"] == [words["followup"].format(goal=goal, own=x, **fill)
                                  for x in r["parts"]]
        assert split_of_problem(r["kind"], tuple(r["parts"])) == "train"
        # arith:split's problem drawn in its order; in wording 0, arith:split's record
        assert {k: v for k, v in r.items() if k not in WORDS} == \
            {k: v for k, v in b.items() if k not in WORDS}
        if i % 3 == 0:
            assert dict(r, id=b["id"]) == b


@pytest.mark.parametrize("num_agents", [2, 3])
@pytest.mark.parametrize("split", ["validation", "test"])
def test_mix_holds_out_arith_splits_problems_in_its_order(split, num_agents):
    base = load_task("arith:split", split, None, num_agents=num_agents)
    mix = load_task("arith:split-mix", split, None, 5, num_agents=num_agents)  # no seed changes it
    assert len(mix) == len(base) == {("validation", 2): 72, ("test", 2): 114}.get(
        (split, num_agents), len(base))
    assert [(r["parts"], r["kind"], r["answer"], r["numbers"]) for r in mix] == \
        [(r["parts"], r["kind"], r["answer"], r["numbers"]) for r in base]
    assert [r["canonical"] for r in mix] == [SPLIT_WORDINGS[MIX[i % 3]]["canonical"]
                                             for i in range(len(mix))]
    assert mix[0] == dict(base[0], id=f"arith:split-mix/{split}/0")  # wording 0


def test_the_training_wordings_ask_for_their_own_sentence():
    canonicals = [w["canonical"] for w in SPLIT_WORDINGS[:5]]
    assert canonicals == ["My number is {}.", "I hold {}.", "Mine is {}.", "I was given {}.",
                          "My card shows {}."]
    openings = [first_sentence(w["view"]) for w in SPLIT_WORDINGS[:5]]
    # pairwise distinct: sentences, openings, goals, questions
    assert len(set(canonicals)) == len(set(openings)) == 5
    assert len({w["goals"][k] for w in SPLIT_WORDINGS[:5] for k in ("sum", "difference")}) == 10
    assert len({w["question"] for w in SPLIT_WORDINGS[:5]}) == 5
    for words in SPLIT_WORDINGS[3:]:
        assert set(words) == set(SPLIT_WORDINGS[0]) and set(words["goals"]) == {"sum", "difference"}
        assert all(len(pair) == 2 for pair in words["partners"].values())
        fill = {key: pair[0] for key, pair in words["partners"].items()}
        view = words["view"].format(goal="G", own=9, **fill)
        assert f'"{words["canonical"].format(9)}"' in view and '"The answer is"' in view
        followup = words["followup"].format(goal="G", own=9, **fill)
        assert "{said}" in followup and '"The answer is"' in followup


def test_the_controls_say_the_training_wordings_own_sentences():
    records = load_task("arith:split-mix", "validation", limit=3)
    r3, r4 = records[1], records[2]  # wordings 3 and 4
    assert (r3["parts"], r3["kind"], r4["parts"], r4["kind"]) == ([3, 4], "difference", [5, 3],
                                                                  "sum")
    debate = SimpleNamespace(responses=[[["I was given 3.", "I was given 4."]]])
    assert control_messages([r3], debate, "oracle") == [[["I was given 4."], ["I was given 3."]]]
    assert control_messages([r3], debate, "wrong") == [[["I was given 5."], ["I was given 4."]]]
    replayed = replay_records([r3], control_messages([r3], debate, "wrong"))[0]
    assert replayed["views"][0].startswith('The number 3 is yours. From your partner: "I was '
                                           'given 5." Calculate')
    assert [heard_result(r3, a) for a in range(2)] == ["2", "0"]  # 5 - 3, 4 - 4
    assert control_messages([r4], debate, "oracle") == [[["My card shows 3."],
                                                         ["My card shows 5."]]]
    assert control_messages([r4], debate, "wrong") == [[["My card shows 4."],
                                                        ["My card shows 6."]]]
    replayed = replay_records([r4], control_messages([r4], debate, "wrong"))[0]
    assert replayed["views"][1].startswith('End with "The answer is" and the number. Your card: '
                                           '3. Your partner\'s message: "My card shows 6."')
    assert [heard_result(r4, a) for a in range(2)] == ["9", "9"]  # 5 + 4, 6 + 3


def four_word_phrases(words: dict) -> set[tuple[str, ...]]:
    """Every run of four words (lower case) in a wording's texts."""
    texts = [words["view"], words["followup"], words["question"], words["canonical"],
             *words["goals"].values(), *(p for pair in words["partners"].values() for p in pair)]
    found = set()
    for text in texts:
        w = re.findall(r"[a-z']+", text.lower())
        found |= {tuple(w[i:i + 4]) for i in range(len(w) - 3)}
    return found


def test_many_composes_its_training_wordings_apart_from_the_held_out_ones():
    """arith:split-many: arith:split's problems, record i in one of 30 training wordings (0, 3, 4
    and 27 composed of drawn phrases, nanomarl/tasks/split_grammar.py); none shares a four-word
    phrase with the held-out words of -w1 and -w2 but the answer's own."""
    wordings, _ = SPLIT_DATASETS["arith:split-many"]
    assert wordings == (0, 3, 4, *range(5, 32)) and len(SPLIT_WORDINGS) == 32
    composed = SPLIT_WORDINGS[5:]
    assert len({(w["view"], w["followup"]) for w in composed}) == 27
    held_out = four_word_phrases(SPLIT_WORDINGS[1]) | four_word_phrases(SPLIT_WORDINGS[2])
    answer = {("with", "the", "answer", "is"), ("the", "answer", "is", "and"),
              ("answer", "is", "and", "the"), ("is", "and", "the", "number")}
    for words in composed:
        assert four_word_phrases(words) & held_out <= answer
    base = load_task("arith:split", "train", 300, 0)
    many = load_task("arith:split-many", "train", 300, 0)
    assert [{k: v for k, v in r.items() if k not in WORDS} for r in many] == \
        [{k: v for k, v in r.items() if k not in WORDS} for r in base]
    assert [r["canonical"] for r in many[:3]] == ["My number is {}.", "I was given {}.",
                                                 "My card shows {}."]
    r = many[3]  # wording 5, by hand
    assert (r["parts"], r["kind"]) == ([1, 6], "difference")
    assert r["views"][0] == (
        "Show the calculation, then end with \"The answer is\" and the number. Together you must "
        "find the difference between the numbers (larger minus smaller). Your number is 1. The "
        "missing number is with your teammate. Your opening sentence is \"The number I see is 1.\" "
        "Next, combine your number with your partner's number once you learn it.")
    assert followup_message(r, 0, ["The number I see is 6. So"]) == (
        "Find the difference between the numbers (larger minus smaller). Remember that your "
        "number is 1. Your partner says: \"The number I see is 6.\" First write \"The numbers "
        "are 1, \" and your partner's number, then show the calculation and end with \"The answer "
        "is\" and the number.")
    assert r["question"] == ("The numbers are 1, 6. Find the difference between the numbers "
                             "(larger minus smaller).")
