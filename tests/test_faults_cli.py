"""``ckfmha adequacy`` and ``--ckfmha-fault`` on a one-shape matrix: a GQA shape catches ``gqa_head_map`` (exit 0,
the catching items named), a shape without GQA lets it escape (exit 1); bad arguments exit 2 naming the option,
the value and the rule; the plugin option makes a normal run fail, and a fault needs the cpu backend; with
``--backend triton`` each fault the Triton backend hosts runs over its Triton row's families and the others are
printed with the catalogue's reason (the pytest runs faked: the kernel runs are tests/test_triton_faults.py's)."""

from __future__ import annotations

import pytest

from ckfmha.cli import main

pytest_plugins = ["pytester"]

MATRIX = """schema: 1
family: fwd
entries:
  - name: one
    category: smoke
    batch: 1
    nhead_q: 4
    nhead_k: {hk}
    seqlen_q: 32
    hdim_q: 64
    lse: true
"""
SHAPE = "fwd-fp16-batch-b1h4k2s32d64-lse"


def _matrix(tmp_path, hk: int):
    path = tmp_path / f"m{hk}.yaml"
    path.write_text(MATRIX.format(hk=hk))
    return path


def _adequacy(tmp_path, capsys, *args: str) -> tuple[int, str, str]:
    code = main(["adequacy", "--category", "smoke", "--cache-dir", str(tmp_path / "cache"), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_gqa_shape_catches_the_head_map_fault(tmp_path, capsys) -> None:
    m2 = str(_matrix(tmp_path, 2))
    code, out, _ = _adequacy(
        tmp_path, capsys, "--fault", "gqa_head_map", "--fault", "lse_base2", "--matrix", m2, "--first", "2"
    )
    lines = out.splitlines()
    assert code == 0, out
    assert lines[0].startswith("baseline: category smoke, backend cpu, families fwd,fwd_splitkv,fwd_pagedkv,")
    assert "3 items (3 passed, 0 skipped, 0 failing without a fault)" in lines[0]
    caught = lines[1].split()
    assert caught[:3] == ["caught", "gqa_head_map", "[fwd,fwd_splitkv,fwd_pagedkv,fwd_appendkv,batch_prefill,bwd]"]
    named = lines[1].split("by: ")[1].split(", ")
    assert len(named) == 2 and all(i.startswith(SHAPE + "::") for i in named)  # --first 2 of the 3 failing items
    assert lines[2].split()[:2] == ["caught", "lse_base2"]  # the LSE is compared
    assert lines[-1] == "2 fault(s): 2 caught, 0 escaped, 0 error(s)"


def test_without_gqa_the_fault_escapes(tmp_path, capsys) -> None:
    m4 = str(_matrix(tmp_path, 4))
    code, out, _ = _adequacy(tmp_path, capsys, "--fault", "gqa_head_map", "--family", "fwd", "--matrix", m4)
    lines = out.splitlines()
    assert code == 1, out
    assert lines[1].split()[:3] == ["ESCAPED", "gqa_head_map", "[fwd]"]
    assert lines[1].endswith("3 item(s) ran, 0 skipped, none failed")
    assert lines[-1] == "1 fault(s): 0 caught, 1 escaped, 0 error(s)"


@pytest.mark.parametrize(
    "args, words",
    [
        (["--fault", "gqa_map"], "ckfmha adequacy: error: --fault: 'gqa_map' is not a catalogued fault; known: "),
        (["--backend", "hip"], "--backend: 'hip' has no fault hooks; faults are injected into: cpu, triton"),
        (
            ["--backend", "triton", "--fault", "tile_corruption_2pct"],
            "--fault: 'tile_corruption_2pct' cannot be injected into the triton backend: the class is an LDS sizing",
        ),
        (["--fault", "ds_missing_d", "--family", "fwd"], "--family: fwd selects none of the families of the selected"),
        (["--family", "decode"], "--family: 'decode' is not a problem family"),
        (["--first", "0"], "--first: 0 must be >= 1"),
    ],
)
def test_bad_arguments_exit_2_naming_the_option(tmp_path, capsys, args, words) -> None:
    code, _, err = _adequacy(tmp_path, capsys, *args)
    assert code == 2 and words in err, err


def test_the_plugin_option_injects_the_fault(pytester, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    pytester.makefile(".yaml", small=MATRIX.format(hk=2))
    base = ["-p", "no:cacheprovider", "--ckfmha-category", "smoke", "--ckfmha-matrix", "small.yaml"]
    clean = pytester.runpytest(*base, "--ckfmha-backend", "cpu")
    clean.assert_outcomes(passed=3)
    faulty = pytester.runpytest(*base, "--ckfmha-backend", "cpu", "--ckfmha-fault", "gqa_head_map")
    faulty.assert_outcomes(failed=3)
    again = pytester.runpytest(*base, "--ckfmha-backend", "cpu")  # the fault was the item work's only
    again.assert_outcomes(passed=3)
    res = pytester.runpytest(*base, "--ckfmha-backend", "cpu", "--ckfmha-fault", "gqa_map", "--collect-only")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--ckfmha-fault: 'gqa_map' is not a catalogued fault (fault: 'gqa_map' is not*"])
    res = pytester.runpytest(*base, "--ckfmha-fault", "gqa_head_map", "--collect-only")
    res.stderr.fnmatch_lines(
        ["*--ckfmha-fault: 'gqa_head_map' needs --ckfmha-backend naming the backend to inject it into (given: auto)*"]
    )
    res = pytester.runpytest(*base, "--ckfmha-backend", "hip", "--ckfmha-fault", "gqa_head_map", "--collect-only")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--ckfmha-fault: 'gqa_head_map'*backend hip*"])
    res = pytester.runpytest(
        *base, "--ckfmha-backend", "triton", "--ckfmha-fault", "tile_corruption_2pct", "--collect-only"
    )
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*'tile_corruption_2pct' cannot be injected into the triton backend: *"])
    res = pytester.runpytest(*base, "--ckfmha-backend", "triton", "--ckfmha-fault", "gqa_head_map", "--collect-only")
    assert res.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), res.stderr.str()


def test_triton_runs_each_hosted_fault_and_names_why_the_others_are_not(tmp_path, capsys, monkeypatch) -> None:
    from ckfmha import cli_adequacy
    from ckfmha.faults import catalogue

    calls: list[tuple] = []

    def fake_run(args, families, fault, maxfail):
        calls.append((args.backend, families, fault, maxfail))
        verdict = "passed" if fault is None else "failed"
        return cli_adequacy.RunOutcome({f"{SHAPE}::a": verdict, f"{SHAPE}::b": "passed"}, "", 0.1, 0)

    monkeypatch.setattr(cli_adequacy, "pytest_run", fake_run)
    code, out, _ = _adequacy(tmp_path, capsys, "--backend", "triton")
    lines = out.splitlines()
    assert code == 0, out
    faults = catalogue()
    hosted = [n for n, f in faults.items() if f.injection("triton").injectable]
    assert len(hosted) == 27
    assert all(c[0] == "triton" for c in calls) and calls[0][2] is None  # the baseline first, on triton
    assert [c[2] for c in calls[1:]] == hosted  # one run per hosted fault, none for the others
    for _, families, fault, _ in calls[1:]:
        assert families == faults[fault].injection("triton").families
    assert "bwd" not in calls[1 + hosted.index("masked_rows_nan")][1]  # the Triton row's families
    assert lines[0].startswith("baseline: category smoke, backend triton, families ")
    by_name = {ln.split()[1]: ln for ln in lines[1:-1]}
    for name, f in faults.items():
        if name in hosted:
            assert by_name[name].startswith("caught ") and by_name[name].endswith(f"by: {SHAPE}::a"), name
        else:
            reason = f.injection("triton").reason
            assert by_name[name].split()[0] == "n/i", name
            assert by_name[name].endswith(f"not injectable into the triton backend: {reason}"), name
    assert lines[-1] == "28 fault(s): 27 caught, 0 escaped, 0 error(s), 1 not injectable into triton"


def test_the_pytest_run_of_a_triton_fault(tmp_path, monkeypatch) -> None:
    import argparse
    import subprocess

    from ckfmha import cli_adequacy

    seen: list[list[str]] = []

    envs: list[dict] = []

    def fake(cmd, **kwargs):
        seen.append(cmd)
        envs.append(kwargs["env"])
        return subprocess.CompletedProcess(cmd, 4, "no report", "")

    monkeypatch.setattr(cli_adequacy.subprocess, "run", fake)
    args = argparse.Namespace(category="smoke", backend="triton", matrix=[], arch=None, cache_dir=None)
    run = cli_adequacy.pytest_run(args, ("bwd",), "ds_missing_d", 5)
    assert run.verdicts is None and run.returncode == 4
    cmd = seen[0]
    assert cmd[cmd.index("--ckfmha-backend") + 1] == "triton"
    assert "--ckfmha-fault=ds_missing_d" in cmd and "--ckfmha-family=bwd" in cmd and "--maxfail=5" in cmd
    monkeypatch.delenv("CKFMHA_NO_DETECT", raising=False)
    cli_adequacy.pytest_run(args, ("bwd",), None, 0)
    assert "CKFMHA_NO_DETECT" not in envs[-1]  # the plugin detects the GPU's arch for Triton
    args.backend = "cpu"
    cli_adequacy.pytest_run(args, ("bwd",), None, 0)
    assert envs[-1]["CKFMHA_NO_DETECT"] == "1"  # the cpu backend: the default arch, no detection
    assert "-n" not in seen[-1]
    args.workers = "16"
    cli_adequacy.pytest_run(args, ("bwd",), "ds_missing_d", 5)
    assert seen[-1][seen[-1].index("-n") + 1] == "16"  # pytest-xdist's workers


@pytest.mark.parametrize("bad", ["0", "-2", "many"])
def test_adequacy_names_a_bad_worker_count(bad, capsys) -> None:
    from ckfmha.cli import main

    assert main(["adequacy", "--category", "smoke", "--workers", bad]) == 2
    assert f"--workers: {bad!r} must be a count >= 1 or 'auto'" in capsys.readouterr().err


# slow (tests/conftest.py): the packaged smoke category once clean and once per catalogued fault on the cpu
# backend -- the CI's guard that smoke keeps catching every fault (a removed shape lets one escape: exit 1)
def test_smoke_catches_every_catalogued_fault_on_the_cpu_backend(tmp_path, capsys) -> None:
    from ckfmha.faults import catalogue

    code, out, _ = _adequacy(tmp_path, capsys, "--workers", "2")
    lines = out.splitlines()
    escaped = [ln for ln in lines if ln.startswith("ESCAPED")]
    assert not escaped, out
    assert lines[-1] == f"{len(catalogue())} fault(s): {len(catalogue())} caught, 0 escaped, 0 error(s)", out
    assert code == 0, out
