"""writing.py: the writing tasks (TLDR, arXiv): the two agents' prompts and the gated writing
reward (max 3.0).

TLDR: agent 0 writes a concise summary of a post, agent 1 a longer, richer one. arXiv: agent 0 the
background and motivation of an abstract's introduction, agent 1 its methodology and implications.
The reward's word lists are the authors' (LLM_Collab_Writing rewards/tldr_rewards.py and
arxiv_rewards.py; both files use the same). Transition phrases are matched as SUBSTRINGS of the
lowercased text, so short ones ("so", "as", "if") match inside other words; that is the authors'
behaviour and it is kept.
"""
from __future__ import annotations

import re

STOPWORDS = {
    "a", "all", "also", "an", "and", "any", "are", "as", "at", "bad", "be", "been", "being",
    "both", "but", "by", "can", "could", "did", "do", "does", "each", "few", "first", "for",
    "from", "good", "great", "had", "has", "have", "he", "her", "here", "him", "his", "how",
    "i", "if", "in", "is", "it", "its", "just", "last", "left", "little", "long", "low", "many",
    "may", "me", "might", "more", "most", "much", "must", "my", "new", "no", "not", "now", "of",
    "old", "on", "only", "or", "other", "our", "own", "right", "same", "shall", "should", "so",
    "some", "such", "than", "that", "the", "their", "them", "then", "there", "these", "they",
    "this", "those", "to", "too", "us", "very", "was", "we", "were", "what", "when", "where",
    "which", "who", "why", "will", "with", "would", "you", "your",
}
TRANSITION_WORDS = {
    "elaboration": [
        "furthermore", "moreover", "additionally", "also", "besides", "in addition",
        "what is more", "not only", "as well as", "along with", "coupled with",
        "together with", "likewise", "similarly", "equally important", "by the same token",
        "in the same way", "correspondingly", "in like manner", "comparatively", "analogously",
    ],
    "examples": [
        "for example", "for instance", "specifically", "particularly", "namely", "such as",
        "including", "especially", "in particular", "to illustrate", "as an illustration",
        "case in point", "to demonstrate", "as evidence", "to exemplify", "notably",
        "markedly", "chiefly", "mainly", "primarily", "above all", "most importantly",
    ],
    "explanation": [
        "that is", "in other words", "to put it simply", "to clarify", "indeed", "in fact",
        "actually", "clearly", "obviously", "to put it another way", "to rephrase",
        "more precisely", "specifically speaking", "what this means is", "the point is",
        "essentially", "basically", "fundamentally", "at its core", "in essence", "simply put",
        "stated differently",
    ],
    "cause_effect": [
        "therefore", "thus", "consequently", "as a result", "hence", "accordingly",
        "for this reason", "due to this", "because of this", "so", "then", "thereby",
        "wherefore", "thence", "ergo", "as a consequence", "in consequence", "it follows that",
        "this leads to", "this results in", "this causes", "this brings about", "owing to",
        "on account of", "thanks to", "resulting from",
    ],
    "contrast": [
        "however", "nevertheless", "nonetheless", "on the other hand", "in contrast", "while",
        "whereas", "although", "even though", "despite this", "but", "yet", "still",
        "conversely", "on the contrary", "rather", "instead", "alternatively", "otherwise",
        "in opposition", "by contrast", "contrarily", "notwithstanding", "regardless",
        "all the same", "even so", "be that as it may", "in any case", "at any rate",
    ],
    "sequence": [
        "first", "second", "third", "next", "then", "after that", "finally", "lastly",
        "initially", "subsequently", "meanwhile", "to begin with", "to start with",
        "in the beginning", "at first", "at the outset", "primarily", "secondly", "thirdly",
        "following this", "afterward", "later", "later on", "in the meantime", "simultaneously",
        "concurrently", "at the same time", "in conclusion", "to conclude", "ultimately",
        "in the end", "to summarize", "in summary",
    ],
    "emphasis": [
        "indeed", "certainly", "surely", "undoubtedly", "without doubt", "definitely",
        "absolutely", "positively", "unquestionably", "indubitably", "of course", "naturally",
        "obviously", "clearly", "evidently", "manifestly", "undeniably", "admittedly",
        "granted", "to be sure", "in fact", "as a matter of fact", "notably", "significantly",
    ],
    "summary": [
        "in summary", "in conclusion", "to summarize", "to conclude", "in short", "in brief",
        "briefly", "to sum up", "on the whole", "overall", "all in all", "in essence",
        "essentially", "basically", "fundamentally", "in the final analysis", "after all",
        "ultimately", "in the end", "when all is said and done", "the bottom line is",
    ],
    "comparison": [
        "similarly", "likewise", "in the same way", "equally", "just as", "comparable to",
        "in comparison", "by the same token", "correspondingly", "in like manner",
        "along the same lines", "in similar fashion", "analogously", "by analogy",
        "just like", "much like", "as with",
    ],
    "concession": [
        "although", "though", "even though", "while", "whereas", "despite", "in spite of",
        "regardless of", "notwithstanding", "admittedly", "granted", "even if",
        "be that as it may", "nevertheless", "nonetheless", "however", "yet", "still",
        "all the same",
    ],
    "condition": [
        "if", "unless", "provided that", "assuming that", "supposing that", "in case",
        "in the event that", "on condition that", "given that", "as long as", "so long as",
        "only if", "even if", "whether or not", "should", "were", "had", "otherwise",
        "or else",
    ],
    "time": [
        "when", "while", "as", "after", "before", "until", "since", "during", "meanwhile",
        "simultaneously", "at the same time", "concurrently", "previously", "formerly",
        "earlier", "later", "afterward", "subsequently", "eventually", "finally", "recently",
        "lately", "nowadays", "currently", "presently", "immediately",
    ],
}


