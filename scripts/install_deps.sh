#!/usr/bin/env bash
# Installs what memattn builds with, where it is missing, on a Debian/Ubuntu machine:
# CMake, Ninja, a C++17 compiler with OpenMP, CLI11 and GoogleTest (Debian packages), clang with
# libFuzzer, its sanitizer runtimes and OpenMP (the sanitizer builds of ./test.sh), Python's venv
# and headers (the Python tests; torch itself comes from PyPI into their environments), and, when
# nvcc is present, the CUTLASS/CuTe headers (PyPI nvidia-cutlass, installed with --no-deps).
# With --run, only what ./run.sh builds with (CMake, Ninja, the compiler, CLI11, CUTLASS): the
# first result needs no sanitizers, test frameworks or Python. CLI11, GoogleTest and CUTLASS in
# the fallback folder (MEMATTN_DEPS_DIR, default .deps: scripts/bundle_deps.sh) count as present,
# so a machine without a network that has them there needs nothing installed.
set -euo pipefail
cd "$(dirname "$0")/.."
all=1
[[ ${1:-} == --run ]] && all=0
deps=${MEMATTN_DEPS_DIR:-.deps}

sudo_if_needed() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

packages=()
command -v cmake >/dev/null || packages+=(cmake)
command -v ninja >/dev/null || packages+=(ninja-build)
command -v g++ >/dev/null || packages+=(g++)
[[ -f /usr/include/CLI/CLI.hpp || -d $deps/CLI11 ]] || packages+=(libcli11-dev)
if ((all)); then
  [[ -f /usr/include/gtest/gtest.h || -d $deps/googletest ]] || packages+=(libgtest-dev)
  command -v clang++ >/dev/null || packages+=(clang)  # sanitizer builds, the clang++ consumer of the install test
  # scripts/python_tests.sh: virtual environments with pip, and Python's headers for the extension.
  if ! command -v python3 >/dev/null; then
    packages+=(python3 python3-venv python3-dev)
  else
    python3 -c 'import ensurepip, venv' 2>/dev/null || packages+=(python3-venv)
    python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' ||
      packages+=(python3-dev)
  fi
fi
apt_install() {
  echo "install_deps: installing $*"
  sudo_if_needed apt-get update -qq
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
if ((${#packages[@]})); then apt_install "${packages[@]}"; fi

# clang's libFuzzer, sanitizer runtimes and OpenMP come in packages named by its major version
# (Debian 12: libclang-rt-14-dev, libomp-14-dev); a probe build tells whether they are there.
clang_probe() {
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' |
    clang++ -x c++ -fsanitize=fuzzer,address,undefined -fopenmp - -o /dev/null 2>/dev/null
}
if ((all)) && ! clang_probe; then
  major=$(clang++ -dumpversion | cut -d. -f1)
  apt_install "libclang-rt-$major-dev" "libomp-$major-dev"
  clang_probe || { echo "install_deps: clang++ cannot build a libFuzzer target with ASan, UBSan and OpenMP" >&2; exit 1; }
fi

nvcc_bin=$(command -v nvcc || true)
[[ -z $nvcc_bin && -x /usr/local/cuda/bin/nvcc ]] && nvcc_bin=/usr/local/cuda/bin/nvcc
if [[ -n $nvcc_bin && ! -d $deps/cutlass ]] && ! python3 -c "import cutlass_library" 2>/dev/null; then
  echo "install_deps: installing CUTLASS headers (pip nvidia-cutlass==4.2.0.0)"
  python3 -m pip install -q --no-deps nvidia-cutlass==4.2.0.0
fi
