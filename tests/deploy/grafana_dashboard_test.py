#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""deploy/grafana/fp8d-dashboard.json uses only metric names fp8d exports.

The names come from real scrapes of a real fp8d (its /metrics on --http-listen) while a real
fp8-worker trains a tiny FP8 model (the per-job gauges, FP8 amax and saturation) and a second
job fails on garbage data (the failure counter), after fp8ctl has made gRPC calls. Every
metric name in every panel expression (and in the template variables' queries) must be one of
them. Also shows the check can fail: a copy of an expression with a misspelled name is refused.
Prints one ok/FAIL line per check.
Usage: grafana_dashboard_test.py <source dir> <fp8d> <fp8ctl> <fp8-worker>
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

src, fp8d, fp8ctl, worker = sys.argv[1:5]
failures = 0


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures += 1


# PromQL words that are not metric names: aggregation and function names are followed by "(",
# and these are the keywords and modifiers.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
            "and", "or", "unless", "inf", "nan", "atan2"}


def metric_names(expr):
    """The metric names a PromQL expression selects."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)                   # strings ("...") first
    e = re.sub(r"\{[^}]*\}", "", e)                                # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                               # ranges, subqueries
    e = re.sub(r"\$\{?\w+\}?", "", e)                              # Grafana variables
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        word = m.group(0)
        rest = e[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in KEYWORDS:
            continue
        if re.fullmatch(r"\d+[smhdwy]", word):
            continue
        names.add(word)
    return names


def dashboard_exprs(dashboard):
    out = []
    for panel in dashboard.get("panels", []):
        for target in panel.get("targets", []):
            if target.get("expr"):
                out.append((panel.get("title", "?"), target["expr"]))
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if var.get("type") == "query" and isinstance(query, str):
            # label_values(metric, label) and query_result(expr)
            m = re.fullmatch(r"\s*label_values\(\s*([^,)]+)\s*(?:,[^)]*)?\)\s*", query)
            out.append((f"variable {var['name']}", m.group(1) if m else query))
    return out


def exported_names(text):
    names = set()
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            names.add(m.group(1))
            if m.group(2) == "histogram":
                names.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{| )", line)
        if m:
            names.add(m.group(1))
    return names


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except Exception as e:  # not up yet
        return 0, str(e)


with open(os.path.join(src, "deploy/grafana/fp8d-dashboard.json")) as f:
    dashboard = json.load(f)
exprs = dashboard_exprs(dashboard)
check(len(exprs) >= 15, f"the dashboard has {len(exprs)} expressions")

tmp = tempfile.mkdtemp(prefix="fp8d-grafana-")
data = os.path.join(tmp, "data")
subprocess.run([worker, "prepare-data", "--text", os.path.join(src, "data/corpus.txt"), "--out", data],
               check=True, stdout=subprocess.DEVNULL)
with open(os.path.join(tmp, "garbage_0.bin"), "wb") as f:
    f.write(os.urandom(100))
jobs = {
    "good": f"""display_name: good
train:
  model: {{preset: tiny}}
  data: {{train: "{data}/train_*.bin"}}
  precision: {{recipe: fp8-blockwise}}
  training: {{max_steps: 100000, logging_steps: 1}}
  output_dir: {tmp}/out/good
resources: {{ranks: 1}}
""",
    "bad": f"""display_name: bad
train:
  model: {{preset: tiny}}
  data: {{train: "{tmp}/garbage_*.bin"}}
  precision: {{recipe: fp8-blockwise}}
  training: {{max_steps: 5}}
  output_dir: {tmp}/out/bad
resources: {{ranks: 1}}
retry: {{max_attempts: 1}}
""",
}
addr_file = os.path.join(tmp, "addr")
log = open(os.path.join(tmp, "fp8d.log"), "w")
daemon = subprocess.Popen([fp8d, "--listen", "127.0.0.1:0", "--addr-file", addr_file, "--http-listen",
                           "127.0.0.1:0", "--data-dir", os.path.join(tmp, "fp8d-data"), "--worker", worker,
                           "--gpus", "none", "--cpu-slots", "2", "--allowed-root", tmp,
                           "--run-jobs-as-owner=false", "--loopback-role", "submitter"],
                          stdout=log, stderr=subprocess.STDOUT)
env = dict(os.environ)
names = set()
scrape = ""
try:
    port = None
    end = time.time() + 60
    while time.time() < end and (port is None or not os.path.exists(addr_file)):
        m = re.search(r"http listening on 127\.0\.0\.1:(\d+)", open(os.path.join(tmp, "fp8d.log")).read())
        port = m and m.group(1)
        time.sleep(0.1)
    check(port is not None and os.path.exists(addr_file), "fp8d started with --http-listen")
    env["FP8D_ADDR"] = open(addr_file).read().strip()
    url = f"http://127.0.0.1:{port}/metrics"
    names_by_job = {}
    for name, text in jobs.items():
        path = os.path.join(tmp, name + ".yaml")
        with open(path, "w") as f:
            f.write(text)
        out = subprocess.run([fp8ctl, "submit", "-f", path, "-o", "json"], env=env, capture_output=True, text=True)
        check(out.returncode == 0, f"fp8ctl submit {name}: {out.stderr.strip()}")
        names_by_job[name] = json.loads(out.stdout)["name"] if out.returncode == 0 else ""
    # Until the running job has reported FP8 figures and the bad one has failed.
    end = time.time() + 120
    while time.time() < end:
        code, scrape = get(url)
        if code == 200:
            names |= exported_names(scrape)
        if {"fp8d_job_fp8_amax_max", "fp8d_job_failures_total", "fp8d_job_loss"} <= names:
            break
        time.sleep(0.5)
    check("fp8d_job_fp8_amax_max" in names and "fp8d_job_failures_total" in names,
          f"the scrapes have the running job's FP8 gauges and the failure counter ({len(names)} names)")
    for title, expr in exprs:
        unknown = metric_names(expr) - names
        check(not unknown and metric_names(expr), f"{title}: {expr[:90]}"
              + (f"  unknown: {sorted(unknown)}" if unknown else ""))
    misspelled = "rate(fp8d_job_attempt_started_total[5m])"
    check(metric_names(misspelled) - names == {"fp8d_job_attempt_started_total"},
          "a misspelled name is refused")
    check(metric_names('sum by (le, kind) (rate(x_bucket{job=~"$job"}[$__rate_interval]))') == {"x_bucket"},
          "the extractor takes names, not labels, functions or variables")
    if names_by_job.get("good"):
        subprocess.run([fp8ctl, "cancel", names_by_job["good"]], env=env, capture_output=True)
        subprocess.run([fp8ctl, "wait", names_by_job["good"], "--for", "state=CANCELLED", "--timeout", "60s"],
                       env=env, capture_output=True)
finally:
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=60)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()
    log.close()
if failures:
    print(open(os.path.join(tmp, "fp8d.log")).read()[-3000:])
subprocess.run(["rm", "-rf", tmp])
print(f"grafana dashboard: {failures} failures")
sys.exit(1 if failures else 0)
