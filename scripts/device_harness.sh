#!/usr/bin/env bash
# The GPU harness, run on the device machine from the repository root (with .deps carried; see
# scripts/bundle_deps.sh). Steps, all by default (choose with STEPS="build test ..."):
#   build     configure and build for the GPU present with all cores
#   test      every test (CPU and GPU) through CTest
#   gtests    chosen GPU test binaries of a filtered build: GPU_TESTS="binary:gtest-filter ..."
#             (MEMATTN_TEST_KERNEL=ROW forces a row on the feature cases: scripts/forced_row_tests.sh)
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck on a small GPU subset
#   run       the CLI's default problem (`memattn run --verify`) and SASS instruction counts
#   python    pip install . (offline, for the GPU present; PIP_ARGS adds -C options) and the PyTorch
#             op's tests
#   bench     the benchmark suite (bench/bench.py) against PyTorch SDPA's backends (runs before
#             `run`, whose SASS listing of every test binary takes minutes)
#   decode    the decoding table (bench/decode.py, DECODE_ARGS) against SDPA's FLASH and CUDNN
#   ab        row A/Bs (scripts/ab_rows.sh), one per line of the file AB_FILE: pass "ROWS" flags
#             (`memattn run` flags, the dispatcher's overrides --no-l2-groups and --no-tail-split
#             among them; each row is forced with --kernel)
#   profile   Nsight Compute (scripts/profile_rows.sh), one per line of PROFILE_FILE, same format
#   newcomer  a newcomer's first hour, timed on a copy of the tree without build folders: ./run.sh
#             (the first verified result), then the full library for the GPU present (CLI and
#             Python modules, every row, no tests) with each compile step's time from ninja's log
#             (NEWCOMER_FULL_BUILD=0 leaves the full build out)
# Logs and tables go to $OUT (at most 8 files come back from the device machine: summary, build,
# tests, sanitizer, run (with the bench log), python logs, bench.md, bench.json).
set -uo pipefail
out=${OUT:-/tmp/memattn-harness}
mkdir -p "$out"
steps=${STEPS:-build test sanitize run python bench}
build=${BUILD_DIR:-build-gpu}
has() { [[ " $steps " == *" $1 "* ]]; }
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

note "harness $(date -u '+%Y-%m-%d %H:%M UTC') commit ${MEMATTN_COMMIT:-unknown} steps: $steps"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$summary"

if has newcomer; then
  fresh=/tmp/memattn-fresh
  rm -rf "$fresh" && mkdir -p "$fresh"
  tar -c --exclude='./build*' --exclude=./.snap --exclude=./.git . | tar -x -C "$fresh"
  start=$(date +%s)
  (cd "$fresh" && ./run.sh) >"$out/newcomer.log" 2>&1
  note "newcomer: ./run.sh exit $? in $(($(date +%s) - start)) s — $(grep -E '^result' "$out/newcomer.log")"
fi
if has newcomer && [[ ${NEWCOMER_FULL_BUILD:-1} != 0 ]]; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1)
  start=$(date +%s)
  {
    cmake -S "$fresh" -B "$fresh/build-full" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMATTN_BUILD_TESTS=OFF \
      -DMEMATTN_BUILD_PYTHON=ON -DMEMATTN_SM80_SASS="${cc/./}" -DMEMATTN_SM80_PTX=OFF &&
      cmake --build "$fresh/build-full" -j "$(nproc)"
  } >>"$out/newcomer.log" 2>&1
  note "newcomer: full library build exit $? in $(($(date +%s) - start)) s"
  # ninja's log: start and end (ms) of each step; the sum is the build's compile work.
  awk 'NR > 1 { printf "%.1f %s\n", ($2 - $1) / 1000, $4 }' "$fresh/build-full/.ninja_log" | sort -rn >"$out/ninja_times.txt"
  note "newcomer: compile steps $(awk '{ s += $1 } END { printf "%.0f s over %d steps", s, NR }' "$out/ninja_times.txt")"
fi

if has build; then
  {
    nvcc --version | tail -2
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMATTN_ENABLE_CUDA=ON \
      -DMEMATTN_DEPS_DIR="$PWD/.deps" -DMEMATTN_KERNELS=all ${CMAKE_ARGS:-} &&
      cmake --build "$build" -j "$(nproc)"
  } >"$out/build.log" 2>&1
  rc=$?
  note "build: exit $rc ($(grep -c 'warning' "$out/build.log") warning lines)"
  [[ $rc -eq 0 ]] || { tail -n 40 "$out/build.log"; exit 1; }
fi

