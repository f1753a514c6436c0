"""code.py: coding tasks: code cleanup, test extraction and the 4-level aux/main reward.

Two ways to turn completions and a problem into the program and tests the sandbox runs
(magrpo.py --code-extraction):
  ast (default): each completion's whole top-level defs (nested defs, decorators, multi-line
    signatures and docstrings kept) and imports, the prompt's own imports and helper functions, and
    check()'s statements as written (multi-line asserts, asserts in loops, the setup lines before
    them), so that every HumanEval canonical solution gets full credit (tests/test_sandbox.py checks
    all 164);
  authors: the authors' line-based cleanup and one-line assert extraction, kept for exact
    reproduction. It cuts a function at its first nested def, drops the prompt's helpers and breaks
    multi-line asserts and asserts in loops: 21 of the 164 canonical solutions get less than full
    test credit.
Generated code never runs in this process: run_tests_in_sandbox runs it in sandbox.py's locked-down
process.
"""
from __future__ import annotations

import ast
import re

from nanomarl.sandbox import run_tests_in_sandbox

CODE_TOKENS = ("def ", "return ", "if ", "for ", "while ", "=", "(", ")", "[", "]")


def cleanup_code_authors(text: str) -> str:
    """The authors' cleanup: the `def` blocks of a completion, markdown fences and prose lines
    dropped (a block ends at the first line not indented deeper than its def: a nested def ends it);
    '' if no def remains."""
    lines = re.sub(r"```\s*\n?", "", re.sub(r"```python\s*\n?", "", text or "")).split("\n")
    blocks, current, indent, i = [], None, 0, 0
    while i < len(lines):
        line, stripped = lines[i], lines[i].strip()
        if re.match(r"^(\s*)def\s+\w+\s*\(", line):
            if current:
                blocks.append(current)
            current, indent = [line], len(line) - len(line.lstrip())
        elif current is not None:
            if stripped == "" or line.startswith(" " * (indent + 1)) or line.startswith("\t"):
                current.append(line)
            elif stripped.startswith(('"""', "'''")):  # a docstring at the def's own indentation
                current.append(line)
                quote = stripped[:3]
                if not (stripped.endswith(quote) and len(stripped) > 3):
                    i += 1
                    while i < len(lines):
                        current.append(lines[i])
                        if quote in lines[i]:
                            break
                        i += 1
            else:
                blocks.append(current)
                current = None
        i += 1
    if current:
        blocks.append(current)
    kept = [line for line in "\n\n".join("\n".join(b) for b in blocks).split("\n")
            if not (line.strip() and not line.strip().startswith(("#", '"""', "'''"))
                    and not any(token in line for token in CODE_TOKENS)
                    and re.match(r"^[A-Z][a-z].*[.!?:]$", line.strip()))]  # "Here is the code:"
    result = "\n".join(kept).strip()
    return result if re.search(r"def\s+\w+\s*\(", result) else ""


def extract_function_authors(text: str, name: str) -> str:
    """The authors': the block of `def name(` in the cleaned completion, up to the first line
    indented no deeper."""
    out, indent = None, 0
    for line in cleanup_code_authors(text).split("\n"):
        if re.match(rf"^(\s*)def\s+{re.escape(name)}\s*\(", line):
            out, indent = [line], len(line) - len(line.lstrip())
        elif out is not None:
            if line.strip() == "" or line.startswith(" " * (indent + 1)) or line.startswith("\t"):
                out.append(line)
            else:
                break
    return "\n".join(out).strip() if out else ""


def extract_imports(prompt: str) -> str:
    """The problem prompt's `import x` / `from x import y` lines, deduplicated."""
    lines = [line.strip() for line in prompt.split("\n")]
    found = [line for line in lines if re.match(r"^from\s+[\w\.]+\s+import\s+.*$", line)
             or re.match(r"^import\s+[\w\.,\s]+$", line)]
    return "\n".join(dict.fromkeys(found))


