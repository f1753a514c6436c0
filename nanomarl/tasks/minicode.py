"""minicode.py: a built-in coding task of ours, offline, for two agents (aux/main), where the
helper is part of the natural solution.

Every problem is main = g(aux(x)): the main function's specification is a composition whose
inner step is the helper aux. The problem dict is HumanEval's schema {id, kind, prompt, test,
entry_point} plus `aux_spec`, aux's own signature and docstring: code_prompts.py gives it to the
aux agent as the function to write and to the main agent as the contract of a helper it may call,
so a main that calls aux has less to write. `prompt` alone (the main stub) specifies the whole
problem, so a single agent can solve it without aux.

Problems come in families, one helper each (the digits of a number, the numbers above a threshold,
...), four problems per family; a family is trained on or held out as a whole, so a held-out
problem is never a training problem with another constant: 8 families (32 problems) train, 4 other
families (16 problems) are held out. Each problem has 8 to 10 asserts `assert candidate(...) ==
literal` (int, str or list values) with boundary inputs (x == k, negative numbers, empty inputs,
ties), none of them the docstring's example. The inputs are chosen so that a main computing
another problem of its family from the same aux, or returning aux's own result, passes none of
them: code_reward's cooperation bonus (+1.5) comes with the first passed test.
"""
from __future__ import annotations

# ---- the helpers (aux) of each family, also used to compute the expected values ----


def digits(n):
    return [int(c) for c in str(abs(n))]


def above(numbers, k):
    return [x for x in numbers if x > k]


def vowels(word):
    return sum(c in "aeiouAEIOU" for c in word)


def words(text):
    return text.lower().split()


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def unique(items):
    return list(dict.fromkeys(items))


def clamp(x, low, high):
    return low if x < low else high if x > high else x


def char_counts(text):
    counts = {}
    for c in text:
        counts[c] = counts.get(c, 0) + 1
    return counts


def positions(items, value):
    return [i for i, x in enumerate(items) if x == value]


def binary(n):
    return bin(n)[2:]


def reverse(text):
    return text[::-1]


def steps(numbers):
    return [b - a for a, b in zip(numbers, numbers[1:])]


def first_most(items, key):
    """The first item with the largest key, '' if there are none."""
    return max(items, key=key) if items else ""


# ---- the families ----
# a family: name, split, aux (params, returns, doc, reference, example args), the test inputs its
# problems share, problems (entry point, params, returns, doc, reference, example args, the
# problem's own extra test inputs)

