#!/usr/bin/env bash
# The README's quick start, run as written: failoverd started the way
# scripts/start starts it (its data dir in a temp dir, on a free port), then
# the quick start's commands verbatim (the port swapped in), then what the
# README says they show.
# usage: quickstart_test.sh BUILD_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2> /dev/null && wait "$pid" 2> /dev/null
  jobs -p | xargs -r kill 2> /dev/null || true
  # The quick start's watch outlives its shell (it reconnects for ever).
  [ -s "$work/watch.pid" ] && kill "$(cat "$work/watch.pid")" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$root"

# The README opens with the two commands CI relies on.
first_blocks="$(awk '/^```sh$/ {inblock=1; next} /^```$/ {inblock=0; n++; if (n==2) exit} inblock' README.md)"
[ "$first_blocks" = $'scripts/start\nscripts/test' ] || { echo "README does not open with scripts/start and scripts/test"; exit 1; }

# failoverd as scripts/start runs it.
start_line="$(grep '^exec build/server/failoverd' scripts/start)"
[ -n "$start_line" ] || { echo "scripts/start has no exec line"; exit 1; }
args="${start_line#exec build/server/failoverd }"
args="${args%\"\$@\"}"
args="${args//.\/data/$work/data}"
# shellcheck disable=SC2086
"$build/server/failoverd" $args --listen 127.0.0.1:0 --port-file "$work/port" --metrics-listen "" 2> "$work/log" &
pid=$!
for _ in $(seq 1 200); do [ -s "$work/port" ] && break; sleep 0.05; done
[ -s "$work/port" ] || { cat "$work/log"; exit 1; }
port="$(cat "$work/port")"

# The quick start's block, verbatim but for the port and the build dir.
awk '/^## Quick start with failoverctl/ {section=1} section && /^```sh$/ {inblock=1; next} inblock && /^```$/ {exit} inblock' \
  README.md > "$work/quickstart.sh"
[ -s "$work/quickstart.sh" ] || { echo "no quick start block in README"; exit 1; }
sed -i "s/127\.0\.0\.1:50051/127.0.0.1:$port/; s#\$PWD/build/client#$build/client#; s#failoverctl watch --chain assistant-llm &#failoverctl watch --chain assistant-llm > $work/watch.out \& echo \$! > $work/watch.pid#" \
  "$work/quickstart.sh"
echo "--- running the quick start:"; cat "$work/quickstart.sh"; echo "---"
bash -e "$work/quickstart.sh" > "$work/out" 2>&1 || { cat "$work/out"; echo "the quick start failed"; exit 1; }
cat "$work/out"

grep -q "dry run: nothing was saved" "$work/out" || { echo "no dry run"; exit 1; }
grep -Eq "assistant-llm +fallback +gemma-local" "$work/out" || { echo "status does not show the fallback"; exit 1; }
for _ in $(seq 1 100); do grep -q "chain assistant-llm: argus-llm -> gemma-local (trip" "$work/watch.out" && break; sleep 0.05; done
grep -q "target argus-llm: unknown -> down" "$work/watch.out" || { cat "$work/watch.out"; echo "watch missed the trip"; exit 1; }
grep -q "chain assistant-llm: argus-llm -> gemma-local (trip" "$work/watch.out" ||
  { cat "$work/watch.out"; echo "watch missed the switch"; exit 1; }
kill "$pid"; wait "$pid" 2> /dev/null || true; pid=""

# The status page's command, as the README gives it: scripts/start with
# failoverd's flags after it (the port swapped for a free one).
page_line="$(awk '/^## Status page and HTTP\/JSON/ {section=1} section && /^```sh$/ {getline; print; exit}' README.md)"
page_command="${page_line%%#*}"
case "$page_command" in
  "scripts/start "*) ;;
  *) echo "the status page's command is not scripts/start with flags: $page_line"; exit 1 ;;
esac
page_args="${page_command#scripts/start }"
page_args="${page_args//127.0.0.1:8080/127.0.0.1:0}"
# shellcheck disable=SC2086
"$build/server/failoverd" $args $page_args --listen 127.0.0.1:0 --metrics-listen "" 2> "$work/page.log" &
pid=$!
for _ in $(seq 1 200); do grep -q "http_port=" "$work/page.log" && break; sleep 0.05; done
http_port="$(grep -o 'http_port=[0-9]*' "$work/page.log" | cut -d= -f2)"
[ -n "$http_port" ] || { cat "$work/page.log"; echo "the status page's command opened no HTTP port"; exit 1; }
curl -s "http://127.0.0.1:$http_port/" | grep -q "<title>failoverd" || { echo "no status page"; exit 1; }

# scripts/start needs none of the tests' packages: its deps leave them out, and
# its configure works with GTest and Google Benchmark missing.
run_deps="$(scripts/deps --run --list)"
for pkg in chromium clang etcd-server libgtest-dev libbenchmark-dev; do
  if grep -qx "$pkg" <<< "$run_deps"; then echo "scripts/start installs $pkg"; exit 1; fi
done
start_configure="$(grep -o 'scripts/build -D[^#]*' scripts/start)"
[ -n "$start_configure" ] || { echo "scripts/start does not configure a build"; exit 1; }
# shellcheck disable=SC2086
cmake -S . -B "$work/start-build" -G Ninja ${start_configure#scripts/build } -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
ninja -C "$work/start-build" -t targets all > "$work/targets"
for target in server/failoverd client/failoverctl; do
  grep -q "^$target:" "$work/targets" || { echo "scripts/start's configure has no $target"; exit 1; }
done
echo "the quick start and the status page's command work as written; starting needs no test package"
