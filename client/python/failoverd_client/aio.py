"""The asyncio form of the client: the same loop and guarantees as Client,
on grpc.aio, for callers written with async/await.

    client = AsyncClient("failoverd:50051")
    result = await client.run("assistant-llm", call_upstream)  # async def call_upstream(attempt, ctx)
    await client.close()
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, List, Optional, Sequence, Tuple

import grpc

from ._core import (BATCH, MAX_STEPS, AttemptContext, AttemptOutcome, AttemptRecord, ClientEvent, EventHook,
                    LoopResult, Shared, Verdict, describe, emit, make_report, reason_of, unreachable, verdict_events,
                    verdict_of)
from .errors import FailoverdUnreachable, refusal
from .v1 import decision_pb2, decision_pb2_grpc
from .client import open_channel

AsyncAttemptFn = Callable[[decision_pb2.Attempt, AttemptContext], Awaitable[AttemptOutcome]]


class AsyncClient:
    """See Client: the same behaviour; cancelling the task that awaits run() stops the request."""

    def __init__(self, server: str = "127.0.0.1:50051", *, token: Optional[str] = None,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 timeout: float = 5.0, max_buffered_reports: int = 1000, flush_interval: float = 0.5,
                 down_backoff: float = 1.0, max_down_backoff: float = 5.0, on_event: Optional[EventHook] = None):
        self._address = server
        self._on_event = on_event
        self._channel = open_channel(server, tls_ca, tls_cert, tls_key, aio=True)
        self._stub = decision_pb2_grpc.DecisionServiceStub(self._channel)
        self._metadata: Tuple[Tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout
        self._flush_interval = flush_interval
        self._shared = Shared(max_buffered_reports, down_backoff, max_down_backoff)
        self._wake: Optional[asyncio.Event] = None
        self._task: Optional[asyncio.Task] = None

    def set_declared_order(self, chain: str, targets: Sequence[str]) -> None:
        self._shared.declare(chain, targets)

    @property
    def buffered_reports(self) -> int:
        return self._shared.buffered()

    @property
    def dropped_reports(self) -> int:
        return self._shared.dropped

    async def close(self, flush_timeout: float = 2.0) -> None:
        """Sends the reports not sent yet, for at most `flush_timeout` seconds, then
        stops the background task and closes the channel; what failoverd did not
        take by then is dropped and counted in dropped_reports."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if flush_timeout > 0 and self._shared.buffered():
            await self._flush(deadline=time.monotonic() + flush_timeout)
        self._shared.drop_all()
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def run(self, chain: str, attempt: AsyncAttemptFn, *, body_bytes: int = 0, session_key: str = "",
                  request_id: str = "", exclude_targets: Sequence[str] = (),
                  timeout: Optional[float] = None) -> LoopResult:
        self._start()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        result = LoopResult()
        pick = decision_pb2.PickTargetRequest(chain=chain, body_bytes=body_bytes, session_key=session_key,
                                              request_id=request_id, exclude_targets=list(exclude_targets))
        plan = None
        if not self._shared.down():
            try:
                plan = await self._stub.PickTarget(pick, timeout=self._call_timeout(deadline),
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
            return await self._run_static(chain, "", cached, [], attempt, deadline, result)
        if not plan.attempts:
            result.error = f"failoverd returned an empty plan for chain {chain}"
            return result
        self._shared.remember(chain, plan.attempts)
        current, tried, number = plan.attempts[0], [], 1
        while len(result.attempts) < MAX_STEPS:
            if self._past(deadline, 0):
                result.error = "the request's deadline passed before the next attempt"
                return result
            outcome = await attempt(current, AttemptContext(number, deadline))
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
                    verdict = await self._stub.ReportOutcome(report, timeout=self._call_timeout(deadline),
                                                             metadata=self._metadata)
                    self._shared.note(True)
                except grpc.RpcError as e:
                    if not unreachable(e):
                        result.error = f"failoverd refused the report: {e.details()}"
                        return result
                    self._note_down(e)
            if verdict is None:
                self._buffer(report)
                return await self._run_static(chain, plan.decision_id, list(plan.attempts), tried, attempt,
                                              deadline, result)
            record.verdict, record.reason = verdict_of(verdict.verdict), reason_of(verdict.reason)
            for event in verdict_events(chain, current.target, verdict):
                emit(self._on_event, event)
            if verdict.verdict == decision_pb2.VERDICT_RETRY_SAME:
                delay = verdict.retry_delay.ToNanoseconds() / 1e9
                if self._past(deadline, delay):
                    result.error = "the request's deadline comes before the retry delay ends"
                    return result
                await asyncio.sleep(delay)
            elif verdict.verdict == decision_pb2.VERDICT_TRY_NEXT:
                current = verdict.next_attempt
            else:
                result.error = verdict.error or describe(outcome.failure)
                return result
            number += 1
        result.error = f"gave up after {MAX_STEPS} attempts"
        return result

    # --- internals -----------------------------------------------------------
    def _call_timeout(self, deadline: Optional[float]) -> float:
        if deadline is None:
            return self._timeout
        return max(0.0, min(self._timeout, deadline - asyncio.get_running_loop().time()))

    @staticmethod
    def _past(deadline: Optional[float], wait: float) -> bool:
        return deadline is not None and deadline - asyncio.get_running_loop().time() <= wait

    async def _run_static(self, chain: str, decision_id: str, plan: List[decision_pb2.Attempt], tried: List[str],
                          attempt: AsyncAttemptFn, deadline: Optional[float], result: LoopResult) -> LoopResult:
        result.fail_static = True
        emit(self._on_event, ClientEvent("fail_static", chain, message=self._shared.last_cause))
        failures = []
        number = len(result.attempts)
        for a in plan:
            if a.target in tried:
                continue
            if self._past(deadline, 0):
                result.error = "the request's deadline passed before the next attempt"
                return result
            number += 1
            outcome = await attempt(a, AttemptContext(number, deadline))
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

    def _start(self) -> None:
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._background())

    def _buffer(self, report: decision_pb2.ReportOutcomeRequest) -> None:
        if self._shared.buffer(report) >= BATCH and self._wake is not None:
            self._wake.set()

    def _note_down(self, error: grpc.RpcError) -> None:
        was_down = self._shared.down()
        self._shared.note(False, f"{error.code().name}: {error.details()}")
        if not was_down and self._wake is not None:
            self._wake.set()

    async def _background(self) -> None:
        assert self._wake is not None
        while True:
            probe_after = self._shared.probe_after()
            try:
                await asyncio.wait_for(self._wake.wait(),
                                       probe_after if probe_after is not None else self._flush_interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            if probe_after is not None and not await self._probe():
                continue
            if self._shared.buffered():
                await self._flush()

    async def _probe(self) -> bool:
        try:
            await self._stub.StreamOutcomes(iter(()), timeout=self._timeout, metadata=self._metadata)
            reached = True
        except grpc.RpcError as e:
            reached = not unreachable(e)
        self._shared.note(reached)
        return reached

    async def _send_batch(self, batch: List[decision_pb2.ReportOutcomeRequest], timeout: float) -> Any:
        """As Client._send_batch."""
        if self._shared.asks_for_batches():
            try:
                return await self._stub.ReportOutcomes(decision_pb2.ReportOutcomesRequest(outcomes=batch),
                                                       timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._shared.note_no_batches()
        return await self._stub.StreamOutcomes(iter(batch), timeout=timeout, metadata=self._metadata)

    async def _flush(self, deadline: Optional[float] = None) -> int:
        """As Client._flush: with a deadline (close), also to a failoverd last seen down."""
        delivered = 0
        while deadline is not None or not self._shared.down():
            timeout = self._timeout if deadline is None else min(self._timeout, deadline - time.monotonic())
            if timeout <= 0:
                return delivered
            batch = self._shared.take()
            if not batch:
                return delivered
            try:
                summary = await self._send_batch(batch, timeout)
                self._shared.note(True)
                delivered += sum(max(r.count, 1) for r in batch) if summary.refused == 0 else summary.accepted
            except grpc.RpcError as e:
                if not unreachable(e):
                    continue
                self._shared.note(False)
                self._shared.requeue(batch)
                return delivered
        return delivered
