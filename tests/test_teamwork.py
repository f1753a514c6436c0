"""Tasks that need a partner: arith:split (each debate agent sees only its own number), its controls
(silent, shuffled, oracle and wrong partners, the no-information bound, one agent on the whole
question, informative messages), and MAGRPO's teamwork task (a division of labour), its reward on
hand-made answers, cross-play and swapped roles."""
import re
from fractions import Fraction
from types import SimpleNamespace

import pytest
import torch

import cotrain
from common import chat_prompt, load_model
from nanomarl.models import load_tokenizer
from nanomarl.split_controls import (carries_number, control_messages, follows_rates,
                                     from_second_turn, informative_rates, neutral_message,
                                     no_information_bound, replay_records, shuffled_sources,
                                     split_controls, whole_question, wrong_number)
from nanomarl.tasks.debate import load_task
from nanomarl.tasks.debate_prompts import first_sentence, followup_message
from nanomarl.tasks.split import split_problem_list
from nanomarl.tasks.teamwork import (listed_items, teamwork_problems, teamwork_prompts,
                                     teamwork_reward)
from test_common import make_peft


# ---------------------------------------------------------------- arith:split


@pytest.mark.parametrize("num_agents", [2, 3])
def test_split_views_hold_only_their_own_number_and_the_gold_is_right(num_agents):
    records = load_task("arith:split", "train", limit=200, seed=3, num_agents=num_agents)
    assert len(records) == 200
    for r in records:
        parts = r["parts"]
        assert len(parts) == len(r["views"]) == num_agents and all(1 <= x <= 12 for x in parts)
        difference = "difference" in r["question"]
        assert r["answer"] == str(max(parts) - min(parts) if difference else sum(parts))
        for a, view in enumerate(r["views"]):
            goal = f"the {num_agents} numbers" if num_agents > 2 else "the two numbers"
            assert goal in view and f"Your number is {parts[a]}." in view
            # no other number than its own (the goal's count aside): no partner's number
            assert set(re.findall(r"\d+", view.replace(goal, ""))) == {str(parts[a])}
            assert f'Start with "My number is {parts[a]}."' in view
            # the later turn: its own number, the partners' words filled in, both numbers first
            followup = followup_message(r, a, ["P"] * (num_agents - 1))
            assert set(re.findall(r"\d+", followup.replace(goal, ""))) == {str(parts[a])}
            partners = "Your partner says" if num_agents == 2 else "Your partners say"
            assert followup.startswith(f'Your number is {parts[a]}. {partners}: ' +
                                       " ".join(['"P"'] * (num_agents - 1)) + " Find ")
            assert f'First write "The numbers are {parts[a]}, " and your partner' in followup
        assert r["question"].startswith(f"The numbers are {', '.join(map(str, parts))}.")


def test_split_held_out_problems_are_disjoint_from_training_and_fixed():
    train = load_task("arith:split", "train", limit=1000, seed=0)
    splits = {s: load_task("arith:split", s, limit=None) for s in ("validation", "test")}
    # every problem once: 72 and 114 of the 288 (2 kinds x 12 x 12)
    assert [len({r["question"] for r in splits[s]}) for s in splits] == [72, 114]
    assert len({r["question"] for r in train}) == 288 - 72 - 114

    def problems(records):  # a problem and its seat-swap are one: the kind and the sorted numbers
        return {(r["question"].split("Find ")[1], tuple(sorted(r["parts"]))) for r in records}
    assert not problems(train) & problems(splits["test"])
    assert not problems(train) & problems(splits["validation"])
    assert not problems(splits["validation"]) & problems(splits["test"])
    test = splits["test"][:40]
    # the held-out questions do not depend on the training seed; the training draw does
    assert [r["question"] for r in load_task("arith:split", "test", limit=40, seed=7)] == \
        [r["question"] for r in test]
    assert [r["question"] for r in load_task("arith:split", "train", limit=20, seed=7)] != \
        [r["question"] for r in train[:20]]


