#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Remote and secure API, end to end, with real processes and certificates made by openssl.

  remote_api_test.py --fp8d BIN --worker BIN --proto-dir DIR --fp8ctl BIN --real-worker BIN
                     --corpus TEXT [--only NAME]

Each case starts its own fp8d and ends it. Cases: non-loopback refusal, TLS + tokens (every call,
UNAUTHENTICATED, PERMISSION_DENIED, plaintext to the TLS port), mTLS (own CA accepted, another
CA refused), certificate and token rotation with SIGHUP, the HTTP listener, FP8 numerics of the
real fp8-worker in /metrics, and (as root) local isolation over the unix socket. Exit 0 when
every case passed, 1 otherwise; cases that need root say SKIP otherwise.
"""
import argparse
import hashlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import grpc

ARGS = None
PB = None  # generated modules: PB.job, PB.svc


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def make_ca(d, name):
    key, crt = f"{d}/{name}.key", f"{d}/{name}.crt"
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
       "-nodes", "-keyout", key, "-out", crt, "-days", "2", "-subj", f"/CN={name}")
    return key, crt


def make_cert(d, name, cn, ca, server=False):
    key, csr, crt = f"{d}/{name}.key", f"{d}/{name}.csr", f"{d}/{name}.crt"
    sh("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
       "-keyout", key, "-out", csr, "-subj", f"/CN={cn}")
    ext = f"{d}/{name}.ext"
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n" if server else
                "extendedKeyUsage=clientAuth\n")
    sh("openssl", "x509", "-req", "-in", csr, "-CA", ca[1], "-CAkey", ca[0], "-CAcreateserial",
       "-out", crt, "-days", "2", "-extfile", ext)
    return key, crt


def read(path):
    with open(path, "rb") as f:
        return f.read()


class Daemon:
    """fp8d as a child process; always ended by stop()."""

    def __init__(self, base, args, env=None, worker=None):
        self.data = f"{base}/data"
        self.addr_file = f"{base}/fp8d.addr"
        self.log = f"{base}/fp8d.log"
        argv = [ARGS.fp8d, "--data-dir", self.data, "--addr-file", self.addr_file,
                "--worker", worker or ARGS.worker, "--gpus", "none", "--cpu-slots", "4",
                "--cancel-grace-ms", "2000"] + args
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen(argv, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT,
                                     env=e)
        self.address = None

    def wait_address(self, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            if os.path.exists(self.addr_file):
                self.address = open(self.addr_file).read().strip()
                return self.address
            if self.proc.poll() is not None:
                raise AssertionError(f"fp8d exited {self.proc.returncode}:\n{self.log_text()}")
            time.sleep(0.05)
        raise AssertionError("fp8d wrote no address:\n" + self.log_text())

    def port(self):
        return self.address.rsplit(":", 1)[1]

    def log_text(self):
        return read(self.log).decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def stubs(channel):
    return PB.svc_grpc.JobServiceStub(channel)


def token_md(token):
    return [("authorization", f"Bearer {token}")] if token else []


def code_of(fn):
    try:
        fn()
    except grpc.RpcError as e:
        return e.code()
    return grpc.StatusCode.OK


def wait_serving(channel, md=(), service="", timeout=30):
    check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                request_serializer=lambda b: b, response_deserializer=lambda b: b)
    req = b"" if not service else b"\n" + bytes([len(service)]) + service.encode()
    end = time.time() + timeout
    last = None
    while time.time() < end:
        try:
            if check(req, metadata=md, timeout=2) == b"\x08\x01":
                return True
        except grpc.RpcError as e:
            last = e
        time.sleep(0.1)
    raise AssertionError(f"never SERVING ({service!r}): {last}")


def train_job(out_dir, data_glob, env=None):
    job = PB.job.Job()
    job.display_name = "remote-test"
    t = job.train
    t.model.preset = "tiny"
    t.data.train = data_glob
    t.precision.recipe = "bf16"
    t.training.max_steps = 20
    t.output_dir = out_dir
    for k, v in (env or {}).items():
        job.env[k] = v
    return job


def expect(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"  ok: {what}")


def cancel_and_wait(s, name, md=(), timeout=60):
    """Cancels and waits for CANCELLED: fp8d leaves running workers alone when it stops."""
    s.CancelJob(PB.svc.CancelJobRequest(name=name), metadata=md, timeout=30)
    end = time.time() + timeout
    while time.time() < end:
        if s.GetJob(PB.svc.GetJobRequest(name=name), metadata=md, timeout=10).state in (
                PB.job.CANCELLED, PB.job.SUCCEEDED, PB.job.FAILED):
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} did not end after CancelJob")


def tokens_file(base, extra=""):
    lines = []
    tokens = {}
    for principal, role in [("alice", "submitter"), ("bob", "submitter"), ("vera", "viewer"),
                            ("root-admin", "admin")]:
        tok = f"tok-{principal}-{os.getpid()}"
        tokens[principal] = tok
        lines.append(f"{hashlib.sha256(tok.encode()).hexdigest()} {principal} {role}")
    path = f"{base}/tokens"
    with open(path, "w") as f:
        f.write("# test tokens\n" + "\n".join(lines) + "\n" + extra)
    os.chmod(path, 0o600)
    return path, tokens


def shared_dir(base):
    d = f"{base}/shared"
    os.makedirs(d + "/data", exist_ok=True)
    os.chmod(base, 0o755)
    os.chmod(d, 0o1777)
    return d


# --- cases -------------------------------------------------------------------------------------

def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def case_nonloopback_refused(base):
    p = subprocess.run([ARGS.fp8d, "--listen", "0.0.0.0:0", "--data-dir", f"{base}/d"],
                       capture_output=True, text=True, timeout=30)
    expect(p.returncode == 2, f"fp8d --listen 0.0.0.0:0 without TLS/auth exits 2 (got {p.returncode})")
    expect("--tls-cert" in p.stderr and "--auth-tokens" in p.stderr,
           "its message names --tls-cert and --auth-tokens: " + p.stderr.strip().splitlines()[-1])
    p = subprocess.run([ARGS.fp8d, "--http-listen", "0.0.0.0:0", "--data-dir", f"{base}/d"],
                       capture_output=True, text=True, timeout=30)
    expect(p.returncode == 2 and "--http-listen" in p.stderr,
           "--http-listen 0.0.0.0:0 without TLS/auth exits 2 naming the flag")


def case_tls_tokens(base):
    ca = make_ca(base, "ca")
    srv = make_cert(base, "server", "localhost", ca, server=True)
    tok_path, tok = tokens_file(base)
    shared = shared_dir(base)
    d = Daemon(base, ["--listen", "0.0.0.0:0", "--tls-cert", srv[1], "--tls-key", srv[0],
                      "--auth-tokens", tok_path, "--allowed-root", shared,
                      "--worker-env-allow", "FP8_TEST_*"],
               env={"FP8_TEST_STEP_MS": "100", "FP8_TEST_STEPS": "600"})
    try:
        d.wait_address()
        target = f"127.0.0.1:{d.port()}"
        creds = grpc.ssl_channel_credentials(root_certificates=read(ca[1]))
        ch = grpc.secure_channel(target, creds, options=[("grpc.ssl_target_name_override", "localhost")])
        s = stubs(ch)
        wait_serving(ch, token_md(tok["vera"]))
        wait_serving(ch, token_md(tok["vera"]), "fp8d.v1.JobService")
        print("  ok: health SERVING for '' and 'fp8d.v1.JobService'")
        for version in ("v1", "v1alpha"):
            info = ch.stream_stream(f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                                    request_serializer=lambda b: b, response_deserializer=lambda b: b)
            answers = list(info(iter([b"\x3a\x00"]), timeout=10))  # list_services: ""
            expect(len(answers) == 1 and b"fp8d.v1.JobService" in answers[0],
                   f"reflection {version} lists fp8d.v1.JobService")
        sym = b"fp8d.v1.JobService"
        info = ch.stream_stream("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                                request_serializer=lambda b: b, response_deserializer=lambda b: b)
        answers = list(info(iter([b"\x22" + bytes([len(sym)]) + sym]), timeout=10))
        expect(b"fp8d/v1/job_service.proto" in answers[0] and b"fp8d/v1/job.proto" in answers[0],
               "reflection v1 file_containing_symbol returns job_service.proto with its imports")
        job = train_job(f"{shared}/out-a", f"{shared}/data/*.bin")
        req = PB.svc.CreateJobRequest(job=job, request_id="a1")
        a = s.CreateJob(req, metadata=token_md(tok["alice"]), timeout=30)
        expect(a.owner == "alice", f"CreateJob as alice over TLS: {a.name}, owner {a.owner}")
        g = s.GetJob(PB.svc.GetJobRequest(name=a.name), metadata=token_md(tok["vera"]), timeout=30)
        expect(g.name == a.name and g.owner == "alice", "GetJob as viewer")
        lst = s.ListJobs(PB.svc.ListJobsRequest(), metadata=token_md(tok["vera"]), timeout=30)
        expect(any(j.name == a.name for j in lst.jobs), "ListJobs as viewer")
        stream = s.WatchJob(PB.svc.WatchJobRequest(name=a.name), metadata=token_md(tok["vera"]), timeout=30)
        first = next(iter(stream))
        stream.cancel()
        expect(first.job.name == a.name, "WatchJob as viewer: first snapshot")
        expect(code_of(lambda: s.GetJob(PB.svc.GetJobRequest(name=a.name), timeout=10))
               == grpc.StatusCode.UNAUTHENTICATED, "GetJob without a token: UNAUTHENTICATED")
        expect(code_of(lambda: s.GetJob(PB.svc.GetJobRequest(name=a.name), metadata=token_md("wrong"),
                                        timeout=10)) == grpc.StatusCode.UNAUTHENTICATED,
               "GetJob with a wrong token: UNAUTHENTICATED")
        expect(code_of(lambda: s.CreateJob(PB.svc.CreateJobRequest(job=job), metadata=token_md(tok["vera"]),
                                           timeout=10)) == grpc.StatusCode.PERMISSION_DENIED,
               "CreateJob as viewer: PERMISSION_DENIED")
        expect(code_of(lambda: s.CancelJob(PB.svc.CancelJobRequest(name=a.name), metadata=token_md(tok["bob"]),
                                           timeout=10)) == grpc.StatusCode.PERMISSION_DENIED,
               "CancelJob of alice's job as bob: PERMISSION_DENIED")
        bad = train_job("/etc/fp8d-escape", f"{shared}/data/*.bin")
        try:
            s.CreateJob(PB.svc.CreateJobRequest(job=bad), metadata=token_md(tok["alice"]), timeout=10)
            raise AssertionError("a job writing to /etc was accepted")
        except grpc.RpcError as e:
            expect(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "job.train.output_dir" in e.details(),
                   "output_dir outside the allowed roots: INVALID_ARGUMENT " + e.details())
        c = s.CancelJob(PB.svc.CancelJobRequest(name=a.name), metadata=token_md(tok["alice"]), timeout=30)
        expect(c.state in (PB.job.CANCELLING, PB.job.CANCELLED), "CancelJob of her own job as alice")
        b = s.CreateJob(PB.svc.CreateJobRequest(job=train_job(f"{shared}/out-b", f"{shared}/data/*.bin")),
                        metadata=token_md(tok["bob"]), timeout=30)
        c = s.CancelJob(PB.svc.CancelJobRequest(name=b.name), metadata=token_md(tok["root-admin"]), timeout=30)
        expect(c.state in (PB.job.CANCELLING, PB.job.CANCELLED), "CancelJob of bob's job as admin")
        cancel_and_wait(s, a.name, token_md(tok["root-admin"]))
        cancel_and_wait(s, b.name, token_md(tok["root-admin"]))
        chunks = s.GetJobLogs(PB.svc.GetJobLogsRequest(name=a.name, rank=0), metadata=token_md(tok["vera"]),
                              timeout=10)
        try:
            for _ in chunks:
                pass
            expect(True, "GetJobLogs as viewer")
        except grpc.RpcError as e:
            expect(e.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.OK),
                   f"GetJobLogs as viewer answered {e.code()}")
        plain = grpc.insecure_channel(target)
        code = code_of(lambda: stubs(plain).GetJob(PB.svc.GetJobRequest(name=a.name),
                                                   metadata=token_md(tok["alice"]), timeout=5))
        expect(code == grpc.StatusCode.UNAVAILABLE, f"plaintext to the TLS port fails the handshake ({code})")
        plain.close()
        log = d.log_text()
        audit = [l for l in log.splitlines() if '"audit":true' in l]
        expect(any('"principal":"bob"' in l and '"result":"PERMISSION_DENIED"' in l and "CancelJob" in l for l in audit)
               and any('"principal":"vera"' in l and '"method":"CreateJob"' in l for l in audit)
               and any('"principal":"alice"' in l and '"method":"CreateJob"' in l and '"result":"OK"' in l for l in audit),
               f"audit lines for mutating calls, refused ones too ({len(audit)} lines)")
        ch.close()
    finally:
        d.stop()


def case_mtls(base):
    ca = make_ca(base, "ca")
    other = make_ca(base, "otherca")
    srv = make_cert(base, "server", "localhost", ca, server=True)
    alice = make_cert(base, "alice", "alice", ca)
    mallory = make_cert(base, "mallory", "alice", other)
    tok_path, _ = tokens_file(base, "- alice submitter\n")
    hport = free_port()
    d = Daemon(base, ["--listen", "0.0.0.0:0", "--tls-cert", srv[1], "--tls-key", srv[0],
                      "--tls-client-ca", ca[1], "--auth-tokens", tok_path, "--http-listen", f"127.0.0.1:{hport}"])
    try:
        d.wait_address()
        target = f"127.0.0.1:{d.port()}"
        opts = [("grpc.ssl_target_name_override", "localhost")]
        good = grpc.secure_channel(target, grpc.ssl_channel_credentials(read(ca[1]), read(alice[0]), read(alice[1])), opts)
        wait_serving(good)
        lst = stubs(good).ListJobs(PB.svc.ListJobsRequest(), timeout=10)
        expect(lst is not None, "mTLS: a client certificate from the configured CA (CN=alice) is served")
        bad = grpc.secure_channel(target, grpc.ssl_channel_credentials(read(ca[1]), read(mallory[0]), read(mallory[1])), opts)
        code = code_of(lambda: stubs(bad).ListJobs(PB.svc.ListJobsRequest(), timeout=5))
        expect(code == grpc.StatusCode.UNAVAILABLE, f"mTLS: a certificate from another CA is refused ({code})")
        none = grpc.secure_channel(target, grpc.ssl_channel_credentials(read(ca[1])), opts)
        code = code_of(lambda: stubs(none).ListJobs(PB.svc.ListJobsRequest(), timeout=5))
        expect(code == grpc.StatusCode.UNAVAILABLE, f"mTLS: no client certificate is refused ({code})")
        for c in (good, bad, none):
            c.close()
        url = f"https://127.0.0.1:{hport}/v1/jobs"
        code, _ = curl(url, "--cacert", ca[1], "--cert", alice[1], "--key", alice[0])
        expect(code == 200, f"HTTP mTLS: CN=alice from the configured CA reads /v1/jobs ({code})")
        code, _ = curl(url, "--cacert", ca[1], "--cert", mallory[1], "--key", mallory[0])
        expect(code == 0, f"HTTP mTLS: a certificate from another CA fails the handshake ({code})")
    finally:
        d.stop()


def case_rotation(base):
    ca1 = make_ca(base, "ca1")
    ca2 = make_ca(base, "ca2")
    s1 = make_cert(base, "s1", "localhost", ca1, server=True)
    s2 = make_cert(base, "s2", "localhost", ca2, server=True)
    tok_path, tok = tokens_file(base)
    shutil.copy(s1[0], f"{base}/server.key")
    shutil.copy(s1[1], f"{base}/server.crt")
    hport = free_port()
    d = Daemon(base, ["--listen", "0.0.0.0:0", "--tls-cert", f"{base}/server.crt",
                      "--tls-key", f"{base}/server.key", "--auth-tokens", tok_path, "--tls-reload-s", "1",
                      "--http-listen", f"127.0.0.1:{hport}"])
    try:
        d.wait_address()
        target = f"127.0.0.1:{d.port()}"
        opts = [("grpc.ssl_target_name_override", "localhost")]
        old = grpc.secure_channel(target, grpc.ssl_channel_credentials(read(ca1[1])), opts)
        wait_serving(old, token_md(tok["vera"]))
        new = grpc.secure_channel(target, grpc.ssl_channel_credentials(read(ca2[1])), opts)
        code = code_of(lambda: stubs(new).ListJobs(PB.svc.ListJobsRequest(), metadata=token_md(tok["vera"]), timeout=3))
        expect(code == grpc.StatusCode.UNAVAILABLE, "before rotation a client trusting only CA2 fails")
        new.close()
        hurl = f"https://127.0.0.1:{hport}/healthz"
        expect(curl(hurl, "--cacert", ca2[1])[0] == 0, "before rotation HTTPS with only CA2 fails")
        # Key and certificate replaced by rename, each atomically.
        shutil.copy(s2[0], f"{base}/server.key.new")
        shutil.copy(s2[1], f"{base}/server.crt.new")
        os.rename(f"{base}/server.key.new", f"{base}/server.key")
        os.rename(f"{base}/server.crt.new", f"{base}/server.crt")
        d.proc.send_signal(signal.SIGHUP)
        end = time.time() + 20
        ok = False
        while time.time() < end and not ok:
            ch = grpc.secure_channel(target, grpc.ssl_channel_credentials(read(ca2[1])), opts)
            ok = code_of(lambda: stubs(ch).ListJobs(PB.svc.ListJobsRequest(), metadata=token_md(tok["vera"]),
                                                    timeout=3)) == grpc.StatusCode.OK
            ch.close()
            time.sleep(0.3)
        expect(ok, "after swapping the files and SIGHUP a client trusting only CA2 connects")
        code, _ = curl(hurl, "--cacert", ca2[1])
        expect(code == 200, f"after SIGHUP the HTTPS listener serves the new certificate ({code})")
        expect(d.proc.poll() is None, "fp8d survived SIGHUP")
        old.close()
        # The tokens file is re-read on SIGHUP too: a bad one keeps the old tokens (and is logged),
        # a good one replaces them all.
        ch = grpc.secure_channel(target, grpc.ssl_channel_credentials(read(ca2[1])), opts)
        list_as = lambda token: code_of(lambda: stubs(ch).ListJobs(PB.svc.ListJobsRequest(),
                                                                   metadata=token_md(token), timeout=3))
        def replace_tokens(text):
            with open(tok_path + ".new", "w") as f:
                f.write(text)
            os.rename(tok_path + ".new", tok_path)
            d.proc.send_signal(signal.SIGHUP)
        replace_tokens("not-a-hash someone viewer\n")
        end = time.time() + 20
        while time.time() < end and "previous tokens stay in force" not in d.log_text():
            time.sleep(0.1)
        expect("previous tokens stay in force" in d.log_text(), "a bad tokens file on SIGHUP is logged")
        expect(list_as(tok["vera"]) == grpc.StatusCode.OK, "after a bad tokens file the old token still works")
        fresh = f"tok-fresh-{os.getpid()}"
        replace_tokens(f"{hashlib.sha256(fresh.encode()).hexdigest()} fresh viewer\n")
        end = time.time() + 20
        while time.time() < end and list_as(fresh) != grpc.StatusCode.OK:
            time.sleep(0.2)
        expect(list_as(fresh) == grpc.StatusCode.OK, "after SIGHUP a token added to the file works")
        expect(list_as(tok["vera"]) == grpc.StatusCode.UNAUTHENTICATED, "and a token removed from it is refused")
        ch.close()
    finally:
        d.stop()


def as_user(user, *argv):
    """Runs this script's client helper as `user`; returns (exit code, output)."""
    p = subprocess.run(["setpriv", f"--reuid={user}", f"--regid={pwd.getpwnam(user).pw_gid}",
                        "--init-groups", "/usr/bin/python3", os.path.abspath(__file__), "--client"] + list(argv),
                       capture_output=True, text=True, timeout=60, cwd="/")
    return p.returncode, (p.stdout + p.stderr).strip()


