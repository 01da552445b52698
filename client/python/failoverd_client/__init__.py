"""failoverd's client for Python: the decision loop, fail-static when failoverd
is away, and helpers that build the Failure to report.

    from failoverd_client import Client, AttemptOutcome, failure_from_exception

    with Client("failoverd:50051", token=DECIDE_TOKEN) as client:
        result = client.run("assistant-llm", lambda attempt, ctx: call_upstream(attempt))

run() raises FailoverdError (Unauthenticated, UnknownChain, FailoverdUnreachable)
when the request cannot be served because of the setup; upstream failures are
in the result. The asyncio form is failoverd_client.aio.AsyncClient; the
generated messages and stubs are failoverd_client.v1 (decision_pb2, ...).
"""
from ._core import (AttemptContext, AttemptOutcome, AttemptRecord, ClientEvent, EventHook, LoopResult, Reason,
                    Verdict)
from .client import Client, open_channel
from .errors import FailoverdError, FailoverdUnreachable, Unauthenticated, UnknownChain
from .failures import failure_from_exception, failure_from_grpc, failure_from_response, failure_from_status

__all__ = ["Client", "AttemptContext", "AttemptOutcome", "AttemptRecord", "ClientEvent", "EventHook", "LoopResult",
           "Reason", "Verdict", "open_channel", "FailoverdError", "FailoverdUnreachable", "Unauthenticated",
           "UnknownChain", "failure_from_response", "failure_from_status", "failure_from_grpc",
           "failure_from_exception"]
