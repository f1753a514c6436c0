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
    assert line.endswith("python -m pytest tests -q"), line
    assert code_lines(readme).index(line) > 1  # after the install and the one-minute check
