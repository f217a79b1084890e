#!/usr/bin/env bash
# End-to-end tests of the memattn CLI: runs with --verify per feature, JSON output, the .npy
# round trip, and bad flags (an error message and exit code 2, never a crash).
# Usage: cli_test.sh path/to/memattn [backend]
set -u
bin=$1
backend=${2:-cpu}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

expect() {  # expect <exit code> <pattern or ''> <args...>
  local want=$1 pattern=$2
  shift 2
  "$bin" "$@" >"$tmp/out" 2>&1
  local got=$?
  if [[ $got -ne $want ]] || { [[ -n $pattern ]] && ! grep -q -- "$pattern" "$tmp/out"; }; then
    echo "FAIL: memattn $* -> exit $got (want $want), output:"
    sed 's/^/    /' "$tmp/out" | tail -n 15
    failures=$((failures + 1))
  else
    echo "ok:   memattn $*"
  fi
}

small=(--backend "$backend" --batch 2 --seqlen-q 70 --seqlen-k 90 --heads-q 4 --heads-k 2 --head-dim 40 --iters 1 --verify)
expect 0 "result: PASS" run "${small[@]}"
expect 0 "result: PASS" run "${small[@]}" --dtype fp32 --causal --alignment bottom-right
expect 0 "result: PASS" run "${small[@]}" --dtype fp16 --window-left 9 --window-right 3
for bias in dense broadcast-batch broadcast-heads row; do
  expect 0 "dbias .*PASS" run "${small[@]}" --bias "$bias"
done
expect 0 "result: PASS" run "${small[@]}" --dropout 0.3 --seed 11 --offset 5
expect 0 "result: PASS" run "${small[@]}" --varlen 30,0,65 --varlen-k 41,7,1 --causal --alignment bottom-right
expect 0 "result: PASS" run "${small[@]}" --head-dim 300 --head-dim-v 72 --pass bwd
expect 0 "result: PASS" run "${small[@]}" --pass fwd --scale 0.2
expect 0 "forward" kernels --backend "$backend" --head-dim 96

# --json: one parsable line on stdout.
"$bin" run "${small[@]}" --json >"$tmp/json" 2>/dev/null
if [[ $(wc -l <"$tmp/json") -eq 1 ]] && grep -q '"verify":"pass"' "$tmp/json" && grep -q '"fwd_tflops":' "$tmp/json"; then
  echo "ok:   --json"
else
  echo "FAIL: --json output:"; cat "$tmp/json"; failures=$((failures + 1))
fi

# .npy round trip: save a run (inputs and results), load it back, results must be identical.
expect 0 "saved" run "${small[@]}" --dtype bf16 --bias row --save "$tmp/a"
expect 0 "result: PASS" run --backend "$backend" --iters 1 --verify --dtype bf16 --load "$tmp/a" --save "$tmp/b"
for f in out lse dq dk dv dbias q k v bias do; do
  if ! cmp -s "$tmp/a/$f.npy" "$tmp/b/$f.npy"; then echo "FAIL: round trip changed $f.npy"; failures=$((failures + 1)); fi
done
expect 2 "q.npy" run --backend "$backend" --load "$tmp/nonexistent"

# The dispatcher's overrides. --kernel takes a row name per pass; on the CPU the library refuses
# a forced row (it names overrides.kernel), and the scheduling flags are accepted and ignored.
expect 0 "result: PASS" run "${small[@]}" --no-l2-groups --no-tail-split
expect 2 "not a kernel-table row name" run "${small[@]}" --kernel no_such_row
expect 2 "at most one row per pass" run "${small[@]}" --kernel bwd_sm80_a,bwd_sm80_b
if [[ $backend == cpu ]]; then
  expect 2 "overrides.kernel" run "${small[@]}" --kernel fwd_sm80_bf16_d64_m128n64w4_vec_plain
  expect 2 "overrides.kernel" run "${small[@]}" --kernel fwd_sm80_a --kernel bwd_sm80_b
  expect 2 "overrides.kernel" kernels --backend cpu --kernel bwd_sm80_bf16_d64_m64n64w4_vec_plain
fi

# Bad flags: clear error, exit code 2, no crash.
expect 2 "dtype" run --dtype fp64
expect 2 "multiple of kv heads" run --backend "$backend" --heads-q 3 --heads-k 2
expect 2 "window-left" run --window-left -4
expect 2 "dropout" run --backend "$backend" --dropout 1.0
expect 2 "causal" run --causal --window-right 3
expect 2 "varlen" run --varlen 3,x,4
expect 2 "varlen-k" run --varlen 3,4 --varlen-k 5
expect 2 "" run --no-such-flag
expect 2 "" frobnicate
expect 0 "" --version

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
