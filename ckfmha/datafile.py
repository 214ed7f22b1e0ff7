"""Strict loaders for ckfmha's YAML and JSON data files (testing matrices, sweep configs, parity sets).

:func:`load_yaml` / :func:`load_json` (and :func:`parse_yaml` / :func:`parse_json` for text already read) return the
document, or raise a :class:`DataFileError` (a ``ValueError``) whose message starts with the file name:

* a missing file (:class:`MissingDataFileError`) or one that cannot be read;
* a file larger than :data:`MAX_FILE_BYTES` (16 MiB; never read past the limit);
* :func:`read_lines` (a file read one line at a time, of any size: a run report in its line layout,
  ckfmha.runreport): a line longer than :data:`MAX_LINE_BYTES` (1 MiB; never read past the limit), bytes that
  are not UTF-8 (line and byte offset);
* bytes that are not UTF-8: the byte offset (and line) of the first bad byte;
* malformed syntax: ``malformed YAML: ...`` / ``malformed JSON at line L column C: ...``;
* collections nested deeper than :data:`MAX_NESTING_DEPTH` (:class:`NestingError`), found *before* the document
  is built, so a 100,000-deep list is this error and never a ``RecursionError``;
* a key written twice in one mapping / object (:class:`DuplicateKeyError`), with the key path of the mapping
  (``entries[2].product``; ``top level`` for the root) and, for YAML, both lines -- PyYAML and ``json`` would
  silently keep the last value;
* JSON's non-standard constants ``NaN`` / ``Infinity`` / ``-Infinity``.

:func:`check_schema` validates a loaded document against one of the JSON Schemas in ``ckfmha/data/schemas/``
(``<name>.schema.yaml``, Draft 2020-12, through the ``jsonschema`` library) and raises a :class:`SchemaError`
naming the file, the key path, the value and the rule (the failing keyword, plus the schema's ``description`` of
that part when it has one).  A NaN or infinity anywhere in the document is such an error too (before the schema:
JSON Schema's ``minimum`` would let NaN through).  Mapping keys are compared as strings (YAML's ``0:`` keys become ``"0"``).
A document that certainly follows its schema is accepted without importing ``jsonschema`` (a quick reading of the
keywords ckfmha's schemas use: ``type``, ``enum``, ``const``, bounds, ``minLength``/``maxLength``, ``pattern``,
``required``, ``properties``, ``additionalProperties``, ``propertyNames``, ``items``, ``uniqueItems``, ``$ref``,
``oneOf``/``anyOf``/``allOf``, ``if``/``then``/``else``); in every other case ``jsonschema`` decides, so the outcome and the errors are its.

Checked documents are cached, in the manner of Python's bytecode cache: :func:`load_checked_yaml` (a file read with
:func:`load_yaml` and checked with :func:`check_schema`, what ckfmha's arch files and receipt rules need at every
start) keeps each document that its schema certainly accepts (the quick reading above said so, without
``jsonschema``) in ``__pycache__/<file name>.<schema>.<cache tag>.checked`` next to the file (or under
``sys.pycache_prefix``), marshalled behind a SHA-256 key of the file's text, the schema file's text, this module's
source, PyYAML's version and loader, and the interpreter's cache tag.  A later read whose key matches takes the
document from there; any other read parses and checks the file again.  So the result is the same document or the
same error as without the cache: a cache entry exists only for content that was checked and passed, and any change
to the file, its schema or the checking code makes the key differ.  Like bytecode, nothing is written where
``sys.dont_write_bytecode`` is set (``PYTHONDONTWRITEBYTECODE``), and a folder that cannot be written is no error.

YAML is read with PyYAML's safe loader (``yaml.CSafeLoader`` when PyYAML has libyaml, else ``yaml.SafeLoader``),
subclassed as :class:`StrictYAMLLoader` with a duplicate-checking ``construct_mapping``.  A YAML merge key
(``<<: *base``) keeps its meaning: a key written next to it overrides the merged one and is not a duplicate.
Callers (:mod:`ckfmha.matrix`, :mod:`ckfmha.sweep`, :func:`ckfmha.parity.load_parity_set`) wrap these errors into
their own error classes.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from yaml.events import CollectionEndEvent, CollectionStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_FILE_BYTES = 16 * 1024 * 1024
"""The largest data file read whole (bytes); a file read line by line (:func:`read_lines`) has no size limit."""
MAX_LINE_BYTES = 1024 * 1024
"""The longest line :func:`read_lines` reads (bytes, without the newline): a streamed file's memory bound."""
MAX_NESTING_DEPTH = 64
"""The deepest nesting of lists / mappings a data file may have (ckfmha's own files need fewer than 10)."""

