#!/usr/bin/env python3
"""How often the dispatcher picks a kernel within 5% of the fastest one, before and after ``ckfmha tune``.

    python benchmarks/bench_dispatch.py OUT.json [--arch sm90] [--backend triton] [--category nightly]
           [--max-shapes 120] [--max-kernels 8] [--repeat 10] [--shard K/N] [--prebuild J] [--time-budget S]
    python benchmarks/bench_dispatch.py OUT.json --merge SHARD.json [SHARD.json ...]

For every selected shape of the category's forward family (``--select``, up to ``--max-shapes``), every
candidate kernel of the main stage (the dispatcher's ``ranked_candidates``, up to ``--max-kernels`` in rank order)
is timed with its plan (a warm-up, then the median of ``--repeat`` device-timed runs, the L2 cache flushed before
each).  Measured: the share of shapes where the dispatcher's choice runs within 5% of the fastest measured kernel
-- with the packaged tie-break table, then with the table ``ckfmha.heuristics.tune`` derives from these timings
(the rows are written in the run report's format, so ``ckfmha tune OUT.json`` gives the same table).  Target after
tuning: >= 90%.  Tuning and measuring on the same shapes flatters the table, so the share is also given held out:
a table tuned on the shapes at even positions of the selected list, measured on those at odd positions.  Writes a
report JSON (schema ``ckfmha.report``) with one row per timed kernel and the figures.

| ``--select`` | the selected list (and so the held-out split) |
|---|---|
| ``spread`` (default) | up to ``--max-shapes`` shapes spread evenly over the category's list; half the held-out shapes then belong to a shape class the tuned half never timed, where the tuned table has nothing to say (session 10: 24 of 48) |
| ``paired`` | for each shape class (``ckfmha.heuristics.shape_class``) with at least two shapes, its first and its middle one, one after the other (classes spread evenly when more than ``--max-shapes`` / 2): the table is tuned on the first of each pair and measured on the other -- a new shape of a class the nightly measured, which is what a table tuned on last night's run meets |

| option | what it does |
|---|---|
| ``--shard K/N`` | time only the selected shapes at positions ``i`` with ``(i // 2) % N == K - 1``: whole pairs (positions 2j and 2j+1, one tuned and one held out), so that each shard's own figures, and a shard cut short by ``--time-budget``, still have both halves (one process per GPU: each shard on its own GPU, ``CUDA_VISIBLE_DEVICES``; or one shard after another) |
| ``--prebuild J`` | before timing, run every candidate plan of the shard once in ``J`` processes, so that Triton's compiles (at the first launch of each specialization, into its on-disk cache) run in parallel; the timing pass then finds them on disk.  The timings are unchanged: each kernel's warm-up run precedes its timed runs either way |
| ``--merge SHARD.json ...`` | time nothing: the figures over the shards' timings together (the shards must share ``--arch``, ``--category``, ``--max-shapes`` and ``--select``; the held-out split is by position in the selected list, as in one run) |

The report is written after every timed shape (``state: running``: the timings so far, no figures) and at the end
(``complete``, with the figures); a SIGTERM (a job's time limit, ``timeout``) writes the timings so far with
``state: interrupted`` and exits 143.  ``--merge`` reads any of the three, so a run cut short loses at most the
shape it was timing.  The held-out figures also say where the misses are: the share per size class of the shape
(its fastest kernel's time) and the geometric mean of chosen / fastest; the noise profile says how far the timings
can tell kernels apart at all (from each kernel's min and max over its repeats: ``_noise_profile``).

Run it on a GPU (``--backend cpu`` only checks the script).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

WITHIN = 0.05  # "within 5% of the fastest": time <= fastest * 1.05


def _spread(items: list, limit: int) -> list:
    if len(items) <= limit:
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


def _shapes(category: str, limit: int, how: str = "spread"):
    """The selected shapes, in the order the held-out split reads them (module doc, ``--select``)."""
    from ckfmha.heuristics import shape_class
    from ckfmha.matrix import load_matrices, select

    shapes = select(load_matrices(), category, ["fwd"])
    if how == "spread":
        return _spread(shapes, limit)
    classes: dict[tuple, list] = {}
    for sh in shapes:
        classes.setdefault(shape_class(sh.problem), []).append(sh)
    pairs = [(m[0], m[len(m) // 2]) for m in classes.values() if len(m) >= 2]
    return [sh for pair in _spread(pairs, limit // 2) for sh in pair]


def _shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: expected K/N with integers 1 <= K <= N") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: K must be between 1 and N")
    return k, n


def _candidates(base, backend, problem, max_kernels: int) -> list:
    from ckfmha.plan import main_role

    cands = [c for c in base.ranked_candidates(problem, main_role(problem)) if backend.supports(c) is None]
    return cands[:max_kernels]


def _pinned_plan(registry, backend, c, problem):
    """The plan around candidate ``c`` for the problem's main stage (the registry pinned to that one kernel)."""
    from ckfmha.dispatcher import Dispatcher, PinnedRegistry

    return Dispatcher(PinnedRegistry(registry, c), backend).select(problem)  # type: ignore[arg-type]