def test_the_problem_list_holds_each_problem_of_its_split_once_in_a_fixed_order():
    lists = {s: split_problem_list(s) for s in ("train", "validation", "test")}
    assert [len(lists[s]) for s in lists] == [102, 72, 114]
    # 2 kinds x 12 x 12, each problem in one split with its seat-swap
    assert len(set(lists["train"] + lists["validation"] + lists["test"])) == 288
    for kind, parts in lists["train"]:
        assert (kind, parts[::-1]) in lists["train"]
    # the sums, then the differences, each in the numbers' order; with three agents, sums only
    rank = {"sum": 0, "difference": 1}
    assert lists["train"] == sorted(lists["train"], key=lambda p: (rank[p[0]], p[1]))
    assert sum(len(split_problem_list(s, num_agents=3)) for s in lists) == 12 ** 3
    # the records are drawn from it: held out, each problem once
    for split in ("validation", "test"):
        records = load_task("arith:split", split)
        assert sorted((r["kind"], tuple(r["parts"])) for r in records) == sorted(lists[split])


def test_carries_number_and_informative_rates_by_hand():
    assert carries_number("My number is 7. The answer is 12.", 7)
    assert not carries_number("The answer is 17.", 7)
    records = [dict(parts=[3, 5]), dict(parts=[8, 1])]
    # responses [b][t][a]; informative_rates reads nothing else
    debate = cotrain.Debate(records, prompts=None, answers=None, correct=None, scores=None,
                            rollout={},
                            responses=[[["I have 3.", "5 is mine"],  # question 0: turn 1
                                        ["3+5=8", "The answer is 8."]],  # turn 2
                                       [["no idea", "it is 1"],  # question 1: turn 1
                                        ["8 - 1 = 7", "7"]]])  # turn 2
    # turn 1: agent 0 says 3 (yes) and not 8 (no); agent 1 says 5 (yes) and 1 (yes): 3 of 4
    # turn 2: agent 0: "3+5=8" has 3, "8 - 1 = 7" has 8;
    # agent 1: "The answer is 8." lacks 5, "7" lacks 1
    assert informative_rates(debate, records) == [0.75, 0.5]
    debate.responses[0][0][0] = "I am sure. I have 3."  # the 3 is past the first sentence
    # heard: turn 1 loses agent 0's first message (2 of 4); turn 2 as above, each one sentence
    assert informative_rates(debate, records, heard=True) == [0.5, 0.5]
    assert informative_rates(debate, records) == [0.75, 0.5]


def test_neutral_message_keeps_the_heard_length_and_carries_nothing():
    text = "My number is 7. The answer is 7 + 5 = 12."
    silent = neutral_message(text)
    assert silent == "I have read the." and first_sentence(silent) == silent  # heard whole


def test_a_partner_is_heard_up_to_its_first_full_stop_or_line_break():
    assert first_sentence("My number is 3. So 3 + 4 = 7.") == "My number is 3."
    assert first_sentence("2 + 2 = 4\nThe answer is 4.") == "2 + 2 = 4"
    assert first_sentence("My number is 3") == "My number is 3"
    r = load_task("arith:split", "test", limit=1)[0]
    heard = followup_message(r, 0, ["My number is 3. The answer is 7."])
    assert '"My number is 3." Find ' in heard and "answer is 7" not in heard


