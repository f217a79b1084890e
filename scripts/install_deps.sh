#!/usr/bin/env bash
# Installs what memattn builds with, where it is missing, on a Debian/Ubuntu machine:
# CMake, Ninja, a C++17 compiler with OpenMP, CLI11 and GoogleTest (Debian packages), and, when
# nvcc is present, the CUTLASS/CuTe headers (PyPI nvidia-cutlass, installed with --no-deps).
set -euo pipefail

sudo_if_needed() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

packages=()
command -v cmake >/dev/null || packages+=(cmake)
command -v ninja >/dev/null || packages+=(ninja-build)
command -v g++ >/dev/null || packages+=(g++)
[[ -f /usr/include/CLI/CLI.hpp ]] || packages+=(libcli11-dev)
[[ -f /usr/include/gtest/gtest.h ]] || packages+=(libgtest-dev)
if ((${#packages[@]})); then
  echo "install_deps: installing ${packages[*]}"
  sudo_if_needed apt-get update -qq
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
fi

nvcc_bin=$(command -v nvcc || true)
[[ -z $nvcc_bin && -x /usr/local/cuda/bin/nvcc ]] && nvcc_bin=/usr/local/cuda/bin/nvcc
if [[ -n $nvcc_bin ]] && ! python3 -c "import cutlass_library" 2>/dev/null; then
  echo "install_deps: installing CUTLASS headers (pip nvidia-cutlass==4.2.0.0)"
  python3 -m pip install -q --no-deps nvidia-cutlass==4.2.0.0
fi
