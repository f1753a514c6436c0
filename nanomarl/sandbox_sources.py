"""sandbox_sources.py: what sandbox.py:run_tests_in_sandbox reads of a program's and a context's
source before a run, in the trainer (not in the sandbox: no module of sandbox.py's MODULES): the
names the tests may ask the program for (its top-level defs, classes and assigned names, where the
caller names none: plain Python's test sees them all), the modules the context imports (imported
before the fork) and the classes it declares (a program's instance of one is a value: sandbox.py's
docstring)."""
from __future__ import annotations

import ast
import threading

PARSING = threading.Lock()  # ast.parse from parallel_map's threads: CPython 3.11 can fail with a
# SystemError ("AST constructor recursion depth mismatch") when two threads parse at once


def parse_body(source: str) -> list:
    """The top-level statements of source ([] when blank), one thread at a time."""
    with PARSING:
        return ast.parse(source).body if source.strip() else []


def top_level(source: str) -> tuple[list[str], list[str], list[str], list[str]]:
    """(the names a module's top-level defs and classes define, the modules its top-level import
    statements import, the classes it declares: a context's (the task's prompt's) class statements
    and `X = namedtuple("X", ...)` (or NamedTuple), whose instances the program makes are values,
    rebuilt or made as that class in the test process, the names its top-level assignments bind:
    bound); ([], [], [], []) if it does not parse."""
    try:
        body = parse_body(source)
    except (SyntaxError, ValueError):
        return [], [], [], []
    defined = [node.name for node in body if isinstance(
        node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    assigned = [name for node in body for name in bound(
        node.targets if isinstance(node, ast.Assign) else [node.target]
        if isinstance(node, ast.AnnAssign) and node.value else [])]
    aliases = tuple(alias.asname for node in body if isinstance(node, ast.ImportFrom)
                    and node.module in ("collections", "typing")
                    for alias in node.names if alias.name in TUPLES and alias.asname)
    return defined, [name for node in body for name in (
        [alias.name for alias in node.names] if isinstance(node, ast.Import)
        else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
        else [])], [name for node in body if (name := declared(node, aliases))], assigned


def bound(targets: list) -> list[str]:
    """The names a top-level assignment binds (`MOD = 10 ** 9 + 7`, `a, *b = ...`): a plain name's,
    a tuple's or list's names all the way down; none of a dunder (`__all__`), an attribute's or
    an item's."""
    found = []
    for target in targets:
        if isinstance(target, ast.Starred):
            target = target.value
        if isinstance(target, ast.Name) and not target.id.startswith("__"):
            found.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            found += bound(target.elts)
    return found


def declared(node: ast.stmt, aliases: tuple[str, ...] = ()) -> str | None:
    """The class a top-level statement declares: `class X`, `X = namedtuple("X", ...)` (its
    typename by position or keyword; namedtuple or NamedTuple by name, as a module's attribute or
    by one of the aliases `from collections import namedtuple as nt` makes)."""
    match node:
        case ast.ClassDef(name=name):
            return name
        case ast.Assign(targets=[ast.Name(id=name)], value=ast.Call(func=func) as call) if (
                func.id in TUPLES + aliases if isinstance(func, ast.Name)
                else isinstance(func, ast.Attribute) and func.attr in TUPLES):
            return name if typename(call) == name else None
    return None


def typename(call: ast.Call) -> object:
    """A namedtuple call's typename: its first argument or its `typename` keyword, a constant."""
    found = call.args[0] if call.args else next(
        (keyword.value for keyword in call.keywords if keyword.arg == "typename"), None)
    return found.value if isinstance(found, ast.Constant) else None


TUPLES = ("namedtuple", "NamedTuple")  # collections', typing's