def test_run_debate_shows_each_agent_its_own_view_and_silent_changes_only_partner_messages():
    tok, model = load_tokenizer("tiny"), load_model("tiny")
    records = load_task("arith:split", "test", limit=2, num_agents=2)
    kwargs = dict(max_new_tokens=6, greedy=True, prompt_style="short")
    names = [["__base__"] * 2] * 2
    debate = cotrain.run_debate(records, [model] * 2, [tok] * 2, names, **kwargs)
    silent = cotrain.run_debate(records, [model] * 2, [tok] * 2, names,
                                show_partner=neutral_message, **kwargs)
    for b, r in enumerate(records):
        for a in range(2):
            # turn 1: the agent's own view as the whole message, untouched by the control
            assert debate.prompts[b][0][a] == chat_prompt(tok, [
                {"role": "user", "content": r["views"][a]}])
            assert silent.prompts[b][0][a] == debate.prompts[b][0][a]
            # turn 2: a fresh chat, its number and the partner's message; silent: a neutral one
            partner = debate.responses[b][0][1 - a]
            assert debate.prompts[b][1][a] == chat_prompt(tok, [
                {"role": "user", "content": followup_message(r, a, [partner])}])
            assert silent.prompts[b][1][a] == chat_prompt(tok, [
                {"role": "user", "content": followup_message(r, a, [neutral_message(partner)])}])
            assert r["views"][a] not in debate.prompts[b][1][a]  # no turn-1 history
    assert torch.equal(debate.correct[:, 0], silent.correct[:, 0])  # the same turn 1
    # the generated ids are the prompt's own tokens: no continued chat at turn 2
    ro = debate.rollout[(1, 0)]
    prompt_ids = ro["query_ids"][0][ro["query_mask"][0].bool()].tolist()
    assert prompt_ids == tok(debate.prompts[0][1][0], add_special_tokens=False)["input_ids"]


def test_the_silent_partner_from_turn_2_is_the_whole_silent_debate():
    """split_controls' cheaper path: a debate on from_second_turn's records, on the adapters of
    turns 2..T, is turns 2..T of the silent debate played whole, prompt for prompt and token for
    token. Three turns (a silent turn feeds the next), a LoRA per (turn, agent) with random B."""
    tok = load_tokenizer("tiny")
    names = [[f"agent{a}_turn{t}" for a in range(2)] for t in range(1, 4)]
    torch.manual_seed(0)  # make_peft's LoRA A matrices draw from the global generator: the same
    # adapters whatever ran before (the two != below depend on them)
    model = make_peft([n for turn in names for n in turn])
    records = load_task("arith:split", "test", limit=3, num_agents=2)
    play = dict(max_new_tokens=6, greedy=True, prompt_style="short")
    debate = cotrain.run_debate(records, [model] * 2, [tok] * 2, names, **play)
    whole = cotrain.run_debate(records, [model] * 2, [tok] * 2, names,
                               show_partner=neutral_message, **play)
    later = cotrain.run_debate(from_second_turn(records, debate, neutral_message), [model] * 2,
                               [tok] * 2, names[1:], show_partner=neutral_message, **play)
    def turn(texts, t):  # [b][a] of one turn
        return [per_question[t] for per_question in texts]
    assert turn(whole.responses, 0) == turn(debate.responses, 0)  # turn 1: no partner words yet
    assert turn(whole.responses, 1) != turn(debate.responses, 1)  # the control changes turn 2
    for t in (1, 2):
        assert turn(later.prompts, t - 1) == turn(whole.prompts, t)
        assert turn(later.responses, t - 1) == turn(whole.responses, t)
        for a in range(2):
            for key, value in whole.rollout[(t, a)].items():
                if key != "as_sampled":  # the chat's history, not its tokens: a replay has none
                    assert torch.equal(later.rollout[(t - 1, a)][key], value), (t, a, key)
    assert torch.equal(later.correct, whole.correct[:, 1:])
    # on the adapters of turns 1..2 instead the answers differ: the test sees the adapters
    same = cotrain.run_debate(from_second_turn(records, debate, neutral_message), [model] * 2,
                              [tok] * 2, names[:2], show_partner=neutral_message, **play)
    assert same.responses != later.responses


