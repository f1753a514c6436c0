"""Every `module.function` and `file.py:function` that a comment, a docstring or a docs page names
exists: defined (def, class or assignment at the top level, or a method) in that module."""
import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ("common", "cotrain", "magrpo", "train_verifier", "toy_game", "evaluate", "bench", "plot")
DOTTED = re.compile(r"(?<![\w./])(" + "|".join(SCRIPTS) + r")\.(?!(?:py|md|json|jsonl|png)\b)"
                    r"([A-Za-z_]\w*)\b")
FILE_NAME = re.compile(r"(?<![\w.])((?:[\w]+/)*[\w]+\.py):([A-Za-z_]\w*)")


def defined_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def find_file(name: str) -> Path | None:
    for folder in ("", "nanomarl/", "nanomarl/tasks/", "tests/"):
        if (ROOT / folder / name).is_file():
            return ROOT / folder / name
    matches = sorted(ROOT.glob(f"**/{name}"))
    matches = [m for m in matches if ".venv" not in m.parts]
    return matches[0] if len(matches) == 1 else None


def prose(path: Path) -> str:
    """A .py file's comments and strings; a docs page whole."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        return text
    kept = [tok.string for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type in (tokenize.COMMENT, tokenize.STRING)]
    return "\n".join(kept)


def sources() -> list[Path]:
    files = [*ROOT.glob("*.py"), *(ROOT / "nanomarl").rglob("*.py"), *(ROOT / "docs").glob("*.md"),
             ROOT / "README.md"]
    return sorted(files)


def test_every_named_module_function_exists():
    cache, missing = {}, []
    for path in sources():
        text = prose(path)
        refs = [(f"{m}.py", f) for m, f in DOTTED.findall(text)] + FILE_NAME.findall(text)
        for file_name, name in refs:
            target = find_file(file_name)
            if target is None:
                continue  # a file of another repository (docs cite the anchors' code)
            if target not in cache:
                cache[target] = defined_names(target)
            if name not in cache[target]:
                missing.append(f"{path.relative_to(ROOT)}: {file_name}:{name}")
    missing = sorted(set(missing))
    assert not missing, f"{len(missing)} references to nothing: " + "; ".join(missing)


SPEC = re.compile(r"\bspec\b\W{0,8}(§|section)|\bproject spec|\bthe spec\b", re.IGNORECASE)


def test_no_reference_to_the_spec_outside_the_repository():
    """The project's spec ("spec §3", "the spec") is a document a reader of the repository does not
    have: a comment or a page names what is in the repository instead."""
    named = [str(path.relative_to(ROOT)) for path in sources() if SPEC.search(prose(path))]
    assert not named, f"a reference to the spec in {named}"
