#!/usr/bin/env bash
# A bounded libFuzzer run with a fixed seed (CI's fuzz step and the CTest tests of label `fuzz`):
# a fresh corpus directory (plus a seed folder, where one exists), libFuzzer's own log kept
# aside, and one summary line (inputs run, exec/s, corpus size, coverage) for the CI log; on a
# finding, the log's tail, with the input in base64, and the crash file under $FUZZ_ARTIFACTS
# (default: the current directory).
# Usage: run_fuzz.sh <fuzz binary> <seed corpus dir, may be absent> [seconds, default 60]
set -u
bin=$1
seeds=$2
seconds=${3:-60}
name=$(basename "$bin")
artifacts=${FUZZ_ARTIFACTS:-$PWD}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$artifacts"
dirs=("$work/corpus")
[[ -d $seeds ]] && dirs+=("$seeds")
# Every sanitizer finding is fatal; leaks too (libFuzzer checks each input that allocates more
# than it frees). -timeout: one input running that long is a hang (a finding).
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
start=$(date +%s)
"$bin" -seed=1 -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$artifacts/$name-" "${dirs[@]}" >"$work/log" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
stat() { grep -m1 "^stat::$1:" "$work/log" | awk '{print $2}'; }
cov=$(grep -E '^#[0-9]+' "$work/log" | tail -n 1 | grep -o 'cov: [0-9]*' | awk '{print $2}')
echo "$name: ${seconds} s bounded run (seed 1): $(stat number_of_executed_units) inputs in ${elapsed} s," \
  "$(stat average_exec_per_sec) exec/s, corpus $(ls "$work/corpus" | wc -l) new files" \
  "(+ $( [[ -d $seeds ]] && ls "$seeds" | wc -l || echo 0) seeds), coverage ${cov:-?} edges, peak RSS $(stat peak_rss_mb) MB"
if [[ $rc -ne 0 ]]; then
  echo "$name: FAILED (exit $rc); the end of libFuzzer's log:"
  tail -n 80 "$work/log"
  exit 1
fi