def extract_tests_authors(test_code: str, entry_point: str) -> list[str]:
    """The authors': each `assert ... candidate ...` LINE of check(candidate), deduplicated,
    candidate -> entry_point."""
    match = re.search(r"def check\(candidate\):(.*?)(?=\n\ndef|\Z)", test_code or "", re.DOTALL)
    if not match:
        return []
    asserts = [line.strip() for line in match.group(1).strip().split("\n")
               if line.strip().startswith("assert") and "candidate" in line]
    return [a.replace("candidate", entry_point) for a in dict.fromkeys(asserts)]


BLOCK_START = re.compile(r"@|(async\s+)?def\s|class\s|import\s|from\s")


def code_blocks(text: str) -> list[str]:
    """The top-level def/class/import blocks of a completion, each whole and dedented; markdown
    fences and the prose between blocks dropped. A def that does not parse is kept as written (the
    syntax level reports it); any other block only if it parses."""
    lines = [line for line in (text or "").split("\n") if not line.lstrip().startswith("```")]
    indent = lambda line: len(line) - len(line.lstrip())
    defs = [indent(line) for line in lines if re.match(r"\s*(async\s+)?def\s+\w+\s*\(", line)]
    if not defs:
        return []
    # the completion's top level (a model may indent all of its code): its outermost def or class
    classes = [indent(line) for line in lines if re.match(r"\s*class\s+\w+\s*[:(]", line)]
    base = min(defs + classes)
    starts = [i for i, line in enumerate(lines)
              if indent(line) == base and BLOCK_START.match(line[base:])]
    dedent = lambda rows: "\n".join(row[base:] if not row[:base].strip() else row.lstrip()
                                    for row in rows).rstrip()
    blocks = []
    for i in starts:
        if blocks and i < blocks[-1][1]:
            continue  # inside the previous block (a decorator's def, or a block extended to parse)
        j, decorating = i + 1, lines[i][base:].startswith("@")
        while j < len(lines):
            if not lines[j].strip() or indent(lines[j]) > base:
                j += 1
            elif decorating and BLOCK_START.match(lines[j][base:]):  # the def or class it decorates
                decorating, j = lines[j][base:].startswith("@"), j + 1
            else:
                break
        # a line at the top level inside the block (a signature's closing paren, a docstring's text)
        # cuts it short: then the longest extension up to the next block that parses, to the end of
        # its first statement
        limit = min([k for k in starts if k >= j] + [len(lines)])
        tops = [k for k in range(j + 1, limit) if lines[k].strip() and indent(lines[k]) <= base]
        for end in [j, limit] + tops[::-1]:
            try:
                tree = ast.parse(dedent(lines[i:end]))
            except SyntaxError:
                continue
            if tree.body:
                blocks.append((i, i + tree.body[0].end_lineno, True))
                break
        else:
            blocks.append((i, j, False))
    return [dedent(lines[i:j]) for i, j, parses in blocks
            if parses or re.match(r"(@.*\n\s*)*(async\s+)?def\s", dedent(lines[i:j]))]


def block_name(block: str) -> str:
    """The name a block defines (its def or class), '' for an import."""
    match = re.search(r"^(?:async\s+)?(?:def|class)\s+(\w+)", block, re.M)
    return match.group(1) if match else ""


def cleanup_code(text: str, extraction: str = "ast") -> str:
    """The code of a completion (see code_blocks), '' if it defines no function."""
    if extraction == "authors":
        return cleanup_code_authors(text)
    code = "\n\n".join(code_blocks(text))
    return code if re.search(r"def\s+\w+\s*\(", code) else ""


def extract_function(text: str, name: str, extraction: str = "ast") -> str:
    """The whole top-level `def name(...)` (or `class name`: an entry point may be a class) of a
    completion (its last one, as Python would keep), '' if none."""
    if extraction == "authors":
        return extract_function_authors(text, name)
    for block in reversed(code_blocks(text)):
        if block_name(block) == name:
            return block
    return ""