_MERGE_TAG = "tag:yaml.org,2002:merge"

#: PyYAML's safe loader that every data file is read with: ``yaml.CSafeLoader`` when PyYAML has libyaml, else
#: ``yaml.SafeLoader`` (the base of :class:`StrictYAMLLoader`; the nesting check reads its event stream).
try:
    from yaml import CSafeLoader as SafeLoader
except ImportError:  # pragma: no cover - PyYAML without libyaml
    # mypy types SafeLoader as the first import; the pure-Python loader has the same API
    from yaml import SafeLoader  # type: ignore[assignment]


class DataFileError(ValueError):
    """A data file that cannot be used; the message names the file (and the key path / line when known)."""


class MissingDataFileError(DataFileError):
    """The file does not exist."""


class NestingError(DataFileError):
    """Collections nested deeper than :data:`MAX_NESTING_DEPTH`."""


class DuplicateKeyError(DataFileError):
    """A key written twice in one mapping / object."""


class SchemaError(DataFileError):
    """A document that does not follow its schema."""


def key_path(parts: Iterable[str | int]) -> str:
    """``("entries", 2, "product")`` -> ``entries[2].product``; ``()`` -> ``top level``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "top level"


# ---------------------------------------------------------------------------------------------- reading
def read_text(path: str | Path, unlimited: bool = False) -> str:
    """The file's text: at most :data:`MAX_FILE_BYTES` (``unlimited``: any size, for a one-time conversion
    only), strictly UTF-8."""
    p = Path(path)
    limit = None if unlimited else MAX_FILE_BYTES
    try:
        with open(p, "rb") as fh:
            data = fh.read() if limit is None else fh.read(limit + 1)
    except FileNotFoundError:
        raise MissingDataFileError(f"{p}: no such file") from None
    except OSError as e:
        raise DataFileError(f"{p}: cannot be read ({e.strerror or e})") from None
    if limit is not None and len(data) > limit:
        raise DataFileError(f"{p}: larger than MAX_FILE_BYTES = {limit} bytes (16 MiB); a data file must be smaller")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataFileError(
            f"{p}: not UTF-8: byte {data[e.start]:#04x} at byte offset {e.start} (line {line}) is {e.reason}"
        ) from None


def read_lines(path: str | Path, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str]]:
    """The file's lines as ``(line number, text without its newline)``, one at a time (a file of any size in
    bounded memory): each line at most ``max_line_bytes`` (:data:`MAX_LINE_BYTES`), strictly UTF-8 (the last line
    may lack its newline: whether the file is complete is for the caller's format to say)."""
    p = Path(path)
    try:
        fh = open(p, "rb")
    except FileNotFoundError:
        raise MissingDataFileError(f"{p}: no such file") from None
    except OSError as e:
        raise DataFileError(f"{p}: cannot be read ({e.strerror or e})") from None
    with fh:
        number, offset = 0, 0
        while True:
            try:
                data = fh.readline(max_line_bytes + 2)
            except OSError as e:
                raise DataFileError(f"{p}: line {number + 1}: cannot be read ({e.strerror or e})") from None
            if not data:
                return
            number += 1
            body = data[:-2] if data.endswith(b"\r\n") else data[:-1] if data.endswith(b"\n") else data
            if len(body) > max_line_bytes:
                raise DataFileError(
                    f"{p}: line {number}: longer than MAX_LINE_BYTES = {max_line_bytes} bytes; a line of a "
                    "streamed file must be shorter"
                )
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataFileError(
                    f"{p}: not UTF-8: byte {body[e.start]:#04x} at byte offset {offset + e.start} (line {number}) "
                    f"is {e.reason}"
                ) from None
            yield number, text
            offset += len(data)


# ---------------------------------------------------------------------------------------------- YAML
class StrictYAMLLoader(SafeLoader):
    """PyYAML's safe loader that rejects a key written twice in one mapping (:class:`DuplicateKeyError`)."""

    source = "<yaml>"

    def construct_document(self, node: Node) -> Any:
        self._root = node
        # Each mapping's pairs as written, for the mappings a merge key rewrites (flatten_mapping, below).
        self._written: dict[int, list] = {}
        return super().construct_document(node)

    def flatten_mapping(self, node: MappingNode) -> None:
        # PyYAML applies merge keys by rewriting node.value in place, here and only here: keep the pairs as written
        # first (a key next to ``<<`` overrides the merged one; two written keys are duplicates)
        if id(node) not in self._written:
            self._written[id(node)] = list(node.value)
        super().flatten_mapping(node)

    def _key_path_of(self, target: Node) -> tuple:
        """Where ``target`` is in the document (the first path in document order; for messages only)."""
        seen: set[int] = set()
        stack: list[tuple[Node, tuple]] = [(self._root, ())]
        while stack:
            n, path = stack.pop()
            if n is target:
                return path
            if id(n) in seen:
                continue  # an alias of a node already seen
            seen.add(id(n))
            if isinstance(n, MappingNode):
                pairs: list = self._written.get(id(n)) or list(n.value)
                for k, v in reversed(pairs):
                    stack.append((v, path + (k.value if isinstance(k, ScalarNode) else "<key>",)))
            elif isinstance(n, SequenceNode):
                stack.extend((v, path + (i,)) for i, v in reversed(list(enumerate(n.value))))
        return ()

    def construct_mapping(self, node: Node, deep: bool = False) -> dict:
        if isinstance(node, MappingNode):
            first: dict[Any, Node] = {}
            written = self._written.get(id(node))
            for key_node, _ in written if written is not None else node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    earlier = first.get(key)
                except TypeError:
                    continue  # an unhashable key: the base class reports it
                if earlier is not None:
                    where = key_path(self._key_path_of(node))
                    raise DuplicateKeyError(
                        f"{self.source}: {where}: duplicate key {key!r} at line {key_node.start_mark.line + 1} "
                        f"(first at line {earlier.start_mark.line + 1})"
                    )
                first[key] = key_node
        # PyYAML's stub types the node as MappingNode, but the base class takes any node and rejects a non-mapping
        # one (e.g. ``!!map`` on a scalar) with its own ConstructorError
        return super().construct_mapping(node, deep=deep)  # type: ignore[arg-type]


def _check_yaml_depth(text: str, source: str) -> None:
    """Nesting depth from the event stream (flat: libyaml's parser keeps its own stack, nothing recurses)."""

    def too_deep(line: int | None) -> NestingError:
        where = f"line {line + 1}: " if line is not None else ""  # None: the event carries no position
        return NestingError(
            f"{source}: {where}nested deeper than MAX_NESTING_DEPTH = {MAX_NESTING_DEPTH} levels of lists/mappings"
        )

    loader = SafeLoader(text)
    try:
        depth = 0
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, CollectionStartEvent):
                depth += 1
                if depth > MAX_NESTING_DEPTH:
                    raise too_deep(event.start_mark.line if event.start_mark is not None else None)
            elif isinstance(event, CollectionEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as e:
        # libyaml's scanner reads a flow collection ahead and may stop at its own limit (1000 levels in some
        # builds) before the events above reach ours: the same rule, so the same error.
        if "nesting depth" in str(e.problem or ""):
            raise too_deep(e.problem_mark.line if e.problem_mark is not None else 0) from None
        raise
    finally:
        loader.dispose()


@contextmanager
def _load_errors(source: str, malformed: type[Exception], describe: Callable[[Any], str]) -> Iterator[None]:
    """The errors of loading one document, YAML or JSON (module doc): ours pass through; the format's own
    ``malformed`` error is ``describe(e)``; a nesting past the interpreter's stack and an unreadable value become
    ours."""
    try:
        yield
    except DataFileError:
        raise
    except malformed as e:
        raise DataFileError(f"{source}: {describe(e)}") from None
    except RecursionError:  # pragma: no cover - prevented by the depth checks
        raise NestingError(f"{source}: nested too deeply to load") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise DataFileError(f"{source}: unreadable value: {e}") from None


def parse_yaml(text: str, source: str = "<yaml>") -> Any:
    """One YAML document from text (see the module doc for the errors)."""
    with _load_errors(source, yaml.YAMLError, lambda e: f"malformed YAML: {e}"):
        _check_yaml_depth(text, source)
        loader = StrictYAMLLoader(text)
        loader.source = source
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()


def load_yaml(path: str | Path) -> Any:
    """One YAML document from a file (see the module doc for the errors)."""
    return parse_yaml(read_text(path), str(path))


# ---------------------------------------------------------------------------------------------- JSON
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


def _check_json_depth(text: str, source: str) -> None:
    """Nesting depth of ``[``/``{`` outside strings, found without parsing (``json`` recurses per level)."""
    if text.count("[") + text.count("{") <= MAX_NESTING_DEPTH:
        return
    import numpy as np  # here only: a deep-looking JSON text is rare, and NumPy is heavy to import

    blanked = _JSON_STRING.sub(lambda m: " " * len(m.group()), text)  # same offsets, no brackets in strings
    codes = np.frombuffer(blanked.encode("ascii", "replace"), dtype=np.uint8)
    step = np.isin(codes, (ord("["), ord("{"))).astype(np.int32) - np.isin(codes, (ord("]"), ord("}")))
    depth = np.cumsum(step)
    if depth.size and int(depth.max()) > MAX_NESTING_DEPTH:
        offset = int(np.argmax(depth > MAX_NESTING_DEPTH))
        raise NestingError(
            f"{source}: line {text.count(chr(10), 0, offset) + 1}: nested deeper than "
            f"MAX_NESTING_DEPTH = {MAX_NESTING_DEPTH} levels of arrays/objects"
        )


class _Duplicate:
    """Stands in for an object with a repeated key until its key path is known."""

    def __init__(self, key: str) -> None:
        self.key = key


def _find_duplicate(doc: Any) -> tuple[tuple, _Duplicate] | None:
    stack: list[tuple[Any, tuple]] = [(doc, ())]
    while stack:
        v, path = stack.pop()
        if isinstance(v, _Duplicate):
            return path, v
        if isinstance(v, dict):
            stack.extend((x, path + (k,)) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((x, path + (i,)) for i, x in reversed(list(enumerate(v))))
    return None  # pragma: no cover - only called when a duplicate was seen


def parse_json(text: str, source: str = "<json>") -> Any:
    """One JSON document from text (see the module doc for the errors)."""
    _check_json_depth(text, source)
    seen_duplicate = False

    def pairs_hook(pairs: list[tuple[str, Any]]) -> Any:
        nonlocal seen_duplicate
        out = dict(pairs)
        if len(out) == len(pairs):
            return out
        seen: set[str] = set()
        for k, _ in pairs:  # pragma: no branch - a key is repeated
            if k in seen:
                seen_duplicate = True
                return _Duplicate(k)
            seen.add(k)
        return out  # pragma: no cover

    def reject_constant(name: str) -> Any:
        raise DataFileError(f"{source}: {name} is not JSON (non-standard constant)")

    def malformed(e: json.JSONDecodeError) -> str:
        return f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}"

    with _load_errors(source, json.JSONDecodeError, malformed):
        doc = json.loads(text, object_pairs_hook=pairs_hook, parse_constant=reject_constant)
    if seen_duplicate:
        found = _find_duplicate(doc)
        if found is not None:
            path, dup = found
            raise DuplicateKeyError(f"{source}: {key_path(path)}: duplicate key {dup.key!r}")
    return doc


def load_json(path: str | Path) -> Any:
    """One JSON document from a file (see the module doc for the errors)."""
    return parse_json(read_text(path), str(path))


__all__ = [
    "MAX_FILE_BYTES",
    "MAX_LINE_BYTES",
    "MAX_NESTING_DEPTH",
    "DataFileError",
    "DuplicateKeyError",
    "MissingDataFileError",
    "SchemaError",
    "check_schema",
    "schema_validator",
    "NestingError",
    "SafeLoader",
    "StrictYAMLLoader",
    "key_path",
    "load_checked_yaml",
    "load_json",
    "load_yaml",
    "parse_json",
    "parse_yaml",
    "read_lines",
    "read_text",
]


def _json_view(doc: Any) -> Any:
    """The document as JSON sees it: mapping keys as strings, tuples as lists (a flat mapping with string keys, a
    report row as JSON gives it, is its own view)."""
    if type(doc) is dict and all(type(k) is str for k in doc) and not any(type(v) in _NESTED for v in doc.values()):
        return doc
    if isinstance(doc, dict):
        return {str(k): _json_view(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [_json_view(v) for v in doc]
    return doc


def _first_non_finite(doc: Any, where: tuple) -> tuple[tuple, float] | None:
    """The key path and value of the first NaN / infinity in ``doc`` (YAML's ``.nan`` / ``.inf``): no data file
    of ckfmha holds one, and JSON Schema's ``minimum`` lets NaN through (every comparison with it is false)."""
    if isinstance(doc, float) and not math.isfinite(doc):
        return where, doc
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, (list, tuple)) else ()
    for k, v in items:
        if type(v) in _SCALARS:  # most values: no call
            continue
        found = _first_non_finite(v, (*where, k))
        if found is not None:
            return found
    return None


_NESTED = (dict, list, tuple)
_SCALARS = (str, int, bool, type(None))


# ---------------------------------------------------------------------------------------------- schemas
_SCHEMAS: dict[str, Any] = {}
_VALIDATORS: dict[str, Any] = {}


def _schema_path(name: str) -> Path:
    """``ckfmha/data/schemas/<name>.schema.yaml`` (the package's own folder, as :func:`ckfmha.archs.data_dir`)."""
    return Path(__file__).resolve().parent / "data" / "schemas" / f"{name}.schema.yaml"


def _schema_doc(name: str) -> Any:
    """The schema document ``ckfmha/data/schemas/<name>.schema.yaml`` (read once)."""
    schema = _SCHEMAS.get(name)
    if schema is None:
        schema = _SCHEMAS[name] = load_yaml(_schema_path(name))
    return schema


# A quick verdict on a document before jsonschema is asked (importing jsonschema and building a validator cost more
# than reading ckfmha's data files): True when the document certainly follows the schema, False when it certainly
# does not, None when unsure (a keyword or a value this reader does not settle).  Only a True skips jsonschema, which
# otherwise decides and words the error, so the outcome is jsonschema's in every case.
_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "$comment", "title", "description", "default", "examples"})
_TYPE_OF = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}


