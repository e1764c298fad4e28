"""The EvalPlus sanitizer (evalplus 0.3.1 ``sanitize``), reimplemented on tree-sitter (spec §6).

The paper scores code after EvalPlus' sanitizer; elfreg reproduces its *output* without depending on the
evalplus package (which pulls in LLM API clients). Written from the documented behaviour and checked
against evalplus on benchmark solutions and recorded model completions (tests/eval/test_sanitize.py):

1. **Extraction.** Of all runs of at least two consecutive lines that parse as Python (``ast.parse``),
   keep the one with the most non-blank lines; ties go to the earliest start, then the earliest end.
   If no run parses, the first line is kept. This drops markdown fences and prose around the code.
   EvalPlus parses every span (cubic in lines); ``extract_code`` finds the same run with a bounded search (linear
   on prose, junk and fences around code; a work budget stops text built to defeat it).
2. **Selection** (tree-sitter, top-level statements only). Kept: ``import`` / ``from ... import``
   statements (``from __future__`` is a different node and is dropped), classes, functions that contain a
   ``return`` somewhere in their body, and assignments (``x = ...``) — each definition name only the first
   time it appears. Everything else (calls, loops, ``if __name__ == ...`` blocks, decorated definitions,
   augmented assignments) is dropped.
3. **Pruning** (when an entry point is given). Definitions are kept only if the entry point reaches them
   through the identifiers that appear in its body (and theirs, transitively); imports are always kept.
4. If the result is empty, the extracted code from step 1 is returned instead.

The definition "name" of a statement is its first direct identifier child, as EvalPlus takes it; for an
assignment such as ``a, b = c`` that is the right-hand side's ``c``, a quirk kept for identical output.
"""

from __future__ import annotations

import ast
import bisect
import codeop
import re
from functools import lru_cache

_IMPORTS = ("import_statement", "import_from_statement")


# codeop's partial-input mode (the interactive prompt's "is more input needed?"): compile() then calls a text that
# stops in the middle of a statement "incomplete input", and any other SyntaxError comes from a token before the end
_INCOMPLETE_OK = getattr(codeop, "PyCF_ALLOW_INCOMPLETE_INPUT", 0)
PARSES, INCOMPLETE, INVALID = "parses", "incomplete", "invalid"
# Characters compiled per character of text, plus a fixed allowance, before the span search stops (see extract_code)
WORK_PER_CHAR, WORK_BASE = 64, 1_000_000
_UNCLOSED = re.compile(r"^(?:'.' was never closed|unterminated triple-quoted string literal)")


def span_verdict(code: str) -> tuple[str, ast.Module | None]:
    """Whether ``code`` parses (``ast.parse``), and if not, whether more lines could still make it parse.

    ``INCOMPLETE``: the parser ran out of text (an open bracket, string, block or decorator). ``INVALID``: it failed
    on a token before the end, so every text that starts with ``code`` fails the same way (the parser reads tokens
    left to right and decides on what it has read). NUL bytes, lone surrogates and nesting too deep for the parser
    are ``INVALID`` too: every longer text holds them. Returns (verdict, the module when it parses).
    """
    try:  # ast.parse's call, plus the flag; dont_inherit: this module's __future__ imports are not the text's
        return PARSES, compile(code, "<span>", "exec", ast.PyCF_ONLY_AST | _INCOMPLETE_OK, dont_inherit=True)
    except SyntaxError as e:  # on a Python whose codeop lacks the flag no failure is known to be final
        return (INCOMPLETE if not _INCOMPLETE_OK or e.msg == "incomplete input" else INVALID), None
    except (ValueError, MemoryError, RecursionError):  # NUL bytes (3.11), surrogates (UnicodeEncodeError), depth
        return INVALID, None


def _unclosed_line(code: str) -> int | None:
    """The line (1-based, as the parser counts) of the bracket or triple-quoted string that ``code`` leaves open."""
    try:
        ast.parse(code)
    except SyntaxError as e:
        return e.lineno if e.lineno and _UNCLOSED.match(e.msg or "") else None
    except (ValueError, MemoryError, RecursionError):
        return None
    return None


