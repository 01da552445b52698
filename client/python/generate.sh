#!/usr/bin/env bash
# Writes the failover.v1 stubs (with .pyi type stubs) into this package's
# failover/ directory: run it before building or installing the package.
# Debian: protobuf-compiler, protobuf-compiler-grpc (grpc_python_plugin).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
proto="${PROTO_DIR:-$here/../../proto}"
rm -rf "$here/failover" && mkdir -p "$here/failover"
protoc -I "$proto" --python_out="$here" --pyi_out="$here" --grpc_out="$here" \
  --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" "$proto"/failover/v1/*.proto
touch "$here/failover/__init__.py" "$here/failover/v1/__init__.py"
