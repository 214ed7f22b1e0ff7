# call 2 (same machine): dispatch shard 2/2 (pairs 2 of 2 of --select paired --max-shapes 236), alone
T0=$(date +%s); export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1; unset TRITON_CACHE_DIR
cd /tmp/w; R=/tmp/res; mkdir -p $R/d $OUT/r
CMD="python3 benchmarks/bench_dispatch.py $R/d/dispatch_s2.json --arch sm90 --backend triton --category nightly --select paired --max-shapes 236 --max-kernels 6 --repeat 10 --prebuild 14 --shard 2/2 --time-budget 540"
echo "# tree fbd532d+session-12, nvidia-h200, alone, cold ckfmha cache, timeout -s TERM 570: CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 $CMD" > $R/d/dispatch_s2.txt
CUDA_VISIBLE_DEVICES=0 CKFMHA_CACHE_DIR=/tmp/cache_d timeout -s TERM 570 taskset -c 0-15 $CMD >> $R/d/dispatch_s2.txt 2>&1
cp $R/d/dispatch_s2.txt $OUT/r/; gzip -c $R/d/dispatch_s2.json > $OUT/r/dispatch_s2.json.gz; tail -25 $R/d/dispatch_s2.txt; echo "t=$(( $(date +%s) - T0 ))"
