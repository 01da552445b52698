"""The failoverd decision loop and a watcher, in Python.

Stubs come from proto/ (see gen_stubs.sh); run with Debian's /usr/bin/python3,
which has python3-grpcio and python3-protobuf.
"""
import time

from failover.v1 import decision_pb2


class UpstreamError(Exception):
    pass


# What failover_from_response keeps of a reply: the headers with reset times,
# and at most 16 KiB of body. failoverd reads the provider's error code,
# message and reset time from them.
MAX_BODY_BYTES = 16 * 1024
MAX_HEADERS = 32


def is_reset_header(name):
    name = name.lower()
    return name == "retry-after" or name.startswith(("x-ratelimit-", "anthropic-ratelimit-"))


def failure_from_response(status, headers, body):
    """The Failure to report for an upstream's HTTP error reply.

    headers: a dict or (name, value) pairs, as any HTTP client gives them.
    body: bytes or str, as received.
    """
    failure = decision_pb2.Failure(http_status=status, phase=decision_pb2.PHASE_BEFORE_RESPONSE)
    pairs = headers.items() if hasattr(headers, "items") else headers
    for name, value in pairs:
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if is_reset_header(name) and len(failure.response.headers) < MAX_HEADERS and len(name) + len(value) <= 1024:
            failure.response.headers[name.lower()] = value
    if isinstance(body, str):
        body = body.encode("utf-8", "replace")
    failure.response.body = bytes(body[:MAX_BODY_BYTES])
    return failure


def run_request(decide, chain, call_upstream, body_bytes=0):
    """Picks, attempts, reports and follows the verdict until DONE or FAIL.

    call_upstream(attempt) returns (True, result) on success, or on failure
    (False, failure) with a decision_pb2.Failure (see failure_from_response)
    or (False, http_status, message). Returns (target, result).
    """
    plan = decide.PickTarget(decision_pb2.PickTargetRequest(chain=chain, body_bytes=body_bytes))
    attempt, number = plan.attempts[0], 1
    while True:
        outcome = call_upstream(attempt)
        report = decision_pb2.ReportOutcomeRequest(decision_id=plan.decision_id, chain=chain,
                                                   target=attempt.target, attempt=number)
        if outcome[0]:
            report.success.SetInParent()
        elif isinstance(outcome[1], decision_pb2.Failure):
            report.failure.CopyFrom(outcome[1])
        else:
            report.failure.http_status = outcome[1]
            report.failure.message = outcome[2]
            report.failure.phase = decision_pb2.PHASE_BEFORE_RESPONSE
        verdict = decide.ReportOutcome(report)
        if verdict.verdict == decision_pb2.VERDICT_DONE:
            return attempt.target, outcome[1]
        if verdict.verdict == decision_pb2.VERDICT_FAIL:
            raise UpstreamError(verdict.error)
        if verdict.verdict == decision_pb2.VERDICT_RETRY_SAME:
            time.sleep(verdict.retry_delay.ToTimedelta().total_seconds())
        else:
            attempt = verdict.next_attempt
        number += 1


def watch(decide, chains=(), after_sequence=None):
    """Yields events; pass the last sequence seen to resume after a drop."""
    request = decision_pb2.WatchEventsRequest(chains=list(chains))
    if after_sequence is not None:
        request.after_sequence = after_sequence
    yield from decide.WatchEvents(request)
