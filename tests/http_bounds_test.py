#!/usr/bin/env python3
"""The HTTP port's bounds (DESIGN 3.16) against the real failoverd, with raw
sockets: bodies capped however they are framed, header bytes and lines capped,
a deadline for the header section, slow and silent clients (and unread event
streams) never keeping another client waiting, foreign Host names refused, and
kept-alive calls as fast as new connections.

usage: http_bounds_test.py FAILOVERD
"""
import http.client
import json
import os
import re
import select
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import unittest

FAILOVERD = sys.argv.pop(1) if len(sys.argv) > 1 else os.environ.get("FAILOVERD_BIN", "failoverd")
MAX_BODY = 65536
# What "served at once" means here: far below the old server's 10 s read
# timeout (which freed its threads), with room for a loaded machine.
PROMPT = 3.0


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


class Failoverd:
    def __init__(self, work, name, *flags, preexec_fn=None):
        self.log_path = os.path.join(work, f"{name}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [FAILOVERD, "--data-dir", os.path.join(work, name), "--listen", "127.0.0.1:0",
             "--http-listen", "127.0.0.1:0", "--metrics-listen", "", "--max-message-bytes", str(MAX_BODY),
             *flags], stderr=self.log, preexec_fn=preexec_fn)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with open(self.log_path) as f:
                m = re.search(r"http_port=(\d+)", f.read())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("failoverd did not start: " + open(self.log_path).read())

    def stop(self):
        if self.proc.poll() is not None:  # it died: say how (a sanitizer's report, say)
            sys.stderr.write(f"failoverd exited with {self.proc.returncode}:\n" + open(self.log_path).read()[-8000:])
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()

    def connect(self, timeout=10.0):
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    def call(self, method, path, body=None, headers=None, timeout=PROMPT):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            h = {"Content-Type": "application/json"}
            h.update(headers or {})
            conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
            r = conn.getresponse()
            return r.status, r.read().decode()
        finally:
            conn.close()


def read_answer(sock, deadline=10.0):
    """The status line and body of what the server sent before closing."""
    sock.settimeout(deadline)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1") else 0
    return status, body.decode(errors="replace")


def send_until_answered(sock, first, more, limit):
    """Sends `first`, then `more` again and again until the server answers
    (or closes); returns the bytes sent by then. Stops at `limit`."""
    sock.setblocking(False)
    pending = first
    sent = 0
    while sent < limit:
        readable, writable, _ = select.select([sock], [sock], [], 10)
        if readable:
            break
        if not writable:
            continue
        try:
            n = sock.send(pending)
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += n
        pending = pending[n:] or more
    sock.setblocking(True)
    return sent


class HttpBoundsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp()
        # No tokens file, as the README's loopback quick start.
        cls.d = Failoverd(cls.work, "main", "--http-allowed-hosts", "failoverd.example")
        status, body = cls.d.call("POST", "/v1/admin/apply", {
            "targets": [{"name": "a"}, {"name": "b"}], "chains": [{"name": "ch", "targets": ["a", "b"]}]})
        assert status == 200, body

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def assert_serving(self):
        """Another client is answered at once."""
        start = time.monotonic()
        status, body = self.d.call("GET", "/v1/status")
        self.assertEqual(status, 200, body)
        self.assertLess(time.monotonic() - start, PROMPT)

    def test_chunked_body_is_capped_before_it_is_buffered(self):
        before = rss_kib(self.d.proc.pid)
        s = self.d.connect()
        head = (b"POST /v1/pick HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
        sent = send_until_answered(s, head, chunk, limit=256 << 20)
        status, body = read_answer(s)
        s.close()
        self.assertEqual(status, 413, body)
        self.assertIn("--max-message-bytes", body)
        # Answered soon after the limit, not after the whole body.
        self.assertLess(sent, 64 << 20)
        self.assertLess(rss_kib(self.d.proc.pid) - before, 64 << 10)
        self.assert_serving()

    def test_declared_length_over_the_cap_is_refused_before_the_body(self):
        s = self.d.connect()
        s.sendall(b"POST /v1/pick HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000000000\r\n\r\n")
        status, body = read_answer(s)
        s.close()
        self.assertEqual(status, 413, body)

    def test_header_bytes_are_capped(self):
        before = rss_kib(self.d.proc.pid)
        s = self.d.connect()
        line = b"X-Pad: " + b"a" * 8192 + b"\r\n"
        sent = send_until_answered(s, b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\n", line, limit=512 << 20)
        status, body = read_answer(s)
        s.close()
        self.assertEqual(status, 431, body)
        self.assertIn("headers: larger than", body)
        self.assertLess(sent, 64 << 20)
        self.assertLess(rss_kib(self.d.proc.pid) - before, 64 << 10)

    def test_header_lines_are_capped(self):
        s = self.d.connect()
        many = b"".join(b"X-N%d: 1\r\n" % i for i in range(150))
        s.sendall(b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\n" + many + b"\r\n")
        status, body = read_answer(s)
        s.close()
        self.assertEqual(status, 431, body)
        self.assertIn("header lines", body)

    def test_slow_clients_and_unread_streams_keep_no_one_waiting(self):
        held = []
        try:
            # 40 clients that send a request line and then one header now and then.
            for _ in range(40):
                s = self.d.connect()
                s.sendall(b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\n")
                held.append(s)
            # 16 event streams never read, while events keep coming.
            for _ in range(16):
                s = self.d.connect()
                s.sendall(b"GET /v1/watch HTTP/1.1\r\nHost: localhost\r\n\r\n")
                held.append(s)
            # 16 requests whose bodies never finish.
            for _ in range(16):
                s = self.d.connect()
                s.sendall(b"POST /v1/pick HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 100\r\n\r\n{")
                held.append(s)
            for i in range(20):
                for s in held[:40]:
                    s.sendall(b"X-Slow: %d\r\n" % i)
                # Events for the unread streams.
                change = ("/v1/admin/trigger", {"target": "b", "reason": "churn"}) if i % 2 == 0 else (
                    "/v1/admin/cancel", {"target": "b"})
                status, body = self.d.call("POST", *change)
                self.assertEqual(status, 200, body)
                self.assert_serving()
        finally:
            for s in held:
                s.close()

    def test_foreign_host_is_refused_and_changes_nothing(self):
        port = self.d.port
        status, body = self.d.call("POST", "/v1/admin/trigger", {"target": "a", "reason": "rebinding"},
                                   headers={"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"})
        self.assertEqual(status, 403, body)
        self.assertIn('host: \\"evil.example:', body)
        status, body = self.d.call("GET", "/v1/admin/targets/a")
        self.assertEqual(status, 200, body)
        self.assertNotIn("MANUAL", body)
        # Names it answers: localhost, IP literals, and --http-allowed-hosts.
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "[::1]", f"FailoverD.Example:{port}"):
            status, body = self.d.call("GET", "/v1/status", headers={"Host": host})
            self.assertEqual(status, 200, f"{host}: {body}")

    def test_kept_alive_calls_are_as_fast_as_new_connections(self):
        def pick(conn):
            start = time.monotonic()
            conn.request("POST", "/v1/pick", body='{"chain":"ch"}', headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
            return time.monotonic() - start

        fresh = []
        for _ in range(30):
            conn = http.client.HTTPConnection("127.0.0.1", self.d.port, timeout=10)
            fresh.append(pick(conn))
            conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", self.d.port, timeout=10)
        pick(conn)
        kept = [pick(conn) for _ in range(30)]
        conn.close()
        # Delayed ACKs made each kept-alive call wait ~40 ms against a few ms new.
        self.assertLess(statistics.median(kept), 2 * statistics.median(fresh) + 0.005,
                        f"kept-alive {kept}, new connections {fresh}")


class HeaderDeadlineTest(unittest.TestCase):
    def test_a_trickled_header_section_is_cut_off_at_its_deadline(self):
        work = tempfile.mkdtemp()
        d = Failoverd(work, "deadline", "--http-header-timeout", "1s")
        try:
            s = d.connect()
            s.sendall(b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\n")
            start = time.monotonic()
            closed = False
            # One header line every 200 ms: each read succeeds, the section never ends.
            while time.monotonic() - start < 15:
                try:
                    s.sendall(b"X-Trickle: 1\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
                r, _, _ = select.select([s], [], [], 0.2)
                if r:
                    try:
                        closed = s.recv(4096) == b""
                    except ConnectionResetError:
                        closed = True
                    if closed:
                        break
            s.close()
            self.assertTrue(closed, "the connection was still open after 15 s of trickled headers")
        finally:
            d.stop()
            shutil.rmtree(work, ignore_errors=True)


def sanitized():
    """A sanitizer build: its runtime needs free descriptors of its own (UBSan
    checks memory through a pipe and reports a false error without one)."""
    linked = subprocess.run(["ldd", FAILOVERD], capture_output=True, text=True).stdout
    return any(lib in linked for lib in ("libasan", "libubsan", "libtsan"))


class DescriptorsTest(unittest.TestCase):
    @unittest.skipIf(sanitized(), "a sanitizer's runtime cannot run without free descriptors")
    def test_running_out_of_descriptors_leaves_the_listener_serving(self):
        import resource
        work = tempfile.mkdtemp()
        limit = 256
        # Soft and hard: failoverd raises its soft limit to the hard one.
        d = Failoverd(work, "fds", preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
        held = []
        try:
            # More connections than failoverd has descriptors for.
            for _ in range(limit + 50):
                held.append(d.connect())
            deadline = time.monotonic() + 30
            while "cannot accept connections" not in open(d.log_path).read():
                self.assertLess(time.monotonic(), deadline, "failoverd never ran out of descriptors")
                time.sleep(0.05)
            for s in held:
                s.close()
            held = []
            status, body = d.call("GET", "/v1/status", timeout=10)
            self.assertEqual(status, 200, body)
            self.assertIsNone(d.proc.poll())
        finally:
            for s in held:
                s.close()
            d.stop()
            shutil.rmtree(work, ignore_errors=True)


class TlsHelloTest(unittest.TestCase):
    def test_silent_tls_clients_keep_no_one_waiting(self):
        work = tempfile.mkdtemp()
        cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
        d = Failoverd(work, "tls", "--tls-cert", cert, "--tls-key", key)
        silent = [d.connect() for _ in range(40)]
        try:
            context = ssl.create_default_context(cafile=cert)
            start = time.monotonic()
            conn = http.client.HTTPSConnection("127.0.0.1", d.port, timeout=PROMPT, context=context)
            conn.request("GET", "/v1/status")
            r = conn.getresponse()
            self.assertEqual(r.status, 200, r.read())
            conn.close()
            self.assertLess(time.monotonic() - start, PROMPT)
        finally:
            for s in silent:
                s.close()
            d.stop()
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