def _time_plan(backend, plan, problem, inputs, repeat: int) -> tuple[float, float, float]:
    """(median, min, max) of ``repeat`` device-timed runs of the plan after a warm-up run, in ms."""
    from ckfmha.runner import execute, prepare_tensors

    built: dict = {}
    execute(backend, plan, prepare_tensors(problem, plan, inputs)[0], timing=True, built=built)
    times = []
    for _ in range(repeat):
        tensors = prepare_tensors(problem, plan, inputs)[0]
        backend.flush_cache()
        times.append(execute(backend, plan, tensors, timing=True, built=built).total_ms)
    return float(np.median(times)), float(min(times)), float(max(times))


def _share_within(choice: dict[str, str], times: dict[str, dict[str, float]]) -> float:
    ok = sum(1 for sid, t in times.items() if t[choice[sid]] <= min(t.values()) * (1 + WITHIN))
    return ok / len(times) if times else float("nan")


# ---------------------------------------------------------------------------------------- prebuild (child side)
_CHILD: dict = {}


def _child_init(args: dict) -> None:
    from ckfmha.backends import get_backend
    from ckfmha.dispatcher import Dispatcher
    from ckfmha.registry import Registry

    backend = get_backend(args["backend"])
    registry = Registry.from_enumeration(args["arch"])
    _CHILD.update(args, backend=backend, registry=registry, base=Dispatcher(registry, backend),
                  shapes=_shapes(args["category"], args["max_shapes"], args["select"]))  # fmt: skip


def _child_run_shape(index: int) -> tuple[int, int, float]:
    """Run every candidate plan of shape ``index`` once (untimed): the compiles of its specializations."""
    from ckfmha.inputs import make_inputs
    from ckfmha.runner import execute, prepare_tensors

    t0 = time.perf_counter()
    backend, registry = _CHILD["backend"], _CHILD["registry"]
    p = _CHILD["shapes"][index].problem
    cands = _candidates(_CHILD["base"], backend, p, _CHILD["max_kernels"])
    if len(cands) < 2:
        return index, 0, time.perf_counter() - t0
    inputs = make_inputs(p, 0)
    ran = 0
    for c in cands:
        try:
            plan = _pinned_plan(registry, backend, c, p)
            execute(backend, plan, prepare_tensors(p, plan, inputs)[0], built={})
            ran += 1
        except Exception:  # noqa: BLE001 - the timing pass reports a kernel that cannot run
            pass
    backend.release_memory()
    return index, ran, time.perf_counter() - t0


def _prebuild(args, indices: list[int]) -> None:
    import multiprocessing

    t0 = time.perf_counter()
    settings = {k: getattr(args, k) for k in ("backend", "arch", "category", "max_shapes", "max_kernels", "select")}
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(args.prebuild, initializer=_child_init, initargs=(settings,)) as pool:
        for n, (i, ran, secs) in enumerate(pool.imap_unordered(_child_run_shape, indices), 1):
            print(f"  prebuild [{n}/{len(indices)}] shape {i}: {ran} plans run in {secs:.1f} s", flush=True)
    print(f"prebuild of {len(indices)} shapes in {args.prebuild} processes: {time.perf_counter() - t0:.0f} s")


