#!/usr/bin/env bash
# Session 13, call 2: where the one-pass backward's executed instructions are, per SASS
# instruction (ncu SourceCounters, build-run/new), and FA2's and ours by opcode (D = 128 S = 2048).
set -uo pipefail
ARGS="run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 128 --heads-q 16"
ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --section SourceCounters \
  -o "$OUT/new" -f build-run/new/bin/memattn $ARGS > /dev/null 2>&1
ncu -i "$OUT/new.ncu-rep" --page source --print-source sass --csv > "$OUT/new_source.csv" 2> "$OUT/new_source.err"
ls -la "$OUT"; head -c 600 "$OUT/new_source.csv"; echo; tail -3 "$OUT/new_source.err"
for who in new fa2; do
  if [[ $who == fa2 ]]; then K=regex:flash_bwd_dq_dk_dv; CMD="python3 bench/ab/s12_one_bwd.py flash 8 16 2048 128";
  else K=regex:fused_bwd_kernel; CMD="build-run/new/bin/memattn $ARGS"; fi
  ncu --clock-control none --kernel-name $K --launch-count 1 --metrics sass__inst_executed_per_opcode \
    --print-metric-instances details $CMD > "$OUT/opcodes_$who.txt" 2>&1
done
grep -c . "$OUT"/opcodes_*.txt
