"""Safe filter expressions over KernelConfig fields.

``--filter "c.hdim_q == 128 and c.pipeline == 'qr_async'"`` is parsed with :mod:`ast` and checked against a
small grammar before anything is evaluated:

* comparisons (``== != < <= > >= in not in``), ``and`` / ``or`` / ``not``, conditional-free arithmetic
  (``+ - * // %``) and unary minus;
* literals: numbers, strings, booleans, ``None``, tuples/lists/sets of literals;
* ``c.<field>`` where ``<field>`` is a KernelConfig field (see ``ckfmha.kernel.CONFIG_FIELDS``), optionally
  indexed with an integer literal (``c.tile[0]``).

Anything else -- calls, names other than ``c``, imports, lambdas, comprehensions, attribute chains, dunder
access -- is rejected with a :class:`FilterError` that quotes the offending piece. Once checked, the expression
is compiled to a plain function, so evaluating it costs one call per config.

Enum fields are ``str`` enums, so ``c.mask == 'causal'`` and ``c.dtype in ('fp16', 'bf16')`` work directly.

``--filter-file`` loads a Python file that defines ``filter_config(c) -> bool`` (trusted code, the user's own).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Callable, Iterable

from ckfmha.kernel import CONFIG_FIELDS, KernelConfig

ConfigPredicate = Callable[[KernelConfig], bool]


class FilterError(ValueError):
    pass


_ALLOWED_FIELDS = frozenset(CONFIG_FIELDS)
_CMP_OPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)
_BIN_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)


def _check(node: ast.AST, source: str) -> None:
    def bad(n: ast.AST, why: str) -> FilterError:
        seg = ast.get_source_segment(source, n) or type(n).__name__
        return FilterError(f"filter {source!r}: {why}: {seg!r}")

    if isinstance(node, ast.Expression):
        _check(node.body, source)
    elif isinstance(node, ast.BoolOp):
        for v in node.values:
            _check(v, source)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.Not, ast.USub)):
            raise bad(node, "only 'not' and unary '-' are allowed")
        _check(node.operand, source)
    elif isinstance(node, ast.Compare):
        for op in node.ops:
            if not isinstance(op, _CMP_OPS):
                raise bad(node, f"comparison operator {type(op).__name__} is not allowed")
        _check(node.left, source)
        for comp in node.comparators:
            _check(comp, source)
    elif isinstance(node, ast.BinOp):
        if not isinstance(node.op, _BIN_OPS):
            raise bad(node, f"arithmetic operator {type(node.op).__name__} is not allowed")
        _check(node.left, source)
        _check(node.right, source)
    elif isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, str, bool, type(None))):
            raise bad(node, "only number, string, bool and None literals are allowed")
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for elt in node.elts:
            if not isinstance(elt, ast.Constant):
                raise bad(elt, "collections may hold literals only")
            _check(elt, source)
    elif isinstance(node, ast.Attribute):
        if not (isinstance(node.value, ast.Name) and node.value.id == "c"):
            raise bad(node, "attribute access is allowed on 'c' only (c.<field>)")
        if node.attr not in _ALLOWED_FIELDS:
            raise FilterError(
                f"filter {source!r}: unknown field {node.attr!r}; known fields: {', '.join(sorted(_ALLOWED_FIELDS))}"
            )
    elif isinstance(node, ast.Subscript):
        if not isinstance(node.value, ast.Attribute):
            raise bad(node, "indexing is allowed on c.<field> only")
        _check(node.value, source)
        if not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)
                and not isinstance(node.slice.value, bool)):
            raise bad(node, "an index must be an integer literal")
    elif isinstance(node, ast.Name):
        raise bad(node, "names other than c.<field> are not allowed" if node.id != "c"
                  else "'c' must be used as c.<field>")
    elif isinstance(node, ast.Call):
        raise bad(node, "function calls are not allowed")
    else:
        raise bad(node, f"{type(node).__name__} is not allowed")


def compile_filter(expression: str) -> ConfigPredicate:
    """Check ``expression`` and return a predicate ``f(config) -> bool``."""
    if not isinstance(expression, str) or not expression.strip():
        raise FilterError(f"filter {expression!r}: empty expression")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise FilterError(f"filter {expression!r}: does not parse: {e.msg} (column {e.offset})") from None
    _check(tree, expression.strip())
    lam = ast.Expression(
        body=ast.Lambda(
            args=ast.arguments(posonlyargs=[], args=[ast.arg(arg="c")], kwonlyargs=[], kw_defaults=[], defaults=[]),
            body=tree.body,
        )
    )
    ast.fix_missing_locations(lam)
    code = compile(lam, "<ckfmha filter>", "eval")
    fn = eval(code, {"__builtins__": {}}, {})  # noqa: S307 - the tree was checked above

    def predicate(c: KernelConfig) -> bool:
        try:
            return bool(fn(c))
        except TypeError as e:  # e.g. comparing a tuple field with an int
            raise FilterError(f"filter {expression!r}: cannot evaluate on {c.kernel_id}: {e}") from None

    predicate.expression = expression  # type: ignore[attr-defined]
    predicate.fast = fn  # type: ignore[attr-defined]  # unchecked form for hot loops over trusted configs
    return predicate


def load_filter_file(path: str | Path) -> ConfigPredicate:
    """Load ``filter_config(c) -> bool`` from a Python file."""
    p = Path(path)
    if not p.is_file():
        raise FilterError(f"filter file {str(p)!r}: no such file")
    spec = importlib.util.spec_from_file_location(f"ckfmha_filter_{abs(hash(str(p.resolve())))}", p)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's file: report any failure with its cause
        raise FilterError(f"filter file {str(p)!r}: failed to load: {type(e).__name__}: {e}") from None
    fn = getattr(module, "filter_config", None)
    if not callable(fn):
        raise FilterError(f"filter file {str(p)!r}: must define a function filter_config(c) -> bool")
    return lambda c: bool(fn(c))


def combine(predicates: Iterable[ConfigPredicate | None]) -> ConfigPredicate | None:
    """AND together the given predicates (None entries are skipped); None when there are none."""
    preds = [p for p in predicates if p is not None]
    if not preds:
        return None
    if len(preds) == 1:
        return preds[0]
    return lambda c: all(p(c) for p in preds)
