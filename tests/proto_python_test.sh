#!/usr/bin/env bash
# The API contract compiles for Python (grpc_python_plugin) and the generated
# stubs import under Debian's python3-grpcio and expose every service.
set -euo pipefail
proto_dir="$1"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
protoc -I "$proto_dir" --python_out="$out" --grpc_out="$out" \
  --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" \
  "$proto_dir"/failover/v1/*.proto
touch "$out/failover/__init__.py" "$out/failover/v1/__init__.py"
PYTHONPATH="$out" /usr/bin/python3 - <<'PY'
from failover.v1 import decision_pb2_grpc, admin_pb2_grpc, decision_pb2, admin_pb2
for name in ("PickTarget", "ReportOutcome", "Probe", "WatchEvents"):
    assert name in decision_pb2.DESCRIPTOR.services_by_name["DecisionService"].methods_by_name, name
admin = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].methods_by_name
for name in ("Apply", "GetChain", "ListChains", "DeleteChain", "GetTarget", "ListTargets",
             "DeleteTarget", "PinChain", "UnpinChain", "TriggerFailover", "CancelFailover",
             "SetTargetEnabled", "ProbeNow", "ListEvents", "GetStatus"):
    assert name in admin, name
assert hasattr(decision_pb2_grpc, "DecisionServiceStub")
assert hasattr(admin_pb2_grpc, "AdminServiceStub")
print("python stubs OK")
PY
