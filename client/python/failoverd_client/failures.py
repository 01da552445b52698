"""Building the Failure to report from what the caller saw."""
from __future__ import annotations

import errno
import socket
from typing import Iterable, Mapping, Optional, Tuple, Union

import grpc
from failover.v1 import decision_pb2

# What failure_from_response keeps of a reply: the headers with reset times,
# and at most 16 KiB of body. failoverd reads the provider's error code,
# message and reset time from them.
MAX_BODY_BYTES = 16 * 1024
MAX_HEADERS = 32

Headers = Union[Mapping[str, Union[str, bytes]], Iterable[Tuple[str, Union[str, bytes]]]]


def _is_reset_header(name: str) -> bool:
    name = name.lower()
    return name == "retry-after" or name.startswith(("x-ratelimit-", "anthropic-ratelimit-"))


def failure_from_response(status: int, headers: Headers = (), body: Union[bytes, str] = b"") -> decision_pb2.Failure:
    """The Failure for an upstream's HTTP error reply (status, headers, body as received)."""
    failure = decision_pb2.Failure(http_status=status, phase=decision_pb2.PHASE_BEFORE_RESPONSE)
    pairs = headers.items() if hasattr(headers, "items") else headers
    for name, value in pairs:  # type: ignore[union-attr]
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if _is_reset_header(name) and len(failure.response.headers) < MAX_HEADERS and len(name) + len(value) <= 1024:
            failure.response.headers[name.lower()] = value
    if isinstance(body, str):
        body = body.encode("utf-8", "replace")
    failure.response.body = bytes(body[:MAX_BODY_BYTES])
    return failure


def failure_from_status(status: int, message: str = "", retry_after: Optional[float] = None) -> decision_pb2.Failure:
    """The Failure for an HTTP status when the reply itself is not at hand."""
    failure = decision_pb2.Failure(http_status=status, message=message, phase=decision_pb2.PHASE_BEFORE_RESPONSE)
    if retry_after is not None:
        failure.retry_after.FromNanoseconds(int(retry_after * 1e9))
    return failure


def failure_from_grpc(error: grpc.RpcError) -> decision_pb2.Failure:
    """The Failure for an upstream reached over gRPC that answered with an error."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    return decision_pb2.Failure(grpc_code=code.value[0], message=details or "",
                                phase=decision_pb2.PHASE_BEFORE_RESPONSE)


def failure_from_exception(error: BaseException, after_first_byte: bool = False) -> decision_pb2.Failure:
    """The Failure for a call that got no HTTP reply: refused, DNS, TLS, reset, timeout."""
    import ssl

    transport = decision_pb2.TRANSPORT_ERROR_UNSPECIFIED
    if isinstance(error, ConnectionRefusedError):
        transport = decision_pb2.TRANSPORT_ERROR_CONNECT_REFUSED
    elif isinstance(error, socket.gaierror):
        transport = decision_pb2.TRANSPORT_ERROR_DNS
    elif isinstance(error, ssl.SSLError):
        transport = decision_pb2.TRANSPORT_ERROR_TLS
    elif isinstance(error, (TimeoutError, socket.timeout)):
        transport = decision_pb2.TRANSPORT_ERROR_TIMEOUT
    elif isinstance(error, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        transport = decision_pb2.TRANSPORT_ERROR_RESET
    elif isinstance(error, OSError) and error.errno in (errno.ECONNREFUSED,):
        transport = decision_pb2.TRANSPORT_ERROR_CONNECT_REFUSED
    elif isinstance(error, OSError) and error.errno in (errno.ETIMEDOUT,):
        transport = decision_pb2.TRANSPORT_ERROR_TIMEOUT
    return decision_pb2.Failure(
        transport_error=transport, message=f"{type(error).__name__}: {error}"[:1024],
        phase=decision_pb2.PHASE_AFTER_FIRST_BYTE if after_first_byte else decision_pb2.PHASE_BEFORE_RESPONSE)
