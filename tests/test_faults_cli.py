"""``ckfmha adequacy`` and ``--ckfmha-fault`` on a one-shape matrix: a GQA shape catches ``gqa_head_map`` (exit 0,
the catching items named), a shape without GQA lets it escape (exit 1); bad arguments exit 2 naming the option,
the value and the rule; the plugin option makes a normal run fail, and a fault needs the cpu backend."""

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
        (["--backend", "triton"], "--backend: 'triton': the fault hooks are the cpu backend's; use --backend cpu"),
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
    res.stderr.fnmatch_lines(["*--ckfmha-fault: 'gqa_head_map' needs --ckfmha-backend cpu (*given: auto)*"])
