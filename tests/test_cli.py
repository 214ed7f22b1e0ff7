"""The ckfmha command line: list / count with every selection option, clear errors (exit status 2), empty
selections (exit status 1 unless --allow-empty), run / explain of one tile_example problem, --version, pipes."""

from __future__ import annotations

import json

import pytest

from ckfmha.cli import main
from ckfmha.enumeration import ck_instance_names


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_ck_names_equals_the_enumeration(capsys) -> None:
    code, out, _ = run_cli(capsys, "list", "--arch", "gfx942", "--api", "fwd_appendkv", "--format", "ck-names")
    assert code == 0
    assert out.split() == ck_instance_names("fwd_appendkv", "gfx942")


def test_list_ids_json_and_table(capsys) -> None:
    code, out, _ = run_cli(
        capsys,
        "list",
        "--arch",
        "gfx950",
        "--family",
        "fwd_appendkv",
        "--filter",
        "c.hdim_q == 128 and c.rope == 'half_rotated'",
    )
    ids = out.split()
    assert code == 0 and ids and all(".d128x128." in i and "rope=half_rotated" in i for i in ids)
    code, out, _ = run_cli(
        capsys, "list", "--arch", "gfx950", "--family", "fwd_appendkv", "--format", "json", "--filter", "c.hdim_q == 64"
    )
    rows = json.loads(out)
    assert rows and all(r["hdim_q"] == 64 and r["kernel_id"] for r in rows)
    code, out, _ = run_cli(
        capsys,
        "list",
        "--arch",
        "gfx950",
        "--family",
        "fwd_appendkv",
        "--format",
        "table",
        "--filter",
        "c.hdim_q == 32 and not c.paged_kv",
    )
    assert out.splitlines()[0].split()[:3] == ["family", "dtype", "mode"]


def test_count_table_and_profiles(capsys) -> None:
    code, out, _ = run_cli(capsys, "count", "--arch", "gfx942", "--api", "fwd_splitkv")
    assert code == 0
    lines = {ln.split()[0]: ln.split() for ln in out.splitlines()[2:]}
    assert int(lines["fwd_splitkv_combine"][1]) == 138 and int(lines["total"][1]) == 2106
    code, out, _ = run_cli(
        capsys, "count", "--arch", "gfx942", "--api", "fwd_splitkv", "--profile", "pytorch", "--format", "json"
    )
    doc = json.loads(out)
    assert doc["total"] == 138  # upstream's receipt-4 quirk: only the combine kernels


def test_sweep_and_filter_file(tmp_path, capsys) -> None:
    sweep = tmp_path / "s.json"
    sweep.write_text(json.dumps({"variant": "appendkv", "trait_config": {"data_type": {"values": ["bf16"]}}}))
    flt = tmp_path / "f.py"
    flt.write_text("def filter_config(c):\n    return c.hdim_q == 256\n")
    code, out, _ = run_cli(capsys, "list", "--arch", "gfx942", "--sweep", str(sweep), "--filter-file", str(flt))
    ids = out.split()
    assert code == 0 and ids and all(i.startswith("fwd_appendkv.bf16.") and ".d256x256." in i for i in ids)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--arch", "gfx999"], "arch: unknown arch 'gfx999'; known archs:"),
        (["--arch", "gfx942", "--api", "fwdd"], "api: unknown value 'fwdd'; allowed:"),
        (["--arch", "gfx942", "--family", "fwd_bogus"], "family: 'fwd_bogus' is not a family; allowed: fwd, "),
        (
            ["--arch", "gfx942", "--filter", "c.pipeline == 'qr_asnyc'"],
            "'qr_asnyc' is not a pipeline value (did you mean 'qr_async'?); pipeline is one of: qr, qr_async,",
        ),
        (["--arch", "gfx942", "--filter", "c.hdim_q == '128'"], "hdim_q is an int, '128' is a str"),
        (["--arch", "gfx942", "--filter", "c.tile[99] == 1"], "index 99 is out of range"),
        (["--arch", "gfx942", "--receipt", "5"], "receipt: unknown receipt 5"),
        (["--arch", "gfx942", "--profile", "flashy"], "profile: unknown profile 'flashy'"),
        (["--arch", "gfx942", "--mask-mode", "loose"], "mask_mode: unknown value 'loose'"),
        (["--arch", "gfx942", "--filter", "c.hdimq == 1"], "unknown field 'hdimq'"),
        (["--arch", "gfx942", "--filter", "open('x')"], "function calls are not allowed"),
        (["--arch", "gfx942", "--filter", "c.hdim_q =="], "does not parse"),
    ],
)
def test_errors_name_field_value_and_rule(capsys, args, message: str) -> None:
    code, _, err = run_cli(capsys, "count", *args)
    assert code == 2
    assert message in err


