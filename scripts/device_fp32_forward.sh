#!/usr/bin/env bash
# The fp32 Hopper forward rows (sm90/fwd/tf32x3_*) on the GPU machine: build them with the fp32 rows
# they are checked and measured against (the mma.sync 3xTF32 and FMA rows, whose backward takes
# their LSE) and the catch-all rows; their scores against the mma.sync rows' (test_cuda_precision),
# the row test, the persistent-item test and the plain feature cases forced on each; the three
# sanitizers on each; `memattn run` A/Bs against the mma.sync row of the bucket; with PYTHON=ON the
# suite's fp32 rows (bench/bench.py). Logs to $OUT.
#   scripts/device_fp32_forward.sh            (STEPS="build test sanitize ab" by default)
set -uo pipefail
out=${OUT:-/tmp/memattn-fp32}
build=${BUILD_DIR:-/tmp/build-fp32}
steps=${STEPS:-build test sanitize ab}
mkdir -p "$out"
has() { [[ " $steps " == *" $1 "* ]]; }
summary=$out/summary.txt
note() { echo "$*" | tee -a "$summary"; }
note "fp32 forward $(date -u '+%Y-%m-%d %H:%M UTC') commit ${MEMATTN_COMMIT:-unknown}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$summary"
mapfile -t rows < <(python3 src/cuda/kernel_table.py --list --families 90 --dtypes fp32 --filter '^fwd_.*_tma_' |
  awk '{print $2}')
bucket_of() { local b=${1#*_d}; echo "${b%%_*}"; }

if has build; then
  filter="_fp32_d(64|128|65536)_|^fwd_sm80_(bf16|fp16)_d65536_m64n128w4_gacc_elem_full\$|^bwd_sm80_(bf16|fp16)_d65536_.*_elem_full\$"
  start=$SECONDS
  {
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMATTN_ENABLE_CUDA=ON -DMEMATTN_DEPS_DIR="$PWD/.deps" \
      -DMEMATTN_KERNEL_FILTER="$filter" -DMEMATTN_SM80_SASS=90 -DMEMATTN_SM80_PTX=OFF -DMEMATTN_BUILD_PYTHON="${PYTHON:-OFF}" &&
      cmake --build "$build" -j "$(nproc)"
  } >"$out/build.log" 2>&1
  rc=$?
  note "build: exit $rc in $((SECONDS - start)) s"
  [[ $rc -eq 0 ]] || { tail -n 40 "$out/build.log"; exit 1; }
fi

if has test; then
  : >"$out/tests.log"
  for t in test_cuda_precision:* test_cuda_large_logits:* test_cuda_rows:*fp32* test_cuda_forward:CudaForwardHopper.*; do
    timeout 300 "$build/tests/${t%%:*}" --gtest_filter="${t#*:}" >>"$out/tests.log" 2>&1
    note "${t%%:*} [${t#*:}]: exit $? — $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$out/tests.log" | tail -n 1)"
  done
  # The plain feature cases a row fits: head dims up to its bucket, rows of a multiple of 16 bytes,
  # fixed lengths, no broadcast stride.
  cases=(m17_n255_gqa m1013 mqa empty_keys causal_tl causal_br_fully_masked_rows causal_br_long_keys window_16_3
    window_band_1_0 window_left_only window_br scale scale_negative scale_zero_causal_br)
  for row in "${rows[@]}"; do
    filter=$(printf "Features/CudaForward.MatchesReference/f32_%s:" "${cases[@]}")
    (($(bucket_of "$row") >= 72)) && filter="${filter}Features/CudaForward.MatchesReference/f32_m255_n17_dv72"
    timeout 120 scripts/forced_row_tests.sh "$row" "${filter%:}" "$build" >>"$out/tests.log" 2>&1
    note "forced $row: exit $? — $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$out/tests.log" | tail -n 1)"
  done
  grep -E '^\[  FAILED  \] [A-Z]' "$out/tests.log" | sort -u | head -n 30 | tee -a "$summary"
fi

if has sanitize; then
  for row in "${rows[@]}"; do
    for tool in memcheck racecheck synccheck; do
      timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$build/bin/memattn" run --backend cuda \
        --dtype fp32 --precision tf32x3 --batch 1 --seqlen-q 700 --heads-q 8 --heads-k 2 --head-dim "$(bucket_of "$row")" \
        --causal --iters 0 --kernel "$row" >"$out/sanitizer.log" 2>&1
      note "compute-sanitizer $tool $row: exit $? — $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer.log")"
    done
  done
fi

if has ab; then
  # The suite's fp32 shape (16384 tokens, hidden 2048), causal too: each row against the mma.sync row.
  : >"$out/ab.log"
  for row in "${rows[@]}"; do
    d=$(bucket_of "$row")
    for causal in "" --causal; do
      echo "== D $d S 4096 $causal" >>"$out/ab.log"
      ITERS=${ITERS:-20} MEMATTN_BIN=$build/bin/memattn scripts/ab_rows.sh fwd \
        "$row fwd_sm80_fp32_d${d}_m64n64w4_tf32x3_vec_plain" --dtype fp32 --precision tf32x3 --batch 4 \
        --heads-q $((2048 / d)) --seqlen-q 4096 --head-dim "$d" $causal >>"$out/ab.log" 2>&1
    done
  done
  cat "$out/ab.log" | tee -a "$summary"
  if [[ ${PYTHON:-OFF} == ON ]]; then
    PYTHONPATH=$build/python timeout 300 python3 bench/bench.py --only 27,28,29 \
      --commit "${MEMATTN_COMMIT:-unknown}" --out "$out" >"$out/bench.log" 2>&1
    note "bench.py fp32 rows: exit $?"
    tail -n 12 "$out/bench.md" 2>/dev/null | tee -a "$summary"
  fi
fi