if has test; then
  ctest --test-dir "$build" --output-on-failure -j 8 ${CTEST_ARGS:-} >"$out/tests.log" 2>&1
  note "tests: exit $? — $(grep -E 'tests passed|tests failed' "$out/tests.log")"
  grep -E "Failed|SKIPPED|\*\*\*" "$out/tests.log" | head -n 20 | tee -a "$summary"
fi

if has gtests; then
  : >"$out/tests.log"
  for t in ${GPU_TESTS:?GPU_TESTS names the test binaries}; do
    "$build/tests/${t%%:*}" --gtest_filter="${t#*:}" >>"$out/tests.log" 2>&1
    note "${t%%:*} [${t#*:}]: exit $? — $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$out/tests.log" | tail -n 1)"
  done
  grep -E '^\[  FAILED  \] [A-Z]' "$out/tests.log" | sort -u | head -n 20 | tee -a "$summary"
fi

if has sanitize; then
  : >"$out/sanitizer.log"
  for tool in memcheck racecheck synccheck; do
    for t in ${SANITIZE_TESTS:-"$build/tests/test_cuda_smoke"}; do
      bin=${t%%:*}
      filter=${t#*:}
      [[ $filter == "$t" ]] && filter='*'
      timeout "${SANITIZE_TIMEOUT:-120}" compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" --gtest_filter="$filter" \
        >>"$out/sanitizer.log" 2>&1
      note "compute-sanitizer $tool $(basename "$bin") [$filter]: exit $?"
    done
  done
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitizer.log" | sort | uniq -c | tee -a "$summary"
fi

if has bench; then
  PYTHONPATH="$(realpath -m "$build")/python:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 python3 bench/bench.py --out "$out" \
    --iters "${BENCH_ITERS:-20}" ${BENCH_ARGS:-} >>"$out/run.log" 2>&1
  note "bench: exit $?"
  tail -n 3 "$out/run.log"
fi
if has decode; then
  PYTHONPATH="$(realpath -m "$build")/python:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 python3 bench/decode.py --out "$out" \
    ${DECODE_ARGS:-} >"$out/decode.log" 2>&1
  note "decode: exit $?"
  grep -E '^\|' "$out/decode.log" | tee -a "$summary"
fi
if has run; then
  {
    "$build/bin/memattn" run --verify ${RUN_ARGS:-}
    echo "exit $?"
    "$build/bin/memattn" kernels --resources
  } >"$out/run.log" 2>&1
  note "memattn run --verify: $(grep -E '^result|^error|^exit' "$out/run.log" | tr '\n' ' ')"
  for bin in "$build"/tests/test_cuda_*; do
    echo "== $bin" >>"$out/run.log"
    cuobjdump --list-elf "$bin" >>"$out/run.log" 2>&1
    cuobjdump --list-ptx "$bin" >>"$out/run.log" 2>&1
    cuobjdump -sass "$bin" 2>/dev/null | grep -oE '\b(HGMMA|HMMA|UTMALDG|LDSM|LDGSTS|STL|LDL)\b' | sort | uniq -c >>"$out/run.log"
  done
fi

if has python; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1)
  {
    python3 -m pip install --no-build-isolation --no-deps -C cmake.define.MEMATTN_SM80_SASS="${cc/./}" \
      -C cmake.define.MEMATTN_SM80_PTX=OFF -C cmake.define.MEMATTN_DEPS_DIR="$PWD/.deps" ${PIP_ARGS:-} . &&
      (cd /tmp && python3 -m pytest -q -rs "$OLDPWD/tests/python")
  } >"$out/python.log" 2>&1
  note "pip install . and tests/python: exit $? — $(tail -n 1 "$out/python.log")"
fi

if has ab; then
  while read -r line; do
    [[ -z $line || $line == \#* ]] && continue
    echo "== $line"
    eval "MEMATTN_BIN=$build/bin/memattn scripts/ab_rows.sh $line" </dev/null
  done <"${AB_FILE:?AB_FILE names the A/B list}" >"$out/ab.log" 2>&1
  note "ab ($AB_FILE): $(grep -c '^==' "$out/ab.log") problems"
fi
if has profile; then
  while read -r line; do
    [[ -z $line || $line == \#* ]] && continue
    eval "MEMATTN_BIN=$build/bin/memattn scripts/profile_rows.sh $line" </dev/null
  done <"${PROFILE_FILE:?PROFILE_FILE names the rows to profile}" >"$out/profile.log" 2>&1
  note "profile ($PROFILE_FILE): $(grep -c '^==' "$out/profile.log") rows"
fi
cat "$summary"
