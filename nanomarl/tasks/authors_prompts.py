"""authors_prompts.py: the authors' discussion message of turn t > 1 (--prompt-style default and
phi3) with the verifier's feedback of --feedback-in-prompt, in their words. It is off cotrain.py's
default path ('short', no feedback): debate_prompts.discussion_message hands these messages here.
A learner may skip this module."""
from __future__ import annotations


DISCUSSION_INSTRUCTION = (
    "Focus on providing a well-reasoned response that not only considers your own previous "
    "solution but also takes into account answers from other agents. If you believe your previous "
    "answer was incorrect, feel free to revise it. However, avoid repeating the same answer you or "
    "other agents have already provided. {reward_sentence}Ensure that your explanation is well "
    "justifing your final answer. Please maintain your answer with very simple reasoning.\n\n"
    "Once again, the question is: {question}")  # verbatim from the authors' code, typos included


REWARD_SENTENCE = "Also, internaly think about the reward of your and other agents' answer."


# its start and end are the authors' words; the middle is ours
REWARD_EXPLANATION = ("Here, each reward represents the probability that a suggested answer is "
                      "correct, as evaluated by a verifier. The reward value is between 0 and 1; "
                      "the verifier is not always perfect, though generally quite reliable.")


def verifier_feedback(score: float) -> str:
    """The line an agent reads on its last answer with --feedback-in-prompt (the authors' words)."""
    if score < 0.3:
        meaning = "Your answer is highly likely wrong."
    elif score < 0.6:
        meaning = "Your answer might be wrong, or your reasoning needs to have a stronger argument."
    elif score < 0.8:
        meaning = ("Your answer seems right, but check your reasoning again, there might be "
                   "some room for improvement.")
    else:
        meaning = "Your answer is likely right with high probability."
    return f"Reward from a verifier of your answer: {score:.3f} out of 1.0, which means {meaning}"


def authors_discussion_message(question: str, other_answers: list[tuple[int, str]],
                               other_scores: list[float] | None, own_score: float | None) -> str:
    """The authors' construct_message_multi_agent: other_answers, (index, answer at t-1) of every
    OTHER agent, each with its verifier score from other_scores, and own_score's feedback first
    (None: no feedback, and no sentence about rewards)."""
    message = "These are the solutions to the problem from other agents: "
    for k, (agent, answer) in enumerate(other_answers):
        message += f"\n\n Agent {agent + 1} solution: ```{answer}```"
        if other_scores is not None:
            message += (f"\n\n Reward associated with agent {agent + 1}'s solution calculated by "
                        f"verifier: {other_scores[k]:.3f} out of 1.0")
    if other_scores is not None:
        message += "\n\n" + REWARD_EXPLANATION
    sentence = REWARD_SENTENCE if other_scores is not None else ""
    message += "\n\n" + DISCUSSION_INSTRUCTION.format(reward_sentence=sentence, question=question)
    # the authors merge "feedback on your last answer" and the discussion into one user turn
    if own_score is not None:
        message = verifier_feedback(own_score) + "\n\n" + message
    return message
