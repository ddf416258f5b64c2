# SPDX-License-Identifier: Apache-2.0
"""Typed errors: one class per canonical gRPC code, all subclasses of fp8d.Error.

    try:
        client.get("jobs/nope")
    except fp8d.NotFound as e:
        print(e.code, e.message)   # grpc.StatusCode.NOT_FOUND, "job jobs/nope not found"
"""
import grpc


class Error(Exception):
    """A failed call. `code` is the grpc.StatusCode, `message` the daemon's text."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return f"{self.code.name}: {self.message}"


class Cancelled(Error):
    code = grpc.StatusCode.CANCELLED


class Unknown(Error):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(Error, ValueError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(Error, TimeoutError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(Error, LookupError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(Error):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(Error):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(Error):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(Error):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(Error):
    code = grpc.StatusCode.ABORTED


class OutOfRange(Error):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(Error):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(Error):
    code = grpc.StatusCode.INTERNAL


class Unavailable(Error):
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(Error):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(Error):
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE = {cls.code: cls for cls in (
    Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
    PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange, Unimplemented,
    Internal, Unavailable, DataLoss, Unauthenticated)}


def from_rpc_error(e):
    """The typed error for a grpc.RpcError (raised by a call or a stream)."""
    code = e.code() if callable(getattr(e, "code", None)) else grpc.StatusCode.UNKNOWN
    details = e.details() if callable(getattr(e, "details", None)) else str(e)
    cls = _BY_CODE.get(code, Error)
    return cls(details or code.name, code)
