"""The tile_example output parser on real upstream result lines (tests/data/upstream_lines/fwd_res_sink.txt,
verbatim from ROCm/composable_kernel example/ck_tile/01_fmha/script/res_sink.log) and on lines constructed from
the runners' print statements (tests/data/upstream_lines/constructed.txt; the file says so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckfmha.upstream.tile_output import format_problems, parse_stdout, split_fields

DATA = Path(__file__).parent / "data" / "upstream_lines"


def real_pairs() -> list[tuple[str, str]]:
    """(command, result line) pairs of the real log excerpt."""
    lines = [ln for ln in (DATA / "fwd_res_sink.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    pairs = []
    for cmd, res in zip(lines[0::2], lines[1::2]):
        assert cmd.startswith("$ ") and res.startswith("[")
        pairs.append((cmd[2:], res))
    return pairs


def constructed() -> dict[str, str]:
    out, cur = {}, None
    for ln in (DATA / "constructed.txt").read_text().splitlines():
        if ln.startswith("## "):
            cur = ln[3:].strip()
            out[cur] = ""
        elif cur is not None:
            out[cur] += ln + "\n"
    return out


REAL = real_pairs()
CON = constructed()


def test_real_file_has_group_and_batch_lines():
    assert len(REAL) == 8
    assert {r.split("]")[0] for _, r in REAL} == {"[fp16|group|bshd", "[fp16|batch|bhsd"}


@pytest.mark.parametrize("cmd,line", REAL, ids=[f"real{i}" for i in range(len(REAL))])
def test_real_lines_parse_completely(cmd, line):
    out = parse_stdout(line + "\n")
    assert out.result_line == line
    assert out.unparsed == [] and out.other_lines == []
    assert out.valid is True and not out.not_supported
    assert len(out.kernels) == 1 and out.kernels[0].startswith("fmha_fwd_d")
    assert out.ms is not None and out.tflops is not None and out.gbps is not None
    ev = out.echo_values()
    # the echo agrees with the command line that produced it
    args = dict(t.lstrip("-").split("=", 1) for t in cmd.split()[1:])
    assert ev["b"] == int(args["b"])
    assert ev["h"] == (int(args["h"]), int(args["h_k"]))
    assert ev["d"] == (16, int(args["d_v"]))  # upstream's "-d=16," parses as 16 (atoi)
    assert ev["s"] == (int(args["s"]), int(args["s_k"]), None)
    assert out.mode == ("group" if args["mode"] == "1" else "batch")
    assert out.layout == ("bhsd" if args["iperm"] == "1" else "bshd")
    assert out.echo["v"] == args["vlayout"]
    assert ev["lse"] == int(args["lse"])
    assert ev["p_drop"] == float(args["p_drop"])
    assert out.echo["bias"] == {"e": "e", "a": "alibi"}[args["bias"]]
    assert ("_dropout_" in out.kernels[0]) == (float(args["p_drop"]) > 0)
    assert ("_lse_" in out.kernels[0]) == (args["lse"] == "1")


def test_real_line_values():
    _, line = REAL[0]
    out = parse_stdout(line)
    assert out.prec == "fp16" and out.mode == "group" and out.layout == "bshd"
    assert out.ms == pytest.approx(0.946) and out.tflops == 0.0 and out.gbps == pytest.approx(0.03)
    assert out.echo["mask"] == "t(2:0)" and out.echo_values()["scale_s"] == 0.25
    assert out.kernels == [
        "fmha_fwd_d32_fp16_group_b128x64x16x32x32x32_r2x1x1_r2x1x1_w32x32x16_w32x32x16_qr_vr_"
        "psskddv_bias_mask_nlse_ndropout_nsquant"
    ]
    out = parse_stdout(REAL[5][1])
    assert (out.tflops, out.gbps, out.echo["v"]) == (pytest.approx(0.61), pytest.approx(1.77), "c")


def test_not_supported_yet():
    out = parse_stdout(CON["fwd_not_supported"])
    assert out.not_supported and out.valid is None and out.kernels == [] and out.ms is None
    assert out.echo_values()["d"] == (72, 72)


def test_invalid_line():
    out = parse_stdout(CON["fwd_invalid"])
    assert out.valid is False and out.layout == "bshd" and len(out.kernels) == 1


def test_fwd_extras_and_several_kernels():
    out = parse_stdout(CON["fwd_splitkv_extras"])
    ev = out.echo_values()
    assert (ev["num_splits"], ev["page_block_size"], ev["cache_batch_idx"]) == (3, 128, 1)
    assert out.echo["mask"] == "t(128:30)"
    assert [k.split("_d128")[0] for k in out.kernels] == ["fmha_fwd_splitkv", "fmha_fwd_splitkv_combine"]
    out = parse_stdout(CON["fwd_appendkv_rotary"])
    assert out.echo_values()["rotary_dim"] == (32, "inter") and len(out.kernels) == 2


def test_padding_diagnostics():
    out = parse_stdout(CON["fwd_group_padding"])
    ev = out.echo_values()
    assert ev["s"] == (55, 256, 272)
    assert ev["q_logical"] == [55, 55] and ev["q_padded"] == [64, 60] and ev["k_padded"] == [272, 260]
    assert out.kernels == [] and out.valid is True and out.unparsed == []
    ev = parse_stdout(CON["fwd_batch_eff"]).echo_values()
    assert ev["q_eff"] == [55, 60] and ev["kv_eff"] == [200, 256]


def test_without_timing_and_kernel_names():
    out = parse_stdout(CON["fwd_no_timing_no_kname"])
    assert out.ms is None and out.kernels == [] and out.valid is True and out.layout == "bhsd-bshd"
    assert out.echo_values()["s"] == (33, 0, None)


def test_bwd_lines():
    out = parse_stdout(CON["bwd_valid_kname"])
    ev = out.echo_values()
    assert ev["scale"] == 0.125 and ev["dbias"] == 0 and ev["s_randval"] == 0 and ev["deterministic"] == 0
    assert [k.split("_d64")[0] for k in out.kernels] == ["fmha_bwd_dot_do_o", "fmha_bwd", "fmha_bwd_convert_dq"]
    assert out.valid is True and out.tflops == pytest.approx(2.56)
    out = parse_stdout(CON["bwd_group_deterministic_invalid"])
    assert out.echo_values()["workspace"] == 4 and out.valid is False and out.mode == "group"
    out = parse_stdout(CON["bwd_not_supported"])
    assert out.not_supported and out.echo["mask"] == "b(4:35)" and out.echo_values()["dbias"] == 1


def test_old_bwd_line_broken_by_deterministic_message():
    out = parse_stdout(CON["bwd_old_deterministic_break"])
    assert out.deterministic_workspace_mb == 2
    assert out.valid is True and out.ms == pytest.approx(0.05) and out.other_lines == []


def test_garbage_and_surrounding_lines():
    out = parse_stdout("segfault?\x00\nrandom words, and: more\n")
    assert not out.has_result_line and out.other_lines and out.valid is None
    out = parse_stdout(
        "warning: something\n" + REAL[0][1] + "\nJSON dump disabled, To enable, set CK_ENABLE_JSON_DUMP cmake option\n"
    )
    assert out.has_result_line and out.json_disabled and out.other_lines == ["warning: something"]
    out = parse_stdout(REAL[0][1].replace("0.946 ms", "zz ms"))
    assert out.unparsed == ["zz ms"]


def test_json_file(tmp_path):
    jf = tmp_path / "fmha_fwd.json"
    jf.write_text('{"name": "fmha_fwd", "verification": "pass", "perf": [{"time": 0.9}]}')
    out = parse_stdout(f"{REAL[0][1]}\nResults written to {jf} successfully\n", jf)
    assert out.json_result["verification"] == "pass" and out.json_path == str(jf)
    jf.write_text("{not json")
    assert parse_stdout(REAL[0][1], jf).json_error


def test_split_fields_respects_brackets():
    assert split_fields("a:1, q:[1,2], k, 0.5 ms") == ["a:1", "q:[1,2]", "k", "0.5 ms"]


@pytest.mark.parametrize("cmd,line", REAL, ids=[f"real{i}" for i in range(len(REAL))])
def test_real_lines_are_in_the_format(cmd, line):
    assert format_problems(parse_stdout(line + "\n"), "fwd") == []


NO_KNAME = "no kernel name although -kname=1 was passed (a run that printed a valid: verdict launched a kernel)"


@pytest.mark.parametrize("label", sorted(CON))
def test_constructed_lines_are_in_the_format(label):
    """Every constructed line is in its binary's format; those constructed without -kname lack only the name."""
    out = parse_stdout(CON[label])
    binary = label.split("_")[0]
    expected = [] if out.kernels or out.not_supported else [NO_KNAME]
    assert format_problems(out, binary) == expected


