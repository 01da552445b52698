"""The Python package (client/python) against the real failoverd: the loop,
tokens, admin refusals followed, failoverd killed mid-run and restarted, a
hung failoverd costing one deadline, the asyncio form, typed errors, enums and
event hooks.

usage: test_client.py FAILOVERD_BINARY   (with the installed package on PYTHONPATH)
"""
import asyncio
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc
from failoverd_client import (AttemptOutcome, Client, FailoverdError, FailoverdUnreachable, Reason, Unauthenticated,
                              UnknownChain, Verdict, failure_from_exception, failure_from_response,
                              failure_from_status)
from failoverd_client.aio import AsyncClient
from failoverd_client.v1 import admin_pb2, admin_pb2_grpc, decision_pb2, decision_pb2_grpc, types_pb2

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
            self.assertIs(r.attempts[0].verdict, Verdict.TRY_NEXT)
            self.assertIs(r.attempts[0].reason, Reason.SERVER_ERROR)
            self.assertIs(r.attempts[1].verdict, Verdict.DONE)
            self.assertFalse(r.fail_static)
            # a tripped (trip.errors 1): the next plan starts with b.
            self.assertEqual(client.run("ch", ok_on("a", "b")).served_by, "b")

    def test_verdicts_and_reasons_name_every_value_of_the_api(self):
        for enum, proto, prefix in ((Verdict, decision_pb2.Verdict, "VERDICT_"),
                                    (Reason, decision_pb2.FailureReason, "FAILURE_REASON_")):
            self.assertEqual({prefix + m.name: m.value for m in enum}, dict(proto.items()))

    def test_the_hook_sees_the_failover_the_trip_and_a_fail_static_request(self):
        events = []
        with Client(self.server.address, timeout=2, on_event=events.append) as client:
            self.assertTrue(client.run("ch", ok_on("b")).ok)
            self.assertEqual([(e.kind, e.target, e.next_target, e.reason) for e in events],
                             [("target_down", "a", "", Reason.SERVER_ERROR),
                              ("failover", "a", "b", Reason.SERVER_ERROR)])
            self.server.stop(signal.SIGKILL)
            del events[:]
            self.assertTrue(client.run("ch", ok_on("b")).fail_static)
            self.assertEqual([e.kind for e in events], ["fail_static"])
            self.assertIn("UNAVAILABLE", events[0].message)

    def test_a_hook_that_raises_does_not_break_the_request(self):
        def broken(event):
            raise RuntimeError("the caller's bug")
        with Client(self.server.address, on_event=broken) as client:
            with self.assertLogs("failoverd_client", level="ERROR") as logged:
                self.assertEqual(client.run("ch", ok_on("b")).served_by, "b")
            self.assertIn("the caller's bug", "\n".join(logged.output))

    def test_an_unknown_chain_is_raised_typed(self):
        with Client(self.server.address) as client:
            with self.assertRaises(UnknownChain) as raised:
                client.run("no-such-chain", ok_on("a"))
            self.assertEqual(raised.exception.chain, "no-such-chain")
            self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)
            with self.assertRaises(FailoverdError) as raised:
                client.run("Bad Name!", ok_on("a"))
            self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("chain", str(raised.exception))

    def test_an_unreachable_failoverd_without_a_plan_names_the_address_and_cause(self):
        address = f"127.0.0.1:{free_port()}"
        with Client(address, timeout=2) as client:
            with self.assertRaises(FailoverdUnreachable) as raised:
                client.run("ch", ok_on("a"))
            self.assertEqual(raised.exception.address, address)
            self.assertIn(address, str(raised.exception))
            self.assertIn("UNAVAILABLE", raised.exception.cause)
            with self.assertRaises(FailoverdUnreachable):  # also while backing off, without a call
                client.run("ch", ok_on("a"))

    def test_the_asyncio_form_raises_the_same_errors(self):
        async def main():
            async with AsyncClient(self.server.address) as client:
                async def attempt(a, ctx):
                    return ok_on("a")(a, ctx)
                with self.assertRaises(UnknownChain):
                    await client.run("no-such-chain", attempt)
            async with AsyncClient(f"127.0.0.1:{free_port()}", timeout=2) as client:
                with self.assertRaises(FailoverdUnreachable):
                    await client.run("ch", attempt)
        asyncio.run(main())

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
        # The call timeout is far above what a request may take when it does
        # not wait on failoverd, even on a loaded machine.
        with Client(self.server.address, timeout=5, down_backoff=0.1, max_down_backoff=0.2) as client:
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
            self.assertLess(slowest, 2.5, "a request waited for the deadline on the hung failoverd")
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

    def test_close_sends_what_is_buffered(self):
        # A short-lived process: its successes wait in the backlog (flushed every
        # minute here) and must reach failoverd when it closes the client.
        client = Client(self.server.address, flush_interval=60)
        self.assertTrue(client.run("ch", ok_on("a")).ok)
        self.assertGreater(client.buffered_reports, 0)
        client.close()
        self.assertEqual(client.buffered_reports, 0)
        self.assertEqual(client.dropped_reports, 0)
        view = admin_call(self.server.address, "GetTarget", admin_pb2.GetTargetRequest(name="a"))
        self.assertEqual(view.status.health, types_pb2.HEALTH_STATE_HEALTHY, "the success never reached failoverd")

    def test_close_gives_up_on_an_absent_failoverd_within_its_bound(self):
        client = Client(self.server.address, flush_interval=60)
        self.assertTrue(client.run("ch", ok_on("a")).ok)
        self.server.stop(signal.SIGKILL)
        start = time.monotonic()
        client.close(flush_timeout=0.5)
        self.assertLess(time.monotonic() - start, 5.0)
        self.assertGreater(client.dropped_reports, 0)

    def test_asyncio_close_sends_what_is_buffered(self):
        async def main():
            async with AsyncClient(self.server.address, flush_interval=60) as client:
                async def attempt(a, ctx):
                    return ok_on("b")(a, ctx)
                r = await client.run("ch", attempt)
                self.assertTrue(r.ok, r.error)
        asyncio.run(main())
        view = admin_call(self.server.address, "GetTarget", admin_pb2.GetTargetRequest(name="b"))
        self.assertEqual(view.status.health, types_pb2.HEALTH_STATE_HEALTHY, "the success never reached failoverd")

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


