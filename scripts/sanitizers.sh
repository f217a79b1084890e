#!/usr/bin/env bash
# The sanitizer part of ./test.sh (CI): the CPU test suite built with AddressSanitizer and
# UndefinedBehaviorSanitizer by GCC and by clang (CPU-only builds; any finding aborts its test:
# -fno-sanitize-recover=all, halt_on_error), then bounded libFuzzer runs of tests/fuzz (the clang
# build; fixed seed, FUZZ_SECONDS each, default 60) with their counts in the log.
# Usage: scripts/sanitizers.sh [gcc] [clang] [fuzz]   (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=("$@")
((${#steps[@]})) || steps=(gcc clang fuzz)
want() { [[ " ${steps[*]} " == *" $1 "* ]]; }

export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
common=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMATTN_ENABLE_CUDA=OFF -DMEMATTN_BUILD_PYTHON=OFF
        "-DMEMATTN_SANITIZE=address;undefined")
# Left out, by label: gpu and python tests (neither is built without CUDA and the extension; the
# extension would load the sanitizer runtime into an uninstrumented Python), no_sanitizer (the
# installed-package consumer, which links without the sanitizer runtime), fuzz (run below).
skip='gpu|python|no_sanitizer|fuzz'

suite() {  # suite <name> <build dir> <cmake args...>
  local name=$1 dir=$2
  shift 2
  local start=$SECONDS
  cmake -S . -B "$dir" "${common[@]}" "$@" >/dev/null
  cmake --build "$dir"
  echo "sanitizers ($name): built in $((SECONDS - start)) s; tests left out (labels $skip):"
  ctest --test-dir "$dir" -N -L "$skip" | grep 'Test *#' | sed 's/^ */    /' || echo "    (none)"
  start=$SECONDS
  ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" -LE "$skip"
  echo "sanitizers ($name): test suite passed under ASan+UBSan in $((SECONDS - start)) s"
}

if want gcc; then
  suite "GCC $(g++ -dumpfullversion)" build-asan-gcc -DCMAKE_CXX_COMPILER=g++
fi
if want clang || want fuzz; then
  # One clang build serves both: the library carries libFuzzer's coverage counters, which the
  # test binaries ignore.
  if want clang; then
    suite "clang $(clang++ -dumpversion)" build-asan-clang -DCMAKE_CXX_COMPILER=clang++ -DMEMATTN_FUZZ=ON
  else
    cmake -S . -B build-asan-clang "${common[@]}" -DCMAKE_CXX_COMPILER=clang++ -DMEMATTN_FUZZ=ON >/dev/null
    cmake --build build-asan-clang --target fuzz_api fuzz_kv_cache fuzz_tools
  fi
fi
if want fuzz; then
  seconds=${FUZZ_SECONDS:-60}
  for target in fuzz_api fuzz_kv_cache fuzz_tools; do
    FUZZ_ARTIFACTS=build-asan-clang/fuzz-artifacts tests/fuzz/run_fuzz.sh "build-asan-clang/tests/$target" \
      "tests/fuzz/seeds/$target" "$seconds"
  done
fi
