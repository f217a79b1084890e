#!/usr/bin/env bash
# The PyTorch op's tests (tests/python) on CPU tensors, the Python part of ./test.sh (CI): against
# the newest torch release and the oldest that pyproject.toml claims, each in a virtual environment
# of its own (build-test/torch-venvs/, ignored by git). Each gets torch from PyPI, the package
# through the README's `pip install --no-build-isolation` (CPU-only: the CUDA kernels are for
# ./test.sh's CMake build; one build folder, so the C++ library compiles once for both), and a
# pytest run with its summary in the log. Every torch built with the C++11 ABI (PyPI's from 2.7
# on) must build memattn._autograd: a failure there is the fast eager path lost, and fails this
# script like a failing test; older ones take the Python autograd Function (python/autograd/).
# Usage: scripts/python_tests.sh [VERSION...]   (default: newest and the floor; `newest` is a name)
# CI=true removes each environment after its run (about 5 GB with torch's CUDA libraries).
set -euo pipefail
cd "$(dirname "$0")/.."
floor=$(sed -n 's/^dependencies = \["torch>=\([0-9.]*\)"\]$/\1/p' pyproject.toml)
[[ -n $floor ]] || { echo "python tests: no torch>= floor in pyproject.toml" >&2; exit 1; }
versions=("$@")
((${#versions[@]})) || versions=(newest "$floor")
src=$PWD
root=$src/build-test

for version in "${versions[@]}"; do
  venv=$root/torch-venvs/$version
  spec=torch==$version
  [[ $version == newest ]] && spec=torch
  start=$SECONDS
  [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade "$spec" numpy pytest hypothesis scikit-build-core pybind11
  torch_version=$("$venv/bin/python" -c 'import torch; print(torch.__version__)')
  echo "python tests: torch $torch_version ($version) installed in $((SECONDS - start)) s"

  start=$SECONDS
  "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps \
    -C cmake.define.MEMATTN_ENABLE_CUDA=OFF -C build-dir="$root/python-package" .
  # Run from build-test/: the installed package is imported, not the source tree's python/, and
  # no cache lands in the tree.
  eager=$(cd "$root" && "$venv/bin/python" -c 'import torch, memattn._ops as o
print("C++" if o._autograd else "Python" if torch._C._GLIBCXX_USE_CXX11_ABI else "Python (old ABI)")')
  echo "python tests: memattn built in $((SECONDS - start)) s; eager autograd Function: $eager"
  if [[ $eager == Python ]]; then
    echo "python tests: memattn._autograd did not build with torch $torch_version" \
         "($root/python-package/python/autograd/build.log)" >&2
    exit 1
  fi
  start=$SECONDS
  (cd "$root" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "$src/tests/python")
  echo "python tests: torch $torch_version: tests ran in $((SECONDS - start)) s"
  if [[ ${CI:-} == true ]]; then rm -rf "$venv"; fi
done
