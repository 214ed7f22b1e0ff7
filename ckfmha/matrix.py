"""Testing matrices: YAML files of attention shapes, expanded into :class:`ckfmha.problem.Problem` objects.

The schema is documented in ``matrices/README.md``; in short::

    schema: 1
    family: fwd                    # default family of every entry (a Problem family; 'bwd' = the whole backward)
    description: free text         # optional
    defaults: {dtype: fp16}        # optional: scalar Problem fields applied to every entry (an entry overrides)
    entries:
      - name: gqa_prefill          # [A-Za-z0-9_]+, unique in the file
        category: smoke            # smoke | full | nightly   (smoke < full < nightly: a category holds the smaller ones)
        description: free text     # optional
        batch: 2                   # scalar Problem fields: the same for every shape of the entry
        product:                   # cross product: field -> non-empty list of values
          dtype: [fp16, bf16]
          mask: [none, causal]
        zip:                       # paired values: "field, field, ..." -> list of rows (one value per field)
          nhead_q, nhead_k: [[8, 2], [8, 1]]
          hdim_q, hdim_v: [[128, 128], [192, 128]]

An entry expands to ``product(zip groups..., product axes...)`` in the order written; every combination must
be a valid Problem -- an invalid one is an error (never silently dropped), as is a duplicate problem (within
or across entries and files).  Every error is a :class:`MatrixError` naming the file, the entry and the key.

Files are read by :func:`ckfmha.datafile.load_yaml`: a key written twice in one mapping, bytes that are not
UTF-8, nesting deeper than ``MAX_NESTING_DEPTH`` and files over ``MAX_FILE_BYTES`` are errors.  In every mapping
(top level, entries, ``defaults``, ``product``, ``zip``) unknown keys are reported first, with the closest known
key (``unknown key 'nme' (did you mean 'name'?)``).  A bool is never an int (``schema: true`` and ``batch: yes``
are errors).  An entry may expand to at most :data:`MAX_SHAPES_PER_ENTRY` shapes and a file to
:data:`MAX_SHAPES_PER_FILE`; both are checked on the product of the axis lengths before anything is expanded.

Problem fields use :class:`ckfmha.problem.Problem`'s names and tokens.  Extras: ``layout`` sets both
``input_layout`` and ``output_layout``; ``mask`` takes ckfmha's one mask vocabulary
(:meth:`ckfmha.masking.MaskSpec.parse`): CK's ``-mask`` syntax (``0``, ``t``, ``b``, ``t:l,r``, ``b:l,r``,
``xt:w``, ``xb:w``, ``g:y,x``) or the words ``none`` / ``no_mask``, ``causal`` / ``top_left``, ``bottom_right``.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ckfmha.categories import CATEGORIES  # noqa: E402  (the one list)
from ckfmha.datafile import DataFileError, MissingDataFileError, load_yaml
from ckfmha.families import PROBLEM_FAMILIES, FamilyError, problem_family, problem_family_of
from ckfmha.problem import Problem, ProblemError

SCHEMA_VERSION = 1
TOP_KEYS = frozenset({"schema", "family", "description", "defaults", "entries"})
ENTRY_META_KEYS = frozenset({"name", "category", "description", "family", "product", "zip"})


def _field_kinds() -> dict[str, str]:
    """How a matrix file writes each Problem field, from the Problem dataclass's own field types (the one list of
    fields): ints, numbers, bools, lists of ints (per-sequence lengths), and strings for the tokens (enums, layouts,
    CK's mask syntax and words); ``family`` is an entry key of its own, ``layout`` sets both layouts."""
    import dataclasses

    kinds = {
        "int": "int",
        "int | None": "int",
        "float": "number",
        "bool": "bool",
        "tuple[int, ...] | None": "list of ints",
    }
    out = {f.name: kinds.get(str(f.type), "string") for f in dataclasses.fields(Problem) if f.name != "family"}
    out["layout"] = "string"
    return out


FIELD_KINDS: dict[str, str] = _field_kinds()
SHAPE_FIELDS = frozenset(FIELD_KINDS)
_NAME_RE = re.compile(r"^[A-Za-z0-9_]+\Z")
MAX_SHAPES_PER_ENTRY = 10_000
"""The most shapes one entry may expand to (the packaged matrices' largest entry has a few hundred)."""
MAX_SHAPES_PER_FILE = 50_000
"""The most shapes one matrix file may expand to (the packaged fwd.yaml has about a thousand)."""


class MatrixError(ValueError):
    """A malformed matrix file; the message names the file, the entry and the key."""


@dataclass(frozen=True)
class Shape:
    """One expanded shape: the problem plus where it came from."""

    problem: Problem
    file: str  # file name (e.g. fwd.yaml)
    entry: str
    category: str
    index: int  # position within the entry's expansion

    @property
    def family(self) -> str:
        return problem_family_of(self.problem)


def category_rank(category: str) -> int:
    if category not in CATEGORIES:
        raise MatrixError(f"category: unknown category {category!r}; allowed: {', '.join(CATEGORIES)}")
    return CATEGORIES.index(category)


def default_matrix_dir() -> Path:
    """The packaged matrices: ``matrices/`` at the top of a checkout (also what an editable install reads), which
    a wheel ships as ``ckfmha/matrices/`` (pyproject.toml's package-dir mapping)."""
    installed = Path(str(resources.files("ckfmha") / "matrices"))
    if installed.is_dir():
        return installed
    checkout = Path(__file__).resolve().parent.parent / "matrices"
    if checkout.is_dir():
        return checkout
    raise MatrixError(
        f"no packaged matrices: neither {installed} (an installed wheel) nor {checkout} (a checkout) exists"
    )


# ---------------------------------------------------------------------------------------------- checking
def _check_value(where: str, key: str, v: Any) -> Any:
    kind = FIELD_KINDS[key]
    ok = True
    if kind == "int":
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif kind == "number":
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    elif kind == "bool":
        ok = isinstance(v, bool)
    elif kind == "string":
        if isinstance(v, int) and not isinstance(v, bool) and key == "mask":
            v = str(v)  # mask: 0 / 1 / 2 written without quotes
        ok = isinstance(v, str)
    elif kind == "list of ints":
        ok = isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
        if ok:
            v = tuple(v)
    if not ok:
        raise MatrixError(f"{where}: {key}: expected {kind}, found {v!r} ({type(v).__name__})")
    return v


def _problem_kwargs(values: dict[str, Any]) -> dict[str, Any]:
    kw = dict(values)  # mask: Problem parses it (ckfmha.masking's one vocabulary)
    if "layout" in kw:
        lay = kw.pop("layout")
        kw.setdefault("input_layout", lay)
        kw.setdefault("output_layout", lay)
    return kw


def _unknown_key(where: str, key: Any, allowed: Iterable[str]) -> MatrixError:
    """``<where>: unknown key 'nme' (did you mean 'name'?); allowed: ...``."""
    names = sorted(allowed)
    close = difflib.get_close_matches(str(key), names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return MatrixError(f"{where}: unknown key {key!r}{hint}; allowed: {', '.join(names)}")


def _check_keys(where: str, keys: Iterable[Any], allowed: frozenset[str] | set[str]) -> None:
    """Unknown keys are reported before anything else in a mapping is looked at."""
    for k in keys:
        if k not in allowed:
            raise _unknown_key(where, k, allowed)


def _fields(where: str, mapping: Any, what: str) -> dict[str, Any]:
    if not isinstance(mapping, dict):
        raise MatrixError(f"{where}: {what}: expected a mapping, found {type(mapping).__name__}")
    _check_keys(f"{where}: {what}", mapping, SHAPE_FIELDS)
    return {k: _check_value(f"{where}: {what}", k, v) for k, v in mapping.items()}


@dataclass(frozen=True)
class _Entry:
    name: str
    category: str
    family: str
    fixed: dict
    axes: tuple  # ((field names...), (rows...)) per axis


def _parse_entry(fname: str, i: int, e: Any, defaults: dict, family: str) -> _Entry:
    where = f"{fname}: entries[{i}]"
    if not isinstance(e, dict):
        raise MatrixError(f"{where}: expected a mapping, found {type(e).__name__}")
    written_name = e.get("name")
    name = written_name if isinstance(written_name, str) and _NAME_RE.match(written_name) else None
    _check_keys(f"{fname}: entry {name!r}" if name is not None else where, e, ENTRY_META_KEYS | SHAPE_FIELDS)
    if name is None:
        raise MatrixError(f"{where}: name: expected a name of letters, digits and '_', found {written_name!r}")
    where = f"{fname}: entry {name!r}"
    cat = e.get("category")
    if cat not in CATEGORIES:
        raise MatrixError(f"{where}: category: expected one of {', '.join(CATEGORIES)}, found {cat!r}")
    if "description" in e and not isinstance(e["description"], str):
        raise MatrixError(f"{where}: description: expected a string, found {e['description']!r}")
    fam = e.get("family", family)
    if not isinstance(fam, str):
        raise MatrixError(f"{where}: family: expected a string, found {fam!r}")
    fixed = dict(defaults)
    for k, v in e.items():
        if k in SHAPE_FIELDS:
            if isinstance(v, list) and FIELD_KINDS[k] != "list of ints":
                raise MatrixError(
                    f"{where}: {k}: a list of values must go under 'product' (crossed) or 'zip' (paired), found {v!r}"
                )
            fixed[k] = _check_value(where, k, v)
    seen: dict[str, str] = {k: "the entry" for k in e if k in SHAPE_FIELDS}
    prod = e.get("product", {})
    if not isinstance(prod, dict):
        raise MatrixError(f"{where}: product: expected a mapping field -> list, found {type(prod).__name__}")
    _check_keys(f"{where}: product", prod, SHAPE_FIELDS)
    zp = e.get("zip", {})
    if not isinstance(zp, dict):
        raise MatrixError(f"{where}: zip: expected a mapping 'field, field' -> list of rows, found {type(zp).__name__}")
    for key in zp:
        _check_keys(f"{where}: zip.{key}", (s.strip() for s in str(key).split(",")), SHAPE_FIELDS)
    axes = _product_axes(where, prod, seen) + _zip_axes(where, zp, seen)
    for k in seen:
        fixed.pop(k, None) if seen[k] != "the entry" else None
    return _Entry(name, cat, fam, fixed, tuple(axes))


def _product_axes(
    where: str, prod: dict, seen: dict[str, str]
) -> list[tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]]:
    """One axis per ``product`` field (its values, crossed with the other axes); ``seen`` records where each field
    is set, and a field set twice is an error."""
    axes: list[tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]] = []
    for k, vals in prod.items():
        if k in seen:
            raise MatrixError(f"{where}: product.{k}: field already set in {seen[k]}")
        seen[k] = "product"
        if not isinstance(vals, list) or not vals:
            raise MatrixError(f"{where}: product.{k}: expected a non-empty list, found {vals!r}")
        rows = tuple((_check_value(f"{where}: product", k, v),) for v in vals)
        if len(set(rows)) != len(rows):
            raise MatrixError(f"{where}: product.{k}: repeated value in {vals!r}")
        axes.append(((k,), rows))
    return axes