class _Lines:
    """``text`` split as EvalPlus splits it (on "\\n"), with each line's offset and first parser line.

    The parser also ends a line at a lone "\\r": ``first_cline[k]`` is the parser's (0-based) line number at the start
    of line ``k``, to map the parser's line numbers back to these lines.
    """

    def __init__(self, text: str):
        self.text = text
        self.lines = text.split("\n")
        self.n = len(self.lines)
        self.offset = [0] * (self.n + 1)
        for k, line in enumerate(self.lines):
            self.offset[k + 1] = self.offset[k] + len(line) + 1
        self.first_cline = list(range(self.n))
        if "\r" in text:  # a lone \r ("\r\n" is one break) adds a parser line
            extra = 0
            for k, line in enumerate(self.lines):
                self.first_cline[k] += extra
                extra += line.count("\r") - line.endswith("\r")

    def span(self, i: int, j: int) -> str:
        """Lines ``i..j`` joined by "\\n" (EvalPlus' candidate text)."""
        return self.text[self.offset[i]:self.offset[j + 1] - 1]

    def line_of(self, i: int, cline: int) -> int:
        """The line holding parser line ``cline`` (1-based) of the span that starts at line ``i``."""
        return bisect.bisect_right(self.first_cline, self.first_cline[i] + cline - 1) - 1


def _neutral(line: str) -> bool:
    """A blank or comment-only line as the parser reads it at a span's start: no token, no effect on indentation
    (whitespace is " \\t\\f" only; no "\\r" inside, which would end the comment; no NUL byte or lone surrogate)."""
    body = line[:-1] if line.endswith("\r") else line
    rest = body.lstrip(" \t\f")
    if (rest and rest[0] != "#") or "\r" in body or "\x00" in body:
        return False
    try:
        body.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _statement_boundaries(lines: _Lines, i: int, j: int, tree: ast.Module) -> list[int]:
    """Lines ``t`` in ``(i, j + 1]`` such that lines ``i..t-1`` parse: only whole top-level statements and comments
    come before ``t``. (Those are the starts that the search may skip, see ``extract_code``.)"""
    inside = []  # parser lines strictly inside a statement: (first line, last line]
    for node in tree.body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        inside.append((first, node.end_lineno or node.lineno))
    out, k = [], 0
    for t in range(i + 1, j + 2):
        if t >= lines.n:
            break
        cline = lines.first_cline[t] - lines.first_cline[i] + 1
        while k < len(inside) and inside[k][1] < cline:
            k += 1
        # a "\\" ending the line before joins the next line to its statement
        if (k == len(inside) or inside[k][0] >= cline) and not lines.lines[t - 1].rstrip("\r").endswith("\\"):
            out.append(t)
    return out


def extract_code(text: str) -> str:
    """Step 1: the longest run of >= 2 lines that parses (most non-blank lines; earliest on ties), as EvalPlus' search
    over every span finds it, in bounded time.

    For each start ``i`` (in order, while it can still beat the best), the search finds how far the lines from ``i``
    stay a possible start of a program (``span_verdict`` is not ``INVALID``), growing the span by doubling and then
    halving, and tries ends only up to there, from the longest down. Prose, markdown fences or junk after ``i``
    stop it at their first line. An end inside an open bracket or triple-quoted string, or in a run of comment and
    blank lines, jumps to the line before. A start is skipped when an earlier start holds every span it holds,
    with more lines: after whole statements (back to an earlier start whose span parsed) or after a comment or
    blank line.

    The parser reads at most ``WORK_PER_CHAR`` characters per character of ``text`` plus ``WORK_BASE``; hostile
    texts built to defeat these rules stop there, with the longest span found so far (real model output needs a
    small fraction of it, see docs/evaluation.md).
    """
    lines = _Lines(text)
    n = lines.n
    nonblank = [k for k, line in enumerate(lines.lines) if line.strip()]
    before = [0] * (n + 1)  # before[k] = non-blank lines in lines[:k]
    for k in nonblank:
        before[k + 1] = 1
    for k in range(n):
        before[k + 1] += before[k]
    neutral = [_neutral(line) for line in lines.lines]
    run_start = list(range(n))  # run_start[k]: the first line of the run of neutral lines that ends at line k
    for k in range(1, n):
        if neutral[k] and neutral[k - 1]:
            run_start[k] = run_start[k - 1]
    work, budget = 0, WORK_PER_CHAR * len(text) + WORK_BASE

    def verdict(i: int, j: int) -> tuple[str, ast.Module | None]:
        nonlocal work
        code = lines.span(i, j)
        work += len(code) + 1
        return span_verdict(code)

    best, answer, skip = 0, (0, 0), set()
    for i in range(n - 1):
        if len(nonblank) - before[i] <= best or work > budget:  # no later start can hold more lines
            break
        if neutral[i]:  # the parser reads nothing on it: a span from i + 1 parses iff the same one from i does
            skip.add(i + 1)
        if i in skip:
            continue
        need = before[i] + best  # the first end holding best + 1 non-blank lines
        if need >= len(nonblank):
            continue
        lowest = max(i + 1, nonblank[need])
        # how far the lines from i can still parse: double the span until INVALID, then halve back
        good, bad, size = i, n, 2
        while good < n - 1 and work <= budget:
            j = min(i + size - 1, n - 1)
            if verdict(i, j)[0] == INVALID:
                bad = j
                break
            good, size = j, 2 * size
        while bad - good > 1 and bad > lowest and work <= budget:
            mid = (good + bad) // 2
            if verdict(i, mid)[0] == INVALID:
                bad = mid
            else:
                good = mid
        # the longest span that parses, ending between lowest and good
        j = good
        while j >= lowest and work <= budget:
            status, tree = verdict(i, j)
            if status == PARSES:
                last = j
                while last > i and not lines.lines[last].strip():
                    last -= 1
                # ends in [last, j] hold the same lines; the earliest one that parses wins the tie
                end = next(k for k in range(max(last, i + 1), j + 1) if k == j or verdict(i, k)[0] == PARSES)
                best, answer = before[j + 1] - before[i], (i, end)
                skip.update(_statement_boundaries(lines, i, j, tree))
                break
            if neutral[j]:  # a run of comment and blank lines leaves every end in it as the line before it left
                k = run_start[j] - 1
                j = k - 1 if not lines.lines[k].rstrip("\r").endswith("\\") else j - 1  # "\\" + a blank line parses
                continue
            opened = _unclosed_line(lines.span(i, j)) if status == INCOMPLETE else None
            work += lines.offset[j + 1] - lines.offset[i] if status == INCOMPLETE else 0
            j = min(j, lines.line_of(i, opened)) - 1 if opened else j - 1
    return lines.span(*answer)


