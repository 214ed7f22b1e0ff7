"""The ``ckfmha`` command line.

    ckfmha list  --arch gfx950 --api fwd --receipt 0 --mask-mode simplified --format ids
    ckfmha count --arch gfx942 --profile pytorch

Selection options (both commands): ``--arch``, ``--api``/``--family`` (repeatable), ``--receipt`` or
``--profile``, ``--mask-mode``, ``--sweep FILE``, ``--filter EXPR``, ``--filter-file FILE``.
Exit status: 0 ok, 2 bad arguments (the message names the option, the value and the rule).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Sequence

from ckfmha.kernel import Family


class CLIError(Exception):
    pass


def _selection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", required=True, help="target arch (gfx90a, gfx942, gfx950, gfx1100, gfx1201, ...)")
    p.add_argument("--api", action="append", default=[], help="generator api (fwd, fwd_splitkv, fwd_appendkv, "
                   "pagedkv_prefill, batch_prefill, bwd); repeatable")
    p.add_argument("--family", action="append", default=[], help="kernel family (fwd, fwd_splitkv, "
                   "fwd_splitkv_combine, ..., bwd_convert_dq); repeatable")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--receipt", default=None, help="CK receipt number (default 0)")
    g.add_argument("--profile", default=None, help="receipt by profile name (ck_default, flash, pytorch, aiter_batch, fp32, fp8, ...)")
    p.add_argument("--mask-mode", default="simplified", help="simplified (default) or generic")
    p.add_argument("--sweep", default=None, help="tile-engine sweep JSON file")
    p.add_argument("--filter", dest="filter_expr", default=None, help="expression over c.<field>, e.g. \"c.hdim_q == 128\"")
    p.add_argument("--filter-file", default=None, help="Python file defining filter_config(c) -> bool")


def _query(args: argparse.Namespace):
    from ckfmha.selection import KernelQuery

    return KernelQuery.build(
        args.arch, families=args.family, apis=args.api, receipt=args.receipt, profile=args.profile,
        mask_mode=args.mask_mode, sweep=args.sweep, filter_expr=args.filter_expr, filter_file=args.filter_file,
    ).run()


def _cmd_list(args: argparse.Namespace) -> int:
    from ckfmha.naming import ck_instance_name

    configs = _query(args)
    out = sys.stdout
    if args.format == "ids":
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
        rows = [(c.family.value, c.dtype.value, c.mode.value, f"{c.hdim_q}x{c.hdim_v}", c.pipeline.value,
                 "x".join(map(str, c.tile)), c.mask.value, c.bias.value,
                 f"{c.pad_s}{c.pad_sk}{c.pad_d}{c.pad_dv}", c.kernel_id) for c in configs]
        _print_table(cols, rows, out)
    return 0


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
        json.dump({"arch": args.arch, "total": len(configs),
                   "families": {f.value: {"total": n, "dtypes": dict(sorted(by_dtype[f].items()))}
                                for f, n in by_family.items()}}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    rows = [(f.value, n, ", ".join(f"{d} {k}" for d, k in sorted(by_dtype[f].items())))
            for f in Family if (n := by_family.get(f))]
    rows.append(("total", len(configs), ""))
    _print_table(("family", "kernels", "per dtype"), rows, sys.stdout)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ckfmha", description="ckfmha: CK FMHA kernel space, tests and parity")
    sub = parser.add_subparsers(dest="command", required=True)
    p_list = sub.add_parser("list", help="list kernels of an arch")
    _selection_args(p_list)
    p_list.add_argument("--format", choices=("ids", "ck-names", "json", "table"), default="ids")
    p_list.set_defaults(func=_cmd_list)
    p_count = sub.add_parser("count", help="count kernels per family")
    _selection_args(p_count)
    p_count.add_argument("--format", choices=("table", "json"), default="table")
    p_count.set_defaults(func=_cmd_count)
    for extra in _EXTRA_COMMANDS:
        extra(sub)
    return parser


def _add_parity_enum(sub) -> None:
    """``parity-enum``; its implementation (ckfmha.upstream.enum_parity) is imported only when it runs."""
    p = sub.add_parser("parity-enum", help="diff ckfmha's enumeration with a CK checkout's generate.py "
                       "(exit 1 on any difference, 2 when the checkout cannot be used)")
    p.add_argument("--ck-root", required=True, help="CK checkout (holds example/ck_tile/01_fmha/generate.py)")
    p.add_argument("--arch", action="append", default=[], help="target arch (repeatable; default gfx942)")
    p.add_argument("--api", action="append", default=[], help="generator api (repeatable; default: every api)")
    p.add_argument("--receipt", default="0", help="CK receipt number or profile name (default 0)")
    p.add_argument("--mask-mode", default="simplified", help="simplified (default) or generic")
    p.add_argument("--python", default=sys.executable, help="python that runs the generator (default: this one)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--show", type=int, default=20, help="names listed per missing/extra group (table format)")

    def run(args: argparse.Namespace) -> int:
        from ckfmha.upstream.enum_parity import cmd_parity_enum

        return cmd_parity_enum(args)

    p.set_defaults(func=run)


# Other modules add sub-commands here (e.g. parity-enum) without the core importing them eagerly.
_EXTRA_COMMANDS: list = [_add_parity_enum]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError) as e:
        # Every bad-input error in ckfmha is a ValueError subclass whose message names field, value and rule.
        sys.stderr.write(f"ckfmha {args.command}: error: {e}\n")
        return 2
    except BrokenPipeError:  # pragma: no cover - e.g. piped into head
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
