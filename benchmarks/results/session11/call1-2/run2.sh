# call 2: wait for the nightly (<= 330 s), smoke alone (cold, warm, warm2), then start the dispatch shard detached
T0=$(date +%s); R=/tmp/res; export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 R
while [ $(( $(date +%s) - T0 )) -lt 330 ] && ! [ -f $R/a/DONE ]; do sleep 5; done
echo "waited $(( $(date +%s) - T0 )) s; nightly done: $(ls $R/a/DONE 2>/dev/null)"
grep -A40 "^== nightly" $R/a/nightly.txt | head -45
if [ -f $R/a/DONE ]; then
  cd /tmp/w
  CMD="python3 benchmarks/bench_nightly.py --category smoke --passes cold,warm,warm2 --workers 16 --gpus 0 --cpus 0-15 --limit 200 --grace 20 --tail 12 --out $R/smoke --json $R/smoke/figures.json"
  echo "# commit COMMIT (snapshot), nvidia-h100-x1, smoke alone (after the nightly, nothing else running): $CMD" | sed "s/COMMIT/$(head -1 $R/env.txt | cut -d' ' -f2)/" > $R/smoke/smoke.txt
  $CMD >> $R/smoke/smoke.txt 2>&1
  grep -E "^== |target|start-up|first item|drain" $R/smoke/smoke.txt
  E=$(( $(date +%s) - T0 )); export DBUDGET=$(( 600 - E + DEXTRA ))
  echo "dispatch starts at t=$E with --time-budget $DBUDGET"
  setsid nohup bash /tmp/w/job_d.sh > $R/d/launcher.txt 2>&1 < /dev/null &
fi
mkdir -p $OUT/r && cp -r $R/env.txt $R/resources.txt $R/a $R/smoke $OUT/r/ && find $OUT/r -name "*.json" -size +1M -exec gzip {} \; ; cd $OUT && tar czf results.tgz r && rm -rf r && ls -la