def test_split_controls_in_the_held_out_evaluation(tmp_path):
    from test_cotrain import ascii_fraction, tiny_args
    import json

    args = tiny_args("--max-steps", "1", "--dataset", "arith:split", "--eval-questions", "4",
                     "--output-dir", str(tmp_path / "run"), "--prompt-style", "short")
    run = cotrain.main(args, score_fn=ascii_fraction)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/turn2/agent_accuracy" in r]
    assert len(evals) == 2  # before and after
    for row in evals:
        for key in ("eval/turn1/informative", "eval/turn2/informative", "eval/turn1/heard",
                    "eval/turn2/heard", "eval/whole_question/accuracy",
                    "eval/silent/turn1/agent_accuracy", "eval/silent/turn2/agent_accuracy",
                    "eval/shuffled/turn2/agent_accuracy", "eval/oracle/turn2/agent_accuracy",
                    "eval/wrong/turn2/agent_accuracy", "eval/wrong/turn2/follows",
                    "eval/no_information_bound"):
            assert 0.0 <= row[key] <= 1.0, key
        for t in (1, 2):  # the first sentence is a part of the message
            assert row[f"eval/turn{t}/heard"] <= row[f"eval/turn{t}/informative"]
        # turn 1 of the silent run is the same greedy turn 1
        assert row["eval/silent/turn1/agent_accuracy"] == row["eval/turn1/agent_accuracy"]


def split_record(kind: str, parts: list[int]) -> dict:
    """A hand-made arith:split record with the fields of a real one: its gold, kind, parts, drawn
    numbers (1 to 12), opening sentence, a view and a followup per agent."""
    gold = sum(parts) if kind == "sum" else max(parts) - min(parts)
    return dict(id=f"hand/{kind}/{parts}", task="math", question=f"{kind} {parts}",
                answer=str(gold), parts=parts, kind=kind, canonical="My number is {}.",
                numbers=[1, 12], views=[f"Your number is {x}." for x in parts],
                followups=[f"Your number is {x}. Your partner says: {{said}} Find the {kind}."
                           for x in parts])


def test_no_information_bound_by_hand():
    # a sum of two: any of the 12 results, whatever one's own number: 1/12 a seat
    assert no_information_bound([split_record("sum", [3, 5])]) == pytest.approx(1 / 12)
    # 5 - 3 = 2. Seat 0 holds 5: |5 - y| is 1, 2, 3 or 4 twice each (2 among the 4 best);
    # seat 1 holds 3: 1 and 2 twice each (2 among the 2 best)
    assert no_information_bound([split_record("difference", [5, 3])]) == pytest.approx(
        (1 / 4 + 1 / 2) / 2)
    # 9 - 1 = 8: from 1 every difference 0..11 once (1/12); from 9, 1, 2 and 3 twice each, 8 once
    assert no_information_bound([split_record("difference", [1, 9])]) == pytest.approx(1 / 24)
    # three agents, 6 + 7 + 6: two partners' sum is most often 13 (12 of 144), so 19 from a 6
    # (seats 0 and 2), 20 from the 7
    assert no_information_bound([split_record("sum", [6, 7, 6])]) == pytest.approx(2 / 3)
    mixed = [split_record("sum", [3, 5]), split_record("difference", [5, 3])]
    assert no_information_bound(mixed) == pytest.approx(float(
        (Fraction(1, 12) * 2 + Fraction(1, 4) + Fraction(1, 2)) / 4))
    # a fixed rule cannot beat it on the held-out problems (sum: own + 6, difference: 2)
    records = load_task("arith:split", "test", limit=None)
    rule = [int(r["answer"]) == (x + 6 if "sum" in r["question"] else 2)
            for r in records for x in r["parts"]]
    assert sum(rule) / len(rule) <= no_information_bound(records)


def test_wrong_number_is_never_the_true_one_and_never_gives_the_gold():
    for y in range(1, 13):
        assert wrong_number(y) != y and 1 <= wrong_number(y) <= 12
        for x in range(1, 13):
            assert x + wrong_number(y) != x + y and abs(x - wrong_number(y)) != abs(x - y)