class MockUpstreams:
    """Upstreams that fail the way real ones do, on loopback: a port nobody
    listens on, a name that does not resolve, a peer that resets, one that
    accepts and never answers, and a plain-text server behind an https URL."""

    def __init__(self):
        self.refused = f"http://127.0.0.1:{free_port()}/v1/chat"
        self.dns = "http://failoverd-test-upstream.invalid/v1/chat"
        self._sockets = []
        self._stop = threading.Event()
        self.reset = f"http://127.0.0.1:{self._serve(self._reset)}/v1/chat"
        self.silent = f"http://127.0.0.1:{self._serve(self._silent)}/v1/chat"
        self.not_tls = f"https://127.0.0.1:{self._serve(self._plain)}/v1/chat"

    def _serve(self, handle):
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        server.settimeout(0.2)
        self._sockets.append(server)

        def loop():
            while not self._stop.is_set():
                try:
                    conn, _ = server.accept()
                except OSError:
                    continue
                handle(conn)
        threading.Thread(target=loop, daemon=True).start()
        return server.getsockname()[1]

    def _reset(self, conn):
        try:
            conn.recv(4096)  # the request, then a reset instead of a reply
        except OSError:
            pass
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    def _silent(self, conn):
        self._sockets.append(conn)  # held open, never answered

    def _plain(self, conn):
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        except OSError:
            pass
        self._sockets.append(conn)

    def close(self):
        self._stop.set()
        for s in self._sockets:
            s.close()


