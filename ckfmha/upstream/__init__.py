"""Upstreams ckfmha checks itself against (issue 7).  Each module has one concern; nothing here imports torch:

* :mod:`~ckfmha.upstream.result` -- :class:`Verdict` and :class:`SideResult`, what a parity side reports;
* :mod:`~ckfmha.upstream.tile_output` -- parser of the tile_example binaries' stdout and ``-json=1`` file;
* :mod:`~ckfmha.upstream.tile_runner` -- Problem -> arguments, binary discovery, running with a timeout,
  the verdict from exit status + output, and the ``tile_example`` side;
* :mod:`~ckfmha.upstream.ckfmha_side` -- ckfmha's dispatcher + backend as a side;
* :mod:`~ckfmha.upstream.torch_express` -- what each torch backend can express (pure logic);
* :mod:`~ckfmha.upstream.torch_sdpa` -- the ``torch[:backend]`` side (imports torch lazily);
* :mod:`~ckfmha.upstream.reference_cache` -- inputs + reference shared by the sides of one row;
* :mod:`~ckfmha.upstream.judging` -- judging a side's outputs: CK's elementwise tolerance and the noise floor;
* :mod:`~ckfmha.upstream.enum_parity` -- ``ckfmha parity-enum`` against a CK checkout's generate.py.

Parity semantics and the report live in :mod:`ckfmha.parity`.
"""

from ckfmha.upstream.result import SideResult, Verdict  # noqa: F401
