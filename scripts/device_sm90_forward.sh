#!/usr/bin/env bash
# The Hopper forward's rows (sm90/fwd/) on the H100: build them with the rows that catch every
# other problem of the tests and the sm80 rows they are measured against; force each one through
# the row test and the plain feature cases it fits (against the float64 reference, outputs
# poisoned); the three sanitizers on two rows; then the suite's forward shapes, each row against
# the sm80 row of its bucket (`memattn run`, median of ITERS). Logs to $OUT.
#   scripts/device_sm90_forward.sh            (STEPS="build test sanitize ab" by default)
# EXTRA_ROWS (a regular expression) adds rows to the build, PYTHON=ON the Python module (for
# bench/bench.py with PYTHONPATH=$BUILD_DIR/python); the test step then also runs every compiled
# row through test_cuda_rows.
set -uo pipefail
out=${OUT:-/tmp/memattn-sm90}
build=${BUILD_DIR:-/tmp/build-sm90}
steps=${STEPS:-build test sanitize ab}
mkdir -p "$out"
has() { [[ " $steps " == *" $1 "* ]]; }
summary=$out/summary.txt
note() { echo "$*" | tee -a "$summary"; }
note "sm90 forward $(date -u '+%Y-%m-%d %H:%M UTC') commit ${MEMATTN_COMMIT:-unknown}"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$summary"
# The kernel table's Hopper forward rows (kernel_table.py is where they are listed).
mapfile -t tma_rows < <(python3 src/cuda/kernel_table.py --list --families 90 --dtypes bf16,fp16 --filter '^fwd_.*_tma_' |
  awk '{print $2}')
sm80_rows=(fwd_sm80_bf16_d{64,128}_m128n64w4_vec_plain fwd_sm80_bf16_d256_m128n64w8_vec_plain)

if has build; then
  filter="fwd_sm90_.*_tma_|_d65536_|^($(IFS='|'; echo "${sm80_rows[*]}"))\$${EXTRA_ROWS:+|$EXTRA_ROWS}"
  start=$SECONDS
  {
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMATTN_ENABLE_CUDA=ON -DMEMATTN_DEPS_DIR="$PWD/.deps" \
      -DMEMATTN_KERNEL_FILTER="$filter" -DMEMATTN_SM80_SASS=90 -DMEMATTN_SM80_PTX=OFF -DMEMATTN_BUILD_PYTHON="${PYTHON:-OFF}" &&
      cmake --build "$build" -j "$(nproc)"
  } >"$out/build.log" 2>&1
  rc=$?
  note "build: exit $rc in $((SECONDS - start)) s"
  [[ $rc -eq 0 ]] || { tail -n 40 "$out/build.log"; exit 1; }
  "$build/bin/memattn" kernels --resources 2>&1 | grep -A1 _tma_ >>"$summary"
fi

# The plain cases a row fits: its bucket, tensors a tensor map describes (not kv_stride0), fixed
# lengths (variable lengths take the sm80 rows).
cases_for() {  # cases_for ROW
  local row=$1 dtype=${1#fwd_sm90_} bucket
  dtype=${dtype%%_*}
  bucket=${row#*_d}
  bucket=${bucket%%_*}
  local skip="*d512_dv256:*d1000:*kv_stride0:*varlen*"
  ((bucket < 72)) && skip="$skip:*m255_n17_dv72"
  echo "$(scripts/plain_cases.sh fwd "${dtype/fp16/f16}")-$skip"
}

if has test; then
  : >"$out/tests.log"
  rows_filter=$([[ -n ${EXTRA_ROWS:-} ]] && echo '*' || echo '*_tma_*')
  timeout 300 "$build/tests/test_cuda_rows" --gtest_filter="$rows_filter" >>"$out/tests.log" 2>&1
  note "test_cuda_rows [$rows_filter]: exit $? — $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$out/tests.log" | tail -n 1)"
  for row in "${tma_rows[@]}"; do
    timeout 120 scripts/forced_row_tests.sh "$row" "$(cases_for "$row")" "$build" >>"$out/tests.log" 2>&1
    note "forced $row: exit $? — $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$out/tests.log" | tail -n 1)"
  done
  # The dispatcher's choice over every case (the 4.3 GB bias case left out: it tests the sm80 rows).
  for t in test_cuda_forward:-*LongSequence* test_cuda_varlen:*; do
    timeout 300 "$build/tests/${t%%:*}" --gtest_filter="${t#*:}" >>"$out/tests.log" 2>&1
    note "${t%%:*} (the dispatcher's choice): exit $? — $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$out/tests.log" | tail -n 1)"
  done
  grep -E '^\[  FAILED  \] [A-Z]' "$out/tests.log" | sort -u | head -n 30 | tee -a "$summary"
  # The CLI's --verify (float64 reference) per feature, the D = 128 row forced.
  for features in "" "--causal" "--window-left 100 --window-right 20" "--heads-k 2 --causal"; do
    "$build/bin/memattn" run --backend cuda --pass fwd --dtype bf16 --batch 2 --seqlen-q 300 --heads-q 4 \
      --head-dim 128 --kernel fwd_sm90_bf16_d128_m128n128w12_wgmma_tma_vec_plain --verify $features >"$out/run.log" 2>&1
    note "memattn run --verify ${features:-(plain)}: exit $? — $(grep -E '^result|^error' "$out/run.log" | head -n 1)"
  done
fi

if has sanitize; then
  : >"$out/sanitizer.log"
  for row in fwd_sm90_bf16_d128_m128n128w12_wgmma_tma_vec_plain fwd_sm90_fp16_d64_m128n128w12_wgmma_tma_vec_plain; do
    dtype=${row#fwd_sm90_}
    dtype=${dtype%%_*}
    dtype=${dtype/fp16/f16}
    filter=$(printf "Features/CudaForward.MatchesReference/${dtype}_%s:" causal_br_long_keys m17_n255_gqa window_br)
    for tool in memcheck racecheck synccheck; do
      MEMATTN_TEST_KERNEL=$row timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 \
        "$build/tests/test_cuda_forward" --gtest_filter="$filter" >>"$out/sanitizer.log" 2>&1
      note "compute-sanitizer $tool $row: exit $?"
    done
  done
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitizer.log" | sort | uniq -c | tee -a "$summary"
fi

if has ab; then
  # The suite's shapes (16384 tokens, hidden 2048): the Hopper row (the default) against the sm80 row.
  : >"$out/ab.log"
  for d in 64 128 256; do
    heads=$((2048 / d))
    sm80=$(printf '%s\n' "${sm80_rows[@]}" | grep "_d${d}_")
    for s in 512 2048 8192; do
      for causal in "" --causal; do
        echo "== D $d S $s $causal" >>"$out/ab.log"
        ITERS=${ITERS:-20} MEMATTN_BIN=$build/bin/memattn scripts/ab_rows.sh fwd "$sm80" --dtype bf16 \
          --batch $((16384 / s)) --heads-q $heads --seqlen-q $s --head-dim $d $causal >>"$out/ab.log" 2>&1
      done
    done
  done
  cat "$out/ab.log" >>"$summary"
fi
cat "$summary"
