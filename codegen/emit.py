"""Emit the sources of one CK kernel library: the checkout's own instance(s) and api file, ckfmha's wrapper, and the
exact compile and link commands.

:func:`emit_library` (``ckfmha codegen --ck-root PATH --arch ARCH --kernel CK_NAME -o DIR``):

1. checks the checkout (:func:`ckfmha.cktree.resolve_ck_root`), the arch (a CK arch) and the kernel: its name
   must be one the checkout's generator lists for that arch, receipt and mask mode
   (:func:`ckfmha.cktree.checkout_names`), so a typo or a kernel of another CK version is an error naming it;
2. runs the checkout's ``generate.py -d <api> --targets <arch> -r <receipt> -m <mask mode> -f <filter> -o <tmp>``
   with the filter that makes CK's generator emit exactly that instance and the api dispatch file
   (:func:`generator_filter`; the ``-f`` syntax is per api, from the checkout's ``codegen/ops/*.py``):

   * fwd, fwd_appendkv, pagedkv_prefill, batch_prefill: the kernel's name (without the arch suffix -- the
     generator matches ``kernel.name``, the file name is ``name + arch suffix + .cpp``);
   * fwd_splitkv: ``<combine pattern>@<split name>`` (``fmha_fwd_splitkv.py`` splits ``-f`` at ``@``): CK's api
     pairs each split kernel with one combine kernel of the same arch, hdim, dtype and mode (its
     ``write_blobs``), so the combine pattern admits those
     (``fmha_fwd_splitkv_combine_d<hdim>_<dtype>_<mode>_*``) and the api file references the one it pairs;
   * bwd: ``*@*@<dq_dk_dv name>`` (``fmha_bwd.py``: dot_do_o@convert_dq@dq_dk_dv): the api trait of that
     dq_dk_dv kernel, i.e. it and the dot_do_o and convert_dq kernels CK pairs with it.

   The stage-only kernels (fwd_splitkv_combine, bwd_dot_do_o, bwd_convert_dq) are built with the kernel CK's api
   pairs them with (its api runs the stages in one call): asking for one alone is a :class:`CodegenError`
   saying which kernel to ask for. What the generator emitted is checked: the asked-for instance and exactly one
   ``*_api.cpp`` must be there;
3. writes ``ckfmha_abi.h`` (:mod:`codegen.abi`) and ``ckfmha_wrapper.cpp`` (:mod:`codegen.wrapper`) next to them
   and ``compile_commands.json``: one entry per ``.cpp`` (``directory``, ``arguments``, ``file``, ``output``,
   ``ckfmha_step: "compile"``) and a last entry for the link (``ckfmha_step: "link"``, ``file`` = the library), all
   with the compiler of :func:`codegen.flags.find_hip_compiler` (or ``compiler=``; none found:
   ``$ROCM_PATH/bin/hipcc``, by default ``/opt/rocm/bin/hipcc``, and :attr:`EmittedLibrary.compiler_found` is
   False) and CK's flags (:func:`codegen.flags.compile_flags`);
4. reads the checkout's api header (``fmha_fwd.hpp`` / ``fmha_bwd.hpp``) and records in
   :attr:`EmittedLibrary.unset_members` the members of the api's traits and args structs the wrapper does not set
   (:func:`codegen.wrapper.unset_members`: a CK newer than the wrapper; they stay zero); ``ckfmha codegen`` prints
   them as a warning. A header without the api's structs is a :class:`CodegenError` naming it.

The generator runs in a subprocess (``PYTHONPATH`` led by its directory, as CK's CMake runs it); a crash is a
:class:`CodegenError` with its last lines.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from codegen.abi import HEADER_NAME, c_header
from codegen.flags import DEFAULT_ROCM_PATH, compile_flags, find_hip_compiler, link_flags
from codegen.wrapper import API_CALLS, WRAPPER_NAME, unset_members, wrapper_source

COMPILE_COMMANDS = "compile_commands.json"
GENERATOR_TIMEOUT_S = 600.0


class CodegenError(ValueError):
    """A kernel whose library cannot be emitted; the message names the kernel, the checkout and why."""


@dataclass(frozen=True)
class Command:
    """One build step: the arguments, the file it reads and the file it writes."""

    step: str  # "compile" or "link"
    arguments: tuple[str, ...]
    file: Path
    output: Path

    def to_json(self, directory: Path) -> dict:
        return {
            "directory": str(directory),
            "arguments": list(self.arguments),
            "file": str(self.file),
            "output": str(self.output),
            "ckfmha_step": self.step,
        }


@dataclass(frozen=True)
class EmittedLibrary:
    """The sources and commands of one kernel's shared library (see the module doc)."""

    kernel: str  # the CK instance name (without .cpp)
    api: str
    arch: str
    out_dir: Path
    instances: tuple[Path, ...]  # the checkout's instance sources (the asked-for one first)
    api_source: Path
    wrapper: Path
    header: Path
    commands: tuple[Command, ...]  # compiles, then the link
    library: Path
    compiler: Path
    compiler_found: bool
    #: per traits/args struct of the api, the members this checkout has that the wrapper does not set (left zero)
    unset_members: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def sources(self) -> tuple[Path, ...]:
        return (*self.instances, self.api_source, self.wrapper)

    @property
    def compile_commands(self) -> tuple[Command, ...]:
        return tuple(c for c in self.commands if c.step == "compile")


