"""Filter expressions: allowed grammar evaluates; everything else is rejected with a clear error."""

from __future__ import annotations

import pytest

from ckfmha.filters import FilterError, combine, compile_filter, load_filter_file
from ckfmha.kernel import KernelConfig
from tests.sample_kernels import fwd_config as cfg


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("c.hdim_q == 128 and c.pipeline == 'qr_async'", True),
        ("c.hdim_q == 128 and c.pipeline == 'qr'", False),
        ("c.dtype in ('fp16', 'bf16') and not c.lse", True),
        ("c.tile[0] >= 128 and c.tile[1] % 64 == 0", True),
        ("c.mask not in ['causal', 'generic'] or c.bias == 'alibi'", True),
        ("c.hdim_q + c.hdim_v > 300", False),
        ("-1 == c.occupancy", True),
        ("True", True),
    ],
)
def test_allowed_expressions(expr: str, expected: bool) -> None:
    assert compile_filter(expr)(cfg()) is expected


@pytest.mark.parametrize(
    "expr, message",
    [
        ("__import__('os').system('true')", "function calls are not allowed"),
        ("c.hdim_q.__class__", "attribute access is allowed on 'c' only"),
        ("c.__class__ == 1", "unknown field '__class__'"),
        ("c.hdimq == 128", "unknown field 'hdimq'"),
        ("x == 1", "names other than c.<field>"),
        ("c == 1", "'c' must be used as c.<field>"),
        ("[i for i in (1, 2)]", "ListComp is not allowed"),
        ("lambda: 1", "Lambda is not allowed"),
        ("c.hdim_q ==", "does not parse"),
        ("", "empty expression"),
        ("c.tile[c.hdim_q]", "an index must be an integer literal"),
        ("c.hdim_q ** 2 > 1", "arithmetic operator Pow is not allowed"),
    ],
)
def test_rejected_expressions(expr: str, message: str) -> None:
    with pytest.raises(FilterError, match=message.replace("(", r"\(").replace("[", r"\[").replace("*", r"\*")):
        compile_filter(expr)


def test_filter_file_and_combination(tmp_path) -> None:
    f = tmp_path / "flt.py"
    f.write_text("def filter_config(c):\n    return c.hdim_q == 128\n")
    by_file = load_filter_file(f)
    by_expr = compile_filter("c.pipeline == 'qr'")
    both = combine([by_file, by_expr])
    assert by_file(cfg()) and not by_expr(cfg())
    assert not both(cfg()) and both(cfg(pipeline="qr"))
    assert not both(cfg(pipeline="qr", hdim_q=64))
    assert combine([None, None]) is None


def test_filter_file_errors(tmp_path) -> None:
    with pytest.raises(FilterError, match="no such file"):
        load_filter_file(tmp_path / "missing.py")
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    with pytest.raises(FilterError, match="must define a function filter_config"):
        load_filter_file(bad)
    broken = tmp_path / "broken.py"
    broken.write_text("def filter_config(c)\n")
    with pytest.raises(FilterError, match="failed to load: SyntaxError"):
        load_filter_file(broken)


# ------------------------------------------------------------------------------------ types, limits, evaluation
def bwd_cfg() -> KernelConfig:
    return KernelConfig.make(
        family="bwd_dq_dk_dv",
        dtype="fp16",
        mode="batch",
        hdim_q=64,
        hdim_v=64,
        arch_tag="gfx9",
        pipeline="bwd_dq_dk_dv",
        tile=(32, 128, 64, 32, 64, 32, 32, 64, 64),
        warps=((1, 4, 1), (4, 1, 1), (1, 4, 1)),
        warp_tiles=((16, 16, 32), (16, 16, 16), (16, 16, 16)),
    )


@pytest.mark.parametrize(
    "expr, message",
    [
        ("c.tile[99] == 1", "index 99 is out of range: tile has at most 9 entries (bwd dq_dk_dv), so indices run 0..8"),
        ("c.tile[9] == 1", "index 9 is out of range"),
        ("c.warps[3] == (1, 1, 1)", "index 3 is out of range: warps has at most 3 GEMM stages (bwd)"),
        ("c.warp_tiles[0][3] == 1", "index 3 is out of range: an (m, n, k) triple has 3 entries"),
        ("c.tile[-1] == 1", "negative indices are not allowed"),
        ("c.hdim_q[0] == 1", "hdim_q is an int and cannot be indexed"),
        ("c.tile[0][0] == 1", "tile[0] is an int and cannot be indexed"),
        ("c.hdim_q // 0 == 1", "division or modulo by zero: 'c.hdim_q // 0'"),
        ("c.hdim_q % 0 == 1", "division or modulo by zero"),
    ],
)
def test_index_and_division_errors_at_compile_time(expr: str, message: str) -> None:
    with pytest.raises(FilterError) as e:
        compile_filter(expr)
    assert message in str(e.value) and repr(expr) in str(e.value)


