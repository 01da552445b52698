"""What the sync and asyncio clients share: options, results, the cached
plans, the bounded report buffer and the record of whether failoverd answers."""
from __future__ import annotations

import collections
import enum
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

import grpc

from .v1 import decision_pb2, types_pb2

# Set on every error failoverd itself returns: its answers (UNAVAILABLE when no
# target may be tried, NOT_FOUND for a deleted chain) are decisions to follow,
# not signs that failoverd is away.
ANSWERED_TRAILER = "failoverd-answered"
BATCH = 256          # reports per ReportOutcomes call
ASK_FOR_BATCHES_AGAIN = 60.0  # seconds a failoverd that refused ReportOutcomes is sent streams
MAX_COUNT = 10000    # successes one report may stand for
MAX_STEPS = 64       # attempts per request, a guard against a runaway loop


class Verdict(enum.IntEnum):
    """What failoverd said to do after an attempt (failover.v1.Verdict)."""
    UNSPECIFIED = 0  # failoverd was not reached
    DONE = 1
    RETRY_SAME = 2
    TRY_NEXT = 3
    FAIL = 4


class Reason(enum.IntEnum):
    """How failoverd classified a failed attempt (failover.v1.FailureReason)."""
    UNSPECIFIED = 0
    NETWORK = 1
    TIMEOUT = 2
    OVERLOADED = 3
    SERVER_ERROR = 4
    RATE_LIMIT = 5
    AUTH = 6
    BILLING = 7
    MODEL_NOT_FOUND = 8
    CAPABILITY_GAP = 9
    ADMISSION = 10
    CONTEXT_OVERFLOW = 11
    CLIENT_ERROR = 12
    CANCELLED = 13
    UNKNOWN = 14
    RETRY_BUDGET = 15


def verdict_of(value: int) -> Verdict:
    try:
        return Verdict(value)
    except ValueError:  # a newer failoverd's: shown as unspecified rather than failing the request
        return Verdict.UNSPECIFIED


def reason_of(value: int) -> Reason:
    try:
        return Reason(value)
    except ValueError:
        return Reason.UNKNOWN


@dataclass
class ClientEvent:
    """What a client saw happen, for the caller's logs and metrics (the `on_event` hook).

    kind is one of:
      "failover"     failoverd moved the request from `target` to `next_target` (`reason`)
      "target_down"  a failure report found `target` down: tripped by it or before it
      "fail_static"  failoverd could not be reached; the request is served from the last plan (`message`)
    """
    kind: str
    chain: str
    target: str = ""
    next_target: str = ""
    reason: Reason = Reason.UNSPECIFIED
    message: str = ""


EventHook = Callable[[ClientEvent], None]
_log = logging.getLogger("failoverd_client")


def emit(hook: Optional[EventHook], event: ClientEvent) -> None:
    """Calls the caller's hook; a hook that raises is logged, never breaks the request."""
    if hook is None:
        return
    try:
        hook(event)
    except Exception:  # noqa: BLE001 - the caller's code
        _log.exception("failoverd_client: the on_event hook raised")


def verdict_events(chain: str, target: str, verdict: decision_pb2.ReportOutcomeResponse) -> List[ClientEvent]:
    """The events one failure's verdict shows."""
    events = []
    reason = reason_of(verdict.reason)
    if verdict.target_health == types_pb2.HEALTH_STATE_DOWN:
        events.append(ClientEvent("target_down", chain, target, reason=reason, message=verdict.error))
    if verdict.verdict == decision_pb2.VERDICT_TRY_NEXT:
        events.append(ClientEvent("failover", chain, target, verdict.next_attempt.target, reason))
    return events


@dataclass
class AttemptOutcome:
    """What one attempt produced. `latency` in seconds; `response` is handed back by run()."""
    ok: bool
    failure: Optional[decision_pb2.Failure] = None
    latency: Optional[float] = None
    response: Any = None


@dataclass
class AttemptContext:
    number: int                        # 1-based within the request, retries included
    deadline: Optional[float] = None   # time.monotonic() past which nothing should start


@dataclass
class AttemptRecord:
    target: str
    number: int
    ok: bool
    verdict: Verdict = Verdict.UNSPECIFIED  # unspecified when failoverd was not reached
    reason: Reason = Reason.UNSPECIFIED
    latency: Optional[float] = None


@dataclass
class LoopResult:
    ok: bool = False
    served_by: str = ""
    response: Any = None
    error: str = ""
    attempts: List[AttemptRecord] = field(default_factory=list)
    fail_static: bool = False  # some or all of the loop ran without failoverd


def unreachable(error: grpc.RpcError) -> bool:
    """Only the transport's failures mean failoverd cannot be reached."""
    code = error.code() if hasattr(error, "code") else None
    if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return False
    trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    return not any(k == ANSWERED_TRAILER for k, _ in (trailers or ()))


def make_report(chain: str, decision_id: str, target: str, number: int,
                outcome: AttemptOutcome) -> decision_pb2.ReportOutcomeRequest:
    report = decision_pb2.ReportOutcomeRequest(chain=chain, decision_id=decision_id, target=target, attempt=number)
    if outcome.ok:
        report.success.SetInParent()
    else:
        report.failure.CopyFrom(outcome.failure or decision_pb2.Failure(message="failed"))
    if outcome.latency is not None and outcome.latency > 0:
        report.latency.FromNanoseconds(int(outcome.latency * 1e9))
    return report


def describe(failure: Optional[decision_pb2.Failure]) -> str:
    if failure is None:
        return "failed"
    if failure.http_status:
        return f"{failure.http_status} {failure.message}".strip()
    return failure.message or "failed"