def _type_verdict(names: Any, doc: Any, schema: dict, root: dict) -> bool | None:
    kinds = [names] if isinstance(names, str) else list(names)
    t = type(doc)
    if t is int:
        return "integer" in kinds or "number" in kinds
    if t is float:
        return True if "number" in kinds else None if "integer" in kinds else False  # 3.0 is an integer to JSON
    return _TYPE_OF.get(t) in kinds if t in _TYPE_OF else None


def _json_equal(a: Any, b: Any) -> bool | None:
    """JSON equality of scalars (``1 == 1.0``, ``true != 1``); None for containers."""
    scalar = (str, int, float, bool, type(None))
    if not isinstance(a, scalar) or not isinstance(b, scalar):
        return None
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None or isinstance(a, str):
        return type(a) is type(b) and a == b
    return not isinstance(b, str) and a == b


def _enum_verdict(values: Any, doc: Any, schema: dict, root: dict) -> bool | None:
    found = [_json_equal(v, doc) for v in values]
    return True if True in found else None if None in found else False


def _is_number(x: Any) -> bool:
    return type(x) in (int, float)


def _all(verdicts: Any) -> bool | None:
    """The conjunction of verdicts: False wins, then None."""
    out: bool | None = True
    for v in verdicts:
        if v is False:
            return False
        if v is None:
            out = None
    return out