FAMILIES = [
    dict(name="digits", split="train",
         aux=("n: int", "list", "Return the decimal digits of abs(n), most significant first.",
              digits, (-305,)),
         inputs=[(-4821,), (-637,), (-18,), (-96,), (83,), (159,), (2468,), (123456,)],
         problems=[
             ("digit_sum", "n: int", "int",
              "Return the sum of the decimal digits of n (the sign of n is ignored).",
              lambda n: sum(digits(n)), (-38,), [(505,)]),
             ("count_odd_digits", "n: int", "int",
              "Return how many decimal digits of n are odd (the sign of n is ignored).",
              lambda n: sum(d % 2 for d in digits(n)), (7215,), [(-7,)]),
             ("largest_digit", "n: int", "int",
              "Return the largest decimal digit of n (the sign of n is ignored).",
              lambda n: max(digits(n)), (4071,), [(-66,)]),
             ("digit_spread", "n: int", "int",
              "Return the largest decimal digit of n minus its smallest one (sign ignored).",
              lambda n: max(digits(n)) - min(digits(n)), (3917,), [(-7,)])]),
    dict(name="above", split="train",
         aux=("numbers: list, k: int", "list",
              "Return the numbers of the list that are greater than k, in their order.",
              above, ([4, 9, 1, 12], 5)),
         inputs=[([5, 9, 5, 7], 5), ([-4, -1, 0, 2], -2), ([10, 20, 30], 0),
                 ([-8, 6, -2, 6, 9], 1), ([100, -100, 50], 49), ([7, 8, 7, 11], 7),
                 ([-5, -3], -6), ([4, 3, 2, 1], 2)],
         problems=[
             ("sum_above", "numbers: list, k: int", "int",
              "Return the sum of the numbers in the list that are greater than k.",
              lambda xs, k: sum(above(xs, k)), ([2, 6, 9], 4), []),
             ("count_above", "numbers: list, k: int", "int",
              "Return how many numbers in the list are greater than k.",
              lambda xs, k: len(above(xs, k)), ([2, 6, 9], 4), [([6, 6, 6], 5)]),
             ("smallest_above", "numbers: list, k: int", "int",
              "Return the smallest number in the list greater than k, or k if there is none.",
              lambda xs, k: min(above(xs, k), default=k), ([2, 9, 6], 4), [([], 3), ([1, 3], 3)]),
             ("double_above", "numbers: list, k: int", "list",
              "Return the numbers in the list greater than k, each doubled, in their order.",
              lambda xs, k: [2 * x for x in above(xs, k)], ([2, 6, 9], 4), [])]),
    dict(name="vowels", split="train",
         aux=("word: str", "int",
              "Return how many vowels (a, e, i, o, u, in either case) the word has.",
              vowels, ("Queue",)),
         inputs=[(["Apple", "sky"],), (["Queue", "tea", "OIL"],), (["dog", "cat", "io"],),
                 (["banana", "kiwi", "fig"],), (["a", "bb", "eee", "ccc"],),
                 (["rhythm", "AEIOU"],), (["Ode", "up", "EEl"],), (["sky", "fly", "Oboe"],)],
         problems=[
             ("total_vowels", "words: list", "int",
              "Return the number of vowels (a, e, i, o, u, in either case) of all the words.",
              lambda ws: sum(map(vowels, ws)), (["hello", "Ant"],), []),
             ("vowel_counts", "words: list", "list",
              "Return the number of vowels (a, e, i, o, u, either case) of each word, in order.",
              lambda ws: [vowels(w) for w in ws], (["hello", "Ant"],), []),
             ("most_vowels", "words: list", "str",
              "Return the word with the most vowels (a, e, i, o, u, either case), the first one "
              "on a tie, or '' for an empty list.",
              lambda ws: first_most(ws, vowels), (["hello", "Ant"],),
              [([],), (["rhythm", "myth"],)]),
             ("vowel_rich", "words: list", "list",
              "Return the words with at least two vowels (a, e, i, o, u, either case), in order.",
              lambda ws: [w for w in ws if vowels(w) >= 2], (["hello", "Ant"],), [])]),
    dict(name="words", split="train",
         aux=("text: str", "list",
              "Return the words of text in lower case (words are separated by spaces).",
              words, ("Hello  big World",)),
         inputs=[("Hello World",), ("  two   spaces  ",), ("The quick brown fox",), ("ONE",),
                 ("x yy zzz",), ("Mixed CASE words here",), ("go far",), ("sea AND sky",)],
         problems=[
             ("acronym", "text: str", "str",
              "Return the first letter of each word of text, upper-cased, joined together.",
              lambda t: "".join(w[0] for w in words(t)).upper(), ("portable network graphics",),
              []),
             ("longest_word", "text: str", "str",
              "Return the longest word of text in lower case, the first one on a tie, or '' if "
              "text has no words.",
              lambda t: first_most(words(t), len), ("A tiny Example",), []),
             ("title_case", "text: str", "str",
              "Return the words of text joined by single spaces, each in lower case but for its "
              "first letter, upper-cased.",
              lambda t: " ".join(w.capitalize() for w in words(t)), ("hELLO  wOrld",), []),
             ("word_lengths", "text: str", "list",
              "Return the length of each word of text (separated by spaces), in order.",
              lambda t: [len(w) for w in words(t)], ("so  far away",), [])]),
    dict(name="divisors", split="train",
         aux=("n: int", "list", "Return the positive divisors of n in increasing order (n >= 1).",
              divisors, (12,)),
         inputs=[(6,), (16,), (25,), (30,), (49,), (64,), (72,), (100,)],
         problems=[
             ("count_divisors", "n: int", "int",
              "Return how many positive divisors n has (n >= 1).",
              lambda n: len(divisors(n)), (10,), [(1,), (7,)]),
             ("sum_proper_divisors", "n: int", "int",
              "Return the sum of the positive divisors of n that are smaller than n (n >= 1).",
              lambda n: sum(divisors(n)[:-1]), (10,), []),
             ("largest_proper_divisor", "n: int", "int",
              "Return the largest positive divisor of n smaller than n, or 0 if n is 1 (n >= 1).",
              lambda n: max(divisors(n)[:-1], default=0), (10,), []),
             ("even_divisors", "n: int", "list",
              "Return the even positive divisors of n in increasing order (n >= 1).",
              lambda n: [d for d in divisors(n) if d % 2 == 0], (10,), [(1,), (2,)])]),
    dict(name="unique", split="train",
         aux=("items: list", "list",
              "Return the items of the list without repeats, each kept where it first occurs.",
              unique, ([3, 1, 3, 2, 1],)),
         inputs=[([4, 8, 4, 1, 8, 9],), ([-3, -7, -3],), ([1, -1, 1, -1, 1],), ([10, 20, 30],),
                 ([0, 0, 5, 5, 0, 6, 7],), ([6, -2, 6, -2, 5],), ([9, 8, 7, 9, 8, 7, 1],),
                 ([12, 12, 3],)],
         problems=[
             ("count_distinct", "items: list", "int",
              "Return how many different values the list holds.",
              lambda xs: len(unique(xs)), ([6, 2, 6],), [([5, 5, 5, 5],)]),
             ("sum_distinct", "items: list", "int",
              "Return the sum of the different values of the list, each counted once.",
              lambda xs: sum(unique(xs)), ([6, 2, 6],), []),
             ("count_repeats", "items: list", "int",
              "Return how many items of the list are equal to an item before them.",
              lambda xs: len(xs) - len(unique(xs)), ([6, 2, 6],), [([5],)]),
             ("distinct_reversed", "items: list", "list",
              "Return the different values of the list, in reverse order of first occurrence.",
              lambda xs: unique(xs)[::-1], ([6, 2, 6],), [])]),
    dict(name="clamp", split="train",
         aux=("x: int, low: int, high: int", "int",
              "Return low if x < low, high if x > high, and x otherwise.", clamp, (15, 0, 10)),
         inputs=[([-2, 7], 0, 5), ([0, 5, 8], 0, 5), ([-10, -5, 0], -6, -1), ([1, 2, 3, 6], 2, 3),
                 ([100, -100], -1, 1), ([4, 9, -3, 6], 1, 6), ([-7, 20, 3], -5, 15),
                 ([9, 1], 3, 7)],
         problems=[
             ("clamp_all", "numbers: list, low: int, high: int", "list",
              "Return the numbers of the list, each raised to low if below it and lowered to "
              "high if above it.",
              lambda xs, lo, hi: [clamp(x, lo, hi) for x in xs], ([12, -1, 4], 0, 10),
              [([], 0, 5)]),
             ("clamped_sum", "numbers: list, low: int, high: int", "int",
              "Return the sum of the numbers, each first raised to low if below it and lowered "
              "to high if above it.",
              lambda xs, lo, hi: sum(clamp(x, lo, hi) for x in xs), ([12, -1, 4], 0, 10),
              [([3], 0, 5)]),
             ("count_outside", "numbers: list, low: int, high: int", "int",
              "Return how many numbers of the list are below low or above high.",
              lambda xs, lo, hi: sum(clamp(x, lo, hi) != x for x in xs), ([12, -1, 4], 0, 10),
              []),
             ("distance_outside", "numbers: list, low: int, high: int", "int",
              "Return the total distance of the numbers from the range low to high (0 for a "
              "number within it).",
              lambda xs, lo, hi: sum(abs(x - clamp(x, lo, hi)) for x in xs),
              ([12, -1, 4], 0, 10), [])]),
    dict(name="char_counts", split="train",
         aux=("text: str", "dict",
              "Return a dict mapping each character of text to how many times it occurs.",
              char_counts, ("abca",)),
         inputs=[("banana",), ("Mississippi",), ("hello world",), ("yzzzy",), ("abcab",),
                 ("aabbbc",), ("Hello!!!",), ("tattoo",)],
         problems=[
             ("most_common_char", "text: str", "str",
              "Return the character occurring most often in text, the first to appear on a tie, "
              "or '' if text is empty.",
              lambda t: first_most(list(char_counts(t)), char_counts(t).get), ("letter",), []),
             ("max_char_count", "text: str", "int",
              "Return how many times the most frequent character of text occurs (0 if empty).",
              lambda t: max(char_counts(t).values(), default=0), ("letter",), [("",), ("abc",)]),
             ("chars_once", "text: str", "str",
              "Return the characters that occur exactly once in text, in their order.",
              lambda t: "".join(c for c, n in char_counts(t).items() if n == 1), ("letter",),
              [("abc",)]),
             ("chars_repeated", "text: str", "str",
              "Return the characters that occur more than once in text, each once, in order of "
              "first appearance.",
              lambda t: "".join(c for c, n in char_counts(t).items() if n > 1), ("letter",),
              [("aabbcc",)])]),
    # ---- held out ----
    dict(name="positions", split="eval",
         aux=("items: list, value: int", "list",
              "Return the indices at which value occurs in the list, in increasing order.",
              positions, ([5, 1, 5], 5)),
         inputs=[([2, -1, 2, 5, 3, 2], 2), ([4, 1, 4, 9, 9, 4], 9), ([0, 1, 2, 1, 3], 1),
                 ([5, -1, 0, 0, -1], -1), ([7, 3, 3, 4, 7, 7], 7), ([8, 6, 8, 8, 1], 8),
                 ([-2, 4, 5, -2, 1, -2], -2), ([9, 6, 5, 6, 1], 6)],
         problems=[
             ("first_index", "items: list, value: int", "int",
              "Return the first index of value in the list, or -1 if it does not occur.",
              lambda xs, v: (positions(xs, v) or [-1])[0], ([8, 3, 8], 8),
              [([], 3), ([1, 2, 3], 4)]),
             ("items_before", "items: list, value: int", "list",
              "Return the item just before each occurrence of value (none before the first "
              "item), in order.",
              lambda xs, v: [xs[i - 1] for i in positions(xs, v) if i > 0], ([8, 3, 8], 8), []),
             ("widest_gap", "items: list, value: int", "int",
              "Return the largest distance between two successive places of value in the "
              "list, or 0 if it occurs fewer than twice.",
              lambda xs, v: max(steps(positions(xs, v)), default=0), ([8, 3, 8], 8), []),
             ("items_after", "items: list, value: int", "list",
              "Return the item that follows each occurrence of value (none after the last "
              "item), in order.",
              lambda xs, v: [xs[i + 1] for i in positions(xs, v) if i + 1 < len(xs)],
              ([8, 3, 8], 8), [([1, 2, 3], 3)])]),
    dict(name="binary", split="eval",
         aux=("n: int", "str",
              "Return the binary digits of n as a string without leading zeros ('0' for 0; "
              "n >= 0).",
              binary, (6,)),
         inputs=[(13,), (40,), (44,), (72,), (100,), (106,), (164,), (222,)],
         problems=[
             ("count_ones", "n: int", "int",
              "Return the number of 1s among the binary digits of n (n >= 0).",
              lambda n: binary(n).count("1"), (11,), [(8,)]),
             ("bit_length", "n: int", "int",
              "Return how many digits the binary form of n has, without leading zeros (n >= 0).",
              lambda n: len(binary(n)), (11,), [(8,)]),
             ("trailing_zeros", "n: int", "int",
              "Return how many zeros end the binary form of n, or 0 if n is 0 (n >= 0).",
              lambda n: len(binary(n)) - len(binary(n).rstrip("0")) if n else 0, (12,),
              [(8,), (32,)]),
             ("flip_bits", "n: int", "int",
              "Swap every 0 and 1 in the binary digits of n (n >= 0) and return the number they "
              "form.",
              lambda n: int(binary(n).translate({48: 49, 49: 48}), 2), (11,), [(8,)])]),
    dict(name="reverse", split="eval",
         aux=("text: str", "str", "Return text with its characters in reverse order.",
              reverse, ("abc",)),
         inputs=[(["level", "Noon", "noon"],), (["ab", "aa"],), (["abc", "cba", "abcba"],),
                 (["bob", "xyz", "anna"],), (["taco", "cat"],), (["a", "bb", "abc"],),
                 (["Racecar", "madam"],), (["stats", "deed", "tent", "x"],)],
         problems=[
             ("count_palindromes", "words: list", "int",
              "Return how many words of the list read the same forwards and backwards.",
              lambda ws: sum(w == reverse(w) for w in ws), (["eye", "tar"],), [([],)]),
             ("palindromes", "words: list", "list",
              "Return the words of the list that read the same forwards and backwards, in order.",
              lambda ws: [w for w in ws if w == reverse(w)], (["eye", "tar"],), []),
             ("reverse_all", "words: list", "list",
              "Return each word of the list spelt backwards, in order.",
              lambda ws: [reverse(w) for w in ws], (["eye", "tar"],), []),
             ("longest_palindrome", "words: list", "str",
              "Return the longest word of the list that reads the same forwards and backwards, "
              "the first one on a tie, or '' if there is none.",
              lambda ws: first_most([w for w in ws if w == reverse(w)], len), (["eye", "tar"],),
              [])]),
    dict(name="steps", split="eval",
         aux=("numbers: list", "list",
              "Return each number of the list minus the number before it, in order ([] if the "
              "list has fewer than two numbers).",
              steps, ([3, 8, 6],)),
         inputs=[([1, 5, 2, 8, 9],), ([-4, -1, -9, 0, 2],), ([3, 1, 4, 1, 5, 9, 2, 6],),
                 ([5, 5, 8, 8, 2],), ([1, 3, 6, 10],), ([-2, -5, -9],), ([0, 10, 10, 0],),
                 ([6, 8, 3, 4, 5, 7],)],
         problems=[
             ("biggest_step", "numbers: list", "int",
              "Return the largest absolute difference between neighbouring numbers of the list "
              "(0 if it has fewer than two).",
              lambda xs: max(map(abs, steps(xs)), default=0), ([4, 9, 2],), []),
             ("count_rises", "numbers: list", "int",
              "Return the number of places where the list goes up from one number to the next.",
              lambda xs: sum(s > 0 for s in steps(xs)), ([4, 9, 2],), []),
             ("first_drop", "numbers: list", "int",
              "Return the first index i with numbers[i] < numbers[i - 1], or -1 if none.",
              lambda xs: next((i + 1 for i, s in enumerate(steps(xs)) if s < 0), -1), ([4, 9, 2],),
              [([],), ([5],)]),
             ("path_length", "numbers: list", "int",
              "Return the sum of the absolute differences between neighbouring numbers.",
              lambda xs: sum(map(abs, steps(xs))), ([4, 9, 2],), [])]),
]


