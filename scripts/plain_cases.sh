#!/usr/bin/env bash
# The gtest filter of the feature cases a plain, 16-byte-aligned row fits (no bias, no dropout,
# head dims multiples of 8), for scripts/forced_row_tests.sh:
#   scripts/forced_row_tests.sh ROW "$(scripts/plain_cases.sh bwd bf16)" build-dir
set -euo pipefail
pass=${1:?fwd or bwd}
dtype=${2:?bf16 or f16}
suite=$([[ $pass == fwd ]] && echo CudaForward || echo CudaBackward)
cases=(m17_n255_gqa m255_n17_dv72 m1013 d512_dv256 d1000 mqa empty_keys causal_tl
  causal_br_fully_masked_rows causal_br_long_keys window_16_3 window_band_1_0 window_left_only
  window_br varlen varlen_causal_br varlen_seqused_k kv_stride0 scale scale_negative
  scale_zero_causal_br)
printf "Features/$suite.MatchesReference/${dtype}_%s:" "${cases[@]}" | sed 's/:$//'
