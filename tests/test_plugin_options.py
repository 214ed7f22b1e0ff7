"""Option parsing: bad values are usage errors naming option, value and rule; no category -> no items."""

from __future__ import annotations

import pytest

from tests.test_plugin_fixtures import make_project

pytest_plugins = ["pytester"]


@pytest.mark.parametrize("args, needle", [
    (["--ckfmha-category", "weekly"], "--ckfmha-category: 'weekly' is not a category; allowed: smoke, full, nightly"),
    (["--ckfmha-backend", "cuda"], "--ckfmha-backend: 'cuda' is not a backend; allowed: auto, cpu, triton, hip"),
    (["--ckfmha-arch", "gfx999"], "--ckfmha-arch: 'gfx999' is not a known arch; known: gfx1100"),
    (["--ckfmha-family", "fwd,decode"], "--ckfmha-family: 'decode' is not a problem family"),
    (["--ckfmha-max-kernels-per-shape", "-1"], "--ckfmha-max-kernels-per-shape: '-1' must be >= 0"),
    (["--ckfmha-max-kernels-per-shape", "two"], "--ckfmha-max-kernels-per-shape: 'two' is not an integer"),
    (["--ckfmha-seed", "x"], "--ckfmha-seed: 'x' is not an integer"),
    (["--ckfmha-report", "out.xml"], "--ckfmha-report: 'out.xml' must end in .json or .csv"),
    (["--ckfmha-cpu-max-flops", "0"], "--ckfmha-cpu-max-flops: '0' must be a finite number > 0"),
    (["--ckfmha-receipt", "12345"], "--ckfmha-receipt: '12345' is not valid"),
    (["--ckfmha-profile", "nosuch"], "--ckfmha-profile: 'nosuch' is not valid"),
    (["--ckfmha-receipt", "2", "--ckfmha-profile", "flash"], "--ckfmha-profile: 'flash' cannot be combined"),
    (["--ckfmha-filter", "__import__('os')"], "--ckfmha-filter: \"__import__('os')\" is not a valid filter"),
    (["--ckfmha-filter-file", "nope.py"], "--ckfmha-filter-file: 'nope.py' does not exist"),
    (["--ckfmha-mask-mode", "fancy"], "--ckfmha-mask-mode: 'fancy' is not a mask mode"),
    (["--ckfmha-matrix", "missing.yaml"], "--ckfmha-matrix: 'missing.yaml' does not exist"),
])
def test_bad_values_are_usage_errors(pytester, monkeypatch, tmp_path, args, needle):
    base = make_project(pytester, monkeypatch, tmp_path)
    cat = [] if "--ckfmha-category" in args else ["--ckfmha-category", "smoke"]
    res = pytester.runpytest(*base, *cat, *args, "--collect-only")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert needle in res.stderr.str(), res.stderr.str()


def test_without_category_the_plugin_adds_nothing(pytester, monkeypatch, tmp_path):
    make_project(pytester, monkeypatch, tmp_path)
    pytester.makepyfile(test_plain="def test_one():\n    pass\n")
    res = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q")
    res.stdout.fnmatch_lines(["test_plain.py::test_one", "1 test collected*"])
    assert "ckfmha" not in res.stdout.str()


def test_category_alone_runs_only_the_matrix_and_paths_add_tests(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.makepyfile(test_plain="def test_one():\n    pass\n")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--collect-only", "-q")
    assert "test_plain.py" not in res.stdout.str()
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--collect-only", "-q", "test_plain.py")
    out = res.stdout.str()
    assert "test_plain.py::test_one" in out and "ckfmha::" in out


def test_ini_keys(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.makeini("[pytest]\nckfmha_max_kernels_per_shape = 1\nckfmha_seed = 7\nckfmha_arch = gfx950\n")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--collect-only", "-q")
    assert res.ret == 0
    assert len([ln for ln in res.stdout.lines if ln.startswith("ckfmha::") and not ln.endswith("::plan")]) == 2
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--collect-only")
    assert "arch gfx950 (ini)" in res.stdout.str() and "seed 7" in res.stdout.str()


def test_plugin_module_imports_nothing_heavy():
    import subprocess
    import sys

    code = ("import sys, pytest_ckfmha.plugin; bad = [m for m in ('numpy', 'torch', 'triton', 'ckfmha') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_unusable_cache_dir_is_one_clear_error(pytester, monkeypatch, tmp_path):
    from tests.test_plugin_fixtures import make_project

    base = make_project(pytester, monkeypatch, tmp_path)
    (tmp_path / "a_file").write_text("x")
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "a_file" / "cache"))
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = res.stderr.str()
    assert err.count("is not usable as a cache directory") == 1 and "Traceback" not in err
    assert "the cache directory ($CKFMHA_CACHE_DIR" in err and "--ckfmha-cache-dir" in err
