#!/usr/bin/env bash
# Session 21: the wgmma one-pass row's dQ by one bulk reduction per step (sm90/bulk_reduce.hpp;
# the stage unpadded and swizzled like the workspace, GradAccum::swizzled) against the warps'
# atomics (build-run/s20h: main's kernels). Correctness first (the row test, the backward's plain
# feature cases with the row forced, `--verify` on problems whose tiles start at every row phase,
# racecheck / synccheck / memcheck), then CLI bwd_ms (median of 30, alternating builds).
set -uo pipefail
N=${N:-build-run/s21}
O=${O:-build-run/s20h}
T=$N/tests
W=bwd_sm90_bf16_d256_m64n64w8_wgmma_fused_vec_plain
summary() { grep -E '^\[  (PASSED|FAILED) |FAILED  \]' | tr '\n' ' ' | cut -c1-700; }
echo "rows: $(timeout 100 $T/test_cuda_rows --gtest_filter="*$W*" 2>&1 | summary)"
echo "forced: $(timeout 150 scripts/forced_row_tests.sh $W "$(scripts/plain_cases.sh bwd bf16)" $N 2>&1 | summary)"
# The D = 248 plain cases (default dispatch: this row, rows of the workspace 256 floats wide).
wide=$(scripts/plain_cases.sh bwd bf16 | sed 's#Features/CudaBackward.MatchesReference/bf16_#WideHeads/CudaBackward.MatchesReference/d248_bf16_#g')
echo "d248 plain: $(timeout 150 $T/test_cuda_backward --gtest_filter="$wide:*d248_bf16_single:*d248_bf16_d7_dv13" 2>&1 | summary)"
v() {
  echo "verify $*: $(MEMATTN_KERNEL=$W timeout 60 $N/bin/memattn run --backend cuda --pass bwd --dtype bf16 --verify --iters 1 "$@" 2>&1 | grep -E 'result|FAIL|rror' | head -3 | tr '\n' ' ')"
}
v --head-dim 256 --heads-q 4 --heads-k 2 --batch 2 --seqlen-q 1000 --seqlen-k 777 --causal --alignment bottom-right
v --head-dim 200 --head-dim-v 256 --heads-q 2 --batch 1 --seqlen-q 513 --window-left 100 --window-right 20
v --head-dim 256 --heads-q 3 --varlen 101,7,333,65 --varlen-k 90,200,333,1
v --head-dim 256 --heads-q 8 --batch 4 --seqlen-q 512 --causal
for tool in memcheck racecheck synccheck; do
  echo "$tool: $(timeout 120 compute-sanitizer --tool $tool $T/test_cuda_rows --gtest_filter="*$W*" 2>&1 | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' | tr '\n' ' ')"
done
one() {  # BUILD B S [flags]
  local b=$1; shift
  MEMATTN_KERNEL=$W $b/bin/memattn run --backend cuda --pass bwd --dtype bf16 --head-dim 256 --heads-q 8 --batch $1 \
    --seqlen-q $2 ${3:-} --iters 30 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*' | cut -d: -f2
}
for round in 1 2; do
  for cfg in "32 512 --causal" "32 512" "8 2048 --causal" "8 2048" "2 8192"; do
    set -- $cfg
    a=$(one $O $cfg); b=$(one $N $cfg)
    echo "round $round B=$1 S=$2 ${3:-}: atomics $a bulk $b ($(python3 -c "print(f'{$a/$b:.3f}x')" 2>/dev/null))"
  done
done
