# SPDX-License-Identifier: Apache-2.0
"""Python client for fp8d (fp8d.v1.JobService).

    import fp8d
    with fp8d.Client("fp8d.example:50051", token=TOKEN, ca="ca.crt") as c:
        job = c.create("job.yaml")
        done = c.wait(job.name, timeout=3600)

The generated messages are fp8d.job_pb2 (Job, JobState, ...) and fp8d.job_service_pb2.
"""
from fp8d.errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded, Error,
                         FailedPrecondition, Internal, InvalidArgument, NotFound, OutOfRange,
                         PermissionDenied, ResourceExhausted, Unauthenticated, Unavailable,
                         Unimplemented, Unknown)
from fp8d.v1 import job_pb2, job_service_pb2
from fp8d.client import Client, TERMINAL_STATES, is_terminal, job_name
from fp8d.job_file import job_from_dict, load_job_file, parse_duration

Job = job_pb2.Job
JobState = job_pb2.JobState

__all__ = [
    "Client", "Job", "JobState", "TERMINAL_STATES", "is_terminal", "job_name", "job_from_dict",
    "load_job_file", "parse_duration", "job_pb2", "job_service_pb2",
    "Error", "Aborted", "AlreadyExists", "Cancelled", "DataLoss", "DeadlineExceeded",
    "FailedPrecondition", "Internal", "InvalidArgument", "NotFound", "OutOfRange",
    "PermissionDenied", "ResourceExhausted", "Unauthenticated", "Unavailable", "Unimplemented",
    "Unknown",
]