def test_malformed_sweep_reports_file_and_key_path(tmp_path, capsys) -> None:
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"variant": "fwd", "trait_config": {"mask": {"values": "no"}}}))
    code, _, err = run_cli(capsys, "count", "--arch", "gfx942", "--sweep", str(p))
    assert (
        code == 2
        and f"{p}: trait_config.mask.values: expected a list, found 'no' (rule: a non-empty list of the allowed values)"
        in err
    )
    p.write_text("{not json")
    code, _, err = run_cli(capsys, "count", "--arch", "gfx942", "--sweep", str(p))
    assert code == 2 and "malformed JSON at line 1" in err


# ----------------------------------------------------------------------------------------- families, empty
def _count_json(capsys, *args: str) -> dict:
    code, out, err = run_cli(capsys, "count", "--format", "json", *args)
    assert code == 0, err
    return json.loads(out)


def test_family_bwd_and_aliases(capsys) -> None:
    bwd = _count_json(capsys, "--arch", "gfx942", "--family", "bwd")
    assert set(bwd["families"]) == {"bwd_dot_do_o", "bwd_dq_dk_dv", "bwd_convert_dq"}
    assert bwd == _count_json(capsys, "--arch", "gfx942", "--api", "bwd")
    assert bwd == _count_json(capsys, "--arch", "gfx942", "--family", "bwd_dq_dk_dv")  # the Problem's spelling
    split = _count_json(capsys, "--arch", "gfx942", "--family", "splitkv")
    assert split == _count_json(capsys, "--arch", "gfx942", "--api", "fwd_splitkv")
    assert set(split["families"]) == {"fwd_splitkv", "fwd_splitkv_combine"}
    one = _count_json(capsys, "--arch", "gfx942", "--family", "bwd_convert_dq")
    assert set(one["families"]) == {"bwd_convert_dq"} and one["total"] == bwd["families"]["bwd_convert_dq"]["total"]


def test_empty_selection_is_an_error_naming_the_selection(capsys) -> None:
    code, out, err = run_cli(capsys, "count", "--arch", "gfx942", "--profile", "flash", "--filter", "c.hdim_q == 1000")
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0] == (
        "ckfmha count: error: no kernel matches the selection: arch gfx942, families all, receipt 2 "
        "(profile flash), mask mode simplified, filter 'c.hdim_q == 1000'"
    )
    assert "the filter expression and filter file keep none" in lines[1]
    assert lines[2].startswith("  before the filter, hdim_q takes: 32, 64, ")
    code, out, err = run_cli(capsys, "list", "--arch", "gfx942", "--filter", "c.hdim_q == 1000")
    assert code == 1 and out == "" and "no kernel matches the selection: arch gfx942" in err