def _with_requests(url, timeout):
    import requests
    requests.get(url, timeout=timeout)


def _with_httpx(url, timeout):
    import httpx
    httpx.get(url, timeout=timeout)


def _with_urllib(url, timeout):
    import urllib.request
    urllib.request.urlopen(url, timeout=timeout)


def _with_aiohttp(url, timeout):
    import aiohttp

    async def get():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(url) as resp:
                await resp.read()
    asyncio.run(get())


class LibraryErrorsTest(unittest.TestCase):
    """What requests, httpx, urllib and aiohttp raise for a dead upstream becomes
    the failure failoverd needs to fail over: each case reaches the next target."""

    LIBRARIES = {"requests": _with_requests, "httpx": _with_httpx, "urllib": _with_urllib, "aiohttp": _with_aiohttp}
    CASES = {"refused": decision_pb2.FAILURE_REASON_NETWORK, "dns": decision_pb2.FAILURE_REASON_NETWORK,
             "reset": decision_pb2.FAILURE_REASON_NETWORK, "silent": decision_pb2.FAILURE_REASON_TIMEOUT,
             "not_tls": decision_pb2.FAILURE_REASON_NETWORK}
    TRANSPORT = {"refused": decision_pb2.TRANSPORT_ERROR_CONNECT_REFUSED, "dns": decision_pb2.TRANSPORT_ERROR_DNS,
                 "reset": decision_pb2.TRANSPORT_ERROR_RESET, "silent": decision_pb2.TRANSPORT_ERROR_TIMEOUT,
                 "not_tls": decision_pb2.TRANSPORT_ERROR_TLS}

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        cls.server = Failoverd(cls.dir, free_port())
        cls.upstreams = MockUpstreams()
        targets, chains = [], []
        for lib in cls.LIBRARIES:
            for case in cls.CASES:
                name = f"{lib}-{case}"
                targets += [types_pb2.Target(name=f"{name}-dead"), types_pb2.Target(name=f"{name}-ok")]
                chains.append(types_pb2.Chain(name=name, targets=[f"{name}-dead", f"{name}-ok"]))
        admin_call(cls.server.address, "Apply", admin_pb2.ApplyRequest(targets=targets, chains=chains))

    @classmethod
    def tearDownClass(cls):
        cls.upstreams.close()
        cls.server.stop()

    def test_every_library_and_every_way_to_fail_reaches_the_next_target(self):
        with Client(self.server.address) as client:
            for lib, call in self.LIBRARIES.items():
                for case, reason in self.CASES.items():
                    with self.subTest(library=lib, case=case):
                        url = getattr(self.upstreams, case)
                        seen = []

                        def attempt(a, ctx):
                            if a.target.endswith("-ok"):
                                return AttemptOutcome(ok=True, response="served")
                            try:
                                # Only the silent upstream is meant to time out; the
                                # others get time to fail as themselves (a DNS answer
                                # on a loaded machine can take longer than half a second).
                                call(url, 0.5 if case == "silent" else 10)
                            except Exception as e:  # what the library raised, as a caller would catch it
                                failure = failure_from_exception(e)
                                seen.append(failure)
                                return AttemptOutcome(ok=False, failure=failure)
                            return AttemptOutcome(ok=True)
                        r = client.run(f"{lib}-{case}", attempt)
                        self.assertEqual(len(seen), 1, "the dead upstream answered?")
                        self.assertEqual(seen[0].transport_error, self.TRANSPORT[case], seen[0].message)
                        self.assertTrue(r.ok, r.error)
                        self.assertEqual(r.served_by, f"{lib}-{case}-ok")
                        self.assertEqual(r.attempts[0].reason, reason, seen[0].message)
                        self.assertEqual(r.attempts[0].verdict, decision_pb2.VERDICT_TRY_NEXT)

    def test_a_callers_cancel_is_cancelled_and_never_counts(self):
        failure = failure_from_exception(asyncio.CancelledError())
        self.assertTrue(failure.cancelled)
        with grpc.insecure_channel(self.server.address) as channel:
            stub = decision_pb2_grpc.DecisionServiceStub(channel)
            resp = stub.ReportOutcome(decision_pb2.ReportOutcomeRequest(
                chain="httpx-refused", target="httpx-refused-ok", failure=failure), timeout=10)
            self.assertEqual(resp.reason, decision_pb2.FAILURE_REASON_CANCELLED)
            self.assertFalse(resp.counted)

    def test_a_parsed_body_is_taken_as_the_sdks_hand_it_over(self):
        body = {"error": {"type": "insufficient_quota", "message": "You exceeded your current quota"}}
        for given in (body, json.dumps(body), json.dumps(body).encode()):
            failure = failure_from_response(429, {"retry-after": "20"}, given)
            self.assertEqual(json.loads(failure.response.body), body)
            self.assertEqual(failure.response.headers["retry-after"], "20")
        self.assertEqual(failure_from_response(500, {}, None).response.body, b"")