def test_format_needs_kernel_names_with_a_verdict_only():
    # a real line printed without -kname: the runner always passes -kname=1, so a verdict without a name is not ours
    assert format_problems(parse_stdout(CON["fwd_no_timing_no_kname"]), "fwd") == [NO_KNAME]
    # the echo alone (the binary failed after echoing) claims no run: no kernel name needed
    echo_only = CON["fwd_not_supported"].replace(", not supported yet", "")
    assert format_problems(parse_stdout(echo_only), "fwd") == []


def test_format_problems_name_what_is_missing():
    out = parse_stdout("[fp16|batch|bhsd] valid:y\n")
    assert format_problems(out, "fwd") == [
        "no problem echo fields b, h, s, d, scale_s, bias, lse, mask, v (tile_example_fmha_fwd always prints "
        "b h s d scale_s bias lse mask v)",
        NO_KNAME,
    ]
    # a fwd line is not a bwd line (scale_s is not scale)
    assert format_problems(parse_stdout(REAL[0][1]), "bwd") == [
        "no problem echo field scale (tile_example_fmha_bwd always prints b h s d scale bias mask)"
    ]
    with pytest.raises(ValueError, match="binary: 'fwd_splitkv' must be one of fwd, bwd"):
        format_problems(out, "fwd_splitkv")
