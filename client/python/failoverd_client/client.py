"""failoverd's decision loop for Python callers: every plan and verdict from
failoverd (remote decisions), fail-static when it is away."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple

import grpc

from ._core import (BATCH, MAX_STEPS, AttemptContext, AttemptOutcome, AttemptRecord, ClientEvent, EventHook,
                    LoopResult, Shared, Verdict, call_timeout, describe, emit, make_report, reason_of, remaining,
                    unreachable, verdict_events, verdict_of)
from .errors import FailoverdUnreachable, refusal
from .v1 import decision_pb2, decision_pb2_grpc

AttemptFn = Callable[[decision_pb2.Attempt, AttemptContext], AttemptOutcome]


def _read(path: Optional[str]) -> Optional[bytes]:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


def open_channel(server: str, tls_ca: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None, aio: bool = False) -> Any:
    """A channel to failoverd; TLS when any of the PEM files is given. A lost
    connection is retried at least every second (gRPC's default grows to 120 s)."""
    options = [("grpc.max_reconnect_backoff_ms", 1000), ("grpc.initial_reconnect_backoff_ms", 100)]
    module = grpc.aio if aio else grpc
    if tls_ca or tls_cert or tls_key:
        credentials = grpc.ssl_channel_credentials(_read(tls_ca), _read(tls_key), _read(tls_cert))
        return module.secure_channel(server, credentials, options=options)
    return module.insecure_channel(server, options=options)


class Client:
    """One client per process, shared by every thread.

    run() picks, attempts, reports and follows the verdict. When failoverd
    cannot be reached it serves from the last plan seen for the chain (or the
    order given to set_declared_order), starting where the last request was
    served, and buffers the reports (bounded; when full the oldest success goes first). A failoverd that
    does not answer costs one call deadline, once: later requests go
    fail-static at once while the client's thread asks failoverd again, with
    backoff. Successes are never waited for: their verdict is always DONE, and
    their reports go with the backlog.

    run() raises Unauthenticated (token missing or refused), UnknownChain,
    FailoverdError (another refusal) and FailoverdUnreachable (no answer and
    no plan for the chain seen yet); what the upstreams did is in the result.
    on_event(ClientEvent) is called on the request's thread for each failover,
    target seen down and fail-static request: for logs and metrics.
    """

    def __init__(self, server: str = "127.0.0.1:50051", *, token: Optional[str] = None,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 timeout: float = 5.0, max_buffered_reports: int = 1000, flush_interval: float = 0.5,
                 down_backoff: float = 1.0, max_down_backoff: float = 5.0,
                 channel: Optional[grpc.Channel] = None, sleep: Callable[[float], None] = time.sleep,
                 on_event: Optional[EventHook] = None):
        self._address = server if channel is None else "the given channel"
        self._on_event = on_event
        self._channel = channel or open_channel(server, tls_ca, tls_cert, tls_key)
        self._stub = decision_pb2_grpc.DecisionServiceStub(self._channel)
        self._metadata: Tuple[Tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout
        self._flush_interval = flush_interval
        self._sleep = sleep
        self._shared = Shared(max_buffered_reports, down_backoff, max_down_backoff)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._background, name="failoverd-client", daemon=True)
        self._thread.start()

    # --- public ------------------------------------------------------------
    def set_declared_order(self, chain: str, targets: Sequence[str]) -> None:
        """The order to use for `chain` when failoverd is unreachable and no plan was seen yet."""
        self._shared.declare(chain, targets)

    @property
    def buffered_reports(self) -> int:
        return self._shared.buffered()

    @property
    def dropped_reports(self) -> int:
        return self._shared.dropped

    def close(self, flush_timeout: float = 2.0) -> None:
        """Sends the reports not sent yet, for at most `flush_timeout` seconds (a
        short-lived process would lose them otherwise), then stops the client's
        thread and closes the channel. Reports failoverd did not take by then are
        dropped and counted in dropped_reports."""
        self._stop.set()
        self._wake.set()
        self._thread.join()
        if flush_timeout > 0 and self._shared.buffered():
            self._flush(deadline=time.monotonic() + flush_timeout)
        self._shared.drop_all()
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def run(self, chain: str, attempt: AttemptFn, *, body_bytes: int = 0, session_key: str = "",
            request_id: str = "", exclude_targets: Sequence[str] = (), timeout: Optional[float] = None,
            cancelled: Optional[threading.Event] = None) -> LoopResult:
        """Serves one request on `chain`; attempt(target, context) makes one call.

        timeout: seconds for the whole request; no attempt starts and no retry
        delay is waited out past it, nor after `cancelled` is set.
        Raises FailoverdError (see the class) when failoverd refuses the pick.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        result = LoopResult()
        pick = decision_pb2.PickTargetRequest(chain=chain, body_bytes=body_bytes, session_key=session_key,
                                              request_id=request_id, exclude_targets=list(exclude_targets))
        plan = None
        if not self._shared.down():
            try:
                plan = self._stub.PickTarget(pick, timeout=call_timeout(self._timeout, deadline),
                                             metadata=self._metadata)
                self._shared.note(True)
            except grpc.RpcError as e:
                if not unreachable(e):
                    if e.code() != grpc.StatusCode.UNAVAILABLE:
                        raise refusal(e, chain) from None
                    result.error = e.details() or str(e.code())  # failoverd's answer: no target may be tried
                    return result
                self._note_down(e)
        if plan is None:
            cached = self._shared.cached(chain)
            if not cached:
                raise FailoverdUnreachable(self._address, f"{self._shared.last_cause or 'no answer'}; "
                                           f"no plan for chain {chain} was seen to serve from")
            return self._run_static(chain, "", cached, [], attempt, deadline, cancelled, result)
        if not plan.attempts:
            result.error = f"failoverd returned an empty plan for chain {chain}"
            return result
        self._shared.remember(chain, plan.attempts)
        current, tried, number = plan.attempts[0], [], 1
        while len(result.attempts) < MAX_STEPS:
            stop = self._stop_reason(deadline, cancelled, 0)
            if stop:
                result.error = stop
                return result
            outcome = attempt(current, AttemptContext(number, deadline))
            tried.append(current.target)
            record = AttemptRecord(current.target, number, outcome.ok, latency=outcome.latency)
            result.attempts.append(record)
            report = make_report(chain, plan.decision_id, current.target, number, outcome)
            if outcome.ok:  # the verdict of a success is always DONE: not waited for
                self._buffer(report)
                record.verdict = Verdict.DONE
                result.ok, result.served_by, result.response = True, current.target, outcome.response
                self._shared.promote(chain, current.target)
                return result
            verdict = None
            if not self._shared.down():
                try:
                    verdict = self._stub.ReportOutcome(report, timeout=call_timeout(self._timeout, deadline),
                                                       metadata=self._metadata)
                    self._shared.note(True)
                except grpc.RpcError as e:
                    if not unreachable(e):  # failoverd refused it: sending it again would not help
                        result.error = f"failoverd refused the report: {e.details()}"
                        return result
                    self._note_down(e)
            if verdict is None:  # failoverd went away mid-request: carry on down the plan
                self._buffer(report)
                return self._run_static(chain, plan.decision_id, list(plan.attempts), tried, attempt, deadline,
                                        cancelled, result)
            record.verdict, record.reason = verdict_of(verdict.verdict), reason_of(verdict.reason)
            for event in verdict_events(chain, current.target, verdict):
                emit(self._on_event, event)
            if verdict.verdict == decision_pb2.VERDICT_RETRY_SAME:
                delay = verdict.retry_delay.ToNanoseconds() / 1e9
                stop = self._stop_reason(deadline, cancelled, delay)
                if stop:
                    result.error = stop
                    return result
                if cancelled is not None:
                    cancelled.wait(delay)
                else:
                    self._sleep(delay)
            elif verdict.verdict == decision_pb2.VERDICT_TRY_NEXT:
                current = verdict.next_attempt
            else:
                result.error = verdict.error or describe(outcome.failure)
                return result
            number += 1
        result.error = f"gave up after {MAX_STEPS} attempts"
        return result

    def flush(self) -> int:
        """Sends the buffered reports now; returns how many outcomes were delivered."""
        return self._flush()

    # --- internals -----------------------------------------------------------
    def _send_batch(self, batch: List[decision_pb2.ReportOutcomeRequest], timeout: float) -> Any:
        """The batch in one call: ReportOutcomes, or a stream to a failoverd from before it."""
        if self._shared.asks_for_batches():
            try:
                return self._stub.ReportOutcomes(decision_pb2.ReportOutcomesRequest(outcomes=batch), timeout=timeout,
                                                 metadata=self._metadata)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._shared.note_no_batches()  # it counted nothing
        return self._stub.StreamOutcomes(iter(batch), timeout=timeout, metadata=self._metadata)

    @staticmethod
    def _stop_reason(deadline: Optional[float], cancelled: Optional[threading.Event], wait: float) -> str:
        if cancelled is not None and cancelled.is_set():
            return "cancelled by the caller"
        left = remaining(deadline)
        if left is not None and left <= wait:
            return ("the request's deadline comes before the retry delay ends" if wait > 0
                    else "the request's deadline passed before the next attempt")
        return ""

    def _run_static(self, chain: str, decision_id: str, plan: List[decision_pb2.Attempt], tried: List[str],
                    attempt: AttemptFn, deadline: Optional[float], cancelled: Optional[threading.Event],
                    result: LoopResult) -> LoopResult:
        result.fail_static = True
        emit(self._on_event, ClientEvent("fail_static", chain, message=self._shared.last_cause))
        failures = []
        number = len(result.attempts)
        for a in plan:
            if a.target in tried:
                continue
            stop = self._stop_reason(deadline, cancelled, 0)
            if stop:
                result.error = stop
                return result
            number += 1
            outcome = attempt(a, AttemptContext(number, deadline))
            tried.append(a.target)
            self._buffer(make_report(chain, decision_id, a.target, number, outcome))
            result.attempts.append(AttemptRecord(a.target, number, outcome.ok, latency=outcome.latency))
            if outcome.ok:
                result.ok, result.served_by, result.response = True, a.target, outcome.response
                self._shared.promote(chain, a.target)
                return result
            failures.append(f"{a.target}: {describe(outcome.failure)}")
        result.error = "failoverd unreachable and every target failed: " + "; ".join(failures)
        return result

    def _buffer(self, report: decision_pb2.ReportOutcomeRequest) -> None:
        if self._shared.buffer(report) >= BATCH:
            self._wake.set()

    def _note_down(self, error: grpc.RpcError) -> None:
        was_down = self._shared.down()
        self._shared.note(False, f"{error.code().name}: {error.details()}")
        if not was_down:
            self._wake.set()

    def _background(self) -> None:
        """The one owner of the backlog's delivery, and of asking a silent failoverd again."""
        while not self._stop.is_set():
            probe_after = self._shared.probe_after()
            self._wake.wait(probe_after if probe_after is not None else self._flush_interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            if probe_after is not None and not self._probe():
                continue
            if self._shared.buffered():
                self._flush()

    def _probe(self) -> bool:
        """An empty StreamOutcomes: changes nothing, tells whether failoverd answers."""
        try:
            self._stub.StreamOutcomes(iter(()), timeout=self._timeout, metadata=self._metadata)
            reached = True
        except grpc.RpcError as e:
            reached = not unreachable(e)
        self._shared.note(reached)
        return reached

    def _flush(self, deadline: Optional[float] = None) -> int:
        """Sends the backlog while failoverd answers; with a deadline (close), also
        to a failoverd last seen down, and only until the deadline."""
        delivered = 0
        while deadline is not None or not self._shared.down():
            timeout = self._timeout if deadline is None else min(self._timeout, deadline - time.monotonic())
            if timeout <= 0:
                return delivered
            batch = self._shared.take()
            if not batch:
                return delivered
            try:
                summary = self._send_batch(batch, timeout)
                self._shared.note(True)
                # Refused ones would never be accepted: gone.
                delivered += sum(max(r.count, 1) for r in batch) if summary.refused == 0 else summary.accepted
            except grpc.RpcError as e:
                if not unreachable(e):
                    continue  # refused whole by failoverd itself: sending again would not help
                self._shared.note(False)
                self._shared.requeue(batch)  # sent again whole; the report ids make it count once
                return delivered
        return delivered
