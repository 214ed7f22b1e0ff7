"""The on-disk build cache: one build per kernel even when several processes ask at once; atomic entries."""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from pathlib import Path

import pytest

from ckfmha.backends.cache import BuildCache


def _build_in_process(root: str, kernel_id: str, counter: str, start_at: float, out: "mp.Queue") -> None:
    cache = BuildCache("test", "1", root=Path(root))

    def build(tmp: Path) -> dict:
        with open(counter, "a") as fh:  # every real build leaves one line
            fh.write("built\n")
        time.sleep(0.3)  # a slow compile: the other processes arrive meanwhile
        (tmp / "artifact.bin").write_bytes(b"kernel")
        return {"backend": "test"}

    while time.time() < start_at:
        time.sleep(0.001)
    entry, meta, cached = cache.get_or_build(kernel_id, build)
    out.put((str(entry), cached, (entry / "artifact.bin").read_bytes().decode()))


def test_concurrent_processes_build_once(tmp_path) -> None:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    counter = tmp_path / "builds.txt"
    start = time.time() + 0.5
    procs = [
        ctx.Process(target=_build_in_process, args=(str(tmp_path / "c"), "fwd.k1", str(counter), start, q))
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    results = [q.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert counter.read_text().count("built") == 1
    assert len({r[0] for r in results}) == 1 and all(r[2] == "kernel" for r in results)
    assert sorted(r[1] for r in results) == [False, True, True, True]


def test_failed_build_leaves_no_entry_and_can_retry(tmp_path) -> None:
    cache = BuildCache("test", "1", root=tmp_path)

    def broken(tmp: Path) -> dict:
        (tmp / "half.bin").write_bytes(b"x")
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="compiler crashed"):
        cache.get_or_build("k", broken)
    assert cache.lookup("k") is None
    assert not any(p.name.startswith(cache.entry("k").name + ".tmp") for p in cache.root.iterdir())
    entry, meta, cached = cache.get_or_build("k", lambda tmp: {"ok": True})
    assert not cached and meta["ok"] and json.loads((entry / "meta.json").read_text())["kernel_id"] == "k"
    assert cache.get_or_build("k", broken)[2] is True  # cached now: the build function is not called


def test_versions_and_backends_do_not_share_entries(tmp_path) -> None:
    a = BuildCache("cpu", "1", root=tmp_path)
    b = BuildCache("cpu", "2", root=tmp_path)
    c = BuildCache("triton", "1", root=tmp_path)
    assert len({a.entry("k"), b.entry("k"), c.entry("k")}) == 3


def _build(tmp: Path) -> dict:
    (tmp / "artifact.bin").write_bytes(b"kernel-bytes")
    return {"backend": "test"}


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda e: (e / "meta.json").write_text('{"kernel_id": "k", "fi'), "meta.json unreadable: JSONDecodeError"),
        (lambda e: (e / "artifact.bin").write_bytes(b"kern"), "artifact.bin does not match its checksum"),
        (lambda e: (e / "artifact.bin").unlink(), "meta.json unreadable: FileNotFoundError"),
    ],
)
def test_a_corrupt_entry_is_rebuilt_with_one_warning(tmp_path, damage, words) -> None:
    from ckfmha.backends.cache import CacheWarning

    cache = BuildCache("test", "1", root=tmp_path)
    entry, meta, cached = cache.get_or_build("k", _build)
    assert not cached and set(meta["files"]) == {"artifact.bin"}
    damage(entry)
    with pytest.warns(CacheWarning) as caught:
        entry2, meta2, cached2 = cache.get_or_build("k", _build)
    assert len(caught) == 1 and str(entry) in str(caught[0].message) and words in str(caught[0].message)
    assert not cached2 and (entry2 / "artifact.bin").read_bytes() == b"kernel-bytes"
    assert cache.get_or_build("k", _build)[2] is True  # healed: served from the cache again, no warning


def test_unusable_cache_dir_is_named(tmp_path) -> None:
    from ckfmha.backends.cache import check_cache_dir

    (tmp_path / "f").write_text("x")
    assert check_cache_dir(tmp_path / "ok") is None and (tmp_path / "ok").is_dir()
    assert "is not usable as a cache directory" in check_cache_dir(tmp_path / "f" / "sub")