def _family_api(kernel: str):
    from ckfmha.kernel import FAMILY_API, Family
    from ckfmha.naming import CKNameError, parse_ck_name

    try:
        parsed = parse_ck_name(kernel)
    except CKNameError as e:
        raise CodegenError(f"--kernel: {kernel!r} is not a CK instance name ckfmha can parse ({e})") from None
    c = parsed.config
    fam = c.signature.family
    if fam is Family.FWD_SPLITKV_COMBINE:
        raise CodegenError(
            f"--kernel: {kernel} is a split-KV combine kernel; CK's fmha_fwd_splitkv api runs it together with the "
            "split kernel it pairs it with: ask for the fmha_fwd_splitkv_d... kernel (its library holds the combine)"
        )
    if fam in (Family.BWD_DOT_DO_O, Family.BWD_CONVERT_DQ):
        raise CodegenError(
            f"--kernel: {kernel} is a {fam.value} kernel; CK's fmha_bwd api runs it together with a dq_dk_dv "
            "kernel: ask for the fmha_bwd_d... (dq_dk_dv) kernel (its library holds dot_do_o and convert_dq)"
        )
    return c, FAMILY_API[fam].value


def generator_filter(api: str, kernel_stem: str, config) -> str:
    """The generator's ``-f`` value that emits exactly ``kernel_stem`` (see the module doc)."""
    from ckfmha.kernel import ArchTag

    s = config.signature
    name = kernel_stem
    if s.arch_tag is not ArchTag.NONE:
        suffix = f"_{s.arch_tag.value}"
        if not name.endswith(suffix):
            raise CodegenError(f"--kernel: {kernel_stem} does not end with its arch suffix {suffix}")
        name = name[: -len(suffix)]
    if api == "fwd_splitkv":
        return f"fmha_fwd_splitkv_combine_d{s.hdim_q}_{s.dtype.value}_{s.mode.value}_*@{name}"
    if api == "bwd":
        return f"*@*@{name}"
    return name