def _extra_keys_verdict(arg: Any, doc: Any, schema: dict, root: dict) -> bool | None:
    if type(doc) is not dict:
        return True
    if "patternProperties" in schema:
        return None
    extra = [k for k in doc if k not in schema.get("properties", {})]
    return _all(_verdict(arg, doc[k], root) for k in extra)


def _ref_verdict(ref: Any, doc: Any, schema: dict, root: dict) -> bool | None:
    prefix = "#/$defs/"
    if not isinstance(ref, str) or not ref.startswith(prefix) or ref[len(prefix) :] not in root.get("$defs", {}):
        return None
    return _verdict(root["$defs"][ref[len(prefix) :]], doc, root)


def _one_of_verdict(subs: Any, doc: Any, schema: dict, root: dict) -> bool | None:
    found = [_verdict(sub, doc, root) for sub in subs]
    return None if None in found else found.count(True) == 1


def _if_verdict(cond: Any, doc: Any, schema: dict, root: dict) -> bool | None:
    holds = _verdict(cond, doc, root)
    if holds is None:
        return None
    branch = schema.get("then" if holds else "else", True)
    return _verdict(branch, doc, root)


_KEYWORDS: dict[str, Any] = {
    "type": _type_verdict,
    "enum": _enum_verdict,
    "const": lambda arg, doc, schema, root: _enum_verdict([arg], doc, schema, root),
    "minimum": lambda arg, doc, schema, root: not _is_number(doc) or doc >= arg,
    "maximum": lambda arg, doc, schema, root: not _is_number(doc) or doc <= arg,
    "minItems": lambda arg, doc, schema, root: type(doc) is not list or len(doc) >= arg,
    "maxItems": lambda arg, doc, schema, root: type(doc) is not list or len(doc) <= arg,
    "minProperties": lambda arg, doc, schema, root: type(doc) is not dict or len(doc) >= arg,
    "pattern": lambda arg, doc, schema, root: type(doc) is not str or re.search(arg, doc) is not None,
    "minLength": lambda arg, doc, schema, root: type(doc) is not str or len(doc) >= arg,
    "maxLength": lambda arg, doc, schema, root: type(doc) is not str or len(doc) <= arg,
    "required": lambda arg, doc, schema, root: type(doc) is not dict or all(k in doc for k in arg),
    "properties": lambda arg, doc, schema, root: (
        type(doc) is not dict or _all(_verdict(sub, doc[k], root) for k, sub in arg.items() if k in doc)
    ),
    "additionalProperties": _extra_keys_verdict,
    "propertyNames": lambda arg, doc, schema, root: type(doc) is not dict or _all(_verdict(arg, k, root) for k in doc),
    "items": lambda arg, doc, schema, root: (
        type(doc) is not list
        or (
            _all(_verdict(arg, x, root) for x in doc) if "prefixItems" not in schema and isinstance(arg, dict) else None
        )
    ),
    "uniqueItems": lambda arg, doc, schema, root: (
        type(doc) is not list or not arg or (len(set(doc)) == len(doc) if all(type(x) is str for x in doc) else None)
    ),
    "$ref": _ref_verdict,
    "oneOf": _one_of_verdict,
    "anyOf": lambda arg, doc, schema, root: _any([_verdict(sub, doc, root) for sub in arg]),
    "allOf": lambda arg, doc, schema, root: _all(_verdict(sub, doc, root) for sub in arg),
    "if": _if_verdict,
    "then": lambda arg, doc, schema, root: True,  # read by "if"
    "else": lambda arg, doc, schema, root: True,
}


