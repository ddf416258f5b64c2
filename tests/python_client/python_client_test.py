#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The Python client (clients/python, package fp8d) against a real fp8d with TLS and tokens.

  python_client_test.py --fp8d BIN --worker BIN --source-dir DIR

Installs the package offline (`pip install --no-deps --no-build-isolation --target`) from a
copy of clients/python and proto/, so the stubs are generated as a user's install makes them,
then drives one fp8d (certificates from openssl, a tokens file; the harness of
tests/remote/remote_api_test.py) with fp8-test-worker: create from a YAML file → watch to
SUCCEEDED → logs, list and paging, wait with a timeout, cancel, delete, every error class as
its typed exception, and a create retried across a daemon restart. Exit 0 when every check passed.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types

CHECKS = 0


def expect(cond, what):
    global CHECKS
    if not cond:
        raise AssertionError(what)
    CHECKS += 1
    print(f"  ok: {what}", flush=True)


def raises(cls, fn, what):
    """Runs fn; expects exactly the typed error cls (an fp8d.Error with .code and .message)."""
    import fp8d
    try:
        fn()
    except fp8d.Error as e:
        expect(type(e) is cls and isinstance(e, fp8d.Error) and e.code == cls.code and e.message,
               f"{what}: {type(e).__name__} ({e.code.name}: {e.message})")
        return e
    raise AssertionError(f"{what}: no {cls.__name__} raised")


OPENED = []  # clients made for one call, closed at the end (an open channel keeps reconnecting)


def once(*args, **kw):
    import fp8d
    OPENED.append(fp8d.Client(*args, **kw))
    return OPENED[-1]


def install_package(src, work):
    """pip install of a copy of clients/python (with proto/ beside it, as in the checkout)."""
    copy = f"{work}/src"
    shutil.copytree(f"{src}/clients/python", f"{copy}/clients/python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    shutil.copytree(f"{src}/proto", f"{copy}/proto")
    site = f"{work}/site"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                        "--target", site, f"{copy}/clients/python"], capture_output=True, text=True,
                       env=env, timeout=300)
    expect(p.returncode == 0, "pip install --no-deps --no-build-isolation --target works offline"
           + ("" if p.returncode == 0 else ":\n" + p.stdout + p.stderr))
    expect(os.path.isfile(f"{site}/fp8d/v1/job_service_pb2_grpc.py"),
           "the install holds the stubs generated from proto/fp8d/v1")
    sys.path.insert(0, site)
    import fp8d
    expect(fp8d.__file__.startswith(site), f"fp8d imports from the install ({fp8d.__file__})")


JOB_YAML = """\
# relative paths resolve against this file's directory, as with fp8ctl submit
display_name: py-client
labels: {suite: pyclient, build: 7}
train:
  model: {preset: tiny}
  data: {train: "data/*.bin"}
  precision: {recipe: bf16}
  training: {max_steps: 10}
  output_dir: out-yaml
retry: {max_attempts: 1, initial_backoff: 500ms}
timeouts: {attempt_deadline: 1h30m, heartbeat_timeout: 30s}
"""


def job_dict(shared, out, steps=10):
    return {"display_name": "py-dict", "labels": {"suite": "pyclient"},
            "train": {"model": {"preset": "tiny"}, "data": {"train": f"{shared}/data/*.bin"},
                      "precision": {"recipe": "bf16"}, "training": {"max_steps": steps},
                      "output_dir": f"{shared}/{out}"}}


