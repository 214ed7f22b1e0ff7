#!/usr/bin/env bash
# One GPU session's validation run: install, GPU unit tests, the forward-family smoke category through the plugin
# on the Triton backend with xdist (-n auto; the arch is detected: sm90 on H100/H200), the torch parity sweep, the
# same smoke over CK's gfx942 kernel space, and (with `bench`) the forward benchmark. Everything goes under $OUT.
# Usage on the GPU machine, from the repository root: bash benchmarks/gpu_run.sh [all|bench]
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m pip install --no-deps --no-build-isolation -e . -q 2>&1 | grep -v WARN | tail -1
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} | tee "$OUT/env.txt"
if [[ ${1:-all} == bench ]]; then
  timeout 500 python3 benchmarks/bench_fwd.py --json "$OUT/bench_fwd.json" 2>&1 | tail -45 | tee "$OUT/bench_fwd.txt"
  exit 0
fi
timeout 120 python3 -m pytest tests/test_triton_gpu.py -q -n 8 -p no:cacheprovider 2>&1 | tail -5 | tee "$OUT/gpu_tests.txt"
smoke() {  # $1 = report name, $2 = time limit (s), rest = extra options
  local name=$1 limit=$2; shift 2
  local cmd="python3 -m pytest --ckfmha-category smoke --ckfmha-family fwd,fwd_splitkv,fwd_pagedkv -n auto -p no:cacheprovider --ckfmha-report $OUT/$name.json -q $*"
  { echo "\$ $cmd"; timeout $limit $cmd 2>&1 | tail -30; } | tee "$OUT/$name.txt"
}
smoke smoke_fwd_sm90 170
timeout 200 python3 benchmarks/parity_torch.py "$OUT/parity_torch.json" 2>&1 | tail -30 | tee "$OUT/parity_torch.txt"
smoke smoke_fwd_gfx942 100 --ckfmha-arch gfx942
