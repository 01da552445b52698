#!/usr/bin/env bash
# Builds the Python package's wheel (client/python) with Debian's pip, installs
# that wheel alone into a fresh virtualenv (no protoc, no repository on the
# path: it carries its generated stubs), checks it with pyflakes, and runs its
# tests against the real failoverd.   usage: python_client_test.sh FAILOVERD_BINARY
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
failoverd="$(realpath "$1")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PATH="/usr/bin:$PATH" "$root/client/python/build_wheel.sh" "$work/dist" >/dev/null
wheel=$(ls "$work"/dist/failoverd_client-*.whl)
listing=$(unzip -l "$wheel")
for must in failoverd_client/v1/decision_pb2.py failoverd_client/v1/decision_pb2.pyi failoverd_client/py.typed \
    failoverd_client-0.1.0.dist-info/LICENSE; do
  grep -q " $must\$" <<<"$listing" || { echo "the wheel lacks $must" >&2; echo "$listing" >&2; exit 1; }
done
if grep -qE " failover/" <<<"$listing"; then echo "the wheel owns a top-level failover package" >&2; exit 1; fi
# grpcio and protobuf come from Debian (the system site); the package only from its wheel.
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --no-deps --no-index "$wheel" 2> >(grep -v "as the 'root' user" >&2)
/usr/bin/python3 -m pyflakes "$root/client/python/failoverd_client"/*.py "$root/tests/python_client"
# Its data dirs go under $work, which goes with the trap.
mkdir -p "$work/tmp"
cd "$work" && TMPDIR="$work/tmp" "$work/venv/bin/python" "$root/tests/python_client/test_client.py" "$failoverd"
