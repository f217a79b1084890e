#!/usr/bin/env bash
# Branch s21-bulk-dq-mma (built in session 21 without a GPU): the D = 64 and 128 one-pass rows
# (mma.sync) as family-90 copies whose dQ leaves by one bulk reduction per step, like the wgmma
# D = 256 row, against the family-80 rows (32 atomics per thread beside the S GEMM). Build:
# build-run/s21m (bf16: the D = 64/128/256 forward rows, both kinds of D = 64/128 one-pass rows,
# the wgmma D = 256 row). Correctness first (row tests, the backward's plain feature cases with
# each bulk row forced, `--verify`, memcheck / racecheck / synccheck), then CLI bwd_ms (median
# of 30, the rows alternating) at the suite's shapes.
set -uo pipefail
N=${N:-build-run/s21m}
T=$N/tests
summary() { grep -E '^\[  (PASSED|FAILED) |FAILED  \]' | tr '\n' ' ' | cut -c1-700; }
echo "rows: $(timeout 150 $T/test_cuda_rows --gtest_filter='*bulk*' 2>&1 | summary)"
for d in 64 128; do
  tile=$([[ $d == 64 ]] && echo m128n128w8 || echo m64n128w8)
  W=bwd_sm90_bf16_d${d}_${tile}_fused_bulk_vec_plain
  echo "$W: $(timeout 150 scripts/forced_row_tests.sh $W "$(scripts/plain_cases.sh bwd bf16)" $N 2>&1 | summary)"
  echo "verify $W: $(MEMATTN_KERNEL=$W timeout 60 $N/bin/memattn run --backend cuda --pass bwd --dtype bf16 --verify --iters 1 --head-dim $d --heads-q 3 --varlen 101,7,333,65 --varlen-k 90,200,333,1 --causal --alignment bottom-right 2>&1 | grep -E 'result|FAIL|rror' | head -2 | tr '\n' ' ')"
done
for tool in memcheck racecheck synccheck; do
  echo "$tool: $(timeout 150 compute-sanitizer --tool $tool $T/test_cuda_rows --gtest_filter='*bulk*' 2>&1 | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' | tr '\n' ' ')"
done
one() {  # ROW D H B S [flags]
  local row=$1; shift
  MEMATTN_KERNEL=$row $N/bin/memattn run --backend cuda --pass bwd --dtype bf16 --head-dim $1 --heads-q $2 --batch $3 \
    --seqlen-q $4 ${5:-} --iters 30 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*' | cut -d: -f2
}
for round in 1 2; do
  for cfg in "64 32 8 2048" "64 32 8 2048 --causal" "64 32 2 8192" "128 16 8 2048" "128 16 8 2048 --causal" "128 16 2 8192"; do
    set -- $cfg
    tile=$([[ $1 == 64 ]] && echo m128n128w8 || echo m64n128w8)
    a=$(one bwd_sm80_bf16_d$1_${tile}_fused_vec_plain $cfg); b=$(one bwd_sm90_bf16_d$1_${tile}_fused_bulk_vec_plain $cfg)
    echo "round $round D=$1 B=$3 S=$4 ${5:-}: atomics $a bulk $b"
  done
done
