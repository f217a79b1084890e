#!/usr/bin/env bash
# Session 20: the compiler resource report (registers, spills, shared memory, occupancy) of the
# rows the suite's problems use at this commit, and the row each problem is given (build-run/s20h:
# those rows and the candidates ahead of them, built locally, sm_90 SASS); then the fp16 twin of
# the experimental wgmma one-pass row forced on the backward's plain fp16 feature cases.
set -uo pipefail
N=${N:-build-run/s20h}
M=$N/bin/memattn
summary() { grep -E '^\[  (PASSED|FAILED) |FAILED  \]' | tr '\n' ' ' | cut -c1-600; }
$M kernels --backend cuda --resources 2>&1 | grep -A1 -E '^  (fwd|bwd)_'
TOKENS=16384
for cfg in 64,512 64,2048 64,8192 128,512 128,2048 128,8192 256,512 256,2048 256,8192; do
  d=${cfg%,*}; s=${cfg#*,}
  for c in "" --causal; do
    echo "bf16 D=$d S=$s $c: $($M kernels --backend cuda --dtype bf16 --head-dim $d --heads-q $((2048 / d)) --batch $((TOKENS / s)) --seqlen-q $s $c 2>&1 | grep -E 'forward  ->|backward ->' | sed 's/ (sm.*)//' | tr -s ' ' | tr '\n' ' ')"
  done
done
echo "bf16 D=512 S=4096: $($M kernels --backend cuda --dtype bf16 --head-dim 512 --heads-q 8 --batch 4 --seqlen-q 4096 2>&1 | grep -E '  ->' | sed 's/ (sm.*)//' | tr -s ' ' | tr '\n' ' ')"
echo "bf16 D=1024 S=4096: $($M kernels --backend cuda --dtype bf16 --head-dim 1024 --heads-q 4 --batch 4 --seqlen-q 4096 2>&1 | grep -E '  ->' | sed 's/ (sm.*)//' | tr -s ' ' | tr '\n' ' ')"
echo "bf16 D=128 S=2048 bias: $($M kernels --backend cuda --dtype bf16 --head-dim 128 --heads-q 16 --batch 8 --seqlen-q 2048 --bias dense 2>&1 | grep -E '  ->' | sed 's/ (sm.*)//' | tr -s ' ' | tr '\n' ' ')"
echo "fp32 D=128 S=4096: $($M kernels --backend cuda --dtype fp32 --head-dim 128 --heads-q 16 --batch 4 --seqlen-q 4096 2>&1 | grep -E '  ->' | sed 's/ (sm.*)//' | tr -s ' ' | tr '\n' ' ')"
echo "fp16 D=128 S=8192: $($M kernels --backend cuda --dtype fp16 --head-dim 128 --heads-q 16 --batch 2 --seqlen-q 8192 2>&1 | grep -E '  ->' | sed 's/ (sm.*)//' | tr -s ' ' | tr '\n' ' ')"
W=bwd_sm90_fp16_d256_m64n64w8_wgmma_fused_vec_plain
echo "rows: $(timeout 100 $N/tests/test_cuda_rows --gtest_filter="*$W*" 2>&1 | summary)"
echo "$W: $(timeout 150 scripts/forced_row_tests.sh $W "$(scripts/plain_cases.sh bwd f16)" $N 2>&1 | summary)"
