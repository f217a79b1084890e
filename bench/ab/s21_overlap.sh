#!/usr/bin/env bash
# Session 21: on top of the bulk dQ (build-run/s21), the wgmma row's S and dP GEMMs issued together
# (P's exponentials once S is done, while dP runs) and the next step's Q / dO loads issued while
# the first dQ chunk is in flight (build-run/s21b). Correctness of s21b first (as s21_bulk.sh), then
# CLI bwd_ms of main's row (build-run/s20h), s21 and s21b, alternating.
set -uo pipefail
N=build-run/s21b
T=$N/tests
W=bwd_sm90_bf16_d256_m64n64w8_wgmma_fused_vec_plain
summary() { grep -E '^\[  (PASSED|FAILED) |FAILED  \]' | tr '\n' ' ' | cut -c1-700; }
echo "rows: $(timeout 100 $T/test_cuda_rows --gtest_filter="*$W*" 2>&1 | summary)"
echo "forced: $(timeout 150 scripts/forced_row_tests.sh $W "$(scripts/plain_cases.sh bwd bf16)" $N 2>&1 | summary)"
wide=$(scripts/plain_cases.sh bwd bf16 | sed 's#Features/CudaBackward.MatchesReference/bf16_#WideHeads/CudaBackward.MatchesReference/d248_bf16_#g')
echo "d248 plain: $(timeout 150 $T/test_cuda_backward --gtest_filter="$wide:*d248_bf16_single:*d248_bf16_d7_dv13" 2>&1 | summary)"
v() {
  echo "verify $*: $(MEMATTN_KERNEL=$W timeout 60 $N/bin/memattn run --backend cuda --pass bwd --dtype bf16 --verify --iters 1 "$@" 2>&1 | grep -E 'result|FAIL|rror' | head -3 | tr '\n' ' ')"
}
v --head-dim 256 --heads-q 4 --heads-k 2 --batch 2 --seqlen-q 1000 --seqlen-k 777 --causal --alignment bottom-right
v --head-dim 256 --heads-q 3 --varlen 101,7,333,65 --varlen-k 90,200,333,1
for tool in racecheck synccheck; do
  echo "$tool: $(timeout 120 compute-sanitizer --tool $tool $T/test_cuda_rows --gtest_filter="*$W*" 2>&1 | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' | tr '\n' ' ')"
done
one() {  # BUILD B S [flags]
  local b=$1; shift
  MEMATTN_KERNEL=$W $b/bin/memattn run --backend cuda --pass bwd --dtype bf16 --head-dim 256 --heads-q 8 --batch $1 \
    --seqlen-q $2 ${3:-} --iters 30 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*' | cut -d: -f2
}
for round in 1 2; do
  for cfg in "32 512 --causal" "32 512" "8 2048 --causal" "2 8192"; do
    set -- $cfg
    a=$(one build-run/s20h $cfg); b=$(one build-run/s21 $cfg); c=$(one $N $cfg)
    echo "round $round B=$1 S=$2 ${3:-}: main $a bulk $b bulk+overlap $c"
  done
done
