"""ckfmha.ck_smoke: CK's smoke scripts recorded with fake executables (a fake checkout, and the amd-aiter tree),
and every recorded line of the real tree read with CK's semantics."""

from __future__ import annotations

import collections
import json
import sys

import pytest

import ckfmha.receipts  # noqa: F401
import tests.test_plugin_fixtures  # noqa: F401  (imports what pytester's in-process runs must not import twice)
from ckfmha.backends.cache import cache_root
from ckfmha.ck_args import CKRefusal, ck_run_from_args
from ckfmha.ck_smoke import CKSmokeError, known_fails, record_key, record_smoke_lines, smoke_lines
from ckfmha.cktree import CKTreeError
from pytest_ckfmha.ck_smoke import line_id
from tests.ck_smoke_fake import KNOWN_FAIL_FWD, make_fake_checkout
from tests.ck_tree import ck_tree  # noqa: F401  (fixture)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_recording_a_fake_checkout(tmp_path, cache):
    root = make_fake_checkout(tmp_path / "ck")
    fwd = record_smoke_lines(root, "fwd")
    # -s doubles the num_splits loop; the repeated line is kept once, in the order the script first ran it
    assert [line.command for line in fwd[:2]] == [
        "tile_example_fmha_fwd -prec=fp16 -mode=0 -b=1 -h=2 -d=32 -s=16 -s_k=24 -p_drop=0.2 -num_splits=1 -kname=1 "
        "-v=1 -warmup=0 -repeat=1",
        "tile_example_fmha_fwd -prec=fp16 -mode=0 -b=1 -h=2 -d=32 -s=16 -s_k=24 -p_drop=0.2 -num_splits=2 -kname=1 "
        "-v=1 -warmup=0 -repeat=1",
    ]
    assert len(fwd) == 7 and len({line.args for line in fwd}) == 7
    assert [line.binary for line in smoke_lines(root)] == ["fwd"] * 7 + ["bwd"] * 2
    assert known_fails(root, "fwd", "gfx942") == frozenset({KNOWN_FAIL_FWD})
    assert KNOWN_FAIL_FWD in {line.command for line in fwd}
    assert known_fails(root, "bwd", "gfx942") == frozenset() == known_fails(root, "bwd", "gfx90a")  # absent file


def test_recording_is_cached_by_the_scripts_content(tmp_path, cache):
    root = make_fake_checkout(tmp_path / "ck")
    key = record_key(root, "fwd", "gfx942")
    first = record_smoke_lines(root, "fwd")
    cached = cache / "ck-smoke" / key / "fwd_gfx942.txt"
    assert cached.is_file() and len(cached.read_text().splitlines()) == len(first)
    cached.write_text("-from=the_cache\n")  # an unchanged script is not run again
    assert [line.args for line in record_smoke_lines(root, "fwd")] == [("-from=the_cache",)]
    script = root / "example/ck_tile/01_fmha/script/smoke_test_fwd.sh"
    script.write_text(script.read_text() + "run_exe -prec=bf16 -d=64 -s=8\n")  # an edited one records afresh
    assert record_key(root, "fwd", "gfx942") != key
    again = record_smoke_lines(root, "fwd")
    assert len(again) == 8 and again[-1].args == ("-prec=bf16", "-d=64", "-s=8")
    assert record_key(root, "fwd", "gfx950") != record_key(root, "fwd", "gfx942")


def test_a_failing_or_silent_script_is_an_error_naming_it(tmp_path, cache):
    root = make_fake_checkout(tmp_path / "ck", fwd="#!/bin/bash\necho broken >&2\nexit 3\n", bwd="#!/bin/bash\n")
    with pytest.raises(CKSmokeError, match=r"smoke_test_fwd.sh: the smoke script exited with status 3: broken"):
        record_smoke_lines(root, "fwd")
    with pytest.raises(CKSmokeError, match=r"smoke_test_bwd.sh: the smoke script ran no tile_example_fmha_bwd"):
        record_smoke_lines(root, "bwd")
    with pytest.raises(CKSmokeError, match=r"binary: 'combine' has no smoke script; allowed: fwd, bwd"):
        record_smoke_lines(root, "combine")
    with pytest.raises(CKTreeError, match="has no example/ck_tile/01_fmha/generate.py"):
        record_smoke_lines(tmp_path, "fwd")


