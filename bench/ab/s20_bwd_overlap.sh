#!/usr/bin/env bash
# Session 20: the wgmma one-pass row with S and dP issued together (the dQ flush beside both, P's
# exponentials beside dP) and dV, dK issued together (build-run/s20c), against the same row with
# each GEMM waited for in turn (build-run/s20b). Checks first (the backward's plain feature cases
# with the row forced, the row test), then CLI bwd_ms (median of 30), old and new alternating.
set -uo pipefail
O=build-run/s20b; N=build-run/s20c
W=bwd_sm90_bf16_d256_m64n64w8_wgmma_fused_vec_plain
summary() { grep -E '^\[  (PASSED|FAILED) |FAILED  \]' | tr '\n' ' ' | cut -c1-500; }
echo "rows: $(timeout 100 $N/tests/test_cuda_rows --gtest_filter='*bwd*' 2>&1 | summary)"
echo "$W: $(timeout 150 scripts/forced_row_tests.sh $W "$(scripts/plain_cases.sh bwd bf16)" $N 2>&1 | summary)"
one() {  # BUILD H B S [flags]
  local build=$1; shift
  MEMATTN_KERNEL=$W $build/bin/memattn run --backend cuda --pass bwd --dtype bf16 --head-dim 256 --heads-q $1 --batch $2 \
    --seqlen-q $3 ${4//,/ } --iters 30 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*' | cut -d: -f2
}
for round in 1 2; do
  for cfg in 8,32,512 8,32,512,--causal 8,8,2048 8,2,8192; do
    set -- ${cfg//,/ }
    flags=$(echo "$cfg" | cut -d, -f4-)
    a=$(one $O $1 $2 $3 "$flags"); b=$(one $N $1 $2 $3 "$flags")
    echo "round $round $cfg: each-wait $a together $b ($(python3 -c "print(f'{$a/$b:.3f}')" 2>/dev/null)x)"
  done
done