@lru_cache(maxsize=1)
def _language():
    import tree_sitter_python
    from tree_sitter import Language

    return Language(tree_sitter_python.language())


def _first_identifier(node) -> str | None:
    for child in node.children:
        if child.type == "identifier":
            return child.text.decode("utf-8")
    return None


def _contains(node, node_type: str) -> bool:
    stack = list(node.children)
    while stack:
        cur = stack.pop()
        if cur.type == node_type:
            return True
        stack.extend(cur.children)
    return False


def _identifiers(node) -> set[str]:
    found, stack = set(), list(node.children)
    while stack:
        cur = stack.pop()
        if cur.type == "identifier":
            found.add(cur.text.decode("utf-8"))
        else:
            stack.extend(cur.children)
    return found


def top_level_definitions(code: str) -> tuple[list, list[tuple[str | None, object, str]]]:
    """Step 2 on already extracted code: (import nodes, [(name, node, kind)]) with kind class/function/assign."""
    from tree_sitter import Parser

    tree = Parser(_language()).parse(code.encode("utf-8"))
    imports, defs, seen = [], [], set()
    for child in tree.root_node.children:
        if child.type in _IMPORTS:
            imports.append(child)
            continue
        if child.type == "class_definition":
            node, kind = child, "class"
        elif child.type == "function_definition":
            node, kind = child, "function"
        elif child.type == "expression_statement" and child.children and child.children[0].type == "assignment":
            node, kind = child.children[0], "assign"
        else:
            continue
        name = _first_identifier(node)
        if name in seen or (kind == "function" and not _contains(node, "return_statement")):
            continue
        seen.add(name)
        defs.append((name, node, kind))
    return imports, defs


def reachable(entry_point: str, defs: list[tuple[str | None, object, str]]) -> set[str]:
    """Names reachable from ``entry_point`` through the identifiers used in each definition (step 3)."""
    deps = {name: _identifiers(node) for name, node, _ in defs}
    seen, todo = {entry_point}, [entry_point]
    while todo:
        for dep in deps.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def sanitize(text: str, entry_point: str | None = None) -> str:
    """EvalPlus-equivalent sanitized program for ``text`` (keeping all definitions when no entry point)."""
    return sanitize_extracted(extract_code(text), entry_point)


def sanitize_extracted(code: str, entry_point: str | None = None) -> str:
    """Steps 2-4 of ``sanitize`` on the code block ``extract_code`` gave (to extract it once for several calls)."""
    src = code.encode("utf-8")
    imports, defs = top_level_definitions(code)
    keep = reachable(entry_point, defs) if entry_point else None
    parts = [src[n.start_byte:n.end_byte] for n in imports]
    parts += [src[n.start_byte:n.end_byte] for name, n, _ in defs if keep is None or name in keep]
    out = b"\n".join(parts).decode("utf-8").strip()
    return out or code
