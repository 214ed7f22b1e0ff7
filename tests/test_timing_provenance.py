"""Issue 28, findings 3 and 4: timings carry what measured them (``ckfmha compare`` / ``tune`` refuse emulated
timings and runs whose seeds, devices or clocks differ, with an override; untimed runs say so) and reports carry
their provenance (ckfmha's version and git commit, the CK checkout, the host, the GPU UUIDs)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import ckfmha
from ckfmha.cli import main
from ckfmha.runreport import (
    ReportError,
    ck_identity,
    compare_reports,
    git_identity,
    load_report,
    merge_reports,
    report_from_doc,
    write_report_doc,
)
from pytest_ckfmha.reporting import environment

pytest_plugins = ["pytester"]

H100 = {"backend": "triton", "device": "NVIDIA H100 80GB HBM3", "clocks": "sm, mem: 1980 MHz, 2619 MHz"}
CPU = {"backend": "cpu", "device": "cpu (x86_64)"}


def row(rid: str, ms: float | None = 1.0, on: dict | None = None, **extra) -> dict:
    r = {"id": rid, "verdict": "passed", "family": "fwd", "kind": "kernel", "reason": "", "kernel_id": rid}
    r.update(dtype="fp16", mode="batch", hdim_q=64, hdim_v=64, mask="0", seqlen_q=128, seqlen_k=128, seed=0)
    r.update(H100 if on is None else on)
    if ms is not None:
        r.update(time_ms=ms, time_min_ms=ms, time_max_ms=ms, timed=True, repeats=10)
    return {**r, **extra}


def doc(rows, **meta) -> dict:
    base = {"schema": "ckfmha.report", "version": 2, "state": "complete", "arch": "gfx942", "seed": 0}
    return {**base, "collected": len(rows), "completed": len(rows), **meta, "rows": rows}


def write(path: Path, rows, **meta) -> str:
    path.write_text(json.dumps(doc(rows, **meta)))
    return str(path)


# ------------------------------------------------------------------------------------------ finding 3: compare
def test_compare_refuses_emulated_timings_and_names_the_override(tmp_path: Path, capsys) -> None:
    """Two back-to-back --ckfmha-bench runs on the cpu backend: their times measure NumPy, not a kernel."""
    a = write(tmp_path / "a.json", [row("x::k", 1.0, CPU), row("y::k", 1.0, CPU)])
    b = write(tmp_path / "b.json", [row("x::k", 1.5, CPU), row("y::k", 1.0, CPU)])
    assert main(["compare", a, b]) == 2
    err = capsys.readouterr().err
    assert "emulation" in err and "backend cpu" in err and "--allow-emulated" in err
    assert main(["compare", a, b, "--allow-emulated"]) == 1  # compared, flagged
    out = capsys.readouterr().out
    assert "WARNING: not like for like, compared anyway (--allow-emulated)" in out and "slower: 1" in out
    assert main(["compare", a, b, "--verdicts-only"]) == 0  # no timing compared, none checked
    out = capsys.readouterr().out
    assert "timings not compared (--verdicts-only)" in out and "WARNING" not in out


def test_compare_refuses_the_triton_interpreter_too(tmp_path: Path, capsys) -> None:
    interp = {"backend": "triton", "device": "Triton interpreter (CPU)"}
    a = write(tmp_path / "a.json", [row("x::k", 1.0, interp)])
    assert main(["compare", a, a]) == 2
    assert "Triton interpreter" in capsys.readouterr().err


@pytest.mark.parametrize(
    "change, key, words",
    [
        ({"seed": 1}, "seed", "seed: 0 in"),
        ({"device": "NVIDIA H200"}, "devices", "NVIDIA H200"),
        ({"clocks": "sm, mem: 1500 MHz, 2619 MHz"}, "clocks", "1980 MHz"),
    ],
)
def test_compare_refuses_other_seeds_devices_and_clocks(tmp_path: Path, capsys, change, key, words) -> None:
    seed = change.get("seed", 0)
    rowed = {k: v for k, v in change.items() if k != "seed"}
    a = write(tmp_path / "a.json", [row("x::k")])
    b = write(tmp_path / "b.json", [row("x::k", **rowed)], seed=seed)
    assert main(["compare", a, b]) == 2
    err = capsys.readouterr().err
    assert f"{key}:" in err and words in err and "--force" in err
    assert main(["compare", a, b, "--force", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [m["key"] for m in got["mismatches"]] == [key] and got["mismatches"][0]["flag"] == "--force"
    # the seed decides the inputs, so verdicts of other seeds are refused too; devices and clocks only time
    assert main(["compare", a, b, "--verdicts-only"]) == (2 if key == "seed" else 0)


def test_clocks_within_the_tolerance_and_gpu_uuids_do_not_count(tmp_path: Path) -> None:
    a = [row("x::k", gpu="0:GPU-aaaa"), row("y::k", gpu="0:GPU-aaaa")]
    b = [row("x::k", clocks="sm, mem: 1950 MHz, 2619 MHz", gpu="3:GPU-bbbb"), row("y::k", gpu="3:GPU-bbbb")]
    cmp = compare_reports(report_from_doc(doc(a), "a.json"), report_from_doc(doc(b), "b.json"))
    assert cmp.mismatches == [] and cmp.timed == 2 and not cmp.regressed


def test_compare_of_untimed_runs_points_at_bench(tmp_path: Path, capsys) -> None:
    a = write(tmp_path / "a.json", [row("x::k", None, CPU, time_ms=3.0, timed=False)])
    assert main(["compare", a, a]) == 0  # untimed cpu runs: nothing emulated is compared, so nothing refused
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == (
        "no regression (verdicts only: speed not compared: the baseline and the new report have no timed items "
        "(time the runs with --ckfmha-bench))"
    )
    t = write(tmp_path / "t.json", [row("x::k")])
    assert main(["compare", a, t, "--format", "json"]) == 0
    assert "the baseline has no timed items" in json.loads(capsys.readouterr().out)["speed_note"]


# --------------------------------------------------------------------------------------------- finding 3: tune
def test_tune_refuses_emulated_timings_and_mixed_devices(tmp_path: Path, capsys) -> None:
    cpu = write(tmp_path / "cpu.json", [row("fwd-a::k1", 1.0, CPU), row("fwd-a::k2", 2.0, CPU)])
    out = tmp_path / "h.yaml"
    assert main(["tune", cpu, "-o", str(out)]) == 2 and not out.exists()
    assert "--allow-emulated" in capsys.readouterr().err
    assert main(["tune", cpu, "-o", str(out), "--allow-emulated"]) == 0
    assert "ckfmha tune: WARNING:" in capsys.readouterr().err
    assert "# WARNING: " in out.read_text() and "emulation" in out.read_text()
    mixed = write(tmp_path / "mixed.json", [row("fwd-a::k1"), row("fwd-a::k2", device="NVIDIA H200")])
    assert main(["tune", mixed, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "devices: the timed items ran with 2 values" in err and "--force" in err
    assert main(["tune", mixed, "-o", str(out), "--force"]) == 0


def test_tune_warns_about_clocks_that_move_within_a_run(tmp_path: Path, capsys) -> None:
    rows = [row("fwd-a::k1"), row("fwd-a::k2", clocks="sm, mem: 1400 MHz, 2619 MHz")]
    run = write(tmp_path / "r.json", rows)
    assert main(["tune", run, "-o", str(tmp_path / "h.yaml")]) == 0  # boost clocks: a warning, not a refusal
    assert "clocks: the timed items saw 1400 ... 1980 MHz" in capsys.readouterr().err


# --------------------------------------------------------------------------------------- finding 4: provenance
def git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:  # pragma: no cover
        pytest.skip("git is not installed")
    r = tmp_path / "repo"
    (r / "pkg").mkdir(parents=True)
    (r / "pkg" / "__init__.py").write_text("x = 1\n")
    git(r, "init", "-q")
    git(r, "add", "pkg/__init__.py")
    git(r, "commit", "-q", "-m", "one")
    return r


def test_git_identity_is_rev_parse_head_and_the_dirty_flag(repo: Path, tmp_path: Path) -> None:
    assert git_identity(repo / "pkg", "__init__.py") == {"commit": git(repo, "rev-parse", "HEAD"), "dirty": False}
    (repo / "pkg" / "__init__.py").write_text("x = 2\n")
    assert git_identity(repo / "pkg", "__init__.py")["dirty"] is True  # type: ignore[index]
    (repo / "pkg" / "untracked.py").write_text("")
    assert git_identity(repo / "pkg", "untracked.py") is None  # a file the checkout does not track: not it
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "__init__.py").write_text("")
    assert git_identity(plain, "__init__.py") is None  # not a git checkout: null, no error


def fake_ck(root: Path) -> Path:
    gen = root / "example" / "ck_tile" / "01_fmha"
    (gen / "codegen").mkdir(parents=True)
    (root / "include" / "ck_tile").mkdir(parents=True)
    (gen / "generate.py").write_text("# generator\n")
    (gen / "codegen" / "fwd.py").write_text("# codegen\n")
    return root


def test_ck_identity_names_path_commit_and_codegen_hash(repo: Path, tmp_path: Path) -> None:
    from ckfmha.cktree import codegen_hash

    ck = fake_ck(tmp_path / "ck")
    got = ck_identity(str(ck))
    assert got == {"root": str(ck), "commit": None, "dirty": None, "codegen": codegen_hash(ck)[:16]}
    fake_ck(repo)
    git(repo, "add", "example")
    git(repo, "commit", "-q", "-m", "ck")
    assert ck_identity(str(repo))["commit"] == git(repo, "rev-parse", "HEAD")  # type: ignore[index]
    assert ck_identity(None) is None


def test_the_report_environment_carries_the_provenance(tmp_path: Path) -> None:
    rows = [{"gpu": "1:GPU-bbbb", "device": "NVIDIA H100"}, {"gpu": "0:GPU-aaaa"}, {"gpu": "0:GPU-aaaa"}, {}]
    env = environment(["pytest"], rows, fake_ck(tmp_path / "ck"))
    assert env["hostname"] == socket.gethostname()
    assert env["ckfmha"]["version"] == ckfmha.__version__
    here = Path(ckfmha.__file__).resolve().parent
    head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert env["ckfmha"]["commit"] == (head.stdout.strip() if head.returncode == 0 else None)
    assert env["ck"]["root"] == str(tmp_path / "ck") and env["gpus"] == ["GPU-aaaa", "GPU-bbbb"]
    assert environment(["pytest"], [])["ck"] is None
    report_from_doc(doc([row("x::k")], environment=env), "r.json")  # the schema takes it


def test_the_provenance_imports_no_torch() -> None:
    code = (
        "import sys; from pytest_ckfmha.reporting import environment; environment(['pytest'], []); "
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_schema_rejects_a_malformed_commit() -> None:
    env = {"ckfmha": {"version": "0.1.0", "commit": "not-a-commit", "dirty": False}}
    with pytest.raises(ReportError, match=r"environment\.ckfmha\.commit"):
        report_from_doc(doc([], environment=env), "r.json")


def env_of(host: str) -> dict:
    ident = {"version": "0.1.0", "commit": "a" * 40, "dirty": False}
    return {"hostname": host, "ckfmha": ident, "ck": None, "gpus": [f"GPU-{host}"], "devices": ["NVIDIA H100"]}


def test_merge_keeps_each_shards_provenance(tmp_path: Path) -> None:
    shards = [
        report_from_doc(doc([row(f"{k}::k")], shard={"index": k, "count": 2}, environment=env_of(h)), f"s{k}.json")
        for k, h in ((1, "node-a"), (2, "node-b"))
    ]
    merged = merge_reports(shards)
    env = merged["environment"]
    assert env["hostname"] is None and env["differs_by_shard"] == ["hostname"]
    assert env["gpus"] == ["GPU-node-a", "GPU-node-b"] and env["ckfmha"]["commit"] == "a" * 40
    assert [s["environment"]["hostname"] for s in merged["shard_environments"]] == ["node-a", "node-b"]
    out = load_report(write_report_doc(merged, tmp_path / "all.json"))  # the schema takes it
    assert out.meta["shard_environments"][1]["path"] == "s2.json"


def test_compare_shows_both_runs_provenance(tmp_path: Path, capsys) -> None:
    a = write(tmp_path / "a.json", [row("x::k")], environment=env_of("node-a"))
    b = write(tmp_path / "b.json", [row("x::k")], environment=env_of("node-b"))
    assert main(["compare", a, b]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("baseline: ckfmha 0.1.0 (aaaaaaaaaaaa); host node-a; CK none; GPUs GPU-node-a")
    assert lines[2].startswith("new:      ckfmha 0.1.0 (aaaaaaaaaaaa); host node-b")


def test_the_html_header_shows_the_provenance(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = write(tmp_path / "r.json", [row("x::k")], environment=env_of("node-a"))
    base = write(tmp_path / "b.json", [row("x::k", 1.0, CPU)])
    assert main(["report", run, "--baseline", base, "-o", str(tmp_path / "r.html")]) == 0  # flagged, not refused
    page = (tmp_path / "r.html").read_text()
    for words in ("ckfmha commit", "a" * 40, "node-a", "GPU-node-a", "CK checkout", "WARNING, not like for like"):
        assert words in page, words


def test_a_plugin_report_carries_the_provenance(pytester, monkeypatch, tmp_path: Path) -> None:
    from tests.test_plugin_fixtures import make_project

    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-report", "r.json")
    env = load_report(pytester.path / "r.json").meta["environment"]
    assert env["hostname"] == socket.gethostname() and env["ckfmha"]["version"] == ckfmha.__version__
    assert env["ck"] is None and env["gpus"] == []
