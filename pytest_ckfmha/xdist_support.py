"""pytest-xdist integration: ``-n`` uses ckfmha's scheduler (scheduling.py: each kernel built once, then its
items spread over the workers longest first; crashed workers handled) unless ``--dist`` is given, the
controller's arch reaches the workers, a dead worker's item gets a reason that names the worker's exit status and
the item, and each worker sees one GPU.

GPU per worker (multi-GPU machines only): worker ``gw<n>`` gets device ``n % count``.  When
``CUDA_VISIBLE_DEVICES`` / ``HIP_VISIBLE_DEVICES`` is already set from outside, the worker indexes into that list
(so ``CUDA_VISIBLE_DEVICES=2,3 pytest -n 4`` uses GPUs 2 and 3 only).  The count comes from the outer list, else
``CKFMHA_GPU_COUNT``, else the device nodes (``/dev/nvidia<N>``, or the GPU nodes of ``/sys/class/kfd``).  Done in
the worker's ``pytest_configure``, before anything imports torch; the controller never touches the variables.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

VISIBLE_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def worker_index(worker_id: str | None) -> int | None:
    m = re.fullmatch(r"gw(\d+)", worker_id or "")
    return int(m.group(1)) if m else None


def count_gpus() -> int:
    env = os.environ.get("CKFMHA_GPU_COUNT")
    if env and env.isdigit():
        return int(env)
    nv = [p for p in Path("/dev").glob("nvidia[0-9]*")]
    if nv:
        return len(nv)
    kfd = Path("/sys/class/kfd/kfd/topology/nodes")
    n = 0
    if kfd.is_dir():
        for node in kfd.iterdir():
            try:
                if int((node / "gpu_id").read_text().strip() or 0):
                    n += 1
            except (OSError, ValueError):
                continue
    return n


def assign_gpu(environ, worker_id: str | None, count=count_gpus) -> dict[str, str]:
    """Set the visible-device variables for this worker; returns what was set (empty when nothing was)."""
    idx = worker_index(worker_id)
    if idx is None:
        return {}
    outer = next((environ[v] for v in VISIBLE_VARS if environ.get(v)), None)
    if outer is not None:
        devs = [d.strip() for d in outer.split(",") if d.strip()]
        if len(devs) <= 1:
            return {}
        chosen = devs[idx % len(devs)]
    else:
        n = count()
        if n <= 1:
            return {}
        chosen = str(idx % n)
    out = {v: chosen for v in VISIBLE_VARS}
    environ.update(out)
    return out


def user_chose_dist(config) -> bool:
    """Whether --dist (or -d) was given on the command line, PYTEST_ADDOPTS or the ini addopts."""
    toks = list(config.invocation_params.args)
    toks += shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    try:
        toks += list(config.getini("addopts"))
    except ValueError:  # pragma: no cover
        pass
    return any(t == "--dist" or t.startswith("--dist=") or t == "-d" for t in toks)


def stop_workers(dsession) -> None:
    """Stop the workers xdist's controller session started (for an error raised at session start: pytest then
    never calls the session-finish hook, where xdist would stop them itself)."""
    manager = getattr(dsession, "nodemanager", None)
    if manager is not None:
        manager.teardown_nodes()


class XdistHooks:
    """Registered only when pytest-xdist is active (its hooks are unknown otherwise)."""

    def __init__(self, settings, own_scheduler: bool) -> None:
        self.settings = settings
        self.own_scheduler = own_scheduler

    def pytest_configure_node(self, node) -> None:
        node.workerinput["ckfmha_arch"] = self.settings.arch
        node.workerinput["ckfmha_arch_source"] = self.settings.arch_source

    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        recorder = node.config.pluginmanager.get_plugin("ckfmha-recorder")
        if recorder is not None:
            recorder.book.set_collected(ids)

    def pytest_testnodedown(self, node, error) -> None:
        """A worker finished (or died): its timeline record (timeline.py) goes to the report's ``processes``."""
        from pytest_ckfmha.timeline import WORKEROUTPUT_KEY

        record = getattr(node, "workeroutput", {}).get(WORKEROUTPUT_KEY)
        recorder = node.config.pluginmanager.get_plugin("ckfmha-recorder")
        if record is not None and recorder is not None:
            import time

            record["marks"]["down"] = time.time()  # the controller heard it finished (timeline.py)
            recorder.worker_timelines.append(record)

    def pytest_xdist_make_scheduler(self, config, log):
        if not self.own_scheduler:
            return None
        from pytest_ckfmha.scheduling import BuildOnceScheduling

        return BuildOnceScheduling.from_config(config, log)

    def pytest_handlecrashitem(self, crashitem, report, sched) -> None:
        from pytest_ckfmha.ids import NodeId
        from pytest_ckfmha.scheduling import crash_description

        what = crash_description(getattr(report, "node", None))
        node = NodeId.parse(crashitem)
        item = node.describe() if node is not None else crashitem
        report.longrepr = f"{crashitem}: crashed: {what} while running {item}; the item is not re-run"
