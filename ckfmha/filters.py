"""Safe filter expressions over KernelConfig fields.

``--filter "c.hdim_q == 128 and c.pipeline == 'qr_async'"`` is parsed with :mod:`ast` and checked -- grammar,
size and types -- before anything is evaluated.  Every rejection is a :class:`FilterError` (a ValueError) that
quotes the expression and names the offending piece and the rule.

Grammar
-------
* comparisons (``== != < <= > >= in not in``, chained too), ``and`` / ``or`` / ``not``, integer arithmetic
  (``+ - * // %``) and unary minus;
* literals: ints, strings, booleans, and tuples/lists/sets of those (for ``in`` / ``not in`` and for comparing
  ``c.tile`` or ``c.warps[i]`` with a tuple);
* ``c.<field>`` where ``<field>`` is a KernelConfig field (``ckfmha.kernel.CONFIG_FIELDS``); the tuple fields
  are indexed with a non-negative integer literal: ``c.tile[0]`` (an int), ``c.warps[1]`` / ``c.warp_tiles[1]``
  (an (m, n, k) triple), ``c.warps[1][0]`` (an int).

Anything else -- calls, names other than ``c``, imports, lambdas, comprehensions, attribute chains, dunder
access, float and ``None`` literals (no field holds one) -- is rejected.

Types (checked at compile time)
-------------------------------
Field types come from :mod:`ckfmha.kernel`: ``ENUM_FIELDS`` (str enums, compared with their tokens),
``BOOL_FIELDS``, ``INT_FIELDS``; ``tile`` is a tuple of ints, ``warps`` / ``warp_tiles`` tuples of (m, n, k)
triples.

* a literal compared with an enum field (``==``, ``!=``, ``in``, ``not in``, on either side) must be one of the
  enum's tokens: ``c.pipeline == 'qr_asnyc'`` is an error listing the pipeline tokens;
* ints compare with ints, bools with bools: ``c.hdim_q == '128'`` ("hdim_q is an int, '128' is a str") and
  ``c.lse == 1`` ("lse is a bool, 1 is an int") are errors; every element of an ``in`` collection is checked;
* ordering (``< <= > >=``) and arithmetic apply to ints only -- so there is no string or tuple repetition
  (``'a' * 10**8``); ``//`` and ``%`` by a literal 0 are errors;
* ``and`` / ``or`` / ``not`` take conditions (comparisons, bool fields, ``True``/``False``), and the whole
  expression must be one.

Limits
------
:data:`MAX_EXPRESSION_LENGTH` characters, :data:`MAX_NESTING_DEPTH` levels of syntax-tree nesting (checked
without recursion; a parser that runs out of stack or memory is reported, not propagated), at most
:data:`MAX_COLLECTION_ITEMS` items per collection literal, indices below :data:`MAX_TILE_ENTRIES` for ``tile``
(bwd dq_dk_dv tiles have 9 entries) and :data:`MAX_GEMM_STAGES` for ``warps`` / ``warp_tiles`` (3 GEMM stages in
the backward), and 3 for an (m, n, k) triple.

Evaluation
----------
Once checked, the expression is compiled to a plain function, so evaluating it costs one call per config.
The predicate returned by :func:`compile_filter` turns any error raised while evaluating (an index that this
config's tuple does not have -- a fwd tile has 6 entries, ``c.tile[7]`` exists only for bwd kernels -- a
division by zero, ...) into a :class:`FilterError` naming the expression, the kernel id and the cause; it never
answers False silently.  ``predicate.fast`` is the unwrapped function (for hot loops over trusted rules),
``predicate.expression`` the source and ``predicate.literal_fields`` the fields compared with literals (see
:func:`literal_field_values`, used to explain an empty selection).

Filter files
------------
``--filter-file`` (:func:`load_filter_file`) **runs Python**: the file is imported and its
``filter_config(c) -> bool`` is called on every config.  It is trusted code -- only use files you trust.  Its
result must be a bool, and an exception it raises becomes a FilterError naming the file and the kernel.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ckfmha.kernel import BOOL_FIELDS, CONFIG_FIELDS, ENUM_FIELDS, INT_FIELDS, KernelConfig, TokenEnum

ConfigPredicate = Callable[[KernelConfig], bool]

MAX_EXPRESSION_LENGTH = 2000  # characters
MAX_NESTING_DEPTH = 32  # levels of the syntax tree (``c.hdim_q == 128`` has 5, ``not c.lse`` 5)
MAX_COLLECTION_ITEMS = 256  # items of one tuple/list/set literal
# KernelAlgorithm.tile: 6 entries fwd-style, 4 appendkv, 1 combine/dot_do_o/convert_dq, 9 for bwd dq_dk_dv
# (bm0, bn0, bk0, bk1, bk2, bk3, bk4, bhdq, bhdv: CK's codegen/ops/fmha_bwd.py FmhaBwdDQDKDVTileSize).
MAX_TILE_ENTRIES = 9
# warps / warp_tiles: one (m, n, k) per GEMM stage, 2 fwd, 3 bwd (fmha_bwd.py: rm0/rn0/rk0 .. rm2/rn2/rk2).
MAX_GEMM_STAGES = 3
TRIPLE_ENTRIES = 3  # (m, n, k)


def _close_matches(word: str, known: Iterable[str]) -> list[str]:
    """The nearest known spelling (for "did you mean"); difflib is imported only when a message needs it."""
    import difflib

    return difflib.get_close_matches(word, list(known), n=1)


class FilterError(ValueError):
    pass


_CMP_OPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)
_EQUALITY_OPS = (ast.Eq, ast.NotEq)
_MEMBERSHIP_OPS = (ast.In, ast.NotIn)
_BIN_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
_OP_TEXT = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.In: "in",
    ast.NotIn: "not in",
}

# ---------------------------------------------------------------------------------------------- static types
INT, BOOL, STR, ENUM, TILE, STAGES, TRIPLE, COLLECTION = (
    "int",
    "bool",
    "str",
    "enum",
    "tuple of ints",
    "tuple of (m, n, k) triples",
    "(m, n, k) triple",
    "collection",
)


@dataclass(frozen=True)
class _Type:
    kind: str
    desc: str  # how messages name the operand: the field ("hdim_q"), the literal ("'128'") or the source
    enum: type[TokenEnum] | None = None
    literal: Any = None  # the value of a literal (str/int/bool), or the element types of a collection
    is_literal: bool = False
    path: tuple | None = None  # (field,) or (field, index, ...) for c.<field>[...]

    def article(self) -> str:
        if self.kind == ENUM:
            assert self.enum is not None
            return f"a {self.enum.__name__} token"
        if self.kind in (INT, BOOL, STR):
            return "an int" if self.kind == INT else f"a {self.kind}"
        if self.kind == COLLECTION:
            return "a collection"
        return f"a {self.kind}"


_TUPLE_FIELDS = {"tile": TILE, "warps": STAGES, "warp_tiles": STAGES}
_INDEX_LIMIT = {TILE: MAX_TILE_ENTRIES, STAGES: MAX_GEMM_STAGES, TRIPLE: TRIPLE_ENTRIES}
_INDEX_RESULT = {TILE: INT, STAGES: TRIPLE, TRIPLE: INT}


def _field_kind(name: str) -> str:
    if name in ENUM_FIELDS:
        return ENUM
    if name in BOOL_FIELDS:
        return BOOL
    if name in INT_FIELDS:
        return INT
    return _TUPLE_FIELDS[name]


_untyped = [
    f
    for f in CONFIG_FIELDS
    if f not in ENUM_FIELDS and f not in BOOL_FIELDS and f not in INT_FIELDS and f not in _TUPLE_FIELDS
]
if _untyped:  # pragma: no cover - a new KernelConfig field needs a filter type
    raise ImportError(f"ckfmha.filters: no filter type for KernelConfig field(s) {_untyped}")
_FIELD_KINDS = {f: _field_kind(f) for f in CONFIG_FIELDS}


def _quote(text: str, limit: int = 160) -> str:
    """``repr`` of an expression for messages, shortened in the middle past ``limit`` characters."""
    if len(text) <= limit:
        return repr(text)
    return repr(text[: limit // 2]) + f" ... ({len(text)} characters) ... " + repr(text[-limit // 4 :])


def _path_label(path: tuple) -> str:
    return path[0] + "".join(f"[{i}]" for i in path[1:])


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")  # a line of source, with its end (\r\n, \r or \n) if any


class _Checker:
    """Checks one parsed expression; ``check`` returns the static type of a node (or raises FilterError)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.literal_paths: dict[tuple, None] = {}  # fields compared with literals, in order of appearance
        # the source's lines as the parser counts them (ends kept), UTF-8 encoded, as ast.get_source_segment cuts
        # them: it splits the source again, character by character, on every call
        self.lines = [line.encode() for line in _LINE.findall(source)]

    def seg(self, n: ast.AST) -> str:
        """The source text of node ``n`` (as :func:`ast.get_source_segment`), or its type's name when it has none."""
        lineno, col = getattr(n, "lineno", None), getattr(n, "col_offset", None)
        end_lineno, end = getattr(n, "end_lineno", None), getattr(n, "end_col_offset", None)
        text = ""
        if lineno is not None and col is not None and end_lineno is not None and end is not None:
            first, last = lineno - 1, end_lineno - 1
            if first == last:
                text = self.lines[first][col:end].decode()
            else:
                text = b"".join(
                    [self.lines[first][col:], *self.lines[first + 1 : last], self.lines[last][:end]]
                ).decode()
        return text or type(n).__name__

    def bad(self, n: ast.AST | None, why: str) -> FilterError:
        where = f": {_quote(self.seg(n))}" if n is not None else ""
        return FilterError(f"filter {_quote(self.source)}: {why}{where}")

    def fail(self, why: str) -> FilterError:
        return FilterError(f"filter {_quote(self.source)}: {why}")

    # ------------------------------------------------------------------------------------------- nodes
    def check(self, node: ast.AST) -> _Type:
        if isinstance(node, ast.Expression):
            t = self.check(node.body)
            if t.kind != BOOL:
                raise self.fail(
                    f"the expression must be a condition (a comparison, a bool field, and/or/not), "
                    f"but {t.desc} is {t.article()}"
                )
            return t
        if isinstance(node, ast.BoolOp):
            word = "and" if isinstance(node.op, ast.And) else "or"
            for v in node.values:
                t = self.check(v)
                if t.kind != BOOL:
                    raise self.fail(f"'{word}' combines conditions, but {t.desc} is {t.article()}")
            return _Type(BOOL, self.seg(node))
        if isinstance(node, ast.UnaryOp):
            return self.unary(node)
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.BinOp):
            return self.binop(node)
        if isinstance(node, ast.Constant):
            return self.constant(node)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return self.collection(node)
        if isinstance(node, ast.Attribute):
            return self.attribute(node)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.Name):
            raise self.bad(
                node,
                "names other than c.<field> are not allowed" if node.id != "c" else "'c' must be used as c.<field>",
            )
        if isinstance(node, ast.Call):
            raise self.bad(node, "function calls are not allowed")
        raise self.bad(node, f"{type(node).__name__} is not allowed")

    def unary(self, node: ast.UnaryOp) -> _Type:
        if isinstance(node.op, ast.Not):
            t = self.check(node.operand)
            if t.kind != BOOL:
                raise self.fail(f"'not' applies to conditions, but {t.desc} is {t.article()}")
            return _Type(BOOL, self.seg(node))
        if not isinstance(node.op, ast.USub):
            raise self.bad(node, "only 'not' and unary '-' are allowed")
        t = self.check(node.operand)
        if t.kind != INT:
            raise self.fail(f"unary '-' applies to ints only, but {t.desc} is {t.article()}")
        if t.is_literal:
            return _Type(INT, repr(-t.literal), literal=-t.literal, is_literal=True)
        return _Type(INT, self.seg(node))

    def constant(self, node: ast.Constant) -> _Type:
        v = node.value
        if isinstance(v, bool):
            return _Type(BOOL, repr(v), literal=v, is_literal=True)
        if isinstance(v, int):
            return _Type(INT, repr(v), literal=v, is_literal=True)
        if isinstance(v, str):
            return _Type(STR, repr(v), literal=v, is_literal=True)
        if v is None:
            raise self.bad(node, "None is not a value of any KernelConfig field")
        if isinstance(v, float):
            raise self.bad(node, "float literals are not allowed (KernelConfig has no float field)")
        raise self.bad(node, "only int, string and bool literals are allowed")

    def collection(self, node: ast.Tuple | ast.List | ast.Set) -> _Type:
        if len(node.elts) > MAX_COLLECTION_ITEMS:
            raise self.fail(
                f"a collection literal holds {len(node.elts)} items, more than the limit {MAX_COLLECTION_ITEMS}"
            )
        elts = []
        for elt in node.elts:
            literal_int = (
                isinstance(elt, ast.UnaryOp) and isinstance(elt.op, ast.USub) and isinstance(elt.operand, ast.Constant)
            )
            if not (isinstance(elt, ast.Constant) or literal_int):
                raise self.bad(elt, "collections may hold literals only")
            elts.append(self.check(elt))
        return _Type(COLLECTION, self.seg(node), literal=tuple(elts), is_literal=True)

    def attribute(self, node: ast.Attribute) -> _Type:
        if not (isinstance(node.value, ast.Name) and node.value.id == "c"):
            raise self.bad(node, "attribute access is allowed on 'c' only (c.<field>)")
        if node.attr not in _FIELD_KINDS:
            near = _close_matches(node.attr, CONFIG_FIELDS)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise self.fail(f"unknown field {node.attr!r}{hint}; known fields: {', '.join(sorted(CONFIG_FIELDS))}")
        kind = _FIELD_KINDS[node.attr]
        return _Type(kind, node.attr, enum=ENUM_FIELDS.get(node.attr), path=(node.attr,))

    def subscript(self, node: ast.Subscript) -> _Type:
        if not isinstance(node.value, (ast.Attribute, ast.Subscript)):
            raise self.bad(node, "indexing is allowed on c.<field> only")
        base = self.check(node.value)
        if base.kind not in _INDEX_LIMIT:
            raise self.bad(
                node,
                f"{base.desc} is {base.article()} and cannot be indexed; indexable: tile "
                f"(ints), warps and warp_tiles ((m, n, k) triples, themselves indexable)",
            )
        idx = node.slice
        if (
            isinstance(idx, ast.UnaryOp)
            and isinstance(idx.op, ast.USub)
            and isinstance(idx.operand, ast.Constant)
            and isinstance(idx.operand.value, int)
            and not isinstance(idx.operand.value, bool)
        ):
            raise self.bad(node, "negative indices are not allowed (count from 0)")
        if not (isinstance(idx, ast.Constant) and isinstance(idx.value, int) and not isinstance(idx.value, bool)):
            raise self.bad(node, "an index must be an integer literal")
        limit = _INDEX_LIMIT[base.kind]
        if idx.value >= limit:
            what = {
                TILE: f"tile has at most {MAX_TILE_ENTRIES} entries (bwd dq_dk_dv)",
                STAGES: f"{base.path[0] if base.path else base.desc} has at most {MAX_GEMM_STAGES} GEMM stages (bwd)",
                TRIPLE: "an (m, n, k) triple has 3 entries",
            }[base.kind]
            raise self.bad(node, f"index {idx.value} is out of range: {what}, so indices run 0..{limit - 1}")
        path = None if base.path is None else base.path + (idx.value,)
        return _Type(_INDEX_RESULT[base.kind], _path_label(path) if path else self.seg(node), path=path)

    def binop(self, node: ast.BinOp) -> _Type:
        if not isinstance(node.op, _BIN_OPS):
            raise self.bad(node, f"arithmetic operator {type(node.op).__name__} is not allowed")
        left, right = self.check(node.left), self.check(node.right)
        for t in (left, right):
            if t.kind != INT:
                raise self.bad(node, f"arithmetic applies to ints only, but {t.desc} is {t.article()}")
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right.is_literal and right.literal == 0:
            raise self.bad(node, "division or modulo by zero")
        return _Type(INT, self.seg(node))

    def compare(self, node: ast.Compare) -> _Type:
        for op in node.ops:
            if not isinstance(op, _CMP_OPS):
                raise self.bad(node, f"comparison operator {type(op).__name__} is not allowed")
        left = self.check(node.left)
        for op, comp in zip(node.ops, node.comparators):
            right = self.check(comp)
            if isinstance(op, _MEMBERSHIP_OPS):
                self.membership(left, op, right)
            else:
                self.pair(left, op, right)
            left = right
        return _Type(BOOL, self.seg(node))

    # ------------------------------------------------------------------------------------------- rules
    def note_literal(self, a: _Type, b: _Type) -> None:
        for x, y in ((a, b), (b, a)):
            if x.path is not None and y.is_literal:
                self.literal_paths.setdefault(x.path, None)

    def membership(self, left: _Type, op: ast.cmpop, right: _Type) -> None:
        word = _OP_TEXT[type(op)]
        if right.kind == COLLECTION:
            for elt in right.literal:
                self.pair(left, ast.Eq(), elt, context=f"{word} {right.desc}")
            self.note_literal(left, right)
            return
        elem = {TILE: INT, STAGES: TRIPLE, TRIPLE: INT}.get(right.kind)
        if elem is None:
            raise self.fail(
                f"'{word}' needs a collection literal or a tuple field on its right, but {right.desc} "
                f"is {right.article()}"
            )
        self.pair(left, ast.Eq(), _Type(elem, f"an element of {right.desc}"), context=f"{word} {right.desc}")

    def pair(self, a: _Type, op: ast.cmpop, b: _Type, context: str = "") -> None:
        """Check ``a <op> b`` (either side may be the literal)."""
        ctx = f" (in '{context}')" if context else ""
        ordering = not isinstance(op, _EQUALITY_OPS)
        if ordering and not (a.kind == INT and b.kind == INT):
            odd = a if a.kind != INT else b
            raise self.fail(f"'{_OP_TEXT[type(op)]}' orders ints only, but {odd.desc} is {odd.article()}")
        for x, y in ((a, b), (b, a)):
            if x.kind == ENUM and y.kind == STR:
                assert x.enum is not None
                tokens = [m.value for m in x.enum]
                if y.literal not in tokens:
                    near = _close_matches(y.literal, tokens)
                    hint = f" (did you mean {near[0]!r}?)" if near else ""
                    raise self.fail(
                        f"{y.desc} is not a {x.desc} value{hint}{ctx}; {x.desc} is one of: {', '.join(tokens)}"
                    )
                self.note_literal(a, b)
                return
        if a.kind == ENUM and b.kind == ENUM:
            if a.enum is not b.enum:
                raise self.fail(f"{a.desc} is {a.article()}, {b.desc} is {b.article()}: they never compare equal{ctx}")
            return
        if a.kind == COLLECTION or b.kind == COLLECTION:
            coll, other = (a, b) if a.kind == COLLECTION else (b, a)
            elem = {TILE: INT, TRIPLE: INT}.get(other.kind)
            if elem is None:
                raise self.fail(f"{other.desc} is {other.article()}, {coll.desc} is a collection{ctx}")
            for e in coll.literal:
                if e.kind != elem:
                    raise self.fail(
                        f"{other.desc} is {other.article()}, but {coll.desc} holds {e.desc}, {e.article()}{ctx}"
                    )
            if other.kind == TRIPLE and len(coll.literal) != TRIPLE_ENTRIES:
                raise self.fail(
                    f"{other.desc} is an (m, n, k) triple, {coll.desc} has {len(coll.literal)} entries{ctx}"
                )
            self.note_literal(a, b)
            return
        if a.kind != b.kind:
            raise self.fail(f"{a.desc} is {a.article()}, {b.desc} is {b.article()}{ctx}")
        self.note_literal(a, b)


