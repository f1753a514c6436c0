"""minicode (nanomarl/tasks/minicode.py): held-out problems from families never trained on, asserts
that are neither printed in the prompt nor passed by a main that calls aux but computes something
else, and main = g(aux(x)): canonical aux + main pairs (written here, independently of the
package's reference functions) get the full code reward, `return None` gets no test."""
import ast
import difflib

import pytest

from nanomarl.tasks.code import code_reward, extract_tests
from nanomarl.tasks.code_prompts import aux_prompt, main_prompt
from nanomarl.tasks.minicode import minicode_problems
from nanomarl.tasks.problems import load_problems

TRAIN, HELD = minicode_problems("train"), minicode_problems("eval")
PROBLEMS = {p["entry_point"]: p for p in TRAIN + HELD}

AUX = {
    "digits": "def aux(n):\n    return [int(c) for c in str(abs(n))]\n",
    "above": "def aux(numbers, k):\n    return [x for x in numbers if x > k]\n",
    "vowels": "def aux(word):\n    return len([c for c in word.lower() if c in 'aeiou'])\n",
    "words": "def aux(text):\n    return [w.lower() for w in text.split(' ') if w]\n",
    "divisors": "def aux(n):\n    return [d for d in range(1, n + 1) if n % d == 0]\n",
    "unique": ("def aux(items):\n    out = []\n    for x in items:\n        if x not in out:\n"
               "            out.append(x)\n    return out\n"),
    "clamp": "def aux(x, low, high):\n    return max(low, min(high, x))\n",
    "char_counts": ("def aux(text):\n    counts = {}\n    for c in text:\n"
                    "        counts[c] = counts.get(c, 0) + 1\n    return counts\n"),
    "positions": ("def aux(items, value):\n"
                  "    return [i for i in range(len(items)) if items[i] == value]\n"),
    "binary": ("def aux(n):\n    if n == 0:\n        return '0'\n    s = ''\n    while n:\n"
               "        s = str(n % 2) + s\n        n //= 2\n    return s\n"),
    "reverse": "def aux(text):\n    return ''.join(reversed(text))\n",
    "steps": ("def aux(numbers):\n"
              "    return [numbers[i] - numbers[i - 1] for i in range(1, len(numbers))]\n"),
}
# the body of each main, after `def entry(params):`; every one calls aux and uses its result
MAIN = {
    "digit_sum": "d = aux(n)\nreturn sum(d)",
    "count_odd_digits": "d = aux(n)\nreturn len([x for x in d if x % 2 == 1])",
    "largest_digit": "d = aux(n)\nreturn max(d)",
    "digit_spread": "d = aux(n)\nreturn max(d) - min(d)",
    "sum_above": "big = aux(numbers, k)\nreturn sum(big)",
    "count_above": "big = aux(numbers, k)\nreturn len(big)",
    "smallest_above": "big = aux(numbers, k)\nif not big:\n    return k\nreturn min(big)",
    "double_above": "big = aux(numbers, k)\nreturn [2 * x for x in big]",
    "total_vowels": "total = 0\nfor w in words:\n    total += aux(w)\nreturn total",
    "vowel_counts": "counts = [aux(w) for w in words]\nreturn counts",
    "most_vowels": ("best, most = '', -1\nfor w in words:\n    if aux(w) > most:\n"
                    "        best, most = w, aux(w)\nreturn best"),
    "vowel_rich": "rich = [w for w in words if aux(w) >= 2]\nreturn rich",
    "acronym": "ws = aux(text)\nreturn ''.join(w[0].upper() for w in ws)",
    "longest_word": ("best = ''\nfor w in aux(text):\n    if len(w) > len(best):\n"
                     "        best = w\nreturn best"),
    "title_case": "ws = aux(text)\nreturn ' '.join(w[0].upper() + w[1:] for w in ws)",
    "word_lengths": "ws = aux(text)\nreturn [len(w) for w in ws]",
    "count_divisors": "ds = aux(n)\nreturn len(ds)",
    "sum_proper_divisors": "ds = aux(n)\nreturn sum(ds) - n",
    "largest_proper_divisor": "ds = aux(n)\nreturn ds[-2] if len(ds) > 1 else 0",
    "even_divisors": "ds = aux(n)\nreturn [d for d in ds if d % 2 == 0]",
    "count_distinct": "u = aux(items)\nreturn len(u)",
    "sum_distinct": "u = aux(items)\nreturn sum(u)",
    "count_repeats": "u = aux(items)\nreturn len(items) - len(u)",
    "distinct_reversed": "u = aux(items)\nu.reverse()\nreturn u",
    "clamp_all": "out = [aux(x, low, high) for x in numbers]\nreturn out",
    "clamped_sum": "total = 0\nfor x in numbers:\n    total += aux(x, low, high)\nreturn total",
    "count_outside": "out = [x for x in numbers if aux(x, low, high) != x]\nreturn len(out)",
    "distance_outside": ("total = 0\nfor x in numbers:\n    total += abs(x - aux(x, low, high))\n"
                         "return total"),
    "most_common_char": ("counts = aux(text)\nbest = ''\nfor c in counts:\n"
                         "    if best == '' or counts[c] > counts[best]:\n        best = c\n"
                         "return best"),
    "max_char_count": "counts = aux(text)\nreturn max(counts.values()) if counts else 0",
    "chars_once": "counts = aux(text)\nreturn ''.join(c for c in counts if counts[c] == 1)",
    "chars_repeated": "counts = aux(text)\nreturn ''.join(c for c in counts if counts[c] > 1)",
    "first_index": "where = aux(items, value)\nreturn where[0] if where else -1",
    "items_before": "where = aux(items, value)\nreturn [items[i - 1] for i in where if i > 0]",
    "widest_gap": ("where = aux(items, value)\ngaps = [b - a for a, b in zip(where, where[1:])]\n"
                   "return max(gaps) if gaps else 0"),
    "items_after": ("where = aux(items, value)\n"
                    "return [items[i + 1] for i in where if i + 1 < len(items)]"),
    "count_ones": "b = aux(n)\nreturn b.count('1')",
    "bit_length": "b = aux(n)\nreturn len(b)",
    "trailing_zeros": "b = aux(n)\nif n == 0:\n    return 0\nreturn len(b) - len(b.rstrip('0'))",
    "flip_bits": ("b = aux(n)\nflipped = ''.join('1' if c == '0' else '0' for c in b)\n"
                  "return int(flipped, 2)"),
    "count_palindromes": "same = [w for w in words if aux(w) == w]\nreturn len(same)",
    "palindromes": "same = [w for w in words if aux(w) == w]\nreturn same",
    "reverse_all": "out = [aux(w) for w in words]\nreturn out",
    "longest_palindrome": ("best = ''\nfor w in words:\n"
                           "    if aux(w) == w and len(w) > len(best):\n        best = w\n"
                           "return best"),
    "biggest_step": "s = aux(numbers)\nreturn max([abs(x) for x in s]) if s else 0",
    "count_rises": "s = aux(numbers)\nreturn len([x for x in s if x > 0])",
    "first_drop": ("s = aux(numbers)\nfor i in range(len(s)):\n    if s[i] < 0:\n"
                   "        return i + 1\nreturn -1"),
    "path_length": "s = aux(numbers)\nreturn sum(abs(x) for x in s)",
}


