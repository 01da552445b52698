#!/usr/bin/env bash
# Builds the wheel into DIST_DIR (default ./dist) from a scratch copy of this
# package with freshly generated stubs; the wheel installs without protoc or
# this repository:  pip install DIST_DIR/failoverd_client-*.whl
# Debian: python3-pip python3-setuptools python3-wheel protobuf-compiler protobuf-compiler-grpc.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dist="$(realpath -m "${1:-$here/dist}")"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r "$here" "$scratch/pkg"
rm -rf "$scratch/pkg/failoverd_client/v1" "$scratch/pkg/build" "$scratch/pkg/dist" "$scratch/pkg"/*.egg-info
PROTO_DIR="${PROTO_DIR:-$here/../../proto}" "$scratch/pkg/generate.sh"
mkdir -p "$dist"
python3 -m pip wheel --quiet --no-deps --no-build-isolation --no-index --wheel-dir "$dist" "$scratch/pkg" \
  2> >(grep -v "as the 'root' user" >&2)
ls "$dist"/failoverd_client-*.whl