class BacklogTest(unittest.TestCase):
    def test_a_full_backlog_drops_successes_before_failures(self):
        from failoverd_client._core import Shared
        shared = Shared(3, 1.0, 5.0)
        for target, ok in (("a", False), ("b", True), ("c", False), ("d", False)):
            report = decision_pb2.ReportOutcomeRequest(chain="ch", target=target)
            if ok:
                report.success.SetInParent()
            else:
                report.failure.http_status = 503
            shared.buffer(report)
        self.assertEqual([r.target for r in shared.take()], ["a", "c", "d"])
        self.assertEqual(shared.dropped, 1)


class _DecisionServiceBeforeReportOutcomes(decision_pb2_grpc.DecisionServiceServicer):
    """A failoverd from before ReportOutcomes: plans a, takes reports and streams."""

    def __init__(self):
        self.lock = threading.Lock()
        self.batch_calls = 0
        self.streamed = []

    def PickTarget(self, request, context):
        return decision_pb2.PickTargetResponse(decision_id="d1", attempts=[decision_pb2.Attempt(target="a")])

    def ReportOutcome(self, request, context):
        return decision_pb2.ReportOutcomeResponse(verdict=decision_pb2.VERDICT_DONE)

    def ReportOutcomes(self, request, context):
        with self.lock:
            self.batch_calls += 1
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")

    def StreamOutcomes(self, request_iterator, context):
        reports = list(request_iterator)
        with self.lock:
            self.streamed.append(reports)
        return decision_pb2.StreamOutcomesResponse(accepted=len(reports))


class OlderFailoverdTest(unittest.TestCase):
    def test_the_backlog_goes_as_streams_and_report_outcomes_is_asked_for_once(self):
        from concurrent.futures import ThreadPoolExecutor
        service = _DecisionServiceBeforeReportOutcomes()
        server = grpc.server(ThreadPoolExecutor(max_workers=4))
        decision_pb2_grpc.add_DecisionServiceServicer_to_server(service, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            with Client(f"127.0.0.1:{port}", flush_interval=60) as client:
                for _ in range(2):
                    self.assertTrue(client.run("ch", ok_on("a")).ok)
                    self.assertEqual(client.flush(), 1)
        finally:
            server.stop(None)
        self.assertEqual([len(s) for s in service.streamed if s], [1, 1])
        self.assertEqual(service.batch_calls, 1, "asked for ReportOutcomes before every batch")


# Error replies shaped as the providers send them (status, headers, body).
REPLIES = {
    "openai429": (429, {"retry-after": "2", "x-ratelimit-reset-requests": "2s"},
                  {"error": {"message": "Rate limit reached for requests", "type": "requests",
                             "code": "rate_limit_exceeded"}}, Reason.RATE_LIMIT),
    "openai402": (402, {}, {"error": {"message": "You exceeded your current quota, please check your plan and billing "
                                                 "details.", "type": "insufficient_quota", "code": "insufficient_quota"}},
                  Reason.BILLING),
    "anthropic529": (529, {}, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                     Reason.OVERLOADED),
}


def _reply_with_requests(url):
    import requests
    r = requests.post(url, json={}, timeout=5)
    return r.status_code, r.headers, r.content


def _reply_with_httpx(url):
    import httpx
    r = httpx.post(url, json={}, timeout=5)
    return r.status_code, r.headers, r.content


def _reply_with_urllib(url):
    import urllib.error
    import urllib.request
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=5)
    except urllib.error.HTTPError as e:  # urllib raises for an error status; the reply is on the exception
        return e.code, e.headers, e.read()
    raise AssertionError("urllib did not raise for an error reply")


