"""Exceptions raised by shardline.Client: one class per kind of gRPC status the coordinator uses.

Every error carries the gRPC status code (`code`, a grpc.StatusCode) and the coordinator's
message (`message`), which for a bad spec names the field and value, e.g.
"model.n_head: 5 does not divide model.n_embd 64".
"""
from typing import Optional

import grpc


class ShardlineError(Exception):
    """Base class of every error the client raises."""

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None):
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        name = self.code.name if self.code is not None else "ERROR"
        return "%s: %s" % (name, self.message)


class InvalidSpecError(ShardlineError):
    """INVALID_ARGUMENT: a bad job spec or request; the message names the field and value."""


class NotFoundError(ShardlineError):
    """NOT_FOUND: no such job or checkpoint, or no coordinator configured."""


class UnauthenticatedError(ShardlineError):
    """UNAUTHENTICATED or PERMISSION_DENIED: a missing or wrong token."""


class UnavailableError(ShardlineError):
    """UNAVAILABLE or DEADLINE_EXCEEDED: the coordinator cannot be reached in time."""


class FailedPreconditionError(ShardlineError):
    """FAILED_PRECONDITION: the request is illegal in the job's current state."""


class ExportError(ShardlineError):
    """`shardctl export`, which Client.export runs, failed or could not be found."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidSpecError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: UnauthenticatedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: UnavailableError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
}


def from_rpc_error(error: grpc.RpcError) -> ShardlineError:
    """The ShardlineError subclass for a failed call, with its code and the server's message."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else None
    return _BY_CODE.get(code, ShardlineError)(details or str(error), code)
