#!/usr/bin/env bash
# Nsight Compute on kernel-table rows, one problem: each named row forced with `--kernel ROW` and
# run once by `memattn run --iters 0`; ncu reads the counters of the row's kernels (forward, or the
# backward's dK/dV and dQ kernels), clocks left alone. Run on the GPU machine after a build whose
# rows passed the tests. EXTRA_SECTIONS adds ncu sections (e.g. SourceCounters: the top stall
# locations in the SASS); EXTRA_NCU_ARGS adds ncu arguments, e.g. the stall reasons per issued
# instruction: EXTRA_NCU_ARGS='--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio'.
#   scripts/profile_rows.sh fwd|bwd "ROW ROW ..." [memattn run flags]
set -uo pipefail
bin=${MEMATTN_BIN:-build-gpu/bin/memattn}
pass=$1
rows=$2
shift 2
# The pass's own kernels (the backward's run starts with a forward for O and LSE; sm90::backward_kernel is
# the Hopper backward's).
kernels=$([[ $pass == fwd ]] && echo 'forward' || echo '(dkdv|dq|one_pass_bwd|backward)')
sections=(SpeedOfLight Occupancy LaunchStats WarpStateStats SchedulerStats ComputeWorkloadAnalysis
  MemoryWorkloadAnalysis InstructionStats ${EXTRA_SECTIONS:-})
for row in $rows; do
  echo "== $row $*"
  ncu --clock-control none --kernel-name-base demangled \
    --kernel-name "regex:${kernels}_(global_|simt_|fp32_|wide_)?kernel" --launch-count 2 \
    "${sections[@]/#/--section=}" ${EXTRA_NCU_ARGS:-} "$bin" run --backend cuda --pass "$pass" --iters 0 \
    --kernel "$row" "$@" 2>&1 |
    grep -vE '^==PROF==|^  *$'
done
