#!/usr/bin/env bash
# Packs the package into DEST_DIR (default .) from a scratch copy, so this
# directory stays clean; prints the tarball's path. A user's app then runs
#   npm install DEST_DIR/failoverd-client-0.1.0.tgz
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="$(realpath -m "${1:-$here}")"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# copy-protos.js (run by npm pack) reads ../../proto from the package's directory.
mkdir -p "$scratch/client" "$dest"
cp -r "$here" "$scratch/client/node"
rm -rf "$scratch/client/node/node_modules" "$scratch/client/node/proto" "$scratch/client/node"/*.tgz
ln -s "$here/../../proto" "$scratch/proto"
(cd "$scratch/client/node" && npm pack --pack-destination "$dest" --loglevel=error >/dev/null)
ls "$dest"/failoverd-client-*.tgz
