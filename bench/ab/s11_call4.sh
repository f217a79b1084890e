#!/usr/bin/env bash
# Session 11, call 4: ncu on the wide forward, D = 512 (one CTA) against D = 1024 (a pair), same
# FLOPs per CTA and tile (after the P V overlap, 35885da).
set -uo pipefail
export MEMATTN_BIN=build-w-run/bin/memattn
export EXTRA_NCU_ARGS='--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,smsp__inst_executed.sum,sm__cycles_active.avg,sm__cycles_active.max,launch__occupancy_cluster_pct,launch__cluster_max_active'
scripts/profile_rows.sh fwd fwd_sm80_bf16_d512_m64n64w8_wide_vec_plain --dtype bf16 --batch 4 --seqlen-q 4096 --heads-q 8 --head-dim 512 >"$OUT/ncu_d512.txt" 2>&1
scripts/profile_rows.sh fwd fwd_sm90_bf16_d1024_m64n64w8_widex2_vec_plain --dtype bf16 --batch 4 --seqlen-q 4096 --heads-q 4 --head-dim 1024 >"$OUT/ncu_d1024.txt" 2>&1
for f in d512 d1024; do echo "== $f"; grep -E "Duration|Cluster|cluster|Waves|Achieved Occupancy|Registers|issue_active.ratio|inst_executed.sum|cycles_active|Issue Slots|Compute \(SM\)|Memory Through" "$OUT/ncu_$f.txt" | grep -v " 0$" | sed 's/  */ /g'; done
