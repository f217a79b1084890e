#!/usr/bin/env bash
# `memattn run --backend cuda --verify` for each feature, forward and backward (`--pass bwd`,
# where the build has backward rows). Exit 77 (skipped) without a GPU.
# Usage: cli_cuda_test.sh path/to/memattn
set -u
bin=$1
nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failures=0
base=(run --backend cuda --verify --iters 2 --batch 2 --seqlen-q 300 --seqlen-k 257 --heads-q 4 --heads-k 2)
features=(
  "--head-dim 64"
  "--head-dim 128 --dtype fp16"
  "--head-dim 64 --dtype fp32"
  "--head-dim 256 --causal"
  "--head-dim 64 --causal --alignment bottom-right"
  "--head-dim 64 --window-left 32 --window-right 7"
  "--head-dim 64 --bias dense"
  "--head-dim 64 --bias broadcast-batch"
  "--head-dim 64 --bias broadcast-heads"
  "--head-dim 64 --bias row"
  "--head-dim 64 --dropout 0.2 --seed 7 --offset 3"
  "--head-dim 64 --varlen 100,0,37 --varlen-k 50,9,200 --causal --alignment bottom-right"
  "--head-dim 40 --head-dim-v 24"
  "--head-dim 300 --head-dim-v 512"
  "--head-dim 1000 --dtype fp32"
  "--head-dim 64 --scale 0.25"
)
check() {  # pass, feature flags
  # shellcheck disable=SC2086
  if "$bin" "${base[@]}" --pass "$1" $2 >"$log" 2>&1 && grep -q "result: PASS" "$log" && grep -q "backend: cuda" "$log"; then
    echo "ok:   $1 $2"
  else
    echo "FAIL: $1 $2"
    tail -n 12 "$log" | sed 's/^/    /'
    failures=$((failures + 1))
  fi
}
for f in "${features[@]}"; do check fwd "$f"; done
# The backward checks are skipped only when the table listing works and has no backward row (of
# either family): a listing that fails must not skip them.
if ! "$bin" kernels --backend cuda >"$log" 2>&1; then
  echo "FAIL: memattn kernels --backend cuda"
  tail -n 12 "$log" | sed 's/^/    /'
  failures=$((failures + 1))
elif grep -q "^  bwd_sm" "$log"; then
  for f in "${features[@]}"; do check bwd "$f"; done
else
  echo "no backward rows in this build: backward checks skipped"
fi
# --graph: the timed calls are CUDA graph replays (the checked run is a plain call); a KV cache
# call inside a graph reads nothing on the host.
for g in "--pass both --head-dim 64 --causal" "--pass fwd --head-dim 128 --seqlen-q 1 --kv-cache paged --page-size 16 --new-keys 1"; do
  # shellcheck disable=SC2086
  if "$bin" run --backend cuda --verify --graph --iters 3 --batch 2 --seqlen-k 700 --heads-q 8 --heads-k 2 $g >"$log" 2>&1 &&
    grep -q "result: PASS" "$log" && grep -qE "^forward: +[0-9.]+ ms" "$log"; then
    echo "ok:   --graph $g"
  else
    echo "FAIL: --graph $g"
    tail -n 12 "$log" | sed 's/^/    /'
    failures=$((failures + 1))
  fi
done
echo "$failures failure(s)"
[[ $failures -eq 0 ]]
