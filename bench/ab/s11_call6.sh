#!/usr/bin/env bash
# Session 11, call 6: the backward's elementwise kernels (delta, the dQ conversion) a warp per row
# with vector accesses; the dispatcher's choice without reason strings, one plan per call; the
# op's Python trims. 12-row local build (build-run, base = HEAD before these), Python modules
# before (build-py-old) and after (build-py).
set -uo pipefail
B=build-run
mkdir -p "$OUT/t"
OUT=$OUT/t BUILD_DIR=$B STEPS="gtests" \
  GPU_TESTS="test_cuda_rows:* test_cuda_forward:Features/*bf16_* test_cuda_backward:Features/*bf16_*:WideHeads/*bf16_*:CudaBackwardDeterminism.TwentyRunsAreBitIdentical:CudaBackwardWorkspace.*" \
  timeout 300 scripts/device_harness.sh >/dev/null 2>&1
cat "$OUT/t/summary.txt"
timeout 150 compute-sanitizer --tool memcheck $B/tests/test_cuda_backward \
  --gtest_filter='Features/*bf16_bias_dense:Features/*bf16_padded*:Features/*bf16_varlen*:Features/*bf16_m255_n17_dv72:CudaBackwardWorkspace.*' 2>&1 | tail -1
for P in "--head-dim 128 --heads-q 16" "--head-dim 64 --heads-q 32" "--head-dim 128 --heads-q 16 --causal"; do
  for bin in $B/base/memattn $B/bin/memattn; do
    echo "$P $bin: $($bin run --backend cuda --pass bwd --iters 20 --dtype bf16 --batch 8 --seqlen-q 2048 $P | grep -E '^backward:')"
  done
done
for bin in $B/base/memattn $B/bin/memattn; do
  echo "== ncu, bwd D = 128 S = 2048, $bin"
  ncu --metrics gpu__time_duration.sum "$bin" run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 \
    --seqlen-q 2048 --heads-q 16 --head-dim 128 2>&1 | grep -E "^  [a-zA-Z_]|gpu__time_duration" | sed 's/(.*//' | cut -c1-100
done
cd bench
for m in build-py-old build-py; do
  echo "== $m"
  PYTHONPATH=$PWD/../$m/python python3 -c "
import host_overhead as h
h.breakdown()
for name, (f, b) in h.paths(8, 16, 2048, 128, False).items():
    if name.startswith('memattn binding'): continue
    print(name, 'fwd sync %.3f queued %.3f' % (h.sync_ms(f, 30), h.queued_ms(f)), 'bwd sync %.3f queued %.3f' % (h.sync_ms(b, 30), h.queued_ms(b)) if b else '')
"
done
PYTHONPATH=$PWD/../build-py/python python3 bench.py --only 9,13,26 --passes fwd,bwd --out "$OUT" --commit s11-call6 2>&1 | tail -2
cat "$OUT/bench.md" | grep "^| bf16"
echo done
