"""The cooperation scheme of a passing (aux, main) pair of the coding task (nanomarl/tasks/code.py):
how does `main` use the helper `aux`? classify_cooperation reads both functions' syntax trees by
rules of ours (the MAGRPO paper names the schemes, not how to tell them apart). evaluate.py --mode
magrpo labels every passing pair with it. A learner may skip this module.
"""
from __future__ import annotations

import ast

COOPERATION_SCHEMES = ("aux-unused", "fallback", "strategy-filter", "coordinator", "thin-wrapper",
                       "decorator")


def _names(target: ast.AST) -> set[str]:
    """The variable names a store target binds or mutates: x, (x, y), x[i], x.attr -> {'x', 'y'}."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*[_names(e) for e in target.elts]) if target.elts else set()
    if isinstance(target, ast.Starred):
        return _names(target.value)
    if isinstance(target, (ast.Subscript, ast.Attribute)):
        return _names(target.value)
    return set()


def _reads(node: ast.AST | None, names: set[str]) -> bool:
    """Does the expression (or statement) read any of `names`?"""
    return node is not None and any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                                    and n.id in names for n in ast.walk(node))


def _bindings(func: ast.AST) -> list[tuple[set[str], ast.AST]]:
    """Every (names bound, value they come from) in a function: assignments, augmented assignments,
    for-loop and comprehension targets (from the iterable), walrus, with-as; and `x.method(...)` on
    a local variable or parameter x (it may mutate x: `res.append(aux(v))` puts aux's result in res,
    `r.sort()` changes r)."""
    out = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            out += [(_names(t), node.value) for t in node.targets]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            out.append((_names(node.target), node.value))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            out.append((_names(node.target), node.iter))
        elif isinstance(node, ast.NamedExpr):
            out.append((_names(node.target), node.value))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            out.append((_names(node.optional_vars), node.context_expr))
    local = set().union(*[names for names, _ in out])
    local |= {a.arg for a in ast.walk(func) if isinstance(a, ast.arg)}
    out += [({n.func.value.id}, n) for n in ast.walk(func) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
            and n.func.value.id in local]
    return out


def _returns(stmts: list[ast.stmt]) -> list[ast.Return]:
    return [n for s in stmts for n in ast.walk(s)
            if isinstance(n, ast.Return) and n.value is not None]


def _blocks(func: ast.AST):
    """Every statement list (function body, if/else, loop, try, with, handler bodies) in the
    function."""
    for node in ast.walk(func):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def classify_cooperation(aux_code: str, main_code: str, entry_point: str,
                         aux_name: str = "aux") -> str | None:
    """Label how `main` (the function `entry_point` in main_code) uses the helper `aux`, from their
    ASTs.

    The paper names the schemes only informally; these are this project's precise rules. "aux's
    result" is every expression that reads `aux`, plus, transitively, every variable bound from such
    an expression (assigned, augmented, looped over, appended/updated through `x.method(...)`). The
    first rule that matches wins:

    1. aux-unused: aux_code defines no function `aux`; or main rebinds the name `aux` (a parameter,
       an assignment, a nested def, an import); or aux's result reaches neither a `return` nor a
       condition (aux never mentioned, called for nothing, or its result ignored).
    2. fallback (aux on a failure path): aux is used inside an `except` handler; or in a non-first
       operand of `or` whose first operand does not use aux (`own(x) or aux(x)`); or main first
       computes its own result v (a variable with a binding that does not involve aux) and then an
       `if`/conditional expression that tests v either rebinds v to aux's result (`if v is None: v =
       aux(x)`), or has one path returning v without aux and the other path returning aux's result
       (`if ok(v): return v` ... `return aux(x)`); for an `if` statement, the "else" path is the
       else branch plus the statements after the `if`.
    3. strategy-filter (aux screens, main decides): aux's result is read by the test of an `if`,
       `while`, conditional expression, `assert` or comprehension `if`; or aux is passed as a
       function to `filter`/`itertools.filterfalse` or as a `key=` argument (`sorted(xs, key=aux)`).
    4. coordinator (main orchestrates several aux uses): aux is mentioned at two or more places, or
       inside a loop body (`for`/`while`, not the iterable of the loop) or a comprehension's
       element, or passed as a function to anything else (`map(aux, xs)`).
    5. thin-wrapper: every `return` that carries aux's result returns it unchanged: `return
       aux(...)`, or `return v` where every binding of v is exactly `v = aux(...)`. Guard clauses
       that return without aux are allowed (`if not xs: return []`). Stricter than the reward's
       wrapper check (nanomarl/tasks/code.py:is_thin_wrapper), which also calls one-line
       `return len(aux(x))` a wrapper; here that is a decorator.
    6. decorator: otherwise; aux's result is transformed before it is returned (`return aux(x) + 1`,
       `r = aux(x); return sorted(r)`).

    Nested functions inside main are analysed as part of main. Returns None when main_code does not
    parse or has no function `entry_point` (nothing to classify)."""
    try:
        main_tree = ast.parse(main_code)
    except SyntaxError:
        return None
    funcs = [n for n in ast.walk(main_tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point]
    if not funcs:
        return None
    func = funcs[0]
    try:
        aux_defined = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                          and n.name == aux_name for n in ast.walk(ast.parse(aux_code)))
    except SyntaxError:
        aux_defined = False
    rebinds = any(a.arg == aux_name for a in ast.walk(func.args) if isinstance(a, ast.arg)) or any(
        (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == aux_name)
        or (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.name == aux_name)
        or (isinstance(n, ast.alias) and (n.asname or n.name) == aux_name) for n in ast.walk(func))
    if not aux_defined or rebinds:
        return "aux-unused"

    # aux's result: expressions that read `aux` or a tainted variable; propagate to a fixed point
    bindings = _bindings(func)
    tainted = {aux_name}
    while True:
        new = set().union(*[names for names, value in bindings if _reads(value, tainted)]) - tainted
        if not new:
            break
        tainted |= new
    own = set().union(*[names for names, value in bindings if not _reads(value, tainted)])
    own -= {aux_name}
    returns = _returns(func.body)
    tests = [n.test for n in ast.walk(func)
             if isinstance(n, (ast.If, ast.While, ast.IfExp, ast.Assert))]
    tests += [cond for n in ast.walk(func) if isinstance(n, ast.comprehension) for cond in n.ifs]
    calls = [n for n in ast.walk(func) if isinstance(n, ast.Call)]
    is_aux = lambda node: isinstance(node, ast.Name) and node.id == aux_name  # noqa: E731
    callee = lambda call: getattr(call.func, "id", None) or getattr(call.func, "attr", None)  # noqa
    passed_as_filter = any(callee(c) in ("filter", "filterfalse") and c.args and is_aux(c.args[0])
                           for c in calls) \
        or any(kw.arg == "key" and is_aux(kw.value) for c in calls for kw in c.keywords)

    # 1. aux-unused: the result reaches no return and no condition
    if not (any(_reads(r.value, tainted) for r in returns) or any(_reads(t, tainted) for t in tests)
            or passed_as_filter):
        return "aux-unused"

    # 2. fallback
    uses_aux = lambda node: _reads(node, {aux_name})  # noqa: E731
    if any(isinstance(n, ast.ExceptHandler) and any(uses_aux(s) for s in n.body)
           for n in ast.walk(func)):
        return "fallback"
    if any(isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or) and not uses_aux(n.values[0])
           and any(uses_aux(v) for v in n.values[1:]) for n in ast.walk(func)):
        return "fallback"

    def returns_own(stmts, v):
        return any(_reads(r.value, {v}) and not _reads(r.value, tainted) for r in _returns(stmts))

    def returns_aux(stmts):
        return any(_reads(r.value, tainted) for r in _returns(stmts))

    for block in _blocks(func):
        for i, stmt in enumerate(block):
            if not isinstance(stmt, ast.If):
                continue
            for v in own & {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)}:
                rebinds_v = any(v in names and uses_aux(value) for names, value in _bindings(stmt))
                other_path = stmt.orelse + block[i + 1:]
                if rebinds_v or (returns_own(stmt.body, v) and returns_aux(other_path)) or (
                        returns_aux(stmt.body) and returns_own(other_path, v)):
                    return "fallback"
    for n in ast.walk(func):
        if isinstance(n, ast.IfExp):
            for v in own & {m.id for m in ast.walk(n.test) if isinstance(m, ast.Name)}:
                own_body, own_else = (_reads(x, {v}) and not _reads(x, tainted)
                                      for x in (n.body, n.orelse))
                if (own_body and _reads(n.orelse, tainted)) or \
                        (own_else and _reads(n.body, tainted)):
                    return "fallback"

    # 3. strategy-filter
    if passed_as_filter or any(_reads(t, tainted) for t in tests):
        return "strategy-filter"

    # 4. coordinator
    mentions = [n for n in ast.walk(func) if is_aux(n)]
    called = {id(c.func) for c in calls}
    in_loop = any(uses_aux(s) for n in ast.walk(func)
                  if isinstance(n, (ast.For, ast.AsyncFor, ast.While)) for s in n.body + n.orelse)
    in_loop |= any(uses_aux(getattr(n, field)) for n in ast.walk(func)
                   if isinstance(n, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp))
                   for field in ("elt", "key", "value") if hasattr(n, field))
    if len(mentions) >= 2 or in_loop or any(id(m) not in called for m in mentions):
        return "coordinator"

    # 5. thin-wrapper / 6. decorator
    aux_call = lambda node: isinstance(node, ast.Call) and is_aux(node.func)  # noqa: E731
    direct = {v for v in tainted - {aux_name}
              if all(aux_call(value) for names, value in bindings if v in names)}
    if all(aux_call(r.value) or (isinstance(r.value, ast.Name) and r.value.id in direct)
           for r in returns if _reads(r.value, tainted)):
        return "thin-wrapper"
    return "decorator"
