#!/usr/bin/env bash
# Session 21: where the D = 256 wgmma one-pass backward spends a step, at the suite's S = 512
# causal problem (B 32, H 8) and S = 2048 (B 8): Nsight Compute's full set with the SASS-level
# stall samples (the source page as CSV, summarised locally), plus CLI bwd_ms (median of 30).
# build-run/s20h: the row built locally at 55f2681 (SASS identical to main's).
set -uo pipefail
N=${N:-build-run/s20h}
M=$N/bin/memattn
W=bwd_sm90_bf16_d256_m64n64w8_wgmma_fused_vec_plain
for cfg in "32 512 --causal" "32 512" "8 2048 --causal"; do
  set -- $cfg
  echo "bwd_ms B=$1 S=$2 ${3:-}: $(MEMATTN_KERNEL=$W $M run --backend cuda --pass bwd --dtype bf16 --head-dim 256 --heads-q 8 \
    --batch $1 --seqlen-q $2 ${3:-} --iters 30 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*' | cut -d: -f2)"
done
prof() {  # NAME B S [flags]
  local name=$1; shift
  MEMATTN_KERNEL=$W timeout 200 ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 \
    --set full --import-source no -o $OUT/$name $M run --backend cuda --pass bwd --dtype bf16 --head-dim 256 \
    --heads-q 8 --batch $1 --seqlen-q $2 ${3:-} --iters 0 > $OUT/$name.log 2>&1
  ncu -i $OUT/$name.ncu-rep --page source --csv --print-source sass > $OUT/${name}_sass.csv 2>&1
  ncu -i $OUT/$name.ncu-rep --page details > $OUT/${name}_details.txt 2>&1
  ncu -i $OUT/$name.ncu-rep --page raw --csv --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio > $OUT/${name}_stalls.csv 2>&1
  rm -f $OUT/$name.ncu-rep
  echo "$name: $(grep -E 'Duration|Registers Per|Achieved Occ' $OUT/${name}_details.txt | tr -s ' ' | tr '\n' ';')"
}
prof s512c 32 512 --causal
prof s2048c 8 2048 --causal
