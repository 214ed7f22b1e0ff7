# call 4 (nvidia-h200, fresh machine): smoke cold/warm x3/warm_n8 with the kernel set cached on disk
T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))]"; }
set -o pipefail; export PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/smoke $OUT/r
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
rm -rf /tmp/w && cp -r .gpurun /tmp/w && cd /tmp/w && python3 -m pip install --no-deps --no-build-isolation -e . -q 2>&1 | grep -v WARN | tail -1
{ echo "commit $(cat /tmp/w/COMMIT) (snapshot)"; nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv; python3 -c "import torch,triton,numpy;print('torch',torch.__version__,'triton',triton.__version__,'numpy',numpy.__version__)"; python3 --version; nproc; free -g; } > $OUT/r/env.txt 2>&1
for i in 1 2 3; do /usr/bin/time -f "nvidia-smi --query-gpu=compute_cap: %e s" nvidia-smi --query-gpu=compute_cap --format=csv,noheader >> $OUT/r/env.txt 2>&1; done
cat $OUT/r/env.txt; t
CMD="python3 benchmarks/bench_nightly.py --category smoke --passes cold,warm,warm2,warm3,warm_n8 --workers 16 --gpus 0 --cpus 0-15 --limit 150 --grace 20 --tail 3 --cache /tmp/smokecache --out $R/smoke --json $R/smoke/figures.json"
{ echo "# $CMD"; $CMD; } > $OUT/r/smoke.txt 2>&1; grep "^== \|timeline\|warm-up\|controller\|target\|start-up" $OUT/r/smoke.txt; t
cp $R/smoke/figures.json $OUT/r/smoke_figures.json; cd $R && tar -czf $OUT/r/reports.tgz smoke/*.json; ls -la $OUT/r; t
