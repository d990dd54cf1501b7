set -u
export TARGETS="stage06_flash_attention wb_launch_recorder" STAGES="stage06" RECORD_T4=1
scripts/gpu_run.sh "stage06" > $OUT/run.txt 2>&1
grep -E "tests passed|tests failed|\*\*\*|Failed" $OUT/ctest.log
grep -E "^(v[0-9]|cublas)|^fp|non-causal|causal|memory|GB" $OUT/bench.log | cut -c1-140 | head -90
tail -3 $OUT/run.txt
grep -c stage06 $OUT/launches_sm75.csv
