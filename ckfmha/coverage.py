"""Feature coverage of a run: which kernel features and code paths the items (or compat calls) of a run exercised.

A *derived view* of a run report (docs/report_schema.md, "Derived views"): computed from the rows when it is
shown, never stored in the report, so every report -- old ones, merged shards, resumed runs -- has it.  Shown by
``ckfmha coverage`` (:mod:`ckfmha.cli_coverage`, its "problem features" table) and by the HTML page
(:mod:`ckfmha.htmlreport`, its "Feature coverage" section).

| function | what |
|---|---|
| :func:`features_of_row` | one run-report row -> the names of the features it exercised |
| :func:`features_of_call` | one compat kernel-log call (:mod:`ckfmha.compat.calllog`) -> the same (its lengths read \
from the call's problem in CK's syntax) |
| :func:`row_features` | the rows of a run -> a Counter: per feature, the rows that ran and exercised it |
| :func:`feature_table` | such a Counter -> rows ``{feature, meaning, count}``: every feature of \
:data:`PROBLEM_FEATURES` in its order (``count`` 0 = never reached), then the GQA ratios seen |

Only rows that ran count (a verdict other than :data:`NOT_RAN`).  Every feature is read from the row's problem
columns and its plan's kernels, so it says what the *problem* asked for: ``split_kv_num_splits_gt_1`` is a row
whose plan runs a split-KV kernel with the problem's ``num_splits`` above 1 (a compat call: its split-KV stage's
``num_splits``).  The tile-edge features use 64, the smallest M/N tile of CK's FMHA kernels: a length that is not
a multiple of 64 ends in a partial tile whatever tile size the kernel uses.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

#: verdicts of rows that did not run (they exercise nothing)
NOT_RAN = ("skipped", "not_run")
#: the smallest M/N tile length of CK's FMHA kernels (a length not a multiple of it ends in a partial tile)
TILE_EDGE = 64
#: the prefix of the dynamic GQA-ratio features (``gqa_ratio_4`` = nhead_q / nhead_k = 4)
GQA_RATIO = "gqa_ratio_"

#: problem features, in table order: (name, what it means)
PROBLEM_FEATURES = (
    ("split_kv_num_splits_gt_1", "split-KV with num_splits > 1"),
    ("split_kv_one_split", "split-KV with one split (FA's KV-cache path)"),
    ("paged_kv", "paged KV (block table)"),
    ("paged_kv_partial_last_page", "paged KV whose last page is partial (a K length not a multiple of the page)"),
    ("padding", "padding: ragged group-mode lengths or per-batch effective lengths"),
    ("group_mode", "group (varlen) mode"),
    ("dropout", "dropout"),
    ("deterministic_bwd", "deterministic backward"),
    ("bwd", "backward"),
    ("gqa", "GQA / MQA (nhead_q != nhead_k)"),
    ("mask_causal", "causal mask"),
    ("mask_causal_tile_edge", f"causal mask with a length not a multiple of {TILE_EDGE} (a partial edge tile)"),
    ("mask_window", "sliding-window mask"),
    ("mask_window_tile_edge", f"sliding-window mask with a length not a multiple of {TILE_EDGE}"),
    ("mask_none", "no mask"),
    ("seqlen_0", "a sequence of length 0 (query or key)"),
    ("seqlen_1", "a sequence of length 1 (query or key)"),
    ("alibi", "ALiBi"),
    ("appendkv", "append-KV (new keys)"),
    ("rope", "RoPE"),
    ("cache_batch_idx", "cache_batch_idx"),
)


def mask_kind(mask: str) -> str:
    """``mask_none``, ``mask_causal`` or ``mask_window`` of a mask in CK syntax."""
    from ckfmha.masking import MaskSpec

    spec = MaskSpec.parse(mask or "0")
    if spec.kind.value == "none":
        return "mask_none"
    return "mask_causal" if spec.is_causal else "mask_window"


def features_of_call(call: dict[str, Any]) -> set[str]:
    """The problem features (:data:`PROBLEM_FEATURES`) of one compat call."""
    f = call.get("features", {})
    splits = [s.get("num_splits") for s in call.get("stages", []) if s.get("role") == "splitkv"]
    out = {mask_kind(str(f.get("mask", "0")))}
    if any((n or 0) > 1 for n in splits):
        out.add("split_kv_num_splits_gt_1")
    elif splits:
        out.add("split_kv_one_split")
    flags = ("paged_kv", "padding", "dropout", "gqa", "alibi", "appendkv", "cache_batch_idx")
    out |= {name for name in flags if f.get(name)}
    if f.get("mode") == "group":
        out.add("group_mode")
    if f.get("rope") not in (None, "", "none"):
        out.add("rope")
    if call.get("entry") in ("bwd", "varlen_bwd"):
        out.add("bwd")
        if f.get("deterministic"):
            out.add("deterministic_bwd")
    return out | _shape_features(_call_lengths(call))


#: CK tile_example arguments of a call's ``problem`` -> the row columns :func:`_shape_features` reads
_CK_LENGTH_ARGS = {
    "b": "batch",
    "h": "nhead_q",
    "h_k": "nhead_k",
    "s": "seqlen_q",
    "s_k": "seqlen_k",
    "q_eff_lens": "q_eff_lens",
    "kv_eff_lens": "kv_eff_lens",
    "page_block_size": "page_block_size",
}
#: the same columns in a problem's ``repr`` (``str(Problem)`` falls back to it where CK's syntax cannot say it)
_REPR_LENGTH_FIELDS = re.compile(
    r"\b(batch|nhead_q|nhead_k|seqlen_q|seqlen_k|seqlens_q|seqlens_k|q_eff_lens|kv_eff_lens|page_block_size)="
    r"(\d+|\([\d, ]*\))"
)


def _call_lengths(call: dict[str, Any]) -> dict[str, Any]:
    """The length columns of a compat call as the row columns :func:`_shape_features` reads, from its ``problem``
    (``str(Problem)``: ``family: -key=value ...`` in CK's tile_example syntax, where ``-s`` / ``-s_k`` list the
    per-sequence lengths in group mode, ``-s_k`` defaults to ``-s`` and ``-h_k`` to ``-h``; or the problem's
    ``repr`` where that syntax cannot say it) and the mask of its ``features``; unknown tokens are ignored."""
    text = str(call.get("problem", "")).partition(": ")[2]
    raw: dict[str, str] = {}
    if text.startswith("-"):
        for tok in text.split():
            key, sep, value = tok.lstrip("-").partition("=")
            if sep and key in _CK_LENGTH_ARGS:
                raw[_CK_LENGTH_ARGS[key]] = value
        raw.setdefault("seqlen_k", raw.get("seqlen_q", ""))
        raw.setdefault("nhead_k", raw.get("nhead_q", ""))
    else:
        raw = {m.group(1): m.group(2).strip("()") for m in _REPR_LENGTH_FIELDS.finditer(text)}
    row: dict[str, Any] = {"mask": str(call.get("features", {}).get("mask", "0"))}
    for k, v in raw.items():
        lens = _ints(v)
        row[k] = lens if "," in v else (lens[0] if lens else None)
    return row


def row_kernels(row: dict[str, Any]) -> list[str]:
    """The kernel ids of a row: its ``kernel_id`` and its plan's, each once, in order."""
    ids = [str(row.get("kernel_id") or "")]
    for part in str(row.get("plan_kernels") or "").replace(" -> ", ";").split(";"):
        ids.append(part.strip())
    return list(dict.fromkeys(i for i in ids if i))


