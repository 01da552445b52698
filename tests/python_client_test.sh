#!/usr/bin/env bash
# Builds and installs the Python package (client/python) into a temp dir with
# Debian's pip, checks it with pyflakes, and runs its tests against the real
# failoverd.   usage: python_client_test.sh FAILOVERD_BINARY
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/client/python" "$work/pkg"
rm -rf "$work/pkg/failover" "$work/pkg/build" "$work/pkg"/*.egg-info
PROTO_DIR="$root/proto" "$work/pkg/generate.sh"
/usr/bin/python3 -m pip install --quiet --no-deps --no-build-isolation --no-index --target "$work/site" "$work/pkg" \
  2> >(grep -v "as the 'root' user" >&2)
/usr/bin/python3 -m pyflakes "$work/pkg/failoverd_client" "$root/tests/python_client"
PYTHONPATH="$work/site" /usr/bin/python3 "$root/tests/python_client/test_client.py" "$1"