# ---------------------------------------------------------------------------------------------- figures
def _figures(times, problems, rows, order, registry, backend, arch) -> dict:
    from ckfmha.dispatcher import Dispatcher
    from ckfmha.heuristics import heuristics_from_doc, load_heuristics, tune, tuned_document

    base = Dispatcher(registry, backend)

    def choices(table) -> dict[str, str]:
        d = Dispatcher(registry, backend, heuristics=table) if table is not None else base
        return {sid: d.select(problems[sid]).stages[0].kernel.kernel_id for sid in times}

    def tuned(row_list):
        return heuristics_from_doc(tuned_document(None, tune(row_list, arch)), "tuned from this run")

    before, after = choices(None), choices(tuned(rows))
    sids = sorted(times, key=order.__getitem__)  # by position in the selected list
    # tuned on the even positions of the selected list, measured on the odd ones (a shape that was not timed
    # leaves its partner where it is: --select paired keeps each class's pair apart)
    train, held = {s for s in sids if order[s] % 2 == 0}, [s for s in sids if order[s] % 2 == 1]
    train_rows = [r for r in rows if r["id"].split("::", 1)[0] in train]
    after_held = choices(tuned(train_rows)) if train_rows else before
    held_times = {sid: times[sid] for sid in held}
    fig = {
        "share_before": _share_within(before, times),
        "share_after": _share_within(after, times),
        "held_out": {
            "shapes": len(held),
            "share_before": _share_within({s: before[s] for s in held}, held_times),
            "share_after": _share_within({s: after_held[s] for s in held}, held_times),
            **_held_out_profile(before, after_held, held_times),
        },
        "noise": _noise_profile(rows, {s: after_held[s] for s in held}),
        "shapes": len(times),
        "choices": {sid: {"before": before[sid], "after": after[sid], "times_ms": times[sid]} for sid in sids},
    }
    for sid in held:
        fig["choices"][sid]["held_out_after"] = after_held[sid]
    print(f"{len(times)} shapes with >= 2 timed kernels ({len(rows)} timings)")
    print(
        f"dispatcher's choice within {WITHIN:.0%} of the fastest: before tuning {fig['share_before']:.1%}, after "
        f"{fig['share_after']:.1%} (target >= 90%); packaged table {load_heuristics().source}"
    )
    h = fig["held_out"]
    print(
        f"held out ({h['shapes']} shapes, table tuned on the other {len(train)}): before {h['share_before']:.1%}, "
        f"after {h['share_after']:.1%}; chosen / fastest (geometric mean) {h['slowdown_before']:.3f} -> "
        f"{h['slowdown_after']:.3f}"
    )
    for label, b in h["by_fastest_ms"].items():
        if not b["shapes"]:
            continue
        print(
            f"  held out, fastest kernel {label}: {b['shapes']} shapes, within {WITHIN:.0%}: before "
            f"{b['share_before']:.1%}, after {b['share_after']:.1%}"
        )
    n = fig["noise"]
    if n["shapes"]:
        print(
            f"noise (the {n['shapes']} shapes whose rows carry each kernel's min/max over its repeats): median (max - "
            f"min) / median {n['median_spread']:.1%}; the fastest kernel's max below the runner-up's min in "
            f"{n['distinguishable']} shapes; held-out misses {n['held_out_misses']}, of them "
            f"{n['misses_within_range']} with the chosen kernel's min <= the fastest's max"
        )
    return fig


def _noise_profile(rows: list[dict], held_choice: dict[str, str]) -> dict:
    """How far the timings can tell kernels apart: over the shapes whose every row has ``time_min_ms`` /
    ``time_max_ms`` (the repeats' range), the median relative range, the shapes where the fastest kernel (by median)
    is told apart from the runner-up (its max below the runner-up's min), and the held-out misses (chosen > 1.05 x
    fastest) whose chosen kernel's min is within the fastest one's range (its min <= the fastest's max)."""
    by: dict[str, dict[str, dict]] = {}
    for r in rows:
        by.setdefault(r["id"].split("::", 1)[0], {})[r["kernel_id"]] = r
    ranged = {
        s: t
        for s, t in by.items()
        if len(t) >= 2 and all(isinstance(r.get("time_min_ms"), (int, float)) for r in t.values())
    }
    spreads = [(r["time_max_ms"] - r["time_min_ms"]) / r["time_ms"] for t in ranged.values() for r in t.values()]
    told_apart = misses = within = 0
    for sid, t in ranged.items():
        ordered = sorted(t.values(), key=lambda r: r["time_ms"])
        told_apart += ordered[0]["time_max_ms"] < ordered[1]["time_min_ms"]
        chosen = t.get(held_choice.get(sid, ""))
        if chosen is not None and chosen["time_ms"] > ordered[0]["time_ms"] * (1 + WITHIN):
            misses += 1
            within += chosen["time_min_ms"] <= ordered[0]["time_max_ms"]
    return {
        "shapes": len(ranged),
        "median_spread": float(np.median(spreads)) if spreads else None,
        "distinguishable": told_apart,
        "held_out_misses": misses,
        "misses_within_range": within,
    }