def main_code(problem: dict, body: str) -> str:
    """`def entry(params):` (the prompt's parameters, annotations dropped) and an indented body."""
    params = ast.parse(problem["prompt"]).body[0].args.args
    header = f"def {problem['entry_point']}({', '.join(a.arg for a in params)}):\n"
    return header + "".join(f"    {line}\n" for line in body.split("\n"))


def asserts(problem: dict) -> list[ast.Compare]:
    tree = ast.parse(problem["test"])
    return [node.test for node in ast.walk(tree) if isinstance(node, ast.Assert)]


def test_families_split_and_counts():
    families = lambda problems: {p["family"] for p in problems}
    assert (len(TRAIN), len(HELD)) == (32, 16)
    assert (len(families(TRAIN)), len(families(HELD))) == (8, 4)
    assert not families(TRAIN) & families(HELD)
    assert not {p["id"] for p in TRAIN} & {p["id"] for p in HELD}
    assert len(PROBLEMS) == 48 and set(PROBLEMS) == set(MAIN)
    assert [p["id"] for p in load_problems("minicode", "eval")] == [p["id"] for p in HELD]


def test_held_out_prompts_are_not_training_prompts_reworded():
    """A held-out prompt is at most 0.714 similar (difflib's ratio) to a training prompt: less
    than two training families' prompts are to each other (0.782)."""
    ratio = lambda a, b: difflib.SequenceMatcher(None, a["prompt"], b["prompt"]).ratio()
    held_vs_train = max(ratio(e, t) for e in HELD for t in TRAIN)
    train_vs_train = max(ratio(a, b) for a in TRAIN for b in TRAIN if a["family"] != b["family"])
    assert held_vs_train == pytest.approx(0.7138, abs=1e-4)
    assert train_vs_train == pytest.approx(0.7816, abs=1e-4)
    aux_vs_train = max(difflib.SequenceMatcher(None, e["aux_spec"], t["aux_spec"]).ratio()
                       for e in HELD for t in TRAIN)
    assert aux_vs_train < 0.75


