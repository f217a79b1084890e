#!/usr/bin/env bash
# Fingerprints the machine code of every kernel-table row, to show that a refactor (a move, a
# rename, an enum for a bool) left the kernels unchanged. Builds the library only (every row, no
# tests, no CLI) into BUILD_DIR, then writes one line per device function of each generated unit's
# object file (a unit holds several rows: kernel_table.py's rows_per_unit, the same for both builds
# on one machine): unit, arch, instruction count and the hash of its SASS, with the function's name
# left out (so renamed namespaces and types compare equal). Run on the GPU machine with .deps carried:
#   scripts/sass_fingerprint.sh OUT_FILE [extra CMake arguments]
# and compare two outputs with scripts/sass_compare.py. With BUILD=0 the objects of an existing
# build in BUILD_DIR (e.g. the harness's, configured with the same SASS options) are used as they are.
set -euo pipefail
out=${1:?output file}
shift
build=${BUILD_DIR:-build-sass}
if [[ ${BUILD:-1} != 0 ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMATTN_ENABLE_CUDA=ON \
    -DMEMATTN_DEPS_DIR="$PWD/.deps" -DMEMATTN_KERNELS=all -DMEMATTN_SM80_SASS=90 -DMEMATTN_SM80_PTX=OFF \
    -DMEMATTN_BUILD_CLI=OFF -DMEMATTN_BUILD_TESTS=OFF -DMEMATTN_BUILD_PYTHON=OFF "$@" >/dev/null
  cmake --build "$build" --target memattn -j "$(nproc)" >"$build/sass_build.log" 2>&1 ||
    { tail -n 40 "$build/sass_build.log"; exit 1; }
fi
dumps=$(mktemp -d)
find "$build" -path '*generated*' -name '*.cu.o' | sort >"$dumps/objects"
# One cuobjdump per object, all cores; then the dumps in a fixed order.
xargs -P "$(nproc)" -I{} sh -c 'cuobjdump -sass "$1" >"$2/$(basename "$1" .cu.o).sass"' _ {} "$dumps" <"$dumps/objects"
while read -r obj; do
  unit=$(basename "$obj" .cu.o)
  echo "== $unit"
  cat "$dumps/$unit.sass"
done <"$dumps/objects" | python3 "$(dirname "$0")/sass_compare.py" --fingerprint >"$out"
rm -rf "$dumps"
echo "sass_fingerprint: $(cut -d' ' -f1 "$out" | sort -u | wc -l) units, $(wc -l <"$out") functions -> $out"
