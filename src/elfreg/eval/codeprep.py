"""From a model completion to the program that is tested: EvalPlus sanitizer + alias rule (spec §6)."""

from __future__ import annotations

import ast


def _top_level_functions(code: str) -> list[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _drops_needed_definitions(code: str) -> bool:
    """True if ``code`` reads a global name it neither defines, imports nor gets from builtins."""
    import builtins

    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    defined = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
            args = node.args if not isinstance(node, ast.ClassDef) else None
            if args is not None:
                defined.update(a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs])
                defined.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            defined.add(node.id)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            defined.add(node.name)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return bool(used - defined)


def prepare_code(completion: str, entry_point: str, alias: bool, keep_all: bool = False,
                 preamble: str = "") -> tuple[str, bool]:
    """Sanitize ``completion`` for ``entry_point``; returns (program, aliased).

    ``keep_all`` keeps every definition (MBPP tasks whose test setup uses the solution's classes);
    ``preamble`` (HumanEval: the prompt, which defines helper functions the tests call) goes first,
    so the sanitized code overrides its stub.

    Alias rule (spec §6): if the expected name is absent and the extracted code has exactly one
    top-level function, bind the expected name to it.
    """
    from evalplus.sanitize import sanitize

    code = sanitize(completion, None if keep_all else entry_point)
    if _drops_needed_definitions(code):
        # The sanitizer drops functions without a ``return`` (generators, in-place helpers) even when
        # the kept code calls them (e.g. Mbpp/630); then keep the whole extracted code block instead.
        from evalplus.sanitize import code_extract

        code = code_extract(completion)
    funcs = _top_level_functions(code)
    head = f"{preamble}\n\n" if preamble else ""
    if entry_point in funcs or not alias or len(funcs) != 1:
        return head + code, False
    return f"{head}{code}\n\n{entry_point} = {funcs[0]}\n", True
