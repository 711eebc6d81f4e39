"""Arithmetic over scenario fields for a sweep's `derived` values and `constraints`, without `eval`.

An expression is Python syntax restricted to numbers, strings, booleans, dotted field paths
(`placement.rollout.gpus`, `cluster.pools[0].nodes`), arithmetic (+ - * / // % **), comparisons, `and`/`or`/`not`,
conditional expressions (`a if cond else b`) and the functions in FUNCTIONS. Anything else is refused when the sweep
file is read, so a typo fails before a single point runs.
"""
from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlsim.yamlsource import PathKey, dotted

FUNCTIONS: dict[str, Callable] = {"min": min, "max": max, "abs": abs, "round": round, "int": int, "float": float,
                                  "ceil": math.ceil, "floor": math.floor}

# Bounds on what an expression may be and build: no sweep needs more, and past them `9**9**9` would compute for hours,
# `'a' * 10**10` fill memory, and a long chain of operators exhaust the parser's recursion.
MAX_TEXT = 1000
MAX_DEPTH = 40
MAX_INT_BITS = 4096
MAX_SEQUENCE = 100_000


def _power(base: Any, exponent: Any) -> Any:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        if max(1, abs(base).bit_length()) * exponent > MAX_INT_BITS and abs(base) > 1:
            raise ExpressionError(f"{base} ** {exponent} is too large a number (more than {MAX_INT_BITS} bits)")
    return operator.pow(base, exponent)


def _times(left: Any, right: Any) -> Any:
    for sequence, count in ((left, right), (right, left)):
        if isinstance(sequence, (str, list, tuple)) and isinstance(count, int) and len(sequence) * count > MAX_SEQUENCE:
            raise ExpressionError(f"repeating a sequence {count} times makes more than {MAX_SEQUENCE:,} items")
    return operator.mul(left, right)


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: _times, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: _power}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


class ExpressionError(ValueError):
    """The expression is not one this module evaluates, or names a field that has no value."""


@dataclass(frozen=True)
class Expression:
    text: str
    tree: ast.expr

    @classmethod
    def parse(cls, text: str) -> Expression:
        if len(text) > MAX_TEXT:
            raise ExpressionError(f"longer than {MAX_TEXT} characters")
        try:
            tree = ast.parse(text.strip(), mode="eval").body
        except SyntaxError as exc:
            raise ExpressionError(f"not an expression: {exc.msg}") from None
        except (RecursionError, MemoryError):
            raise ExpressionError("nested too deeply to parse") from None
        _check(tree)
        return cls(text, tree)

    def evaluate(self, lookup: Callable[[PathKey], object]) -> object:
        """The value, reading fields through `lookup` (which raises KeyError for a field with no value)."""
        try:
            return _evaluate(self.tree, lookup)
        except KeyError as exc:
            raise ExpressionError(f"{dotted(exc.args[0])} has no value in this point or the base scenario") from None
        except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
            raise ExpressionError(str(exc)) from None


def _field_path(node: ast.expr) -> PathKey | None:
    """`a.b[0].c` as ("a", "b", 0, "c"); None when the node is not a field path."""
    if isinstance(node, ast.Name):
        return None if node.id in FUNCTIONS or node.id in ("True", "False") else (node.id,)
    if isinstance(node, ast.Attribute):
        parent = _field_path(node.value)
        return None if parent is None else parent + (node.attr,)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
        parent = _field_path(node.value)
        return None if parent is None else parent + (node.slice.value,)
    return None


def _check(node: ast.expr, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise ExpressionError(f"nested more than {MAX_DEPTH} levels deep")
    if _field_path(node) is not None or (isinstance(node, ast.Constant)
                                         and isinstance(node.value, (int, float, str, bool, type(None)))):
        return
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        children = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        children = [node.operand]
    elif isinstance(node, ast.BoolOp):
        children = list(node.values)
    elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        children = [node.left, *node.comparators]
    elif isinstance(node, ast.IfExp):
        children = [node.test, node.body, node.orelse]
    elif isinstance(node, (ast.List, ast.Tuple)):
        children = list(node.elts)
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS
          and not node.keywords):
        children = list(node.args)
    else:
        raise ExpressionError(f"{ast.unparse(node)!r} is not allowed; use numbers, field paths, arithmetic, "
                              f"comparisons, and/or/not, `x if c else y` and {', '.join(FUNCTIONS)}")
    for child in children:
        _check(child, depth + 1)


def _evaluate(node: ast.expr, lookup: Callable[[PathKey], object]) -> object:
    path = _field_path(node)
    if path is not None:
        return lookup(path)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_evaluate(node.left, lookup), _evaluate(node.right, lookup))
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_evaluate(node.operand, lookup))
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_evaluate(v, lookup) for v in node.values)
        return any(_evaluate(v, lookup) for v in node.values)
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, lookup)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _evaluate(comparator, lookup)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _evaluate(node.body if _evaluate(node.test, lookup) else node.orelse, lookup)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_evaluate(e, lookup) for e in node.elts]
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    return FUNCTIONS[node.func.id](*(_evaluate(a, lookup) for a in node.args))
