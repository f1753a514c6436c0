"""--help fits an 80-column terminal: every line each script prints for --help (parse_args, as the
scripts call it) is at most 80 characters, also in a wider terminal. The flags' help and the
description wrap at 78 columns; the examples are the docstring's command lines as written."""
import importlib

import pytest

from nanomarl.cli import parse_args

SCRIPTS = ["cotrain", "magrpo", "evaluate", "train_verifier", "toy_game"]
WIDTH = 80


def help_lines(script: str, columns: int, monkeypatch, capsys) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))  # the terminal's width, as argparse reads it
    with pytest.raises(SystemExit) as done:
        parse_args(importlib.import_module(script).Args, ["--help"])
    assert done.value.code == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_help_line_within_80_characters(script, columns, monkeypatch, capsys):
    lines = help_lines(script, columns, monkeypatch, capsys)
    long = [f"{len(line)}: {line}" for line in lines if len(line) > WIDTH]
    assert not long, (f"{script}.py --help in {columns} columns, lines over {WIDTH} characters:\n"
                      + "\n".join(long))


@pytest.mark.parametrize("script", ["evaluate", "train_verifier"])
def test_help_examples_keep_their_continuation_lines(script, monkeypatch, capsys):
    """A docstring command that goes on after a trailing backslash is shown whole."""
    lines = help_lines(script, 80, monkeypatch, capsys)
    examples = lines[lines.index("examples:") + 1:]
    assert examples and examples[-1].strip() and not examples[-1].endswith("\\"), examples
    for line, after in zip(examples, examples[1:]):
        if line.endswith("\\"):
            assert after.startswith("      --"), (line, after)
