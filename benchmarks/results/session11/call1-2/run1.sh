# call 1 (nvidia-h100-x1): install in /tmp/w (outside the synced tree), start the nightly detached (setsid), watch ~555 s
T0=$(date +%s)
set -o pipefail; export PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/a $R/d $R/smoke
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
rm -rf /tmp/w && cp -r .gpurun /tmp/w && cd /tmp/w && python3 -m pip install --no-deps --no-build-isolation -e . -q 2>&1 | grep -v WARN | tail -1
{ echo "commit 0ad53cc"; id -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv; python3 -c "import torch,triton,numpy;print('torch',torch.__version__,'triton',triton.__version__,'numpy',numpy.__version__)"; python3 --version; nproc; free -g; lscpu | grep "Model name"; } > $R/env.txt 2>&1
cat $R/env.txt
export R
setsid nohup bash /tmp/w/job_a.sh > $R/a/launcher.txt 2>&1 < /dev/null &
export T0; setsid nohup bash /tmp/w/job_mon.sh > /dev/null 2>&1 < /dev/null &
echo "started at t=$(( $(date +%s) - T0 ))"
while [ $(( $(date +%s) - T0 )) -lt 555 ]; do sleep 30; echo "t=$(( $(date +%s) - T0 )) a:$(tail -c 300 $R/a/nightly.txt 2>/dev/null | tr '\n' ' ' | tail -c 160)"; done
tail -3 $R/resources.txt
mkdir -p $OUT/r && cp -r $R/env.txt $R/resources.txt $R/a/*.txt $OUT/r/ 2>/dev/null; ls $OUT/r