def _any(found: list[bool | None]) -> bool | None:
    return True if True in found else None if None in found else False


def _verdict(schema: Any, doc: Any, root: dict) -> bool | None:
    """Does ``doc`` (a JSON view: str keys, lists) follow ``schema``? True, False or None (unsure); see above."""
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, dict):
        return None
    out: bool | None = True
    for kw, arg in schema.items():
        if kw in _ANNOTATIONS:
            continue
        check = _KEYWORDS.get(kw)
        v = None if check is None else check(arg, doc, schema, root)
        if v is False:
            return False
        if v is None:
            out = None
    return out


def schema_validator(name: str) -> Any:
    """The jsonschema validator of ``ckfmha/data/schemas/<name>.schema.yaml`` (loaded once)."""
    v = _VALIDATORS.get(name)
    if v is None:
        import jsonschema

        schema = _schema_doc(name)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        v = _VALIDATORS[name] = cls(schema)
    return v


_TYPE_WORDS = {
    "object": "an object (a mapping)",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


_BOUND_WORDS = {
    "minimum": "a value >=",
    "exclusiveMinimum": "a value >",
    "maximum": "a value <=",
    "exclusiveMaximum": "a value <",
    "minItems": "at least this many items:",
    "maxItems": "at most this many items:",
    "minProperties": "at least this many keys:",
    "minLength": "at least this many characters:",
}


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _rule_words(error: Any) -> str:
    """The failing keyword in ckfmha's words ("expected ..., found ..."), with the schema's own description of that
    part when it has one."""
    kw, arg, found = error.validator, error.validator_value, error.instance
    if kw == "const":
        words = f"expected {arg!r}, found {_short(found)}"
    elif kw == "enum":
        words = f"expected one of {', '.join(map(repr, arg))}, found {_short(found)}"
    elif kw == "type":
        kinds = [arg] if isinstance(arg, str) else list(arg)
        words = f"expected {' or '.join(_TYPE_WORDS.get(k, k) for k in kinds)}, found {_short(found)}"
    elif kw == "required":
        missing = [k for k in arg if isinstance(found, dict) and k not in found]
        words = f"missing key(s) {', '.join(map(repr, missing))}"
    elif kw == "additionalProperties" and isinstance(found, dict):
        known = set(error.schema.get("properties") or {})
        import difflib

        unknown = sorted(k for k in found if k not in known)
        hints = [
            f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, known, n=1)) else repr(k)
            for k in unknown
        ]
        words = f"unknown key(s) {', '.join(hints)}" + (f"; known: {', '.join(sorted(known))}" if known else "")
    elif kw in _BOUND_WORDS:
        words = f"expected {_BOUND_WORDS[kw]} {arg!r}, found {_short(found)}"
    elif kw == "pattern":  # the schema's description says the rule in words; the regex only where it has none
        has_words = isinstance(error.schema, dict) and error.schema.get("description")
        words = f"found {_short(found)}" if has_words else f"found {_short(found)}, not matching {arg!r}"
    else:
        words = f"{error.message}"
    desc = error.schema.get("description") if isinstance(error.schema, dict) else None
    return words + (f" (rule: {desc})" if desc else "")