def _zip_axes(where: str, zp: dict, seen: dict[str, str]) -> list[tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]]:
    """One axis per ``zip`` key ``'field, field'`` (its rows, paired values); ``seen`` as for
    :func:`_product_axes`."""
    axes: list[tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]] = []
    for key, rows_in in zp.items():
        names = tuple(s.strip() for s in str(key).split(","))
        for k in names:
            if k in seen:
                raise MatrixError(f"{where}: zip.{key}: field {k!r} already set in {seen[k]}")
            seen[k] = f"zip.{key}"
        if not isinstance(rows_in, list) or not rows_in:
            raise MatrixError(f"{where}: zip.{key}: expected a non-empty list of rows, found {rows_in!r}")
        zip_rows: list[tuple[Any, ...]] = []
        for j, row in enumerate(rows_in):
            if len(names) == 1 and not isinstance(row, list):
                row = [row]
            if not isinstance(row, list) or len(row) != len(names):
                raise MatrixError(
                    f"{where}: zip.{key}[{j}]: expected a row of {len(names)} value(s) "
                    f"({', '.join(names)}), found {row!r}"
                )
            zip_rows.append(tuple(_check_value(f"{where}: zip.{key}[{j}]", k, v) for k, v in zip(names, row)))
        if len(set(zip_rows)) != len(zip_rows):
            raise MatrixError(f"{where}: zip.{key}: repeated row")
        axes.append((names, tuple(zip_rows)))
    return axes


