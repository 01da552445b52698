#!/usr/bin/env bash
# Runs the Python or Node example, or the provider error corpus through that
# language's helper, against the real failoverd binary.
# usage: examples_test.sh python|node|python-helpers|node-helpers FAILOVERD_BINARY
set -euo pipefail
lang="$1"
failoverd="$2"
root="$(cd "$(dirname "$0")/.." && pwd)"
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
  python)
    "$root/examples/python/gen_stubs.sh"
    /usr/bin/python3 "$root/examples/python/demo.py" --server "$server"
    ;;
  python-helpers)
    # Its own stubs dir: the example may be generating ./gen at the same time.
    "$root/examples/python/gen_stubs.sh" "$work/gen"
    FAILOVER_PY_GEN="$work/gen" /usr/bin/python3 "$root/tests/client_helpers/corpus_test.py" --server "$server"
    ;;
  node|node-helpers)
    # Installs the two pinned packages from npm on first use.
    (cd "$root/examples/node" && { [ -d node_modules/@grpc/grpc-js ] || npm install --no-audit --no-fund --loglevel=error; })
    if [ "$lang" = node ]; then
      node "$root/examples/node/demo.js" --server "$server"
    else
      node "$root/tests/client_helpers/corpus_test.js" --server "$server"
    fi
    ;;
esac
