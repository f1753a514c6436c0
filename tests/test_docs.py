"""What the docs promise a newcomer: the README's quickstart order (install first, with the CPU build;
then the one-minute check; CI's test line in the form .ci/run reads), and results files that exist."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"
CI_LINE = re.compile(r"^python3 -m venv \.venv .*pytest", re.MULTILINE)  # the pattern .ci/run greps


def code_lines(markdown: str) -> list[str]:
    """The lines inside the fenced code blocks, in order, blank ones left out."""
    lines, inside = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside and line.strip():
            lines.append(line.strip())
    return lines


def test_readme_first_code_line_installs_the_cpu_build_and_runs_nothing():
    first, second = code_lines((ROOT / "README.md").read_text(encoding="utf-8"))[:2]
    assert first.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install torch"), first
    assert CPU_INDEX in first, f"the install line does not give the CPU build: {first}"
    assert "-c constraints.txt -r requirements.txt" in first, first
    steps = [step.strip() for step in first.split("&&")]
    assert all(step.startswith(("python3 -m venv", ".", "pip install")) for step in steps), (
        f"the install line runs more than the install: {first}")
    assert second == "python cotrain.py --model tiny --max-steps 2", (
        f"the second code line is not the one-minute check: {second}")


def test_readme_test_line_is_the_one_ci_runs_with_the_locked_versions():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert CI_LINE.pattern.replace("\\", "") in (ROOT / ".ci" / "run").read_text().replace("\\", "")
    matches = CI_LINE.findall(readme)
    assert len(matches) == 1, f"{len(matches)} README lines match .ci/run's pattern"
    line = next(line for line in readme.splitlines() if CI_LINE.match(line))
    assert "pip install -c constraints.txt -r requirements.txt" in line, line
    assert line.endswith("python -m pytest tests -q -n 2"), line
    assert code_lines(readme).index(line) > 1  # after the install and the one-minute check


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RESULT_FILE = re.compile(r"`([^`\s]*-[^`\s]*\.(?:md|jsonl|json|png|csv))`")  # run files: name-label.ext


def prose(path: Path) -> str:
    """A markdown file without its fenced code blocks."""
    return re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)


def expand(name: str) -> list[str]:
    """`metrics-seed{0,1,2}.jsonl` -> the three names."""
    brace = re.search(r"\{([^{}]*)\}", name)
    if not brace:
        return [name]
    return [full for alternative in brace.group(1).split(",")
            for full in expand(name[:brace.start()] + alternative + name[brace.end():])]


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings."""
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.+)$", prose(path), flags=re.M)}


def test_every_results_file_a_doc_cites_exists():
    """A run file named in the docs (`metrics-seed{0,1,2}.jsonl`, `eval-tt2-s0-reasoning-gym.md`,
    `training_curves-seed*.png`) is a file under docs/results/; a placeholder name is not."""
    files = [p.name for p in (ROOT / "docs" / "results").rglob("*") if p.is_file()]
    cited, missing = 0, []
    for doc in DOCS:
        for token in RESULT_FILE.findall(prose(doc)):
            for name in expand(token):
                cited += 1
                pattern = re.escape(name.split("/")[-1]).replace(r"\*", ".*")
                if not any(re.fullmatch(pattern, file) for file in files):
                    missing.append(f"{doc.relative_to(ROOT)}: {name}")
    assert cited > 50, f"only {cited} results files cited: the pattern no longer finds them"
    assert not missing, "cited but not under docs/results/: " + "; ".join(missing)


def test_every_link_of_the_docs_reaches_its_file_and_heading():
    links, dead = 0, []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(doc)):
            if re.match(r"[a-z]+:", target):
                continue
            links += 1
            file, _, anchor = target.partition("#")
            path = (doc.parent / file) if file else doc
            if not path.exists():
                dead.append(f"{doc.relative_to(ROOT)}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                dead.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert links > 100, f"only {links} links found: the pattern no longer finds them"
    assert not dead, "dead links: " + "; ".join(dead)
