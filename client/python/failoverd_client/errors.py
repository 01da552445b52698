"""What run() raises when the request cannot be served for a reason of the
caller's setup rather than of the upstreams: failoverd refused the call, or
cannot be reached and no plan for the chain is known. Upstream failures are
not raised: they are in LoopResult.error and LoopResult.attempts."""
from __future__ import annotations

from typing import Optional

import grpc


class FailoverdError(Exception):
    """failoverd refused the call; `code` is the gRPC status code it answered with."""

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None):
        super().__init__(message)
        self.code = code


class FailoverdUnreachable(FailoverdError):
    """failoverd could not be reached (and no plan for the chain was seen to serve from)."""

    def __init__(self, address: str, cause: str):
        super().__init__(f"failoverd at {address} cannot be reached: {cause}", grpc.StatusCode.UNAVAILABLE)
        self.address = address
        self.cause = cause


class Unauthenticated(FailoverdError):
    """The token is missing, wrong, or not allowed this call."""


class UnknownChain(FailoverdError):
    """failoverd has no chain of that name."""

    def __init__(self, chain: str, message: str):
        super().__init__(message, grpc.StatusCode.NOT_FOUND)
        self.chain = chain


def refusal(error: grpc.RpcError, chain: str) -> FailoverdError:
    """The typed exception for a call failoverd answered with an error."""
    code = error.code() if hasattr(error, "code") else None
    details = (error.details() if hasattr(error, "details") else None) or str(code)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return Unauthenticated(details, code)
    if code == grpc.StatusCode.NOT_FOUND:
        return UnknownChain(chain, details)
    return FailoverdError(details, code)
