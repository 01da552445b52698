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
tarball=$("$root/client/node/pack.sh" "$work")
listing=$(tar tzf "$tarball")
for must in package/LICENSE package/README.md package/index.d.ts package/proto/failover/v1/decision.proto; do
  grep -qx "$must" <<<"$listing" || { echo "the package lacks $must" >&2; echo "$listing" >&2; exit 1; }
done
mkdir "$work/app"
cp "$root/tests/node_client/package.json" "$root/tests/node_client/test.js" "$root/tests/node_client/types_check.ts" \
  "$work/app/"
cd "$work/app"
npm install --no-audit --no-fund --loglevel=error "$tarball" > /dev/null
npx --no-install tsc --strict --noEmit --module commonjs --target es2020 --types node types_check.ts
# Its data dirs go under $work, which goes with the trap.
mkdir -p "$work/tmp"
TMPDIR="$work/tmp" FAILOVERD_BINARY="$failoverd" node --test test.js
