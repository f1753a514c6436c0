"""The MAGRPO baselines' prompts: one model doing the whole task (single_agent_prompt, and
split_paragraphs to cut its writing into the two parts), the sequential pipeline (pipeline_prompt)
and the one-round discussion (discussion_prompts). evaluate.py --mode magrpo plays them; the MAGRPO
agents' own prompts are format_prompts (nanomarl/tasks/kinds.py). A learner may skip this module.
"""
from __future__ import annotations

import re

from nanomarl.tasks.code import extract_function
from nanomarl.tasks.code_prompts import CODE_RULES, function_params, main_prompt

# The authors' evaluation scripts' prompts (LLM_Collab_Writing:
# evals/eval_{tldr,arxiv}_{single_agent,pipeline,discussion}.py; LLM_Collab_Code_Generation:
# baselines/he_{single_agent,discuss}.py), except the coding pipeline, which the authors do not
# have (ours: main's prompt plus aux's code).

PARAGRAPH_SPLIT = "[PARAGRAPH_SPLIT]"


def single_agent_prompt(problem: dict) -> str:
    """One model does the whole task: code = the entry point alone; writing = both parts, split by a
    marker."""
    if problem["kind"] == "code":
        entry, params = problem["entry_point"], function_params(problem["prompt"]) or "..."
        return ("Solve this coding problem by implementing the required function.\n\nProblem:\n"
                f"{problem['prompt']}\n\nIMPORTANT INSTRUCTIONS:\n"
                f"{CODE_RULES}- Implement ONLY the '{entry}' function as specified\n"
                "- Make sure to include proper return statement\n\n"
                f"Your output should follow this format:\n\ndef {entry}({params}):\n"
                "    # your function code here\n    return result\n")
    if problem["kind"] == "tldr":
        return ("Please provide a summary of this Reddit post in exactly two paragraphs:\n\n"
                f"{problem['text']}\n\nInstructions:\n- First paragraph: Provide a concise summary "
                "of the main points\n- Second paragraph: Expand on the summary with more details, "
                "using more unique vocabulary words, include as many categories of transition "
                "words as possible to improve flow, and make it 2-3 times longer than the first "
                "paragraph in terms of character count, while maintaining a consistent style\n\n"
                "IMPORTANT REQUIREMENTS - FOLLOW EXACTLY:\n"
                "- No paragraph should be less than 10 tokens or more than 200 tokens\n"
                f"- Use EXACTLY this delimiter between paragraphs: {PARAGRAPH_SPLIT}\n\nSummary:\n"
                "Paragraph 1:")
    return ("Based on the following scientific abstract, expand content for an introduction "
            f"section in exactly two paragraphs:\n\n{problem['text']}\n\nInstructions:\n"
            "- First paragraph: Focus on background and motivation\n"
            "- Second paragraph: Focus on methodology and implications\n"
            "- Both paragraphs should be roughly EQUAL in length (similar word count)\n\n"
            "IMPORTANT REQUIREMENTS - FOLLOW EXACTLY:\n- Each paragraph should be between 128 and "
            f"256 tokens\n- Use EXACTLY this delimiter between paragraphs: {PARAGRAPH_SPLIT}\n\n"
            "Introduction:\nParagraph 1:")


def split_paragraphs(text: str, kind: str) -> tuple[str, str]:
    """A single agent's writing -> (part 1, part 2): at the marker, else (the authors split at a
    random 2-3x (TLDR) or 0.9-1.1x (arXiv) length ratio) deterministically at 2.5x / 1x, at the next
    space."""
    text = text.strip()
    if PARAGRAPH_SPLIT in text:
        first, second = text.split(PARAGRAPH_SPLIT, 1)
    else:
        cut = int(len(text) / (1 + (2.5 if kind == "tldr" else 1.0)))
        while cut < len(text) and text[cut] not in " \n":
            cut += 1
        first, second = text[:cut], text[cut:]
    label = r"^(?:first paragraph|second paragraph|paragraph [12]|part [12]):\s*"
    strip = lambda s: re.sub(label, "", s.strip(), flags=re.IGNORECASE).strip()  # noqa: E731
    return strip(first), strip(second)