def stub(name: str, params: str, returns: str, doc: str, example: tuple, value) -> str:
    """A HumanEval prompt: signature and docstring with one example."""
    call = f"{name}({', '.join(map(repr, example))})"
    lines, line = [], ""
    for word in doc.split():  # wrapped to lines of at most 88 characters
        if line and len(line) + len(word) > 83:
            lines.append(line)
            line = ""
        line = f"{line} {word}" if line else word
    text = "\n    ".join(lines + [line])
    return (f"def {name}({params}) -> {returns}:\n    \"\"\"{text}\n"
            f"    >>> {call}\n    {value!r}\n    \"\"\"\n")


def minicode_problems(split: str) -> list[dict]:
    """The minicode problems of split 'train' (32, 8 families) or 'eval' (16, 4 other families),
    in HumanEval's schema plus aux_spec."""
    problems = []
    for family in FAMILIES:
        if family["split"] != split:
            continue
        aux_params, aux_returns, aux_doc, aux_fn, aux_example = family["aux"]
        aux_spec = stub("aux", aux_params, aux_returns, aux_doc, aux_example, aux_fn(*aux_example))
        for entry, params, returns, doc, fn, example, extra in family["problems"]:
            inputs = family["inputs"] + extra
            test = "def check(candidate):\n" + "".join(
                f"    assert candidate({', '.join(map(repr, args))}) == {fn(*args)!r}\n"
                for args in inputs)
            problems.append(dict(id=f"minicode/{family['name']}/{entry}", kind="code",
                                 prompt=stub(entry, params, returns, doc, example, fn(*example)),
                                 test=test, entry_point=entry, aux_spec=aux_spec,
                                 family=family["name"]))
    return problems
