"""magrpo.py's tasks (nanomarl/tasks/) on hand-made inputs: the gated TLDR/arXiv writing rewards level by
level, the 4-level aux/main code reward (structure, syntax, tests, cooperation bonus and the AST "result
unused" penalty), the code helpers, the level feedback text, the prompts and the problem loaders."""
import json

import pytest

from magrpo import format_prompts
from nanomarl.tasks.code import (aux_result_unused, cleanup_code, code_reward, extract_function,
                                 extract_imports, extract_tests, is_thin_wrapper)
from nanomarl.tasks.code_prompts import (aux_prompt, level_feedback, main_prompt, plain_feedback, printable,
                                         select_tests)
from nanomarl.tasks.problems import load_problems
from nanomarl.tasks.writing import arxiv_reward, tldr_reward, transition_score

# ----------------------------------------------------------------------------------------------
# writing rewards
# ----------------------------------------------------------------------------------------------

C1 = "q1 q2 q3 q4 q5 q6 q7 q8"  # 8 tokens, 8 unique words, 23 characters, no transition phrase


def test_tldr_structure_gate():
    assert tldr_reward("too short", C1 + " " + C1) == (0.0, dict(structure=0.0, coordination=0.0, vocabulary=0.0,
                                                                 style=0.0))
    long = " ".join(["w"] * 257)  # 257 tokens: above the 256 limit
    assert tldr_reward(C1, long)[0] == 0.0


def test_tldr_length_gate_stops_outside_1_1_to_5():
    total, levels = tldr_reward(C1, C1)  # ratio 1.0
    assert total == 0.5 and levels["coordination"] == 0.0 and levels["vocabulary"] == 0.0


def test_tldr_vocabulary_gate_stops_below_1_3():
    total, levels = tldr_reward(C1, C1 + " " + C1)  # ratio 47/23 = 2.04 -> 1.0; unique words 8/8 = 1.0 -> stop
    assert total == 1.5 and levels == dict(structure=0.5, coordination=1.0, vocabulary=0.0, style=0.0)


def test_tldr_all_four_levels():
    # 17 tokens, 60 characters (ratio 60/23 = 2.61 -> 1.0), 17 unique words (17/8 = 2.125 -> 0.5);
    # "however" is in 2 categories (contrast, concession) -> T = 0.45; stopword-free Jaccard 2/23 > 0.03 -> 1.0
    c2 = "q1 q2 however " + " ".join(f"r{i}" for i in range(1, 15))
    assert len(c2) == 60
    total, levels = tldr_reward(C1, c2)
    assert levels["structure"] == 0.5 and levels["coordination"] == 1.0 and levels["vocabulary"] == 0.5
    assert levels["style"] == pytest.approx(0.4 * 0.45 + 0.6 * 1.0)
    assert total == pytest.approx(2.78)


def test_tldr_ramps():
    # 32 characters: ratio 32/23 -> (32/23 - 1.1)/0.5; 11 unique words: 11/8 = 1.375 -> 0.5·(1.375-1.3)/0.7;
    # no transition phrase; Jaccard: {q1, q2} shared out of 17 words = 2/17 -> capped at 0.03 -> 1.0
    c2 = "q1 q2 t1 t2 t3 t4 t5 t6 t7 t8 t9"
    assert len(c2) == 32 and len(set(c2.split())) == 11
    total, levels = tldr_reward(C1, c2)
    assert levels["coordination"] == pytest.approx((32 / 23 - 1.1) / 0.5)
    assert levels["vocabulary"] == pytest.approx(0.5 * (11 / 8 - 1.3) / 0.7)
    assert levels["style"] == pytest.approx(0.6)
    # ratio above the optimum: 3.2 < 95/23 = 4.13 <= 5 -> 1 - (95/23 - 3.2)/1.8
    c2 = " ".join(f"z{i}" for i in range(10, 34))  # 24 tokens of 3 characters -> 95 characters
    assert len(c2) == 95 and tldr_reward(C1, c2)[1]["coordination"] == pytest.approx(1 - (95 / 23 - 3.2) / 1.8)


def test_transition_categories_are_substrings():
    assert transition_score("nothing here") == 0.0
    assert transition_score("however") == pytest.approx(0.45)  # contrast + concession
    # "as" (time) matches inside "basket": the authors' substring matching, kept on purpose
    assert transition_score("basket") == pytest.approx(0.4)


def make_arxiv(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i:03d}" for i in range(n))  # n tokens of 4 characters


