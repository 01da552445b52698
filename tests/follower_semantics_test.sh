#!/usr/bin/env bash
# The decision semantics tests, run against a cluster follower (DESIGN 3.12):
# a one-member etcd on loopback, then the integration tests with
# FAILOVERD_TEST_ETCD set, so each starts a leader replica and talks to a
# follower (tests/support/api_test.h).
# Usage: follower_semantics_test.sh <integration_test binary> <gtest filter>
set -euo pipefail
binary="$1"
filter="$2"
if ! command -v etcd > /dev/null; then
  echo "etcd is not installed (scripts/deps installs etcd-server)" >&2
  exit 1
fi
dir="$(mktemp -d)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
client="$(free_port)"
peer="$(free_port)"
etcd --name semantics --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
  --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "semantics=http://127.0.0.1:$peer" --logger zap --log-outputs "$dir/etcd.log" &
etcd_pid=$!
cleanup() {
  kill -9 "$etcd_pid" 2> /dev/null || true
  wait "$etcd_pid" 2> /dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 1 200); do
  ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$client" --command-timeout 1s put /semantics-ready ok > /dev/null 2>&1 && break
  sleep 0.05
done
status=0
FAILOVERD_TEST_ETCD="127.0.0.1:$client" "$binary" --gtest_filter="$filter" --gtest_brief=1 || status=$?
exit "$status"