def client_main(argv):
    """Unprivileged helper: raw-bytes calls over a unix socket, so it needs no generated code."""
    op, sock = argv[0], argv[1]
    ch = grpc.insecure_channel(f"unix:{sock}")
    ident = dict(request_serializer=lambda b: b, response_deserializer=lambda b: b)
    try:
        if op == "cancel":
            name = argv[2].encode()
            ch.unary_unary("/fp8d.v1.JobService/CancelJob", **ident)(b"\n" + bytes([len(name)]) + name, timeout=10)
        elif op == "create":
            body = bytes.fromhex(argv[2])
            out = ch.unary_unary("/fp8d.v1.JobService/CreateJob", **ident)(body, timeout=10)
            print("CREATED " + out.hex())
        print("CODE OK")
    except grpc.RpcError as e:
        print(f"CODE {e.code().name} {e.details()}")
    return 0


def case_isolation(base):
    if os.geteuid() != 0:
        print("  SKIP: isolation needs root (useradd, setuid)")
        return
    user = "fp8dtest"
    created = False
    try:
        pwd.getpwnam(user)
    except KeyError:
        sh("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user)
        created = True
    try:
        isolation_as(base, user)
    finally:
        if created:
            subprocess.run(["userdel", user], capture_output=True)


def isolation_as(base, user):
    uid = pwd.getpwnam(user).pw_uid
    shared = shared_dir(base)
    sock = f"{base}/fp8d.sock"
    secret = "AWS_SECRET_ACCESS_KEY"
    # Root submits here too: its job runs as root only with --allow-root-jobs. JOB_OWN_VAR is no
    # built-in job env name: the operator admits it.
    d = Daemon(base, ["--listen", f"unix:{sock}", "--allowed-root", shared, "--allow-root-jobs",
                      "--job-env-allow", "JOB_OWN_VAR"],
               env={secret: "hunter2", "FP8_TEST_STEPS": "600"})
    try:
        d.wait_address()
        ch = grpc.insecure_channel(f"unix:{sock}")
        wait_serving(ch)
        s = stubs(ch)
        root_job = s.CreateJob(PB.svc.CreateJobRequest(job=train_job(f"{shared}/out-root", f"{shared}/data/*.bin",
                                                                     {"FP8_TEST_STEP_MS": "100", "FP8_TEST_STEPS": "600"})),
                               timeout=30)
        expect(root_job.owner == "root" and root_job.run_as_uid == 0,
               f"root over the unix socket owns {root_job.name}, which runs as uid {root_job.run_as_uid}")
        p = subprocess.run([ARGS.fp8d, "--listen", f"unix:{sock}", "--data-dir", f"{base}/other"],
                           capture_output=True, text=True, timeout=30)
        expect(p.returncode == 1 and "another process is serving" in p.stderr and os.path.exists(sock),
               "a second fp8d on the same unix socket exits 1 and leaves the socket alone")
        rc, out = as_user(user, "cancel", sock, root_job.name)
        expect("CODE PERMISSION_DENIED" in out, f"{user} cancelling root's job: {out}")
        body = PB.svc.CreateJobRequest(job=train_job(f"{shared}/out-user", f"{shared}/data/*.bin",
                                                     {"FP8_TEST_STEP_MS": "100", "FP8_TEST_STEPS": "600",
                                                      "JOB_OWN_VAR": "mine"})).SerializeToString()
        rc, out = as_user(user, "create", sock, body.hex())
        expect("CODE OK" in out, f"{user} creates a job over the unix socket")
        mine = PB.job.Job.FromString(bytes.fromhex(out.split("CREATED ")[1].split()[0]))
        expect(mine.owner == user and mine.run_as_uid == uid, f"owner {mine.owner}, run_as_uid {mine.run_as_uid}")
        os.symlink("/etc", f"{shared}/etc-link")
        bad = PB.svc.CreateJobRequest(job=train_job(f"{shared}/etc-link/fp8d", f"{shared}/data/*.bin")).SerializeToString()
        rc, out = as_user(user, "create", sock, bad.hex())
        expect("CODE INVALID_ARGUMENT" in out and "job.train.output_dir" in out,
               f"output through a symlink out of the allowed roots refused at create: {out}")
        pid = 0
        end = time.time() + 30
        while time.time() < end and pid == 0:
            full = s.GetJob(PB.svc.GetJobRequest(name=mine.name, view=PB.svc.JOB_VIEW_FULL), timeout=10)
            for att in full.attempts:
                for r in att.ranks:
                    pid = pid or r.pid
            time.sleep(0.1)
        expect(pid > 0, f"the job's rank 0 runs as pid {pid}")
        status = open(f"/proc/{pid}/status").read()
        real_uid = int([l for l in status.splitlines() if l.startswith("Uid:")][0].split()[1])
        expect(real_uid == uid, f"worker uid {real_uid} == owner uid {uid}")
        environ = read(f"/proc/{pid}/environ").decode(errors="replace").split("\0")
        expect(not any(e.startswith(secret + "=") for e in environ), f"{secret} from fp8d's env is absent in the worker's")
        expect("JOB_OWN_VAR=mine" in environ, "the job's own env reaches the worker")
        expect(f"HOME={pwd.getpwnam(user).pw_dir}" in environ, "HOME is the owner's")
        mode = os.stat(d.data).st_mode & 0o777
        db_mode = os.stat(f"{d.data}/fp8d.db").st_mode & 0o777
        expect(mode == 0o711 and db_mode == 0o600, f"data dir {oct(mode)}, DB {oct(db_mode)}")
        logs = [f for f in os.listdir(f"{d.data}/jobs/{mine.name.split('/')[1]}/attempt-1") if f.endswith(".log")]
        log_mode = os.stat(f"{d.data}/jobs/{mine.name.split('/')[1]}/attempt-1/{logs[0]}").st_mode & 0o777
        expect(log_mode == 0o640, f"rank log {oct(log_mode)}")
        end = time.time() + 30
        progressed = None
        while time.time() < end and not progressed:
            progressed = s.GetJob(PB.svc.GetJobRequest(name=mine.name), timeout=10).progress.step
            time.sleep(0.1)
        expect(progressed, f"the worker running as {user} reads its spec and reports progress (step {progressed})")
        for j in (mine, root_job):
            cancel_and_wait(s, j.name)
        ch.close()
    finally:
        d.stop()


def curl(url, *extra):
    p = subprocess.run(["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", *extra, url],
                       capture_output=True, text=True, timeout=30)
    body, _, code = p.stdout.rpartition("\n")
    return int(code or 0), body


def check_metrics_text(text):
    """promtool when installed, else python3-prometheus-client's parser."""
    if shutil.which("promtool"):
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        # promtool exits 0 on valid text; lint notes go to stderr without failing.
        expect(p.returncode == 0, f"promtool check metrics: {(p.stdout + p.stderr).strip() or 'ok'}")
    from prometheus_client.parser import text_string_to_metric_families
    families = {f.name: f for f in text_string_to_metric_families(text)}
    expect("fp8d_jobs" in families, f"prometheus_client parses /metrics ({len(families)} families)")
    return families


def sample(families, name, **labels):
    for f in families.values():
        for smp in f.samples:
            if smp.name == name and all(smp.labels.get(k) == v for k, v in labels.items()):
                return smp.value
    return None


def case_http(base):
    ca = make_ca(base, "ca")
    srv = make_cert(base, "server", "localhost", ca, server=True)
    tok_path, tok = tokens_file(base)
    shared = shared_dir(base)
    hport = free_port()
    d = Daemon(base, ["--listen", "0.0.0.0:0", "--tls-cert", srv[1], "--tls-key", srv[0],
                      "--auth-tokens", tok_path, "--allowed-root", shared, "--http-listen", f"127.0.0.1:{hport}"])
    try:
        d.wait_address()
        target = f"127.0.0.1:{d.port()}"
        ch = grpc.secure_channel(target, grpc.ssl_channel_credentials(read(ca[1])),
                                 options=[("grpc.ssl_target_name_override", "localhost")])
        wait_serving(ch)
        s = stubs(ch)
        url = f"https://127.0.0.1:{hport}"
        tls = ["--cacert", ca[1]]
        code, _ = curl(url + "/healthz", *tls)
        expect(code == 200, "/healthz 200")
        code, _ = curl(url + "/readyz", *tls)
        expect(code == 200, "/readyz 200 after recovery")
        short = s.CreateJob(PB.svc.CreateJobRequest(job=train_job(f"{shared}/out-s", f"{shared}/data/*.bin",
                                                                  {"FP8_TEST_STEPS": "3", "FP8_TEST_STEP_MS": "20"})),
                            metadata=token_md(tok["alice"]), timeout=30)
        long = s.CreateJob(PB.svc.CreateJobRequest(job=train_job(f"{shared}/out-l", f"{shared}/data/*.bin",
                                                                 {"FP8_TEST_STEPS": "600", "FP8_TEST_STEP_MS": "100"})),
                           metadata=token_md(tok["alice"]), timeout=30)
        end = time.time() + 60
        while time.time() < end:
            if s.GetJob(PB.svc.GetJobRequest(name=short.name), metadata=token_md(tok["vera"]), timeout=10).state == PB.job.SUCCEEDED:
                break
            time.sleep(0.1)
        jid = short.name.split("/")[1]
        auth = ["-H", f"Authorization: Bearer {tok['vera']}"]
        code, body = curl(f"{url}/v1/jobs/{jid}", *tls, *auth)
        expect(code == 200, f"curl /v1/jobs/{jid} with a viewer token: 200")
        env = dict(os.environ, FP8D_TOKEN=tok["vera"], HOME=base)
        p = subprocess.run([ARGS.fp8ctl, "--server", target, "--tls-ca", ca[1], "get", jid, "-o", "json"],
                           capture_output=True, text=True, env=env, timeout=30)
        expect(p.returncode == 0, f"fp8ctl get -o json over TLS with FP8D_TOKEN ({p.stderr.strip()})")
        import json
        expect(json.loads(body) == json.loads(p.stdout), "curl's JSON equals fp8ctl get -o json's")
        # fp8ctl contexts: the same call from ~/.config/fp8d/config.yaml alone.
        home = f"{base}/home"
        os.makedirs(f"{home}/.config/fp8d")
        with open(f"{home}/token", "w") as f:
            f.write(tok["vera"] + "\n")
        with open(f"{home}/.config/fp8d/config.yaml", "w") as f:
            f.write(f"contexts:\n  - {{name: here, server: '{target}', ca: {ca[1]}, token-file: {home}/token}}\n"
                    f"  - {{name: elsewhere, server: '127.0.0.1:1'}}\n")
        cenv = dict(os.environ, HOME=home)
        cenv.pop("FP8D_TOKEN", None)
        cenv.pop("FP8D_ADDR", None)
        p = subprocess.run([ARGS.fp8ctl, "config", "use-context", "here"], capture_output=True, text=True, env=cenv)
        expect(p.returncode == 0, "fp8ctl config use-context here")
        p = subprocess.run([ARGS.fp8ctl, "config", "get-contexts"], capture_output=True, text=True, env=cenv)
        expect("*        here" in p.stdout and "elsewhere" in p.stdout, "fp8ctl config get-contexts marks the current one")
        p = subprocess.run([ARGS.fp8ctl, "get", jid, "-o", "json"], capture_output=True, text=True, env=cenv, timeout=30)
        expect(p.returncode == 0 and json.loads(p.stdout)["name"] == short.name,
               f"fp8ctl get through the current context (TLS, token file) ({p.stderr.strip()})")
        p = subprocess.run([ARGS.fp8ctl, "--context", "here", "cancel", jid], capture_output=True, text=True,
                           env=cenv, timeout=30)
        expect(p.returncode == 3 and "PERMISSION_DENIED" in p.stderr,
               f"fp8ctl --context here cancel as the viewer: {p.stderr.strip()}")
        code, body = curl(f"{url}/v1/jobs/{jid}/events", *tls, *auth)
        events = json.loads(body).get("events", [])
        expect(code == 200 and any(e.get("to_state") == "SUCCEEDED" for e in events),
               f"/v1/jobs/{jid}/events lists {len(events)} events ending in SUCCEEDED")
        code, body = curl(f"{url}/v1/jobs", *tls, *auth)
        expect(code == 200 and len(json.loads(body)["jobs"]) == 2, "/v1/jobs lists both jobs")
        code, _ = curl(f"{url}/v1/jobs/{jid}", *tls)
        expect(code == 401, f"no token: {code}")
        code, _ = curl(f"{url}/v1/jobs/{jid}", *tls, "-H", "Authorization: Bearer nope")
        expect(code == 401, f"wrong token: {code}")
        code, _ = curl(f"{url}/v1/jobs", *tls, *auth, "-X", "POST", "-d", "{}")
        expect(code == 403, f"viewer POST /v1/jobs: {code}")
        code, _ = curl(f"{url}/v1/jobs/{jid}:cancel", *tls, *auth, "-X", "POST")
        expect(code == 403, f"viewer POST /v1/jobs/{{id}}:cancel: {code}")
        code, _ = curl(f"http://127.0.0.1:{hport}/healthz")
        expect(code != 200, f"plaintext HTTP to the TLS listener fails ({code})")
        # The long job runs: its progress shows up in /metrics.
        step = None
        end = time.time() + 60
        while time.time() < end and not step:
            code, text = curl(f"{url}/metrics", *tls, *auth)
            if code == 200:
                fams = {}
                from prometheus_client.parser import text_string_to_metric_families
                for f in text_string_to_metric_families(text):
                    fams[f.name] = f
                step = sample(fams, "fp8d_job_step", fp8d_job=long.name)
            time.sleep(0.3)
        families = check_metrics_text(text)
        expect(step and step > 0, f"fp8d_job_step for the running job: {step}")
        expect(sample(families, "fp8d_jobs", state="SUCCEEDED", kind="TRAIN") == 1, "fp8d_jobs{SUCCEEDED,TRAIN} == 1")
        expect(sample(families, "fp8d_jobs", state="RUNNING", kind="TRAIN") == 1, "fp8d_jobs{RUNNING,TRAIN} == 1")
        expect((sample(families, "fp8d_grpc_requests_total", method="CreateJob", code="OK") or 0) >= 2,
               "fp8d_grpc_requests_total counts CreateJob")
        cancel_and_wait(s, long.name, token_md(tok["alice"]))
        ch.close()
    finally:
        d.stop()


def real_worker_daemon(base):
    """fp8d with the real fp8-worker, metrics on plain HTTP (loopback, no auth), and shards of
    the corpus in a shared dir: (daemon, stubs, channel, shared dir, metrics URL)."""
    shared = shared_dir(base)
    sh(ARGS.real_worker, "prepare-data", "--text", ARGS.corpus, "--out", f"{shared}/data")
    hport = free_port()
    d = Daemon(base, ["--listen", "127.0.0.1:0", "--loopback-role", "submitter", "--allowed-root", shared,
                      "--http-listen", f"127.0.0.1:{hport}"],
               env={"FP8_NUM_THREADS": "1"}, worker=ARGS.real_worker)
    d.wait_address()
    ch = grpc.insecure_channel(d.address)
    wait_serving(ch)
    return d, stubs(ch), ch, shared, f"http://127.0.0.1:{hport}/metrics"


def long_running_job(shared, recipe, preset="tiny"):
    job = train_job(f"{shared}/out", f"{shared}/data/train_*.bin")
    job.train.model.preset = preset
    job.train.precision.recipe = recipe
    job.train.training.max_steps = 100000
    job.train.training.logging_steps = 1
    job.train.training.per_device_train_batch_size = 2
    return job


def wait_for_sample(url, name, job_name, timeout=120):
    """Scrapes until `name` has a sample for the job: (value, parsed families of that scrape)."""
    from prometheus_client.parser import text_string_to_metric_families
    value, text = None, None
    end = time.time() + timeout
    while time.time() < end and value is None:
        code, text = curl(url)
        if code == 200:
            value = sample({f.name: f for f in text_string_to_metric_families(text)}, name, fp8d_job=job_name)
        time.sleep(0.3)
    return value, check_metrics_text(text)


def case_fp8_metrics(base):
    """The real fp8-worker trains a tiny model with an FP8 recipe: its amax and saturation reach
    /metrics (plain HTTP on loopback, no auth), and the store commit histogram counts commits."""
    d, s, ch, shared, url = real_worker_daemon(base)
    try:
        created = s.CreateJob(PB.svc.CreateJobRequest(job=long_running_job(shared, "fp8-tensorwise")), timeout=30)
        amax, families = wait_for_sample(url, "fp8d_job_fp8_amax_max", created.name)
        expect(amax and amax > 0, f"fp8d_job_fp8_amax_max for the running FP8 job: {amax}")
        sat = sample(families, "fp8d_job_fp8_saturation_fraction", fp8d_job=created.name)
        expect(sat is not None and 0 <= sat <= 1, f"fp8d_job_fp8_saturation_fraction in [0, 1]: {sat}")
        got = s.GetJob(PB.svc.GetJobRequest(name=created.name), timeout=10).progress
        expect(got.HasField("fp8_amax_max"), f"GetJob's progress carries fp8_amax_max ({got.fp8_amax_max})")
        expect(not got.HasField("moe_load_cv"), "a dense model's progress has no moe_load_cv")
        commits = sample(families, "fp8d_store_commit_seconds_count")
        expect(commits and commits >= 2, f"fp8d_store_commit_seconds counts the create and the start ({commits})")
        cancel_and_wait(s, created.name)
        ch.close()
    finally:
        d.stop()


def case_moe_progress(base):
    """The real fp8-worker trains moe-tiny: the expert load it reports reaches GetJob, /metrics
    and fp8ctl describe."""
    d, s, ch, shared, url = real_worker_daemon(base)
    try:
        created = s.CreateJob(PB.svc.CreateJobRequest(job=long_running_job(shared, "bf16", "moe-tiny")), timeout=30)
        cv, families = wait_for_sample(url, "fp8d_job_moe_load_cv", created.name)
        expect(cv is not None and cv >= 0, f"fp8d_job_moe_load_cv for the running MoE job: {cv}")
        lo = sample(families, "fp8d_job_moe_load_min", fp8d_job=created.name)
        hi = sample(families, "fp8d_job_moe_load_max", fp8d_job=created.name)
        expect(lo is not None and hi is not None and 0 <= lo <= 1 <= hi,
               f"fp8d_job_moe_load_min <= 1 <= fp8d_job_moe_load_max ({lo}, {hi})")
        dropped = sample(families, "fp8d_job_moe_dropped_fraction", fp8d_job=created.name)
        expect(dropped is not None and 0 <= dropped <= 1, f"fp8d_job_moe_dropped_fraction in [0, 1]: {dropped}")
        aux = sample(families, "fp8d_job_moe_aux_loss", fp8d_job=created.name)
        expect(aux is not None and aux > 0, f"fp8d_job_moe_aux_loss of softmax-topk routing: {aux}")
        got = s.GetJob(PB.svc.GetJobRequest(name=created.name), timeout=10).progress
        expect(got.HasField("moe_load_cv") and got.HasField("moe_aux_loss"),
               f"GetJob's progress carries the expert load (cv {got.moe_load_cv})")
        p = subprocess.run([ARGS.fp8ctl, "--server", d.address, "describe", created.name],
                           capture_output=True, text=True, timeout=30)
        expect(p.returncode == 0 and "Expert load:" in p.stdout and "Aux loss:" in p.stdout,
               f"fp8ctl describe shows the expert load ({p.stdout.strip()} {p.stderr.strip()})")
        cancel_and_wait(s, created.name)
        # resources.expert_parallel reaches the ranks: two ranks share out the experts.
        job = train_job(f"{shared}/out-ep", f"{shared}/data/train_*.bin")
        job.train.model.preset = "moe-tiny"
        job.train.training.max_steps = 3
        job.resources.ranks = 2
        job.resources.expert_parallel = 2
        ep = s.CreateJob(PB.svc.CreateJobRequest(job=job), timeout=30)
        end = time.time() + 120
        got = s.GetJob(PB.svc.GetJobRequest(name=ep.name), timeout=10)
        while time.time() < end and got.state not in (PB.job.SUCCEEDED, PB.job.FAILED, PB.job.CANCELLED):
            time.sleep(0.3)
            got = s.GetJob(PB.svc.GetJobRequest(name=ep.name), timeout=10)
        expect(got.state == PB.job.SUCCEEDED, f"the expert-parallel job succeeds ({got.state}, {got.error.message})")
        degree = got.result.fields["expert_parallel"].number_value
        expect(degree == 2, f"its ranks ran with expert_parallel 2 ({degree})")
        ch.close()
    finally:
        d.stop()


CASES = [case_nonloopback_refused, case_tls_tokens, case_mtls, case_rotation, case_http, case_fp8_metrics,
         case_moe_progress, case_isolation]


def main():
    global ARGS, PB
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        return client_main(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--fp8d", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--proto-dir", required=True)
    ap.add_argument("--fp8ctl", required=True)
    ap.add_argument("--real-worker", required=True, help="fp8-worker, for the FP8 numerics in /metrics")
    ap.add_argument("--corpus", required=True, help="a text file fp8-worker prepare-data turns into shards")
    ap.add_argument("--only", default="")
    ARGS = ap.parse_args()
    # Under /tmp whatever $TMPDIR says: the isolation case's unprivileged worker must be able to
    # pass through every parent folder.
    work = tempfile.mkdtemp(prefix="fp8d-remote-", dir="/tmp")
    os.chmod(work, 0o755)
    gen = f"{work}/gen"
    os.makedirs(gen)
    sh("protoc", f"-I{ARGS.proto_dir}", f"--python_out={gen}", "fp8d/v1/job.proto", "fp8d/v1/job_service.proto")
    sys.path.insert(0, gen)
    import fp8d.v1.job_pb2 as job_pb2
    import fp8d.v1.job_service_pb2 as svc_pb2

    class Svc:
        pass
    svc_grpc = Svc()

    class Stub:
        def __init__(self, ch):
            u = lambda m, req, resp: ch.unary_unary(f"/fp8d.v1.JobService/{m}", request_serializer=req.SerializeToString,
                                                     response_deserializer=resp.FromString)
            s = lambda m, req, resp: ch.unary_stream(f"/fp8d.v1.JobService/{m}", request_serializer=req.SerializeToString,
                                                      response_deserializer=resp.FromString)
            self.CreateJob = u("CreateJob", svc_pb2.CreateJobRequest, job_pb2.Job)
            self.GetJob = u("GetJob", svc_pb2.GetJobRequest, job_pb2.Job)
            self.ListJobs = u("ListJobs", svc_pb2.ListJobsRequest, svc_pb2.ListJobsResponse)
            self.CancelJob = u("CancelJob", svc_pb2.CancelJobRequest, job_pb2.Job)
            self.WatchJob = s("WatchJob", svc_pb2.WatchJobRequest, svc_pb2.WatchJobResponse)
            self.GetJobLogs = s("GetJobLogs", svc_pb2.GetJobLogsRequest, svc_pb2.LogChunk)
    svc_grpc.JobServiceStub = Stub
    PB = type("PB", (), {"job": job_pb2, "svc": svc_pb2, "svc_grpc": svc_grpc})
    failed = 0
    try:
        for case in CASES:
            if ARGS.only and ARGS.only not in case.__name__:
                continue
            base = f"{work}/{case.__name__}"
            os.makedirs(base)
            os.chmod(base, 0o755)
            print(f"[ RUN  ] {case.__name__}", flush=True)
            t0 = time.time()
            try:
                case(base)
                print(f"[  OK  ] {case.__name__} ({time.time() - t0:.1f} s)", flush=True)
            except Exception:
                failed += 1
                traceback.print_exc()
                for log in (f"{base}/fp8d.log",):
                    if os.path.exists(log):
                        print("--- fp8d log (tail) ---\n" + read(log).decode(errors="replace")[-4000:])
                print(f"[ FAIL ] {case.__name__}", flush=True)
    finally:
        if not os.environ.get("FP8D_ITEST_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
