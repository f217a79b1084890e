#!/usr/bin/env bash
# Session 18 (for the next GPU session): backward time (CLI, median of 30 calls, bwd_ms: delta,
# the one-pass kernel and the dQ conversion) of main's build (BASE, bdcacb5 kernels) against
# branch s18-claims' (NEW, e153cb3) with its switches off, the query loops rotated, the
# dQ workspace unzeroed (tickets), and both; the suite's shapes (D = 256 at S = 512 first: 3.2x
# the seed).
# FIN_BIN: the build with the in-kernel dQ conversion as well (MEMATTN_DQ_FINISH, b755983; its
# code costs the D = 128 row 56 bytes of spills, hence a binary of its own).
# Usage: [CFGS='D,H,B,S[,--causal] ...'] bench/ab/s18_ab.sh BASE_BIN NEW_BIN FIN_BIN [rounds]
#   bench/ab/s18_ab.sh build-run/s18/bin/memattn build-run/s18b/bin/memattn build-run/s18f/bin/memattn
set -u
BASE=$1; NEW=$2; FIN=$3; ROUNDS=${4:-2}
one() {  # ENV BIN D H B S [--causal]
  local e=$1 bin=$2; shift 2
  env $e $bin run --backend cuda --pass bwd --dtype bf16 --head-dim $1 --heads-q $2 --batch $3 --seqlen-q $4 ${5:-} \
    --iters 30 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*' | cut -d: -f2
}
for round in $(seq $ROUNDS); do
  for cfg in ${CFGS:-256,8,32,512 256,8,32,512,--causal 256,8,8,2048 256,8,8,2048,--causal 128,16,8,2048 \
                   128,16,2,8192 128,16,8,2048,--causal 64,32,8,2048 64,32,2,8192 64,32,8,2048,--causal 64,32,32,512}; do
    set -- ${cfg//,/ }
    base=$(one "X=0" $BASE $@)
    line="round $round D=$1 H=$2 B=$3 S=$4 ${5:-}: base $base"
    for v in "off:$NEW:MEMATTN_DQ_TICKETS=0" "rot:$NEW:MEMATTN_ROTATE_STEPS=1" "tick:$NEW:MEMATTN_DQ_TICKETS=1" \
             "both:$NEW:MEMATTN_DQ_TICKETS=1 MEMATTN_ROTATE_STEPS=1" \
             "finish:$FIN:MEMATTN_DQ_TICKETS=1 MEMATTN_ROTATE_STEPS=1 MEMATTN_DQ_FINISH=1"; do
      IFS=: read -r name bin e <<< "$v"
      t=$(one "$e" $bin $@)
      line="$line | $name $t ($(python3 -c "print(f'{$base/$t:.3f}')" 2>/dev/null)x)"
    done
    echo "$line"
  done
done
