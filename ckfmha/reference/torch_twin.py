"""The torch twin of the NumPy reference: the same references with their O(s_q x s_k) work on a torch device.

``ckfmha.reference(problem, inputs, accum, array_backend="torch", device=...)`` runs the very same family drivers
as the NumPy reference (sequences, layouts, page tables, RoPE and cache writes, split ranges and the combine, the
backward's raw/reduced gradients -- all O(s x d) host work, shared code, so they cannot drift) and swaps only the
per-sequence attention core, :func:`ckfmha.reference.core.attend`, for :class:`TorchAttend`, a line-by-line port
on ``device`` with the same rounding points:

* the same logit pipeline in the accumulation dtype, over the same query-row chunks (score blocks of
  ``core.CHUNK_BYTES`` on the host, :data:`DEVICE_CHUNK_BYTES` on an accelerator; a row's result does not depend
  on its chunk, and no (s_q x s_k) block of a whole head is ever made);
* P and dS rounded to the kernel's input dtype and O to its output dtype where ``core._Gradients`` rounds them;
* the dropout keep mask from the same Philox stream: :func:`dropout_randval` computes CK's Philox4x32-7 counters
  and tile order of :mod:`ckfmha.rng` on the device in int64 arithmetic, bit for bit the host's;
* float32 GEMMs in IEEE float32 (TF32 off for the call, the caller's setting restored).

Results come back as the NumPy reference's dict: same keys, shapes, dtypes and NaN markings.  torch is imported
here only, when the twin is asked for (the core never imports it).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import numpy as np

from ckfmha import rng as _rng
from ckfmha.array_ops import import_torch, resolve_device, torch_dtype  # noqa: F401  (public here too)
from ckfmha.problem import Problem
from ckfmha.reference import core
from ckfmha.reference.core import Extras

#: score-block budget per query-row chunk on an accelerator (host devices use ``core.CHUNK_BYTES``)
DEVICE_CHUNK_BYTES = 512 << 20


@contextlib.contextmanager
def ieee_float32(torch: Any):
    """IEEE float32 GEMMs for the block (no TF32), restoring the caller's setting after it."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


_M32 = 0xFFFFFFFF


def _mulhilo(m: int, x) -> tuple[Any, Any]:
    """``(hi, lo)`` 32-bit words of ``m * x`` (``m`` < 2**32, ``x`` int64 tensor of 32-bit values) without
    overflowing int64: ``x`` is split in 16-bit halves."""
    a = (x & 0xFFFF) * m
    b = (x >> 16) * m
    t = a + ((b & 0xFFFF) << 16)
    return (b >> 16) + (t >> 32), t & _M32


