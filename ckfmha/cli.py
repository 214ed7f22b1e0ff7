"""The ``ckfmha`` command line.

    ckfmha --version
    ckfmha list  --arch gfx950 --api fwd --receipt 0 --mask-mode simplified --format ids
    ckfmha count --arch gfx942 --profile pytorch --family bwd
    ckfmha explain -prec=fp16 -b=2 -h=8 -s=128 -d=64 -mask=t
    ckfmha run -prec=fp16 -b=2 -h=8 -s=128 -d=64 -mask=t --backend cpu
    ckfmha run tile_example_fmha_bwd -prec=bf16 -b=1 -h=4 -s=256 -d=128     # or: --binary bwd
    ckfmha parity-enum --ck-root ~/composable_kernel --arch gfx942
    ckfmha list --ck-root ~/composable_kernel --arch gfx942 --api fwd --format ck-names
    ckfmha codegen --ck-root ~/composable_kernel --arch gfx942 --kernel fmha_fwd_d128_..._gfx9 -o build/k1

``list`` / ``count`` select kernels: ``--arch``, ``--api`` / ``--family`` (repeatable; family names as in
:mod:`ckfmha.families`: ``bwd`` = the three backward stages, aliases ``splitkv``, ``pagedkv``, ``appendkv``,
``bwd_dq_dk_dv``), ``--receipt`` or ``--profile``, ``--mask-mode``, ``--sweep FILE``, ``--filter EXPR``,
``--filter-file FILE`` (runs Python: only use files you trust).  A selection that matches no kernel is an error
(:class:`ckfmha.selection.EmptySelectionError`: the message names the selection and why it is empty) unless
``--allow-empty`` is given, which prints the empty result.  With ``--ck-root PATH`` (or ``$CK_ROOT``) the kernel
space is that CK checkout's own: its generator's lists for the arch, receipt, mask mode and the apis of the
selected families (:func:`ckfmha.cktree.select_checkout_kernels`), narrowed by the same sweep and filters;
``--format ck-names`` then prints the names exactly as that generator lists them.

Rules every command that chooses a kernel space (``list``, ``count``, ``run``, ``explain``) shares:

| what | rule |
|---|---|
| the arch | ``--arch``, else the arch data's default (:func:`ckfmha.archs.default_arch`, gfx942; the plugin's default without a detected GPU), said on stderr (:func:`_arch`) |
| the CK checkout | ``--ck-root``, else ``$CK_ROOT``, else none (ckfmha's enumeration); a path that is no checkout is an error naming the option or the variable, exit 2 (:func:`_ck_root`) |

``codegen`` writes one kernel's shared-library sources into ``-o DIR``: the checkout's own instance(s) and api
dispatch file, ckfmha's C ABI wrapper and header, and ``compile_commands.json`` with the exact compile and link
commands (:func:`codegen.emit.emit_library`); the kernel must be one the checkout lists for ``--arch``.  Members of
the checkout's api structs that the wrapper does not set are printed as a warning on stderr.

``run`` / ``explain`` take one problem in CK's tile_example argument syntax (``-key=value`` tokens; also as one
quoted string, optionally led by the program name ``tile_example_fmha_fwd`` / ``tile_example_fmha_bwd``;
``--binary bwd`` selects the backward), read as CK's runner reads it (:func:`ckfmha.ck_args.ck_run_from_args`,
``ck_run_from_args``'s normalizations): the effective problem is printed, then each normalization the runner
announces, in its own words (``tile_example_fmha_fwd says: fmha_fwd_appendkv() will be invoked. ignoring the
'mode' option``), and each change it makes without a word (``... does without a word: ...``); a line the runner
refuses is an error with its words (exit 2).  ``-h=8`` is CK's head count: these commands take ``--help`` only.
Our own options: ``--backend`` (cpu, triton, hip, auto; default cpu), ``--arch``, ``--receipt`` / ``--profile``,
``--mask-mode``, ``--ck-root``; ``run`` also ``--seed`` (ckfmha's input seed, default 0; printed apart from CK's
``-seed``, which seeds only the lengths the runner generates) and ``--cpu-max-flops`` (the size guard below).
``explain`` prints, per stage, the kernels that can serve the problem with their CK instance names
(:func:`ckfmha.naming.ck_instance_name`), ``*`` marking the one the plan picks, and the others grouped by the first
rule they fail (:func:`explanation_text`).  ``run`` prints the problem and the plan, runs it (:func:`ckfmha.run`
on :func:`ckfmha.inputs.make_inputs`), compares each output with the NumPy reference under CK's tolerance
(:func:`ckfmha.validator.validate`) and prints one line per output -- a PASS whose max_rel_err is above rtol says
that atol passed it (:func:`check_line`) -- and a verdict.

| ``run`` on a large problem | rule |
|---|---|
| size guard | on the cpu backend a problem above ``--cpu-max-flops`` (default :data:`DEFAULT_CPU_MAX_FLOPS`; 0 = no limit) FLOPs (:func:`ckfmha.work.flops`) is refused before anything runs, naming the option and the problem's FLOPs (exit 2) |
| progress | above :data:`PROGRESS_FLOPS` the plan's run and the reference each write a start line and their seconds to stderr |

Exit status:

* 0 -- ok (``run``: every output matches the reference; ``explain``: every stage has a kernel);
* 1 -- an empty selection (``list`` / ``count`` without ``--allow-empty``); a failed run: an output differs, the
  run raised (the error is printed), no kernel serves the problem (the explanation is printed) or the backend is
  not available here; ``explain``: some stage has no kernel;
* 2 -- bad arguments (the message names the option, the value and the rule).

Output piped into a command that stops reading (``ckfmha list ... | head -1``) ends quietly with status 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections import Counter
from collections.abc import Sequence

from ckfmha import __version__
from ckfmha.backends import backend_names
from ckfmha.families import FAMILY_ALIASES, PROBLEM_FAMILIES, STAGE_ONLY
from ckfmha.kernel import Family

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
PROBLEM_COMMANDS = ("run", "explain")
DEFAULT_CPU_MAX_FLOPS = 5e10
"""``run --backend cpu`` refuses a problem above this many FLOPs unless ``--cpu-max-flops`` raises the limit (the
cpu backend emulates the tiles in NumPy at a few GFLOP/s: 5e10 FLOPs is a few minutes with the reference)."""
PROGRESS_FLOPS = 1e9
"""``run`` writes progress lines to stderr (plan, reference, each with its seconds) for problems above this."""
BACKEND_CHOICES = (*backend_names(), "auto")


class CLIError(ValueError):
    """A bad command-line argument (exit status 2)."""


def _mask_mode_help() -> str:
    from ckfmha.kernel import MaskMode

    return f"CK generator mask mode: {' or '.join(m.value for m in MaskMode)} (default simplified)"


_SHARED_OPTIONS: dict[str, dict] = {
    "arch": dict(
        default=None,
        help="kernel space: gfx90a, gfx942, gfx950, gfx1100, gfx1201, sm90 (default: the arch data's default arch, "
        "gfx942; the one rule of every command that chooses a kernel space)",
    ),
    "api": dict(
        action="append",
        default=[],
        help="generator api (fwd, fwd_splitkv, fwd_appendkv, pagedkv_prefill, batch_prefill, bwd); repeatable",
    ),
    "family": dict(
        action="append",
        default=[],
        help=f"family: a problem family ({', '.join(PROBLEM_FAMILIES)}; bwd = the three backward stages, "
        f"fwd_splitkv = split-KV + combine) or alias ({', '.join(FAMILY_ALIASES)}), or a single "
        f"stage ({', '.join(f.value for f in STAGE_ONLY)}); repeatable",
    ),
    # --receipt and --profile: ckfmha.receipts.resolve_receipt takes one of them (its error otherwise)
    "receipt": dict(default=None, help="CK receipt number (default 0)"),
    "profile": dict(
        default=None, help="receipt by profile name (ck_default, flash, pytorch, aiter_batch, fp32, fp8, ...)"
    ),
    "mask-mode": dict(default="simplified", help=_mask_mode_help),
    "sweep": dict(default=None, help="tile-engine sweep JSON file"),
    "filter": dict(dest="filter_expr", default=None, help='expression over c.<field>, e.g. "c.hdim_q == 128"'),
    "filter-file": dict(
        default=None, help="Python file defining filter_config(c) -> bool; runs Python: only use files you trust"
    ),
    "allow-empty": dict(
        action="store_true",
        help="an empty selection prints the empty result and exits 0 (default: an error, exit status 1)",
    ),
    "ck-root": dict(default=None, help="a CK checkout (holds example/ck_tile/01_fmha/generate.py; default $CK_ROOT)"),
    "backend": dict(
        choices=BACKEND_CHOICES,
        default="cpu",
        help="backend that runs the kernels (default cpu; auto: triton with a GPU, else cpu)",
    ),
    "seed": dict(
        type=int,
        default=0,
        help="ckfmha's seed of the inputs (default 0); CK's -seed is another one: it seeds only the lengths the "
        "runner generates",
    ),
    "cpu-max-flops": dict(
        type=float,
        default=None,
        help=f"refuse a cpu-backend run above this many FLOPs (default {DEFAULT_CPU_MAX_FLOPS:g}; 0 = no limit)",
    ),
}
"""The options several sub-commands share, each defined once (:func:`add_options` attaches them)."""


def add_options(p: argparse.ArgumentParser, *names: str, **changes: dict) -> frozenset[str]:
    """Attach the shared options ``names`` (:data:`_SHARED_OPTIONS`) to ``p``; ``changes`` (by option name, ``-`` as
    ``_``) are that command's own keyword changes (e.g. a required ``--arch``).  Returns the option strings that
    take a value."""
    takes_value = set()
    for name in names:
        kw = {**_SHARED_OPTIONS[name], **changes.get(name.replace("-", "_"), {})}
        if callable(kw.get("help")):
            kw["help"] = kw["help"]()
        p.add_argument(f"--{name}", **kw)
        if kw.get("action") != "store_true":
            takes_value.add(f"--{name}")
    return frozenset(takes_value)


_SELECTION = ("arch", "api", "family", "receipt", "profile", "mask-mode", "sweep", "filter", "filter-file")


def _selection_args(p: argparse.ArgumentParser) -> None:
    """The options of ``list`` / ``count``."""
    add_options(
        p,
        *_SELECTION,
        "allow-empty",
        "ck-root",
        ck_root=dict(
            help="a CK checkout: list its own generator's kernel space instead of ckfmha's enumeration "
            "(default $CK_ROOT; unset: the enumeration)"
        ),
    )


def _arch(args: argparse.Namespace, say: bool = True) -> str:
    """The kernel space's arch -- the one rule of every command that chooses a kernel space (``list``, ``count``,
    ``run``, ``explain``; the plugin's ``--ckfmha-arch`` has the same default when no GPU is detected):
    ``--arch``, else :func:`ckfmha.archs.default_arch` (the arch data's default, gfx942), said on stderr when
    ``say`` (``run`` / ``explain`` print the arch in their output) so the default is never silent.  Sets
    ``args.arch``."""
    from ckfmha.archs import default_arch, load_arch_spec

    if args.arch is None:
        args.arch = default_arch()
        if say:
            sys.stderr.write(f"ckfmha {args.command}: arch {args.arch} (the default; choose another with --arch)\n")
    load_arch_spec(args.arch)  # an unknown arch: the error names it
    return args.arch


def _ck_root(args: argparse.Namespace):
    """The checkout of ``--ck-root`` (else ``$CK_ROOT``, else None), checked the same way for every command: a
    path that is no CK checkout is an error naming the option or the variable (exit 2)."""
    from ckfmha.cktree import CKTreeError, ck_root_from_env, resolve_ck_root

    if args.ck_root is None:
        try:
            return ck_root_from_env()
        except CKTreeError as e:
            raise CLIError(str(e)) from None
    try:
        return resolve_ck_root(args.ck_root)
    except CKTreeError as e:
        raise CLIError(f"--ck-root: {args.ck_root!r} {e}") from None


def _checkout_selection(args: argparse.Namespace):
    """(checkout root or None, the checkout's kernels for the selection or None)."""
    _arch(args)
    root = _ck_root(args)
    if root is None:
        return None, None
    from ckfmha.cktree import select_checkout_kernels

    return root, select_checkout_kernels(root, _build_query(args), allow_empty=args.allow_empty)


def _build_query(args: argparse.Namespace):
    from ckfmha.selection import KernelQuery

    return KernelQuery.build(
        args.arch,
        families=args.family,
        apis=args.api,
        receipt=args.receipt,
        profile=args.profile,
        mask_mode=args.mask_mode,
        sweep=args.sweep,
        filter_expr=args.filter_expr,
        filter_file=args.filter_file,
    )


def _query(args: argparse.Namespace):
    """The selected configs: the checkout's (``--ck-root`` / ``$CK_ROOT``) or the enumeration's."""
    root, kernels = _checkout_selection(args)
    if root is not None:
        return [k.config for k in kernels]
    return _build_query(args).run(allow_empty=args.allow_empty)


def _cmd_list(args: argparse.Namespace) -> int:
    from ckfmha.naming import ck_instance_name

    root, kernels = _checkout_selection(args)
    configs = [k.config for k in kernels] if root is not None else _build_query(args).run(allow_empty=args.allow_empty)
    out = sys.stdout
    if args.format == "ck-names" and root is not None:  # the checkout's own names, as its generator lists them
        for name in sorted(k.name for k in kernels):
            out.write(name + "\n")
    elif args.format == "ids":
        for c in configs:
            out.write(c.kernel_id + "\n")
    elif args.format == "ck-names":
        for name in sorted({ck_instance_name(c) for c in configs if c.signature.arch_tag.value != "sm90"}):
            out.write(name + "\n")
    elif args.format == "json":
        json.dump([{"kernel_id": c.kernel_id, **c.as_dict()} for c in configs], out, indent=1)
        out.write("\n")
    else:  # table
        cols = ("family", "dtype", "mode", "hdim", "pipeline", "tile", "mask", "bias", "pads", "kernel id")
        rows = [
            (
                c.family.value,
                c.dtype.value,
                c.mode.value,
                f"{c.hdim_q}x{c.hdim_v}",
                c.pipeline.value,
                "x".join(map(str, c.tile)),
                c.mask.value,
                c.bias.value,
                f"{c.pad_s}{c.pad_sk}{c.pad_d}{c.pad_dv}",
                c.kernel_id,
            )
            for c in configs
        ]
        _print_table(cols, rows, out)
    return EXIT_OK


def _print_table(cols: Sequence[str], rows: Sequence[Sequence[object]], out) -> None:
    widths = [max([len(str(c))] + [len(str(r[i])) for r in rows]) for i, c in enumerate(cols)]
    out.write("  ".join(str(c).ljust(w) for c, w in zip(cols, widths)).rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for r in rows:
        out.write("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() + "\n")


def _cmd_count(args: argparse.Namespace) -> int:
    configs = _query(args)
    by_family = Counter(c.signature.family for c in configs)
    by_dtype: dict[Family, Counter] = {}
    for c in configs:
        by_dtype.setdefault(c.signature.family, Counter())[c.signature.dtype.value] += 1
    if args.format == "json":
        json.dump(
            {
                "arch": args.arch,
                "total": len(configs),
                "families": {
                    f.value: {"total": n, "dtypes": dict(sorted(by_dtype[f].items()))} for f, n in by_family.items()
                },
            },
            sys.stdout,
            indent=1,
        )
        sys.stdout.write("\n")
        return EXIT_OK
    rows = [
        (f.value, n, ", ".join(f"{d} {k}" for d, k in sorted(by_dtype[f].items())))
        for f in Family
        if (n := by_family.get(f))
    ]
    rows.append(("total", len(configs), ""))
    _print_table(("family", "kernels", "per dtype"), rows, sys.stdout)
    return EXIT_OK


# --------------------------------------------------------------------------------------------- run / explain
def _problem_options(p: argparse.ArgumentParser, name: str) -> frozenset[str]:
    """Add the options of ``run`` / ``explain`` (``name``); returns the option strings that take a value."""
    p.add_argument("--help", action="help", help="show this help and exit (-h=N is CK's head count)")
    own = ("seed", "cpu-max-flops") if name == "run" else ()
    takes_value = add_options(
        p,
        "backend",
        "arch",
        "receipt",
        "profile",
        "mask-mode",
        "ck-root",
        *own,
        ck_root=dict(
            help="a CK checkout: plan over its own generator's kernel space (and build its kernels with --backend "
            "hip) instead of ckfmha's enumeration (default $CK_ROOT; unset: the enumeration)"
        ),
    )
    p.add_argument(
        "--binary",
        choices=("fwd", "bwd"),
        default=None,
        help="tile_example binary the arguments are for (default: from the program name, else fwd)",
    )
    return takes_value | {"--binary"}


_PROBLEM_HELP = {
    "run": "run one problem (tile_example arguments, e.g. -prec=fp16 -b=2 -h=8 -s=128 -d=64 -mask=t) and "
    "compare it with the reference (exit 1 when an output differs)",
    "explain": "explain which kernels can serve one problem (tile_example arguments) and why the others cannot",
}


def _split_problem_argv(tokens: Sequence[str], takes_value: frozenset[str]) -> tuple[list[str], list[str]]:
    """Our ``--options`` (with their values) and CK's tokens (``-key=value``, a program name, a quoted string)."""
    ours: list[str] = []
    ck: list[str] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.startswith("--"):
            ours.append(t)
            if "=" not in t and t in takes_value and i + 1 < len(tokens):
                i += 1
                ours.append(tokens[i])
        elif any(ch.isspace() for ch in t):
            try:
                ck.extend(shlex.split(t))
            except ValueError as e:
                raise CLIError(f"problem arguments {t!r}: {e}") from None
        else:
            ck.append(t)
        i += 1
    return ours, ck


def _parse_problem_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    name = argv[0]
    sub, takes_value = parser.problem_parsers[name]  # type: ignore[attr-defined]
    ours, ck = _split_problem_argv(argv[1:], takes_value)
    args = sub.parse_args(ours)
    args.command, args.ck_tokens = name, ck
    return args


def _ck_run(args: argparse.Namespace):
    """The line read as CK's runner reads it (:func:`ckfmha.ck_args.ck_run_from_args`): the effective problem, the
    normalizations the runner announces (its words) and the changes it makes without a word.  A line the runner
    refuses is a :class:`ckfmha.ck_args.CKRefusal` (a ValueError naming the argument and the runner's words)."""
    from ckfmha.ck_args import ck_run_from_args

    toks = list(args.ck_tokens)
    if not toks:
        raise CLIError(
            "problem: no tile_example arguments given; e.g. "
            f"ckfmha {args.command} -prec=fp16 -b=2 -h=8 -s=128 -d=64 -mask=t"
        )
    if args.binary and not toks[0].startswith("-"):
        prog = toks[0].rsplit("/", 1)[-1]
        named = "bwd" if prog.endswith("bwd") else "fwd" if prog.endswith("fwd") else None
        if named is not None and named != args.binary:
            raise CLIError(f"--binary: {args.binary!r} contradicts the program name {toks[0]!r}")
    return ck_run_from_args(toks, binary=args.binary)


def _ck_seed(tokens: Sequence[str]) -> str | None:
    """CK's ``-seed`` as the line gives it (None: not given)."""
    for t in tokens:
        if t.startswith("-seed="):
            return t.split("=", 1)[1]
    return None


def _write_ck_run(ck, out) -> None:
    """The problem line and what CK's runner says about the command line (its own words) or does without a
    word."""
    from ckfmha.ck_smoke import EXECUTABLES

    out.write(f"problem: {ck.problem}\n")
    for said in ck.normalizations:
        out.write(f"{EXECUTABLES[ck.binary]} says: {said}\n")
    for silent in ck.unannounced:
        out.write(f"{EXECUTABLES[ck.binary]} does without a word: {silent}\n")


def _settings(args: argparse.Namespace) -> dict:
    """Checked arch / receipt / mask mode / backend name and the kernel space: the checkout's of ``--ck-root`` /
    ``$CK_ROOT`` (checked as every command checks it) as ``registry``, else the enumeration's (ValueErrors name the
    option)."""
    from ckfmha.backends import BackendError, auto_backend_name, get_backend
    from ckfmha.kernel import MaskMode
    from ckfmha.receipts import resolve_receipt

    arch = _arch(args, say=False)  # printed with the run's or the explanation's settings
    root = _ck_root(args)
    receipt = resolve_receipt(args.receipt, profile=args.profile)
    mask_mode = MaskMode.parse(args.mask_mode, "mask_mode").value
    backend = auto_backend_name() if args.backend == "auto" else args.backend
    try:
        get_backend(backend)
    except BackendError as e:
        raise CLIError(f"--backend: {e}") from None
    settings: dict = dict(backend=backend, arch=arch, receipt=receipt, mask_mode=mask_mode)
    if backend == "hip":  # CK's kernels of the checkout for this arch, receipt and mask mode
        from ckfmha.backends import configure_backend

        extra = {"ck_root": str(root)} if root is not None else {}
        configure_backend("hip", arch=arch, receipt=receipt, mask_mode=mask_mode, **extra)
    elif root is not None:  # the checkout's own kernel space
        from ckfmha.registry import Registry

        settings["registry"] = Registry.from_checkout(root, arch, receipt=receipt, mask_mode=mask_mode)
    args.ck_names = {}  # config -> the checkout's own instance name (its generator's lists, cached)
    if root is not None:
        from ckfmha.cktree import select_checkout_kernels
        from ckfmha.selection import KernelQuery

        query = KernelQuery.build(arch, receipt=receipt, mask_mode=mask_mode)
        args.ck_names = {k.config: k.name for k in select_checkout_kernels(root, query, allow_empty=True)}
    args.kernel_space = f"the CK checkout {root}" if root is not None else "ckfmha's enumeration"
    return settings


def _ck_name(config, names: dict | None = None) -> str:
    """The CK instance name of a kernel: a checkout's own (``names``), else :func:`ckfmha.naming.ck_instance_name`'s,
    or why it has none."""
    from ckfmha.naming import ck_instance_name

    if names and config in names:
        return names[config]
    if config.signature.arch_tag.value == "sm90":
        return "(no CK instance: an sm90 kernel is ckfmha's own)"
    try:
        return ck_instance_name(config)
    except ValueError as e:
        return f"(no CK instance name: {e})"


def explanation_text(explanation, show: int = 5, ck_names: dict | None = None) -> str:
    """The stages of a dispatcher explanation (no problem line): per stage the candidates that can serve it, each
    with its CK instance name (a checkout's own from ``ck_names``), ``*`` marking the one the plan picks (the
    best-ranked), then the others grouped by the first rule they fail (``StageExplanation.summary``)."""
    return "\n".join(
        st.summary(show, detail=lambda c: f"CK {_ck_name(c, ck_names)}", mark_chosen=True) for st in explanation.stages
    )


def _cmd_explain(args: argparse.Namespace) -> int:
    from ckfmha.runner import explain

    ck = _ck_run(args)
    settings = _settings(args)
    explanation = explain(ck.problem, **settings)
    out = sys.stdout
    _write_ck_run(ck, out)
    out.write(
        f"kernel space: {args.kernel_space}, arch {settings['arch']}, receipt {settings['receipt']}, "
        f"mask mode {settings['mask_mode']}, backend {settings['backend']}\n"
    )
    out.write(explanation_text(explanation, ck_names=args.ck_names) + "\n")
    return EXIT_OK if all(s.chosen is not None for s in explanation.stages) else EXIT_FAILED


def _check_size(problem, settings: dict, limit: float | None) -> float:
    """The problem's FLOPs (:func:`ckfmha.work.flops`); on the cpu backend a problem above ``limit`` (None:
    :data:`DEFAULT_CPU_MAX_FLOPS`; 0: no limit) is refused naming ``--cpu-max-flops``."""
    from ckfmha.work import flops

    n = float(flops(problem))
    limit = DEFAULT_CPU_MAX_FLOPS if limit is None else limit
    if limit < 0:
        raise CLIError(f"--cpu-max-flops: {limit:g} must be >= 0 (0 = no limit)")
    if settings["backend"] == "cpu" and limit and n > limit:
        raise CLIError(
            f"--cpu-max-flops: the problem is {n:.3g} FLOPs, above the cpu backend's limit {limit:g} (the cpu "
            "backend emulates CK's tiles in NumPy at a few GFLOP/s, so this would run for a long time); pass "
            f"--cpu-max-flops {n:.2g} (or 0 = no limit) to run it anyway, or a GPU backend (--backend triton)"
        )
    return n


def _cmd_run(args: argparse.Namespace) -> int:
    from ckfmha.backends import get_backend
    from ckfmha.ck_dialect import CK_DEFAULT_SEED

    ck = _ck_run(args)
    problem = ck.problem
    settings = _settings(args)
    size = _check_size(problem, settings, args.cpu_max_flops)
    out = sys.stdout
    _write_ck_run(ck, out)
    ck_seed = _ck_seed(args.ck_tokens)
    out.write(
        f"backend: {settings['backend']}, arch {settings['arch']}, receipt {settings['receipt']}, "
        f"mask mode {settings['mask_mode']}, kernel space: {args.kernel_space}\n"
    )
    out.write(
        f"seeds: inputs {args.seed} (ckfmha's --seed); CK's -seed "
        f"{ck_seed if ck_seed is not None else f'{CK_DEFAULT_SEED} (its default)'} seeds only the lengths the "
        "runner generates\n"
    )
    avail = get_backend(settings["backend"]).available()
    if not avail:
        sys.stderr.write(
            f"ckfmha run: error: backend {settings['backend']} is not available here: {getattr(avail, 'reason', '')}\n"
        )
        return EXIT_FAILED
    try:
        return _run_and_validate(problem, settings, args.seed, out, progress=size > PROGRESS_FLOPS)
    except BrokenPipeError:  # the reader of our output is gone: main() ends quietly
        raise
    except Exception as e:  # noqa: BLE001 - a failed run is reported, exit 1
        out.flush()
        sys.stderr.write(f"ckfmha run: error: the run raised {type(e).__name__}: {e}\n")
        return EXIT_FAILED


def _progress(on: bool, what: str):
    """A context writing ``ckfmha run: <what>...`` and then the seconds it took to stderr (when ``on``)."""
    import contextlib
    import time

    @contextlib.contextmanager
    def step():
        t0 = time.perf_counter()
        if on:
            sys.stderr.write(f"ckfmha run: {what}...\n")
            sys.stderr.flush()
        yield
        if on:
            sys.stderr.write(f"ckfmha run: {what}: done in {time.perf_counter() - t0:.1f} s\n")
            sys.stderr.flush()

    return step()


def check_line(check) -> str:
    """One output's check line (:class:`ckfmha.validator.CheckResult`); a passing check whose max_rel_err is above
    rtol says which part of CK's rule passed it, so the large relative error does not read as a failure."""
    line = str(check)
    if check.passed and check.max_rel_err > check.rtol:
        line += (
            f"\n      PASS by CK's rule |out - ref| <= atol + rtol * |ref| per element: max_rel_err "
            f"{check.max_rel_err:.3g} > rtol={check.rtol:g} comes from elements where |ref| is near 0, which pass "
            f"by atol={check.atol:g} (max_abs_err={check.max_abs_err:.3g})"
        )
    return line


def _run_and_validate(problem, settings: dict, seed: int, out, progress: bool = False) -> int:
    from ckfmha.archs import fp8_format
    from ckfmha.dispatcher import NoKernelError
    from ckfmha.inputs import make_inputs
    from ckfmha.outputs import compared_outputs
    from ckfmha.reference import reference
    from ckfmha.runner import dispatcher_for, run
    from ckfmha.validator import validate

    try:
        plan = dispatcher_for(**settings).select(problem)
    except NoKernelError as e:
        missing = [st.role.value for st in e.explanation.stages if st.chosen is None]
        out.write(f"no kernel serves stage(s) {', '.join(missing)}:\n{explanation_text(e.explanation)}\n")
        out.write("verdict: FAIL (no kernel)\n")
        return EXIT_FAILED
    out.write("plan:\n" + "".join(f"  {s}\n" for s in plan.stages))
    fmt = fp8_format(settings["arch"])
    inputs = make_inputs(problem, seed, fp8_format=fmt)
    with _progress(progress, f"running the plan on the {settings['backend']} backend"):
        result = run(problem, inputs, **settings)
    with _progress(progress, "computing the reference"):
        ref = reference(problem, inputs)
    wanted = compared_outputs(problem)
    missing = [n for n in wanted if n not in result.outputs]
    names = [n for n in wanted if n in result.outputs and n in ref]
    checks = validate(problem, {n: result.outputs[n] for n in names}, ref, names=names, fp8_format=fmt)
    for check in checks.values():
        out.write(f"  {check_line(check)}\n")
    for n in missing:
        out.write(f"  {n}: FAIL the plan wrote no {n}\n")
    failed = [n for n, c in checks.items() if not c.passed] + missing
    if failed or not checks:
        out.write(
            f"verdict: FAIL ({', '.join(failed) or 'no output compared'} differ"
            f"{'s' if len(failed) == 1 else ''} from the reference)\n"
        )
        return EXIT_FAILED
    out.write(f"verdict: PASS ({', '.join(checks)} match{'es' if len(checks) == 1 else ''} the reference)\n")
    return EXIT_OK


# --------------------------------------------------------------------------------------------- parser, main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ckfmha",
        description="ckfmha: CK FMHA kernel space, tests and parity",
        epilog="exit status: 0 ok, 1 empty selection or failed run, 2 bad arguments",
    )
    parser.add_argument("--version", action="version", version=f"ckfmha {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p_list = sub.add_parser("list", help="list kernels of an arch")
    _selection_args(p_list)
    p_list.add_argument("--format", choices=("ids", "ck-names", "json", "table"), default="ids")
    p_list.set_defaults(func=_cmd_list)
    p_count = sub.add_parser("count", help="count kernels per family")
    _selection_args(p_count)
    p_count.add_argument("--format", choices=("table", "json"), default="table")
    p_count.set_defaults(func=_cmd_count)
    problem_parsers = {}
    for name, func in (("run", _cmd_run), ("explain", _cmd_explain)):
        p = sub.add_parser(
            name,
            help=_PROBLEM_HELP[name],
            description=_PROBLEM_HELP[name],
            add_help=False,
            allow_abbrev=False,
            usage=f"ckfmha {name} [tile_example_fmha_fwd|tile_example_fmha_bwd] "
            "-key=value ... [--backend B] [--arch A] [--receipt N | --profile P] [--mask-mode M] "
            "[--ck-root PATH]" + (" [--seed S] [--cpu-max-flops F]" if name == "run" else "") + " [--binary {fwd,bwd}]",
        )
        problem_parsers[name] = (p, _problem_options(p, name))
        p.set_defaults(func=func)
    parser.problem_parsers = problem_parsers  # type: ignore[attr-defined]
    for extra in _EXTRA_COMMANDS:
        extra(sub)
    return parser


def _add_parity_enum(sub) -> None:
    """``parity-enum``; its implementation (ckfmha.upstream.enum_parity) is imported only when it runs."""
    p = sub.add_parser(
        "parity-enum",
        help="diff ckfmha's enumeration with a CK checkout's generate.py "
        "(exit 1 on any difference, 2 when the checkout cannot be used)",
    )
    add_options(
        p, "ck-root", ck_root=dict(required=True, help="CK checkout (holds example/ck_tile/01_fmha/generate.py)")
    )
    from ckfmha.archs import CK_ARCHS

    arch_help = (
        f"CK target arch: {', '.join(CK_ARCHS)}, or all (every CK arch; those the checkout's generator rejects are "
        "reported as skipped); repeatable; default: the arch data's default arch"
    )
    add_options(p, "arch", arch=dict(action="append", default=[], help=arch_help))
    add_options(
        p,
        "api",
        "receipt",
        "mask-mode",
        api=dict(help="generator api (repeatable; default: every api)"),
        receipt=dict(default="0", help="CK receipt number or profile name (default 0)"),
    )
    p.add_argument("--python", default=sys.executable, help="python that runs the generator (default: this one)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--show", type=int, default=20, help="names listed per missing/extra group (table format)")

    def run(args: argparse.Namespace) -> int:
        from ckfmha.upstream.enum_parity import cmd_parity_enum

        return cmd_parity_enum(args)

    p.set_defaults(func=run)


def _add_codegen(sub) -> None:
    """``codegen``: one kernel's library sources and build commands (codegen.emit, imported when it runs)."""
    p = sub.add_parser(
        "codegen",
        help="write one CK kernel's shared-library sources (the checkout's instance and api file, ckfmha's C ABI "
        "wrapper) and compile_commands.json with the exact compile and link commands",
    )
    add_options(
        p,
        "ck-root",
        "arch",
        ck_root=dict(help="CK checkout (default $CK_ROOT)"),
        arch=dict(required=True, help="CK target arch (gfx90a, gfx942, gfx950, ...)"),
    )
    p.add_argument("--kernel", required=True, help="the CK instance name (as `ckfmha list --format ck-names` prints)")
    p.add_argument("-o", "--output", required=True, help="directory to write into (created)")
    add_options(
        p,
        "receipt",
        "mask-mode",
        receipt=dict(default="0", help="CK receipt number or profile name the generator runs under"),
    )
    p.add_argument(
        "--compiler", default=None, help="HIP compiler for the commands (default: $ROCM_PATH/bin/hipcc, amdclang++)"
    )

    def run(args: argparse.Namespace) -> int:
        from ckfmha.kernel import MaskMode
        from ckfmha.receipts import resolve_receipt
        from codegen.emit import emit_library

        root = _ck_root(args)
        if root is None:
            raise CLIError("--ck-root: not given and $CK_ROOT is unset (codegen emits from a CK checkout)")
        lib = emit_library(
            root,
            args.arch,
            args.kernel,
            args.output,
            receipt=resolve_receipt(args.receipt),
            mask_mode=MaskMode.parse(args.mask_mode, "--mask-mode").value,
            compiler=args.compiler,
        )
        out = sys.stdout
        out.write(f"kernel {lib.kernel} (api {lib.api}, arch {lib.arch}) from {root}\n")
        for f in (*lib.sources, lib.header, lib.out_dir / "compile_commands.json"):
            out.write(f"  wrote {f}\n")
        out.write(f"library (after the commands run): {lib.library}\n")
        note = "" if lib.compiler_found else " (not found on this machine: run the commands where ROCm is installed)"
        out.write(f"compiler: {lib.compiler}{note}\n")
        for struct, members in lib.unset_members.items():
            sys.stderr.write(
                f"ckfmha codegen: warning: this CK's {struct} has members ckfmha's wrapper does not set (they stay "
                f"zero): {', '.join(members)}\n"
            )
        return EXIT_OK

    p.set_defaults(func=run)


# Other modules add sub-commands here (e.g. parity-enum) without the core importing them eagerly.
def _add_report_commands(sub) -> None:
    from ckfmha.cli_reports import add_commands

    add_commands(sub)


def _add_adequacy_command(sub) -> None:
    from ckfmha.cli_adequacy import add_commands

    add_commands(sub)


def _add_coverage_command(sub) -> None:
    from ckfmha.cli_coverage import add_commands

    add_commands(sub)


_EXTRA_COMMANDS: list = [
    _add_parity_enum, _add_codegen, _add_report_commands, _add_adequacy_command, _add_coverage_command,
]  # fmt: skip


def _silence_stdout() -> None:
    """After a broken pipe: point stdout at devnull so the interpreter's final flush cannot raise again (the
    recipe of the Python docs, "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (e.g. captured by a test)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    command = argv[0] if argv else "ckfmha"
    try:
        if argv and argv[0] in PROBLEM_COMMANDS:
            args = _parse_problem_command(parser, argv)
        else:
            args = parser.parse_args(argv)
        command = args.command
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe surfaces here, inside the handler below
        return code
    except BrokenPipeError:  # e.g. `ckfmha list ... | head -1`: the reader is gone; end quietly
        _silence_stdout()
        return EXIT_OK
    except ValueError as e:
        from ckfmha.selection import EmptySelectionError

        sys.stderr.write(f"ckfmha {command}: error: {e}\n")
        # Every bad-input error in ckfmha is a ValueError subclass whose message names field, value and rule;
        # an empty selection is not a bad argument but a result the caller asked to treat as an error.
        return EXIT_FAILED if isinstance(e, EmptySelectionError) else EXIT_USAGE
    except OSError as e:  # an unreadable file named by an option
        sys.stderr.write(f"ckfmha {command}: error: {e}\n")
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
