cd /tmp/w
CMD="python3 benchmarks/bench_nightly.py --category nightly --passes cold --workers 16 --gpus 0 --cpus 0-15 --limit 1080 --grace 30 --tail 30 --out $R/a --json $R/a/figures.json -- --ckfmha-memory-budget 77GB"
echo "# commit 0ad53cc (snapshot), nvidia-h100-x1 (one H100 box, 16 cores), the whole nightly alone, cold: $CMD" > $R/a/nightly.txt
$CMD >> $R/a/nightly.txt 2>&1
touch $R/a/DONE
