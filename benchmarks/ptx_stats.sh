#!/usr/bin/env bash
# The PTX of the forward kernel as Triton compiled it, summarized: per shape, one launch of our plan
# (benchmarks/profile_attn.py fwd ours) in a fresh Triton cache, then counts of CTA barriers (bar.sync), wgmma
# instructions (those with the A operand in registers: P @ V), wgmma.wait_group depths, mbarrier waits and TMA
# copies of attn_fwd_kernel's PTX.  The summary goes to stdout; the PTX files themselves go to the folder given as
# the first argument (default: $OUT, else gpu-out) as ptx_fwd_<shape>.ptx -- ptx_fwd_d64.ptx, ptx_fwd_d128.ptx,
# ptx_fwd_d128_causal.ptx, ptx_fwd_d256_causal.ptx.  The PTX is not committed (benchmarks/results/*.ptx is in
# .gitignore): regenerate it here.  The summary of the H100 run is benchmarks/results/ptx_fwd_h100.txt;
# running this script at the commit named there reproduces the PTX it cites by line.
# Needs torch, triton and ckfmha's own dependencies (jsonschema among them) importable; checked on an H100 on
# 2026-11-27 (40 s for the four shapes).  Usage, on the GPU machine from the repository root:
#   bash benchmarks/ptx_stats.sh DIR            # or: OUT=DIR bash benchmarks/ptx_stats.sh (gpu_run.sh ptx)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
dest=${1:-${OUT:-gpu-out}}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
for args in "--hdim 64" "--hdim 128" "--hdim 128 --causal" "--hdim 256 --causal"; do
  name=$(echo "$args" | tr -d ' -')                                   # hdim128causal
  file=ptx_fwd_$(echo "$args" | sed -e 's/--hdim /d/' -e 's/ --causal/_causal/').ptx   # ptx_fwd_d128_causal.ptx
  export TRITON_CACHE_DIR=/tmp/tcache_$name
  rm -rf "$TRITON_CACHE_DIR"
  log=$TRITON_CACHE_DIR.log
  (cd benchmarks && PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH} python3 profile_attn.py fwd ours --dtype bf16 $args > "$log" 2>&1)
  found=$(find "$TRITON_CACHE_DIR" -name "*.ptx" -exec grep -l "attn_fwd_kernel" {} + 2>/dev/null)
  if [ -z "$found" ]; then
    echo "== $args: no attn_fwd_kernel PTX in $TRITON_CACHE_DIR; profile_attn.py said:"; tail -20 "$log"; status=1; continue
  fi
  for f in $found; do
    echo "== $args: $(basename "$f") -> $dest/$file"
    echo "  bar.sync/barrier.sync: $(grep -cE 'bar\.sync|barrier\.sync' "$f")"
    echo "  wgmma.mma_async total: $(grep -c 'wgmma.mma_async' "$f")"
    echo "  wgmma with A in registers (operand list '{' after the accumulator): $(grep 'wgmma.mma_async' "$f" | grep -cE '\}, \{')"
    echo "  wgmma.wait_group depths: $(grep -oE 'wgmma\.wait_group\.sync\.aligned [0-9]+' "$f" | awk '{print $2}' | sort | uniq -c | tr '\n' ' ')"
    echo "  mbarrier.try_wait: $(grep -c 'mbarrier.try_wait' "$f")  cp.async.bulk.tensor: $(grep -c 'cp.async.bulk.tensor' "$f")"
    cp "$f" "$dest/$file"
  done
done
exit $status
