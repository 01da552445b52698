"""Runs the decision loop and a watcher against a running failoverd.

    ./gen_stubs.sh && /usr/bin/python3 demo.py --server 127.0.0.1:50051

Creates a demo chain (demo-primary, demo-fallback), serves a request while the
primary is broken, and prints the switch seen by a watcher. Exits non-zero if
anything is not as expected.
"""
import argparse
import sys
import threading

import grpc

sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "gen"))
from failover.v1 import admin_pb2, admin_pb2_grpc, decision_pb2_grpc, types_pb2  # noqa: E402

from failover_client import run_request, watch  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", default="127.0.0.1:50051")
    args = parser.parse_args()
    channel = grpc.insecure_channel(args.server)
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    decide = decision_pb2_grpc.DecisionServiceStub(channel)

    admin.Apply(admin_pb2.ApplyRequest(
        targets=[types_pb2.Target(name="demo-primary"), types_pb2.Target(name="demo-fallback")],
        chains=[types_pb2.Chain(name="demo", targets=["demo-primary", "demo-fallback"])]))

    switches = []
    first_event = threading.Event()

    def watcher():
        for event in watch(decide, chains=["demo"]):
            first_event.set()
            if event.HasField("chain_switched") and event.chain_switched.reason == types_pb2.SWITCH_REASON_TRIP:
                s = event.chain_switched
                switches.append(f"{s.chain}: {s.from_target} -> {s.to_target} ({s.detail})")
                return

    thread = threading.Thread(target=watcher, daemon=True)
    thread.start()
    first_event.wait(10)

    def upstream(attempt):
        if attempt.target == "demo-primary":
            return (False, 500, "primary is down")
        return (True, f"hello from {attempt.upstream_model}")

    target, result = run_request(decide, "demo", upstream)
    print(f"served by {target}: {result}")
    thread.join(10)
    print("watcher saw:", switches[0] if switches else "nothing")
    if target != "demo-fallback" or not switches or "demo-primary -> demo-fallback" not in switches[0]:
        sys.exit(1)


if __name__ == "__main__":
    main()
