#!/usr/bin/env bash
# Copies the build dependencies into .deps/ (git-ignored) for machines that cannot install them,
# such as the GPU machine: CUTLASS/CuTe headers, CLI11 headers and the GoogleTest sources.
# Carry .deps with the tree; CMake looks there when packages are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cutlass=$(python3 -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))")
rm -rf .deps
mkdir -p .deps/cutlass .deps/CLI11/include
cp -r "$cutlass" .deps/cutlass/include
cp -r /usr/include/CLI .deps/CLI11/include/CLI
cp -r /usr/src/googletest .deps/googletest
du -sh .deps
