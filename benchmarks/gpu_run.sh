#!/usr/bin/env bash
# One GPU session's validation run (issue 6): install, GPU unit tests, the forward-family smoke category through
# the plugin on the Triton backend with xdist, and the forward benchmark. Writes everything under $OUT (or ./gpu-out).
# Usage on the GPU machine, from the repository root: bash benchmarks/gpu_run.sh [tests|smoke|bench|all]
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
what=${1:-all}
python3 -m pip install --no-deps --no-build-isolation -e . -q 2>&1 | grep -v WARN | tail -1
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} | tee "$OUT/env.txt"
if [[ $what == tests || $what == all ]]; then
  timeout 300 python3 -m pytest tests/test_triton_gpu.py -q -n 8 -p no:cacheprovider 2>&1 | tail -5 | tee "$OUT/gpu_tests.txt"
fi
if [[ $what == smoke || $what == all ]]; then
  cmd="python3 -m pytest --ckfmha-category smoke --ckfmha-family fwd,fwd_splitkv,fwd_pagedkv -n 8 -p no:cacheprovider --ckfmha-report $OUT/smoke_fwd_triton.json -q"
  echo "$cmd" > "$OUT/smoke_cmd.txt"
  timeout 400 $cmd 2>&1 | tail -40 | tee "$OUT/smoke.txt"
fi
if [[ $what == bench || $what == all ]]; then
  timeout 400 python3 benchmarks/bench_fwd.py --json "$OUT/bench_fwd.json" 2>&1 | tail -45 | tee "$OUT/bench_fwd.txt"
fi
