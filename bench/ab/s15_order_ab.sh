#!/usr/bin/env bash
# Session 15: the grouped work order (tile_scheduler.hpp rank_work) against pair by pair. The tree
# as it is is the new order; /tmp/base is a copy with bench/ab/s15-work-order.patch reversed. Both
# built with the bf16 D = 64/128 plain rows; then the new build's row tests, the CLI's --verify on
# causal problems with several groups (even and uneven sizes, bottom-right alignment), and the
# suite's causal rows (and two non-causal controls) through both builds, twice, alternating.
# FILTER, ROWS (bench.py --only) and VERIFY=0 (no CLI checks) change the defaults.
set -u
filter=${FILTER:-'^(fwd|bwd)_sm80_bf16_d(64|128)_[^_]+_(fused_)?vec_plain$'}
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMATTN_ENABLE_CUDA=ON -DMEMATTN_KERNEL_DTYPES=bf16
  "-DMEMATTN_KERNEL_FILTER=$filter" -DMEMATTN_SM80_SASS=90 -DMEMATTN_SM80_PTX=OFF)
targets=(memattn_cli memattn_python memattn_autograd test_cuda_rows)
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r . /tmp/base && rm -rf /tmp/base/build-*
(cd /tmp/base && patch -R -p1 <bench/ab/s15-work-order.patch) >$OUT/patch.log 2>&1 || { echo "patch -R failed"; cat $OUT/patch.log; exit 1; }
(cmake -S . -B build-new "${common[@]}" -DMEMATTN_DEPS_DIR=$PWD/.deps && cmake --build build-new -j 8 --target "${targets[@]}") >$OUT/build-new.log 2>&1 &
(cd /tmp/base && cmake -S . -B build-base "${common[@]}" -DMEMATTN_DEPS_DIR=$PWD/.deps && cmake --build build-base -j 8 --target "${targets[@]}") >$OUT/build-base.log 2>&1 &
wait %1; a=$?; wait %2; b=$?
echo "build new: $a, base: $b"
[[ $a -eq 0 && $b -eq 0 ]] || { tail -n 20 $OUT/build-*.log; exit 1; }
timeout 240 build-new/tests/test_cuda_rows >$OUT/rows.log 2>&1; echo "test_cuda_rows: exit $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/rows.log | tr '\n' ' ')"
cli=build-new/bin/memattn
[[ ${VERIFY:-1} == 1 ]] && for args in "--batch 7 --heads-q 29 --seqlen-q 768 --head-dim 64 --causal" \
            "--batch 5 --heads-q 40 --seqlen-q 768 --head-dim 128 --causal" \
            "--batch 6 --heads-q 36 --seqlen-q 600 --seqlen-k 900 --head-dim 64 --causal --alignment bottom-right" \
            "--batch 3 --heads-q 64 --heads-k 16 --seqlen-q 700 --head-dim 128 --causal"; do
  r=$(timeout 200 $cli run --backend cuda --dtype bf16 --pass both --verify $args 2>&1 | grep -iE "verify|pass|fail|error" | tr '\n' ' ')
  echo "verify $args: $r"
done
rows=${ROWS:-4,5,6,7,12,13,14,15,2,10}
for i in 1 2; do
  for side in base new; do
    dir=$PWD/build-$side; [[ $side == base ]] && dir=/tmp/base/build-base
    PYTHONPATH=$dir/python python3 bench/bench.py --out $OUT/$side$i --only $rows --passes fwd,bwd --commit s15-order-$side >$OUT/bench-$side$i.log 2>&1
  done
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
runs = {k: json.load(open(f"{out}/{k}/bench.json"))["results"] for k in ("base1", "new1", "base2", "new2")}
print("memattn TFLOP/s | forward: base1 new1 base2 new2 (FA2) | backward: base1 new1 base2 new2 (FA2)")
def tf(r, who, p):
    x = (r.get(who) or {}).get(f"{p}_tflops")
    return "-" if x is None else f"{x:.0f}"
for i, r in enumerate(runs["base1"]):
    print(f"D={r['D']} S={r['S']} causal={int(r['causal'])} |", *(tf(runs[k][i], "memattn", "fwd") for k in runs),
          f"({tf(r, 'FA2', 'fwd')}) |", *(tf(runs[k][i], "memattn", "bwd") for k in runs), f"({tf(r, 'FA2', 'bwd')})")
PY