def test_evaluation_errors_name_expression_kernel_and_cause() -> None:
    fwd = cfg()
    pred = compile_filter("c.tile[7] == 64")
    assert pred(bwd_cfg()) is True  # bwd dq_dk_dv tiles have 9 entries
    with pytest.raises(FilterError) as e:
        pred(fwd)
    assert str(e.value) == (
        f"filter 'c.tile[7] == 64': cannot evaluate on kernel {fwd.kernel_id}: tile[7] is out "
        "of range: this kernel's tile has 6 entries (family fwd)"
    )
    with pytest.raises(FilterError, match=r"this kernel's warps has 2 entries \(family fwd\)"):
        compile_filter("c.warps[2][0] == 1")(cfg(warps=((4, 1, 1), (4, 1, 1))))
    # short-circuiting keeps a family-specific index safe
    assert compile_filter("c.family == 'bwd_dq_dk_dv' and c.tile[7] == 64")(fwd) is False
    with pytest.raises(FilterError) as e:
        compile_filter("c.hdim_q % (c.hdim_q - c.hdim_v) == 0")(fwd)
    assert f"cannot evaluate on kernel {fwd.kernel_id}: ZeroDivisionError: integer" in str(e.value)


@pytest.mark.parametrize(
    "expr, message",
    [
        (
            "c.pipeline == 'qr_asnyc'",
            "'qr_asnyc' is not a pipeline value (did you mean 'qr_async'?); pipeline is one "
            "of: qr, qr_async, qr_async_trload",
        ),
        ("'qr_asnyc' == c.pipeline", "'qr_asnyc' is not a pipeline value"),
        (
            "c.dtype in ('fp16', 'bf17')",
            "'bf17' is not a dtype value (did you mean 'bf16'?) (in 'in ('fp16', 'bf17')')",
        ),
        ("c.mask not in ['casual']", "'casual' is not a mask value"),
        ("c.hdim_q == '128'", "hdim_q is an int, '128' is a str"),
        ("'128' == c.hdim_q", "'128' is a str, hdim_q is an int"),
        ("c.hdim_q in (64, '128')", "hdim_q is an int, '128' is a str (in 'in (64, '128')')"),
        ("c.lse == 1", "lse is a bool, 1 is an int"),
        ("c.pipeline == 1", "pipeline is a Pipeline token, 1 is an int"),
        ("c.dtype == c.mode", "dtype is a DType token, mode is a Mode token: they never compare equal"),
        ("c.tile == 128", "tile is a tuple of ints, 128 is an int"),
        ("c.tile == ('a', 'b')", "tile is a tuple of ints, but ('a', 'b') holds 'a', a str"),
        ("c.warps[0] == (4, 1)", "warps[0] is an (m, n, k) triple, (4, 1) has 2 entries"),
        ("c.hdim_q == None", "None is not a value of any KernelConfig field"),
        ("c.hdim_q < 1.5", "float literals are not allowed"),
        ("c.pipeline < 'qr'", "'<' orders ints only, but pipeline is a Pipeline token"),
        ("'q' in c.pipeline", "'in' needs a collection literal or a tuple field on its right"),
        (
            "c.hdim_q",
            "the expression must be a condition (a comparison, a bool field, and/or/not), but hdim_q is an int",
        ),
        ("c.lse and c.hdim_q", "'and' combines conditions, but hdim_q is an int"),
        ("not c.pipeline", "'not' applies to conditions, but pipeline is a Pipeline token"),
        ("c.lse + 1 == 2", "arithmetic applies to ints only, but lse is a bool"),
        ("'a' * 100000000 == c.pipeline", "arithmetic applies to ints only, but 'a' is a str"),
        ("c.tile * 2 == c.tile", "arithmetic applies to ints only, but tile is a tuple of ints"),
        ("-c.pipeline == 1", "unary '-' applies to ints only"),
    ],
)
def test_literals_and_operands_are_type_checked(expr: str, message: str) -> None:
    with pytest.raises(FilterError) as e:
        compile_filter(expr)
    assert message in str(e.value)


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("c.tile == (128, 128, 32, 128, 32, 128)", True),
        ("c.warps[0] == (4, 1, 1) and c.warps[1][0] == 4", True),
        ("128 in c.tile and 7 not in c.tile", True),
        ("(4, 1, 1) in c.warps", True),
        ("c.occupancy in (-1, 1)", True),
        ("1 < c.hdim_q <= 128", True),
        ("c.lse == False and c.pipeline != 'qr'", True),
        ("(c.hdim_q == 128) == (c.pipeline == 'qr_async')", True),
        ("c.mask == 'causal'", False),  # type-correct: MaskImpl has 'causal' (generic mask mode)
        ("c.family == c.family", True),
    ],
)
def test_well_typed_expressions(expr: str, expected: bool) -> None:
    assert compile_filter(expr)(cfg(warps=((4, 1, 1), (4, 1, 1)))) is expected


