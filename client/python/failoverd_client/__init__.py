"""failoverd's client for Python: the decision loop, fail-static when failoverd
is away, and helpers that build the Failure to report.

    from failoverd_client import Client, AttemptOutcome, failure_from_status

    client = Client("failoverd:50051", token=DECIDE_TOKEN)
    result = client.run("assistant-llm", lambda attempt, ctx: call_upstream(attempt))

The asyncio form is failoverd_client.aio.AsyncClient.
"""
from ._core import AttemptContext, AttemptOutcome, AttemptRecord, LoopResult
from .client import Client, open_channel
from .failures import failure_from_exception, failure_from_grpc, failure_from_response, failure_from_status

__all__ = ["Client", "AttemptContext", "AttemptOutcome", "AttemptRecord", "LoopResult", "open_channel",
           "failure_from_response", "failure_from_status", "failure_from_grpc", "failure_from_exception"]
