"""The Python package (client/python) against the real failoverd: the loop,
tokens, admin refusals followed, failoverd killed mid-run and restarted, a
hung failoverd costing one deadline, and the asyncio form.

usage: test_client.py FAILOVERD_BINARY   (with the installed package on PYTHONPATH)
"""
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc
from failover.v1 import admin_pb2, admin_pb2_grpc, decision_pb2, types_pb2
from failoverd_client import AttemptOutcome, Client, failure_from_status
from failoverd_client.aio import AsyncClient

BINARY = sys.argv.pop(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def eventually(check, timeout=10.0):
    """Polls `check` until it holds or `timeout` passes: a condition with a deadline, never a fixed wait."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return check()


def process_state(pid):
    """The state letter of /proc/PID/stat ("T" once stopped)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


class Failoverd:
    def __init__(self, data_dir, port, extra=()):
        self.address = f"127.0.0.1:{port}"
        port_file = os.path.join(data_dir, "port")
        if os.path.exists(port_file):
            os.remove(port_file)
        self.proc = subprocess.Popen([BINARY, "--listen", self.address, "--port-file", port_file, "--data-dir",
                                      os.path.join(data_dir, "data"), "--metrics-listen", "", *extra],
                                     stderr=subprocess.DEVNULL)
        assert eventually(lambda: os.path.exists(port_file) and os.path.getsize(port_file) > 0), "failoverd did not start"

    def stop(self, sig=signal.SIGKILL):
        self.proc.send_signal(sig)
        self.proc.wait(20)


def configure(address, metadata=()):
    with grpc.insecure_channel(address) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        admin.Apply(admin_pb2.ApplyRequest(
            targets=[types_pb2.Target(name="a"), types_pb2.Target(name="b")],
            chains=[types_pb2.Chain(name="ch", targets=["a", "b"])]), metadata=metadata, timeout=10)


def admin_call(address, method, request, metadata=()):
    with grpc.insecure_channel(address) as channel:
        return getattr(admin_pb2_grpc.AdminServiceStub(channel), method)(request, metadata=metadata, timeout=10)


def ok_on(*targets):
    def attempt(a, ctx):
        if a.target in targets:
            return AttemptOutcome(ok=True, response=f"from {a.target}", latency=0.002)
        return AttemptOutcome(ok=False, failure=failure_from_status(500, "upstream broke"))
    return attempt


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.port = free_port()
        self.server = Failoverd(self.dir, self.port)
        configure(self.server.address)

    def tearDown(self):
        if self.server.proc.poll() is None:
            self.server.proc.send_signal(signal.SIGCONT)
            self.server.stop()

    def test_the_loop_follows_failoverds_verdicts(self):
        with Client(self.server.address) as client:
            r = client.run("ch", ok_on("b"))
            self.assertTrue(r.ok, r.error)
            self.assertEqual(r.served_by, "b")
            self.assertEqual(r.response, "from b")
            self.assertEqual([a.target for a in r.attempts], ["a", "b"])
            self.assertEqual(r.attempts[0].verdict, decision_pb2.VERDICT_TRY_NEXT)
            self.assertEqual(r.attempts[0].reason, decision_pb2.FAILURE_REASON_SERVER_ERROR)
            self.assertFalse(r.fail_static)
            # a tripped (trip.errors 1): the next plan starts with b.
            self.assertEqual(client.run("ch", ok_on("a", "b")).served_by, "b")

    def test_admin_refusals_are_followed_not_taken_for_an_outage(self):
        for t in ("a", "b"):
            admin_call(self.server.address, "TriggerFailover", admin_pb2.TriggerFailoverRequest(target=t))
        calls = []
        with Client(self.server.address) as client:
            r = client.run("ch", lambda a, ctx: calls.append(a.target) or AttemptOutcome(ok=True))
            self.assertFalse(r.ok)
            self.assertFalse(r.fail_static)
            self.assertEqual(calls, [], "traffic went to targets an admin took out")
            self.assertIn("no target", r.error)

    def test_killed_mid_run_serves_from_the_last_plan_and_sends_the_backlog_after_a_restart(self):
        with Client(self.server.address, timeout=2) as client:
            self.assertEqual(client.run("ch", ok_on("b")).served_by, "b")
            self.server.stop(signal.SIGKILL)
            for _ in range(3):
                r = client.run("ch", ok_on("b"))
                self.assertTrue(r.ok, r.error)
                self.assertTrue(r.fail_static)
                self.assertEqual(r.served_by, "b")  # the last plan: b first while a is down
            self.assertGreater(client.buffered_reports, 0)
            self.server = Failoverd(self.dir, self.port)
            self.assertTrue(eventually(lambda: client.buffered_reports == 0), "the backlog was not sent")
            self.assertTrue(eventually(lambda: not client.run("ch", ok_on("b")).fail_static))
            self.assertEqual(client.dropped_reports, 0)

    def test_a_hung_failoverd_costs_one_deadline_then_nothing(self):
        with Client(self.server.address, timeout=1, down_backoff=0.1, max_down_backoff=0.2) as client:
            self.assertFalse(client.run("ch", ok_on("a")).fail_static)
            self.server.proc.send_signal(signal.SIGSTOP)
            self.assertTrue(eventually(lambda: process_state(self.server.proc.pid) == "T"))  # asynchronous
            self.assertTrue(client.run("ch", ok_on("a")).fail_static)  # waits out one deadline
            slowest, start = 0.0, time.monotonic()
            while time.monotonic() - start < 0.8:  # several times the backoff
                t0 = time.monotonic()
                r = client.run("ch", ok_on("a"))
                slowest = max(slowest, time.monotonic() - t0)
                self.assertTrue(r.ok and r.fail_static)
            self.assertLess(slowest, 0.5, "a request waited on the hung failoverd")
            self.server.proc.send_signal(signal.SIGCONT)
            self.assertTrue(eventually(lambda: not client.run("ch", ok_on("a")).fail_static))

    def test_a_cancelled_request_and_a_past_deadline_stop_the_loop(self):
        with Client(self.server.address) as client:
            cancelled = threading.Event()
            cancelled.set()
            r = client.run("ch", ok_on("a"), cancelled=cancelled)
            self.assertFalse(r.ok)
            self.assertIn("cancelled", r.error)
            self.assertEqual(r.attempts, [])
            r = client.run("ch", ok_on("a"), timeout=0)
            self.assertFalse(r.ok)
            self.assertIn("deadline", r.error)
            self.assertEqual(r.attempts, [])

    def test_asyncio_form(self):
        async def main():
            client = AsyncClient(self.server.address, timeout=2)

            async def attempt(a, ctx):
                return ok_on("b")(a, ctx)

            try:
                r = await client.run("ch", attempt)
                self.assertTrue(r.ok, r.error)
                self.assertEqual(r.served_by, "b")
                self.server.stop(signal.SIGKILL)
                r = await client.run("ch", attempt)
                self.assertTrue(r.ok and r.fail_static, r.error)
            finally:
                await client.close()

        asyncio.run(main())


class TokenTest(unittest.TestCase):
    def test_tokens_are_sent(self):
        d = tempfile.mkdtemp()
        tokens = os.path.join(d, "tokens")
        with open(tokens, "w") as f:
            f.write("admin ops admin-secret\ndecide gw decide-secret\n")
        server = Failoverd(d, free_port(), ["--tokens-file", tokens])
        try:
            configure(server.address, metadata=(("authorization", "Bearer admin-secret"),))
            with Client(server.address) as anonymous:
                r = anonymous.run("ch", ok_on("a"))
                self.assertFalse(r.ok)
                self.assertFalse(r.fail_static)  # refused, not unreachable
            with Client(server.address, token="decide-secret") as client:
                self.assertTrue(client.run("ch", ok_on("a")).ok)
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
