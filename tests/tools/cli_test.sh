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
# The plan lines print whether or not a kernel fits (`unsupported` exits 0): name the plan's kind.
if [[ $backend == cpu ]]; then fwd_plan="cpu-fast forward" bwd_plan="cpu-fast backward"; else fwd_plan="fwd_" bwd_plan="bwd_"; fi
expect 0 "^  forward  -> $fwd_plan" kernels --backend "$backend" --head-dim 96
expect 0 "^  backward -> $bwd_plan" kernels --backend "$backend" --head-dim 96

# --json: one parsable line on stdout, and exit 0.
"$bin" run "${small[@]}" --json >"$tmp/json" 2>/dev/null
json_rc=$?
if [[ $json_rc -eq 0 && $(wc -l <"$tmp/json") -eq 1 ]] && grep -q '"verify":"pass"' "$tmp/json" &&
   grep -q '"fwd_tflops":' "$tmp/json"; then
  echo "ok:   --json"
else
  echo "FAIL: --json (exit $json_rc) output:"; cat "$tmp/json"; failures=$((failures + 1))
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
  expect 2 "--graph: times CUDA graphs" run "${small[@]}" --graph
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

# Issue 30 (#10): problems that cannot fit are refused before anything is allocated, naming the
# largest size flag, the bytes needed and the bytes available (exit 2; not bad_alloc, exit 134).
expect 2 "error: --batch 100000: the problem does not fit in host memory: its tensors need 655680000000000 bytes" \
  run --backend "$backend" --batch 100000 --seqlen-q 100000 --head-dim 512
