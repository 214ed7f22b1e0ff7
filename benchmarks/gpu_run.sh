#!/usr/bin/env bash
# One GPU session's validation run, step by step; everything goes under $OUT (at most 8 files come back).
#   tests      the GPU unit tests (tests/test_triton_gpu.py, _bwd, _kvcache, _stages_fit, _coverage)
#   contain    containment on the GPU: a hung Triton kernel is killed, a GPU fault fails its items alone
#              (tests/test_containment_gpu.py)
#   smoke      the forward-family smoke category through the plugin on the Triton backend, -n auto
#              (the arch is detected: sm90 on H100/H200)
#   smokeall   the whole smoke category (every family), -n auto, twice: cold, then with a warm Triton cache
#   gfx942     the same smoke over CK's gfx942 kernel space
#   gfx942all  the whole smoke category (every family) over CK's gfx942 kernel space, -n auto
#   bwd        the backward benchmark (benchmarks/bench_bwd.py)
#   kvcache    append-KV decode and batch prefill rows of the forward benchmark (benchmarks/bench_fwd.py --kvcache)
#   parity     the torch parity sweep (benchmarks/parity_torch.py)
#   bench      the forward benchmark (benchmarks/bench_fwd.py)
#   causal     the causal tile / fused-tail sweep (benchmarks/tune_fwd.py --only causal)
#   ptx        the forward kernel's PTX summarized: CTA barriers, wgmma and wait depths (benchmarks/ptx_stats.sh)
#   hopper     the Hopper launch variants against the dispatcher's launch and cuDNN (benchmarks/tune_fwd.py --only hopper)
#   profile    Nsight Compute over one launch (benchmarks/profile_attn.py) of our forward and backward and of
#              cuDNN's, fp16 d128 s4k non-causal (PROFILE_ARGS overrides the shape): $OUT/ncu_<dir>_<target>.txt
#   bwdtune    the backward's descriptor variants and tiles (bench_bwd.py --variants --tiles BWD_TILES, fp16, 4k/16k)
#   scale      issue 25's figures (benchmarks/bench_nightly.py): smoke cold + warm, then the nightly category cold until
#              NIGHTLY_LIMIT s (SIGTERM to the run's process group after it: the report must say interrupted);
#              GPUS (CUDA_VISIBLE_DEVICES), CPUS (taskset list) and WORKERS (-n) emulate a smaller box
# Usage on the GPU machine, from the repository root: bash benchmarks/gpu_run.sh [STEP ...]   (default: all but causal)
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
python3 -m pip install --no-deps --no-build-isolation -e . -q 2>&1 | grep -v WARN | tail -1
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} | tee "$OUT/env.txt"
smoke() {  # $1 = report name, $2 = time limit (s), rest = extra options
  local name=$1 limit=$2; shift 2
  local cmd="python3 -m pytest --ckfmha-category smoke --ckfmha-family fwd,fwd_splitkv,fwd_pagedkv -n auto -p no:cacheprovider --ckfmha-report $OUT/$name.json -q $*"
  { echo "\$ $cmd"; timeout $limit $cmd 2>&1 | tail -30; } | tee "$OUT/$name.txt"
}
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests smoke parity gfx942 bench)
for step in "${steps[@]}"; do
  start=$(date +%s)
  case $step in
    tests) timeout ${TESTS_LIMIT:-330} python3 -m pytest tests/test_triton_gpu.py tests/test_triton_bwd.py tests/test_triton_kvcache.py \
             tests/test_triton_stages_fit.py tests/test_triton_coverage.py -q -rfE -n 8 -p no:cacheprovider 2>&1 \
             | grep -v -e PytestBenchmarkWarning -e "warner(" | tail -60 | tee "$OUT/gpu_tests.txt" ;;
    contain) timeout 240 python3 -m pytest tests/test_containment_gpu.py -v -p no:cacheprovider 2>&1 | tail -15 \
             | tee "$OUT/containment_gpu.txt" ;;
    smokeall) for pass in cold warm; do
                cmd="python3 -m pytest --ckfmha-category smoke -n auto -p no:cacheprovider --ckfmha-report $OUT/smoke_all_$pass.json -q"
                t0=$(date +%s%N)
                { echo "\$ $cmd"; timeout ${SMOKE_LIMIT:-240} $cmd 2>&1 | tail -22; echo "wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"; } \
                  | tee "$OUT/smoke_all_$pass.txt"
              done ;;
    smoke) smoke smoke_fwd_sm90 200 ;;
    gfx942) smoke smoke_fwd_gfx942 200 --ckfmha-arch gfx942 ;;
    gfx942all) cmd="python3 -m pytest --ckfmha-category smoke --ckfmha-arch gfx942 -n auto -p no:cacheprovider --ckfmha-report $OUT/smoke_all_gfx942.json -q"
               t0=$(date +%s%N)
               { echo "\$ $cmd"; timeout 300 $cmd 2>&1 | tail -22; echo "wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"; } \
                 | tee "$OUT/smoke_all_gfx942.txt" ;;
    bwd) timeout 400 python3 benchmarks/bench_bwd.py --json "$OUT/bench_bwd.json" 2>&1 | tail -45 | tee "$OUT/bench_bwd.txt" ;;
    kvcache) timeout 300 python3 benchmarks/bench_fwd.py --only-kvcache --json "$OUT/bench_kvcache.json" 2>&1 | tail -40 \
               | tee "$OUT/bench_kvcache.txt" ;;
    parity) timeout 400 python3 benchmarks/parity_torch.py "$OUT/parity_torch.json" 2>&1 | tail -30 \
              | tee "$OUT/parity_torch.txt" ;;
    bench) timeout 500 python3 benchmarks/bench_fwd.py --json "$OUT/bench_fwd.json" 2>&1 | tail -60 \
             | tee "$OUT/bench_fwd.txt" ;;
    causal) timeout 240 python3 benchmarks/tune_fwd.py --only causal --json "$OUT/tune_causal.json" 2>&1 \
              | tee "$OUT/tune_causal.txt" | tail -40 ;;
    hopper) timeout ${HOPPER_LIMIT:-420} python3 benchmarks/tune_fwd.py --only hopper --json "$OUT/tune_hopper.json" 2>&1 \
              | tee "$OUT/tune_hopper.txt" | tail -40 ;;
    ptx) timeout 240 bash benchmarks/ptx_stats.sh 2>&1 | tee "$OUT/ptx_stats.txt" ;;
    profile) for target in "fwd ours" "fwd cudnn" "bwd ours" "bwd cudnn"; do
               set -- $target
               timeout 240 ncu --clock-control none --nvtx --nvtx-include "profile/" --section SpeedOfLight \
                 --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
                 --section MemoryWorkloadAnalysis python3 benchmarks/profile_attn.py "$1" "$2" ${PROFILE_ARGS:-} \
                 > "$OUT/ncu_$1_$2.txt" 2>&1
               echo "ncu $1 $2: rc $? $(grep -c 'Section: GPU Speed Of Light' "$OUT/ncu_$1_$2.txt") kernels" | tee -a "$OUT/env.txt"
             done ;;
    bwdtune) timeout 420 python3 benchmarks/bench_bwd.py --dtypes fp16 --seqlens 4096,16384 --variants \
               --tiles "${BWD_TILES:-64x128w8s2,64x128w8s3,32x128w8s2,128x64w8s2,64x64w4s3}" --json "$OUT/bwd_tune.json" 2>&1 \
               | tee "$OUT/bwd_tune.txt" | tail -40 ;;
    scale) box=(--workers "${WORKERS:-auto}" ${GPUS:+--gpus "$GPUS"} ${CPUS:+--cpus "$CPUS"})
           python3 benchmarks/bench_nightly.py --category smoke --passes cold,warm --limit 200 --out "$OUT" "${box[@]}" \
             2>&1 | tee "$OUT/scale_smoke.txt"
           python3 benchmarks/bench_nightly.py --category nightly --passes cold --limit "${NIGHTLY_LIMIT:-900}" --grace 45 \
             --out "$OUT" "${box[@]}" 2>&1 | tee "$OUT/scale_nightly.txt" ;;
    *) echo "unknown step '$step' (tests|contain|smoke|smokeall|gfx942|gfx942all|parity|bench|causal|hopper|ptx|bwd|kvcache|profile|bwdtune|scale)"; exit 2 ;;
  esac
  echo "== step $step: $(( $(date +%s) - start )) s" | tee -a "$OUT/env.txt"
done
