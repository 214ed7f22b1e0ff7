"""The Triton backend's device layer under the stage contract (ckfmha/backends/triton/device.py), on torch CPU
tensors (no GPU, no kernel): device copies of inputs kept per run by name and array identity, never aliasing the
caller's arrays; output buffers and results from the stage's output specs.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install 'ckfmha[gpu]')")
pytest.importorskip("triton", reason="triton is not installed (pip install 'ckfmha[gpu]')")

import torch  # noqa: E402

from ckfmha.backends.base import RunContext  # noqa: E402
from ckfmha.backends.triton import device  # noqa: E402
from ckfmha.plan import OutputSpec  # noqa: E402


def _readonly(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


def test_an_input_is_uploaded_once_per_run_and_afresh_when_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    uploads: list[str] = []
    real = device.to_torch
    monkeypatch.setattr(device, "to_torch", lambda a, dev=None: uploads.append(a.dtype.name) or real(a, dev))
    ctx = RunContext()
    q = np.arange(6, dtype=np.float32).reshape(2, 3)
    first = device.DeviceTensors({"q": _readonly(q)}, ctx)
    second = device.DeviceTensors({"q": _readonly(q)}, ctx)  # the runner's new view of the same array
    assert first["q"] is second["q"] and uploads == ["float32"]
    replaced = device.DeviceTensors({"q": _readonly(q + 1)}, ctx)
    assert replaced["q"][0, 0].item() == 1.0 and len(uploads) == 2
    assert device.DeviceTensors({"q": _readonly(q)}, RunContext())["q"] is not first["q"]  # another run


def test_hidden_names_and_absent_inputs_are_not_tensors() -> None:
    t = device.DeviceTensors({"o": np.zeros(2, np.float32), "q": np.ones(2, np.float32)}, RunContext(), {"o"})
    assert "o" not in t and t.get("o") is None and "k" not in t and t.get("k", 7) == 7
    t["o"] = torch.zeros(3)
    assert "o" in t and t["o"].shape == (3,)


def test_an_upload_never_writes_into_the_callers_array() -> None:
    a = _readonly(np.zeros(4, np.float16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = device.to_torch(a, "cpu")
    t += 1
    assert not a.any()


def test_a_returned_array_is_found_on_the_device_by_the_next_stage() -> None:
    ctx = RunContext()
    t = device.DeviceTensors({}, ctx)
    dev = torch.arange(4, dtype=torch.float32)
    out = device.to_numpy(dev)
    t.keep("d", out, dev)
    assert device.DeviceTensors({"d": _readonly(out)}, ctx)["d"] is dev


def test_buffers_and_results_follow_the_spec() -> None:
    spec = OutputSpec("dq_acc", (1, 1, 2, 3, 4), "float32")
    buf = torch.zeros((1, 1, 2, 5, 4))  # an upper-bound buffer
    assert device.spec_output(buf, spec).shape == spec.shape
    fnuz = OutputSpec("o", (2, 2), "float8_e4m3fnuz")
    o = device.poisoned_output(fnuz)
    assert o.dtype is torch.float32 and torch.isnan(o).all()
    o.fill_(0.5)
    assert device.spec_output(o, fnuz).dtype == np.dtype(fnuz.dtype)
    rv = device.poisoned_output(OutputSpec("randval", (2,), "uint8", required=False))
    assert rv.dtype is torch.uint8 and not rv.any()
    assert np.array_equal(
        device.to_numpy(device.poisoned_output(OutputSpec("lse", (3,), "float32"))).view(np.uint32),
        OutputSpec("lse", (3,), "float32").allocate().view(np.uint32),
    )