expect 2 "are available" run --backend "$backend" --batch 100000 --seqlen-q 100000 --head-dim 512
expect 2 "error: --seqlen-k 1152921504606846977: .*need more than 2^63 bytes" run --backend "$backend" --seqlen-k 1152921504606846977
expect 2 "error: --varlen (rows in all:) 1073741824: the problem does not fit" run --backend "$backend" --varlen 1073741824
expect 2 "error: --batch 100000: the problem does not fit" kernels --backend "$backend" --batch 100000 --seqlen-q 100000 --head-dim 512
expect 2 "^--batch: must be <= 9223372036854775807, got 99999999999999999999" run --batch 99999999999999999999
# A .npy whose header claims more than the file holds (600 bytes, 8e10 elements), and one with
# trailing bytes after its data, are refused before allocation.
npy_file() {  # npy_file <path> <shape> <data bytes>
  local header="{'descr': '<f4', 'fortran_order': False, 'shape': $2, }"
  while (((10 + ${#header} + 1) % 64)); do header+=" "; done
  header+=$'\n'
  { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $((${#header} % 256)))\\x$(printf %02x $((${#header} / 256)))";
    printf '%s' "$header"; head -c "$3" /dev/zero; } >"$1"
}
mkdir -p "$tmp/huge"
npy_file "$tmp/huge/q.npy" "(1, 80000, 1000, 1000)" 472
npy_file "$tmp/huge/k.npy" "(1, 4, 1, 1)" 16
npy_file "$tmp/huge/v.npy" "(1, 4, 1, 1)" 16
expect 2 "q.npy: file is shorter than its shape says: its header's shape (1, 80000, 1000, 1000) of <f4 needs 320000000000 bytes of data, the file holds 472" \
  run --backend "$backend" --load "$tmp/huge"
mkdir -p "$tmp/trailing"
cp "$tmp/a/q.npy" "$tmp/a/k.npy" "$tmp/a/v.npy" "$tmp/trailing/"
printf 'xyz' >>"$tmp/trailing/k.npy"
expect 2 "k.npy: trailing bytes: .*(3 bytes after the data)" run --backend "$backend" --dtype bf16 --load "$tmp/trailing"

# Issue 30 (#11, #12): the messages say the flag, the rule and the value; meaningless values
# (negative seeds, empty lists and folders, windows past int64) are refused, not wrapped.
expect 2 "^--batch: must be >= 1, got 0$" run --batch 0
expect 2 "^--batch: must be an integer, got '1.5'$" run --batch 1.5
expect 2 "^--iters: must be >= 0, got -1$" run --iters -1
expect 2 "^--seed: must be >= 0, got -1$" run --seed -1
expect 2 "^--offset: must be >= 0, got -3$" run --offset -3
expect 2 "^--offset: must be <= 4294967295 (it is one word of the Philox counter), got 4294967296$" run --offset 4294967296
expect 2 "^--dropout: must be in \[0, 1), got -0.5$" run --dropout -0.5
expect 2 "^--scale: must be finite, got inf$" run --scale inf
expect 2 "^--varlen: must not be empty$" run --varlen ''
expect 2 "^--varlen-k: must not be empty$" run --varlen 3 --varlen-k ''
expect 2 "^--save: must not be empty$" run --save ''
expect 2 "^--load: must not be empty$" run --load ''
expect 2 "error: --varlen: '1,2,' ends with a comma" run --backend "$backend" --varlen 1,2,
expect 2 "error: --varlen: a sequence of 1073741825 is longer than the limit, 2^30 = 1073741824" run --backend "$backend" --varlen 1073741825
expect 2 "error: --varlen-k: the lengths sum to more than 2147483647 packed rows, the most that int32 seqstarts index (got 2147483648 after 2 sequences)" \
  run --backend "$backend" --varlen 1,1 --varlen-k 1073741824,1073741824
expect 2 "^--window-left: must be <= 9223372036854775807 (omit the flag for an unbounded window), got 99999999999999999999$" \
  run --window-left 99999999999999999999
# A window at least as wide as the longest sequence is clamped to its length: the same mask.
expect 0 "mask(90,90,top-left)" run "${small[@]}" --dtype fp32 --window-left 9223372036854775807 --window-right 9223372036854775807
expect 0 "result: PASS" run "${small[@]}" --dtype fp32 --window-left 9223372036854775807 --window-right 9223372036854775807 --dropout 0.2
expect 0 "result: PASS" run "${small[@]}" --seed 18446744073709551615 --dropout 0.2 --batch 02
# ... against the lengths of the --load files (70 x 90 here), not the flags' defaults.
expect 0 "mask(50,90,top-left)" run --backend "$backend" --iters 1 --verify --dtype bf16 --load "$tmp/a" \
  --seqlen-q 8 --seqlen-k 8 --window-left 50 --window-right 5000

# KV cache (forward only): the reference is taken from the cache before the call, and the cache
# after it must be that one with the new keys at their slots (lines k_cache, v_cache). CPU runs
# whatever the backend under test, as the CUDA backend takes no cache yet.
cache_pass() {  # cache_pass <args...>: exit 0, out, lse and both cache lines PASS, result PASS
  "$bin" run --backend cpu --iters 1 "$@" --verify >"$tmp/out" 2>&1
  local got=$? line missing=""
  for line in "^  out  .*PASS$" "^  lse  .*PASS$" "^  k_cache .*: 0 of [1-9][0-9]* elements differ  PASS$" \
              "^  v_cache .*: 0 of [1-9][0-9]* elements differ  PASS$" "^result: PASS$"; do
    grep -q -- "$line" "$tmp/out" || missing+=" '$line'"
  done
  if [[ $got -ne 0 || -n $missing ]]; then
    echo "FAIL: memattn run --backend cpu --iters 1 $* --verify -> exit $got, missing$missing; output:"
    sed 's/^/    /' "$tmp/out" | tail -n 15
    failures=$((failures + 1))
  else
    echo "ok:   memattn run --backend cpu $* --verify"
  fi
}
cache_pass --kv-cache paged --page-size 7 --cache-len 100 --new-keys 3
cache_pass --kv-cache contiguous --cache-len 100 --new-keys 3
cache_pass --kv-cache paged --page-size 1 --batch 3 --seqlen-q 1 --cache-len 40 --new-keys 1 --causal --heads-q 4 --heads-k 2 --dtype fp32
cache_pass --kv-cache paged --page-size 16 --batch 2 --seqlen-q 5 --cache-len 0 --new-keys 5 --causal --dtype fp16
cache_pass --kv-cache contiguous --batch 2 --seqlen-q 4 --seqlen-k 50 --new-keys 6 --window-left 9 --head-dim 40 --head-dim-v 24
expect 0 "kv-cache=paged(page=7) cached=100 new=3" run --backend cpu --iters 0 --kv-cache paged --page-size 7 --cache-len 100 --new-keys 3
expect 0 "mask(inf,0,bottom-right) kv-cache=contiguous cached=13 new=0" run --backend cpu --iters 0 --kv-cache contiguous --seqlen-q 2 --seqlen-k 13 --causal
"$bin" run --backend cpu --iters 1 --verify --kv-cache paged --page-size 7 --cache-len 100 --new-keys 3 --json >"$tmp/json" 2>/dev/null
json_rc=$?
if [[ $json_rc -eq 0 && $(wc -l <"$tmp/json") -eq 1 ]] && grep -q '"verify":"pass"' "$tmp/json" &&
   grep -q '"kv_cache":"paged","page_size":7,"cache_len":100,"new_keys":3' "$tmp/json" && grep -q '"k_cache":{' "$tmp/json"; then
  echo "ok:   --json with --kv-cache"
else
  echo "FAIL: --json with --kv-cache (exit $json_rc) output:"; cat "$tmp/json"; failures=$((failures + 1))
fi
expect 0 "^  forward  -> cpu-fast forward" kernels --backend cpu --kv-cache paged --page-size 7 --cache-len 100 --new-keys 3
expect 0 "^  backward -> none: the backward takes no KV cache" kernels --backend cpu --kv-cache contiguous
if [[ $backend != cpu ]]; then  # the plan, or the library's reason for taking no cache
  expect 0 "^  forward  -> \(fwd_\|.*kv_cache: \)" kernels --backend "$backend" --kv-cache paged --seqlen-q 1 --cache-len 100 --new-keys 1
fi
# A top-left mask with a cache: the library's reason reaches the user.
expect 2 "error: invalid argument: mask.alignment: with a KV cache .* bottom_right" \
  run --backend cpu --kv-cache paged --causal --alignment top-left
expect 2 "^  forward  -> invalid argument: mask.alignment:" kernels --backend cpu --kv-cache paged --causal --alignment top-left
# Bad combinations name the flag.
expect 2 "^--page-size: must be >= 1, got 0$" run --kv-cache paged --page-size 0
expect 2 "^--cache-len: must be >= 0, got -1$" run --kv-cache paged --cache-len -1
expect 2 "^--new-keys: must be >= 0, got -2$" run --kv-cache paged --new-keys -2
expect 2 "^--kv-cache: " run --kv-cache ring
expect 2 "error: --page-size: .*needs --kv-cache paged" run --backend cpu --page-size 8
expect 2 "error: --page-size: .*needs --kv-cache paged" run --backend cpu --kv-cache contiguous --page-size 8
expect 2 "error: --cache-len: needs --kv-cache" run --backend cpu --cache-len 8
expect 2 "error: --new-keys: needs --kv-cache" run --backend cpu --new-keys 1
expect 2 "error: --varlen: not with --kv-cache" run --backend cpu --kv-cache paged --varlen 3,4
expect 2 "error: --bias: not with --kv-cache" run --backend cpu --kv-cache paged --bias dense
expect 2 "error: --dropout: must be 0 with --kv-cache" run --backend cpu --kv-cache paged --dropout 0.1
expect 2 "error: --pass: both runs the backward, which takes no KV cache" run --backend cpu --kv-cache paged --pass both
expect 2 "error: --save: not with --kv-cache" run --backend cpu --kv-cache paged --save "$tmp/c"
expect 2 "error: --cache-len: 10 cached keys plus 2 new ones" run --backend cpu --kv-cache paged --cache-len 10 --new-keys 2 --seqlen-k 13
expect 2 "error: --new-keys: 11 new keys are more than the 10 keys" run --backend cpu --kv-cache paged --seqlen-k 10 --new-keys 11

expect 2 "no-such-flag" run --no-such-flag
expect 2 "subcommand" frobnicate
expect 0 "^[0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*$" --version

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
