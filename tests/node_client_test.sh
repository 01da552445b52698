#!/usr/bin/env bash
# Packs the Node package (client/node) with npm, installs the tarball in a
# temp app as a user would, type-checks a TypeScript caller against its types
# (tsc --strict) and runs its tests against the real failoverd.
# usage: node_client_test.sh FAILOVERD_BINARY
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
failoverd="$(realpath "$1")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Packed from a copy, so the source tree stays clean; copy-protos.js (run by
# npm pack) reads ../../proto from the package's directory.
mkdir -p "$work/client"
cp -r "$root/client/node" "$work/client/node"
rm -rf "$work/client/node/node_modules" "$work/client/node/proto"
ln -s "$root/proto" "$work/proto"
(cd "$work/client/node" && npm pack --pack-destination "$work" --loglevel=error > /dev/null)
mkdir "$work/app"
cp "$root/tests/node_client/package.json" "$root/tests/node_client/test.js" "$root/tests/node_client/types_check.ts" \
  "$work/app/"
cd "$work/app"
npm install --no-audit --no-fund --loglevel=error "$work"/failoverd-client-*.tgz > /dev/null
npx --no-install tsc --strict --noEmit --module commonjs --target es2020 --types node types_check.ts
FAILOVERD_BINARY="$failoverd" node --test test.js