def _depth_check(tree: ast.AST, source: str) -> None:
    """Reject trees nested deeper than MAX_NESTING_DEPTH (iteratively: no recursion on hostile input)."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING_DEPTH:
            raise FilterError(
                f"filter {_quote(source)}: nested deeper than {MAX_NESTING_DEPTH} levels (each 'not', "
                "each term of a '+' chain and each index adds one)"
            )
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _parse(expression: Any) -> tuple[str, ast.Expression]:
    if not isinstance(expression, str):
        raise FilterError(f"filter {expression!r}: expected an expression string, found {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise FilterError(
            f"filter {_quote(expression)}: {len(expression)} characters, more than the limit {MAX_EXPRESSION_LENGTH}"
        )
    source = expression.strip()
    if not source:
        raise FilterError(f"filter {expression!r}: empty expression")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as e:
        raise FilterError(f"filter {_quote(expression)}: does not parse: {e.msg} (column {e.offset})") from None
    except (RecursionError, MemoryError):
        raise FilterError(
            f"filter {_quote(expression)}: too deeply nested to parse (limit {MAX_NESTING_DEPTH} levels)"
        ) from None
    except ValueError as e:  # e.g. a NUL character
        raise FilterError(f"filter {_quote(expression)}: does not parse: {e}") from None
    _depth_check(tree, source)
    return source, tree


def _kernel_label(c: Any) -> str:
    try:
        return f"kernel {c.kernel_id}"
    except Exception:  # noqa: BLE001 - describing the failure must not fail
        return f"config {c!r}"


def _index_cause(c: Any, paths: Iterable[tuple]) -> str | None:
    """The first indexed access of ``paths`` that config ``c`` does not have."""
    for path in paths:
        try:
            value = getattr(c, path[0])
        except Exception:  # noqa: BLE001
            return None
        for depth, i in enumerate(path[1:], start=1):
            if i >= len(value):
                label = _path_label(path[: depth + 1])
                fam = getattr(c, "family", None)
                return (
                    f"{label} is out of range: this kernel's {_path_label(path[:depth])} has {len(value)} "
                    f"entr{'y' if len(value) == 1 else 'ies'}" + (f" (family {fam})" if fam is not None else "")
                )
            value = value[i]
    return None


def compile_filter(expression: str) -> ConfigPredicate:
    """Check ``expression`` (see the module doc) and return a predicate ``f(config) -> bool``.

    Raises FilterError at compile time for anything outside the grammar, limits or types; the predicate raises
    FilterError (naming the expression, the kernel id and the cause) when evaluation fails on a config.
    Compiled once per process and expression (the arch files repeat their rules): equal expressions give the same
    predicate object."""
    if isinstance(expression, str):
        return _compile_cached(expression)
    return _compile(expression)


@lru_cache(maxsize=1024)
def _compile_cached(expression: str) -> ConfigPredicate:
    return _compile(expression)


def _compile(expression: str) -> ConfigPredicate:
    source, tree = _parse(expression)
    checker = _Checker(source)
    checker.check(tree)
    index_paths = tuple(
        dict.fromkeys(
            p for p in (_static_path(n) for n in ast.walk(tree) if isinstance(n, ast.Subscript)) if p is not None
        )
    )
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
            return fn(c)
        except Exception as e:  # noqa: BLE001 - every evaluation failure becomes a FilterError naming its cause
            cause = _index_cause(c, index_paths) if isinstance(e, IndexError) else None
            if cause is None:
                cause = f"{type(e).__name__}: {e}"
            raise FilterError(f"filter {_quote(source)}: cannot evaluate on {_kernel_label(c)}: {cause}") from None

    predicate.expression = source  # type: ignore[attr-defined]
    predicate.fast = fn  # type: ignore[attr-defined]  # unchecked form for hot loops over trusted configs
    predicate.literal_fields = tuple(checker.literal_paths)  # type: ignore[attr-defined]
    return predicate


def _static_path(node: ast.AST) -> tuple | None:
    """(field, i, j...) of a checked ``c.<field>[i][j]`` node."""
    idx: list[int] = []
    while isinstance(node, ast.Subscript):
        assert isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)  # checked by _check
        idx.append(node.slice.value)
        node = node.value
    if isinstance(node, ast.Attribute):
        return (node.attr, *reversed(idx))
    return None


def literal_field_values(predicate: Any, configs: Iterable[KernelConfig]) -> dict[str, list[Any]]:
    """For each field ``predicate`` (from :func:`compile_filter`) compares with a literal, the distinct values
    it takes in ``configs`` (enum tokens in declaration order, other values sorted).  Label -> values, e.g.
    ``{'mask': ['none', 'any']}``.  Indexed fields (``tile[7]``) skip configs whose tuple is shorter.  Empty for other predicates."""
    paths: tuple = getattr(predicate, "literal_fields", ())
    seen: dict[tuple, set] = {p: set() for p in paths}
    for c in configs:
        for p in paths:
            v: Any = getattr(c, p[0])
            try:
                for i in p[1:]:
                    v = v[i]
            except IndexError:
                continue
            seen[p].add(v)
    return {
        _path_label(p): [v.value if isinstance(v, TokenEnum) else v for v in sorted(vals, key=_value_order)]
        for p, vals in seen.items()
    }


def _value_order(v: Any) -> tuple:
    """Enum members in declaration order (none, any, causal, generic), other values by value."""
    if isinstance(v, TokenEnum):
        return (list(type(v)).index(v),)
    return (v,)


def load_filter_file(path: str | Path) -> ConfigPredicate:
    """Load ``filter_config(c) -> bool`` from a Python file.

    **This runs Python**: the file is imported (executing its top level) and ``filter_config`` is called on every
    config -- trusted code, only use files you trust.  The predicate raises FilterError when ``filter_config``
    raises or returns anything but a bool, naming the file and the kernel."""
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

    def predicate(c: KernelConfig) -> bool:
        try:
            result = fn(c)
        except Exception as e:  # noqa: BLE001 - the user's code: report any failure with its cause
            raise FilterError(
                f"filter file {str(p)!r}: filter_config raised on {_kernel_label(c)}: {type(e).__name__}: {e}"
            ) from None
        if not isinstance(result, bool):
            raise FilterError(
                f"filter file {str(p)!r}: filter_config returned {result!r} "
                f"({type(result).__name__}) on {_kernel_label(c)}; it must return a bool"
            )
        return result

    predicate.source = str(p)  # type: ignore[attr-defined]
    return predicate


def combine(predicates: Iterable[ConfigPredicate | None]) -> ConfigPredicate | None:
    """AND together the given predicates (None entries are skipped); None when there are none."""
    preds = [p for p in predicates if p is not None]
    if not preds:
        return None
    if len(preds) == 1:
        return preds[0]
    return lambda c: all(p(c) for p in preds)
