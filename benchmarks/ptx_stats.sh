#!/usr/bin/env bash
# The PTX of the forward kernel as Triton compiled it, summarized: per shape, one launch of our plan
# (benchmarks/profile_attn.py fwd ours) in a fresh Triton cache, then counts of CTA barriers (bar.sync), wgmma
# instructions (those with the A operand in registers: P @ V), wgmma.wait_group depths, mbarrier waits and TMA
# copies of attn_fwd_kernel's PTX. The PTX files go to $OUT as <shape>.ptx.
# Usage (GPU machine, repository root): OUT=dir bash benchmarks/ptx_stats.sh
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
for args in "--hdim 64" "--hdim 128" "--hdim 128 --causal" "--hdim 256 --causal"; do
  name=$(echo "$args" | tr -d ' -')
  export TRITON_CACHE_DIR=/tmp/tcache_$name
  rm -rf "$TRITON_CACHE_DIR"
  (cd benchmarks && python3 profile_attn.py fwd ours --dtype bf16 $args > /dev/null 2>&1)
  for f in $(grep -l "attn_fwd_kernel" $(find "$TRITON_CACHE_DIR" -name "*.ptx")); do
    echo "== $args: $(basename "$f")"
    echo "  bar.sync/barrier.sync: $(grep -cE 'bar\.sync|barrier\.sync' "$f")"
    echo "  wgmma.mma_async total: $(grep -c 'wgmma.mma_async' "$f")"
    echo "  wgmma with A in registers (operand list '{' after the accumulator): $(grep 'wgmma.mma_async' "$f" | grep -cE '\}, \{')"
    echo "  wgmma.wait_group depths: $(grep -oE 'wgmma\.wait_group\.sync\.aligned [0-9]+' "$f" | awk '{print $2}' | sort | uniq -c | tr '\n' ' ')"
    echo "  mbarrier.try_wait: $(grep -c 'mbarrier.try_wait' "$f")  cp.async.bulk.tensor: $(grep -c 'cp.async.bulk.tensor' "$f")"
    cp "$f" "$OUT/$name.ptx"
  done
done
