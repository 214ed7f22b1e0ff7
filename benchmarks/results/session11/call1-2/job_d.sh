cd /tmp/w
CMD="python3 benchmarks/bench_dispatch.py $R/d/dispatch_s1.json --arch sm90 --backend triton --category nightly --select paired --max-shapes 236 --max-kernels 6 --repeat 10 --prebuild 14 --shard 1/2 --time-budget $DBUDGET"
echo "# commit 0ad53cc (snapshot), nvidia-h100-x1, alone (after the nightly and smoke), cold ckfmha cache: $CMD" > $R/d/dispatch.txt
CKFMHA_CACHE_DIR=/tmp/cache_d $CMD >> $R/d/dispatch.txt 2>&1
touch $R/d/DONE