#: the held-out profile's size classes: the fastest kernel's median time, ms (lower bound inclusive)
SIZE_BUCKETS = (("< 0.25 ms", 0.0), ("0.25-1 ms", 0.25), (">= 1 ms", 1.0))


def _held_out_profile(before: dict, after: dict, held_times: dict) -> dict:
    """Where the held-out misses are: the share within 5% per size class of the shape (its fastest kernel's time;
    :data:`SIZE_BUCKETS`), and the geometric mean of chosen / fastest before and after tuning."""

    def geomean(choice) -> float:
        ratios = [t[choice[s]] / min(t.values()) for s, t in held_times.items()]
        return float(np.exp(np.mean(np.log(ratios)))) if ratios else float("nan")

    by: dict[str, dict] = {}
    bounds = [lo for _, lo in SIZE_BUCKETS[1:]] + [float("inf")]
    for (label, lo), hi in zip(SIZE_BUCKETS, bounds):
        mine = {s: t for s, t in held_times.items() if lo <= min(t.values()) < hi}
        by[label] = {  # the shares are None for a class without shapes
            "shapes": len(mine),
            "share_before": _share_within({s: before[s] for s in mine}, mine) if mine else None,
            "share_after": _share_within({s: after[s] for s in mine}, mine) if mine else None,
        }
    return {"slowdown_before": geomean(before), "slowdown_after": geomean(after), "by_fastest_ms": by}


def _row(sid: str, kernel_id: str, ms: tuple[float, float, float], p, repeat: int) -> dict:
    return {
        "id": f"{sid}::{kernel_id}",
        "kind": "kernel",
        "verdict": "passed",
        "timed": True,
        "time_ms": ms[0],
        "time_min_ms": ms[1],
        "time_max_ms": ms[2],
        "repeats": repeat,
        "kernel_id": kernel_id,
        "family": "fwd",
        "dtype": p.dtype.value,
        "mode": p.mode.value,
        "hdim_q": p.hdim_q,
        "hdim_v": p.hdim_v,
        "mask": p.mask.to_ck(),
        "seqlen_q": p.seqlen_q,
        "seqlen_k": p.seqlen_k,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="report JSON to write")
    ap.add_argument("--arch", default="sm90")
    ap.add_argument("--backend", default="triton")
    ap.add_argument("--category", default="nightly", choices=("smoke", "full", "nightly"))
    ap.add_argument("--max-shapes", type=int, default=120)
    ap.add_argument("--max-kernels", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument(
        "--select",
        choices=("spread", "paired"),
        default="spread",
        help="spread: up to --max-shapes spread evenly over the list; paired: two shapes of each shape class that has "
        "two (the held-out split tunes on one, measures the other)",
    )
    ap.add_argument("--shard", type=_shard, default=(1, 1), metavar="K/N")
    ap.add_argument("--prebuild", type=int, default=0, metavar="J", help="compile ahead in J processes (0: no)")
    ap.add_argument("--merge", nargs="+", default=None, metavar="SHARD.json", help="figures over shards' timings")
    ap.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop timing new shapes after this many seconds (the shapes done so far are reported; default: none)",
    )
    args = ap.parse_args(argv)

    from ckfmha.backends import get_backend
    from ckfmha.dispatcher import Dispatcher
    from ckfmha.registry import Registry
    from pytest_ckfmha.ids import shape_id

    t0 = time.perf_counter()
    backend = get_backend(args.backend)
    if args.merge:
        docs = [json.loads(Path(f).read_text()) for f in args.merge]
        for key in ("arch", "category", "max_shapes", "select"):
            seen = {d.get(key) for d in docs}
            if len(seen) != 1:
                print(f"--merge: the shards disagree on {key}: {sorted(map(str, seen))}")
                return 2
        args.arch, args.category, args.max_shapes = docs[0]["arch"], docs[0]["category"], docs[0]["max_shapes"]
        args.select = docs[0]["select"]
    else:
        avail = backend.available()
        if not avail:
            print(f"backend {args.backend} is not available: {avail.reason}")
            return 2
    registry = Registry.from_enumeration(args.arch)
    base = Dispatcher(registry, backend)
    shapes = _shapes(args.category, args.max_shapes, args.select)
    order = {shape_id(s.problem): i for i, s in enumerate(shapes)}
    problems = {shape_id(s.problem): s.problem for s in shapes}
    times: dict[str, dict[str, float]] = {}
    rows: list[dict] = []
    devices: list = []
    if args.merge:
        for d in docs:
            rows += d["rows"]
            devices += d["environment"]["devices"]
            for sid, c in d["choices"].items():
                times[sid] = c["times_ms"]
    else:
        import signal

        previous = signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            _time_shapes(args, shapes, registry, backend, base, t0, times, rows, devices)
        except _Terminated:
            _write(args, _document(args, shapes, devices, times, rows, None, "interrupted"))
            print(f"SIGTERM: {len(times)} shapes' timings written to {args.out} (state interrupted; --merge reads it)")
            return 143
        finally:
            signal.signal(signal.SIGTERM, previous)
    fig = _figures(times, problems, rows, order, registry, backend, args.arch)
    print(f"{time.perf_counter() - t0:.0f} s")
    _write(args, _document(args, shapes, devices, times, rows, fig, "complete"))
    return 0