def test_allow_empty_prints_the_empty_result(capsys) -> None:
    code, out, err = run_cli(capsys, "count", "--arch", "gfx942", "--filter", "c.hdim_q == 1000", "--allow-empty")
    assert code == 0 and err == "" and out.splitlines()[-1].split() == ["total", "0"]
    code, out, err = run_cli(capsys, "list", "--arch", "gfx942", "--filter", "c.hdim_q == 1000", "--allow-empty")
    assert code == 0 and out == "" and err == ""
    code, out, _ = run_cli(
        capsys, "count", "--arch", "gfx942", "--filter", "c.hdim_q == 1000", "--allow-empty", "--format", "json"
    )
    assert code == 0 and json.loads(out)["total"] == 0


def test_empty_because_of_the_mask_mode_names_the_values(capsys) -> None:
    code, _, err = run_cli(
        capsys, "list", "--arch", "gfx942", "--family", "fwd", "--filter", "c.mask == 'causal' and c.hdim_q == 128"
    )
    assert code == 1
    assert "mask mode simplified" in err
    assert "  before the filter, mask takes: none, any\n" in err
    assert "  before the filter, hdim_q takes: " in err
    code, out, _ = run_cli(
        capsys,
        "count",
        "--arch",
        "gfx942",
        "--family",
        "fwd",
        "--mask-mode",
        "generic",
        "--filter",
        "c.mask == 'causal'",
    )
    assert code == 0 and int(out.splitlines()[-1].split()[1]) > 0


def test_family_the_arch_does_not_define_is_an_empty_selection(capsys, monkeypatch, request) -> None:
    code, out, _ = run_cli(capsys, "count", "--arch", "sm90", "--family", "bwd")
    assert code == 0 and "bwd_dq_dk_dv" in out  # sm90 defines the backward (the Triton backend realizes it)
    # every packaged arch defines every api now: an arch without a bwd section is sm90's spec less that section
    import dataclasses

    import ckfmha.enumeration as enumeration
    import ckfmha.selection as selection

    original = selection.load_arch_spec
    real = original("sm90")
    cut = dataclasses.replace(real, sections={k: v for k, v in real.sections.items() if k != "bwd"})
    for module in (selection, enumeration):
        monkeypatch.setattr(module, "load_arch_spec", lambda arch: cut if arch == "sm90" else original(arch))
    enumeration.clear_caches()  # the first count cached sm90's bwd kernels
    request.addfinalizer(enumeration.clear_caches)  # and this test's empty results must not outlive it
    code, _, err = run_cli(capsys, "count", "--arch", "sm90", "--family", "bwd")
    assert code == 1
    assert "families bwd_dot_do_o, bwd_dq_dk_dv, bwd_convert_dq" in err
    assert "arch sm90 defines no kernels for api(s) bwd (it defines: fwd, fwd_splitkv, " in err
    code, _, err = run_cli(capsys, "count", "--arch", "sm90", "--family", "bwd", "--allow-empty")
    assert code == 0
    code, _, err = run_cli(capsys, "count", "--arch", "gfx999", "--allow-empty")  # unknown arch: a bad argument
    assert code == 2 and "arch: unknown arch 'gfx999'" in err


def test_empty_because_of_the_sweep(tmp_path, capsys) -> None:
    sweep = tmp_path / "s.json"
    sweep.write_text(json.dumps({"variant": "appendkv"}))
    code, _, err = run_cli(capsys, "count", "--arch", "gfx942", "--family", "fwd", "--sweep", str(sweep))
    assert code == 1
    assert f"sweep {sweep}" in err and "covers families fwd_appendkv, none of the selected families" in err


