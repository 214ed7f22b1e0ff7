"""The names-only enumeration paths: fwd, bwd, batch_prefill and fwd_splitkv name their kernels without making the
pairs (``enumerate_names``), from the split names of :func:`ckfmha.naming.ck_name_parts` or the pieces of
:func:`ckfmha.naming.join_name_pieces`; each must equal naming the pairs, in order.  Also the
scoped pause of the cyclic garbage collector around an enumeration."""

from __future__ import annotations

import gc

import pytest

import ckfmha.enumeration as enumeration
from ckfmha.archs import ck_archs, load_arch_spec
from ckfmha.enumeration import EnumContext, _fwdlike, batch_prefill, bwd, ck_instance_names, enumerate_api, fwd, splitkv
from ckfmha.kernel import Api, Family, KernelAlgorithm, KernelSignature, MaskMode, Pipeline
from ckfmha.naming import (
    NAME_HEAD_FIELDS,
    NAME_TAIL_ALGORITHM_FIELDS,
    NAME_TAIL_SIGNATURE_FIELDS,
    CKNameError,
    ck_instance_name,
    ck_name_algorithm_pieces,
    ck_name_middle,
    ck_name_parts,
    ck_name_signature_pieces,
    join_name_pieces,
    render_ck_names,
)

# receipts: the default, one that adds kernels (1), signature-only filters (2, 100: reads mode), fp32 only (800)
RECEIPTS = (0, 1, 2, 100, 800)


def _ctx(api: Api, arch: str, receipt: int, mask_mode: MaskMode) -> EnumContext | None:
    spec = load_arch_spec(arch)
    return EnumContext(api, arch, spec, receipt, mask_mode) if spec.has_section(api) else None


NAMES_MODULES = {Api.FWD: fwd, Api.BWD: bwd, Api.BATCH_PREFILL: batch_prefill, Api.FWD_SPLITKV: splitkv}


@pytest.mark.parametrize("api", tuple(NAMES_MODULES))
@pytest.mark.parametrize("mask_mode", tuple(MaskMode))
def test_names_path_equals_named_pairs(api: Api, mask_mode: MaskMode) -> None:
    module = NAMES_MODULES[api]
    for arch in ck_archs():
        for receipt in RECEIPTS:
            ctx = _ctx(api, arch, receipt, mask_mode)
            if ctx is not None:
                assert module.enumerate_names(ctx) == render_ck_names(module.enumerate_pairs(ctx)), (arch, receipt)


def test_names_path_falls_back_to_pairs_for_config_filters(monkeypatch: pytest.MonkeyPatch) -> None:
    # a receipt filter reading signature and algorithm fields: tested per config, so the pairs are named
    keep = lambda c: c.pad_d == 0 or c.lse  # noqa: E731 - a plain filter, as the compiled ones
    monkeypatch.setattr(EnumContext, "keep", property(lambda self: keep))
    named: list[int] = []  # the length of each list of pairs named

    def spy(pairs):
        named.append(len(pairs))
        return render_ck_names(pairs)

    for api, module in NAMES_MODULES.items():
        named.clear()
        renders = _fwdlike if module is splitkv else module  # where the names path names pairs
        monkeypatch.setattr(renders, "render_ck_names", spy)
        ctx = _ctx(api, "gfx942", 0, MaskMode.SIMPLIFIED)
        assert ctx is not None
        names = module.enumerate_names(ctx)
        assert names and names == render_ck_names(module.enumerate_pairs(ctx))
        assert sum(named) == len(names)  # every kernel was named from its pair


def _configs_of_split_families():
    for api in (Api.FWD, Api.FWD_SPLITKV, Api.BATCH_PREFILL, Api.BWD):
        for arch in ("gfx942", "gfx950", "gfx1201"):
            for mask_mode in MaskMode:
                for c in enumerate_api(api, arch, 1, mask_mode):
                    if c.signature.family in NAME_TAIL_ALGORITHM_FIELDS:
                        yield c


def test_name_parts_join_to_the_name_and_depend_on_what_they_say() -> None:
    # each part is a function of the fields ck_name_parts documents: equal keys, equal parts
    seen: dict[tuple, str] = {}
    n = 0
    for c in _configs_of_split_families():
        s, a = c.signature, c.algorithm
        head, middle, tail = ck_name_parts(s, a)
        assert head + middle + tail == ck_instance_name(c)
        assert middle == ck_name_middle(a, s.family)
        keys = (
            ("head", *(getattr(s, f) for f in NAME_HEAD_FIELDS)),
            ("middle", s.family, a),
            (
                "tail",
                s.family,
                *(getattr(s, f) for f in NAME_TAIL_SIGNATURE_FIELDS),
                *(getattr(a, f) for f in NAME_TAIL_ALGORITHM_FIELDS[s.family]),
            ),
        )
        for key, part in zip(keys, (head, middle, tail)):
            assert seen.setdefault(key, part) == part, (key, part)
        n += 1
    assert n > 50_000


def test_name_parts_of_other_families_raise() -> None:
    s = KernelSignature(Family.BWD_DOT_DO_O, "fp16", "batch", 64, 64, "gfx9")  # type: ignore[arg-type]
    with pytest.raises(CKNameError, match="not split"):
        ck_name_parts(s, KernelAlgorithm(Pipeline.BWD_DOT_DO_O, (64,)))
    with pytest.raises(CKNameError, match="not split"):
        ck_name_signature_pieces(s)


def test_name_pieces_join_to_the_name() -> None:
    n = 0
    for c in _configs_of_split_families():
        s, a = c.signature, c.algorithm
        pieces = (ck_name_signature_pieces(s), ck_name_algorithm_pieces(a, s.family))
        assert join_name_pieces([pieces]) == [ck_instance_name(c)]
        n += 1
    assert n > 50_000


@pytest.mark.parametrize("enabled", (True, False))
def test_collector_paused_during_an_enumeration_and_restored(enabled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    real = fwd.enumerate_names

    def spy(ctx):
        seen.append(gc.isenabled())
        if ctx.mask_mode is MaskMode.GENERIC:
            raise RuntimeError("boom")
        return real(ctx)

    monkeypatch.setattr(fwd, "enumerate_names", spy)
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        enumeration.clear_caches()
        assert ck_instance_names(Api.FWD, "gfx942", 0, "simplified")
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError, match="boom"):
            ck_instance_names(Api.FWD, "gfx942", 0, "generic")
        assert gc.isenabled() is enabled
        assert seen == [False, False]
    finally:
        (gc.enable if was else gc.disable)()
        enumeration.clear_caches()
