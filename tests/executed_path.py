#!/usr/bin/env python3
"""What a reader must read to follow what RUNS (tests/test_budgets.py holds the budgets): one real update of
a trainer in its default configuration (its default model, CPU; extra flags after the entries, e.g. --model
tiny, --no-fast),
every Python function of the project that executes inside the named entry functions, counted by its
whole source span (a reader reads a function whole), nested definitions inside a counted one once.
Run from the project's root:
    python tests/executed_path.py cotrain  [ENTRY,ENTRY ...]   (default rollout_step,ppo_update)
    python tests/executed_path.py magrpo   [ENTRY ...]          (default magrpo_step)
Prints the total and the functions by file; --list prints every function."""
import ast, os, sys, tempfile

root = os.getcwd()
script = sys.argv[1]
named = len(sys.argv) > 2 and not sys.argv[2].startswith("-")
entries = (sys.argv[2] if named else
           {"cotrain": "rollout_step,ppo_update", "magrpo": "magrpo_step"}[script]).split(",")
extra = [a for a in sys.argv[3 if named else 2:] if a != "--list"]
show = "--list" in sys.argv
sys.path.insert(0, root)
seen, depth = set(), [0]


def prof(frame, event, arg):
    if event == "call":
        co = frame.f_code
        f = co.co_filename
        rel = os.path.relpath(f, root)
        if (f.startswith(root + os.sep) and not rel.startswith(".") and "site-packages" not in rel
                and not rel.startswith("tests" + os.sep)):  # the project's own files, not a venv inside it
            seen.add((rel, co.co_firstlineno, co.co_name))


mod = __import__(script)
for name in entries:
    inner = getattr(mod, name)
    def wrapped(*a, __inner=inner, **k):
        depth[0] += 1
        if depth[0] == 1:
            sys.setprofile(prof)
        try:
            return __inner(*a, **k)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                sys.setprofile(None)
    setattr(mod, name, wrapped)
from nanomarl.cli import parse_args
out = tempfile.mkdtemp()
flags = ["--max-steps", "1", "--output-dir", out]
flags += ["--eval-questions", "0"] if script == "cotrain" else ["--eval-problems", "0"]
sys.argv = [script + ".py"] + flags + extra
try:
    mod.main(parse_args(mod.Args))
except SystemExit:
    pass

spans = {}
for rel in sorted({s[0] for s in seen}):
    tree = ast.parse(open(os.path.join(root, rel)).read())
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    for rel2, first, name in [s for s in seen if s[0] == rel]:
        for n in defs:
            start = min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])])
            if start == first and (name == "<lambda>") == isinstance(n, ast.Lambda):
                spans[(rel, start)] = (n.end_lineno, name)
                break
# drop definitions nested inside a counted one
kept = {k: v for k, v in spans.items()
        if not any(k2[0] == k[0] and k2[1] < k[1] and v2[0] >= v[0] for k2, v2 in spans.items() if k2 != k)}
total = sum(end - start + 1 for (rel, start), (end, _) in kept.items())
by_file = {}
for (rel, start), (end, name) in kept.items():
    by_file.setdefault(rel, []).append((start, end, name))
for rel, fns in sorted(by_file.items()):
    print(f"{rel}: {sum(e - s + 1 for s, e, _ in fns)} lines, {len(fns)} functions"
          + (": " + ", ".join(f"{n}({e - s + 1})" for s, e, n in sorted(fns)) if show else ""))
print(f"executed reading path of {script}.py:{','.join(entries)}: {total} lines in {len(kept)} functions")
