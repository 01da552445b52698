"""The provider error corpus through the Python helper and a real failoverd.

    corpus_test.py --server HOST:PORT

Each raw reply of tests/data/provider_errors.json goes through
failure_from_response, is reported on its own chain, and must get the reason,
verdict, counted flag, health and hold the corpus gives. Exits non-zero on
any difference, naming the case.
"""
import argparse
import email.utils
import json
import os
import re
import sys
import time
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")

import grpc  # noqa: E402
from failoverd_client import failure_from_response  # noqa: E402
from failoverd_client.v1 import admin_pb2, admin_pb2_grpc, decision_pb2, decision_pb2_grpc, types_pb2  # noqa: E402

UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}


def seconds(text):
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", text)
    return int(m.group(1)) * UNITS[m.group(2)]


def render(value, now):
    m = re.search(r"\{\{now\+(\w+):(\w+)\}\}", value)
    if not m:
        return value
    at = now + seconds(m.group(1))
    fmt = m.group(2)
    if fmt == "http":
        text = email.utils.formatdate(at, usegmt=True)
    elif fmt == "rfc3339":
        text = datetime.fromtimestamp(int(at), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    else:
        text = str(int(at * 1000))
    return value[:m.start()] + text + value[m.end():]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    args = parser.parse_args()
    channel = grpc.insecure_channel(args.server)
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    decide = decision_pb2_grpc.DecisionServiceStub(channel)
    with open(os.path.join(ROOT, "tests", "data", "provider_errors.json")) as f:
        cases = json.load(f)["cases"]
    now = time.time()
    request = admin_pb2.ApplyRequest()
    for c in cases:
        request.targets.add(name=c["name"] + "-a")
        request.targets.add(name=c["name"] + "-b")
        request.chains.add(name=c["name"], targets=[c["name"] + "-a", c["name"] + "-b"])
    admin.Apply(request)
    problems = []
    for c in cases:
        headers = [(k, render(v, now)) for k, v in c["headers"].items()]
        body = c["body_text"] if "body_text" in c else json.dumps(c["body"])
        plan = decide.PickTarget(decision_pb2.PickTargetRequest(chain=c["name"]))
        report = decision_pb2.ReportOutcomeRequest(decision_id=plan.decision_id, target=c["name"] + "-a")
        report.failure.CopyFrom(failure_from_response(c["status"], headers, body))
        r = decide.ReportOutcome(report)
        want = c["expect"]
        got = {
            "reason": decision_pb2.FailureReason.Name(r.reason)[len("FAILURE_REASON_"):].lower(),
            "verdict": decision_pb2.Verdict.Name(r.verdict)[len("VERDICT_"):],
            "counted": r.counted,
            "health": types_pb2.HealthState.Name(r.target_health)[len("HEALTH_STATE_"):],
        }
        for key, value in got.items():
            if value != want[key]:
                problems.append(f"{c['name']}: {key} is {value}, want {want[key]}")
        status = admin.GetTarget(admin_pb2.GetTargetRequest(name=c["name"] + "-a")).status
        if "hold" in want:
            held = status.held_until.seconds - now
            if abs(held - seconds(want["hold"])) > 3:
                problems.append(f"{c['name']}: held {held:.0f}s, want {want['hold']}")
        if "down_for" in want and "rate limited until its limit resets in" not in status.reason:
            problems.append(f"{c['name']}: reason {status.reason!r} does not say it is down until the reset")
    for p in problems:
        print(p)
    print(f"{len(cases)} cases, {len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
