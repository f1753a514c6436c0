"""minicode.py: a built-in easy coding task of ours, offline, for two agents (aux/main).

HumanEval-shaped problems (prompt = signature + docstring with one example, test = check(candidate),
entry point) easy enough for a 135M model to earn a learnable reward: HumanEval itself is out of its
reach (no problem ever solved). Eight templates x ten parameters = 80 problems; every 5th is held
out for evaluation, so the two splits never share a problem. The joint reward is the authors' code
reward (code.py's code_reward: structure, syntax, tests, cooperation), with the helper agent writing
aux and the main agent writing the entry point.
"""
from __future__ import annotations

# (entry point, parameter, return type, docstring, reference(k), test inputs(k))
MINICODE_TEMPLATES = [
    ("add_{k}", "x: int", "int", "Return x plus {k}.",
     lambda k: lambda x: x + k, lambda k: [0, 5, -3, 12]),
    ("times_{k}", "x: int", "int", "Return x multiplied by {k}.",
     lambda k: lambda x: x * k, lambda k: [1, 4, -2, 10]),
    ("is_multiple_of_{k}", "x: int", "bool",
     "Return True if x is divisible by {k}, otherwise False.",
     lambda k: lambda x: x % k == 0, lambda k: [k, 2 * k, k + 1, 7 * k - 1]),
    ("count_above_{k}", "numbers: list", "int",
     "Return how many numbers in the list are greater than {k}.",
     lambda k: lambda xs: sum(x > k for x in xs),
     lambda k: [[1, k, k + 1], [k + 5, k + 9, 0], [], [k - 1, k + 2]]),
    ("sum_above_{k}", "numbers: list", "int",
     "Return the sum of the numbers in the list that are greater than {k}.",
     lambda k: lambda xs: sum(x for x in xs if x > k),
     lambda k: [[1, k, k + 1], [k + 5, k + 9, 0], [], [k + 3]]),
    ("first_{k}", "items: list", "list", "Return a list of the first {k} items of the list.",
     lambda k: lambda xs: xs[:k], lambda k: [list(range(20)), [7, 8], [], list("abcdefghijklm")]),
    ("repeat_{k}", "text: str", "str", "Return the text repeated {k} times.",
     lambda k: lambda s: s * k, lambda k: ["ab", "x", "", "hi "]),
    ("count_letter_{k}", "text: str", "int",
     "Return how many times the letter '{k}' appears in text.",
     lambda k: lambda s: s.count(k), lambda k: [f"{k}b{k}", "xyz", "", f"{k * 3}q{k}"]),
]
MINICODE_PARAMETERS = {"count_letter_{k}": list("abdegmnprt")}  # every other template: k = 2..11


def minicode_problems(split: str) -> list[dict]:
    """The minicode problems of split 'train' (64) or 'eval' (16, every 5th), in HumanEval's
    schema."""
    problems, index = [], 0
    for entry_t, param, returns, doc_t, reference, inputs in MINICODE_TEMPLATES:
        for k in MINICODE_PARAMETERS.get(entry_t, range(2, 12)):
            entry, doc, fn = entry_t.format(k=k), doc_t.format(k=k), reference(k)
            example = inputs(k)[0]
            prompt = (f"def {entry}({param}) -> {returns}:\n    \"\"\"{doc}\n"
                      f"    >>> {entry}({example!r})\n    {fn(example)!r}\n    \"\"\"\n")
            test = "def check(candidate):\n" + "".join(
                f"    assert candidate({x!r}) == {fn(x)!r}\n" for x in inputs(k))
            if (index % 5 == 0) == (split == "eval"):
                problems.append(dict(id=f"minicode/{index}", kind="code", prompt=prompt, test=test,
                                     entry_point=entry))
            index += 1
    return problems
