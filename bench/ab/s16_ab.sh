#!/usr/bin/env bash
# Session 16: the last-wave split on and off (MEMATTN_TAIL_SPLIT=0) in one build, alternating,
# on the suite's non-causal D = 64/128 backward rows (and a causal control, never split).
# Usage: bench/ab/s16_ab.sh BIN [rounds]
set -u
BIN=${1:-build-s16/bin/memattn}
ROUNDS=${2:-3}
one() {  # D H B S [--causal]
  $BIN run --backend cuda --pass bwd --dtype bf16 --head-dim $1 --heads-q $2 --batch $3 --seqlen-q $4 ${5:-} \
    --iters 30 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*' | cut -d: -f2
}
for round in $(seq $ROUNDS); do
  for cfg in "128 16 2 8192" "128 16 1 16384" "64 32 2 8192" "64 32 1 16384" "64 32 8 2048" "128 16 8 2048" \
             "128 16 2 8192 --causal"; do
    set -- $cfg
    off=$(MEMATTN_TAIL_SPLIT=0 one $@)
    on=$(one $@)
    echo "round $round D=$1 H=$2 B=$3 S=$4 ${5:-}: off $off ms, on $on ms, speed-up $(python3 -c "print(f'{$off/$on:.4f}')")"
  done
done
