"""Plugin parity mode: ``--ckfmha-parity tile_example|torch[:backend]``: items for upstream's 14 configurations
(+ the category's shapes), both sides' verdicts in the report, never a pass without a comparison."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

import ckfmha.parity  # noqa: F401
import ckfmha.upstream.ckfmha_side  # noqa: F401
import ckfmha.upstream.tile_runner  # noqa: F401
import pytest_ckfmha.parity_items  # noqa: F401
import tests.test_plugin_fixtures  # noqa: F401  (imports numpy & co. once, before the in-process runs)

pytest_plugins = ["pytester"]
FAKE = Path(__file__).parent / "data" / "fake_tile_example.py"


def fake_bin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "fake-ck-bin"
    d.mkdir()
    for name in ("tile_example_fmha_fwd", "tile_example_fmha_bwd"):
        exe = d / name
        exe.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return d


@pytest.fixture
def base(pytester, monkeypatch, tmp_path):
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    monkeypatch.delenv("CK_TILE_EXAMPLE_DIR", raising=False)
    return ["-p", "no:cacheprovider", "--ckfmha-arch", "gfx942", "--ckfmha-backend", "cpu"]


def test_missing_binaries_skip_every_item_with_the_reason(pytester, base, tmp_path):
    empty = tmp_path / "no-binaries"
    empty.mkdir()
    res = pytester.runpytest(
        *base,
        "--ckfmha-parity",
        "tile_example",
        "--ckfmha-upstream-bin",
        str(empty),
        "--ckfmha-report",
        "r.json",
        "-rs",
    )
    res.assert_outcomes(skipped=14)
    out = res.stdout.str()
    assert "tile_example_fmha_fwd" in out and "not found" in out
    rows = json.loads((pytester.path / "r.json").read_text())["rows"]
    assert len(rows) == 14 and {r["kind"] for r in rows} == {"parity"}
    assert {r["upstream_verdict"] for r in rows} == {"skipped"} and all(r["verdict"] == "skipped" for r in rows)
    assert rows[0]["id"].startswith("tile_example::default-01-basic_fp16")
    # nothing was compared: the run is not green, and says why
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(
        [
            "*ckfmha: ERROR: the upstream side ran for none of the 14 parity items (tile_example); "
            "nothing was compared: 1? x tile_example_fmha_fwd: not found in*"
        ]
    )


def test_auto_backend_runs_ckfmhas_side(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    empty = tmp_path / "no-binaries"
    empty.mkdir()
    res = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--ckfmha-parity",
        "tile_example",
        "--ckfmha-upstream-bin",
        str(empty),
        "--ckfmha-report",
        "r.json",
        "-k",
        "basic_fp16 or single_query",
    )
    rows = json.loads((pytester.path / "r.json").read_text())["rows"]
    assert len(rows) == 2 and {r["ckfmha_verdict"] for r in rows} == {"ran_valid"}  # backend auto ran (on cpu)
    assert "unknown backend" not in res.stdout.str()


def test_a_line_without_echo_or_kernel_is_never_a_pass(pytester, base, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_TILE_STDOUT", "[fp16|batch|bhsd] valid:y\n")
    monkeypatch.setenv("FAKE_TILE_RC", "0")
    bins = fake_bin_dir(tmp_path)
    res = pytester.runpytest_subprocess(
        *base, "--ckfmha-parity", "tile_example", "--ckfmha-upstream-bin", str(bins), "--ckfmha-report", "r.json"
    )
    res.assert_outcomes(failed=14)
    rows = json.loads((pytester.path / "r.json").read_text())["rows"]
    assert {r["upstream_verdict"] for r in rows} == {"unparseable"} and {r["parity_status"] for r in rows} == {"error"}


def test_disagreement_fails_with_both_sides_words(pytester, base, tmp_path, monkeypatch):
    monkeypatch.setenv(
        "FAKE_TILE_STDOUT",
        "[fp16|batch|bhsd] b:2, h:2/2, s:128/128, d:128/128, scale_s:0.0883883, "
        "bias:n, p_drop:0, lse:0, squant:0, mask:n, v:r, not supported yet\n",
    )
    monkeypatch.setenv("FAKE_TILE_RC", "254")
    bins = fake_bin_dir(tmp_path)
    res = pytester.runpytest_subprocess(
        *base,
        "--ckfmha-parity",
        "tile_example",
        "--ckfmha-upstream-bin",
        str(bins),
        "--ckfmha-report",
        "r.json",
        "-k",
        "basic_fp16 or single_query",
    )
    res.assert_outcomes(failed=2)
    out = res.stdout.str()
    assert "verdicts differ" in out and "not supported yet" in out and "ckfmha" in out
    rows = json.loads((pytester.path / "r.json").read_text())["rows"]
    assert len(rows) == 2
    for r in rows:
        assert r["verdict"] == "failed" and r["parity_status"] == "disagree"
        assert r["upstream_verdict"] == "unsupported" and r["ckfmha_verdict"] == "ran_valid"
        assert "not supported yet" in r["upstream_words"] and r["ckfmha_words"]


def test_category_shapes_join_the_parity_set(pytester, base):
    res = pytester.runpytest_subprocess(
        *base,
        "--ckfmha-parity",
        "tile_example",
        "--ckfmha-category",
        "smoke",
        "--ckfmha-family",
        "fwd_appendkv",
        "--collect-only",
        "-q",
    )
    ids = [ln for ln in res.stdout.lines if "::" in ln]
    parity = [i for i in ids if i.startswith("ckfmha-parity::")]
    matrix_shapes = {i.split("::")[1] for i in ids if i.startswith("ckfmha::")}
    assert len([i for i in parity if "::default-" in i]) == 14
    assert {i.split("::")[2] for i in parity if "::default-" not in i} == matrix_shapes and matrix_shapes


@pytest.mark.parametrize(
    "value, message",
    [
        ("cudnn", "--ckfmha-parity: 'cudnn' is not an upstream; allowed: tile_example, torch, torch:math"),
        ("torch:fast", "--ckfmha-parity: 'torch:fast' is not an upstream"),
    ],
)
def test_bad_parity_option(pytester, base, value, message):
    res = pytester.runpytest(*base, "--ckfmha-parity", value)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert message in res.stderr.str()


def test_bad_upstream_bin(pytester, base):
    res = pytester.runpytest(*base, "--ckfmha-parity", "tile_example", "--ckfmha-upstream-bin", "nowhere")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--ckfmha-upstream-bin: 'nowhere' is not a directory" in res.stderr.str()


def test_torch_parity_without_a_gpu_skips_with_the_reason(pytester, base):
    res = pytester.runpytest_subprocess(*base, "--ckfmha-parity", "torch:flash", "-k", "basic_fp16", "-rs")
    res.assert_outcomes(skipped=1)
    out = res.stdout.str()
    assert "no GPU" in out or "torch is not installed" in out or "not installed" in out
