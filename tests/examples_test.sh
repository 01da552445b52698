#!/usr/bin/env bash
# Runs the Python or Node example, the README's worked example (httpx, the
# openai SDK) against mock OpenAI-compatible upstreams, or the provider error
# corpus through that language's helper, against the real failoverd binary.
# usage: examples_test.sh python|node|python-httpx|node-openai|python-helpers|node-helpers FAILOVERD_BINARY [NODE_APP_DIR]
#        examples_test.sh node-install NODE_APP_DIR   (ctest runs it once, before both Node tests)
set -euo pipefail
lang="$1"
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "$lang" = node-install ]; then
  # The package as a user installs it: packed, and its tarball installed in an
  # app of its own. A separate step so that two Node tests never see one
  # half-installed node_modules.
  app="$2"
  rm -rf "$app" && mkdir -p "$app"
  echo '{"name": "failoverd-examples-app", "version": "0.0.0", "private": true}' >"$app/package.json"
  tarball=$("$root/client/node/pack.sh" "$app")
  (cd "$app" && npm install --no-audit --no-fund --loglevel=error "$tarball" openai@7.60.0 >/dev/null)
  exit 0
fi
failoverd="$2"
work=$(mktemp -d)
pid=""
mock=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  [ -n "$mock" ] && kill "$mock" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
config=()
case "$lang" in python-httpx|node-openai)
  # Two OpenAI-compatible upstreams, the first overloaded: the example must be
  # served by the second, with the first's 503 classified from its body.
  coproc MOCK { exec /usr/bin/python3 "$root/tests/support/mock_openai.py"; }
  mock=$MOCK_PID
  read -r mock_port <&"${MOCK[0]}"
  mkdir -p "$work/config"
  cat >"$work/config/chat.yaml" <<YAML
targets:
  - name: busy-provider
    upstream_model: big-model
    labels: {base_url: "http://127.0.0.1:$mock_port/overloaded/v1"}
  - name: spare-provider
    upstream_model: small-model
    labels: {base_url: "http://127.0.0.1:$mock_port/ok/v1"}
chains:
  - name: assistant-llm
    targets: [busy-provider, spare-provider]
YAML
  config=(--config "$work/config")
esac
"$failoverd" --listen 127.0.0.1:0 --port-file "$work/port" --data-dir "$work/data" --metrics-listen "" \
  "${config[@]}" 2> "$work/failoverd.log" &
pid=$!
for _ in $(seq 1 200); do [ -s "$work/port" ] && break; sleep 0.05; done
[ -s "$work/port" ] || { cat "$work/failoverd.log"; exit 1; }
server="127.0.0.1:$(cat "$work/port")"

# The README's worked example is the tested file's code: its block must be a
# run of the file's lines, word for word.
readme_shows() {
  /usr/bin/python3 - "$root/README.md" "$1" <<'PY'
import re, sys
readme, path = open(sys.argv[1]).read(), sys.argv[2]
name = path.split("/examples/", 1)[1]
m = re.search(r"<!-- worked example: examples/" + re.escape(name) + r" -->\n```\w*\n(.*?)```", readme, re.S)
if not m:
    sys.exit(f"README.md has no worked example for examples/{name}")
if m.group(1) not in open(path).read():
    sys.exit(f"README.md's worked example differs from examples/{name}")
PY
}
case "$lang" in
  python|python-helpers|python-httpx)
    # The package as a user installs it: its wheel.
    PATH="/usr/bin:$PATH" "$root/client/python/build_wheel.sh" "$work/dist" >/dev/null
    /usr/bin/python3 -m pip install --quiet --no-deps --no-index --target "$work/site" "$work"/dist/*.whl \
      2> >(grep -v "as the 'root' user" >&2)
    if [ "$lang" = python ]; then
      PYTHONPATH="$work/site" /usr/bin/python3 "$root/examples/python/demo.py" --server "$server"
    elif [ "$lang" = python-httpx ]; then
      out=$(PYTHONPATH="$work/site" /usr/bin/python3 "$root/examples/python/httpx_chat.py" --server "$server" 2>&1)
      echo "$out"
      grep -q "^  busy-provider: OVERLOADED -> TRY_NEXT$" <<<"$out"
      grep -q "^spare-provider: hello from small-model$" <<<"$out"
      readme_shows "$root/examples/python/httpx_chat.py"
    else
      PYTHONPATH="$work/site" /usr/bin/python3 "$root/tests/client_helpers/corpus_test.py" --server "$server"
    fi
    ;;
  node|node-helpers|node-openai)
    export NODE_PATH="$3/node_modules"  # where node-install put the package
    if [ "$lang" = node-openai ]; then
      out=$(node "$root/examples/node/openai_chat.js" --server "$server" 2>&1)
      echo "$out"
      grep -q "^  busy-provider: FAILURE_REASON_OVERLOADED -> VERDICT_TRY_NEXT$" <<<"$out"
      grep -q "^spare-provider: hello from small-model$" <<<"$out"
      readme_shows "$root/examples/node/openai_chat.js"
    elif [ "$lang" = node ]; then
      node "$root/examples/node/demo.js" --server "$server"
    else
      node "$root/tests/client_helpers/corpus_test.js" --server "$server"
    fi
    ;;
esac