def _shape_count(ent: _Entry) -> int:
    """Shapes the entry expands to: the product of its axis lengths (nothing is expanded)."""
    return math.prod(len(rows) for _, rows in ent.axes)


def _check_caps(fname: str, entries: list[_Entry]) -> None:
    total = 0
    for ent in entries:
        n = _shape_count(ent)
        if n > MAX_SHAPES_PER_ENTRY:
            axes = " x ".join(f"{len(rows)} ({', '.join(names)})" for names, rows in ent.axes)
            raise MatrixError(
                f"{fname}: entry {ent.name!r}: expands to {n:,} shapes ({axes}); the limit is "
                f"MAX_SHAPES_PER_ENTRY = {MAX_SHAPES_PER_ENTRY:,} per entry"
            )
        total += n
        if total > MAX_SHAPES_PER_FILE:
            raise MatrixError(
                f"{fname}: entry {ent.name!r}: brings the file to {total:,} shapes; the limit is "
                f"MAX_SHAPES_PER_FILE = {MAX_SHAPES_PER_FILE:,} per file"
            )


def _expand(fname: str, ent: _Entry) -> list[Shape]:
    out = []
    axes = ent.axes
    for idx, combo in enumerate(itertools.product(*(rows for _, rows in axes)) if axes else [()]):
        values = dict(ent.fixed)
        for (names, _), row in zip(axes, combo):
            values.update(zip(names, row))
        try:
            # Problem takes the family token and parses it (Problem._coerce_tokens, as for every other field here);
            # its dataclass annotation names only the parsed type, Family
            p = Problem(family=ent.family, **_problem_kwargs(values))  # type: ignore[arg-type]
        except ProblemError as err:
            assigned = ", ".join(f"{n}={v!r}" for (names, _), row in zip(axes, combo) for n, v in zip(names, row))
            raise MatrixError(
                f"{fname}: entry {ent.name!r}: combination {idx}{' (' + assigned + ')' if assigned else ''}: {err}"
            ) from None
        except TypeError as err:  # pragma: no cover - guarded by the field checks
            raise MatrixError(f"{fname}: entry {ent.name!r}: {err}") from None
        out.append(Shape(p, fname, ent.name, ent.category, idx))
    return out


