"""Option parsing: bad values are usage errors naming option, value and rule; no category -> no items."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.test_plugin_fixtures import make_project

pytest_plugins = ["pytester"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ["--ckfmha-category", "weekly"],
            "--ckfmha-category: 'weekly' is not a category; allowed: smoke, full, nightly",
        ),
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
        (["--ckfmha-receipt", "2", "--ckfmha-profile", "flash"], "--ckfmha-profile: 'flash' is not valid: receipt/"),
        (["--ckfmha-filter", "__import__('os')"], "--ckfmha-filter: \"__import__('os')\" is not a valid filter"),
        (["--ckfmha-filter-file", "nope.py"], "--ckfmha-filter-file: 'nope.py' does not exist"),
        (["--ckfmha-mask-mode", "fancy"], "--ckfmha-mask-mode: 'fancy' is not a mask mode"),
        (["--ckfmha-matrix", "missing.yaml"], "--ckfmha-matrix: 'missing.yaml' does not exist"),
        (["--ckfmha-memory-budget", "lots"], "--ckfmha-memory-budget: 'lots' is not auto, none, a share"),
        (["--ckfmha-memory-budget", "1.5"], "--ckfmha-memory-budget: '1.5' is not a share in (0, 1]"),
        (["--ckfmha-memory-budget", "0GB"], "--ckfmha-memory-budget: '0GB' is no memory: a size must be > 0"),
    ],
)
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

    # the plugin module, and its option definitions (read at every pytest start), import no NumPy, torch, triton,
    # YAML or ckfmha module beyond the package file and its category list
    code = (
        "import sys, pytest_ckfmha.plugin, pytest_ckfmha.options; bad = [m for m in sys.modules if m in "
        "('numpy', 'torch', 'triton', 'yaml') or (m.startswith('ckfmha.') and m != 'ckfmha.categories')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
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


# ---------------------------------------------------------------------- the converter table (options.parse)
class _FakeConfig:
    """What options.parse reads of a pytest.Config: command-line options, ini values, the two base directories."""

    def __init__(self, tmp_path, opts=(), ini=()):
        from pytest_ckfmha.options import OPTIONS

        self.opts = {f"ckfmha_{k.replace('-', '_')}": v for k, v in dict(opts).items()}
        self.ini = {f"ckfmha_{k.replace('-', '_')}": v for k, v in dict(ini).items()}
        self.ini_keys = {row.dest for row in OPTIONS if row.ini}
        self.rootpath = tmp_path
        self.invocation_params = type("InvocationParams", (), {"dir": tmp_path})()

    def getoption(self, dest, default=None):
        return self.opts.get(dest, default)

    def getini(self, dest):
        if dest not in self.ini_keys:
            raise ValueError(f"unknown ini key {dest}")
        return self.ini.get(dest)


def _parse(tmp_path, monkeypatch, opts=(), ini=(), detected=None):
    from pytest_ckfmha.options import parse

    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    return parse(_FakeConfig(tmp_path, opts, ini), detected)


def test_every_option_is_one_row_and_choices_show_in_the_metavar():
    import dataclasses

    from pytest_ckfmha.options import OPTIONS, Settings

    names = [row.name for row in OPTIONS]
    assert len(names) == len(set(names)) and all(row.convert or row.choices for row in OPTIONS)
    computed = {f.name for f in dataclasses.fields(Settings) if "option" not in f.metadata}
    assert computed == {"arch_source", "gpu_marker"}  # every other setting is an option's
    metavars = {row.name: row.shown_metavar for row in OPTIONS}
    assert (metavars["category"], metavars["backend"], metavars["mask-mode"], metavars["isolation"]) == (
        "{smoke,full,nightly}",
        "{auto,cpu,triton,hip}",
        "{simplified,generic}",
        "{process,inline}",
    )


def test_defaults_and_converted_values(tmp_path, monkeypatch):
    s = _parse(tmp_path, monkeypatch)
    assert (
        s.category,
        s.arch,
        s.arch_source,
        s.backend,
        s.families,
        s.mask_mode,
        s.max_kernels_per_shape,
        s.seed,
        s.reports,
        s.bench,
        s.timeout,
        s.isolation,
        s.allow_empty,
    ) == (None, "gfx942", "default", "auto", None, "simplified", 2, 0, (), False, 600.0, "process", False)
    assert s.cache_dir == tmp_path / "cache" and not s.active
    s = _parse(
        tmp_path,
        monkeypatch,
        opts={
            "category": "smoke",
            "family": ["fwd, splitkv", "fwd"],
            "seed": "0x10",
            "backend": " cpu ",
            "timeout": "2.5",
            "report": ["a.json,b.csv"],
        },
        ini={"arch": "gfx950", "bench": "yes", "max-kernels-per-shape": "0"},
    )
    assert (
        s.category,
        s.arch,
        s.arch_source,
        s.families,
        s.seed,
        s.backend,
        s.timeout,
        s.bench,
        s.max_kernels_per_shape,
    ) == ("smoke", "gfx950", "ini", ("fwd", "fwd_splitkv"), 16, "cpu", 2.5, True, 0)
    assert s.reports == (Path("a.json"), Path("b.csv"))


def test_an_empty_choice_on_the_command_line_is_an_error_not_the_default(tmp_path, monkeypatch):
    for option, noun, allowed in (
        ("backend", "a backend", "auto, cpu, triton, hip"),
        ("isolation", "an isolation", "process, inline"),
        ("category", "a category", "smoke, full, nightly"),
    ):
        with pytest.raises(pytest.UsageError) as e:
            _parse(tmp_path, monkeypatch, opts={option: ""})
        assert str(e.value) == f"--ckfmha-{option}: '' is not {noun}; allowed: {allowed}"


def test_flag_words_are_checked(tmp_path, monkeypatch):
    assert _parse(tmp_path, monkeypatch, ini={"bench": "yes"}).bench is True
    assert _parse(tmp_path, monkeypatch, ini={"bench": "off"}).bench is False


def test_ini_values_go_through_the_same_converters(tmp_path, monkeypatch):
    with pytest.raises(pytest.UsageError) as e:
        _parse(tmp_path, monkeypatch, ini={"isolation": "thread"})
    assert str(e.value) == "--ckfmha-isolation: 'thread' is not an isolation; allowed: process, inline"
    with pytest.raises(pytest.UsageError) as e:
        _parse(tmp_path, monkeypatch, ini={"report-every": "0"})
    assert str(e.value) == "--ckfmha-report-every: '0' must be a finite number of seconds > 0"


@pytest.mark.parametrize(
    "opts,msg",
    [
        # the first bad option in the table's order; a rule between options right after the later of them
        (
            {"receipt": "999", "profile": "flash", "mask-mode": "fancy"},
            "--ckfmha-profile: 'flash' is not valid: receipt/profile: give one of them, not both (receipt='999', "
            "profile='flash')",
        ),
        ({"mask-mode": "fancy", "seed": "x"}, "--ckfmha-mask-mode: 'fancy' is not a mask mode"),
        (
            {"timeout": "5", "isolation": "inline", "cpu-max-flops": "0"},
            "--ckfmha-timeout: '5' cannot be enforced with --ckfmha-isolation inline",
        ),
        ({"timeout": "x", "report-every": "0"}, "--ckfmha-timeout: 'x' is not a number of seconds"),
        ({"cpu-max-flops": "inf", "parity": "x"}, "--ckfmha-cpu-max-flops: 'inf' must be a finite number > 0"),
        ({"seed": str(2**32)}, "--ckfmha-seed: '4294967296' must be < 2**32"),
        ({"upstream-bin": "nope"}, "--ckfmha-upstream-bin: 'nope' is not a directory"),
    ],
)
def test_the_first_bad_option_is_the_error(tmp_path, monkeypatch, opts, msg):
    with pytest.raises(pytest.UsageError) as e:
        _parse(tmp_path, monkeypatch, opts=opts)
    assert str(e.value).startswith(msg)


def test_a_timeout_from_the_ini_file_is_not_enforced_inline(tmp_path, monkeypatch):
    s = _parse(tmp_path, monkeypatch, opts={"isolation": "inline"}, ini={"timeout": "5"})
    assert (s.isolation, s.timeout) == ("inline", 5.0)


def test_an_ini_choice_is_checked_by_pytest_too(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.makeini("[pytest]\nckfmha_backend = cuda\n")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--collect-only")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--ckfmha-backend: 'cuda' is not a backend; allowed: auto, cpu, triton, hip" in res.stderr.str()


# ------------------------------------------------------------------------------ arch detection through nvidia-smi
def _fake_smi(tmp_path, monkeypatch, body: str) -> None:
    """A fake ``nvidia-smi`` first on PATH: a shell script with ``body``, which may read its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '')}")


def test_nvidia_smi_names_the_first_visible_gpu(tmp_path, monkeypatch) -> None:
    from pytest_ckfmha.options import nvidia_smi_arch

    _fake_smi(tmp_path, monkeypatch, 'if [ "$4" = "GPU-b" ]; then echo 8.0; else echo 9.0; fi')
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvidia_smi_arch() == "sm90"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-b,GPU-c")
    assert nvidia_smi_arch() == "sm80"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU visible
    assert nvidia_smi_arch() is None


def test_nvidia_smi_failing_or_odd_answers_are_not_an_arch(tmp_path, monkeypatch) -> None:
    from pytest_ckfmha.options import nvidia_smi_arch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    _fake_smi(tmp_path, monkeypatch, "echo 'NVIDIA-SMI has failed'; exit 9")
    assert nvidia_smi_arch() is None
    _fake_smi(tmp_path, monkeypatch, "echo '[N/A]'")
    assert nvidia_smi_arch() is None
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert nvidia_smi_arch() is None