def pipeline_prompt(problem: dict, first_output: str) -> str:
    """Agent 2's prompt in the sequential pipeline: it sees agent 1's output."""
    if problem["kind"] == "code":
        aux = extract_function(first_output, "aux") or first_output
        return (main_prompt(problem)
                + f"\nThe helper function aux, written by another agent:\n{aux}\n")
    if problem["kind"] == "tldr":
        return ("Create a detailed summary that expands on the following concise summary.\n\n"
                f"Original Query:\n{problem['text']}\n\nConcise Summary (from another agent):\n"
                f"{first_output}\n\nIMPORTANT INSTRUCTIONS:\n"
                "- Build upon and expand the concise summary above\n- Use more unique words\n"
                "- Use transition words to improve flow\n- Make your response 2-3x longer than the "
                "concise summary\n")
    return ("Based on the following scientific abstract, expand content for an introduction "
            f"section.\n\nAbstract:\n{problem['text']}\n\n"
            f"Background and motivation section (from another agent):\n{first_output}\n\n"
            "IMPORTANT INSTRUCTIONS:\n- Focus on methodology and implications\n"
            "- Build upon the background section provided above\n"
            "- Avoid repeating what was already written in the background\n")


def discussion_prompts(problem: dict, first: list[str]) -> list[str]:
    """Round 2 of the one-round discussion: each agent sees the other's round-1 output (and, in
    writing, its own)."""
    if problem["kind"] == "code":
        entry = problem["entry_point"]
        params = function_params(problem["prompt"]) or "..."
        main_code = (extract_function(first[1], entry)
                     or "# No main function generated in Round 1")
        aux_code = (extract_function(first[0], "aux")
                    or "# No aux function generated in Round 1")
        rules = ("- Do NOT include markdown code blocks (```python)\n"
                 "- Do NOT include any text before or after the function\n")
        return ["Improve your helper function based on how it's being used by the main function.\n"
                f"\nProblem:\n{problem['prompt']}\n\nThe main function implementation from another "
                f"agent:\n{main_code}\n\nIMPORTANT INSTRUCTIONS:\n"
                "- Output ONLY the improved aux function code, no explanations\n"
                f"{rules}- Create an improved helper function named 'aux' that better assists the "
                "main function\n- Look at how the main function uses (or could use) aux() and "
                "optimize accordingly\n- The aux function should provide exactly what the main "
                "function needs\n\nYour output should follow this format:\n\ndef aux(...):\n"
                "    # your improved function code here\n    return result\n",
                "Improve your main function implementation based on the helper function provided.\n"
                f"\nProblem:\n{problem['prompt']}\n\nThe auxiliary function implementation from "
                f"another agent:\n{aux_code}\n\nIMPORTANT INSTRUCTIONS:\n"
                "- Output ONLY the improved main function code, no explanations\n"
                f"{rules}- Do NOT redefine the aux() function (it's already provided above)\n"
                f"- Implement ONLY the improved '{entry}' function\n"
                "- Make effective use of the aux() function based on what it provides\n"
                "- Ensure your solution correctly uses the aux() function's return value\n\n"
                f"Your output should follow this format:\n\ndef {entry}({params}):\n"
                "    # your improved function code here\n    return result\n"]
    if problem["kind"] == "tldr":
        return ["Refine your concise summary based on the detailed version.\n\nOriginal Query:\n"
                f"{problem['text']}\n\nYour previous concise summary:\n{first[0]}\n\n"
                f"The detailed summary from another agent:\n{first[1]}\n\nIMPORTANT INSTRUCTIONS:\n"
                "- Output ONLY the refined concise summary\n"
                "- Ensure it provides a good foundation for the detailed version\n"
                "- Keep it brief and focused\n",
                "Refine your detailed summary now that you can see the concise version.\n\n"
                f"Original Query:\n{problem['text']}\n\nThe concise summary:\n{first[0]}\n\n"
                f"Your previous detailed summary:\n{first[1]}\n\nIMPORTANT INSTRUCTIONS:\n"
                "- Build upon and expand the concise summary\n"
                "- Use more unique words than the concise summary\n"
                "- Use transition words to improve flow\n- Make your response 2-3x longer than the "
                "concise summary\n"]
    return ["Refine your background and motivation section based on the methodology section.\n\n"
            f"Original Abstract:\n{problem['text']}\n\nYour previous background and motivation:\n"
            f"{first[0]}\n\nThe methodology and implications from another agent:\n{first[1]}\n\n"
            "IMPORTANT INSTRUCTIONS:\n- Output ONLY the refined background and motivation\n"
            "- Ensure it provides a good foundation for the methodology section\n"
            "- Make both sections roughly equal in length\n",
            "Refine your methodology and implications section now that you can see the "
            f"background.\n\nOriginal Abstract:\n{problem['text']}\n\n"
            f"The background and motivation:\n{first[0]}\n\n"
            f"Your previous methodology and implications:\n{first[1]}\n\nIMPORTANT INSTRUCTIONS:\n"
            "- Build upon the background section\n- Ensure consistency with the background and "
            "motivation\n- Make both sections roughly equal in length\n"]
