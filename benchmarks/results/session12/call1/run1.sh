# call 1 (nvidia-h200): install in /tmp/w; GPU unit tests; smoke cold/warm/warm2/warm_n8/warm_n4 (timeline); the old end-of-session wait; FA 2% probe
T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))]"; }
set -o pipefail; export PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/smoke $R/fa $OUT/r
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
rm -rf /tmp/w && cp -r .gpurun /tmp/w && cd /tmp/w && python3 -m pip install --no-deps --no-build-isolation -e . -q 2>&1 | grep -v WARN | tail -1
{ echo "tree: fbd532d + the session-12 working tree (timeline, end-of-session wait)"; nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv; python3 -c "import torch,triton,numpy;print('torch',torch.__version__,'triton',triton.__version__,'numpy',numpy.__version__)"; python3 --version; nproc; free -g; lscpu | grep "Model name"; } > $OUT/r/env.txt 2>&1
cat $OUT/r/env.txt; t
# 1. GPU unit tests (Triton launchers incl. BIAS_KIND / philox_words)
{ echo "\$ timeout 150 python3 -m pytest tests/test_triton_gpu.py tests/test_triton_bwd.py tests/test_triton_kvcache.py tests/test_triton_device.py -n 16 -q -p no:cacheprovider"; timeout -s TERM 150 taskset -c 0-15 python3 -m pytest tests/test_triton_gpu.py tests/test_triton_bwd.py tests/test_triton_kvcache.py tests/test_triton_device.py -n 16 -q -p no:cacheprovider -rfE 2>&1 | tail -15; } > $OUT/r/gputests.txt; tail -3 $OUT/r/gputests.txt; t
# 2. smoke: cold, warm x2, warm with 8 and 4 workers (cache kept for 3)
CMD="python3 benchmarks/bench_nightly.py --category smoke --passes cold,warm,warm2,warm_n8,warm_n4 --workers 16 --gpus 0 --cpus 0-15 --limit 150 --grace 20 --tail 3 --cache /tmp/smokecache --out $R/smoke --json $R/smoke/figures.json"
{ echo "# $CMD"; $CMD; } > $OUT/r/smoke.txt 2>&1; grep "^== \|timeline\|warm-up\|controller\|target\|start-up" $OUT/r/smoke.txt; t
# 3. the same warm pass with the old end of session (close_child waits up to 5 s for the child's exit)
rm -rf /tmp/wA && cp -r /tmp/w /tmp/wA && cd /tmp/wA && sed -i 's/self.close_child(wait=END_WAIT_SECONDS)/self.close_child()/' pytest_ckfmha/isolation.py && grep -c "self.close_child()" pytest_ckfmha/isolation.py
CMD="python3 benchmarks/bench_nightly.py --category smoke --passes warm_oldend,warm_oldend2 --workers 16 --gpus 0 --cpus 0-15 --limit 150 --grace 20 --tail 3 --cache /tmp/smokecache --out $R/smoke --json $R/smoke/figures_oldend.json"
{ echo "# (old end of session) $CMD"; PYTHONPATH=/tmp/wA:$PYTHONPATH $CMD; } > $OUT/r/smoke_oldend.txt 2>&1; grep "^== \|timeline\|warm-up\|controller" $OUT/r/smoke_oldend.txt; cd /tmp/w; t
# 4. FA 2% probe, cold, fresh Triton cache, 140 s
export TRITON_CACHE_DIR=/tmp/fa_triton; rm -rf $TRITON_CACHE_DIR
cd /tmp/w/fa/tests
CMD="python3 -m pytest test_flash_attn_ck.py -q -p no:cacheprovider --ckfmha-flash-attn-compat --ckfmha-backend triton --ckfmha-arch gfx942 --ckfmha-sample 0.02:0 --ckfmha-report $R/fa/fa.json -o addopts= -n 16 -rfE"
{ echo "# FA 0251105a2fb1 unchanged, cores 0-15, cold caches, timeout -s TERM 140: $CMD"; PYTHONPATH=..:$PYTHONPATH timeout -s TERM 140 taskset -c 0-15 $CMD 2>&1 | grep -v "PytestBenchmarkWarning\|warner(" | tail -40; } > $OUT/r/fa.txt
echo "triton cache entries: $(ls $TRITON_CACHE_DIR | wc -l); cubins: $(find $TRITON_CACHE_DIR -name '*.cubin' | wc -l)" >> $OUT/r/fa.txt
tail -5 $OUT/r/fa.txt; t
cd $R && tar -czf $OUT/r/reports.tgz smoke/*.json fa/ 2>/dev/null; ls -la $OUT/r; t