def test_the_control_messages_are_the_canonical_sentences_and_the_shuffled_partners():
    records = [split_record("sum", [3, 5]), split_record("difference", [9, 2])]
    debate = SimpleNamespace(responses=[[["My number is 3. So 8.", "I hold 5."]],
                                        [["Mine is 9.", "My number is 2. The answer is 7."]]])
    assert control_messages(records, debate, "oracle") == [
        [["My number is 5."], ["My number is 3."]], [["My number is 2."], ["My number is 9."]]]
    assert control_messages(records, debate, "wrong") == [
        [["My number is 6."], ["My number is 4."]], [["My number is 3."], ["My number is 10."]]]
    assert control_messages(records, debate, "shuffled") == [
        [["My number is 2. The answer is 7."], ["Mine is 9."]],
        [["I hold 5."], ["My number is 3. So 8."]]]
    replayed = replay_records(records, control_messages(records, debate, "wrong"))
    assert replayed[0]["views"] == [
        'Your number is 3. Your partner says: "My number is 6." Find the sum.',
        'Your number is 5. Your partner says: "My number is 4." Find the sum.']
    # every later turn the same words, whatever the partner says then
    for r, old in zip(replayed, records):
        for a in range(2):
            assert followup_message(r, a, ["My number is 1."]) == r["views"][a]
        assert {k: v for k, v in r.items() if k not in ("views", "followups")} == \
            {k: v for k, v in old.items() if k not in ("views", "followups")}
    # the canonical sentence is the one each real view asks its agent to start with
    for r in load_task("arith:split", "test", limit=5):
        for a, x in enumerate(r["parts"]):
            assert f'Start with "{r["canonical"].format(x)}"' in r["views"][a]


def test_the_shuffled_source_is_never_the_same_problem():
    records = [split_record("sum", [1, 2]), split_record("sum", [1, 2]),
               split_record("sum", [4, 2]), split_record("difference", [4, 2])]
    assert shuffled_sources(records) == [2, 2, 3, 0]
    held = load_task("arith:split", "test", limit=40)
    sources = shuffled_sources(held)
    assert sources == [(b + 1) % 40 for b in range(40)]  # each problem once: roll by one
    assert all(held[s]["question"] != r["question"] for s, r in zip(sources, held))


def test_a_seat_swap_is_never_a_shuffled_source():
    # three agents: from 1 + 3 + 2, agent 0 of 1 + 2 + 3 would hear 2 and 3, its partners' true
    # numbers; 3 + 2 + 1 and 2 + 1 + 3 are the same problem too; 1 + 2 + 4 is another
    records = [split_record("sum", [1, 2, 3]), split_record("sum", [1, 3, 2]),
               split_record("sum", [3, 2, 1]), split_record("sum", [1, 2, 4]),
               split_record("sum", [2, 1, 3])]
    assert shuffled_sources(records) == [3, 3, 3, 4, 3]
    debate = SimpleNamespace(responses=[[[f"My number is {x}." for x in r["parts"]]]
                                        for r in records])
    heard = control_messages(records, debate, "shuffled")
    assert heard[0][0] == ["My number is 2.", "My number is 4."]  # 1 + 2 + 4's partners
    # two agents: from 5 + 3, the agent of 3 in 3 + 5 hears 3, its own number: a source
    assert shuffled_sources([split_record("sum", [3, 5]), split_record("sum", [5, 3]),
                             split_record("sum", [3, 5])]) == [1, 2, 1]
    # the held-out problems of three agents: the next one, unless it is a seat-swap
    held = load_task("arith:split", "test", limit=None, num_agents=3)
    sources = shuffled_sources(held)
    numbers = [sorted(r["parts"]) for r in held]
    assert all(numbers[s] != numbers[b] for b, s in enumerate(sources))
    swaps = [b for b in range(len(held) - 1) if numbers[b + 1] == numbers[b]]
    assert swaps and all(sources[b] == b + 2 for b in swaps)


def test_follows_counts_the_answers_computed_with_the_heard_number():
    records = [split_record("sum", [3, 5]), split_record("difference", [5, 9])]
    # heard 6 (3 + 6 = 9) and 4 (5 + 4 = 9); heard 10 (|5 - 10| = 5) and 6 (|9 - 6| = 3)
    replay = SimpleNamespace(answers=[[["9", "8"], ["9", "9"]], [["5", None], ["4", "3"]]])
    assert follows_rates(replay, records) == [2 / 4, 3 / 4]


