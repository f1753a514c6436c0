"""code_prompts.py: the aux/main coding agents' prompts: the first turn's and the
multi-turn external feedback that writes the next turn's.

A feedback function is the external transition T: feedback(problem, prompt_history,
response_history) -> the next prompt of every agent, where prompt_history[i] / response_history[i]
are agent i's prompts and responses on this branch of the tree so far (turn order; the last response
is the one being answered). To use your own (an expert LLM, a different report), write a function
with this signature and pass it as magrpo.py's Task.feedback.
"""
from __future__ import annotations

import re

from nanomarl.tasks.code import analyze_code, extract_tests


# a program's words (an exception's message, a print) reach the next prompt: no terminal control
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """text without control characters (escape sequences, NUL, DEL, C1), newlines and tabs kept."""
    return CONTROL.sub("", str(text))


def function_params(prompt: str) -> str | None:
    """The FIRST def's parameters in the problem prompt, joined by ', ' (the authors' regex)."""
    match = re.search(r"def\s+\w+\s*\(([^)]+)\)", prompt)
    return ", ".join(p.strip() for p in match.group(1).split(",") if p.strip()) if match else None


CODE_RULES = ("- Output ONLY the function code, no explanations or examples\n"
              "- Do NOT include markdown code blocks (```python)\n"
              "- Do NOT include any text before or after the function\n"
              "- Do NOT include test cases or example usage\n")


def aux_prompt(problem: dict) -> str:
    """The authors' helper-agent prompt (its format lines break where their f-string's newlines
    are); a problem with an `aux_spec` (minicode) also gets aux's specification to implement."""
    if not function_params(problem["prompt"]):  # the authors' formatter returns this as the prompt
        return "Error: Could not extract function information from prompt."
    spec = problem.get("aux_spec")
    return ("Create a helper function for this coding problem.\n\n"
            f"Problem:\n{problem['prompt']}\n\n"
            + (f"The helper function to write (the main function will call it):\n{spec}\n"
               if spec else "")
            + f"IMPORTANT INSTRUCTIONS:\n{CODE_RULES}"
            "- Create a helper function named 'aux' that can assist the main function\n"
            + ("- Implement aux exactly as specified above\n\n" if spec else
               "- The function should return useful data for solving the problem\n\n")
            + "Your output should follow this format:\n\n"
            f"def aux({function_params(spec) if spec else '...'}):\n"
            " # your function code here\nreturn result\n")


def main_prompt(problem: dict) -> str:
    """The authors' main-agent prompt: implement the entry point, aux(...) is available (with its
    specification if the problem has an `aux_spec`)."""
    params = function_params(problem["prompt"])
    if not params:
        return "Error: Could not extract function information from prompt."
    entry = problem["entry_point"]
    return ("Solve this coding problem by implementing the required function.\n\n"
            f"Problem:\n{problem['prompt']}\n\n"
            + (f"You have access to a helper function, written by another agent:\n"
               f"{problem['aux_spec']}\n" if problem.get("aux_spec")
               else "You have access to a helper function: aux(...)\n\n")
            + f"IMPORTANT INSTRUCTIONS:\n{CODE_RULES}"
            "- Do NOT redefine the aux() function\n"
            f"- Implement ONLY the '{entry}' function as specified\n"
            "- You can call aux() to assign value to a variable within your function if helpful\n\n"
            f"Your output should follow this format:\n\ndef {entry}({params}):\n"
            " # your function code here\nreturn result\n")


def history_lines(prompt_history: list[str], response_history: list[str], label: str) -> list[str]:
    lines = []
    if prompt_history:
        lines += ["History: previous prompts:"]
        lines += [f"- Turn {t} prompt:\n{p}" for t, p in enumerate(prompt_history, 1)]
        lines.append("")
    if response_history:
        lines += [f"History: your previous {label} responses:"]
        lines += [f"- Turn {t} response:\n{r}" for t, r in enumerate(response_history, 1)] + [""]
    return lines


def select_tests(tests: list[str], n: int) -> list[str]:
    """The first n asserts (n > 0), the last |n| (n < 0) or all (n = 0)."""
    return tests if n == 0 else tests[:n] if n > 0 else tests[n:]


REVISE = "Revise your {}(...) accordingly. Output ONLY the function code with no extra text."


def level_feedback(problem: dict, prompt_history: list[list[str]],
                   response_history: list[list[str]], num_tests: int = 1, timeout: float = 3.0,
                   memory_mb: int = 512, extraction: str = "ast") -> list[str]:
    """The authors' level_feedback: per agent, its history, then static and execution diagnostics of
    the joint aux/main pair (definitions, syntax error with line and column, tests passed of the
    first `num_tests` tests with each failure, and for main: does it call aux, misuse it, is it a
    thin wrapper)."""
    entry = problem["entry_point"]
    tests = select_tests(extract_tests(problem["test"], entry, extraction), num_tests)
    r = analyze_code(response_history[0][-1], response_history[1][-1], problem, tests, timeout,
                     memory_mb, extraction)
    aux_line = printable(f"- Aux definition: {'FOUND' if r['aux_defined'] else 'MISSING'} "
                         f"({r['aux_message']})")
    main_line = printable(f"- Main definition: {'FOUND' if r['main_defined'] else 'MISSING'} "
                          f"({r['main_message']})")
    shared = [f"- Syntax: {'OK' if r['syntax_ok'] else 'ERROR'} ({r['syntax_message']})"]
    if r["syntax_error"]:
        se = r["syntax_error"]
        shared.append(f"  SyntaxError at line {se['line']}, col {se['col']}: {se['msg']}")
    if r["tests"]:
        shared.append(f"- Tests: {sum(r['passed'])}/{len(r['tests'])} passed")
        shared += [f"  Failed case: {case} -> {error if r['loaded'] else r['load_error']}"
                   for case, ok, error in zip(r["tests"], r["passed"], r["errors"]) if not ok]
    else:
        shared.append("- Tests: no test cases found")
    shared = [printable(line) for line in shared]  # the diagnostics quote the program's words
    aux_lines = history_lines(prompt_history[0], response_history[0], "aux(...)")
    aux_lines += ["Static and execution diagnostics:", aux_line, main_line] + shared
    main_lines = history_lines(prompt_history[1], response_history[1], "main")
    main_lines += ["Static and execution diagnostics:", main_line, aux_line] + shared
    if r["main_defined"]:
        if not r["calls_aux"]:
            main_lines.append("- Aux usage: main does NOT call aux")
        elif r["aux_unused"]:
            main_lines.append(f"- Aux usage: called but misused ({', '.join(r['aux_unused'][:2])})")
        else:
            main_lines.append("- Aux usage: main calls aux and uses its result")
        if r["wrapper"]:
            main_lines.append("- Warning: main appears to be a thin wrapper over aux")
    aux_lines.append("\n" + REVISE.format("aux"))
    main_lines.append("\n" + REVISE.format(entry))
    return ["\n".join(aux_lines), "\n".join(main_lines)]


def plain_feedback(problem: dict, prompt_history: list[list[str]],
                   response_history: list[list[str]]) -> list[str]:
    """History and a revise instruction, no signals."""
    entry = problem["entry_point"]
    return ["\n".join(history_lines(prompt_history[0], response_history[0], "aux(...)")
                      + [REVISE.format("aux")]),
            "\n".join(history_lines(prompt_history[1], response_history[1], "main")
                      + [REVISE.format(entry)])]