def _ints(v: Any) -> list[int]:
    """A length column: an int, a list, or a ``_``-joined list (the CSV form); empty when absent."""
    if isinstance(v, bool) or v in (None, ""):
        return []
    if isinstance(v, int):
        return [v]
    if isinstance(v, (list, tuple)):
        return [x for x in v if isinstance(x, int) and not isinstance(x, bool)]
    if isinstance(v, str):
        return [int(x) for x in v.replace(",", "_").split("_") if x.strip().lstrip("-").isdigit()]
    return []


def _lengths(row: dict[str, Any]) -> tuple[list[int], list[int]]:
    """The query and key lengths of a row (the per-sequence ones in group mode, the effective ones if given)."""
    q = _ints(row.get("seqlens_q")) or _ints(row.get("q_eff_lens")) or _ints(row.get("seqlen_q"))
    k = _ints(row.get("seqlens_k")) or _ints(row.get("kv_eff_lens")) or _ints(row.get("seqlen_k"))
    return q, k


def _shape_features(row: dict[str, Any]) -> set[str]:
    """The length-dependent features: partial last pages, tile edges under a mask, lengths 0 and 1, GQA ratio."""
    out: set[str] = set()
    q, k = _lengths(row)
    page = int(row.get("page_block_size") or 0)
    if page and any(n % page for n in k):
        out.add("paged_kv_partial_last_page")
    kind = mask_kind(str(row.get("mask", "0")))
    if kind != "mask_none" and any(n % TILE_EDGE for n in q + k):
        out.add(kind + "_tile_edge")
    if 0 in q + k:
        out.add("seqlen_0")
    if 1 in q + k:
        out.add("seqlen_1")
    hq, hk = (_ints(row.get("nhead_q")) or [0])[0], (_ints(row.get("nhead_k")) or [0])[0]
    if hq > 0 and hk > 0 and hq != hk:
        out.add(GQA_RATIO + (str(hq // hk) if hq % hk == 0 else f"{hq}:{hk}"))
    return out


def features_of_row(row: dict[str, Any]) -> set[str]:
    """The problem features of one run-report row (its problem columns) and the splits of its plan."""
    fam = str(row.get("family", ""))
    out = {mask_kind(str(row.get("mask", "0")))} | _shape_features(row)
    splits = int(row.get("num_splits") or 1)
    has_split = any(k.startswith("fwd_splitkv.") for k in row_kernels(row))
    if has_split or fam == "fwd_splitkv":
        out.add("split_kv_num_splits_gt_1" if splits > 1 else "split_kv_one_split")
    if row.get("page_block_size"):
        out.add("paged_kv")
    if row.get("mode") == "group":
        out.add("group_mode")
        lens = set(_ints(row.get("seqlens_q"))) | set(_ints(row.get("seqlens_k")))
        if len(lens) > 1 or row.get("s_qpad") or row.get("s_kpad"):
            out.add("padding")
    if row.get("q_eff_lens") or row.get("kv_eff_lens"):
        out.add("padding")
    if float(row.get("p_drop") or 0) > 0:
        out.add("dropout")
    if fam in ("bwd", "bwd_dq_dk_dv"):
        out.add("bwd")
        if row.get("deterministic"):
            out.add("deterministic_bwd")
    if row.get("nhead_k") not in (None, "") and row.get("nhead_q") != row.get("nhead_k"):
        out.add("gqa")
    if row.get("bias") == "alibi":
        out.add("alibi")
    if int(row.get("seqlen_knew") or 0) > 0:
        out.add("appendkv")
    if int(row.get("rotary_dim") or 0) > 0:
        out.add("rope")
    if row.get("cache_batch_idx"):
        out.add("cache_batch_idx")
    return out


def row_features(rows: Iterable[dict[str, Any]]) -> tuple[Counter, int]:
    """Per feature, how many rows that ran exercised it; and how many rows ran."""
    counts: Counter = Counter()
    ran = 0
    for row in rows:
        if row.get("verdict") in NOT_RAN:
            continue
        ran += 1
        try:
            counts.update(features_of_row(row))
        except (TypeError, ValueError):  # a hand-edited row the schema allows (a list where a length goes): skip it
            continue
    return counts, ran


def _ratio_key(name: str) -> tuple[float, str]:
    head = name[len(GQA_RATIO) :].split(":")[0]
    return (float(head) if head.isdigit() else float("inf"), name)


def feature_table(counts: Counter) -> list[dict[str, Any]]:
    """Every feature of :data:`PROBLEM_FEATURES` with its count (0 = never reached), then each GQA ratio seen."""
    out = [{"feature": name, "meaning": words, "count": counts[name]} for name, words in PROBLEM_FEATURES]
    ratios = sorted((k for k in counts if str(k).startswith(GQA_RATIO)), key=_ratio_key)
    for name in ratios:
        ratio = name[len(GQA_RATIO) :]
        words = f"GQA ratio nhead_q:nhead_k = {ratio}" if ":" in ratio else f"GQA ratio nhead_q / nhead_k = {ratio}"
        out.append({"feature": name, "meaning": words, "count": counts[name]})
    return out