def node_source(lines: list[bytes], node: ast.AST, rename: dict[str, str]) -> str:
    """A statement's source as written (dedented), with the names in `rename` renamed (ast offsets
    are bytes)."""
    rows = [bytearray(row) for row in lines[node.lineno - 1:node.end_lineno]]
    rows[-1] = rows[-1][:node.end_col_offset]
    names = [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in rename]
    for n in sorted(names, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        rows[n.lineno - node.lineno][n.col_offset:n.end_col_offset] = rename[n.id].encode()
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    rows = [bytearray(row) for row in lines[first - 1:node.lineno - 1]] + rows
    return "\n".join(bytes(row[node.col_offset:] if not row[:node.col_offset].strip()
                           else row.lstrip()).decode("utf-8", "replace") for row in rows)


def prompt_context(prompt: str, entry_point: str) -> str:
    """What the prompt defines besides the entry point's stub: its imports and helper functions
    (HumanEval 10, 32, 38, 50 call or test with them)."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return extract_imports(prompt)
    lines = prompt.encode().split(b"\n")
    return "\n".join(
        node_source(lines, node, {}) for node in tree.body
        if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and node.name == entry_point)
        and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)))


def check_statements(test_code: str, entry_point: str) -> list[tuple[str, str]]:
    """(setup, test) for each statement of check(candidate) that asserts something about candidate,
    as written (a multi-line assert, a loop of asserts), with candidate -> entry_point,
    deduplicated. setup: the test file's other top-level code and check's other statements before
    it (imports, variables), to run first."""
    try:
        tree = ast.parse(test_code or "")
    except SyntaxError:
        return []
    checks = [n for n in tree.body
              if isinstance(n, ast.FunctionDef) and n.name == "check" and n.args.args]
    if not checks:
        return []
    check, lines = checks[-1], test_code.encode().split(b"\n")
    rename = {check.args.args[0].arg: entry_point}
    is_check_call = lambda n: (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                               and isinstance(n.value.func, ast.Name)
                               and n.value.func.id == "check")
    setup = [node_source(lines, n, rename) for n in tree.body
             if n is not check and not is_check_call(n)]
    # candidate's names: candidate, and what a statement that uses it binds (`s = candidate()`,
    # an entry point that is a class: its asserts are about the instance)
    out, seen, made = [], set(), set(rename)
    for node in check.body:
        source = node_source(lines, node, rename)
        walk = list(ast.walk(node))
        uses = any(isinstance(n, ast.Name) and n.id in made for n in walk)
        if any(isinstance(n, ast.Assert) for n in walk) and uses:
            if source not in seen:
                seen.add(source)
                out.append(("\n".join(setup), source))
        else:
            setup.append(source)
            if uses and isinstance(node, (ast.Assign, ast.AnnAssign, ast.With, ast.For)):
                made |= {n.id for n in walk if isinstance(n, ast.Name)
                         and isinstance(n.ctx, ast.Store)}
    return out


def extract_tests(test_code: str, entry_point: str, extraction: str = "ast") -> list[str]:
    """The tests of a problem (one string per scored statement), candidate -> entry_point."""
    if extraction == "authors":
        return extract_tests_authors(test_code, entry_point)
    return [test for _, test in check_statements(test_code, entry_point)]


def calls_aux(main_code: str, extraction: str = "ast") -> bool:
    """main calls the helper: a call `aux(...)` in its syntax tree, where main does not bind the
    name aux itself (a parameter, an assignment, a nested def, an import). A mention in a comment,
    a docstring or a string is no call. The one definition behind the reward's cooperation level,
    cooperation_rate, MaxCoop and helper_use.py; authors: their regex on the text."""
    if extraction == "authors":
        return re.search(r"\baux\s*\(", main_code) is not None
    try:
        tree = ast.parse(main_code)
    except SyntaxError:
        return False
    nodes = list(ast.walk(tree))
    binds = any((isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == "aux")
                or (isinstance(n, ast.arg) and n.arg == "aux")
                or (isinstance(n, ast.alias) and (n.asname or n.name) == "aux")
                or (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                    and n.name == "aux") for n in nodes)
    return not binds and any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                             and n.func.id == "aux" for n in nodes)


def is_thin_wrapper(main_code: str) -> bool:
    """main's body (no def line, docstrings, comments) is `return …aux…` or `x = aux(…)` +
    `return x`."""
    body, in_docstring = [], False
    for line in main_code.split("\n"):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(('"""', "'''")):
            in_docstring = not (stripped.endswith(stripped[:3]) and len(stripped) > 3)
            continue
        if in_docstring:
            in_docstring = '"""' not in stripped and "'''" not in stripped
            continue
        if not stripped.startswith(("#", "def ")):
            body.append(stripped)
    if not body:
        return True
    if len(body) == 1:
        return body[0].startswith("return ") and "aux" in body[0]
    if len(body) == 2:
        m = re.search(r"(\w+)\s*=\s*aux\s*\(", body[0])
        return m is not None and body[1] == f"return {m.group(1)}"
    return False


def aux_result_unused(main_code: str) -> list[str]:
    """AST check of main's aux(...) calls whose result is thrown away: a standalone call, or an
    assignment never read afterwards or overwritten before it is read. Returns 'Line N: why' strings
    ([] if none)."""
    try:
        tree = ast.parse(main_code)
    except SyntaxError:
        return []
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    loads = [(n.id, n.lineno) for n in ast.walk(tree)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    stores = [(t.id, n.lineno) for n in ast.walk(tree) if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name)]
    problems = []
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "aux"):
            continue
        owner = parent.get(call)
        if isinstance(owner, ast.Expr):
            problems.append(f"Line {call.lineno}: standalone call (not assigned)")
        elif isinstance(owner, ast.Assign):
            for var in [t.id for t in owner.targets if isinstance(t, ast.Name)]:
                reads = [line for name, line in loads if name == var and line > owner.lineno]
                rewrites = [line for name, line in stores if name == var and line > owner.lineno]
                if not reads:
                    problems.append(f"Line {owner.lineno}: assigned to {var} but never used")
                elif rewrites and min(rewrites) < min(reads):
                    problems.append(f"Line {owner.lineno}: assigned to {var} but reassigned on "
                                    f"line {min(rewrites)} before use")
    return problems