def test_the_amd_aiter_trees_smoke_suites(ck_tree):  # noqa: F811
    """44,592 distinct lines (fwd with -s -a, and bwd); every one read with CK's semantics: 42,672 run (after the
    runner's normalizations) and 1,920 the runner itself refuses (group-mode -s_kpad with split-KV / paged-KV)."""
    lines = smoke_lines(ck_tree)
    counts = collections.Counter(line.binary for line in lines)
    assert counts == {"fwd": 43752, "bwd": 840} and len(lines) == 44592
    assert known_fails(ck_tree, "fwd", "gfx942") == frozenset() == known_fails(ck_tree, "bwd", "gfx942")
    runs, refused, said = 0, collections.Counter(), collections.Counter()
    for line in lines:
        try:
            run = ck_run_from_args(line.args, line.binary)
        except CKRefusal as e:
            refused[str(e).split(": ", 2)[2]] += 1
            continue
        runs += 1
        said.update(run.normalizations)
    assert runs == 42672
    assert refused == {
        "tile_example_fmha_fwd refuses the line: Padding (physical or effective lengths) is not supported with "
        "appendkv/splitkv/pagedkv pipelines": 1920
    }
    assert said == {
        "dropout is not supported by split-kv kernels. ignoring the 'p_drop' option": 17184,
        "paged-kvcache does not support cache_batch_idx. ignoring the 'cache_batch_idx' option": 10332,
        "group mode will not use cache_batch_idx. ignoring the 'cache_batch_idx' option": 4800,
    }


# ---------------------------------------------------------------------- the pytest suite (--ckfmha-ck-smoke)
pytest_plugins = ["pytester"]

ENUMERATION_CONFTEST = """
def pytest_ckfmha_kernels(config, arch):
    from ckfmha.registry import Registry

    return list(Registry.from_enumeration(arch))
"""


def _smoke_project(pytester, monkeypatch, tmp_path) -> list[str]:
    pytester.makeconftest(ENUMERATION_CONFTEST)  # the fake checkout's generate.py lists nothing: the built-in space
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    monkeypatch.delenv("CK_ROOT", raising=False)
    return ["-p", "no:cacheprovider", "--ckfmha-backend", "cpu", "--ckfmha-arch", "gfx942"]


def test_the_suite_over_a_fake_checkout(pytester, monkeypatch, tmp_path):
    base = _smoke_project(pytester, monkeypatch, tmp_path)
    root = make_fake_checkout(tmp_path / "ck")
    report = tmp_path / "r.json"
    args = [*base, "--ckfmha-ck-smoke", "all", "--ckfmha-ck-root", str(root), "--ckfmha-cpu-max-flops", "1e8"]
    res = pytester.runpytest(*args, "--ckfmha-report", str(report), "-rsxX")
    # fwd: 7 lines = 4 pass, the known fail (xfail; it passes on the cpu: XPASS), one over the FLOPs limit, one
    # CK's runner refuses; bwd: 2 pass
    res.assert_outcomes(passed=6, skipped=2, xpassed=1)
    res.stdout.fnmatch_lines(
        [
            "*shape has 4.29e+09 FLOPs, over the cpu backend's limit 1e+08 (--ckfmha-cpu-max-flops)*",
            "*CK's runner refuses the line (-s_kpad: '32': tile_example_fmha_fwd refuses the line: Padding*",
            f"XPASS *ckfmha::ck-smoke::{line_id('fwd', KNOWN_FAIL_FWD)}::plan - listed in *"
            "fmha_fwd_known_fails_gfx942.txt",
        ]
    )
    rows = {r["nodeid"]: r for r in json.loads(report.read_text())["rows"]}
    assert len(rows) == 9
    known = rows[f"ckfmha::ck-smoke::{line_id('fwd', KNOWN_FAIL_FWD)}::plan"]
    assert known["entry"] == KNOWN_FAIL_FWD and known["matrix"] == "smoke_test_fwd.sh"
    assert known["category"] == "ck_smoke" and known["family"] == "fwd" and known["verdict"] == "passed"
    # -k selects by the line's id; fwd alone collects the fwd lines
    one = line_id("bwd", "tile_example_fmha_bwd -prec=fp16 -b=1 -h=2 -d=32 -s=16 -s_k=24 -v=1 -kname=1")
    pytester.runpytest(*args, "-k", one).assert_outcomes(passed=1)
    fwd_only = pytester.runpytest(*base, "--ckfmha-ck-smoke", "fwd", "--ckfmha-ck-root", str(root), "--co", "-q")
    assert sum(" ckfmha::ck-smoke::fwd-" in f" {s}" for s in fwd_only.outlines) == 7
    assert not any("bwd-" in s for s in fwd_only.outlines)


