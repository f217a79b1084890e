#!/usr/bin/env bash
# Session 20: the one-pass backward's D = 256 row with its five GEMMs on sm_90a's wgmma
# (sm90/one_pass_gemms.hpp) against the mma.sync row, one build (build-run/s20b: bf16 D = 256
# forward and one-pass rows of both kinds, CLI and tests, built locally). Correctness first (the
# row tests, the backward's plain feature cases with the wgmma row forced against the float64
# reference, `--verify`, racecheck and synccheck), then the A/B (CLI bwd_ms, median of 30, the two
# rows alternating).
set -uo pipefail
N=${N:-build-run/s20b}
T=$N/tests
summary() { grep -E '^\[  (PASSED|FAILED) |FAILED  \]' | tr '\n' ' ' | cut -c1-700; }
W=bwd_sm90_bf16_d256_m64n64w8_wgmma_fused_vec_plain
M=bwd_sm80_bf16_d256_m64n64w8_fused_vec_plain
echo "rows: $(timeout 200 $T/test_cuda_rows --gtest_filter='*bwd*' 2>&1 | summary)"
echo "$W: $(timeout 200 scripts/forced_row_tests.sh $W "$(scripts/plain_cases.sh bwd bf16)" $N 2>&1 | summary)"
v() {
  echo "verify $*: $(MEMATTN_KERNEL=$W timeout 60 $N/bin/memattn run --backend cuda --pass bwd --dtype bf16 --verify --iters 1 "$@" 2>&1 | grep -E 'result|FAIL|rror' | head -3 | tr '\n' ' ')"
}
v --head-dim 256 --heads-q 4 --heads-k 2 --batch 2 --seqlen-q 1000 --seqlen-k 777 --causal --alignment bottom-right
v --head-dim 200 --head-dim-v 256 --heads-q 2 --batch 1 --seqlen-q 513 --window-left 100 --window-right 20
v --head-dim 256 --heads-q 8 --batch 4 --seqlen-q 512
for tool in racecheck synccheck; do
  echo "$tool: $(timeout 150 compute-sanitizer --tool $tool $T/test_cuda_rows --gtest_filter="*$W*" 2>&1 | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' | tr '\n' ' ')"
done
one() {  # ROW H B S [flags]
  local row=$1; shift
  MEMATTN_KERNEL=$row $N/bin/memattn run --backend cuda --pass bwd --dtype bf16 --head-dim 256 --heads-q $1 --batch $2 \
    --seqlen-q $3 ${4//,/ } --iters 30 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*' | cut -d: -f2
}
for round in 1 2; do
  for cfg in 8,32,512 8,32,512,--causal 8,8,2048 8,8,2048,--causal 8,2,8192; do
    set -- ${cfg//,/ }
    flags=$(echo "$cfg" | cut -d, -f4-)
    a=$(one $M $1 $2 $3 "$flags"); b=$(one $W $1 $2 $3 "$flags")
    echo "round $round $cfg: mma.sync $a wgmma $b ($(python3 -c "print(f'{$a/$b:.3f}')" 2>/dev/null)x)"
  done
done
$N/bin/memattn kernels --resources 2>&1 | grep -A1 "d256.*fused" | head -6