def _definition_validator(name: str, definition: str) -> Any:
    """The jsonschema validator of one ``$defs`` entry of schema ``name`` (loaded once)."""
    key = f"{name}#/$defs/{definition}"
    v = _VALIDATORS.get(key)
    if v is None:
        root = schema_validator(name).schema
        sub = {"$defs": root.get("$defs", {}), "$ref": f"#/$defs/{definition}"}
        if "$schema" in root:
            sub["$schema"] = root["$schema"]
        v = _VALIDATORS[key] = type(schema_validator(name))(sub)
    return v


def check_schema(
    doc: Any, name: str, source: str, definition: str | None = None, at: tuple[str | int, ...] = ()
) -> None:
    """Raise :class:`SchemaError` when ``doc`` does not follow schema ``name`` (see the module doc).  With
    ``definition``, ``doc`` is one part of such a document, checked against the schema's ``$defs/<definition>``
    (a run report's row, read one at a time); ``at`` is its key path in the whole document (``("rows", 7)``),
    which the error names."""
    if not _certainly_follows(doc, name, source, definition, at):
        _check_with_jsonschema(doc, name, source, definition, at)


def _certainly_follows(
    doc: Any, name: str, source: str, definition: str | None = None, at: tuple[str | int, ...] = ()
) -> bool:
    """True when ``doc`` certainly follows schema ``name`` (the quick reading, :func:`_verdict`); False when
    ``jsonschema`` must decide.  A NaN or infinity is a :class:`SchemaError` here already."""
    bad = _first_non_finite(doc, at)
    if bad is not None:
        bad_path, value = bad
        raise SchemaError(f"{source}: {key_path(bad_path)}: expected a finite number, found {value!r}")
    root = _schema_doc(name)
    schema = root if definition is None else root["$defs"][definition]
    return _verdict(schema, _json_view(doc), root) is True


