#!/usr/bin/env bash
# Session 20: head dims that leave part of a wide row's columns empty (D = 640 in the 768 pair,
# D = 768 in the 1024 pair), before (build-run/s20w) and after (build-run/s20z) the zero fill of
# out-of-range copy units became one 16-byte shared store (fragments.hpp, clear_unit). First the
# new build's checks (row tests, forced feature cases of the wgmma rows), then CLI fwd_ms (median
# of 30 calls) for each row forced, old and new alternating.
set -uo pipefail
O=build-run/s20w; N=build-run/s20z
summary() { grep -E '^\[  (PASSED|FAILED) |FAILED  \]' | tr '\n' ' ' | cut -c1-400; }
echo "rows: $(timeout 200 $N/tests/test_cuda_rows 2>&1 | summary)"
for row in fwd_sm90_bf16_d768_m64n64w8_wgmma_widex2_vec_plain fwd_sm90_bf16_d1024_m64n64w8_wgmma_widex2_vec_plain \
           fwd_sm90_bf16_d512_m64n64w8_wgmma_wide_vec_plain; do
  echo "$row: $(timeout 150 scripts/forced_row_tests.sh $row "$(scripts/plain_cases.sh fwd bf16)" $N 2>&1 | summary)"
done
one() {  # BUILD ROW D [flags]
  local build=$1 row=$2 d=$3; shift 3
  MEMATTN_KERNEL=$row $build/bin/memattn run --backend cuda --pass fwd --dtype bf16 --head-dim $d --heads-q 4 --batch 4 \
    --seqlen-q 2048 "$@" --iters 30 --json 2>/dev/null | grep -o '"fwd_ms":[0-9.]*' | cut -d: -f2
}
for round in 1 2; do
  for cfg in fwd_sm90_bf16_d768_m64n64w8_wgmma_widex2_vec_plain,768 fwd_sm90_bf16_d768_m64n64w8_wgmma_widex2_vec_plain,640 \
             fwd_sm90_bf16_d768_m64n64w8_widex2_vec_plain,640 fwd_sm90_bf16_d768_m64n64w8_widex2_vec_plain,768 \
             fwd_sm90_bf16_d1024_m64n64w8_wgmma_widex2_vec_plain,1024 fwd_sm90_bf16_d1024_m64n64w8_wgmma_widex2_vec_plain,896 \
             fwd_sm90_bf16_d1024_m64n64w8_widex2_vec_plain,896 fwd_sm90_bf16_d512_m64n64w8_wgmma_wide_vec_plain,448 \
             fwd_sm80_bf16_d512_m64n64w8_wide_vec_plain,448 fwd_sm90_bf16_d512_m64n64w8_wgmma_wide_vec_plain,512; do
    row=${cfg%,*}; d=${cfg#*,}
    echo "round $round $row D=$d: old $(one $O $row $d) new $(one $N $row $d)"
  done
done