def writing_prompts(problem: dict) -> list[str]:
    """The two agents' first-turn prompts of a TLDR problem (kind 'tldr') or else an arXiv one."""
    if problem["kind"] == "tldr":
        post = problem["text"]
        return [f"Create a concise summary response to this post.\n\nQuery:\n{post}\n\n"
                "IMPORTANT INSTRUCTIONS:\n- Provide a brief, focused summary in one sentence or a "
                "few sentences\n- Be factual and informative\n",
                f"Create a detailed summary response to this post.\n\nOriginal Query:\n{post}\n\n"
                "IMPORTANT INSTRUCTIONS:\n- Use more unique words\n"
                "- Use some transition words to improve flow\n"]
    opening = ("Based on the following scientific abstract, expand content for an introduction "
               f"section.\n\nAbstract:\n{problem['text']}\n\nIMPORTANT INSTRUCTIONS:\n")
    return [opening + "- There is another agent that will provide methodology and implications\n"
                      "- You just need to focus on background and motivation\n"
                      "- Avoid repeating methodology and implications content\n",
            opening + "- There is another agent that will provide the background and motivation\n"
                      "- You just need to focus on methodology and implications\n"
                      "- Avoid repeating background and motivation content\n"]


def words(text: str, drop_stopwords: bool = False) -> set[str]:
    found = re.findall(r"\b\w+\b", text.lower())
    return {w for w in found if not (drop_stopwords and w in STOPWORDS)}


def transition_score(text: str) -> float:
    """0 if no category's phrase occurs in the text, else 0.4 + 0.05 per extra category (max
    1.0)."""
    found = sum(any(phrase in text.lower() for phrase in phrases)
                for phrases in TRANSITION_WORDS.values())
    return 0.0 if found == 0 else min(0.4 + min(0.05 * (found - 1), 0.6), 1.0)


def jaccard(text1: str, text2: str) -> float:
    """Jaccard similarity of the stopword-free word sets (1.0 if both are empty)."""
    a, b = words(text1, True), words(text2, True)
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def writing_reward(c1: str, c2: str, task: str) -> tuple[float, dict]:
    """The authors' gated 4-level writing reward; a level counts only if every level before it
    passed.
      1 structure (0.5):    both texts have [8, 256] (tldr) / [128, 256] (arxiv) whitespace tokens;
      2 coordination (1.0): character-length ratio len(c2)/len(c1): tldr 1 on [1.6, 3.2], ramps on
                            [1.1, 1.6) and (3.2, 5.0]; arxiv 1 on [1.3, 1.6], ramps on [0.8, 1.3)
                            and (1.6, 2.0]; else stop;
      3 vocabulary (0.5):   unique-word ratio c2/c1 (stopwords included, as the authors' code): tldr
                            0.5 if ≥ 2, ramp on [1.3, 2); arxiv 0.5 on [0.7, 1.3], ramps on
                            [0.5, 0.7) and (1.3, 1.7]; else stop;
      4 style (1.0):        0.4·transitions (in c2 for tldr, in c1+c2 for arxiv)
                            + 0.6·min(Jaccard, cap)/cap, cap 0.03 (tldr) / 0.23 (arxiv).
    Returns (total, levels) with levels structure, coordination, vocabulary, style."""
    levels = dict(structure=0.0, coordination=0.0, vocabulary=0.0, style=0.0)
    lo = 8 if task == "tldr" else 128
    if not all(lo <= len(c.split()) <= 256 for c in (c1, c2)):
        return 0.0, levels
    levels["structure"] = 0.5
    if len(c1) == 0:
        return 0.5, levels
    ratio = len(c2) / len(c1)
    a, b, c, d = (1.1, 1.6, 3.2, 5.0) if task == "tldr" else (0.8, 1.3, 1.6, 2.0)
    if b <= ratio <= c:
        levels["coordination"] = 1.0
    elif a <= ratio < b:
        levels["coordination"] = (ratio - a) / (b - a)
    elif c < ratio <= d:
        levels["coordination"] = 1.0 - (ratio - c) / (d - c)
    else:
        return sum(levels.values()), levels
    unique1, unique2 = len(words(c1)), len(words(c2))
    if unique1 == 0:
        return sum(levels.values()), levels
    u = unique2 / unique1
    if task == "tldr" and u >= 2.0:
        levels["vocabulary"] = 0.5
    elif task == "tldr" and 1.3 <= u < 2.0:
        levels["vocabulary"] = 0.5 * (u - 1.3) / 0.7
    elif task == "arxiv" and 0.7 <= u <= 1.3:
        levels["vocabulary"] = 0.5
    elif task == "arxiv" and 0.5 <= u < 0.7:
        levels["vocabulary"] = 0.5 * (u - 0.5) / 0.2
    elif task == "arxiv" and 1.3 < u <= 1.7:
        levels["vocabulary"] = 0.5 * (1.0 - (u - 1.3) / 0.4)
    else:
        return sum(levels.values()), levels
    transitions = transition_score(c2 if task == "tldr" else c1 + c2)
    cap = 0.03 if task == "tldr" else 0.23
    levels["style"] = 0.4 * transitions + 0.6 * min(jaccard(c1, c2), cap) / cap
    return sum(levels.values()), levels


def tldr_reward(c1: str, c2: str) -> tuple[float, dict]:
    """TLDR: agent 1 a concise summary, agent 2 a longer, richer one (see writing_reward)."""
    return writing_reward(c1, c2, "tldr")


def arxiv_reward(c1: str, c2: str) -> tuple[float, dict]:
    """arXiv: agent 1 background and motivation, agent 2 methodology and implications (see
    writing_reward)."""
    return writing_reward(c1, c2, "arxiv")
