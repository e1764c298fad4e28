"""The EvalPlus sanitizer (evalplus 0.3.1 ``sanitize``), reimplemented on tree-sitter (spec §6).

The paper scores code after EvalPlus' sanitizer; elfreg reproduces its *output* without depending on the
evalplus package (which pulls in LLM API clients). Written from the documented behaviour and checked
against evalplus on benchmark solutions and recorded model completions (tests/eval/test_sanitize.py):

1. **Extraction.** Of all runs of at least two consecutive lines that parse as Python (``ast.parse``),
   keep the one with the most non-blank lines; ties go to the earliest start, then the earliest end.
   If no run parses, the first line is kept. This drops markdown fences and prose around the code.
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
import tokenize
from functools import lru_cache

_IMPORTS = ("import_statement", "import_from_statement")


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, MemoryError, ValueError, RecursionError):  # ValueError: NUL bytes (Python 3.11)
        return False
    return True


def _first_bad_token_line(lines: list[str], i: int) -> int:
    """The first line (index into ``lines``) at or after ``i`` that no span starting at ``i`` can hold and parse,
    read with ``tokenize``: a character no Python token holds outside strings and comments (``?``, ``$``, ``!``,
    an unclosed one-line quote) or an indented first statement; ``len(lines)`` if none. Tokens are read left to
    right, so every span from ``i`` that reaches that line fails to parse: those parses need not be tried."""
    rows = (lines[k] + "\n" if k < len(lines) - 1 else lines[k] for k in range(i, len(lines)))
    first = True
    try:  # read lazily, line by line: junk stops at its first line, and costs no copy of the rest
        for tok in tokenize.generate_tokens(lambda: next(rows, "")):
            bad = tok.type == tokenize.ERRORTOKEN and not tok.string.isspace()
            # an indented first statement is an "unexpected indent", unless a trailing "\" joins it to the next line
            indented = first and tok.type == tokenize.INDENT and tok.line.lstrip(" \t")[:1] not in ("\\", "\f")
            if bad or indented:
                return i + tok.start[0] - 1
            first = first and tok.type in (tokenize.NL, tokenize.COMMENT)
    except (tokenize.TokenError, SyntaxError):  # an unclosed bracket or string at the end, a bad unindent: no claim
        pass
    return len(lines)


def extract_code(text: str) -> str:
    """Step 1: the longest run of >= 2 lines that parses (most non-blank lines; earliest on ties)."""
    lines = text.split("\n")
    n = len(lines)
    blank = [not line.strip() for line in lines]
    rest = [0] * (n + 1)  # rest[i] = non-blank lines in lines[i:]
    for i in range(n - 1, -1, -1):
        rest[i] = rest[i + 1] + (not blank[i])
    # Python's tokenizer reads a lone \r as a line break and ``tokenize`` does not: no shortcut then.
    shortcut = "\r" not in text.replace("\r\n", "")
    best, span = 0, (0, 0)
    for i in range(n):
        if rest[i] <= best:  # non-increasing in i: no later start can hold more lines
            break
        top = _first_bad_token_line(lines, i) - 1 if shortcut else n - 1  # no span from i reaches a bad token
        for j in range(min(top, n - 1), i, -1):  # count(i..j) = rest[i] - rest[j + 1], non-increasing as j falls
            count = rest[i] - rest[j + 1]
            if count <= best:
                break
            if _parses("\n".join(lines[i:j + 1])):
                last = j
                while last > i and blank[last]:
                    last -= 1
                # ends in [last, j] hold the same lines; the earliest one that parses wins the tie
                end = next(k for k in range(max(last, i + 1), j + 1) if k == j or _parses("\n".join(lines[i:k + 1])))
                best, span = count, (i, end)
                break
    return "\n".join(lines[span[0]:span[1] + 1])


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
    code = extract_code(text)
    src = code.encode("utf-8")
    imports, defs = top_level_definitions(code)
    keep = reachable(entry_point, defs) if entry_point else None
    parts = [src[n.start_byte:n.end_byte] for n in imports]
    parts += [src[n.start_byte:n.end_byte] for name, n, _ in defs if keep is None or name in keep]
    out = b"\n".join(parts).decode("utf-8").strip()
    return out or code