def test_asserts_are_plain_equalities_never_printed_in_the_prompt():
    for problem in TRAIN + HELD:
        tests = asserts(problem)
        assert len(tests) >= 8
        for test in tests:  # assert candidate(literals) == literal
            assert isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.Eq)
            call, expected = test.left, test.comparators[0]
            assert isinstance(call, ast.Call) and call.func.id == "candidate"
            args = [ast.literal_eval(a) for a in call.args]
            assert type(ast.literal_eval(expected)) in (int, str, list)  # JSON's plain values
            shown = f"{problem['entry_point']}({', '.join(map(repr, args))})"
            assert shown not in problem["prompt"] and shown not in problem["aux_spec"]
        assert len({ast.unparse(t.left) for t in tests}) == len(tests)  # no input twice


def test_every_problem_tests_a_boundary():
    """Each problem has an assert on a boundary of its family's inputs."""
    def tie(text: str) -> bool:  # two characters share the largest count
        return sorted(map(text.count, set(text)))[-2:] in ([1, 1], [2, 2], [3, 3])

    def boundary(family: str, args: tuple) -> bool:
        first = args[0]
        return {
            "digits": lambda: first < 0 or "0" in str(first),
            "above": lambda: first == [] or args[1] in first or args[1] < 0,
            "vowels": lambda: first == [] or any(w.isupper() for w in first),
            "words": lambda: "  " in first or first.isupper(),
            "divisors": lambda: first == 1 or int(first ** 0.5) ** 2 == first,
            "unique": lambda: any(x < 0 for x in first) or len(set(first)) == 1,
            "clamp": lambda: first == [] or args[1] in first or args[2] in first,
            "char_counts": lambda: first == "" or tie(first),
            "positions": lambda: first == [] or args[1] not in first or args[1] < 0,
            "binary": lambda: first == 0 or first & (first - 1) == 0,
            "reverse": lambda: first == [] or any(w != w.lower() for w in first),
            "steps": lambda: len(first) < 2 or any(x < 0 for x in first),
        }[family]()
    for problem in TRAIN + HELD:
        inputs = [tuple(ast.literal_eval(a) for a in t.left.args) for t in asserts(problem)]
        assert any(boundary(problem["family"], args) for args in inputs), problem["id"]


def test_canonical_solutions_get_full_credit_and_return_none_gets_no_test():
    for entry, problem in PROBLEMS.items():
        aux = AUX[problem["family"]]
        total, levels = code_reward(aux, main_code(problem, MAIN[entry]), problem, timeout=10.0)
        assert (total, levels["tests_passed"]) == (4.0, len(asserts(problem))), entry
        total, levels = code_reward(aux, main_code(problem, "return None"), problem, timeout=10.0)
        assert (total, levels["tests_passed"]) == (1.5, 0), entry


def passed_here(aux: str, main: str, problem: dict) -> int:
    """The tests a program of ours passes, run in this process (code we wrote, not a model's)."""
    scope = {}
    exec(aux + main, scope)  # noqa: S102
    count = 0
    for test in extract_tests(problem["test"], problem["entry_point"]):
        try:
            exec(test, scope)  # noqa: S102
            count += 1
        except Exception:
            pass
    return count


def test_a_main_that_calls_aux_but_solves_a_sibling_problem_passes_no_test():
    """Every problem of a family against each other problem's canonical main (it calls the same
    aux and uses its result, so only the tests tell it apart) and against a thin wrapper
    `return aux(...)`: 192 wrong mains, none passes a test, so none gets the cooperation bonus
    (reward 1.5 of 4, checked through code_reward on a few)."""
    wrong = []
    for problem in TRAIN + HELD:
        params = ", ".join(a.arg for a in ast.parse(problem["prompt"]).body[0].args.args)
        wrong += [(problem, main_code(problem, MAIN[s["entry_point"]])) for s in TRAIN + HELD
                  if s["family"] == problem["family"] and s is not problem]
        wrong.append((problem, main_code(problem, f"return aux({params})")))
    assert len(wrong) == 192
    assert passed_here(AUX["digits"], main_code(PROBLEMS["digit_sum"], MAIN["digit_sum"]),
                       PROBLEMS["digit_sum"]) == 9  # the check can pass
    for problem, code in wrong:
        assert passed_here(AUX[problem["family"]], code, problem) == 0, (problem["id"], code)
    for problem, code in wrong[::24]:
        total, levels = code_reward(AUX[problem["family"]], code, problem, timeout=10.0)
        assert (levels["tests_passed"], total) == (0, 1.5), (problem["id"], code)


