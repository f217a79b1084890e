#!/usr/bin/env bash
# Session 19 (branch s19-kv-prefetch): the one-pass rows on a persistent grid whose CTAs load the
# next item's K and V during the current one's epilogue (MEMATTN_KV_PREFETCH=1). build-run/s19p:
# the branch's bf16 rows D = 64/128/256 (CLI, tests); build-run/s18: main's kernels (bdcacb5).
# Correctness on problems with more items than resident CTAs (the switch is off below that),
# then bwd_ms (CLI, median of 20) base / switch off / switch on.
set -uo pipefail
N=build-run/s19p; BASE=build-run/s18/bin/memattn
v() { echo "verify $*: $(MEMATTN_KV_PREFETCH=1 timeout 90 $N/bin/memattn run --backend cuda --pass bwd --dtype bf16 --verify --iters 1 "$@" 2>&1 | grep -E 'result|FAIL|rror' | head -3 | tr '\n' ' ')"; }
v --head-dim 256 --heads-q 8 --batch 4 --seqlen-q 640
v --head-dim 256 --heads-q 8 --heads-k 2 --batch 3 --seqlen-q 300 --seqlen-k 1000
v --head-dim 64 --heads-q 8 --batch 4 --seqlen-q 1000 --seqlen-k 2000
v --head-dim 128 --heads-q 4 --batch 2 --seqlen-q 2048
echo "rows: $(MEMATTN_KV_PREFETCH=1 timeout 60 $N/tests/test_cuda_rows --gtest_filter='*bwd*' 2>&1 | grep -E '^\[  (PASSED|FAILED) |FAILED  \]' | tr '\n' ' ' | cut -c1-300)"
one() { env $1 $2 run --backend cuda --pass bwd --dtype bf16 --head-dim $3 --heads-q $4 --batch $5 --seqlen-q $6 --iters 20 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*' | cut -d: -f2; }
for cfg in 256,8,32,512 256,8,8,2048 64,32,32,512 64,32,8,2048 128,16,32,512 128,16,8,2048; do
  set -- ${cfg//,/ }
  b=$(one X=0 $BASE $@); o=$(one MEMATTN_KV_PREFETCH=0 $N/bin/memattn $@); n=$(one MEMATTN_KV_PREFETCH=1 $N/bin/memattn $@)
  echo "$cfg: base $b off $o on $n (on/off $(python3 -c "print(f'{$o/$n:.3f}')" 2>/dev/null)x)"
done