def _reply_with_aiohttp(url):
    import aiohttp

    async def post():
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json={}) as resp:
                return resp.status, resp.headers, await resp.json()  # the parsed body, as SDKs hand it over
    return asyncio.run(post())


class ErrorRepliesTest(unittest.TestCase):
    """Real-shaped 429, 402 and 529 replies read by each library and reported
    with failure_from_response: the reason failoverd gives, and the next target serves."""

    LIBRARIES = {"requests": _reply_with_requests, "httpx": _reply_with_httpx, "urllib": _reply_with_urllib,
                 "aiohttp": _reply_with_aiohttp}

    def test_each_library_relays_the_reply_and_the_next_target_serves(self):
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", "0")))
                status, headers, body, _ = REPLIES[self.path.strip("/")]
                data = json.dumps(body).encode()
                self.send_response(status)
                for name, value in {"content-type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=upstream.serve_forever, daemon=True).start()
        d = tempfile.mkdtemp()
        server = Failoverd(d, free_port())
        try:
            names = [f"{lib}-{reply}" for lib in self.LIBRARIES for reply in REPLIES]
            admin_call(server.address, "Apply", admin_pb2.ApplyRequest(
                targets=[types_pb2.Target(name=f"{n}-{t}") for n in names for t in ("x", "ok")],
                chains=[types_pb2.Chain(name=n, targets=[f"{n}-x", f"{n}-ok"]) for n in names]))
            with Client(server.address) as client:
                for lib, call in self.LIBRARIES.items():
                    for reply, (_, _, _, reason) in REPLIES.items():
                        with self.subTest(library=lib, reply=reply):
                            def attempt(a, ctx):
                                if a.target.endswith("-ok"):
                                    return AttemptOutcome(ok=True)
                                status, headers, body = call(f"http://127.0.0.1:{upstream.server_address[1]}/{reply}")
                                return AttemptOutcome(ok=False, failure=failure_from_response(status, headers, body))
                            r = client.run(f"{lib}-{reply}", attempt)
                            self.assertIs(r.attempts[0].reason, reason)
                            self.assertEqual(r.served_by, f"{lib}-{reply}-ok", r.error)
        finally:
            upstream.shutdown()
            server.stop()


class TokenTest(unittest.TestCase):
    def test_tokens_are_sent(self):
        d = tempfile.mkdtemp()
        tokens = os.path.join(d, "tokens")
        with open(tokens, "w") as f:
            f.write("admin ops admin-secret\ndecide gw decide-secret\n")
        server = Failoverd(d, free_port(), ["--tokens-file", tokens])
        try:
            configure(server.address, metadata=(("authorization", "Bearer admin-secret"),))
            with Client(server.address) as anonymous:  # refused, not unreachable
                with self.assertRaises(Unauthenticated) as raised:
                    anonymous.run("ch", ok_on("a"))
                self.assertEqual(raised.exception.code, grpc.StatusCode.UNAUTHENTICATED)
            with Client(server.address, token="wrong") as wrong:
                self.assertRaises(Unauthenticated, wrong.run, "ch", ok_on("a"))
            with Client(server.address, token="decide-secret") as client:
                self.assertTrue(client.run("ch", ok_on("a")).ok)
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
