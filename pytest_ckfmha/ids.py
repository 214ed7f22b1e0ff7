"""Readable, stable ids.

A shape id names every field of the problem that differs from its default, so two different problems never
share an id and the same problem always gets the same one (no hashes, no sets, no run-dependent values)::

    {family}-{dtype}-{mode}-b{batch}h{nhead_q}[k{nhead_k}]s{seqlen_q}[x{seqlen_k}]d{hdim_q}[x{hdim_v}][-feature...]

Group mode lists the per-sequence lengths (``s1_17_100x1_17_100``).  Features, in this order: mask (``causal``,
``causalbr``, ``win{l}_{r}``, ``winbr{l}_{r}``, ``gmask{y}_{x}``), ``bias``/``alibi`` (+ rank), ``lse``,
``drop{p}`` (+ ``dseed``/``doff``), ``softcap{c}``, ``sink``, ``scale{s}``, ``qs{qscale}``, layouts
(``bshd``/``ibshd``/``obshd``), ``vcol``, ``page{n}``, ``{kv_lookup}``, ``{kv_layout}``, ``cbi``, ``knew{n}``,
``rope{dim}{i|h}``, ``split{n}``, ``minq{n}``, ``det``, ``dbias``, ``qpad{...}``, ``kpad{...}``, ``qeff{...}``,
``kveff{...}`` (the physical and effective lengths: two problems that differ only in them must not share an id).

Numbers are written without a dot (``drop0p2``, ``softcap30``), so no node id holds a ``.``.

A kernel is named by its compact id (:func:`kernel_token`): ``{pipeline}-b{bm0}x{bn0}x{bk0}-{hash}``, the
hash being the first :data:`KERNEL_HASH_LEN` hex digits of the SHA-1 of its full kernel id -- a function of the
kernel id alone, so it is the same in every run, shard and xdist worker, and within a shape two kernels never
share one (the collection checks it).  The full kernel id is the report's ``kernel_id`` and is printed in the
item's failure text and crash reasons (pytest_ckfmha/items.py).

Node ids (:class:`NodeId`, the one place they are rendered and read; xdist's ``loadgroup`` may append
``@<group>``, which :meth:`NodeId.parse` drops):

| item kind | node id | item id (the report's ``id``) | kernel group |
|---|---|---|---|
| kernel item | ``ckfmha::<shape id>::<kernel token>`` | ``<shape id>::<kernel token>`` | its kernel |
| plan item | ``ckfmha::<shape id>::plan`` | ``<shape id>::plan`` | its shape's first (best-ranked) kernel item |
| CK smoke line | ``ckfmha::ck-smoke::<line id>::plan`` | ``<line id>::plan`` | none (a group of its own) |
| CK smoke line, parity mode | ``ckfmha::ck-smoke::<line id>::parity`` | ``<line id>::parity`` | none |
| a line CK refuses | ``ckfmha::ck-smoke::<line id>`` | ``ck-smoke::<line id>`` | none |
| parity item | ``ckfmha-parity::<upstream>::<label>`` | ``<upstream>::<label>`` | none |

E.g. ``ckfmha::fwd-bf16-batch-b2h8k2s128d128-causal::qr_async-b128x128x32-a4399a6e`` and
``ckfmha::fwd-bf16-batch-b2h8k2s128d128-causal::plan``.

| id format | kernel item's last part | read by this version |
|---|---|---|
| 1 (before issue 28) | the full kernel id (``fwd.fp16.batch.d128x128.qr_async.b64x...gfx9.mask=any``) | no: :attr:`NodeId.old_format` names it, and ``--ckfmha-resume`` refuses such a report |
| 2 (:data:`ID_FORMAT`) | the kernel token | yes |

Named on the command line (:meth:`NodeId.parse_argument`), a node id -- or a collector's, ``ckfmha::<shape id>``
-- is read as pytest prints it, also with the ``../`` pytest puts in front when it runs in a subdirectory of the
rootdir; pytest_ckfmha/items.py takes such arguments out of pytest's path arguments and keeps only the items they
name (:meth:`NodeId.covers`).

``-k`` words (:func:`keywords`): besides the parts of the node id, every item matches its family, dtype, mode,
feature tokens, matrix entry name, ``kernel`` or ``plan``, and a kernel item its pipeline
(``-k "fwd and bf16 and causal"``, ``-k "qr_async and not lse"``, ``-k gqa_prefill``; ``-k`` matches substrings,
so ``fwd`` also matches ``fwd_splitkv``).

The kernel group (:meth:`NodeId.group_kernel`) is one rule for the ``xdist_group`` marker (:func:`group_name`) and
ckfmha's own scheduler and shards (:func:`pytest_ckfmha.scheduling.kernel_groups`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.problem import Problem

# this module loads at every pytest start (reporting.py, through the options): ckfmha.problem (and NumPy) are
# imported by the functions that read a Problem


def _num(x: float) -> str:
    """A number without ``.`` (``0.2`` -> ``0p2``, ``30.0`` -> ``30``): node ids hold no dot, so pytest's ``-v``
    (which rewrites a location's dots to ``::``) prints them as they are."""
    s = repr(float(x))
    s = s[:-2] if s.endswith(".0") else s
    return s.replace(".", "p")


def _lens(xs) -> str:
    return "_".join(str(x) for x in xs)


def family_token(problem: Problem) -> str:
    from ckfmha.families import problem_family_of

    return problem_family_of(problem)


def shape_id(p: Problem) -> str:
    """The problem's shape id (see the module doc)."""
    return "-".join([family_token(p), p.dtype.value, p.mode.value, _dims(p), *_feature_tokens(p)])


def _dims(p: Problem) -> str:
    """``b{batch}h{nhead_q}[k{nhead_k}]s{seqlen_q}[x{seqlen_k}]d{hdim_q}[x{hdim_v}]`` (group mode: per-sequence
    lengths)."""
    dims = f"b{p.batch}h{p.nhead_q}"
    if p.nhead_k != p.nhead_q:
        dims += f"k{p.nhead_k}"
    if p.mode.value == "group":
        dims += f"s{_lens(p.seqlens_q)}"
        if p.seqlens_k != p.seqlens_q:
            dims += f"x{_lens(p.seqlens_k)}"
    else:
        dims += f"s{p.seqlen_q}"
        if p.seqlen_k != p.seqlen_q:
            dims += f"x{p.seqlen_k}"
    dims += f"d{p.hdim_q}"
    if p.hdim_v != p.hdim_q:
        dims += f"x{p.hdim_v}"
    return dims


def _feature_tokens(p: Problem) -> list[str]:
    """The feature tokens, in the module doc's order: mask, bias, softmax features, then the storage ones."""
    from ckfmha.masking import MaskKind

    parts: list[str] = []
    m = p.mask
    if m.kind is MaskKind.GENERIC:
        parts.append(f"gmask{m.y}_{m.x}")
    elif m.kind is not MaskKind.NONE:
        br = "br" if m.kind is MaskKind.BOTTOM_RIGHT else ""
        parts.append(f"causal{br}" if m.is_causal else f"win{br}{m.left}_{m.right}")
    if p.bias.value != "none":
        parts.append(("bias" if p.bias.value == "elementwise" else "alibi") + (str(p.bias_rank) if p.bias_rank else ""))
    if p.lse:
        parts.append("lse")
    if p.p_drop:
        parts.append(f"drop{_num(p.p_drop)}")
    if p.drop_seed != 1:
        parts.append(f"dseed{p.drop_seed}")
    if p.drop_offset:
        parts.append(f"doff{p.drop_offset}")
    if p.logits_soft_cap:
        parts.append(f"softcap{_num(p.logits_soft_cap)}")
    if p.sink:
        parts.append("sink")
    if p.scale:
        parts.append(f"scale{_num(p.scale)}")
    if p.qscale.value != "none":
        parts.append(f"qs{p.qscale.value}")
    return parts + _storage_tokens(p)


def _storage_tokens(p: Problem) -> list[str]:
    """Layout, V layout, paging, append-KV, split, min seqlen, backward and padding tokens, in the module doc's
    order."""
    from ckfmha.problem import Layout

    parts: list[str] = []
    if p.input_layout is Layout.BSHD and p.output_layout is Layout.BSHD:
        parts.append("bshd")
    else:
        if p.input_layout is Layout.BSHD:
            parts.append("ibshd")
        if p.output_layout is Layout.BSHD:
            parts.append("obshd")
    if p.vlayout.value != "row":
        parts.append("vcol")
    if p.page_block_size:
        parts.append(f"page{p.page_block_size}")
    if p.kv_lookup.value != "none":
        parts.append(p.kv_lookup.value)
    if p.kv_layout.value != "none":
        parts.append(p.kv_layout.value)
    if p.cache_batch_idx:
        parts.append("cbi")
    if p.seqlen_knew:
        parts.append(f"knew{p.seqlen_knew}")
    if p.rotary_dim:
        parts.append(f"rope{p.rotary_dim}{'i' if p.rope.value == 'interleaved' else 'h'}")
    if p.num_splits != 1:
        parts.append(f"split{p.num_splits}")
    if p.min_seqlen_q:
        parts.append(f"minq{p.min_seqlen_q}")
    if p.deterministic:
        parts.append("det")
    if p.dbias:
        parts.append("dbias")
    if p.s_qpad is not None:
        parts.append(f"qpad{_lens(p.s_qpad)}")
    if p.s_kpad is not None:
        parts.append(f"kpad{_lens(p.s_kpad)}")
    if p.q_eff_lens is not None:
        parts.append(f"qeff{_lens(p.q_eff_lens)}")
    if p.kv_eff_lens is not None:
        parts.append(f"kveff{_lens(p.kv_eff_lens)}")
    return parts


PLAN = "plan"
"""The last part of a plan item's node id (the dispatcher's own plan)."""
PARITY = "parity"
"""The last part of a CK smoke line's node id in parity mode."""
ROOT = "ckfmha"
"""The matrix collector (and the first part of every matrix and CK smoke node id)."""
SMOKE = "ck-smoke"
"""The CK smoke collector, under :data:`ROOT`."""
SEP = "::"
SMOKE_ROOT = SEP.join((ROOT, SMOKE))
"""The CK smoke collector's node id."""
PARITY_ROOT = "ckfmha-parity"
"""The parity collector."""


@dataclass(frozen=True)
class NodeId:
    """A ckfmha item's pytest node id (module doc): ``root`` (:data:`ROOT` or :data:`PARITY_ROOT`) and the
    parts after it; ``str()`` renders it, :meth:`parse` reads one back."""

    root: str
    parts: tuple[str, ...]

    @classmethod
    def kernel(cls, shape_id: str, token: str) -> "NodeId":
        """A kernel item: ``token`` the kernel's :func:`kernel_token`."""
        return cls(ROOT, (shape_id, token))

    @classmethod
    def plan(cls, shape_id: str) -> "NodeId":
        return cls(ROOT, (shape_id, PLAN))

    @classmethod
    def smoke(cls, line_id: str, name: str | None) -> "NodeId":
        """A CK smoke line's item: ``name`` :data:`PLAN` or :data:`PARITY`; None for a line CK refuses."""
        return cls(ROOT, (SMOKE, line_id) if name is None else (SMOKE, line_id, name))

    @classmethod
    def shape_items(cls, shape_id: str, kernels: Iterable[Any]) -> list[tuple["NodeId", Any]]:
        """A matrix shape's items, in collection order: ``(node id, pinned kernel)`` of each kernel (named by its
        :func:`kernel_token`), then ``(node id, None)`` of the plan item (the collector and the state's
        descriptions of items both use this).  Two kernels of the shape with one token are a ValueError naming
        both kernel ids."""
        out: list[tuple[NodeId, Any]] = []
        seen: dict[str, str] = {}
        for k in kernels:
            token = kernel_token(k)
            if token in seen and seen[token] != k.kernel_id:  # pragma: no cover - a SHA-1 prefix collision
                raise ValueError(
                    f"shape {shape_id}: kernels {seen[token]} and {k.kernel_id} share the kernel token {token!r}"
                )
            seen[token] = k.kernel_id
            out.append((cls.kernel(shape_id, token), k))
        return out + [(cls.plan(shape_id), None)]

    @classmethod
    def smoke_line(cls, line_id: str, parity: bool) -> "NodeId":
        """A runnable CK smoke line's one item: the plan item, with ``--ckfmha-parity`` the parity item."""
        return cls.smoke(line_id, PARITY if parity else PLAN)

    @classmethod
    def parity(cls, upstream: str, label: str) -> "NodeId":
        return cls(PARITY_ROOT, (upstream, label))

    @classmethod
    def parse(cls, nodeid: str) -> "NodeId | None":
        """The node id ``nodeid`` (an xdist ``@group`` suffix dropped), or None when it is no ckfmha item's."""
        root, *parts = nodeid.split("@", 1)[0].split(SEP)
        if root not in (ROOT, PARITY_ROOT) or len(parts) < 2 or not all(parts):
            return None
        smoke = root == ROOT and parts[0] == SMOKE
        if len(parts) > (3 if smoke else 2) or (smoke and len(parts) == 3 and parts[2] not in (PLAN, PARITY)):
            return None
        return cls(root, tuple(parts))

    @classmethod
    def parse_argument(cls, arg: str) -> "NodeId | None":
        """A ckfmha node id named on the command line, or None when ``arg`` is none (a path, an option, another
        plugin's id).  Read as pytest prints it: leading ``./`` and ``../`` (pytest's ``-v`` and ``FAILED`` lines
        from a subdirectory of the rootdir) and an xdist ``@group`` suffix are dropped.  Besides an item's node id,
        a collector's is accepted (``ckfmha::<shape id>``, ``ckfmha::ck-smoke``, ``ckfmha-parity::<upstream>``):
        it names every item under it (:meth:`covers`)."""
        text = arg.split("@", 1)[0]
        while text.startswith(("./", "../")):
            text = text.split("/", 1)[1]
        item = cls.parse(text)
        if item is not None:
            return item
        root, *parts = text.split(SEP)
        if root not in (ROOT, PARITY_ROOT) or len(parts) != 1 or not parts[0]:
            return None
        return cls(root, tuple(parts))

    def covers(self, other: "NodeId") -> bool:
        """Whether ``other`` is this node or an item under it (this a collector's node id from
        :meth:`parse_argument`)."""
        return self.root == other.root and other.parts[: len(self.parts)] == self.parts

    @property
    def old_format(self) -> bool:
        """A kernel item's node id of id format 1 (module doc): the full, dotted kernel id as its last part, which
        no node id of this version holds (they have no dot)."""
        return self.root == ROOT and not self.is_smoke and len(self.parts) == 2 and "." in self.parts[1]

    def __str__(self) -> str:
        return SEP.join((self.root, *self.parts))

    def relative_to(self, parent_nodeid: str) -> str:
        """The item's pytest name under its collector ``parent_nodeid`` (ValueError when it is not under it)."""
        text = str(self)
        if not text.startswith(parent_nodeid + SEP):
            raise ValueError(f"node id {text!r} is not under the collector {parent_nodeid!r}")
        return text[len(parent_nodeid) + len(SEP) :]

    @property
    def is_smoke(self) -> bool:
        return self.root == ROOT and self.parts[0] == SMOKE

    @property
    def kind(self) -> str:
        """``kernel``, ``plan``, ``smoke`` (a CK smoke line's plan item), ``smoke-parity``, ``refused`` (a line CK
        refuses) or ``parity``."""
        if self.root == PARITY_ROOT:
            return "parity"
        if self.is_smoke:
            return "refused" if len(self.parts) == 2 else "smoke" if self.parts[2] == PLAN else "smoke-parity"
        return "plan" if self.parts[1] == PLAN else "kernel"

    @property
    def item_id(self) -> str:
        """The report's ``id`` (the module doc's table): the last two parts."""
        return SEP.join(self.parts[-2:])

    @property
    def scope(self) -> str:
        """The shape id, line id or upstream the item belongs to (``ck-smoke`` for a refused line)."""
        return self.parts[-2]

    @property
    def name(self) -> str:
        """The item's own name under its scope: a kernel token, ``plan``, ``parity``, a parity label, a line id."""
        return self.parts[-1]

    @property
    def kernel_id(self) -> str | None:
        """The pinned kernel's :func:`kernel_token` of a kernel item (the kernel as node ids name it), else None."""
        return self.name if self.kind == "kernel" else None

    def group_kernel(self, first_kernel_of_shape: str | None) -> str | None:
        """The kernel (its token) whose group this item joins (module doc): a kernel item its own, a matrix plan
        item its shape's first kernel item's (``first_kernel_of_shape``, a token; None: no kernel item), any other
        item none."""
        kind = self.kind
        return self.name if kind == "kernel" else first_kernel_of_shape if kind == "plan" else None

    def describe(self) -> str:
        """The item in words, for crash reasons: ``shape <shape id>, kernel <kernel id | the dispatcher's plan>``
        for matrix and CK smoke items, the node id for parity items and refused lines."""
        if self.kind not in ("kernel", "plan", "smoke"):
            return str(self)
        kernel = "the dispatcher's plan" if self.name == PLAN else self.name
        return f"shape {self.scope}, kernel {kernel}"


ID_FORMAT = 2
"""The node-id format of this version (module doc's table)."""
KERNEL_HASH_LEN = 8
"""Hex digits of the kernel id's SHA-1 in a kernel token."""


def kernel_token(kernel) -> str:
    """A kernel's compact id in node ids (module doc): ``{pipeline}-b{bm0}x{bn0}x{bk0}-{hash}``."""
    import hashlib

    a = kernel.algorithm
    tile = "b" + "x".join(str(v) for v in a.tile[:3])
    digest = hashlib.sha1(kernel.kernel_id.encode()).hexdigest()[:KERNEL_HASH_LEN]
    return f"{a.pipeline.value}-{tile}-{digest}"


def keywords(problem: Problem, kernel: Any = None, entry: str | None = None) -> set[str]:
    """The ``-k`` words of an item (module doc): family, dtype, mode, feature tokens, ``kernel`` / ``plan``, the
    kernel's pipeline, the matrix entry's name."""
    p = problem
    words = {family_token(p), p.dtype.value, p.mode.value, *_feature_tokens(p)}
    words.add("plan" if kernel is None else "kernel")
    if kernel is not None:
        words.add(kernel.algorithm.pipeline.value)
    if entry:
        words.add(entry)
    return words


def group_name(kernel: str) -> str:
    """xdist_group name of a kernel (its token): short (xdist appends it to every node id) and stable."""
    import hashlib

    return "ck-" + hashlib.sha1(kernel.encode()).hexdigest()[:12]