def test_arxiv_levels():
    c1 = make_arxiv("p", 150)  # 150 tokens, 749 characters
    c2 = make_arxiv("p", 100) + " " + make_arxiv("s", 100)  # 200 tokens, 999 characters, 100 shared words
    assert len(c1) == 749 and len(c2) == 999
    total, levels = arxiv_reward(c1, c2)
    # ratio 999/749 = 1.334 in [1.3, 1.6] -> 1.0; unique 200/150 = 1.333 in (1.3, 1.7] -> 0.5·(1 - 0.0333/0.4);
    # no transitions in c1+c2 -> T = 0; Jaccard 100/250 = 0.4 -> capped at 0.23 -> 1.0
    assert levels["structure"] == 0.5 and levels["coordination"] == 1.0
    assert levels["vocabulary"] == pytest.approx(0.5 * (1 - (200 / 150 - 1.3) / 0.4))
    assert levels["style"] == pytest.approx(0.6)
    assert total == pytest.approx(0.5 + 1.0 + 0.5 * (1 - (200 / 150 - 1.3) / 0.4) + 0.6)
    # structure: 127 tokens is too short for arXiv (128..256)
    assert arxiv_reward(make_arxiv("p", 127), c2)[0] == 0.0
    # length ratio 1.0 -> ramp (1.0 - 0.8)/0.5 = 0.4; unique 1.0 -> 0.5; transitions checked on c1 + c2:
    # "however" in c2 -> 0.45; Jaccard of identical word sets (plus 'however') 150/151 -> 1.0
    c2 = make_arxiv("p", 149) + " however"  # 150 tokens, 749 - 4 + 7 = 752 characters
    total, levels = arxiv_reward(c1, c2)
    assert levels["coordination"] == pytest.approx((752 / 749 - 0.8) / 0.5)
    assert levels["vocabulary"] == 0.5 and levels["style"] == pytest.approx(0.4 * 0.45 + 0.6)
    # vocabulary out of range: 150 tokens (ratio 1.0), 71 unique words: 71/150 = 0.47 < 0.5 -> stop
    c2 = " ".join([f"p{i:03d}" for i in range(70)] * 2 + ["p999"] * 10)
    assert arxiv_reward(c1, c2)[1]["vocabulary"] == 0.0


# ----------------------------------------------------------------------------------------------
# code reward
# ----------------------------------------------------------------------------------------------

ADD = dict(id="toy/add", kind="code", entry_point="add",
           prompt='import math\nfrom typing import List\n\n\ndef add(a: int, b: int) -> int:\n'
                  '    """Return a + b."""\n',
           test="\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate(1, 2) == 3\n"
                "    assert candidate(0, 0) == 0\n    assert candidate(0, 0) == 0\n    assert candidate(-1, 5) == 4\n")
AUX = "def aux(a, b):\n    return a + b\n"
MAIN_USES_AUX = "def add(a, b):\n    total = aux(a, b)\n    if total is None:\n        return 0\n    return total\n"


def reward(aux: str, main: str) -> tuple[float, dict]:
    return code_reward(aux, main, ADD, timeout=2.0, memory_mb=256)


def test_code_reward_level_1_stops_without_main():
    total, levels = reward(AUX, "I cannot solve this.")
    assert total == pytest.approx(0.4) and levels["syntax"] == 0.0
    assert reward("no helper", "def add(a, b):\n    print(a + b)\n")[0] == 0.0  # main without a return


def test_code_reward_level_2_stops_on_a_syntax_error():
    total, levels = reward("", "def add(a, b):\n    return a +\n")
    assert total == pytest.approx(0.6) and levels == dict(structure=0.6, syntax=0.0, tests=0.0, cooperation=0.0,
                                                          tests_passed=0, tests_total=0)


def test_code_reward_level_3_counts_passed_asserts():
    total, levels = reward("", "def add(a, b):\n    return a + b\n")  # no aux: no cooperation bonus
    assert (levels["tests_passed"], levels["tests_total"]) == (3, 3)  # the duplicated assert counts once
    assert total == pytest.approx(0.6 + 0.5 + 1.0)
    total, levels = reward(AUX, "def add(a, b):\n    return a + b if a >= 0 else 0\n")  # fails add(-1, 5)
    assert levels["tests_passed"] == 2 and levels["cooperation"] == 0.0  # main does not call aux
    assert total == pytest.approx(0.4 + 0.6 + 0.5 + 2 / 3)