def parse_matrix(doc: Any, fname: str) -> list[Shape]:
    """Validate and expand one matrix document (already loaded YAML)."""
    if not isinstance(doc, dict):
        raise MatrixError(f"{fname}: top level: expected a mapping, found {type(doc).__name__}")
    _check_keys(f"{fname}: top level", doc, TOP_KEYS)
    schema = doc.get("schema")
    if type(schema) is not int or schema != SCHEMA_VERSION:  # a bool or a float is not the version
        raise MatrixError(f"{fname}: schema: expected the int {SCHEMA_VERSION}, found {schema!r}")
    family = doc.get("family")
    if not isinstance(family, str):
        raise MatrixError(f"{fname}: family: expected a problem family string, found {family!r}")
    if "description" in doc and not isinstance(doc["description"], str):
        raise MatrixError(f"{fname}: description: expected a string")
    defaults = _fields(fname, doc.get("defaults", {}), "defaults")
    for k, v in defaults.items():
        if isinstance(v, list):  # pragma: no cover - _check_value turns int lists into tuples
            raise MatrixError(f"{fname}: defaults.{k}: expected a scalar")
    entries = doc.get("entries")
    if not isinstance(entries, list) or not entries:
        raise MatrixError(f"{fname}: entries: expected a non-empty list")
    parsed: list[_Entry] = []
    names: set[str] = set()
    for i, e in enumerate(entries):
        ent = _parse_entry(fname, i, e, defaults, family)
        if ent.name in names:
            raise MatrixError(f"{fname}: entry {ent.name!r}: name: used by an earlier entry")
        names.add(ent.name)
        parsed.append(ent)
    _check_caps(fname, parsed)
    shapes: list[Shape] = []
    seen: dict[Problem, Shape] = {}
    for ent in parsed:
        for s in _expand(fname, ent):
            first = seen.get(s.problem)
            if first is not None:
                raise MatrixError(
                    f"{fname}: entry {s.entry!r}: combination {s.index}: duplicate of entry "
                    f"{first.entry!r} combination {first.index} ({s.problem})"
                )
            seen[s.problem] = s
            shapes.append(s)
    return shapes


