#!/usr/bin/env bash
# Writes the failover.v1 stubs (with .pyi type stubs) into failoverd_client/v1/,
# importing each other from there: the package owns one top-level name. Run it
# before building the wheel or installing from this directory.
# Debian: protobuf-compiler, protobuf-compiler-grpc (grpc_python_plugin).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
proto="${PROTO_DIR:-$here/../../proto}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
protoc -I "$proto" --python_out="$scratch" --pyi_out="$scratch" --grpc_out="$scratch" \
  --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" "$proto"/failover/v1/*.proto
rm -rf "$here/failoverd_client/v1" && mkdir -p "$here/failoverd_client/v1"
for f in "$scratch"/failover/v1/*; do
  # Imports and module names only; the descriptors keep the failover.v1 package.
  sed -e 's/^from failover\.v1 import /from failoverd_client.v1 import /' \
      -e "s/'failover\.v1\.\([a-z_]*_pb2\)'/'failoverd_client.v1.\1'/" "$f" >"$here/failoverd_client/v1/$(basename "$f")"
done
cat >"$here/failoverd_client/v1/__init__.py" <<'PY'
"""The generated failover.v1 messages and stubs (types_pb2, decision_pb2, admin_pb2 and their _grpc)."""
PY