# near misses a small model writes: they call aux and use its result but get a detail wrong
NEAR_MISSES = [
    ("digit_sum", "d = aux(n)\nreturn len(d)"),
    ("smallest_above", "big = aux(numbers, k)\nreturn min(big)"),  # no k when nothing is above
    ("count_above", "big = aux(numbers, k + 1)\nreturn len(big)"),  # >= k + 1 for > k
    ("most_vowels", "counts = [aux(w) for w in words]\nreturn max(counts) if counts else ''"),
    ("acronym", "ws = aux(text)\nreturn ' '.join(ws)"),
    ("sum_proper_divisors", "ds = aux(n)\nreturn sum(ds)"),
    ("clamped_sum", "total = 0\nfor x in numbers:\n    total += aux(x, high, low)\nreturn total"),
    ("chars_once", "counts = aux(text)\nreturn ''.join(counts)"),
    ("first_index", "where = aux(items, value)\nreturn where[0]"),  # no -1 when absent
    ("count_ones", "b = aux(n)\nreturn len(b)"),
    ("palindromes", "same = [aux(w) for w in words]\nreturn same"),
    ("biggest_step", "s = aux(numbers)\nreturn max(s) if s else 0"),  # no abs
]


def test_near_misses_that_call_aux_earn_little():
    """Hand-written wrong mains with a correct aux, through code_reward: the 6 that compute
    something else pass no test (1.5 each); the 6 that miss one detail (a sentinel, abs, a
    boundary) pass some tests, and one passed test unlocks code_reward's cooperation bonus
    (+1.5), so they earn 3.1-3.8. Mean 2.470 of 4."""
    passed, rewards = [], []
    for entry, body in NEAR_MISSES:
        problem = PROBLEMS[entry]
        total, levels = code_reward(AUX[problem["family"]], main_code(problem, body), problem,
                                    timeout=10.0)
        passed.append((levels["tests_passed"], levels["tests_total"]))
        rewards.append(total)
    # by hand: smallest_above and first_index fail on their two inputs without a match
    # (min([]), [][0]); count_above with k + 1 is right on 3 of 9; most_vowels' '' guard and
    # chars_once's "abc" pass one; biggest_step without abs is right on the 4 lists whose
    # largest step is a rise
    assert passed == [(0, 9), (8, 10), (3, 9), (1, 10), (0, 8), (0, 8), (0, 9), (1, 9), (8, 10),
                      (0, 9), (0, 8), (4, 8)]
    assert rewards == pytest.approx([1.5 + (p / t + 1.5 if p else 0) for p, t in passed])
    assert sum(rewards) / len(rewards) == pytest.approx(2.470, abs=1e-3)


def test_prompts_give_aux_its_spec_and_main_the_contract():
    problem = PROBLEMS["widest_gap"]
    aux, main = aux_prompt(problem), main_prompt(problem)
    assert problem["aux_spec"].startswith("def aux(items: list, value: int) -> list:\n")
    spec = problem["aux_spec"]
    assert f"The helper function to write (the main function will call it):\n{spec}" in aux
    assert "def aux(items: list, value: int):\n # your function code here" in aux
    assert f"You have access to a helper function, written by another agent:\n{spec}" in main
    assert main.endswith("def widest_gap(items: list, value: int):\n"
                         " # your function code here\nreturn result\n")
    plain = dict(problem, aux_spec=None)  # a problem without one keeps the authors' prompts
    assert "You have access to a helper function: aux(...)\n\n" in main_prompt(plain)
    assert "def aux(...):" in aux_prompt(plain)
    assert "written by another agent" not in main_prompt(plain)
    # the single-agent baseline sees only the prompt: main's specification on its own
    assert "aux" not in problem["prompt"] and extract_tests(problem["test"], "widest_gap")