def parses(code: str) -> bool:
    try:
        ast.parse(code)
        return True
    except SyntaxError:
        return False


def analyze_code(aux_text: str, main_text: str, problem: dict, tests: list[str] | None = None,
                 timeout: float = 3.0, memory_mb: int = 512, extraction: str = "ast") -> dict:
    """Everything the code reward and the level feedback look at. `tests` defaults to all extracted
    tests. The combined program runs in the sandbox only if it parses: authors: the prompt's
    import lines + aux + main; ast: the prompt's imports and helpers, then every block of the aux
    completion but a def of the entry point, then every block of the main completion but a def of
    aux (a block that does not parse only if it is the agent's own function)."""
    entry = problem["entry_point"]
    aux = extract_function(aux_text, "aux", extraction)
    main = extract_function(main_text, entry, extraction)
    report = dict(aux=aux, main=main,
                  aux_defined=bool(aux) and re.search(r"return\s+", aux) is not None,
                  main_defined=bool(main) and re.search(r"return\s+", main) is not None,
                  syntax_ok=False, syntax_error=None, syntax_message="", tests=[], passed=[],
                  errors=[], loaded=False, load_error="", calls_aux=calls_aux(main, extraction),
                  aux_unused=aux_result_unused(main), wrapper=is_thin_wrapper(main))
    report["aux_message"] = ("Aux function properly defined with return statement"
                             if report["aux_defined"] else "Aux function missing return statement"
                             if aux else "Aux function not defined")
    report["main_message"] = f"Main function ({entry}) " + (
        "properly defined with return statement" if report["main_defined"]
        else "missing return statement" if main else "not defined")
    if extraction == "authors":
        parts = [extract_imports(problem["prompt"]), cleanup_code_authors(aux),
                 cleanup_code_authors(main)]
    else:
        own = lambda text, mine, theirs: [block for block in code_blocks(text)
                                          if block_name(block) != theirs
                                          and (block_name(block) == mine or parses(block))]
        parts = ([prompt_context(problem["prompt"], entry)] + own(aux_text, "aux", entry)
                 + own(main_text, entry, "aux"))
    context = "import math\n" + parts[0]  # the prompt's part (trusted): the tests run after it
    program = "\n\n".join(part for part in parts if part)
    report["program"] = program
    try:
        ast.parse(program)
        report["syntax_ok"], report["syntax_message"] = True, "Combined code syntax OK"
    except SyntaxError as e:
        report["syntax_error"] = dict(line=e.lineno, col=e.offset, msg=e.msg)
        report["syntax_message"] = f"Combined code has syntax error: {e}"
        return report
    report["tests"] = extract_tests(problem["test"], entry, extraction) if tests is None else tests
    if report["tests"]:
        # ast: each test runs after its setup lines (check()'s imports and variables before it)
        setups = ({} if extraction == "authors"
                  else {t: s for s, t in check_statements(problem["test"], entry)})
        runs = [setups[t] + "\n" + t if setups.get(t) else t for t in report["tests"]]
        # the authors exec the program with `math` already in its globals
        # the tests may ask the program for these names only (never for one of their own)
        names = [entry, "aux"] + [str(name) for name in problem.get("names", ())]
        result = run_tests_in_sandbox("import math\n" + program, runs, timeout, memory_mb,
                                      context=context, names=names)
        for key in ("passed", "errors", "loaded", "load_error"):
            report[key] = result[key]
    return report