def test_split_controls_replay_every_control_from_the_played_turn_1():
    """split_controls on the tiny model, three turns: every key, each control's replay on the
    adapters of turns 2..T with its partner words at every turn, and evaluate.py's path (a greedy
    turn 1 played first) the same numbers."""
    tok = load_tokenizer("tiny")
    names = [[f"agent{a}_turn{t}" for a in range(2)] for t in range(1, 4)]
    model = make_peft([n for turn in names for n in turn])
    records = load_task("arith:split", "test", limit=3, num_agents=2)
    debate = cotrain.run_debate(records, [model] * 2, [tok] * 2, names, max_new_tokens=6,
                                greedy=True, prompt_style="short")
    team = SimpleNamespace(models=lambda: [model] * 2, agent_tokenizers=lambda: [tok] * 2,
                           adapter_names=names)
    args = SimpleNamespace(prompt_style="short", generate_batch_size=0, max_new_tokens=6)
    calls = []

    def play(recs, models, tokenizers, adapter_names, *a, **kw):
        calls.append((adapter_names, cotrain.run_debate(recs, models, tokenizers, adapter_names,
                                                        *a, **kw)))
        return calls[-1][1]

    metrics = split_controls(play, team, args, records, debate)
    keys = {f"eval/{c}/turn{t}/agent_accuracy" for c in ("shuffled", "oracle", "wrong")
            for t in (2, 3)} | {"eval/wrong/turn2/follows", "eval/wrong/turn3/follows",
                                "eval/no_information_bound", "eval/whole_question/accuracy"}
    keys |= {f"eval/silent/turn{t}/agent_accuracy" for t in (1, 2, 3)}
    keys |= {f"eval/turn{t}/{k}" for t in (1, 2, 3) for k in ("informative", "heard")}
    assert set(metrics) == keys and all(0.0 <= v <= 1.0 for v in metrics.values())
    assert metrics["eval/no_information_bound"] == no_information_bound(records)
    assert [n for n, _ in calls] == [names[1:]] * 4 + [[names[0][:1]]]
    silent, shuffled, oracle, wrong = (played for _, played in calls[:4])
    heard = {"shuffled": control_messages(records, debate, "shuffled"),
             "oracle": [[[r["canonical"].format(r["parts"][1 - a])] for a in range(2)]
                        for r in records],
             "wrong": [[[r["canonical"].format(wrong_number(r["parts"][1 - a]))]
                        for a in range(2)] for r in records]}
    for control, played in (("shuffled", shuffled), ("oracle", oracle), ("wrong", wrong)):
        for b, r in enumerate(records):
            for t in range(2):  # turns 2 and 3
                for a in range(2):
                    assert played.prompts[b][t][a] == chat_prompt(tok, [{"role": "user", "content":
                        followup_message(r, a, heard[control][b][a])}]), (control, b, t, a)
        assert metrics[f"eval/{control}/turn3/agent_accuracy"] == pytest.approx(
            played.correct[:, 1].mean().item())
    assert metrics["eval/wrong/turn2/follows"] == follows_rates(wrong, records)[0]
    assert silent.prompts[0][0][0] != oracle.prompts[0][0][0]
    calls.clear()
    assert split_controls(play, team, args, records, debate, greedy_debate=False) == metrics
    assert [n for n, _ in calls][0] == names[:1]  # evaluate.py's: a greedy turn 1 first


def test_whole_question_drops_only_the_views_and_followups():
    r = load_task("arith:split", "test", limit=1)[0]
    whole = whole_question(r)
    kept = {k: v for k, v in r.items() if k not in ("views", "followups")}
    assert "views" in r and "followups" in r and kept == whole


# ---------------------------------------------------------------- MAGRPO teamwork


