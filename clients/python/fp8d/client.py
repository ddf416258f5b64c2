# SPDX-License-Identifier: Apache-2.0
"""fp8d.Client: the calls of fp8d.v1.JobService with typed errors, paging and waiting.

Calls that are safe to repeat (reads, cancel, delete, and create with its request id) are
retried on UNAVAILABLE, each time on a new channel, with exponential backoff; watch() resumes a
broken stream from the last version it saw.
"""
import os
import time
import uuid

import grpc

from fp8d import errors
from fp8d.job_file import job_from_dict, load_job_file
from fp8d.v1 import job_pb2, job_service_pb2 as svc_pb2, job_service_pb2_grpc as svc_grpc

DEFAULT_ADDRESS = "127.0.0.1:50051"
TERMINAL_STATES = (job_pb2.SUCCEEDED, job_pb2.FAILED, job_pb2.CANCELLED)


def job_name(name):
    """'abc' → 'jobs/abc', as fp8ctl accepts both."""
    return name if name.startswith("jobs/") else f"jobs/{name}"


def is_terminal(job):
    return job.state in TERMINAL_STATES


def _read_pem(value):
    if value is None or isinstance(value, bytes):
        return value
    with open(value, "rb") as f:
        return f.read()


class Client:
    """A connection to fp8d.

    address  host:port or unix:/path (default $FP8D_ADDR, else 127.0.0.1:50051)
    token    bearer token (default $FP8D_TOKEN)
    ca       PEM CA file (path or bytes): connect with TLS. tls=True uses the system roots.
    cert, key  client certificate and key (PEM path or bytes) for mTLS.
    server_name  the name the server certificate must carry, when it is not the address's host.
    timeout  seconds per unary call; retries  attempts on UNAVAILABLE for calls safe to repeat.
    options  gRPC channel arguments, as (key, value) pairs.
    """

    def __init__(self, address=None, token=None, ca=None, *, cert=None, key=None, tls=False,
                 server_name=None, timeout=30.0, retries=4, options=()):
        self.address = address or os.environ.get("FP8D_ADDR") or DEFAULT_ADDRESS
        token = token if token is not None else os.environ.get("FP8D_TOKEN")
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.timeout = timeout
        self.retries = max(1, retries)
        opts = dict(options)
        # Each channel gets its own connections, so the fresh channel of a retry (_connect)
        # does not inherit one that is stuck after the daemon went away.
        opts.setdefault("grpc.use_local_subchannel_pool", 1)
        if server_name:
            opts["grpc.ssl_target_name_override"] = server_name
        self._options = list(opts.items())
        self._creds = None
        if ca is not None or cert is not None or tls:
            self._creds = grpc.ssl_channel_credentials(root_certificates=_read_pem(ca),
                                                       private_key=_read_pem(key),
                                                       certificate_chain=_read_pem(cert))
        self._connect()

    def _connect(self):
        """A new channel: at the start, and for the next attempt after UNAVAILABLE.

        gRPC's own reconnection after a daemon restart can take its 20 s connect timeout or
        longer; a new channel connects at once. The old one is not closed, because another
        thread may still be using it; it closes when the last call on it lets it go.
        """
        if self._creds is not None:
            self._channel = grpc.secure_channel(self.address, self._creds, options=self._options)
        else:
            self._channel = grpc.insecure_channel(self.address, options=self._options)
        self._stub = svc_grpc.JobServiceStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- calls --------------------------------------------------------------------------------

    def create(self, job, request_id=None):
        """Submits a job: a Job message, a dict of Job fields, or a YAML/JSON job file path.

        With a request id (one is generated when not given) the call is idempotent, so it is
        retried on UNAVAILABLE without creating the job twice. Returns the stored Job.
        """
        if isinstance(job, job_pb2.Job):
            msg = job
        elif isinstance(job, dict):
            msg = job_from_dict(job)
        elif isinstance(job, (str, os.PathLike)):
            msg = load_job_file(job)
        else:
            raise TypeError(f"create: expected a Job, dict or file path, got {type(job).__name__}")
        req = svc_pb2.CreateJobRequest(job=msg, request_id=request_id or uuid.uuid4().hex)
        return self._unary("CreateJob", req)

    def get(self, name, full=False):
        """The job; full=True adds its attempts and events."""
        view = svc_pb2.JOB_VIEW_FULL if full else svc_pb2.JOB_VIEW_BASIC
        return self._unary("GetJob", svc_pb2.GetJobRequest(name=job_name(name), view=view))

    def list(self, state=None, label_selector=None, owner=None, kind=None, page_size=0):
        """Every matching job, newest first, fetching the pages as it goes.

        state and kind take the enum value or its name ("RUNNING", "TRAIN"); owner "me" is the
        caller; label_selector as kubectl's -l ("team=nlp,!draft").
        """
        req = svc_pb2.ListJobsRequest(page_size=page_size, label_selector=label_selector or "",
                                      owner=owner or "")
        if state is not None:
            req.state = job_pb2.JobState.Value(state) if isinstance(state, str) else state
        if kind is not None:
            req.kind = job_pb2.JobKind.Value(kind) if isinstance(kind, str) else kind
        while True:
            page = self._unary("ListJobs", req)
            yield from page.jobs
            if not page.next_page_token:
                return
            req.page_token = page.next_page_token

    def watch(self, name, timeout=None):
        """Yields the job now, then at every change, and stops after a terminal state.

        A stream broken by UNAVAILABLE is reopened from the last version seen. timeout bounds
        the whole watch (DeadlineExceeded when it runs out).
        """
        name = job_name(name)
        deadline = None if timeout is None else time.monotonic() + timeout
        since, failures = 0, 0
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise errors.DeadlineExceeded(f"{name}: watch ran past {timeout} s")
            stream = self._stub.WatchJob(svc_pb2.WatchJobRequest(name=name, since_version=since),
                                         metadata=self._metadata, timeout=left)
            try:
                for update in stream:
                    failures = 0
                    since = max(since, update.job.version)
                    yield update.job
                    if is_terminal(update.job):
                        return
                return  # the daemon ended the stream
            except grpc.RpcError as e:
                err = errors.from_rpc_error(e)
                if isinstance(err, errors.Unavailable) and failures + 1 < self.retries:
                    failures += 1
                    time.sleep(self._backoff(failures))
                    self._connect()
                    continue
                if isinstance(err, errors.DeadlineExceeded) and timeout is not None:
                    raise errors.DeadlineExceeded(f"{name}: watch ran past {timeout} s") from None
                raise err from None
            finally:
                stream.cancel()

    def wait(self, name, timeout=None):
        """Blocks until the job is SUCCEEDED, FAILED or CANCELLED and returns it.

        Raises DeadlineExceeded (also a TimeoutError) when timeout seconds pass first.
        """
        last = None
        try:
            for last in self.watch(name, timeout=timeout):
                if is_terminal(last):
                    return last
        except errors.DeadlineExceeded as e:
            state = job_pb2.JobState.Name(last.state) if last is not None else "unknown"
            raise errors.DeadlineExceeded(f"{e.message} (state {state})") from None
        job = self.get(name)  # the stream ended without a terminal update
        if is_terminal(job):
            return job
        raise errors.Unavailable(f"{job_name(name)}: watch ended in state "
                                 f"{job_pb2.JobState.Name(job.state)}")

    def cancel(self, name):
        """Asks the job to stop; returns it (CANCELLING or CANCELLED). Idempotent."""
        return self._unary("CancelJob", svc_pb2.CancelJobRequest(name=job_name(name)))

    def delete(self, name):
        """Deletes a finished job's record (never its output dir)."""
        self._unary("DeleteJob", svc_pb2.DeleteJobRequest(name=job_name(name)))

    def logs(self, name, rank=0, follow=False, attempt=0):
        """Yields the rank's log (its stderr) as bytes chunks; follow=True until the job ends."""
        req = svc_pb2.GetJobLogsRequest(name=job_name(name), rank=rank, attempt=attempt,
                                        follow=follow)
        stream = self._stub.GetJobLogs(req, metadata=self._metadata,
                                       timeout=None if follow else self.timeout)
        try:
            for chunk in stream:
                yield chunk.data
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        finally:
            stream.cancel()

    def server_info(self):
        """The daemon's version, commit and launcher kind."""
        return self._unary("GetServerInfo", svc_pb2.GetServerInfoRequest())

    # --- plumbing -----------------------------------------------------------------------------

    @staticmethod
    def _backoff(failure):
        return min(0.2 * 2 ** (failure - 1), 5.0)

    def _unary(self, method, request):
        """Calls JobService.<method>, retrying UNAVAILABLE on a new channel."""
        for attempt in range(1, self.retries + 1):
            try:
                return getattr(self._stub, method)(request, metadata=self._metadata,
                                                   timeout=self.timeout)
            except grpc.RpcError as e:
                err = errors.from_rpc_error(e)
                if not isinstance(err, errors.Unavailable) or attempt == self.retries:
                    raise err from None
            time.sleep(self._backoff(attempt))
            self._connect()
