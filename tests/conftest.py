"""Shared pytest setup: offline, CPU, and one tiny random model built once per test run.

Every test runs with HF_HUB_OFFLINE=1 and NANOMARL_CACHE pointing at a per-run temporary folder, so
`--model tiny` (in-process or in a subprocess, which inherits the environment) resolves to a tiny random
Qwen2 built locally by build_tiny_model: nothing is ever downloaded.
"""
import os
import sys
import tempfile
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_VERBOSITY"] = "error"
os.environ.setdefault("NANOMARL_CACHE", tempfile.mkdtemp(prefix="nanomarl-test-cache-"))
os.environ.setdefault("OMP_NUM_THREADS", "1")  # tiny models: a second thread only adds contention (CLI subprocesses too)
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402
import torch  # noqa: E402
from nanomarl.models import build_tiny_model

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """Folder of the tiny random model + byte-level tokenizer (built once per run, ~2 s)."""

    return build_tiny_model(Path(os.environ["NANOMARL_CACHE"]) / "tiny-qwen2")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


# cotrain.py's paper settings, its defaults before the CPU default changed: GAE on value heads, one debate per
# question, the authors' -10 format and -1 missing-EOS penalties. The tests of PPO's invariants, counts and
# multi-process equality were written for them; the CPU default (--advantage group) has tests/test_group_advantage.py
PAPER_PPO = ["--advantage", "gae", "--samples-per-question", "1", "--format-penalty", "-10", "--missing-eos-penalty", "-1"]


def run_script(args: list[str], timeout: int = 300):
    """Run a top-level script in a subprocess from the repo root (CLI smoke tests); returns CompletedProcess."""
    import subprocess

    result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert result.returncode == 0, f"{' '.join(args)} failed:\nSTDOUT:\n{result.stdout[-3000:]}\nSTDERR:\n{result.stderr[-3000:]}"
    return result


class ModelLoaded(AssertionError):
    """Raised by the no_models fixture: a model load was reached where every refusal must come first."""


@pytest.fixture
def no_models(monkeypatch):
    """Loading a model or a tokenizer, or building the agents, raises ModelLoaded (cotrain.py and magrpo.py): the
    checks under test must stop the run before one. (Both scripts call start_run before they build the agents.)"""
    import cotrain
    import magrpo

    def refuse(*args, **kwargs):
        raise ModelLoaded("a model was loaded before the bad input was reported")

    for module in (cotrain, magrpo):
        monkeypatch.setattr(module, "load_model", refuse)
        monkeypatch.setattr(module, "load_tokenizer", refuse)
    monkeypatch.setattr(cotrain, "build_team", refuse)
    monkeypatch.setattr(magrpo, "build_agents", refuse)


def pytest_terminal_summary(terminalreporter):
    """The installed versions beside the ones in constraints.txt (the versions the suite was run with), printed
    at the end of every run, -q included."""
    from importlib.metadata import PackageNotFoundError, version

    locked = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                  if "==" in line and not line.startswith("#"))
    lines = []
    for name in ("torch", "transformers", "peft", "accelerate", "datasets", "tokenizers", "numpy", "gguf"):
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = "missing"
        lines.append(f"{name} {installed} (locked {locked.get(name, '2.13.0' if name == 'torch' else '-')})")
    terminalreporter.write_line("versions: " + ", ".join(lines))
