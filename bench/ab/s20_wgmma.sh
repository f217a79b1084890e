#!/usr/bin/env bash
# Session 20: the wide forward rows on sm_90a's wgmma (sm90/wide_gemms.hpp) against the same rows
# on mma.sync, one build (build-run/s20w: bf16 wide rows of both kinds, CLI and tests, built
# locally). Correctness first: the row tests, the forward's plain feature cases with each wgmma row
# forced (MEMATTN_KERNEL) against the float64 reference, `--verify` on awkward problems, racecheck
# and synccheck; then the A/B (CLI fwd_ms, median of 30 calls, the two rows alternating).
set -uo pipefail
N=${N:-build-run/s20w}
T=$N/tests
summary() { grep -E '^\[  (PASSED|FAILED) |FAILED  \]' | tr '\n' ' ' | cut -c1-600; }
W512=fwd_sm90_bf16_d512_m64n64w8_wgmma_wide_vec_plain
W1024=fwd_sm90_bf16_d1024_m64n64w8_wgmma_widex2_vec_plain
M512=fwd_sm80_bf16_d512_m64n64w8_wide_vec_plain
M1024=fwd_sm90_bf16_d1024_m64n64w8_widex2_vec_plain
W768=fwd_sm90_bf16_d768_m64n64w8_wgmma_widex2_vec_plain
M768=fwd_sm90_bf16_d768_m64n64w8_widex2_vec_plain
echo "rows: $(timeout 200 $T/test_cuda_rows --gtest_filter='*wgmma*:*wide*' 2>&1 | summary)"
# cases wider than the row fail with "does not fit" (expected for D = 1000 on the 512 row)
for row in $W512 $W768 $W1024; do
  echo "$row: $(timeout 150 scripts/forced_row_tests.sh $row "$(scripts/plain_cases.sh fwd bf16)" $N 2>&1 | summary)"
done
v() {  # ROW flags...
  local row=$1; shift
  echo "verify $row $*: $(MEMATTN_KERNEL=$row timeout 60 $N/bin/memattn run --backend cuda --pass fwd --dtype bf16 --verify --iters 1 "$@" 2>&1 | grep -E 'result|FAIL|rror' | head -3 | tr '\n' ' ')"
}
v $W1024 --head-dim 1024 --heads-q 2 --batch 1 --seqlen-q 1000 --seqlen-k 777 --causal --alignment bottom-right
v $W1024 --head-dim 1024 --heads-q 2 --batch 1 --seqlen-q 900 --window-left 100 --window-right 20
v $W1024 --head-dim 1000 --head-dim-v 600 --heads-q 4 --heads-k 2 --batch 1 --seqlen-q 333 --seqlen-k 515
v $W512 --head-dim 512 --heads-q 2 --batch 2 --seqlen-q 1000 --causal
v $W512 --head-dim 304 --head-dim-v 512 --heads-q 4 --heads-k 1 --batch 2 --seqlen-q 77 --seqlen-k 1031
for tool in racecheck synccheck memcheck; do
  echo "$tool: $(timeout 150 compute-sanitizer --tool $tool $T/test_cuda_rows --gtest_filter='*wgmma*' 2>&1 | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' | tr '\n' ' ')"
done
one() {  # ROW D H B S [flags]
  local row=$1; shift
  MEMATTN_KERNEL=$row $N/bin/memattn run --backend cuda --pass fwd --dtype bf16 --head-dim $1 --heads-q $2 --batch $3 \
    --seqlen-q $4 ${5//,/ } --iters 30 --json 2>/dev/null | grep -o '"fwd_ms":[0-9.]*' | cut -d: -f2
}
for round in 1 2; do
  for cfg in 512,4,4,4096 512,4,4,4096,--causal 1024,2,4,4096 1024,2,4,4096,--causal 768,4,4,2048 768,4,4,2048,--causal 640,4,4,2048; do
    set -- ${cfg//,/ }
    flags=$(echo "$cfg" | cut -d, -f5-)
    case $1 in 512) a=$M512 b=$W512 ;; 768) a=$M768 b=$W768 ;; *) a=$M1024 b=$W1024 ;; esac
    ma=$(one $a $1 $2 $3 $4 "$flags"); mb=$(one $b $1 $2 $3 $4 "$flags")
    echo "round $round $cfg: mma.sync $ma wgmma $mb ($(python3 -c "print(f'{$ma/$mb:.3f}')" 2>/dev/null)x)"
  done
done
