"""debate_prompts.py: the words of the MAPoRL debate: the turn-1 instruction of each
--prompt-style (turn1_prompt), the discussion message of turn t > 1 (discussion_message; the
authors' paragraph and the verifier feedback: authors_prompts.py), a split debate's messages
(first_message; followup_message, which quotes each partner's first_sentence), the chat continued
token for token (sampled_conversation: a row's prompt and sampled response without padding;
continue_chat: the next turn's prompt as token ids). cotrain.py, train_verifier.py and evaluate.py
show the agents these texts."""
from __future__ import annotations

import re

import torch


# The debate's turn-1 instruction (the authors' wrappers), shared by cotrain.py
# (the agents' first turn), train_verifier.py (the verifier must see the prompt the agents
# answered) and evaluate.py.
TURN1_MATH = {
    "default": ("Question: {question}\n\nProvide a short but precise reasoning for your solution. "
                "At the end, you MUST write the answer in the following format:\n\nAnswer: "
                "\\boxed{{XX}}\n\nPlease ensure that the final answer is always formatted "
                "this way."),
    # ours, for small models (the CPU default): SmolLM2-135M copies the authors'
    # "\\boxed{XX}" placeholder
    "short": "{question}\nShow the calculation, then end with \"The answer is\" and the number.",
    "phi3": ("Question: {question}\n\nProvide a reasoning for your solution. At the end, you MUST "
             "write the answer in the following format:```\n\nAnswer: \\boxed{{ XXX }}'''\n\n"
             "Please ensure that the final answer is always formatted this way."),
}


# the turn t > 1 instruction of the 'short' style (discussion_message)
SHORT_DISCUSSION = ("{question}\nCheck these solutions and yours, show the calculation, then end "
                    "with \"The answer is\" and the number.")


# ours: the authors' ANLI prompt does not ask for a box
NLI_BOX = ("\n\nAt the end, write your final answer in the following format:\n\nAnswer: "
           "\\boxed{LABEL}\n\nwhere LABEL is entailment, neutral or contradiction.")


def first_message(record: dict, agent: int, style: str) -> str:
    """Agent `agent`'s first message: its own view (a split record's "views"), else turn1_prompt."""
    if "views" in record:
        return record["views"][agent]
    return turn1_prompt(record["question"], record["task"], style)


def first_sentence(text: str) -> str:
    """A message up to its first full stop or line break: what a split debate's partner hears."""
    return re.match(r"[^.\n]*[.\n]?", text).group(0).strip()


def followup_message(record: dict, agent: int, said: list[str]) -> str:
    """A split record's message at turn t > 1, a fresh chat: agent `agent`'s "followups" with the
    first sentence of each partner's last message quoted in (the number, not a guess after it)."""
    return record["followups"][agent].format(said=" ".join(f'"{first_sentence(s)}"' for s in said))


def turn1_prompt(question: str, task: str, style: str = "default") -> str:
    """The first user message: the question in the instruction of `style` (nli questions already
    hold the ANLI prompt; NLI_BOX asks for the \\boxed{} label)."""
    return question + NLI_BOX if task == "nli" else TURN1_MATH[style].format(question=question)


def discussion_message(question: str, other_answers: list[tuple[int, str]],
                       other_scores: list[float] | None = None, own_score: float | None = None,
                       prompt_style: str = "default") -> str:
    """The user message of turn t > 1 for one agent: other_answers, (index, answer at t-1) of every
    OTHER agent, and with --feedback-in-prompt the verifier's other_scores and own_score. 'short'
    (ours): one line of instruction; other styles, or feedback: the authors' (authors_prompts)."""
    if prompt_style != "short" or other_scores is not None or own_score is not None:
        from nanomarl.tasks.authors_prompts import authors_discussion_message  # off the default
        return authors_discussion_message(question, other_answers, other_scores, own_score)
    message = "Solutions from other agents:" + "".join(f"\n\nAgent {agent + 1}: ```{answer}```"
                                                       for agent, answer in other_answers)
    return message + "\n\n" + SHORT_DISCUSSION.format(question=question)


def sampled_conversation(batch: dict, b: int) -> torch.Tensor:
    """Row b of a generate() batch without padding: the prompt's tokens, then the response's."""
    return torch.cat([batch["query_ids"][b][batch["query_mask"][b].bool()],
                      batch["response_ids"][b][batch["response_mask"][b].bool()]])


def continue_chat(tokenizer, conversation_ids: list[int], prompt: str) -> list[int] | str:
    """The next turn's prompt as token ids: the conversation as sampled, then the rest of the
    rendered chat `prompt` tokenised on its own ("\n\n" sampled as one token stays one); the text
    itself where it does not start with the conversation's (a template that rewrites turns)."""
    sampled = tokenizer.decode(conversation_ids)
    if not prompt.startswith(sampled):
        return prompt
    rest = tokenizer(prompt[len(sampled):], add_special_tokens=False)["input_ids"]
    return list(conversation_ids) + rest
