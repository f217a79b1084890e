#!/usr/bin/env bash
# A/B of a patch on the GPU machine, from the repository root (with .deps carried): builds the tree
# as it is (build-base, BASE_FILTER's rows) and a copy with PATCH applied (/tmp/patched/build-patch,
# PATCH_FILTER's rows) side by side, runs the patched build's GPU checks (test_cuda_rows over every
# compiled row, then GPU_TESTS: "binary:gtest-filter ..."), and times every line of AB_FILE
# (`pass "ROWS" memattn-run flags`, scripts/ab_rows.sh) with both binaries, base first. With
# PROFILE_FILE, ncu then reads the patched build's rows (scripts/profile_rows.sh). Logs go to $OUT.
#   PATCH=/tmp/x.patch AB_FILE=/tmp/ab.txt BASE_FILTER=REGEX PATCH_FILTER=REGEX scripts/device_patch_ab.sh
set -uo pipefail
out=${OUT:-/tmp/memattn-patch-ab}
mkdir -p "$out"
patched=/tmp/patched
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMATTN_ENABLE_CUDA=ON -DMEMATTN_KERNELS=all
  -DMEMATTN_SM80_SASS="${SASS:-90}" -DMEMATTN_SM80_PTX=OFF)
jobs=$(($(nproc) / 2))

rm -rf "$patched" && mkdir -p "$patched" && cp -r . "$patched" && rm -rf "$patched"/build-*
(cd "$patched" && patch -p1 <"${PATCH:?PATCH names the patch}") >"$out/patch.log" 2>&1 || {
  echo "patch failed"; cat "$out/patch.log"; exit 1; }
(cmake -S . -B build-base "${common[@]}" -DMEMATTN_DEPS_DIR="$PWD/.deps" \
  "-DMEMATTN_KERNEL_FILTER=${BASE_FILTER:?}" && cmake --build build-base -j "$jobs") >"$out/build-base.log" 2>&1 &
(cd "$patched" && cmake -S . -B build-patch "${common[@]}" -DMEMATTN_DEPS_DIR="$patched/.deps" \
  "-DMEMATTN_KERNEL_FILTER=${PATCH_FILTER:?}" && cmake --build build-patch -j "$jobs") >"$out/build-patch.log" 2>&1 &
wait %1; base_rc=$?
wait %2; patch_rc=$?
echo "build base: exit $base_rc, patched: exit $patch_rc"
[[ $base_rc -eq 0 && $patch_rc -eq 0 ]] || { tail -n 30 "$out"/build-*.log; exit 1; }

pb=$patched/build-patch
# A kernel that hangs (a barrier phase off) must not eat the whole device call: each test binary
# gets TEST_TIMEOUT seconds, and a timeout skips the timings.
limit=${TEST_TIMEOUT:-240}
hung=0
{
  timeout -k 10 "$limit" "$pb/tests/test_cuda_rows" || [[ $? -ne 124 ]] || hung=1
  for t in ${GPU_TESTS:-}; do
    timeout -k 10 "$limit" "$pb/tests/${t%%:*}" --gtest_filter="${t#*:}" || [[ $? -ne 124 ]] || hung=1
  done
} >"$out/tests.log" 2>&1
echo "patched checks: $(grep -cE '^\[  PASSED|^\[  FAILED  \] [0-9]' "$out/tests.log") summaries"
grep -E '^\[  (PASSED|FAILED)|tests? ran' "$out/tests.log"
if ((hung)); then echo "a test binary ran past ${limit} s: timings skipped"; tail -n 20 "$out/tests.log"; exit 1; fi

if [[ -n ${AB_FILE:-} ]]; then
  while read -r line; do
    [[ -z $line || $line == \#* ]] && continue
    for side in base patch; do
      echo "== $side: $line"
      bin=$([[ $side == base ]] && echo build-base/bin/memattn || echo "$pb/bin/memattn")
      eval "MEMATTN_BIN=$bin scripts/ab_rows.sh $line" </dev/null
    done
  done <"$AB_FILE" | tee "$out/ab.log"
fi
if [[ -n ${PROFILE_FILE:-} ]]; then
  while read -r line; do
    [[ -z $line || $line == \#* ]] && continue
    eval "MEMATTN_BIN=$pb/bin/memattn scripts/profile_rows.sh $line" </dev/null
  done <"$PROFILE_FILE" >"$out/profile.log" 2>&1
  echo "profile: $(grep -c '^==' "$out/profile.log") rows"
fi
