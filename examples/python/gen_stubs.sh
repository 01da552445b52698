#!/usr/bin/env bash
# Generates the Python stubs for failover.v1 into ./gen (Debian:
# protobuf-compiler, protobuf-compiler-grpc for grpc_python_plugin).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
proto="$here/../../proto"
rm -rf "$here/gen" && mkdir -p "$here/gen"
protoc -I "$proto" --python_out="$here/gen" --grpc_out="$here/gen" \
  --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" "$proto"/failover/v1/*.proto
touch "$here/gen/failover/__init__.py" "$here/gen/failover/v1/__init__.py"
