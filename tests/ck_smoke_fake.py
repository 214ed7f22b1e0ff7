"""A fake CK checkout for the smoke-suite tests: the files resolve_ck_root checks, two smoke scripts written as
CK's (``find . -name <exe>``, ``-s`` / ``-a`` options, ``run_exe`` with its fails file, a repeated line) and a
known-fails file."""

from __future__ import annotations

from pathlib import Path

FWD_SCRIPT = r"""#!/bin/bash
set -euo pipefail
SCRIPT_DIR=$(cd $(dirname "${BASH_SOURCE[0]}") && pwd)
EXE_NAME=tile_example_fmha_fwd
EXE="$(find . -name $EXE_NAME -type f | head -n 1)"
CURR_FAILS_FILE=${CURR_FAILS_FILE:-"fmha_fwd_fails_$GPU_arch.txt"}
touch $CURR_FAILS_FILE
COMMON_ARGS='-v=1 -warmup=0 -repeat=1'
TEST_SPLITKV=0
while getopts ":sa" opt; do
    case "${opt}" in
        s) TEST_SPLITKV=1 ;;
        *) ;;
    esac
done
run_exe() {
    set +ex
    $EXE $@
    local ret=$?
    if [ $ret -ne 0 ] ; then echo "$EXE_NAME $*" >> $CURR_FAILS_FILE ; fi
    set -ex
}
NUM_SPLITS="1"
if [ $TEST_SPLITKV -eq 1 ] ; then NUM_SPLITS="1 2" ; fi
for hdim in 32 64 ; do
for num_splits in $NUM_SPLITS ; do
run_exe -prec=fp16 -mode=0 -b=1 -h=2 -d=$hdim -s=16 -s_k=24 -p_drop=0.2 -num_splits=$num_splits -kname=1 $COMMON_ARGS
run_exe -prec=fp16 -mode=0 -b=1 -h=2 -d=$hdim -s=16 -s_k=24 -p_drop=0.2 -num_splits=$num_splits -kname=1 $COMMON_ARGS
done
done
run_exe -prec=fp16 -mode=0 -b=1 -h=1 -d=64 -s=4096 -s_k=4096 -kname=1 $COMMON_ARGS
run_exe -prec=fp16 -mode=0 -b=1 -h=1 -d=24 -s=16 -kname=1 $COMMON_ARGS
run_exe -prec=fp16 -mode=1 -b=1 -h=1 -d=64 -s=1 -s_k=10 -s_kpad=32 -num_splits=2 -kname=1 $COMMON_ARGS
"""

BWD_SCRIPT = r"""#!/bin/bash
set -euo pipefail
EXE_NAME=tile_example_fmha_bwd
EXE="$(find . -name $EXE_NAME -type f | head -n 1)"
for hdim in 32 64 ; do
$EXE -prec=fp16 -b=1 -h=2 -d=$hdim -s=16 -s_k=24 -v=1 -kname=1
done
"""

KNOWN_FAIL_FWD = "tile_example_fmha_fwd -prec=fp16 -mode=0 -b=1 -h=2 -d=64 -s=16 -s_k=24 -p_drop=0.2 -num_splits=1 \
-kname=1 -v=1 -warmup=0 -repeat=1"


def make_fake_checkout(root: Path, fwd: str = FWD_SCRIPT, bwd: str = BWD_SCRIPT, arch: str = "gfx942") -> Path:
    """A fake checkout at ``root`` (returned)."""
    example = root / "example" / "ck_tile" / "01_fmha"
    (example / "script").mkdir(parents=True)
    (root / "include" / "ck_tile").mkdir(parents=True)
    (example / "generate.py").write_text("# fake\n")
    (example / "script" / "smoke_test_fwd.sh").write_text(fwd)
    (example / "script" / "smoke_test_bwd.sh").write_text(bwd)
    (example / "script" / f"fmha_fwd_known_fails_{arch}.txt").write_text(KNOWN_FAIL_FWD + "\n")
    (example / "script" / f"fmha_bwd_known_fails_{arch}.txt").write_text("")
    return root