def test_teamwork_reward_on_hand_made_answers():
    p = dict(family="numbers", items=["30", "57"])
    assert teamwork_reward(p, ["You choose 30.", "57"]) == (1.0, dict(
        coverage=1.0, overlap=0.0, extras=0.0, solved=1.0))
    assert teamwork_reward(p, ["57", "30"])[1]["solved"] == 1.0  # either convention solves it
    # the same item twice: half the pair taken, and no worse than keeping quiet
    assert teamwork_reward(p, ["30", "30"]) == (0.5, dict(coverage=0.5, overlap=1.0, extras=0.0,
                                                          solved=0.0))
    assert teamwork_reward(p, ["30", "I pass."]) == (0.5, dict(coverage=0.5, overlap=0.0,
                                                               extras=0.0, solved=0.0))
    # the choice is the first item written; the rest are extras (naming both is no choice)
    reward, levels = teamwork_reward(p, ["30 or 57", "57"])
    assert reward == (2 - 1) / 2 and levels == dict(coverage=1.0, overlap=0.0, extras=0.5,
                                                    solved=0.0)
    # a choice outside the pair is an extra too (the seat's "1" here), and so is the 30 after it
    assert teamwork_reward(p, ["I am player 1: 30", "57"])[0] == (1 - 2) / 2
    assert teamwork_reward(p, ["1 2 3 4", "5 6 7 8"])[0] == -1.0  # floored
    letters = dict(family="letters", items=["D", "K"])
    assert listed_items("D. I am agent 1, K", "letters") == ["D", "K"]
    # "I" and "A" are words, never items: the answer's item is the letter after them
    assert listed_items("I choose O.", "letters") == ["O"]
    assert listed_items("A: K. I'm player 2", "letters") == ["K"]
    assert teamwork_reward(letters, ["I choose D.", "I take K"]) == (1.0, dict(
        coverage=1.0, overlap=0.0, extras=0.0, solved=1.0))
    assert teamwork_reward(letters, ["I choose O.", "K"])[0] == (1 - 1) / 2  # O: outside the pair
    assert teamwork_reward(letters, ["D", "My choice: K"])[1]["solved"] == 1.0
    colours = dict(family="colours", items=["red", "blue"])
    assert listed_items("Red! Not bluegreen, blue", "colours") == ["red", "blue"]
    assert teamwork_reward(colours, ["Blue.", "red"])[1]["solved"] == 1.0


def test_teamwork_prompts_differ_only_by_the_seat_and_held_out_is_disjoint():
    train, held = teamwork_problems("train"), teamwork_problems("eval")
    pairs = lambda problems: {frozenset(p["items"]) for p in problems}  # noqa: E731
    assert not pairs(train) & pairs(held)  # no held-out pair in training, in either order
    assert len(pairs(held)) == len(held) == 110 and len(train) == 295
    assert {p["family"] for p in held[:40]} == {"numbers", "letters", "colours"}
    assert teamwork_problems("eval") == held  # fixed, whatever the seed
    first, second = teamwork_prompts(held[0])
    a, b = held[0]["items"]
    assert first.startswith(f"Choose one: {a} or {b}?")
    assert first.replace("player 1.", "player 2.") == second != first


def test_teamwork_baselines_a_positional_rule_solves_every_pair_and_a_coin_half():
    """docs/results/teamwork_baselines.py on magrpo.py's held-out pairs: player 1 takes the
    first-named item and player 2 the second (every pair solved, reward 1), or each player one
    of the two at random (exactly half the joint answers solve it, reward 0.75 expected)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "docs" / "results" / "teamwork_baselines.py"
    spec = importlib.util.spec_from_file_location("teamwork_baselines", path)
    baselines = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(baselines)
    held = baselines.held_out_pairs()
    assert held == teamwork_problems("eval")[:40]  # the recipe's eval_problems
    assert baselines.positional_rule(held) == (1.0, 1.0)
    assert baselines.random_choice(held) == (0.5, 0.75)
    assert baselines.random_choice(baselines.held_out_pairs(0))[0] == 0.5  # all 110 pairs
