"""The decision loop with failoverd_client, and a watcher, against a running failoverd.

    client/python/build_wheel.sh /tmp/dist && pip install /tmp/dist/failoverd_client-*.whl
    python3 demo.py --server 127.0.0.1:50051

Creates a demo chain (demo-primary, demo-fallback), serves a request while the
primary is broken, and prints the switch a watcher saw and the events the
client's hook saw. Exits non-zero if anything is not as expected.
"""
import argparse
import sys
import threading

import grpc
from failoverd_client import AttemptOutcome, Client, failure_from_status
from failoverd_client.v1 import admin_pb2, admin_pb2_grpc, decision_pb2, decision_pb2_grpc, types_pb2


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", default="127.0.0.1:50051")
    args = parser.parse_args()
    channel = grpc.insecure_channel(args.server)
    admin_pb2_grpc.AdminServiceStub(channel).Apply(admin_pb2.ApplyRequest(
        targets=[types_pb2.Target(name="demo-primary"), types_pb2.Target(name="demo-fallback")],
        chains=[types_pb2.Chain(name="demo", targets=["demo-primary", "demo-fallback"])]), timeout=10)

    # A watcher: every event on the chain, live.
    switches, watching = [], threading.Event()
    events = decision_pb2_grpc.DecisionServiceStub(channel).WatchEvents(decision_pb2.WatchEventsRequest(chains=["demo"]))

    def watcher():
        for event in events:
            watching.set()
            if event.HasField("chain_switched") and event.chain_switched.reason == types_pb2.SWITCH_REASON_TRIP:
                s = event.chain_switched
                switches.append(f"{s.chain}: {s.from_target} -> {s.to_target} ({s.detail})")
                return

    thread = threading.Thread(target=watcher, daemon=True)
    thread.start()
    watching.wait(10)

    def attempt(target, ctx):  # one call to the upstream `target` names
        if target.target == "demo-primary":
            return AttemptOutcome(ok=False, failure=failure_from_status(500, "primary is down"))
        return AttemptOutcome(ok=True, response=f"hello from {target.upstream_model}", latency=0.01)

    seen = []
    with Client(args.server, on_event=lambda e: seen.append(f"{e.kind} {e.target} {e.next_target}".strip())) as client:
        result = client.run("demo", attempt, timeout=30)
    print(f"served by {result.served_by}: {result.response}")
    print("the client's hook saw:", "; ".join(seen))
    thread.join(10)
    events.cancel()
    print("watcher saw:", switches[0] if switches else "nothing")
    if (result.served_by != "demo-fallback" or "failover demo-primary demo-fallback" not in seen
            or not switches or "demo-primary -> demo-fallback" not in switches[0]):
        sys.exit(1)


if __name__ == "__main__":
    main()
