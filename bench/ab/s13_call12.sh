#!/usr/bin/env bash
# Session 13, call 12: the D = 128 one-pass row against the two-kernel row where the dispatcher
# now takes the latter (keys seeing < 2048 queries: causal S = 2048, S = 1024), and D = 64's at
# its threshold (1024), at 1988ccb (build-run/new2; MEMATTN_KERNEL forces a row).
set -uo pipefail
M=build-run/new2/bin/memattn
for P in "--head-dim 128 --heads-q 16 --seqlen-q 2048 --batch 8 --causal" "--head-dim 128 --heads-q 16 --seqlen-q 1024 --batch 16" \
         "--head-dim 128 --heads-q 16 --seqlen-q 1024 --batch 16 --causal" "--head-dim 128 --heads-q 16 --seqlen-q 4096 --batch 4 --causal" \
         "--head-dim 64 --heads-q 32 --seqlen-q 1024 --batch 16 --causal" "--head-dim 64 --heads-q 32 --seqlen-q 512 --batch 32"; do
  for row in default one-pass default one-pass; do
    case "$P" in *"head-dim 128"*) F=bwd_sm80_bf16_d128_m64n128w8_fused_vec_plain ;; *) F=bwd_sm80_bf16_d64_m128n128w8_fused_vec_plain ;; esac
    if [[ $row == default ]]; then
      echo "$row $P: $($M run --backend cuda --pass bwd --iters 30 --dtype bf16 $P | grep -E '^backward:')"
    else
      echo "$row $P: $(MEMATTN_KERNEL=$F $M run --backend cuda --pass bwd --iters 30 --dtype bf16 $P | grep -E '^backward:')"
    fi
  done
done
echo done
