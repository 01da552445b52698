#!/usr/bin/env bash
# The C++ client as another project gets it: a client-only configure (no
# RocksDB, no server dependencies), `cmake --install` into a temp prefix, then
# tests/cmake_consumer built against the install with find_package and once
# with pkg-config, each run against the real failoverd.
#   usage: cmake_consumer_test.sh FAILOVERD_BINARY
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
failoverd="$1"
work=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CCACHE_NOHASHDIR=1
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)

cmake -S "$root" -B "$work/client-build" "${generator[@]}" -DFAILOVERD_CLIENT_ONLY=ON \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$work/prefix" >"$work/configure.log"
# The server's dependencies were never looked for.
if grep -qiE "rocksdb|prometheus|CLI11" "$work/client-build/CMakeCache.txt"; then
  echo "the client-only configure looked for a server dependency:" >&2
  grep -iE "rocksdb|prometheus|CLI11" "$work/client-build/CMakeCache.txt" >&2
  exit 1
fi
cmake --build "$work/client-build" -j "$(nproc)" >"$work/build.log" || { tail -50 "$work/build.log" >&2; exit 1; }
cmake --install "$work/client-build" >/dev/null
rm -rf "$work/client-build"  # the consumer sees only the install

cmake -S "$root/tests/cmake_consumer" -B "$work/consumer" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" \
  >/dev/null
cmake --build "$work/consumer" >"$work/consumer.log" || { cat "$work/consumer.log" >&2; exit 1; }
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
# shellcheck disable=SC2046  # pkg-config's output is a list of flags
c++ -std=c++17 -o "$work/pkgconfig_caller" "$root/tests/cmake_consumer/caller.cc" \
  $(pkg-config --cflags --libs failoverd-client)

"$failoverd" --listen 127.0.0.1:0 --port-file "$work/port" --data-dir "$work/data" --metrics-listen "" \
  --config "$root/examples/config" 2>"$work/failoverd.log" &
pid=$!
for _ in $(seq 200); do [ -s "$work/port" ] && break; sleep 0.05; done
[ -s "$work/port" ] || { cat "$work/failoverd.log" >&2; exit 1; }
address="127.0.0.1:$(cat "$work/port")"

check() {  # name, expected decided_locally, command...
  local name="$1" local_flag="$2"; shift 2
  local out
  out=$("$@" "$address" assistant-llm argus-llm) || { echo "$name failed: $out" >&2; exit 1; }
  case "$out" in
    "served_by=gemma-local "*"decided_locally=$local_flag "*) echo "$name: $out" ;;
    *) echo "$name: expected gemma-local to serve (decided_locally=$local_flag), got: $out" >&2; exit 1 ;;
  esac
}
check "find_package, failoverd::client" 0 "$work/consumer/remote_caller"
check "find_package, failoverd::client_local" 1 "$work/consumer/local_caller"
check "pkg-config" 0 "$work/pkgconfig_caller"
