#!/usr/bin/env bash
# Session 22, calls 3-4: the pairs' own dQ rows in the wgmma one-pass row (a build with
# bench/ab/s22-pairs.patch applied, BwdParams::dq_pairs; N: the D = 256 bf16 forward row, the wgmma
# backward row, the tests and the Python module; call 3 ran the cluster variant, described in the
# record). Checks with them forced on (MEMATTN_DQ_PAIRS=1) and by default: the row tests, the
# backward's feature cases (every one whose forward this build has), `--verify` on masks, GQA and odd shapes, the
# three sanitizers; then CLI bwd_ms with them off against on at the suite's D = 256 shapes,
# and the suite's two S = 512 rows with the host timings.
set -uo pipefail
N=${N:-build-py}
T=$N/tests
W=bwd_sm90_bf16_d256_m64n64w8_wgmma_fused_vec_plain
summary() { grep -E '^\[  (PASSED|FAILED) |FAILED  \]' | tr '\n' ' ' | cut -c1-900; }
for mode in 1 0; do
  export MEMATTN_DQ_PAIRS=$mode
  echo "pairs=$mode rows: $(timeout 150 $T/test_cuda_rows --gtest_filter='*wgmma*' 2>&1 | summary)"
  echo "pairs=$mode backward (default rows): $(timeout 200 $T/test_cuda_backward 2>&1 | summary)"
done
export MEMATTN_DQ_PAIRS=1
echo "pairs=1 forced $W: $(timeout 150 scripts/forced_row_tests.sh $W "$(scripts/plain_cases.sh bwd bf16)" $N 2>&1 | summary)"
v() { echo "verify $*: $(timeout 60 $N/bin/memattn run --backend cuda --pass bwd --dtype bf16 --verify --iters 1 "$@" 2>&1 | grep -E 'result|FAIL|rror' | head -2 | tr '\n' ' ')"; }
v --head-dim 256 --heads-q 4 --heads-k 2 --batch 3 --seqlen-q 333 --seqlen-k 200 --causal --alignment bottom-right
v --head-dim 256 --heads-q 2 --batch 5 --seqlen-q 200 --seqlen-k 333 --causal --alignment bottom-right
v --head-dim 248 --heads-q 3 --batch 2 --seqlen-q 517 --causal
v --head-dim 256 --heads-q 6 --heads-k 3 --batch 2 --seqlen-q 300 --window-left 70 --window-right 5
v --head-dim 200 --head-dim-v 256 --heads-q 2 --batch 3 --seqlen-q 129 --seqlen-k 700
v --head-dim 256 --heads-q 8 --batch 32 --seqlen-q 512 --causal
for tool in memcheck racecheck synccheck; do
  echo "$tool: $(timeout 200 compute-sanitizer --tool $tool $T/test_cuda_rows --gtest_filter='*wgmma*' 2>&1 | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' | tr '\n' ' ')"
done
echo "memcheck causal br: $(timeout 100 compute-sanitizer --tool memcheck $N/bin/memattn run --backend cuda --pass bwd --dtype bf16 --verify --iters 1 --head-dim 256 --heads-q 4 --heads-k 2 --batch 3 --seqlen-q 333 --seqlen-k 200 --causal --alignment bottom-right 2>&1 | grep -E 'ERROR SUMMARY|result' | tr '\n' ' ')"
unset MEMATTN_DQ_PAIRS
one() {  # PAIRS B S [flags]
  MEMATTN_DQ_PAIRS=$1 $N/bin/memattn run --backend cuda --pass bwd --dtype bf16 --head-dim 256 --heads-q 8 --batch $2 \
    --seqlen-q $3 ${4:-} --iters 30 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*' | cut -d: -f2
}
for round in 1 2; do
  for cfg in "32 512" "32 512 --causal" "16 1024 --causal" "16 1024" "8 2048 --causal"; do
    echo "round $round B/S $cfg: off $(one 0 $cfg) on $(one 1 $cfg)"
  done
done
export PYTHONPATH=$N/python:bench
timeout 120 python3 bench/ab/s22_host.py 2>&1 | grep -v Warning | tail -12
timeout 150 python3 bench/bench.py --only 16,20 --passes bwd --iters 30 --out ${OUT:-.} 2>&1 | grep -v Warning | tail -4
