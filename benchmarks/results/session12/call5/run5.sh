# call 5 (same machine as call 4): A/B interleaved on the warm cache: B = fdce6f7 (kernel set cached), A = the same with the cache bypassed
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1; R=/tmp/res; mkdir -p $OUT/r
rm -rf /tmp/wA && cp -r /tmp/w /tmp/wA && sed -i 's/    cache_dir = getattr(settings, "cache_dir", None)/    cache_dir = None/' /tmp/wA/pytest_ckfmha/kernel_set_cache.py && grep -c "cache_dir = None" /tmp/wA/pytest_ckfmha/kernel_set_cache.py
for i in 1 2; do for v in B A; do
  if [ $v = A ]; then cd /tmp/wA; P=/tmp/wA:$PYTHONPATH; else cd /tmp/w; P=$PYTHONPATH; fi
  PYTHONPATH=$P python3 benchmarks/bench_nightly.py --category smoke --passes warm$v$i --workers 16 --gpus 0 --cpus 0-15 --limit 100 --grace 20 --tail 1 --cache /tmp/smokecache --out $R/ab --json $R/ab/f_$v$i.json 2>&1 | grep "^== \|timeline\|warm-up\|controller"
done; done > $OUT/r/ab.txt; cat $OUT/r/ab.txt
