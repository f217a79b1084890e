#!/usr/bin/env bash
# A pass's feature tests (test_cuda_forward or test_cuda_backward against the float64 reference)
# with one kernel-table row forced on its pass (MEMATTN_TEST_KERNEL, which the tests' cases put in
# Options::overrides.kernel), on the GPU machine after a build: checks a row the dispatcher does
# not choose first (a fallback tile, a candidate being measured) on every feature case it fits. Name the cases the row fits in
# the filter: a case it does not fit fails with the dispatcher's reason.
#   scripts/forced_row_tests.sh ROW 'gtest filter' [build dir]
set -uo pipefail
row=${1:?ROW names a kernel-table row}
filter=${2:?a gtest filter}
build=${3:-build-gpu}
bin=$build/tests/test_cuda_forward
[[ $row == bwd_* ]] && bin=$build/tests/test_cuda_backward
MEMATTN_TEST_KERNEL=$row "$bin" --gtest_filter="$filter"
