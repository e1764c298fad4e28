"""From a model completion to the program that is tested: EvalPlus sanitizer + alias rule (spec §6)."""

from __future__ import annotations

import ast


def _top_level_functions(code: str) -> list[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


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
    funcs = _top_level_functions(code)
    head = f"{preamble}\n\n" if preamble else ""
    if entry_point in funcs or not alias or len(funcs) != 1:
        return head + code, False
    return f"{head}{code}\n\n{entry_point} = {funcs[0]}\n", True
