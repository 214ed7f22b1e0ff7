"""Locating a CK checkout: --ckfmha-ck-root / $CK_ROOT are checked before anything runs."""

from __future__ import annotations

import pytest

from ckfmha.cktree import CKTreeError, ck_root_from_env, resolve_ck_root


def _fake_checkout(root):
    (root / "example" / "ck_tile" / "01_fmha").mkdir(parents=True)
    (root / "example" / "ck_tile" / "01_fmha" / "generate.py").write_text("# generator\n")
    (root / "include" / "ck_tile").mkdir(parents=True)
    return root


def test_a_checkout_resolves(tmp_path) -> None:
    assert resolve_ck_root(_fake_checkout(tmp_path / "ck")) == (tmp_path / "ck").resolve()


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: p, "is not a directory"),
        (lambda p: p.mkdir() or p, "has no example/ck_tile/01_fmha/generate.py"),
    ],
)
def test_what_is_missing_is_named(tmp_path, make, words) -> None:
    with pytest.raises(CKTreeError, match=words):
        resolve_ck_root(make(tmp_path / "x"))


def test_env_var(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("CK_ROOT", raising=False)
    assert ck_root_from_env() is None
    monkeypatch.setenv("CK_ROOT", str(tmp_path / "nowhere"))
    with pytest.raises(CKTreeError, match=r"\$CK_ROOT: '.*nowhere' is not a directory"):
        ck_root_from_env()
    monkeypatch.setenv("CK_ROOT", str(_fake_checkout(tmp_path / "ck")))
    assert ck_root_from_env() == (tmp_path / "ck").resolve()