def run_generator(
    ck_root: Path, api: str, arch: str, receipt: int, mask_mode: str, kernel_filter: str, out_dir: Path, python: str
) -> list[Path]:
    """Run the checkout's generator in write mode; returns the ``.cpp`` files it wrote."""
    from ckfmha.ck_generator import GENERATOR, generator_env, generator_tail

    gen = ck_root / GENERATOR
    cmd = [python, str(gen), "-d", api, "--targets", arch, "-r", str(receipt), "-m", mask_mode]
    cmd += ["-f", kernel_filter, "-o", str(out_dir)]
    try:
        proc = subprocess.run(
            cmd,
            cwd=gen.parent,
            env=generator_env(gen),
            capture_output=True,
            text=True,
            timeout=GENERATOR_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise CodegenError(f"the generator ran past {GENERATOR_TIMEOUT_S:g}s: {' '.join(cmd)}") from None
    except OSError as e:
        raise CodegenError(f"cannot run the generator ({' '.join(cmd)}): {e}") from None
    if proc.returncode != 0:
        raise CodegenError(
            f"the generator failed (exit {proc.returncode}) for -f {kernel_filter!r}: {generator_tail(proc)}"
        )
    return sorted(out_dir.rglob("*.cpp"))


def _generate_into(
    root: Path, api: str, arch: str, receipt: int, mask_mode: str, stem: str, config, out: Path, python: str
) -> tuple[list[Path], Path]:
    """Run the generator with the kernel's filter, check what it emitted, copy it into ``out``; returns the
    instance sources (the asked-for one first) and the api source."""
    kfilter = generator_filter(api, stem, config)
    with tempfile.TemporaryDirectory(prefix="ckfmha_codegen_") as td:
        emitted = run_generator(root, api, arch, receipt, mask_mode, kfilter, Path(td), python)
        names = [p.name for p in emitted]
        api_files = [p for p in emitted if p.name.endswith("_api.cpp")]
        if f"{stem}.cpp" not in names or len(api_files) != 1:
            raise CodegenError(
                f"the generator's -f {kfilter!r} emitted {', '.join(names) or 'nothing'}; expected {stem}.cpp and one "
                "*_api.cpp (has this CK changed its filter syntax? see codegen.emit)"
            )
        for p in emitted:
            shutil.copyfile(p, out / p.name)
    others = sorted(n for n in names if n != f"{stem}.cpp" and not n.endswith("_api.cpp"))
    return [out / f"{stem}.cpp"] + [out / n for n in others], out / api_files[0].name


def build_commands(
    compiler: Path, flags: list[str], link: list[str], sources: tuple[Path, ...], library: Path
) -> tuple[Command, ...]:
    """One compile per source (objects under ``obj/`` next to the library), then the link."""
    commands = []
    objects = []
    for src in sources:
        obj = library.parent / "obj" / (src.stem + ".o")
        objects.append(obj)
        commands.append(Command("compile", (str(compiler), *flags, "-c", str(src), "-o", str(obj)), src, obj))
    commands.append(Command("link", (str(compiler), *link, *map(str, objects), "-o", str(library)), library, library))
    return tuple(commands)


def _unset_members(root: Path, api: str) -> dict[str, tuple[str, ...]]:
    """The api header's traits/args members the wrapper does not set (:func:`codegen.wrapper.unset_members`)."""
    from ckfmha.cktree import FMHA_EXAMPLE

    header = root / FMHA_EXAMPLE / API_CALLS[api][0]
    try:
        found = unset_members(api, header.read_text(encoding="utf-8"))
    except OSError as e:
        raise CodegenError(f"{header}: cannot read the api header ({e.strerror or e})") from None
    except ValueError as e:
        raise CodegenError(f"{root}: {e}") from None
    return {k: tuple(v) for k, v in found.items() if v}


def emit_library(
    ck_root: str | os.PathLike,
    arch: str,
    kernel: str,
    out_dir: str | os.PathLike,
    *,
    receipt: int = 0,
    mask_mode: str = "simplified",
    compiler: str | os.PathLike | None = None,
    python: str = sys.executable,
) -> EmittedLibrary:
    """Emit one kernel's library sources and commands into ``out_dir`` (created; see the module doc)."""
    from ckfmha.cktree import CKTreeError, checkout_names, resolve_ck_root

    try:
        root = resolve_ck_root(ck_root)
    except CKTreeError as e:
        raise CodegenError(f"--ck-root: {str(ck_root)!r} {e}") from None
    stem = kernel[:-4] if kernel.endswith(".cpp") else kernel
    config, api = _family_api(stem)
    try:
        listed = checkout_names(root, api, arch, receipt, mask_mode, python=python)
    except CKTreeError as e:
        raise CodegenError(str(e)) from None
    if f"{stem}.cpp" not in listed:
        raise CodegenError(
            f"--kernel: the checkout's generator ({root}) does not list {stem} for arch {arch}, receipt {receipt}, "
            f"mask mode {mask_mode} (api {api}: {len(listed)} kernels; `ckfmha list --ck-root {root} --arch {arch} "
            f"--api {api} --format ck-names` prints them)"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    instances, api_source = _generate_into(root, api, arch, receipt, mask_mode, stem, config, out, python)
    unset = _unset_members(root, api)
    header = out / HEADER_NAME
    header.write_text(c_header(), encoding="utf-8")
    wrapper = out / WRAPPER_NAME
    wrapper.write_text(wrapper_source(api, stem), encoding="utf-8")
    found = find_hip_compiler() if compiler is None else Path(compiler)
    cc = found or Path(os.environ.get("ROCM_PATH") or DEFAULT_ROCM_PATH) / "bin" / "hipcc"
    library = out / f"lib{stem}.so"
    commands = build_commands(
        cc, compile_flags(arch, api, root, out), link_flags(arch), (*instances, api_source, wrapper), library
    )
    (out / COMPILE_COMMANDS).write_text(
        json.dumps([c.to_json(out) for c in commands], indent=1) + "\n", encoding="utf-8"
    )
    return EmittedLibrary(
        kernel=stem,
        api=api,
        arch=arch,
        out_dir=out,
        instances=tuple(instances),
        api_source=api_source,
        wrapper=wrapper,
        header=header,
        commands=tuple(commands),
        library=library,
        compiler=cc,
        compiler_found=found is not None and found.is_file(),
        unset_members=unset,
    )