def _check_with_jsonschema(
    doc: Any, name: str, source: str, definition: str | None = None, at: tuple[str | int, ...] = ()
) -> None:
    """:func:`check_schema`'s verdict where the quick reading was unsure: ``jsonschema``'s, in ckfmha's words."""
    import jsonschema

    validator = schema_validator(name) if definition is None else _definition_validator(name, definition)
    errors = list(validator.iter_errors(_json_view(doc)))
    if not errors:
        return
    best = jsonschema.exceptions.best_match(errors)
    where = key_path((*at, *best.absolute_path))
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    raise SchemaError(f"{source}: {where}: {_rule_words(best)}{more}")


# ---------------------------------------------------------------------------------------------- checked-document cache
_CACHE_MAGIC = b"ckfmha checked document\n"
_DIGESTS: dict[str, bytes] = {}


def load_checked_yaml(path: str | Path, schema: str) -> Any:
    """``load_yaml(path)`` checked with ``check_schema(doc, schema, str(path))``: the same document or the same error,
    taken from the cache of checked documents when this content passed this check before (see the module doc)."""
    source = str(path)
    text = read_text(path)
    key = _cache_key(text, schema)
    entry = _cache_entry(Path(path), schema)
    if key is not None:
        try:
            blob = entry.read_bytes()
            if blob.startswith(_CACHE_MAGIC + key):
                return marshal.loads(blob[len(_CACHE_MAGIC) + len(key) :])
        except (OSError, ValueError, EOFError, TypeError):
            pass  # no entry, or an unreadable one: read the file
    doc = parse_yaml(text, source)
    if not _certainly_follows(doc, schema, source):
        _check_with_jsonschema(doc, schema, source)  # raises, or jsonschema accepts: not cached (its version may vary)
    elif key is not None and not sys.dont_write_bytecode:
        _write_cache_entry(entry, _CACHE_MAGIC + key, doc)
    return doc