def code_reward(aux_text: str, main_text: str, problem: dict, timeout: float = 3.0,
                memory_mb: int = 512, extraction: str = "ast") -> tuple[float, dict]:
    """The authors' execution_reward_aux (max 4.0), gated level by level:
      1 structure (1.0): aux defined with a return +0.4 (optional); main defined with a return +0.6,
                         else stop;
      2 syntax (0.5):    the combined program parses, else stop;
      3 tests (1.0):     passed / total extracted tests (stop if there are none; 0 if the program
                         fails to load);
      cooperation (1.5): only if ≥1 test passed and aux exists: main calls aux +0.5, and is not a
                         thin wrapper +1.0; aux's result thrown away (AST check) −0.5.
    Returns (total, levels) with levels structure, syntax, tests, cooperation, tests_passed,
    tests_total."""
    r = analyze_code(aux_text, main_text, problem, None, timeout, memory_mb, extraction)
    levels = dict(structure=0.4 * r["aux_defined"] + 0.6 * r["main_defined"], syntax=0.0, tests=0.0,
                  cooperation=0.0, tests_passed=0, tests_total=0)
    if r["main_defined"] and r["syntax_ok"]:
        levels["syntax"] = 0.5
        if r["tests"]:
            levels["tests_passed"], levels["tests_total"] = sum(r["passed"]), len(r["tests"])
            levels["tests"] = levels["tests_passed"] / levels["tests_total"]
            if levels["tests_passed"] > 0 and r["aux"] and r["calls_aux"]:
                levels["cooperation"] = 0.5 + 1.0 * (not r["wrapper"]) - 0.5 * bool(r["aux_unused"])
    total = levels["structure"] + levels["syntax"] + levels["tests"] + levels["cooperation"]
    return total, levels
