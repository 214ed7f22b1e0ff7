# call 3: wait for the dispatch shard, bring it back
T0=$(date +%s); R=/tmp/res
while [ $(( $(date +%s) - T0 )) -lt $WAIT ] && ! [ -f $R/d/DONE ]; do sleep 5; done
echo "waited $(( $(date +%s) - T0 )) s; done: $(ls $R/d/DONE 2>/dev/null)"; tail -8 $R/d/dispatch.txt
mkdir -p $OUT/r && cp -r $R/d $R/resources.txt $OUT/r/; gzip $OUT/r/d/*.json 2>/dev/null; ls -la $OUT/r/d
