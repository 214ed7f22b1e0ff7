"""The reference cache: checksummed files, keys that follow the reference code, corrupt files healed."""

from __future__ import annotations

import numpy as np
import pytest

from ckfmha.backends.cache import CacheWarning
from ckfmha.inputs import make_inputs
from ckfmha.problem import Problem
from pytest_ckfmha import refcache

P = Problem(dtype="bf16", batch=1, nhead_q=2, seqlen_q=16, hdim_q=32, lse=True)


@pytest.fixture(autouse=True)
def _no_memo():
    refcache.clear_memo()
    yield
    refcache.clear_memo()


def test_roundtrip_keeps_dtypes_and_values(tmp_path) -> None:
    inp = make_inputs(P, 0)
    ref, cached = refcache.get_reference(P, inp, 0, tmp_path)
    refcache.clear_memo()
    again, cached2 = refcache.get_reference(P, inp, 0, tmp_path)
    assert (cached, cached2) == (False, True)
    assert again["o"].dtype == ref["o"].dtype and np.array_equal(again["o"].view(np.uint16), ref["o"].view(np.uint16))


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_corrupt_file_is_recomputed_with_one_warning(tmp_path, damage) -> None:
    inp = make_inputs(P, 0)
    ref, _ = refcache.get_reference(P, inp, 0, tmp_path)
    (path,) = (tmp_path / "references").glob("*.npz")
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:  # one byte of array data changed: the zip still opens, the checksum does not match
        i = data.index(b"NUMPY") + 200
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    refcache.clear_memo()
    with pytest.warns(CacheWarning, match=f"corrupt reference cache file {path}") as caught:
        again, cached = refcache.get_reference(P, inp, 0, tmp_path)
    assert [type(w.message) for w in caught].count(CacheWarning) == 1 and cached is False
    assert np.array_equal(again["lse"], ref["lse"])
    refcache.clear_memo()
    assert refcache.get_reference(P, inp, 0, tmp_path)[1] is True  # healed


def test_the_key_follows_the_reference_code(monkeypatch) -> None:
    before = refcache.ref_key(P, 0, "ocp")
    monkeypatch.setattr(refcache, "reference_version", lambda: "another-reference")
    assert refcache.ref_key(P, 0, "ocp") != before


def test_reference_version_reads_the_reference_sources() -> None:
    v = refcache.reference_version()
    assert len(v) == 16 and int(v, 16) >= 0


def test_a_gpu_reference_is_kept_in_memory_never_written(tmp_path, monkeypatch) -> None:
    """torch:cuda references are recomputed, not stored (the nightly's would fill a GPU box's disk); numpy ones are
    written as before."""
    calls = []

    def fake(problem, inputs, reference="numpy"):
        calls.append(reference)
        return {"o": np.zeros((1, 2, 16, 32), np.float32), "lse": np.zeros((1, 2, 16), np.float32)}

    monkeypatch.setattr(refcache, "compute", fake)
    inp = make_inputs(P, 0)
    first = refcache.get_reference(P, inp, 0, tmp_path, reference="torch:cuda")
    assert first[1] is False and not (tmp_path / "references").exists()
    assert refcache.get_reference(P, inp, 0, tmp_path, reference="torch:cuda")[1] is True  # the memo
    refcache.clear_memo()
    assert refcache.get_reference(P, inp, 0, tmp_path, reference="torch:cuda")[1] is False
    assert calls == ["torch:cuda", "torch:cuda"]
    refcache.get_reference(P, inp, 0, tmp_path, reference="torch:cpu")
    assert len(list((tmp_path / "references").glob("*.npz"))) == 1