def load_matrix_file(path: str | Path) -> list[Shape]:
    p = Path(path)
    try:
        doc = load_yaml(p)
    except MissingDataFileError:
        raise MatrixError(f"{p}: no such matrix file") from None
    except DataFileError as e:  # duplicate keys, not UTF-8, too deep, too large, malformed YAML
        raise MatrixError(str(e)) from None
    return parse_matrix(doc, p.name)


def _file_order(p: Path) -> tuple:
    """Files named after a problem family (or alias) first, in the family order; then the rest by name."""
    try:
        return (PROBLEM_FAMILIES.index(problem_family(p.stem)), p.name)
    except FamilyError:
        return (len(PROBLEM_FAMILIES), p.name)


def matrix_files(paths: Sequence[str | Path] | None = None) -> list[Path]:
    """The YAML files of the given files/directories (default: the packaged matrices), in a fixed order."""
    out: list[Path] = []
    for item in paths or [default_matrix_dir()]:
        p = Path(item)
        if p.is_dir():
            out.extend(sorted(p.glob("*.yaml"), key=_file_order))
        elif p.is_file():
            out.append(p)
        else:
            raise MatrixError(f"{p}: no such matrix file or directory")
    return out


def load_matrices(paths: Sequence[str | Path] | None = None) -> list[Shape]:
    """All shapes of the given matrix files/directories, checked for duplicates across files."""
    return list(
        _load_cached(
            tuple(str(p.resolve()) for p in matrix_files(paths)),
            tuple(p.stat().st_mtime_ns for p in matrix_files(paths)),
        )
    )


@lru_cache(maxsize=8)
def _load_cached(files: tuple[str, ...], _mtimes: tuple[int, ...]) -> tuple[Shape, ...]:
    shapes: list[Shape] = []
    seen: dict[Problem, Shape] = {}
    names: dict[str, str] = {}
    for f in files:
        name = Path(f).name
        if name in names:
            raise MatrixError(f"{f}: a matrix file called {name!r} is already loaded from {names[name]}")
        names[name] = f
        for s in load_matrix_file(f):
            first = seen.get(s.problem)
            if first is not None:
                raise MatrixError(
                    f"{s.file}: entry {s.entry!r}: combination {s.index}: duplicate of "
                    f"{first.file} entry {first.entry!r} combination {first.index}"
                )
            seen[s.problem] = s
            shapes.append(s)
    return tuple(shapes)


def select(shapes: Iterable[Shape], category: str, families: Iterable[str] | None = None) -> list[Shape]:
    """The shapes of a category (which holds every smaller category), optionally only some families."""
    rank = category_rank(category)
    fams = None if families is None else set(families)
    return [s for s in shapes if CATEGORIES.index(s.category) <= rank and (fams is None or s.family in fams)]


def counts(shapes: Iterable[Shape]) -> dict[str, dict[str, int]]:
    """Shapes per category (cumulative) and family: {category: {family: n, 'total': n}}."""
    shapes = list(shapes)
    out: dict[str, dict[str, int]] = {}
    for cat in CATEGORIES:
        row: dict[str, int] = {}
        for s in select(shapes, cat):
            row[s.family] = row.get(s.family, 0) + 1
        row["total"] = sum(row.values())
        out[cat] = row
    return out


__all__ = [
    "CATEGORIES",
    "MAX_SHAPES_PER_ENTRY",
    "MAX_SHAPES_PER_FILE",
    "MatrixError",
    "Shape",
    "counts",
    "default_matrix_dir",
    "load_matrices",
    "load_matrix_file",
    "matrix_files",
    "parse_matrix",
    "select",
]
