"""The kernel set's disk cache (pytest_ckfmha/kernel_set_cache.py): a second process loads what the first
enumerated -- the same kernels --, another setting or another package is another key, and a damaged or empty file
is enumerated again."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from pytest_ckfmha import kernel_set_cache as ksc


@dataclasses.dataclass(frozen=True)
class _Settings:
    cache_dir: object
    arch: str = "sm90"
    receipt: object = None
    profile: object = None
    mask_mode: str = "simplified"
    filter: object = None
    filter_file: object = None
    sweep: object = None


def _enumerate(calls: list, value):
    def run():
        calls.append(1)
        return list(value)

    return run


def test_the_second_call_loads_the_first_ones_list(tmp_path):
    s, calls = _Settings(tmp_path), []
    first = ksc.cached_kernel_set(s, _enumerate(calls, ["k1", "k2"]))
    again = ksc.cached_kernel_set(s, _enumerate(calls, ["never used"]))
    assert first == again == ["k1", "k2"] and calls == [1]
    (stored,) = (tmp_path / ksc.SUBDIR).iterdir()
    assert stored.suffix == ".pickle" and pickle.loads(stored.read_bytes()) == ["k1", "k2"]


def test_another_setting_or_package_is_another_key(tmp_path, monkeypatch):
    calls: list = []
    ksc.cached_kernel_set(_Settings(tmp_path), _enumerate(calls, ["a"]))
    assert ksc.cached_kernel_set(_Settings(tmp_path, arch="gfx942"), _enumerate(calls, ["b"])) == ["b"]
    filt = tmp_path / "f.py"
    filt.write_text("x")
    with_file = _Settings(tmp_path, filter_file=str(filt))  # Python that may read other files: never cached
    assert ksc.cached_kernel_set(with_file, _enumerate(calls, ["c"])) == ["c"]
    assert ksc.cached_kernel_set(with_file, _enumerate(calls, ["d"])) == ["d"]
    monkeypatch.setattr(ksc, "package_fingerprint", lambda: "another package")
    assert ksc.cached_kernel_set(_Settings(tmp_path), _enumerate(calls, ["e"])) == ["e"]
    assert len(calls) == 5


@pytest.mark.parametrize("damage", [b"not a pickle", pickle.dumps({"not": "a list"}), pickle.dumps([])])
def test_a_damaged_or_empty_file_is_enumerated_again(tmp_path, damage):
    s, calls = _Settings(tmp_path), []
    path = tmp_path / ksc.SUBDIR / f"{ksc.cache_key(s)}.pickle"
    path.parent.mkdir()
    path.write_bytes(damage)
    assert ksc.cached_kernel_set(s, _enumerate(calls, ["k"])) == ["k"] and calls == [1]
    assert pickle.loads(path.read_bytes()) == ["k"]  # written again


def test_an_empty_set_is_never_stored(tmp_path):
    s, calls = _Settings(tmp_path), []
    assert ksc.cached_kernel_set(s, _enumerate(calls, [])) == []
    assert not (tmp_path / ksc.SUBDIR).exists() or not any((tmp_path / ksc.SUBDIR).iterdir())


def test_the_package_fingerprint_follows_the_files(tmp_path, monkeypatch):
    import ckfmha

    pkg = tmp_path / "ckfmha"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "data.yaml").write_text("a: 1")
    monkeypatch.setattr(ckfmha, "__file__", str(pkg / "__init__.py"))
    ksc.package_fingerprint.cache_clear()
    try:
        before = ksc.package_fingerprint()
        (pkg / "data.yaml").write_text("a: 2")
        ksc.package_fingerprint.cache_clear()
        assert ksc.package_fingerprint() != before
    finally:
        ksc.package_fingerprint.cache_clear()


def test_a_real_kernel_set_round_trips(tmp_path):
    """The sm90 enumeration through the cache: the loaded list equals the enumerated one, kernel by kernel."""
    from ckfmha.selection import KernelQuery

    s = _Settings(tmp_path)
    q = KernelQuery.build("sm90")
    fresh = ksc.cached_kernel_set(s, lambda: q.run())
    loaded = ksc.cached_kernel_set(s, lambda: pytest.fail("enumerated twice"))
    assert len(fresh) > 1000 and loaded == fresh
    assert [k.kernel_id for k in loaded[:50]] == [k.kernel_id for k in fresh[:50]]


def test_a_list_that_cannot_be_stored_leaves_no_file(tmp_path):
    s = _Settings(tmp_path)
    assert ksc.cached_kernel_set(s, lambda: [lambda: None]) is not None  # a lambda cannot be pickled
    assert list((tmp_path / ksc.SUBDIR).iterdir()) == []


def test_a_stored_file_is_readable_by_all(tmp_path):
    s = _Settings(tmp_path)
    ksc.cached_kernel_set(s, lambda: ["k"])
    (stored,) = (tmp_path / ksc.SUBDIR).iterdir()
    assert stored.stat().st_mode & 0o777 == 0o644