def test_rows_carry_what_ck_changed_in_the_line(pytester, monkeypatch, tmp_path):
    base = _smoke_project(pytester, monkeypatch, tmp_path)
    root = make_fake_checkout(tmp_path / "ck")
    report = tmp_path / "r.json"
    split = "-p_drop=0.2 -num_splits=2"
    res = pytester.runpytest(
        *base, "--ckfmha-ck-smoke", "fwd", "--ckfmha-ck-root", str(root), "--ckfmha-report", str(report)
    )
    assert res.ret == 0
    rows = json.loads(report.read_text())["rows"]
    by_split = collections.defaultdict(set)
    for r in rows:
        by_split[split in r["entry"]].add(r["ck_normalizations"])
    # the split-KV lines with dropout: CK's words, verbatim; the other lines: nothing announced
    assert by_split[True] == {"dropout is not supported by split-kv kernels. ignoring the 'p_drop' option"}
    assert by_split[False] == {""}


# a fake tile_example_fmha_bwd that echoes the fake checkout's bwd lines (b=1 h=2 s=16 s_k=24): valid for d=32,
# CK's failed validation (valid:n, exit 254) for the other hdims unless FAKE_ALL_VALID is set -- NOT CK
FAKE_BWD = """import math, os, sys
d = int(next(a.split("=")[1] for a in sys.argv if a.startswith("-d=")))
ok = d == 32 or os.environ.get("FAKE_ALL_VALID") == "1"
if os.environ.get("FAKE_ARGV_DIR"):
    with open(os.path.join(os.environ["FAKE_ARGV_DIR"], f"d{d}.txt"), "w") as fh:
        fh.write(" ".join(sys.argv[1:]))
print(f"[fp16|batch|bhsd] b:1, h:2/2, s:16/24, d:{d}/{d}, scale:{1 / math.sqrt(d):.6f}, bias:n, dbias:0, p_drop:0, "
      f"s_randval:0, deterministic:0, mask:n, fmha_bwd_dot_do_o_d{d}_fp16_batch_b64_o2_psddv, 0.085 ms, "
      f"2.56 TFlops, 31.21 GB/s, valid:{'y' if ok else 'n'}")
sys.exit(0 if ok else 254)
"""


def _fake_bwd_binary(tmp_path) -> str:
    d = tmp_path / "bin"
    d.mkdir()
    exe = d / "tile_example_fmha_bwd"  # no fwd binary: the fwd lines skip ("not found")
    exe.write_text(f"#!{sys.executable}\n" + FAKE_BWD)
    exe.chmod(0o755)
    return str(d)


