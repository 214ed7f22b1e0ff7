"""Filter expressions: allowed grammar evaluates; everything else is rejected with a clear error."""

from __future__ import annotations

import pytest

from ckfmha.filters import FilterError, combine, compile_filter, load_filter_file
from ckfmha.kernel import KernelConfig


def cfg(**kw) -> KernelConfig:
    base = dict(family="fwd", dtype="fp16", mode="batch", hdim_q=128, hdim_v=128, arch_tag="gfx9",
                pipeline="qr_async", tile=(128, 128, 32, 128, 32, 128))
    base.update(kw)
    return KernelConfig.make(**base)


@pytest.mark.parametrize("expr, expected", [
    ("c.hdim_q == 128 and c.pipeline == 'qr_async'", True),
    ("c.hdim_q == 128 and c.pipeline == 'qr'", False),
    ("c.dtype in ('fp16', 'bf16') and not c.lse", True),
    ("c.tile[0] >= 128 and c.tile[1] % 64 == 0", True),
    ("c.mask not in ['causal', 'generic'] or c.bias == 'alibi'", True),
    ("c.hdim_q + c.hdim_v > 300", False),
    ("-1 == c.occupancy", True),
    ("True", True),
])
def test_allowed_expressions(expr: str, expected: bool) -> None:
    assert compile_filter(expr)(cfg()) is expected


@pytest.mark.parametrize("expr, message", [
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
])
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