def philox4x32(c: list, key: tuple[int, int], rounds: int) -> list:
    """:func:`ckfmha.rng.philox4x32` on int64 tensors holding uint32 words (``c``: the 4 counter words,
    broadcastable; ``key``: 2 Python ints); returns the 4 output words."""
    c0, c1, c2, c3 = c
    k0, k1 = key
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + int(_rng.PHILOX_W0)) & _M32, (k1 + int(_rng.PHILOX_W1)) & _M32
        hi0, lo0 = _mulhilo(int(_rng.PHILOX_M0), c0)
        hi1, lo1 = _mulhilo(int(_rng.PHILOX_M1), c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return [c0, c1, c2, c3]


def dropout_randval(
    torch: Any, device, seed: int, offset: int, batch: int, nhead: int, heads: int, rows: range, cols: range
) -> Any:
    """:func:`ckfmha.rng.dropout_randval` on ``device`` for q-heads ``0..heads-1`` and the contiguous ``rows`` x
    ``cols``: (heads, len(rows), len(cols)) uint8, bit for bit the host's (same counters, key, rounds, tile order)."""
    if not len(rows) or not len(cols):
        return torch.zeros((heads, len(rows), len(cols)), dtype=torch.uint8, device=device)
    tile = _rng.DROPOUT_TILE
    seed &= (1 << 64) - 1
    t0, t1 = rows.start // tile, (rows.stop - 1) // tile + 1
    u0, u1 = cols.start // tile, (cols.stop - 1) // tile + 1
    with np.errstate(over="ignore"):  # the low 64 counter bits wrap like the GPU's uint64
        base = np.array([(offset + (batch * nhead + h) * 64) & ((1 << 64) - 1) for h in range(heads)], np.uint64)
        sub = base[:, None] + np.arange(64, dtype=np.uint64)[None, :]  # (H, 64)

    def words(x) -> Any:
        return torch.from_numpy(x.astype(np.int64)).to(device)[:, None, None, :]

    c0, c1 = words(sub & np.uint64(_M32)), words(sub >> np.uint64(32))
    c2 = torch.arange(t0, t1, dtype=torch.int64, device=device)[None, :, None, None]
    c3 = torch.arange(u0, u1, dtype=torch.int64, device=device)[None, None, :, None]
    w = philox4x32([c0, c1, c2, c3], (seed & _M32, seed >> 32), _rng.DROPOUT_ROUNDS)
    w = torch.stack(torch.broadcast_tensors(*w), dim=-1)  # (H, TI, TJ, 64 lanes, 4 words)
    shifts = torch.tensor([0, 8, 16, 24], dtype=torch.int64, device=device)
    tile_bytes = ((w[..., None] >> shifts) & 0xFF).to(torch.uint8).reshape(w.shape[:3] + (64 * 16,))
    order = torch.from_numpy(_rng._TILE_ORDER.reshape(-1).astype(np.int64)).to(device)
    tiles = tile_bytes[..., order].reshape(w.shape[:3] + (tile, tile))  # (H, TI, TJ, r, c)
    grid = tiles.permute(0, 1, 3, 2, 4).reshape(heads, (t1 - t0) * tile, (u1 - u0) * tile)
    r, c = rows.start - t0 * tile, cols.start - u0 * tile
    return grid[:, r : r + len(rows), c : c + len(cols)]


class TorchAttend:
    """:func:`ckfmha.reference.core.attend` on a torch device: same signature, same NumPy results."""

    def __init__(self, device=None) -> None:
        self.torch = import_torch()
        self.device = resolve_device(device)

    def tensor(self, x, dtype=None) -> Any:
        """A NumPy array (or scalar) on the device, as ``dtype`` (NumPy) when given."""
        a = np.ascontiguousarray(x if dtype is None else np.asarray(x).astype(dtype, copy=False))
        if not a.flags.writeable and self.device.type == "cpu":
            a = a.copy()  # a CPU tensor would share the read-only memory (the plugin's shape inputs)
        with warnings.catch_warnings():  # read-only memory copied to the device: torch warns, though it only reads
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)
            t = self.torch.from_numpy(a)
        return t.to(self.device)

    def chunk_rows(self, hq: int, nk: int, accum) -> int:
        budget = core.CHUNK_BYTES if self.device.type == "cpu" else DEVICE_CHUNK_BYTES
        return max(1, int(budget // max(1, hq * max(nk, 1) * np.dtype(accum).itemsize)))

    def __call__(
        self,
        p: Problem,
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
        ex: Extras,
        accum=np.float32,
        key_lo: int = 0,
        key_hi: int | None = None,
        want_randval: bool = False,
        backward=None,
    ):
        """:func:`ckfmha.reference.core.attend` (same arguments and results, NumPy in and out)."""
        with ieee_float32(self.torch), self.torch.no_grad():
            return TorchSequence(self, p, q, k, v, ex, accum, key_lo, key_hi, want_randval, backward).run()


class TorchSequence:
    """One :meth:`TorchAttend.__call__`: the port of ``attend``'s body, chunk by chunk of query rows."""

    def __init__(self, tw: TorchAttend, p: Problem, q, k, v, ex: Extras, accum, key_lo, key_hi, want_rv, backward):
        self.tw, self.torch, self.p, self.ex, self.accum = tw, tw.torch, p, ex, np.dtype(accum).type
        self.q_np, self.backward = q, backward
        hq, self.sq, self.dq = q.shape
        self.hk, self.sk, _ = k.shape
        self.hq, self.dv, self.g = hq, v.shape[2], hq // self.hk
        self.key_lo, self.key_hi = key_lo, self.sk if key_hi is None else key_hi
        self.nk = max(self.key_hi - self.key_lo, 0)
        self.randval_out = np.zeros((hq, self.sq, self.sk), dtype=np.uint8) if want_rv else None
        self.k, self.v = tw.tensor(k[:, key_lo : self.key_hi]), tw.tensor(v[:, key_lo : self.key_hi])

    def scalar(self, x: float) -> Any:
        """``accum(x)`` as a 0-d device tensor (so that every constant rounds as NumPy's ``accum(x)`` does)."""
        return self.torch.tensor(self.accum(x), device=self.tw.device)

    def run(self):
        """``(o, lse, randval)`` as NumPy arrays, as ``attend`` returns them; fills ``backward`` likewise."""
        torch, hq, sq = self.torch, self.hq, self.sq
        accum = self.accum
        o = np.zeros((hq, sq, self.dv), dtype=accum)
        lse = np.full((hq, sq), -np.inf, dtype=accum)
        if sq == 0:
            if self.backward is not None:
                core._no_query_gradients(self.backward, self.q_np, self.sk, self.dv, accum)
            return o, lse, self.randval_out
        q = self.tw.tensor(self.q_np)
        o_t, lse_t = torch.zeros((hq, sq, self.dv), dtype=q.dtype, device=q.device), torch.empty_like(q[:, :, 0])
        grads = None if self.backward is None else TorchGradients(self, q)
        kT = self.k.transpose(1, 2)[:, None]  # (hk, 1, dq, nk)
        vv4 = self.v[:, None]  # (hk, 1, nk, dv)
        rows_per = self.tw.chunk_rows(hq, self.nk, accum)
        for r0 in range(0, sq, rows_per):
            r1 = min(sq, r0 + rows_per)
            qc = q[:, r0:r1].reshape(self.hk, self.g, r1 - r0, self.dq)
            s = torch.matmul(qc * self.scalar(self.p.softmax_scale), kT).reshape(hq, r1 - r0, self.nk)
            s, t = self.logits(s, r0, r1)
            l_safe, lse_t[:, r0:r1] = self.softmax(s)  # s now holds unnormalised probabilities
            if self.p.p_drop == 0 and grads is None:  # attend's fast path: normalise the output, not P
                o_t[:, r0:r1] = (
                    torch.matmul(s.reshape(self.hk, self.g, r1 - r0, self.nk), vv4).reshape(hq, r1 - r0, self.dv)
                    / l_safe[..., None]
                )
                continue
            s /= l_safe[..., None]  # normalised P
            pd, keep = self.dropout(s, r0, r1)
            oc = torch.matmul(pd.reshape(self.hk, self.g, r1 - r0, self.nk), vv4).reshape(hq, r1 - r0, self.dv)
            o_t[:, r0:r1] = oc
            if grads is not None:
                grads.add_chunk(r0, r1, qc, s, pd, keep, oc, t)
        if grads is not None:
            grads.finish()
        return o_t.cpu().numpy(), lse_t.cpu().numpy(), self.randval_out

    def logits(self, s, r0: int, r1: int):
        """``core._chunk_logits``: soft-cap, bias, ALiBi and mask on the chunk's scores; returns ``(s, t)``."""
        torch, p, ex, lo, hi = self.torch, self.p, self.ex, self.key_lo, self.key_hi
        t = None
        if p.logits_soft_cap > 0:
            cap = self.scalar(p.logits_soft_cap)
            t = torch.tanh(s / cap)
            s = cap * t
        if ex.bias is not None:
            s += self.tw.tensor(ex.bias[:, r0:r1, lo:hi], self.accum)
        if ex.alibi is not None:
            s += self.alibi(r0, r1)
        if p.mask.kind.value != "none" or lo > 0 or hi < self.sk:
            start, end = p.mask.key_range(self.sq, self.sk, np.arange(r0, r1))
            cols = torch.arange(lo, hi, device=s.device)[None, :]
            st, en = self.tw.tensor(np.asarray(start, np.int64)), self.tw.tensor(np.asarray(end, np.int64))
            allowed = (cols >= st[:, None]) & (cols < en[:, None])  # (R, nk)
            s = torch.where(allowed[None], s, self.scalar(-np.inf))
        return s, t

    def alibi(self, r0: int, r1: int):
        """``core.alibi_bias`` for rows ``[r0, r1)``, keys ``[key_lo, key_hi)``: (hq, R, nk)."""
        torch, dev = self.torch, self.tw.device
        mode = self.p.mask.alibi_mode()
        j = torch.arange(self.key_lo, self.key_hi, dtype=torch.int64, device=dev)[None, :]
        i = torch.arange(r0, r1, dtype=torch.int64, device=dev)[:, None]
        if mode == "vertical":
            pos, sign = j.expand(r1 - r0, self.nk), 1.0
        elif mode == "top_left":
            pos, sign = (i - j).abs(), -1.0
        else:
            pos, sign = (i + (self.sk - self.sq) - j).abs(), -1.0
        slopes = self.tw.tensor(sign * np.asarray(self.ex.alibi).astype(self.accum))
        return slopes[:, None, None] * pos.to(slopes.dtype)[None]

    def softmax(self, s):
        """``core._chunk_softmax``: exponentiates ``s`` in place; returns ``(l_safe, lse_rows)``."""
        torch = self.torch
        m = s.amax(dim=-1) if s.shape[-1] else torch.full(s.shape[:2], -np.inf, dtype=s.dtype, device=s.device)
        sink = None if self.ex.sink is None else self.tw.tensor(self.ex.sink, self.accum)[:, None]
        if sink is not None:
            m = torch.maximum(m, sink)
        m_safe = torch.where(torch.isfinite(m), m, self.scalar(0))
        s -= m_safe[..., None]
        s.exp_()
        l = s.sum(dim=-1)
        if sink is not None:
            l = l + torch.exp(sink - m_safe)
        empty = l == 0
        l_safe = torch.where(empty, self.scalar(1), l)
        return l_safe, torch.where(empty, self.scalar(-np.inf), m_safe + torch.log(l_safe))

    def dropout(self, s, r0: int, r1: int):
        """``core._chunk_dropout``: ``(pd, keep)``, the random values from the same stream as the host's."""
        p, ex = self.p, self.ex
        if not p.p_drop > 0:
            return s, None
        lo, hi = self.key_lo, self.key_hi
        if ex.randval is not None:
            rv = self.tw.tensor(ex.randval[:, r0:r1, lo:hi])
        else:
            rv = dropout_randval(
                self.torch,
                self.tw.device,
                p.drop_seed,
                p.drop_offset,
                ex.batch,
                p.nhead_q,
                self.hq,
                range(r0, r1),
                range(lo, hi),
            )
        if self.randval_out is not None:
            self.randval_out[:, r0:r1, lo:hi] = rv.cpu().numpy()
        keep = rv <= _rng.p_undrop_u8(p.p_drop)
        pd = self.torch.where(keep, s * self.scalar(1.0 / (1.0 - p.p_drop)), self.scalar(0))
        return pd, keep


class TorchGradients:
    """``core._Gradients`` on the device: accumulators filled chunk by chunk, written back as NumPy arrays."""

    def __init__(self, seq: TorchSequence, q) -> None:
        torch, bw = seq.torch, seq.backward
        self.seq, self.torch, self.bw = seq, torch, bw
        self.do_all = seq.tw.tensor(bw["do"])
        self.dq_out = torch.zeros_like(q)
        shape = (seq.hk, seq.g, seq.nk)
        self.dk_acc = torch.zeros(shape + (seq.dq,), dtype=q.dtype, device=q.device)
        self.dv_acc = torch.zeros(shape + (seq.dv,), dtype=q.dtype, device=q.device)
        self.d_out = torch.zeros((seq.hq, seq.sq), dtype=q.dtype, device=q.device)
        self.ds_full = np.zeros((seq.hq, seq.sq, seq.sk), dtype=seq.accum) if bw.get("want_ds") else None
        self.o_dtype = None if bw.get("o_dtype") is None else torch_dtype(torch, bw["o_dtype"])
        self.lp = None if bw.get("lp_dtype") is None else torch_dtype(torch, bw["lp_dtype"])

    def add_chunk(self, r0: int, r1: int, qc, s, pd, keep, oc, t) -> None:
        """``core._Gradients.add_chunk`` (same rounding points: O to the output dtype, P and dS to the input's)."""
        torch, seq = self.torch, self.seq
        hk, g, rows, hq, nk = seq.hk, seq.g, r1 - r0, seq.hq, seq.nk
        doc = self.do_all[:, r0:r1]
        o_for_d = oc if self.o_dtype is None else oc.to(self.o_dtype).to(oc.dtype)
        dd = torch.sum(doc * o_for_d, dim=-1)
        self.d_out[:, r0:r1] = dd
        dp = torch.matmul(doc.reshape(hk, g, rows, seq.dv), seq.v[:, None].transpose(2, 3)).reshape(hq, rows, nk)
        if keep is not None:
            dp = torch.where(keep, dp * seq.scalar(1.0 / (1.0 - seq.p.p_drop)), seq.scalar(0))
        ds = s * (dp - dd[..., None])
        if self.ds_full is not None:
            self.ds_full[:, r0:r1, seq.key_lo : seq.key_hi] = ds.cpu().numpy()
        ds_x = ds * (1 - t * t) if seq.p.logits_soft_cap > 0 else ds
        if self.lp is not None:
            ds_x = ds_x.to(self.lp).to(ds.dtype)
            pd = pd.to(self.lp).to(ds.dtype)
        ds4 = ds_x.reshape(hk, g, rows, nk)
        scale = seq.scalar(seq.p.softmax_scale)
        self.dq_out[:, r0:r1] = torch.matmul(ds4, seq.k[:, None]).reshape(hq, rows, seq.dq) * scale
        self.dk_acc += torch.matmul(ds4.transpose(2, 3), qc) * scale
        self.dv_acc += torch.matmul(pd.reshape(hk, g, rows, nk).transpose(2, 3), doc.reshape(hk, g, rows, seq.dv))

    def finish(self) -> None:
        """``core._Gradients.finish``: dK/dV per q-head over all keys (0 outside the key range), as NumPy."""
        seq = self.seq
        dk_heads = np.zeros((seq.hq, seq.sk, seq.dq), dtype=seq.accum)
        dv_heads = np.zeros((seq.hq, seq.sk, seq.dv), dtype=seq.accum)
        dk_heads[:, seq.key_lo : seq.key_hi] = self.dk_acc.reshape(seq.hq, seq.nk, seq.dq).cpu().numpy()
        dv_heads[:, seq.key_lo : seq.key_hi] = self.dv_acc.reshape(seq.hq, seq.nk, seq.dv).cpu().numpy()
        self.bw.update(
            dq=self.dq_out.cpu().numpy(),
            dk_heads=dk_heads,
            dv_heads=dv_heads,
            d=self.d_out.cpu().numpy(),
            ds=self.ds_full,
        )


def reference_torch(problem: Problem, inputs: dict, accum=np.float32, device=None) -> dict:
    """The reference outputs of ``problem`` computed by the torch twin on ``device`` (None: 'cuda' when available,
    else 'cpu'): the family's NumPy driver with :class:`TorchAttend` as its attention core."""
    from ckfmha.reference import reference_function

    return reference_function(problem)(problem, inputs, accum, attend_fn=TorchAttend(device))