class _Terminated(BaseException):
    """A SIGTERM arrived (a CI job's or ``timeout``'s time limit); a BaseException, so that the per-kernel
    ``except Exception`` lets it through."""


def _on_sigterm(signum, frame) -> None:
    raise _Terminated


def _time_shapes(args, shapes, registry, backend, base, t0: float, times: dict, rows: list, devices: list) -> None:
    """Time the shard's shapes into ``times`` / ``rows`` (and the device into ``devices``); after each shape the
    timings so far are written (state ``running``), so a run stopped by its limit keeps them."""
    from ckfmha.inputs import make_inputs
    from pytest_ckfmha.ids import shape_id

    k, n = args.shard
    mine = [i for i in range(len(shapes)) if (i // 2) % n == k - 1]  # pairs stay together (module doc)
    if args.prebuild > 0:
        _prebuild(args, mine)
    devices.append(backend.device())
    for done, i in enumerate(mine):
        if args.time_budget is not None and time.perf_counter() - t0 > args.time_budget:
            print(f"time budget of {args.time_budget:.0f} s spent: {len(mine) - done} of {len(mine)} shapes not timed")
            break
        p = shapes[i].problem
        sid = shape_id(p)
        cands = _candidates(base, backend, p, args.max_kernels)
        if len(cands) < 2:
            continue
        inputs = make_inputs(p, 0)
        got: dict[str, tuple[float, float, float]] = {}
        for c in cands:
            try:
                got[c.kernel_id] = _time_plan(backend, _pinned_plan(registry, backend, c, p), p, inputs, args.repeat)
            except Exception as e:  # a kernel that cannot run is reported and the sweep goes on
                print(f"  {sid} {c.kernel_id}: not timed ({type(e).__name__}: {e})")
        if len(got) >= 2:
            times[sid] = {kid: ms[0] for kid, ms in got.items()}
            rows += [_row(sid, kid, ms, p, args.repeat) for kid, ms in got.items()]
            _write(args, _document(args, shapes, devices, times, rows, None, "running"))
        fastest = f", fastest {min(v[0] for v in got.values()):.3f} ms" if got else ""
        print(f"[{done + 1}/{len(mine)}] {sid}: {len(got)} kernels timed{fastest}", flush=True)
        del inputs


def _document(args, shapes, devices, times, rows, fig, state: str) -> dict:
    """The report JSON: the figures (none in a checkpoint: ``running``, or ``interrupted`` after a SIGTERM), each
    timed shape's kernel times (what ``--merge`` reads) and one row per timed kernel."""
    choices = fig["choices"] if fig is not None else {sid: {"times_ms": t} for sid, t in times.items()}
    return {
        "schema": "ckfmha.report",
        "version": 2,
        "arch": args.arch,
        "state": state,
        "category": args.category,
        "max_shapes": args.max_shapes,
        "select": args.select,
        "tool": "benchmarks/bench_dispatch.py",
        "within": WITHIN,
        **({k: v for k, v in fig.items() if k != "choices"} if fig is not None else {"shapes": len(times)}),
        "shapes_selected": len(shapes),
        "shard": "/".join(map(str, args.shard)),
        "environment": {"command": " ".join(sys.argv), "python": platform.python_version(), "devices": devices},
        "choices": choices,
        "rows": rows,
    }


def _write(args, doc: dict) -> None:
    """Write the report JSON whole or not at all (a temporary file renamed over it)."""
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(out)


if __name__ == "__main__":
    sys.exit(main())