def test_code_reward_cooperation_bonus():
    assert reward(AUX, MAIN_USES_AUX) == (pytest.approx(4.0), dict(structure=1.0, syntax=0.5, tests=1.0,
                                                                   cooperation=1.5, tests_passed=3, tests_total=3))
    # a thin wrapper: +0.5 only
    assert reward(AUX, "def add(a, b):\n    return aux(a, b)\n")[0] == pytest.approx(3.0)
    assert reward(AUX, "def add(a, b):\n    s = aux(a, b)\n    return s\n")[0] == pytest.approx(3.0)
    # aux called but its result thrown away: +0.5 +1.0 -0.5
    total, levels = reward(AUX, "def add(a, b):\n    aux(a, b)\n    return a + b\n")
    assert levels["cooperation"] == pytest.approx(1.0) and total == pytest.approx(3.5)
    # calls aux but no test passes: no bonus at all
    total, levels = reward(AUX, "def add(a, b):\n    return aux(a, b) + 1\n")
    assert levels["tests_passed"] == 0 and levels["cooperation"] == 0.0 and total == pytest.approx(1.5)


def test_code_reward_cleans_markdown_and_prose():
    aux = "Here is the helper function:\n```python\n" + AUX + "```\nIt adds the numbers."
    main = "```python\n" + MAIN_USES_AUX + "\n\nprint(add(1, 2))\n```"
    assert reward(aux, main)[0] == pytest.approx(4.0)


def test_code_reward_program_that_fails_to_load():
    # main's own body is fine, but the combined program crashes when it is defined (aux raises at import)
    aux = "def aux(a, b):\n    return a + b\nraise SystemExit(0)\n"  # the raise is outside aux: cleanup drops it
    assert reward(aux, MAIN_USES_AUX)[0] == pytest.approx(4.0)
    main = "def add(a, b, c=undefined_name):\n    return a + b\n"  # NameError when the def runs
    total, levels = reward(AUX, main)
    assert levels["tests_total"] == 3 and levels["tests_passed"] == 0 and total == pytest.approx(1.5)


# ----------------------------------------------------------------------------------------------
# helpers, feedback, prompts, loaders
# ----------------------------------------------------------------------------------------------


def test_cleanup_and_extraction():
    text = "Sure! Here is my answer:\n```python\ndef aux(x):\n    '''Doc.'''\n    return x * 2\n```\nThanks."
    assert cleanup_code(text) == "def aux(x):\n    '''Doc.'''\n    return x * 2"
    assert cleanup_code("no code at all") == ""
    two = "def helper(y):\n    return y\n\ndef add(a, b):\n    return helper(a) + b\nprint(1)\n"
    assert extract_function(two, "add") == "def add(a, b):\n    return helper(a) + b"
    assert extract_function(two, "aux") == ""
    assert extract_imports(ADD["prompt"]) == "import math\nfrom typing import List"
    assert extract_tests(ADD["test"], "add") == ["assert add(1, 2) == 3", "assert add(0, 0) == 0",
                                                 "assert add(-1, 5) == 4"]
    assert select_tests(["a", "b", "c"], 1) == ["a"] and select_tests(["a", "b", "c"], -2) == ["b", "c"]
    assert select_tests(["a", "b", "c"], 0) == ["a", "b", "c"]


def test_thin_wrapper_and_unused_result_checks():
    assert is_thin_wrapper('def f(x):\n    """Doc."""\n    # comment\n    return aux(x)\n')
    assert is_thin_wrapper("def f(x):\n    r = aux(x)\n    return r\n")
    assert not is_thin_wrapper("def f(x):\n    r = aux(x)\n    return r + 1\n")
    assert aux_result_unused("def f(x):\n    aux(x)\n    return x\n") == ["Line 2: standalone call (not assigned)"]
    assert aux_result_unused("def f(x):\n    r = aux(x)\n    return x\n") == ["Line 2: assigned to r but never used"]
    assert aux_result_unused("def f(x):\n    r = aux(x)\n    r = 3\n    return r\n") == [
        "Line 2: assigned to r but reassigned on line 3 before use"]
    assert aux_result_unused("def f(x):\n    r = aux(x)\n    return [r, aux(x)]\n") == []


