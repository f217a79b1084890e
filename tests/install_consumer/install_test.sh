#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds and runs a consumer through
# find_package(memattn). Usage: install_test.sh <build dir> <source dir>
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
step configure cmake -S "$src/tests/install_consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix"
step build cmake --build "$tmp/consumer"
"$tmp/consumer/consumer"
