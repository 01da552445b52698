#!/usr/bin/env bash
# Generates the Python stubs for failover.v1 into ./gen, or into the directory
# given (Debian: protobuf-compiler, protobuf-compiler-grpc for grpc_python_plugin).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
proto="$here/../../proto"
out="${1:-$here/gen}"
rm -rf "$out" && mkdir -p "$out"
protoc -I "$proto" --python_out="$out" --grpc_out="$out" \
  --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" "$proto"/failover/v1/*.proto
touch "$out/failover/__init__.py" "$out/failover/v1/__init__.py"
