#!/usr/bin/env bash
# Session 22, calls 5, 6 and 8: a build with a change to the wgmma one-pass row (P: call 5 the L2
# bulk prefetch of bench/ab/s22-prefetch-bulk.patch, call 6 its line-prefetch variant, call 8 the
# evict-first K/V/dK/dV copies; build-run/s22p or s22e) against build-run/s22 (main): checks on P
# first (row tests, the backward's plain feature cases with the row forced, `--verify` on masks, GQA and odd shapes, the three sanitizers), then CLI bwd_ms alternating the
# builds at D = 256, then the suite's two S = 512 rows through each build's Python module.
set -uo pipefail
A=build-run/s22 P=${P:-build-run/s22p}
W=bwd_sm90_bf16_d256_m64n64w8_wgmma_fused_vec_plain
summary() { grep -E '^\[  (PASSED|FAILED) |FAILED  \]' | tr '\n' ' ' | cut -c1-600; }
echo "rows: $(timeout 150 $P/tests/test_cuda_rows --gtest_filter='*wgmma*' 2>&1 | summary)"
echo "forced $W: $(timeout 150 scripts/forced_row_tests.sh $W "$(scripts/plain_cases.sh bwd bf16)" $P 2>&1 | summary)"
v() { echo "verify $*: $(timeout 60 $P/bin/memattn run --backend cuda --pass bwd --dtype bf16 --verify --iters 1 "$@" 2>&1 | grep -E 'result|FAIL|rror' | head -2 | tr '\n' ' ')"; }
v --head-dim 256 --heads-q 4 --heads-k 2 --batch 3 --seqlen-q 333 --seqlen-k 200 --causal --alignment bottom-right
v --head-dim 248 --heads-q 3 --batch 2 --seqlen-q 517 --causal
v --head-dim 256 --heads-q 6 --heads-k 3 --batch 2 --seqlen-q 300 --window-left 70 --window-right 5
v --head-dim 200 --head-dim-v 256 --heads-q 2 --batch 3 --seqlen-q 129 --seqlen-k 700
v --head-dim 256 --heads-q 8 --batch 32 --seqlen-q 512 --causal
for tool in memcheck racecheck synccheck; do
  echo "$tool: $(timeout 200 compute-sanitizer --tool $tool $P/tests/test_cuda_rows --gtest_filter='*wgmma*' 2>&1 | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' | tr '\n' ' ')"
done
echo "memcheck suite shape: $(timeout 100 compute-sanitizer --tool memcheck $P/bin/memattn run --backend cuda --pass bwd --dtype bf16 --iters 1 --head-dim 256 --heads-q 8 --batch 32 --seqlen-q 512 --causal 2>&1 | grep -E 'ERROR SUMMARY' | tr '\n' ' ')"
one() {  # BUILD B S [flags]
  local n=$1; shift
  $n/bin/memattn run --backend cuda --pass bwd --dtype bf16 --head-dim 256 --heads-q 8 --batch $1 --seqlen-q $2 ${3:-} \
    --iters 30 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*' | cut -d: -f2
}
for round in 1 2 3; do
  for cfg in "32 512" "32 512 --causal" "16 1024 --causal" "8 2048" "8 2048 --causal" "2 8192 --causal"; do
    echo "round $round B/S $cfg: main $(one $A $cfg) prefetch $(one $P $cfg)"
  done
done
for n in $A $P $A $P; do
  echo "suite $n: $(PYTHONPATH=$n/python:bench timeout 150 python3 bench/bench.py --only 16,20 --passes bwd --iters 30 --out /tmp 2>&1 | grep '^| bf16' | cut -d'|' -f2-12,14- | tr '\n' ' ')"
done
