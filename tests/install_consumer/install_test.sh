#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds and runs a consumer through
# find_package(memattn), once with g++ and once with clang++: clang defaults to C++14, so the
# clang build shows that the package itself asks for the C++17 its headers need.
# Usage: install_test.sh <build dir> <source dir>. Exits 77 (skipped) when clang++ is missing and
# the g++ consumer passed; scripts/install_deps.sh installs clang, so CI always has it.
set -u
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
step() {  # step <name> <command...>: run quietly, show the log when it fails
  if ! "${@:2}" >"$tmp/log" 2>&1; then
    echo "install test: $1 failed:"
    cat "$tmp/log"
    exit 1
  fi
}
step install cmake --install "$build" --prefix "$tmp/prefix"
for cxx in g++ clang++; do
  if ! command -v "$cxx" >/dev/null; then
    echo "install test: no $cxx on PATH (scripts/install_deps.sh installs it); its consumer is skipped"
    exit 77
  fi
  step "configure ($cxx)" cmake -S "$src/tests/install_consumer" -B "$tmp/consumer-$cxx" -G Ninja \
    -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_CXX_COMPILER="$cxx"
  step "build ($cxx)" cmake --build "$tmp/consumer-$cxx"
  echo -n "$cxx: "
  "$tmp/consumer-$cxx/consumer" || exit 1
done
