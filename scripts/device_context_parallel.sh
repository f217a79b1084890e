#!/usr/bin/env bash
# Context parallelism on the GPU machine, from the repository root (with .deps carried): builds the
# Python module with the kernel rows the runs use (bf16 D = 128 forward and backward, the any-D
# rows of bf16 and fp32 for the tests' small head dims), runs the NCCL tests of
# tests/python/test_distributed.py (worlds of 1, 2 and 4 ranks where the GPUs are there; a failing
# rank), then bench/context_parallel.py with torchrun on 1, 2, 4 ... GPUs up to all of them, and
# the scaling table against one GPU. $OUT gets summary.txt (the GPUs, their links, the results),
# build.log, tests.log, bench.log and tables.tar (context_parallel_w*.md/.json).
#   TOKENS_PER_GPU=32768 TOTAL=131072 ITERS=10 scripts/device_context_parallel.sh
set -uo pipefail
out=${OUT:-/tmp/memattn-cp}
mkdir -p "$out"
build=${BUILD_DIR:-/tmp/build-cp}
summary=$out/summary.txt
note() { echo "$*" | tee -a "$summary"; }
: >"$summary"
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
note "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1) x $gpus, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null)"
nvidia-smi topo -m >>"$summary" 2>&1

rows='^(fwd_sm80_bf16_d128_m128n64w4_vec_plain|bwd_sm80_bf16_d128_m64n128w8_fused_vec_plain|'
rows+='bwd_sm80_bf16_d128_m64n64w4_vec_plain|(fwd|bwd)_sm80_(bf16|fp32)_d65536_.*elem_full)$'
start=$SECONDS
{
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMATTN_ENABLE_CUDA=ON -DMEMATTN_BUILD_TESTS=OFF \
    -DMEMATTN_BUILD_PYTHON=ON -DMEMATTN_DEPS_DIR="$PWD/.deps" -DMEMATTN_SM80_SASS=90 -DMEMATTN_SM80_PTX=OFF \
    "-DMEMATTN_KERNEL_FILTER=$rows" && cmake --build "$build" -j "$(nproc)"
} >"$out/build.log" 2>&1 || { note "build failed"; tail -n 30 "$out/build.log"; exit 1; }
note "build: $((SECONDS - start)) s"
export PYTHONPATH=$(realpath "$build")/python${PYTHONPATH:+:$PYTHONPATH}

(cd /tmp && timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -q -rs -k "nccl" "$OLDPWD/tests/python/test_distributed.py") \
  >"$out/tests.log" 2>&1
note "test_distributed.py: exit $? — $(tail -n 1 "$out/tests.log")"

: >"$out/bench.log"
tables=$out/tables
for ((world = 1; world <= gpus; world *= 2)); do
  timeout "${BENCH_TIMEOUT:-300}" torchrun --nproc-per-node "$world" bench/context_parallel.py \
    --tokens-per-gpu "${TOKENS_PER_GPU:-32768}" --total "${TOTAL:-131072}" --iters "${ITERS:-10}" --out "$tables" \
    >>"$out/bench.log" 2>&1
  note "context_parallel.py, world $world: exit $?"
done
cat "$tables"/context_parallel_w*.md >>"$summary" 2>/dev/null
python3 bench/context_parallel.py --scaling "$tables" >>"$summary" 2>&1
tar -cf "$out/tables.tar" -C "$tables" . && rm -r "$tables"
cat "$summary"
