export OUT; B=build-gpu
(cmake -B $B -G Ninja >/dev/null && cmake --build $B) > $OUT/build.log 2>&1 || { grep -E "error" -A5 $OUT/build.log | head -30; exit 1; }
for s in $STAGES; do
  exe=$(ls $B/bin/stage${s}_* | head -1)
  if [ "$s" = "10" ]; then extra="--bench"; else extra=""; fi
  timeout 200 $exe $extra --csv $OUT/stage$s.csv >> $OUT/bench.log 2>&1; echo "bench $s rc=$?"
done
grep -E "^v[0-9] |^cub|^contig|^cublas" $OUT/bench.log | awk -F'|' '{print $1 $4 $5}' | head -100
