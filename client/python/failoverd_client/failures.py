"""Building the Failure to report from what the caller saw."""
from __future__ import annotations

import errno
import json
import socket
from typing import Any, Iterable, List, Mapping, Optional, Tuple, Union

import grpc

from .v1 import decision_pb2

# What failure_from_response keeps of a reply: the headers with reset times,
# and at most 16 KiB of body. failoverd reads the provider's error code,
# message and reset time from them.
MAX_BODY_BYTES = 16 * 1024
MAX_HEADERS = 32

Headers = Union[Mapping[str, Union[str, bytes]], Iterable[Tuple[str, Union[str, bytes]]]]


def _is_reset_header(name: str) -> bool:
    name = name.lower()
    return name == "retry-after" or name.startswith(("x-ratelimit-", "anthropic-ratelimit-"))


Body = Union[bytes, bytearray, str, Mapping[str, Any], List[Any], None]


def _body_bytes(body: Body) -> bytes:
    """The reply's body as bytes, whatever form the SDK handed it over in."""
    if body is None:
        return b""
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8", "replace")
    try:  # a body the SDK already parsed (the openai and anthropic SDKs' `e.body`)
        return json.dumps(body, ensure_ascii=False, default=str).encode("utf-8", "replace")
    except (TypeError, ValueError):
        return str(body).encode("utf-8", "replace")


def failure_from_response(status: int, headers: Headers = (), body: Body = b"") -> decision_pb2.Failure:
    """The Failure for an upstream's HTTP error reply: status, headers, and the body
    as bytes, text, or an object the SDK already parsed (a dict, a list)."""
    failure = decision_pb2.Failure(http_status=status, phase=decision_pb2.PHASE_BEFORE_RESPONSE)
    pairs = headers.items() if hasattr(headers, "items") else headers
    for name, value in pairs:  # type: ignore[union-attr]
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if _is_reset_header(name) and len(failure.response.headers) < MAX_HEADERS and len(name) + len(value) <= 1024:
            failure.response.headers[name.lower()] = value
    failure.response.body = _body_bytes(body)[:MAX_BODY_BYTES]
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


def _causes(error: BaseException) -> List[BaseException]:
    """`error` and what it wraps, outermost first: the chained cause or context,
    urllib's `reason`, aiohttp's `os_error`, an exception passed as an argument."""
    chain: List[BaseException] = []
    pending: List[Any] = [error]
    while pending and len(chain) < 16:
        e = pending.pop(0)
        if not isinstance(e, BaseException) or any(e is seen for seen in chain):
            continue
        chain.append(e)
        pending.extend([getattr(e, "__cause__", None), getattr(e, "__context__", None), getattr(e, "reason", None),
                        getattr(e, "os_error", None)])
        pending.extend(a for a in getattr(e, "args", ()) if isinstance(a, BaseException))
    return chain


def _builtin_transport(e: BaseException) -> int:
    """The transport error of a standard-library exception, or UNSPECIFIED."""
    import ssl

    if isinstance(e, ConnectionRefusedError):
        return decision_pb2.TRANSPORT_ERROR_CONNECT_REFUSED
    if isinstance(e, socket.gaierror):
        return decision_pb2.TRANSPORT_ERROR_DNS
    if isinstance(e, (ssl.SSLError, ssl.CertificateError)):
        return decision_pb2.TRANSPORT_ERROR_TLS
    if isinstance(e, (TimeoutError, socket.timeout)):
        return decision_pb2.TRANSPORT_ERROR_TIMEOUT
    if isinstance(e, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        return decision_pb2.TRANSPORT_ERROR_RESET
    if isinstance(e, OSError) and e.errno in (errno.ECONNREFUSED,):
        return decision_pb2.TRANSPORT_ERROR_CONNECT_REFUSED
    if isinstance(e, OSError) and e.errno in (errno.ETIMEDOUT,):
        return decision_pb2.TRANSPORT_ERROR_TIMEOUT
    if isinstance(e, OSError) and e.errno in (errno.ECONNRESET, errno.EPIPE):
        return decision_pb2.TRANSPORT_ERROR_RESET
    return decision_pb2.TRANSPORT_ERROR_UNSPECIFIED


# Library error types by class name (requests, urllib3, httpx, httpcore,
# aiohttp, and the openai and anthropic SDKs), so none of them has to be
# installed to be recognised. The first rule a name matches decides.
_NAMED: List[Tuple[Tuple[str, ...], int]] = [
    (("Timeout",), decision_pb2.TRANSPORT_ERROR_TIMEOUT),  # ConnectTimeout, ReadTimeout, APITimeoutError, ...
    (("SSL", "Certificate"), decision_pb2.TRANSPORT_ERROR_TLS),
    (("NameResolution",), decision_pb2.TRANSPORT_ERROR_DNS),
    (("RemoteProtocolError", "ServerDisconnected", "ReadError", "WriteError", "ProtocolError",
      "ChunkedEncodingError", "ClientPayloadError", "ConnectionResetError"), decision_pb2.TRANSPORT_ERROR_RESET),
    (("ConnectError", "ConnectionError", "ConnectorError", "NewConnectionError", "APIConnectionError"),
     decision_pb2.TRANSPORT_ERROR_CONNECT_REFUSED),
]


def _named_transport(e: BaseException) -> int:
    names = [cls.__name__ for cls in type(e).__mro__]
    for patterns, transport in _NAMED:
        if any(p in name for name in names for p in patterns):
            return transport
    return decision_pb2.TRANSPORT_ERROR_UNSPECIFIED


def _is_cancel(e: BaseException) -> bool:
    import asyncio
    import concurrent.futures

    return isinstance(e, (asyncio.CancelledError, concurrent.futures.CancelledError, KeyboardInterrupt))


def failure_from_exception(error: BaseException, after_first_byte: bool = False) -> decision_pb2.Failure:
    """The Failure for a call that got no HTTP reply: refused, DNS, TLS, reset,
    timeout. Takes what the caller's library raised (requests, httpx, aiohttp,
    urllib, the openai and anthropic SDKs, or a plain socket error) and follows
    the causes it wraps to the one that says what happened. A caller's own
    cancel is reported as cancelled, which never counts against the target."""
    phase = decision_pb2.PHASE_AFTER_FIRST_BYTE if after_first_byte else decision_pb2.PHASE_BEFORE_RESPONSE
    message = f"{type(error).__name__}: {error}"[:1024]
    chain = _causes(error)
    # A cancel is the caller's own unless a deadline stands above it (asyncio
    # raises a timeout from the cancel it used to end the call).
    for e in chain:
        if _builtin_transport(e) == decision_pb2.TRANSPORT_ERROR_TIMEOUT or _named_transport(e) == \
                decision_pb2.TRANSPORT_ERROR_TIMEOUT:
            break
        if _is_cancel(e):
            return decision_pb2.Failure(cancelled=True, message=message, phase=phase)
    transport = decision_pb2.TRANSPORT_ERROR_UNSPECIFIED
    # The innermost standard error says most (a refused connection under
    # httpx's ConnectError); a library's own type decides when there is none.
    for e in reversed(chain):
        transport = _builtin_transport(e)
        if transport != decision_pb2.TRANSPORT_ERROR_UNSPECIFIED:
            break
    if transport == decision_pb2.TRANSPORT_ERROR_UNSPECIFIED:
        for e in chain:
            transport = _named_transport(e)
            if transport != decision_pb2.TRANSPORT_ERROR_UNSPECIFIED:
                break
    return decision_pb2.Failure(transport_error=transport, message=message, phase=phase)