class Shared:
    """Thread-safe state of one client."""

    def __init__(self, max_buffered_reports: int, down_backoff: float, max_down_backoff: float):
        self._lock = threading.Lock()
        self._plans: Dict[str, List[decision_pb2.Attempt]] = {}
        self._buffer: Deque[decision_pb2.ReportOutcomeRequest] = collections.deque()
        self._max = max_buffered_reports
        self.dropped = 0
        self._down_backoff = down_backoff
        self._max_down_backoff = max_down_backoff
        self._backoff = 0.0  # 0: failoverd answers
        self.last_cause = ""  # why failoverd last could not be reached
        # Report ids (failoverd counts a report sent again once): random per client.
        self._sender = os.urandom(16).hex()
        self._next_sequence = 1
        self._streams_until = 0.0  # time.monotonic(): until then the backlog goes as streams

    # --- plans -----------------------------------------------------------
    def remember(self, chain: str, attempts: Sequence[decision_pb2.Attempt]) -> None:
        with self._lock:
            self._plans[chain] = list(attempts)

    def declare(self, chain: str, targets: Sequence[str]) -> None:
        with self._lock:
            self._plans.setdefault(chain, [decision_pb2.Attempt(target=t) for t in targets])

    def cached(self, chain: str) -> List[decision_pb2.Attempt]:
        with self._lock:
            return list(self._plans.get(chain, ()))

    def promote(self, chain: str, target: str) -> None:
        """The next fail-static request starts where this one was served."""
        with self._lock:
            plan = self._plans.get(chain)
            for i, a in enumerate(plan or ()):
                if a.target == target:
                    plan.insert(0, plan.pop(i))
                    return

    # --- reports ---------------------------------------------------------
    def buffer(self, report: decision_pb2.ReportOutcomeRequest) -> int:
        """Queues a report; a success on the newest one's chain and target joins it. Returns the backlog."""
        with self._lock:
            last = self._buffer[-1] if self._buffer else None
            n = max(last.count, 1) if last is not None else 0
            # A report that was sent (and came back) keeps what its id stands for.
            if (last is not None and report.HasField("success") and last.HasField("success")
                    and not last.HasField("report_id") and not report.HasField("report_id")
                    and last.target == report.target and last.chain == report.chain
                    and last.HasField("latency") == report.HasField("latency") and n < MAX_COUNT):
                if report.HasField("latency"):
                    mean = last.latency.ToNanoseconds() + (report.latency.ToNanoseconds() - last.latency.ToNanoseconds()) // (n + 1)
                    last.latency.FromNanoseconds(mean)
                last.count = n + 1
                last.decision_id = ""
                last.attempt = 0
                return len(self._buffer)
            self._buffer.append(report)
            while len(self._buffer) > self._max:
                # The oldest success goes first: the failures decide trips.
                victim = next((r for r in self._buffer if r.HasField("success")), self._buffer[0])
                self._buffer.remove(victim)
                self.dropped += max(victim.count, 1)
            return len(self._buffer)

    def take(self, limit: int = BATCH) -> List[decision_pb2.ReportOutcomeRequest]:
        """The next batch to send, each report stamped with its id when first taken:
        a batch sent again after its call failed counts once at failoverd."""
        with self._lock:
            batch = []
            while self._buffer and len(batch) < limit:
                report = self._buffer.popleft()
                if not report.HasField("report_id"):
                    report.report_id.sender = self._sender
                    report.report_id.sequence = self._next_sequence
                    self._next_sequence += 1
                batch.append(report)
            return batch

    def drop_all(self) -> int:
        """Forgets the backlog (counted in `dropped`); returns how many reports it held."""
        with self._lock:
            n = sum(max(r.count, 1) for r in self._buffer)
            self._buffer.clear()
            self.dropped += n
            return n

    def asks_for_batches(self) -> bool:
        """Whether to send the backlog with ReportOutcomes (else as a stream)."""
        with self._lock:
            return time.monotonic() >= self._streams_until

    def note_no_batches(self) -> None:
        """failoverd answered ReportOutcomes with UNIMPLEMENTED (a version from before
        it): streams for a while, then it is asked again, as it may have been upgraded."""
        with self._lock:
            self._streams_until = time.monotonic() + ASK_FOR_BATCHES_AGAIN

    def requeue(self, batch: List[decision_pb2.ReportOutcomeRequest]) -> None:
        with self._lock:
            for report in reversed(batch):
                if len(self._buffer) < self._max:
                    self._buffer.appendleft(report)
                else:
                    self.dropped += 1

    def buffered(self) -> int:
        with self._lock:
            return sum(max(r.count, 1) for r in self._buffer)

    # --- is failoverd answering? ------------------------------------------
    def note(self, reached: bool, cause: str = "") -> None:
        with self._lock:
            if cause:
                self.last_cause = cause
            if reached:
                self._backoff = 0.0
            else:
                self._backoff = self._down_backoff if self._backoff == 0 else min(self._backoff * 2, self._max_down_backoff)

    def down(self) -> bool:
        with self._lock:
            return self._backoff > 0

    def probe_after(self) -> Optional[float]:
        """While failoverd is down, when to ask it again; None while it answers."""
        with self._lock:
            return self._backoff if self._backoff > 0 else None


def remaining(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else deadline - time.monotonic()


def call_timeout(timeout: float, deadline: Optional[float]) -> float:
    left = remaining(deadline)
    return timeout if left is None else max(0.0, min(timeout, left))