def run(args, work):
    install_package(args.source_dir, work)
    import fp8d
    sys.path.insert(0, f"{args.source_dir}/tests/remote")
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    import remote_api_test as harness  # certificates, tokens file and the fp8d process
    harness.ARGS = types.SimpleNamespace(fp8d=args.fp8d, worker=args.worker)

    ca = harness.make_ca(work, "ca")
    srv = harness.make_cert(work, "server", "localhost", ca, server=True)
    tok_path, tok = harness.tokens_file(work)
    shared = harness.shared_dir(work)

    def daemon_args(port):
        return ["--listen", f"0.0.0.0:{port}", "--tls-cert", srv[1], "--tls-key", srv[0],
                "--auth-tokens", tok_path, "--allowed-root", shared]
    d = harness.Daemon(work, daemon_args(0))
    try:
        d.wait_address()
        addr = f"127.0.0.1:{d.port()}"
        alice = fp8d.Client(addr, token=tok["alice"], ca=ca[1])
        vera = fp8d.Client(addr, token=tok["vera"], ca=harness.read(ca[1]))
        end = time.time() + 30
        while True:  # the listener is up before the service answers
            try:
                list(alice.list(page_size=1))
                break
            except fp8d.Unavailable:
                if time.time() > end:
                    raise
                time.sleep(0.1)

        # create from a YAML file → watch to SUCCEEDED → logs
        with open(f"{shared}/job.yaml", "w") as f:
            f.write(JOB_YAML)
        job = alice.create(f"{shared}/job.yaml")
        expect(job.name.startswith("jobs/") and job.owner == "alice",
               f"create(yaml path) over TLS with a token: {job.name}, owner {job.owner}")
        expect(job.train.output_dir == f"{shared}/out-yaml" and job.train.data.train == f"{shared}/data/*.bin",
               "the YAML file's relative paths were sent absolute")
        expect(job.timeouts.attempt_deadline.seconds == 5400 and job.retry.initial_backoff.nanos == 500_000_000
               and job.labels["build"] == "7", "durations 1h30m/500ms and a bare-number label read as fp8ctl reads them")
        seen = list(vera.watch(job.name, timeout=120))
        states = [fp8d.JobState.Name(j.state) for j in seen]
        expect(len(seen) >= 2 and seen[-1].state == fp8d.job_pb2.SUCCEEDED
               and all(a.version < b.version for a, b in zip(seen, seen[1:])),
               f"watch (as viewer) yields the snapshot and each change up to SUCCEEDED: {states}")
        expect(alice.wait(job.name, timeout=10).state == fp8d.job_pb2.SUCCEEDED,
               "wait on a finished job returns it at once")
        log = b"".join(vera.logs(job.name, rank=0))
        expect(b"FP8D_" in log, f"logs(rank 0): {len(log)} bytes of the worker's stderr")
        full = alice.get(job.name.split("/", 1)[1], full=True)
        expect(full.name == job.name and len(full.attempts) == 1, "get('<id>', full=True) has the attempt")

        # request ids, paging, filters
        a1 = alice.create(job_dict(shared, "out-d"), request_id="py-same")
        a2 = alice.create(job_dict(shared, "out-d"), request_id="py-same")
        expect(a1.name == a2.name, "create with the same request_id returns the same job")
        b = alice.create(job_dict(shared, "out-e"))
        for j in (a1, b):
            alice.wait(j.name, timeout=120)
        names = [j.name for j in vera.list(label_selector="suite=pyclient", page_size=1)]
        expect(sorted(names) == sorted([job.name, a1.name, b.name]),
               f"list(label_selector, page_size=1) walks every page: {len(names)} jobs")
        expect(job.name in [j.name for j in vera.list(state="SUCCEEDED")]
               and not list(vera.list(state=fp8d.job_pb2.RUNNING)), "list(state=...) filters")

        # wait with a timeout, cancel, delete
        slow = alice.create(job_dict(shared, "out-slow", steps=100000))
        t0 = time.monotonic()
        e = raises(fp8d.DeadlineExceeded, lambda: alice.wait(slow.name, timeout=1.5), "wait past its timeout")
        expect(isinstance(e, TimeoutError) and time.monotonic() - t0 < 10, "... which is a TimeoutError, on time")
        raises(fp8d.FailedPrecondition, lambda: alice.delete(slow.name), "delete of an active job")
        expect(alice.cancel(slow.name).state in (fp8d.job_pb2.CANCELLING, fp8d.job_pb2.CANCELLED),
               "cancel of a running job")
        expect(alice.wait(slow.name, timeout=60).state == fp8d.job_pb2.CANCELLED, "wait returns it CANCELLED")
        raises(fp8d.FailedPrecondition, lambda: alice.cancel(job.name), "cancel of a SUCCEEDED job")
        alice.delete(slow.name)
        raises(fp8d.NotFound, lambda: alice.get(slow.name), "get after delete")

        # each error class
        raises(fp8d.NotFound, lambda: vera.get("jobs/no-such-job"), "get of a job that does not exist")
        raises(fp8d.NotFound, lambda: list(vera.watch("jobs/no-such-job", timeout=10)), "watch of a job that does not exist")
        e = raises(fp8d.InvalidArgument, lambda: alice.create(dict(job_dict(shared, "x"), train={
            **job_dict(shared, "x")["train"], "output_dir": "/etc/fp8d-escape"})),
            "create with output_dir outside the allowed roots")
        expect("job.train.output_dir" in e.message, "the daemon's message names job.train.output_dir")
        e = raises(fp8d.InvalidArgument, lambda: alice.create({"train": {"trainig": {}}}),
                   "create of a dict with an unknown field")
        expect("job.train.trainig" in e.message, f"the message names the field: {e.message}")
        raises(fp8d.InvalidArgument, lambda: alice.create({"timeouts": {"attempt_deadline": "5 parsecs"}}),
               "a duration with an unknown unit")
        raises(fp8d.Unauthenticated, lambda: once(addr, ca=ca[1], token="").get(job.name),
               "a call without a token")
        raises(fp8d.Unauthenticated, lambda: once(addr, ca=ca[1], token="wrong").get(job.name),
               "a call with a wrong token")
        raises(fp8d.PermissionDenied, lambda: vera.create(job_dict(shared, "out-v")), "create as a viewer")
        raises(fp8d.PermissionDenied, lambda: once(addr, token=tok["bob"], ca=ca[1]).cancel(job.name),
               "cancel of alice's job as bob")
        raises(fp8d.Unavailable, lambda: once(addr, token=tok["alice"], retries=2).get(job.name),
               "plaintext to the TLS port")

        # create while fp8d restarts: UNAVAILABLE is retried with the same request id
        port = d.port()
        d.stop()
        os.remove(d.addr_file)
        result = {}
        patient = fp8d.Client(addr, token=tok["alice"], ca=ca[1], retries=30)
        caller = threading.Thread(target=lambda: result.update(job=patient.create(
            dict(job_dict(shared, "out-restart"), display_name="py-restart"))))
        caller.start()
        time.sleep(1.0)  # its first attempts find no daemon
        d = harness.Daemon(work, daemon_args(port))
        d.wait_address()
        caller.join(120)
        expect("job" in result, "create issued while fp8d was down succeeds once it is back")
        made = [j for j in alice.list(label_selector="suite=pyclient") if j.display_name == "py-restart"]
        expect(len(made) == 1 and made[0].name == result["job"].name, "... and made exactly one job")
        alice.wait(made[0].name, timeout=120)
        for c in [alice, vera, patient] + OPENED:
            c.close()
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fp8d", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--source-dir", required=True)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="fp8d-pyclient-", dir="/tmp")
    os.chmod(work, 0o755)
    try:
        run(args, work)
        print(f"[  OK  ] python_client: {CHECKS} checks", flush=True)
        return 0
    except Exception:
        traceback.print_exc()
        log = f"{work}/fp8d.log"
        if os.path.exists(log):
            print("--- fp8d log (tail) ---\n" + open(log, errors="replace").read()[-4000:])
        print("[ FAIL ] python_client", flush=True)
        return 1
    finally:
        if not os.environ.get("FP8D_ITEST_KEEP"):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