def _cache_key(text: str, schema: str) -> bytes | None:
    """The SHA-256 key of a checked document (see the module doc); None where a part cannot be read."""
    try:
        checker = _DIGESTS.get("")
        if checker is None:
            loader = f"{yaml.__version__} {SafeLoader.__module__}.{SafeLoader.__name__} {sys.implementation.cache_tag}"
            checker = _DIGESTS[""] = hashlib.sha256(Path(__file__).read_bytes() + loader.encode()).digest()
        schema_digest = _DIGESTS.get(schema)
        if schema_digest is None:
            schema_digest = _DIGESTS[schema] = hashlib.sha256(_schema_path(schema).read_bytes()).digest()
    except OSError:
        return None
    return hashlib.sha256(checker + schema_digest + schema.encode() + b"\0" + text.encode()).digest()


def _cache_entry(path: Path, schema: str) -> Path:
    """Where the checked document of ``path`` lives: ``__pycache__`` next to it, or the same folder under
    ``sys.pycache_prefix`` (as bytecode does)."""
    name = f"{path.name}.{schema}.{sys.implementation.cache_tag}.checked"
    folder = path.resolve().parent
    if sys.pycache_prefix:
        return Path(sys.pycache_prefix, os.path.splitdrive(folder)[1].lstrip(os.sep), name)
    return folder / "__pycache__" / name


def _write_cache_entry(entry: Path, header: bytes, doc: Any) -> None:
    """Write ``header`` + the marshalled document atomically; a document marshal cannot hold (a YAML timestamp) or a
    folder that cannot be written leaves no entry."""
    try:
        blob = header + marshal.dumps(doc)
    except ValueError:
        return
    tmp = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(blob)
        os.replace(tmp, entry)
    except OSError:
        tmp.unlink(missing_ok=True)