def test_limits() -> None:
    import time

    from ckfmha import filters

    assert (filters.MAX_EXPRESSION_LENGTH, filters.MAX_NESTING_DEPTH, filters.MAX_COLLECTION_ITEMS) == (2000, 32, 256)
    with pytest.raises(FilterError, match="4005 characters, more than the limit 2000"):
        compile_filter("not " * 1000 + "c.lse")
    with pytest.raises(FilterError, match="nested deeper than 32 levels"):
        compile_filter("not " * 490 + "c.lse")  # under the length limit: the depth limit catches it
    with pytest.raises(FilterError, match="nested deeper than 32 levels"):
        compile_filter(" + ".join(["c.hdim_q"] * 40) + " == 1")
    assert compile_filter("not " * 21 + "c.lse")(cfg()) is True  # lse is False
    with pytest.raises(FilterError, match="does not parse: too many nested parentheses"):
        compile_filter("(" * 300 + "c.lse" + ")" * 300)
    with pytest.raises(FilterError, match="a collection literal holds 300 items, more than the limit 256"):
        compile_filter("c.hdim_q in (" + ", ".join(["1"] * 300) + ")")
    with pytest.raises(FilterError, match="does not parse"):
        compile_filter("c.lse\x00")
    with pytest.raises(FilterError, match="expected an expression string, found int"):
        compile_filter(3)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    with pytest.raises(FilterError):
        compile_filter("'a' * 100000000 == c.pipeline")
    assert time.perf_counter() - t0 < 1.0


def test_long_expressions_are_shortened_in_messages() -> None:
    with pytest.raises(FilterError) as e:
        compile_filter("c.hdim_q in (" + ", ".join(["1"] * 300) + ")")
    assert "(912 characters)" in str(e.value) and len(str(e.value)) < 400


def test_predicate_attributes_and_literal_fields() -> None:
    from ckfmha.filters import literal_field_values

    pred = compile_filter("  c.mask == 'causal' or (c.tile[7] == 64 and 128 in c.tile) or c.hdim_q == c.hdim_v ")
    assert pred.expression == "c.mask == 'causal' or (c.tile[7] == 64 and 128 in c.tile) or c.hdim_q == c.hdim_v"
    assert pred.literal_fields == (("mask",), ("tile", 7))
    assert pred.fast(bwd_cfg()) is True  # the unwrapped function
    values = literal_field_values(pred, [cfg(mask="any"), cfg(), bwd_cfg(), cfg(mask="any")])
    assert values == {"mask": ["none", "any"], "tile[7]": [64]}
    assert literal_field_values(lambda c: True, [cfg()]) == {}


def test_filter_file_evaluation_errors(tmp_path) -> None:
    f = tmp_path / "raises.py"
    f.write_text("def filter_config(c):\n    return c.tile[7] == 1\n")
    pred = load_filter_file(f)
    with pytest.raises(FilterError) as e:
        pred(cfg())
    assert str(e.value).startswith(
        f"filter file {str(f)!r}: filter_config raised on kernel {cfg().kernel_id}: "
        "IndexError: tuple index out of range"
    )
    g = tmp_path / "truthy.py"
    g.write_text("def filter_config(c):\n    return c.hdim_q\n")
    with pytest.raises(FilterError, match=r"filter_config returned 128 \(int\) on kernel .*; it must return a bool"):
        load_filter_file(g)(cfg())


def test_filter_file_is_documented_as_trusted_code() -> None:
    from ckfmha import filters

    assert "runs Python" in filters.__doc__ and "only use files you trust" in filters.__doc__
    assert "runs Python" in load_filter_file.__doc__ and "only use files you trust" in load_filter_file.__doc__
