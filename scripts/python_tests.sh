#!/usr/bin/env bash
# The PyTorch op's tests (tests/python) on CPU tensors, the Python part of ./test.sh (CI): against
# the newest torch release and the oldest that pyproject.toml claims, each in a virtual environment
# of its own (build-test/torch-venvs/, ignored by git). Each gets torch from PyPI, the package
# through the README's `pip install --no-build-isolation` (CPU-only: the CUDA kernels are for
# ./test.sh's CMake build; one build folder, so the C++ library compiles once for both), and a
# pytest run with its summary in the log. Every torch built with the C++11 ABI (PyPI's from 2.7
# on) must build memattn._autograd: a failure there is the fast eager path lost, and fails this
# script like a failing test; older ones take the Python autograd Function (python/autograd/). With
# such a torch the plain `pip install .` (build isolation) is tried too, and must build it as well.
# Usage: scripts/python_tests.sh [VERSION...]   (default: newest and the floor; `newest` is a name)
# Disk: a PyPI torch is ~1.2 GB plus ~3 GB of CUDA libraries that it loads even on CPU tensors, so
# each environment is built without triton (its GPU compiler, ~1 GB; these tests compile with
# aot_eager), one requirement at a time with no wheel cache (peak ~5 GB, not ~9), and is removed
# after its run unless MEMATTN_KEEP_TORCH_VENVS=1 (a CI machine with ~6 GB free runs the suite).
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
  echo "python tests: $(df -h --output=avail "$src" | tail -1 | tr -d ' ') free on disk before torch $version"
  [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
  # torch is installed before its requirements (and triton never), so pip's note that they are
  # missing is expected and filtered; every other message passes.
  pip_install() {
    "$venv/bin/python" -m pip install -q --no-cache-dir "$@" \
      2> >(grep -v -e "^ERROR: pip's dependency resolver does not" -e "^torch .* requires " >&2)
  }
  pip_install --upgrade numpy pytest hypothesis scikit-build-core pybind11
  pip_install --upgrade --no-deps "$spec"
  mapfile -t requirements < <("$venv/bin/python" - <<'EOF_REQS'
import importlib.metadata
from packaging.requirements import Requirement  # scikit-build-core's dependency
for text in importlib.metadata.requires("torch") or []:
    requirement = Requirement(text)
    if requirement.name != "triton" and (requirement.marker is None or requirement.marker.evaluate({"extra": ""})):
        print(requirement)
EOF_REQS
  )
  ((${#requirements[@]})) || { echo "python tests: no requirement of torch read" >&2; exit 1; }
  for requirement in "${requirements[@]}"; do pip_install "$requirement"; done
  # Once more together: one requirement's own dependencies may have moved an earlier one off
  # torch's pin (nvidia-cusolver brings the newest nvidia-cusparse); this puts every pin back.
  pip_install "${requirements[@]}"
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
  if [[ $eager == C++ ]]; then
    # The README's other command, plain `pip install .`: pip builds in an environment of its own,
    # and memattn._autograd must still find this environment's torch (python/CMakeLists.txt).
    start=$SECONDS
    "$venv/bin/python" -m pip install -q --no-deps -C cmake.define.MEMATTN_ENABLE_CUDA=OFF \
      -C build-dir="$root/python-package-isolated" .
    isolated=$(cd "$root" && "$venv/bin/python" -c 'import memattn._ops as o; print("C++" if o._autograd else "Python")')
    echo "python tests: pip install . (build isolation) in $((SECONDS - start)) s; eager autograd Function: $isolated"
    if [[ $isolated != C++ ]]; then
      echo "python tests: under build isolation memattn._autograd did not build with torch $torch_version" \
           "($root/python-package-isolated/python/autograd/build.log)" >&2
      exit 1
    fi
  fi
  if [[ ${MEMATTN_KEEP_TORCH_VENVS:-0} != 1 ]]; then rm -rf "$venv"; fi
done