def test_parity_mode_runs_each_line_as_the_script_did(pytester, monkeypatch, tmp_path):
    base = _smoke_project(pytester, monkeypatch, tmp_path)
    root = make_fake_checkout(tmp_path / "ck")
    argv_dir = tmp_path / "argv"
    argv_dir.mkdir()
    monkeypatch.setenv("FAKE_ARGV_DIR", str(argv_dir))
    report = tmp_path / "r.json"
    args = [*base, "--ckfmha-ck-smoke", "all", "--ckfmha-ck-root", str(root), "--ckfmha-parity", "tile_example"]
    args += ["--ckfmha-upstream-bin", _fake_bwd_binary(tmp_path), "--ckfmha-report", str(report), "-rs"]
    res = pytester.runpytest(*args)
    # bwd: d32 agrees, d64 disagrees (CK: valid:n; ckfmha: valid); fwd: 6 lines without a binary, 1 CK refuses;
    # upstream's 14 default parity problems are not added
    res.assert_outcomes(passed=1, failed=1, skipped=7)
    res.stdout.fnmatch_lines(["*tile_example_fmha_fwd: not found in*"])
    rows = {r["nodeid"]: r for r in json.loads(report.read_text())["rows"]}
    assert len(rows) == 9 and not any("default-" in n for n in rows)
    line32 = "tile_example_fmha_bwd -prec=fp16 -b=1 -h=2 -d=32 -s=16 -s_k=24 -v=1 -kname=1"
    line64 = line32.replace("-d=32", "-d=64")
    ok, bad = (rows[f"ckfmha::ck-smoke::{line_id('bwd', x)}::parity"] for x in (line32, line64))
    assert (ok["verdict"], ok["parity_status"], ok["upstream_verdict"], ok["ckfmha_verdict"]) == (
        "passed",
        "agree",
        "ran_valid",
        "ran_valid",
    )
    assert ok["kind"] == "parity" and ok["entry"] == line32 and ok["matrix"] == "smoke_test_bwd.sh"
    assert (bad["verdict"], bad["parity_status"], bad["upstream_verdict"]) == ("failed", "disagree", "ran_invalid")
    # the binary got the script's line itself, then the runner's options; no -seed (the line's own decides)
    got = (argv_dir / "d32.txt").read_text().split()
    n = len(line32.split()) - 1
    assert got[:n] == line32.split()[1:] and got[n : n + 4] == ["-v=1", "-kname=1", "-warmup=0", "-repeat=1"]
    assert not any(a.startswith("-seed") for a in got)


def test_last_failed_reruns_the_failed_smoke_line(pytester, monkeypatch, tmp_path):
    base = [a for a in _smoke_project(pytester, monkeypatch, tmp_path) if a not in ("-p", "no:cacheprovider")]
    root = make_fake_checkout(tmp_path / "ck")
    args = [*base, "--ckfmha-ck-smoke", "all", "--ckfmha-ck-root", str(root), "--ckfmha-parity", "tile_example"]
    args += ["--ckfmha-upstream-bin", _fake_bwd_binary(tmp_path)]
    pytester.runpytest(*args).assert_outcomes(passed=1, failed=1, skipped=7)
    again = pytester.runpytest(*args, "--lf")
    again.assert_outcomes(failed=1, deselected=8)  # only the d64 line ran
    monkeypatch.setenv("FAKE_ALL_VALID", "1")  # CK's binary fixed: the line passes, then --lf runs everything
    pytester.runpytest(*args, "--lf").assert_outcomes(passed=1, deselected=8)
    pytester.runpytest(*args, "--lf").assert_outcomes(passed=2, skipped=7)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--ckfmha-ck-smoke", "fwd"], "--ckfmha-ck-smoke: 'fwd' needs a CK checkout whose smoke scripts it runs"),
        (["--ckfmha-ck-smoke", "xyz"], "--ckfmha-ck-smoke: 'xyz' is not a smoke suite; allowed: fwd, bwd, all"),
    ],
)
def test_option_errors_name_the_option_value_and_rule(pytester, monkeypatch, tmp_path, args, needle):
    base = _smoke_project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest(*base, *args, "--collect-only")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert needle in res.stderr.str()


