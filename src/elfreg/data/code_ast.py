"""Normalised solution ASTs for code decontamination (spec §7: "exact match of the solution's AST").

What a copied solution can change without changing the algorithm, and is therefore normalised away:
formatting, comments, quoting and parentheses (``ast`` sees none of them), docstrings (module, class,
function), type annotations (parameters, returns, ``x: T = v`` -> ``x = v``, bare ``x: T`` dropped) and
the function's own name (``def f`` vs ``def g``; recursive calls of the function to itself included).
Everything else must match exactly: parameter and local names, constants, statement order.

A *fingerprint* is the digest of one function **body** (its statements, not its signature), so the
benchmark's canonical body matches a training function that has the same body under any name, with or
without hints and docstring, also when that function sits among helpers, imports or other functions.
Code without any function is fingerprinted as a whole module. Each fingerprint also carries a digest of
body + name, the key for bodies too small to identify a solution alone (`CodeDecontamConfig.ast_min_nodes`).
"""

from __future__ import annotations

import ast
import hashlib
import warnings
from dataclasses import dataclass

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SELF = "__elfreg_function__"  # stands for the function's own name inside its body


class _Normalise(ast.NodeTransformer):
    """Remove docstrings and annotations in place (names are handled per function at dump time)."""

    @staticmethod
    def _drop_docstring(node: ast.AST, empty: list) -> None:
        body = node.body  # type: ignore[attr-defined]
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or empty  # type: ignore[attr-defined]

    def visit_Module(self, node: ast.Module) -> ast.AST:
        self.generic_visit(node)
        self._drop_docstring(node, [])
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        self.generic_visit(node)
        self._drop_docstring(node, [ast.Pass()])
        return node

    def _function(self, node):
        self.generic_visit(node)
        self._drop_docstring(node, [ast.Pass()])  # `def f(): "doc"` is `def f(): pass`
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None:
                arg.annotation = None
                arg.type_comment = None
        node.returns = None
        node.type_comment = None
        if hasattr(node, "type_params"):  # Python 3.12 generics: `def f[T](x: T)` is a type hint too
            node.type_params = []
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None:  # a bare declaration `x: int` does nothing at run time (an emptied block
            return None         # is never compiled, only dumped)
        return ast.copy_location(ast.Assign(targets=[node.target], value=self.visit(node.value)), node)


def parse_code(code: str) -> ast.Module | None:
    """``ast.parse`` of ``code`` (CRLF tolerated); None when it is not Python."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes in benchmark strings are not our concern
            return ast.parse(code.replace("\r\n", "\n"))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


@dataclass(frozen=True)
class Fingerprint:
    """One normalised function body (or a function-free module): digest, size in AST nodes, and where from.

    ``named`` is the digest of the body together with the function's name: the key for bodies too small to
    identify a solution by themselves (see ``match_key``).
    """

    digest: bytes
    named: bytes
    nodes: int
    name: str   # the function's name ("<module>" for a function-free module)

    def match_key(self, min_nodes: int) -> bytes:
        """The body digest, or for a body of fewer than ``min_nodes`` AST nodes the body + name digest."""
        return self.digest if self.nodes >= min_nodes else self.named


def _fingerprint(dump: str, nodes: int, name: str) -> Fingerprint:
    return Fingerprint(hashlib.blake2b(dump.encode(), digest_size=12).digest(),
                       hashlib.blake2b(f"{name}\n{dump}".encode(), digest_size=12).digest(), nodes, name)


def _body_fingerprint(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Fingerprint:
    dump = "\n".join(ast.dump(stmt) for stmt in fn.body)
    # the function's own name (recursion) is as arbitrary as the name in its `def`
    dump = dump.replace(f"Name(id='{fn.name}',", f"Name(id='{_SELF}',")
    return _fingerprint(dump, sum(1 for stmt in fn.body for _ in ast.walk(stmt)), fn.name)


def _functions(node: ast.AST, methods: bool) -> list:
    """Functions under ``node`` in source order; with ``methods=False`` class bodies are not entered."""
    out = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef) and not methods:
            continue
        if isinstance(child, _FUNCS):
            out.append(child)
        out.extend(_functions(child, methods))
    return out


def fingerprints(code: str | ast.Module, only: str | None = None, methods: bool = True) -> list[Fingerprint]:
    """Fingerprints of every function body in ``code`` (nested functions included).

    ``only``: keep just the function of that name and the functions nested in it (a HumanEval solution is
    the entry point's body; other functions in its prompt are given, not solved). ``methods=False`` skips
    class bodies (benchmark side: a ``Node.__init__`` that stores its fields is boilerplate, not the
    solution). Code without functions yields one fingerprint of the whole normalised module. Unparsable
    code yields none.
    """
    tree = parse_code(code) if isinstance(code, str) else code
    if tree is None:
        return []
    tree = _Normalise().visit(tree)
    if only is not None:
        roots = [n for n in _functions(tree, methods) if n.name == only][:1]
        funcs = [f for root in roots for f in [root, *_functions(root, methods)]]
    else:
        funcs = _functions(tree, methods)
    if funcs:
        return [_body_fingerprint(f) for f in funcs]
    if only is not None or not tree.body or any(isinstance(n, _FUNCS) for n in ast.walk(tree)):
        return []
    dump = "\n".join(ast.dump(stmt) for stmt in tree.body)
    return [_fingerprint(dump, sum(1 for s in tree.body for _ in ast.walk(s)), "<module>")]