def test_filter_file_help_says_it_runs_python(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["list", "--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "runs Python: only use files you trust" in out and "--allow-empty" in out


# ----------------------------------------------------------------------------------------- --version, pipes
def test_version(capsys) -> None:
    import ckfmha

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"ckfmha {ckfmha.__version__}\n"


def test_broken_pipe_ends_quietly(tmp_path) -> None:
    import subprocess
    import sys

    err = tmp_path / "err.txt"
    script = f"{sys.executable} -m ckfmha.cli list --arch gfx942 --api fwd 2>{err} | head -1; exit ${{PIPESTATUS[0]}}"
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, err.read_text()
    assert err.read_text() == ""
    assert r.stdout.startswith("fwd.") and r.stdout.count("\n") == 1


# ----------------------------------------------------------------------------------------- run / explain
SMALL = ["-prec=fp16", "-b=2", "-h=8", "-s=128", "-d=64", "-mask=t"]


def test_run_passes_and_prints_plan_checks_and_verdict(capsys) -> None:
    code, out, err = run_cli(capsys, "run", *SMALL)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "problem: fwd: -prec=fp16 -b=2 -h=8 -s=128 -s_k=128 -d=64 -mask=t"  # -h=8 is CK's nhead
    assert lines[1] == "backend: cpu, arch gfx942, receipt 0, mask mode simplified, kernel space: ckfmha's enumeration"
    assert lines[2] == (
        "seeds: inputs 0 (ckfmha's --seed); CK's -seed 11939 (its default) seeds only the lengths the runner generates"
    )
    assert lines[3] == "plan:" and lines[4].startswith("  fwd: fwd.fp16.batch.d64x64.")
    assert lines[5].startswith("  o: PASS max_abs_err=") and "mismatches=0/131072 (rtol=0.001, atol=0.001)" in lines[5]
    assert lines[-1] == "verdict: PASS (o matches the reference)"


def test_run_backward_as_one_string_with_the_program_name(capsys) -> None:
    code, out, err = run_cli(capsys, "run", "tile_example_fmha_bwd -prec=bf16 -b=1 -h=2 -s=64 -d=64", "--seed", "3")
    assert code == 0, err
    assert out.startswith("problem: bwd_dq_dk_dv: -prec=bf16 -b=1 -h=2 -s=64")
    assert "seeds: inputs 3 (ckfmha's --seed)" in out
    assert [ln.split(":")[0].strip() for ln in out.splitlines() if "PASS max_abs_err" in ln] == ["dq", "dk", "dv"]
    code, out2, _ = run_cli(
        capsys, "run", "--binary", "bwd", "-prec=bf16", "-b=1", "-h=2", "-s=64", "-d=64", "--seed=3"
    )
    assert code == 0 and out2 == out


@pytest.mark.parametrize(
    "args, message",
    [
        (["-prec=fp17"], "ckfmha run: error: -prec: 'fp17' unsupported precision"),
        (["-prec=fp16", "-bogus=1"], "-bogus: no such argument for tile_example_fmha_fwd"),
        (["-b"], "args: '-b' should be a -key=value pair"),
        ([], "problem: no tile_example arguments given"),
        (["tile_example_fmha_fwd", "-b=1", "--binary", "bwd"], "--binary: 'bwd' contradicts the program name"),
        ([*SMALL, "--arch", "gfx999"], "arch: unknown arch 'gfx999'"),
        ([*SMALL, "--profile", "flashy"], "profile: unknown profile 'flashy'"),
        ([*SMALL, "--mask-mode", "loose"], "mask_mode: unknown value 'loose'"),
        (["-prec=fp16 -b='2"], "problem arguments"),
    ],
)
def test_run_bad_arguments_exit_2(capsys, args, message: str) -> None:
    code, _, err = run_cli(capsys, "run", *args)
    assert code == 2 and message in err


def test_run_option_errors_from_argparse_exit_2(capsys) -> None:
    for args in (["--backend", "cuda"], ["--seed", "x"], ["--bogus"]):
        with pytest.raises(SystemExit) as e:
            main(["run", *SMALL, *args])
        assert e.value.code == 2
    assert "--seed: invalid int value: 'x'" in capsys.readouterr().err


def test_run_no_kernel_prints_the_explanation(capsys) -> None:
    code, out, _ = run_cli(capsys, "run", "-prec=fp32", "-b=1", "-h=2", "-s=64", "-d=64")  # receipt 0 has no fp32
    assert code == 1
    assert "no kernel serves stage(s) fwd:\nstage fwd: " in out
    assert out.count("problem: ") == 1  # the problem line once, not again in the explanation
    assert "stage fwd: " in out and "0 can serve it" in out and "dtype: kernel is fp16, problem is fp32" in out
    assert out.splitlines()[-1] == "verdict: FAIL (no kernel)"


def test_run_with_a_differing_output_fails(capsys, monkeypatch) -> None:
    import ckfmha.reference

    real = ckfmha.reference.reference

    def off_by_one(problem, inputs, accum=None):
        ref = real(problem, inputs)
        ref["o"] = ref["o"] + 1.0
        return ref

    monkeypatch.setattr(ckfmha.reference, "reference", off_by_one)
    code, out, _ = run_cli(capsys, "run", *SMALL)
    assert code == 1
    assert "  o: FAIL max_abs_err=" in out and "mismatches=131072/131072" in out
    assert out.splitlines()[-1] == "verdict: FAIL (o differs from the reference)"


def test_run_that_raises_fails_with_the_error(capsys, monkeypatch) -> None:
    import ckfmha.runner
    from ckfmha.backends import BackendError

    def broken(*a, **k):
        raise BackendError("stage fwd crashed: illegal memory access")

    monkeypatch.setattr(ckfmha.runner, "run", broken)
    code, _, err = run_cli(capsys, "run", *SMALL)
    assert code == 1
    assert err == "ckfmha run: error: the run raised BackendError: stage fwd crashed: illegal memory access\n"


def test_explain(capsys) -> None:
    code, out, err = run_cli(capsys, "explain", *SMALL)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "problem: fwd: -prec=fp16 -b=2 -h=8 -s=128 -s_k=128 -d=64 -mask=t"
    assert lines[1].startswith("kernel space: ckfmha's enumeration, arch gfx942")
    assert lines[2].startswith("stage fwd: ") and "can serve it" in lines[2]
    assert lines[3].startswith("  OK *  fwd.fp16.batch.d64x64.")
    code, out, _ = run_cli(capsys, "explain", "-prec=fp32", "-b=1", "-h=2", "-s=64", "-d=64")
    assert code == 1 and "0 can serve it" in out
    code, out, _ = run_cli(capsys, "explain", "tile_example_fmha_bwd", "-prec=fp16", "-b=1", "-h=2", "-s=64", "-d=64")
    assert code == 0 and [ln.split(":")[0] for ln in out.splitlines() if ln.startswith("stage")] == [
        "stage dot_do_o",
        "stage dq_dk_dv",
        "stage convert_dq",
    ]


def test_explain_help_is_long_only(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["explain", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ckfmha explain [tile_example_fmha_fwd|tile_example_fmha_bwd] -key=value")
    assert "-h=N is CK's head count" in " ".join(out.split())


# ----------------------------------------------------------------------------- issue 28: the CLI as CK's runner
def test_run_prints_the_normalizations_ck_announces_in_its_words(capsys) -> None:
    code, out, err = run_cli(capsys, "run", "-s_knew=16", "-rotary_dim=64", "-mode=1", "-b=1", "-h=2", "-s=64", "-d=64")
    assert code == 0, err
    assert (
        out.splitlines()[1]
        == "tile_example_fmha_fwd says: fmha_fwd_appendkv() will be invoked. ignoring the 'mode' option"
    )
    code, out, _ = run_cli(
        capsys, "explain", "-page_block_size=128", "-cache_batch_idx=1", "-b=1", "-h=2", "-s=256", "-d=64"
    )
    assert (
        "tile_example_fmha_fwd says: paged-kvcache does not support cache_batch_idx. ignoring the 'cache_batch_idx' "
        "option"
    ) in out.splitlines()


def test_run_names_cks_seed_and_ckfmhas_seed_apart(capsys) -> None:
    code, out, err = run_cli(capsys, "run", "-seed=1", "-b=1", "-h=2", "-s=64", "-d=64", "--seed", "0")
    assert code == 0, err
    assert "seeds: inputs 0 (ckfmha's --seed); CK's -seed 1 seeds only the lengths the runner generates" in out
    assert "seed 0\n" not in out


def test_ck_root_is_checked_the_same_way_by_every_command(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CK_ROOT", str(tmp_path / "nonexistent"))
    for command in (["count", "--arch", "gfx942"], ["run", *SMALL], ["explain", *SMALL]):
        code, _, err = run_cli(capsys, *command)
        assert code == 2 and "$CK_ROOT: " in err and "nonexistent" in err, command
    monkeypatch.delenv("CK_ROOT")
    for command in ("run", "explain"):
        code, _, err = run_cli(capsys, command, *SMALL, "--ck-root", str(tmp_path / "nonexistent"))
        assert code == 2 and f"ckfmha {command}: error: --ck-root: " in err


def test_cpu_run_above_the_size_guard_is_refused_naming_the_override(capsys) -> None:
    code, out, err = run_cli(capsys, "run", "-b=1", "-h=8", "-s=100000", "-d=128")
    assert code == 2 and out == ""
    assert "--cpu-max-flops: the problem is 4.1e+13 FLOPs, above the cpu backend's limit 5e+10" in err
    assert "pass --cpu-max-flops 4.1e+13 (or 0 = no limit)" in err


def test_long_runs_write_progress_to_stderr(capsys) -> None:
    code, _, err = run_cli(capsys, "run", "-b=1", "-h=4", "-s=1024", "-d=128", "--cpu-max-flops", "1e12")
    assert code == 0
    assert "ckfmha run: running the plan on the cpu backend..." in err and "computing the reference: done in" in err


def test_explain_shows_ck_instance_names_and_marks_the_picked_kernel(capsys) -> None:
    from ckfmha.kernel import KernelConfig
    from ckfmha.naming import ck_instance_name

    code, out, err = run_cli(capsys, "explain", *SMALL)
    assert code == 0, err
    lines = out.splitlines()
    picked = [i for i, ln in enumerate(lines) if ln.startswith("  OK *  ")]
    assert len(picked) == 1
    kernel_id = lines[picked[0]].split()[-1]
    assert lines[picked[0] + 1] == f"        CK {ck_instance_name(KernelConfig.from_id(kernel_id))}"
    code, run_out, _ = run_cli(capsys, "run", *SMALL)
    assert f"  fwd: {kernel_id}" in run_out.splitlines()  # the marked kernel is the one run's plan uses


def test_a_pass_with_a_large_relative_error_says_which_rule_passed(capsys) -> None:
    code, out, err = run_cli(capsys, "run", "-s_knew=16", "-rotary_dim=64", "-b=1", "-h=2", "-s=64", "-d=64")
    assert code == 0, err
    lines = out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("  o: PASS"))
    rel = float(lines[i].split("max_rel_err=")[1].split()[0])
    assert rel > 0.001 and lines[i + 1].startswith("      PASS by CK's rule |out - ref| <= atol + rtol * |ref|")
    assert "pass by atol=0.001" in lines[i + 1]


def test_mask_errors_name_the_argument_once(capsys) -> None:
    code, _, err = run_cli(capsys, "run", "-mask=zz", "-b=1")
    assert code == 2 and "error: -mask: invalid mask value 'zz'" in err and "mask: mask:" not in err


def test_count_and_list_default_to_the_same_arch_as_run(capsys) -> None:
    code, out, err = run_cli(capsys, "count", "--format", "json")
    assert code == 0 and json.loads(out)["arch"] == "gfx942"
    assert "ckfmha count: arch gfx942 (the default; choose another with --arch)" in err
    code, out, err = run_cli(capsys, "list", "--api", "fwd", "--filter", "c.hdim_q == 64")
    assert code == 0 and out and "arch gfx942 (the default" in err
