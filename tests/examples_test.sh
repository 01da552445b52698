#!/usr/bin/env bash
# Runs the Python or Node example, or the provider error corpus through that
# language's helper, against the real failoverd binary.
# usage: examples_test.sh python|node|python-helpers|node-helpers FAILOVERD_BINARY
#        examples_test.sh node-install   (ctest runs it once, before both Node tests)
set -euo pipefail
lang="$1"
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "$lang" = node-install ]; then
  # Installs the two pinned packages from npm on first use. A separate step so
  # that two Node tests never see one half-installed node_modules.
  cd "$root/examples/node"
  [ -f node_modules/@grpc/grpc-js/package.json ] && [ -f node_modules/@grpc/proto-loader/package.json ] ||
    npm ci --no-audit --no-fund --loglevel=error
  exit 0
fi
failoverd="$2"
work=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
"$failoverd" --listen 127.0.0.1:0 --port-file "$work/port" --data-dir "$work/data" --metrics-listen "" \
  2> "$work/failoverd.log" &
pid=$!
for _ in $(seq 1 200); do [ -s "$work/port" ] && break; sleep 0.05; done
[ -s "$work/port" ] || { cat "$work/failoverd.log"; exit 1; }
server="127.0.0.1:$(cat "$work/port")"
case "$lang" in
  python|python-helpers)
    # The package as a user installs it: its wheel.
    PATH="/usr/bin:$PATH" "$root/client/python/build_wheel.sh" "$work/dist" >/dev/null
    /usr/bin/python3 -m pip install --quiet --no-deps --no-index --target "$work/site" "$work"/dist/*.whl \
      2> >(grep -v "as the 'root' user" >&2)
    if [ "$lang" = python ]; then
      PYTHONPATH="$work/site" /usr/bin/python3 "$root/examples/python/demo.py" --server "$server"
    else
      PYTHONPATH="$work/site" /usr/bin/python3 "$root/tests/client_helpers/corpus_test.py" --server "$server"
    fi
    ;;
  node|node-helpers)
    if [ "$lang" = node ]; then
      node "$root/examples/node/demo.js" --server "$server"
    else
      node "$root/tests/client_helpers/corpus_test.js" --server "$server"
    fi
    ;;
esac
