"""sandbox_sources.py: what sandbox.py:run_tests_in_sandbox reads of a program's and a context's
source before a run, in the trainer (not in the sandbox: no module of sandbox.py's MODULES): the
names the tests may ask the program for (its top-level defs and classes, where the caller names
none), the modules the context imports (imported before the fork) and the classes it declares
(a program's instance of one is a value: sandbox.py's docstring)."""
from __future__ import annotations

import ast
import threading

PARSING = threading.Lock()  # ast.parse from parallel_map's threads: CPython 3.11 can fail with a
# SystemError ("AST constructor recursion depth mismatch") when two threads parse at once


def parse_body(source: str) -> list:
    """The top-level statements of source ([] when blank), one thread at a time."""
    with PARSING:
        return ast.parse(source).body if source.strip() else []


def top_level(source: str) -> tuple[list[str], list[str], list[str]]:
    """(the names a module's top-level defs and classes define, the modules its top-level import
    statements import, the classes it declares: a context's (the task's prompt's) class statements
    and `X = namedtuple("X", ...)` (or NamedTuple), whose instances the program makes are values,
    rebuilt or made as that class in the test process); ([], [], []) if it does not parse."""
    try:
        body = parse_body(source)
    except (SyntaxError, ValueError):
        return [], [], []
    defined = [node.name for node in body if isinstance(
        node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return defined, [name for node in body for name in (
        [alias.name for alias in node.names] if isinstance(node, ast.Import)
        else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
        else [])], [name for node in body if (name := declared(node))]


def declared(node: ast.stmt) -> str | None:
    """The class a top-level statement declares: `class X`, `X = namedtuple("X", ...)`."""
    match node:
        case ast.ClassDef(name=name):
            return name
        case ast.Assign(targets=[ast.Name(id=name)], value=ast.Call(
                func=ast.Name(id=kind) | ast.Attribute(attr=kind),
                args=[ast.Constant(value=str(text)), *_])) if text == name and kind in TUPLES:
            return name
    return None


TUPLES = ("namedtuple", "NamedTuple")  # collections', typing's
