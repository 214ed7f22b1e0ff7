"""device.launch_fitting_stages: a kernel whose compiled form needs more shared memory than the device has runs with
fewer pipeline stages (found on an H100: a d96 causal elementwise-bias 128x128 kernel at 3 stages asked for 256 KiB).

Needs only torch and triton importable (no GPU): the kernel is a stand-in that raises Triton's own OutOfResources.
"""

from __future__ import annotations

import pytest

triton = pytest.importorskip("triton", reason="triton is not installed (pip install 'ckfmha[gpu]')")
pytest.importorskip("torch", reason="torch is not installed (pip install 'ckfmha[gpu]')")

from triton.runtime.errors import OutOfResources  # noqa: E402

from ckfmha.backends.triton import device as launch  # noqa: E402  (launch_fitting_stages lives in the device layer)


class FakeKernel:
    """Needs ``smem_per_stage * NUM_STAGES`` bytes; the device has ``limit``."""

    def __init__(self, smem_per_stage: int, limit: int) -> None:
        self.smem_per_stage, self.limit = smem_per_stage, limit
        self.launched: list[int] = []

    def __getitem__(self, grid):
        def run(*args, NUM_STAGES: int, num_warps: int, num_stages: int, **meta):
            need = self.smem_per_stage * NUM_STAGES
            if need > self.limit:
                raise OutOfResources(need, self.limit, "shared memory")
            self.launched.append(NUM_STAGES)

        return run


def test_too_many_stages_fall_back_and_are_remembered() -> None:
    kern = FakeKernel(100_000, 232_448)
    meta = {"NUM_STAGES": 3, "BLOCK_M": 128}
    launch.launch_fitting_stages(kern, (1,), (), meta, 8)
    assert kern.launched == [2]
    assert meta["NUM_STAGES"] == 3  # the caller's arguments are not changed
    launch.launch_fitting_stages(kern, (1,), (), meta, 8)  # remembered: no second failed try
    assert kern.launched == [2, 2]


def test_stages_that_fit_are_kept() -> None:
    kern = FakeKernel(50_000, 232_448)
    launch.launch_fitting_stages(kern, (1,), (), {"NUM_STAGES": 3}, 4)
    assert kern.launched == [3]


def test_one_stage_that_does_not_fit_is_triton_error() -> None:
    kern = FakeKernel(300_000, 232_448)
    with pytest.raises(OutOfResources, match="shared memory"):
        launch.launch_fitting_stages(kern, (1,), (), {"NUM_STAGES": 2}, 4)
    assert kern.launched == []