def test_level_feedback_reports_syntax_tests_and_aux_usage():
    history = [["aux prompt turn 1"], ["main prompt turn 1"]]
    aux_prompt_2, main_prompt_2 = level_feedback(ADD, history, [[AUX], ["def add(a, b):\n    return (a +\n"]],
                                                 timeout=2.0, memory_mb=256)
    assert "History: previous prompts:\n- Turn 1 prompt:\naux prompt turn 1" in aux_prompt_2
    assert "History: your previous aux(...) responses:\n- Turn 1 response:\n" + AUX in aux_prompt_2
    assert "- Syntax: ERROR" in main_prompt_2 and "SyntaxError at line 8, col 12: '(' was never closed" in main_prompt_2
    assert "- Tests: no test cases found" in main_prompt_2
    assert aux_prompt_2.endswith("\nRevise your aux(...) accordingly. Output ONLY the function code with no "
                                 "extra text.")
    # a wrong main that calls aux: only the FIRST assert is run and reported by default
    _, main_prompt_2 = level_feedback(ADD, history, [[AUX], ["def add(a, b):\n    return aux(a, b) - 1\n"]],
                                      timeout=2.0, memory_mb=256)
    assert "- Tests: 0/1 passed\n  Failed case: assert add(1, 2) == 3 -> AssertionError: " in main_prompt_2
    assert "- Aux usage: main calls aux and uses its result" in main_prompt_2
    assert "- Main definition: FOUND (Main function (add) properly defined with return statement)" in main_prompt_2
    assert main_prompt_2.endswith("Revise your add(...) accordingly. Output ONLY the function code with no extra text.")
    _, main_prompt_2 = level_feedback(ADD, history, [[AUX], ["def add(a, b):\n    return aux(a, b)\n"]],
                                      num_tests=0, timeout=2.0, memory_mb=256)
    assert "- Tests: 3/3 passed" in main_prompt_2 and "thin wrapper" in main_prompt_2
    plain = plain_feedback(ADD, history, [[AUX], ["x"]])
    assert "Static" not in plain[1] and plain[1].endswith("Revise your add(...) accordingly. Output ONLY the "
                                                          "function code with no extra text.")


def test_level_feedback_strips_control_bytes_a_program_writes():
    """An exception's message reaches the next prompt as text, never as terminal control: escape
    sequences, NUL and DEL are dropped, the message's words and its newlines kept."""
    history = [["aux prompt turn 1"], ["main prompt turn 1"]]
    hostile = "def add(a, b):\n    raise ValueError('\\x1b[2J\\x1b]0;pwned\\x07gone\\x00\\x7f!')\n"
    _, main_prompt_2 = level_feedback(ADD, history, [[AUX], [hostile]], timeout=2.0,
                                      memory_mb=256)
    assert "-> ValueError: [2J]0;pwnedgone!" in main_prompt_2
    assert not any(ch in main_prompt_2 for ch in "\x1b\x07\x00\x7f")
    assert printable("a\tb\nc\x1b[0m\x9b") == "a\tb\nc[0m"


def test_prompts_follow_the_authors_formatters():
    aux, main = format_prompts(ADD)
    assert aux.startswith("Create a helper function for this coding problem.\n\nProblem:\n" + ADD["prompt"])
    assert aux.endswith("format:\n\ndef aux(...):\n # your function code here\nreturn result\n")  # newlines, no "\\n"
    assert "- Implement ONLY the 'add' function as specified\n" in main
    assert main.endswith("format:\n\ndef add(a: int, b: int):\n # your function code here\nreturn result\n")
    assert "\\" not in aux + main
    error = "Error: Could not extract function information from prompt."
    assert aux_prompt(dict(ADD, prompt="no function here")) == error
    assert main_prompt(dict(ADD, prompt="def f():\n")) == error
    summary, detail = format_prompts(dict(kind="tldr", text="POST"))
    assert summary.startswith("Create a concise summary response to this post.\n\nQuery:\nPOST\n")
    assert detail.endswith("- Use more unique words\n- Use some transition words to improve flow\n")


def test_problem_loaders(tmp_path):
    train, evaluation = load_problems("humaneval", "train"), load_problems("humaneval", "eval")
    assert len(train) == 130 and len(evaluation) == 32
    assert (train[0]["id"], train[-1]["id"], evaluation[-1]["id"]) == ("HumanEval/33", "HumanEval/162", "HumanEval/31")
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps(dict(prompt=ADD["prompt"], test=ADD["test"], entry_point="add")) + "\n")
    # one row: in the train or the held-out split, by a hash of its prompt
    assert [p["kind"] for split in ("train", "eval") for p in load_problems(f"jsonl:{path}", split)] == ["code"]
    path.write_text(json.dumps({"abstract_text": "abc"}) + "\n" + json.dumps({"prompt": "post"}) + "\n")
    with pytest.raises(SystemExit, match="different schemas"):
        load_problems(f"jsonl:{path}")
    path.write_text(json.dumps({"title": "x"}) + "\n")
    with pytest.raises(SystemExit, match="row 1"):
        load_problems(f"jsonl:{path}")
