#!/usr/bin/env bash
# Under a low descriptor limit (ulimit -n 1024) an unset --max-watchers is
# sized to what the limit holds, without a warning; one set above it is warned
# about.   usage: descriptor_limit_test.sh FAILOVERD_BINARY
set -euo pipefail
failoverd="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start() {  # log file, extra flags...
  local log="$1"; shift
  rm -f "$work/port"
  (ulimit -n 1024 && exec "$failoverd" --listen 127.0.0.1:0 --port-file "$work/port" --data-dir "$work/data-$log" \
    --metrics-listen "" "$@" 2>"$work/$log") &
  local pid=$!
  for _ in $(seq 200); do [ -s "$work/port" ] && break; sleep 0.05; done
  kill "$pid"; wait "$pid" || true
  [ -s "$work/port" ] || { cat "$work/$log" >&2; exit 1; }
}
start unset
grep -q "max-watchers sized to the descriptor limit.*max_watchers=384" "$work/unset" ||
  { echo "an unset --max-watchers was not sized to the limit:" >&2; cat "$work/unset" >&2; exit 1; }
if grep -q "is low for --max-watchers" "$work/unset"; then
  echo "a default start warned about the descriptor limit:" >&2; cat "$work/unset" >&2; exit 1
fi
start given --max-watchers 5000
grep -q "is low for --max-watchers 5000" "$work/given" ||
  { echo "a --max-watchers the limit cannot hold was not warned about:" >&2; cat "$work/given" >&2; exit 1; }
echo ok
