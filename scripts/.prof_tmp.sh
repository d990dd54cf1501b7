set -u
export TARGETS="stage03_gemm stage04_fused_gelu_linear" STAGES="stage03 stage04"
scripts/gpu_run.sh "stage04|stage03" > $OUT/run.txt 2>&1
grep -E "tests passed|tests failed|\*\*\*|Failed" $OUT/ctest.log
grep -E "^(v1[0-3]|v6|v7|v9|cublaslt-h|cublas-h)|^Y|^C" $OUT/bench.log
for s in "1024 3072 768" "1024 768 3072"; do for v in v9 v10 v11 cublaslt-h; do build-gpu/bin/stage04_fused_gelu_linear --size $s --variant $v 2>&1 | grep -E "^(v[0-9]|cublaslt-h)" | sed "s/^/[$s] /"; done; done > $OUT/small.txt
for s in "8192 768 3072" "1024 768 3072"; do for v in v12 v13 cublas-h; do build-gpu/bin/stage03_gemm --size $s --variant $v 2>&1 | grep -E "^(v1[0-3]|cublas-h)" | sed "s/^/[s03 $s] /"; done; done > $OUT/s03.txt
cat $OUT/small.txt $OUT/s03.txt | grep -v "cublas"; grep -h "cublas" $OUT/small.txt $OUT/s03.txt | cut -c1-20,70-90