def test_a_sample_of_the_real_tree_runs_green_on_the_cpu(pytester, monkeypatch, tmp_path, ck_tree):  # noqa: F811
    cache = cache_root()  # where the tree and its recording are kept
    base = _smoke_project(pytester, monkeypatch, tmp_path)
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(cache))
    report = tmp_path / "r.json"
    res = pytester.runpytest(
        *base,
        "--ckfmha-ck-smoke",
        "all",
        "--ckfmha-ck-root",
        str(ck_tree),
        "--ckfmha-isolation",
        "inline",
        "-k",
        "fwd-ab or bwd-8",  # ids are hashes: about 1/256 of the fwd lines and 1/16 of the bwd ones
        "--ckfmha-report",
        str(report),
    )
    outcomes = res.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("error", 0) == 0
    rows = json.loads(report.read_text())["rows"]
    passed = [r for r in rows if r["verdict"] == "passed"]
    skipped = collections.Counter(r["reason"].split(" (")[0] for r in rows if r["verdict"] == "skipped")
    assert len(passed) >= 200 and {r["family"] for r in passed} >= {"fwd", "fwd_splitkv", "fwd_pagedkv", "bwd"}
    assert set(skipped) <= {"CK's runner refuses the line"}, skipped


@pytest.mark.parametrize("parity", [None, "tile_example"])
def test_rows_of_smoke_items_that_never_reported_are_described(tmp_path, cache, parity):
    """A smoke item whose own values never arrived (a crashed xdist worker, an interrupted session) still gets a
    report row naming its line, script and CK's normalizations (State.describe)."""
    import dataclasses

    from pytest_ckfmha.options import Settings
    from pytest_ckfmha.state import State

    root = make_fake_checkout(tmp_path / "ck")
    names = [f.name for f in dataclasses.fields(Settings) if f.default is dataclasses.MISSING]
    base = dict.fromkeys(names)
    base.update(arch="gfx942", backend="cpu", seed=0, reports=(), max_kernels_per_shape=1, cache_dir=cache)
    settings = Settings(**{**base, "ck_smoke": "fwd", "ck_root": root, "parity": parity})
    state = State(None, settings)
    split = next(
        s for s in state.smoke_specs() if getattr(s, "normalizations", ()) and "-d=32" in s.command
    )  # a split-KV line with dropout: CK drops p_drop
    name = "plan" if parity is None else "parity"
    row = state.describe(f"ckfmha::ck-smoke::{split.shape_id}::{name}")
    assert row["id"] == f"{split.shape_id}::{name}" and row["entry"] == split.command
    assert row["matrix"] == "smoke_test_fwd.sh" and row["kind"] == ("plan" if parity is None else "parity")
    assert row["ck_normalizations"] == "dropout is not supported by split-kv kernels. ignoring the 'p_drop' option"


RAISING_KERNELS_CONFTEST = """
def pytest_ckfmha_kernels(config, arch):
    raise RuntimeError("this kernel space cannot be read")
"""


def test_a_kernel_space_that_cannot_be_read_fails_the_items_not_the_session(pytester, monkeypatch, tmp_path):
    """The kernel child is forked before the collection after the kernel set is built; a kernel set that raises
    there must leave the run as it was without the early fork: each item fails naming the error, no INTERNALERROR,
    and the report is written."""
    base = _smoke_project(pytester, monkeypatch, tmp_path)
    pytester.makeconftest(RAISING_KERNELS_CONFTEST)
    root = make_fake_checkout(tmp_path / "ck")
    report = tmp_path / "r.json"
    res = pytester.runpytest_subprocess(
        *base, "--ckfmha-ck-smoke", "fwd", "--ckfmha-ck-root", str(root), "--ckfmha-report", str(report), timeout=120
    )
    out = res.stdout.str() + res.stderr.str()
    assert "INTERNALERROR" not in out and res.ret == pytest.ExitCode.TESTS_FAILED, out
    assert "this kernel space cannot be read" in out
    assert report.is_file() and json.loads(report.read_text())["state"] == "complete"
