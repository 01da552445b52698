"""What the sync and asyncio clients share: options, results, the cached
plans, the bounded report buffer and the record of whether failoverd answers."""
from __future__ import annotations

import collections
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Optional, Sequence

import grpc
from failover.v1 import decision_pb2

# Set on every error failoverd itself returns: its answers (UNAVAILABLE when no
# target may be tried, NOT_FOUND for a deleted chain) are decisions to follow,
# not signs that failoverd is away.
ANSWERED_TRAILER = "failoverd-answered"
BATCH = 256          # reports per StreamOutcomes call
MAX_COUNT = 10000    # successes one report may stand for
MAX_STEPS = 64       # attempts per request, a guard against a runaway loop


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
    verdict: int = decision_pb2.VERDICT_UNSPECIFIED  # unspecified when failoverd was not reached
    reason: int = decision_pb2.FAILURE_REASON_UNSPECIFIED
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
        # Report ids (failoverd counts a report sent again once): random per client.
        self._sender = os.urandom(16).hex()
        self._next_sequence = 1

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
    def note(self, reached: bool) -> None:
        with self._lock:
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
