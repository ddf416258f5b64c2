#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Lints deploy/container/Dockerfile without a container engine (none runs in CI):

1. dockerfile-utils (npm; hadolint is neither in Debian nor on npm) reports no problem;
2. every file the Dockerfile copies from the build context exists and .dockerignore keeps it;
3. the runtime stage installs deploy/runtime-packages.txt, copies the three binaries from the
   build stage and runs as a non-root user;
4. every shared library `ldd` lists for the built fp8d, fp8ctl and fp8-worker belongs to a
   Debian package in deploy/runtime-packages.txt, or is a CUDA library the Dockerfile copies
   (then it comes from the CUDA toolkit, not Debian); and every listed package is needed.

Usage: dockerfile_test.py <source dir> <fp8d> <fp8ctl> <fp8-worker>
"""
import fnmatch
import os
import re
import subprocess
import sys

src, binaries = sys.argv[1], sys.argv[2:]
dockerfile = os.path.join(src, "deploy/container/Dockerfile")
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg)


def ok(msg):
    print("ok   " + msg)


# ---- 1. the linter ----------------------------------------------------------------------
lint = os.path.join(os.path.dirname(os.path.abspath(__file__)), "npm/lint_dockerfile.mjs")
if not os.path.isdir(os.path.join(os.path.dirname(lint), "node_modules")):
    fail("tests/deploy/npm/node_modules missing: run scripts/install-deps.sh")
else:
    r = subprocess.run(["node", lint, dockerfile], capture_output=True, text=True)
    print(r.stdout.strip())
    (ok if r.returncode == 0 else fail)("dockerfile-utils lint")

# ---- parse: instructions (continuations joined) per stage -------------------------------
lines, current = [], ""
for raw in open(dockerfile, encoding="utf-8"):
    line = raw.rstrip("\n")
    if not current and (not line.strip() or line.lstrip().startswith("#")):
        continue
    if line.endswith("\\"):
        current += line[:-1] + " "
        continue
    lines.append(current + line)
    current = ""
stages = []  # [name, [instructions]]
for line in lines:
    word = line.split(None, 1)[0].upper()
    if word == "FROM":
        m = re.search(r"\bAS\s+(\S+)", line, re.I)
        stages.append([m.group(1) if m else str(len(stages)), []])
    elif stages:
        stages[-1][1].append(line)
if len(stages) < 2:
    fail(f"expected a multi-stage build, found {len(stages)} stage(s)")
    sys.exit(1)
ok("stages: " + ", ".join(s[0] for s in stages))

# ---- 2. files copied from the context exist and are not ignored -------------------------
ignore = []
ignore_file = os.path.join(src, ".dockerignore")
if os.path.exists(ignore_file):
    ignore = [l.strip() for l in open(ignore_file) if l.strip() and not l.startswith("#")]
else:
    fail(".dockerignore missing")


def ignored(rel):
    parts = rel.split("/")
    for pat in ignore:
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatch(prefix, pat) or fnmatch.fnmatch(prefix, pat.replace("**/", "")):
                return True
            if pat.startswith("**/") and fnmatch.fnmatch(parts[i - 1], pat[3:]):
                return True
    return False


for name, instructions in stages:
    for ins in instructions:
        words = ins.split()
        if words[0].upper() not in ("COPY", "ADD") or any(w.startswith("--from=") for w in words):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if args and args[0].startswith("["):
            fail(f"{name}: JSON-form {words[0]} not checked: {ins}")
            continue
        for source in args[:-1]:
            rel = os.path.normpath(source).lstrip("/")
            path = os.path.join(src, rel)
            if rel == ".":
                ok(f"{name}: copies the whole context (minus .dockerignore)")
            elif not os.path.exists(path):
                fail(f"{name}: {source} does not exist in the build context")
            elif ignored(rel):
                fail(f"{name}: {source} is excluded by .dockerignore")
            else:
                ok(f"{name}: {source} exists")

# ---- 3. the runtime stage ---------------------------------------------------------------
runtime = stages[-1][1]
text = "\n".join(runtime)
if not re.search(r"runtime-packages\.txt.*xargs apt-get install", text):
    fail("runtime stage does not apt-get install deploy/runtime-packages.txt")
else:
    ok("runtime stage installs deploy/runtime-packages.txt")
copied = " ".join(l for l in runtime if l.startswith("COPY --from=build "))
for b in ("fp8d", "fp8-worker", "fp8ctl"):
    if not re.search(rf"/{re.escape(b)}(\s|$)", copied):
        fail(f"runtime stage does not copy {b} from the build stage")
    else:
        ok(f"runtime stage copies {b} from the build stage")
# GPU visibility belongs to the device plugin (or `docker run --gpus`), never to the image.
if re.search(r"\bNVIDIA_VISIBLE_DEVICES\b", "\n".join(l for _, lines in stages for l in lines)):
    fail("the Dockerfile sets NVIDIA_VISIBLE_DEVICES (leave GPU visibility to the device plugin)")
else:
    ok("no NVIDIA_VISIBLE_DEVICES in the image (GPUs come from the device plugin)")
users = [l.split()[1] for l in runtime if l.split()[0].upper() == "USER"]
if not users or users[-1].split(":")[0] in ("0", "root"):
    fail(f"runtime stage must end as a non-root USER, has {users}")
else:
    ok(f"runtime stage runs as USER {users[-1]}")

# ---- 4. ldd against the package list ----------------------------------------------------
listed = [l.strip() for l in open(os.path.join(src, "deploy/runtime-packages.txt"))
          if re.match(r"^[a-z0-9]", l)]


def candidates(path):
    # dpkg knows a file by the path its package ships; with merged /usr, ldd may name either.
    real = os.path.realpath(path)
    return [path, real, re.sub(r"^/usr", "", path), re.sub(r"^/usr", "", real)]


def resolve_owners(paths):
    """One dpkg -S for every candidate path (one call per library takes a minute)."""
    queries = sorted({c for p in paths for c in candidates(p)})
    r = subprocess.run(["dpkg", "-S"] + queries, capture_output=True, text=True)
    by_path = {}
    for line in r.stdout.splitlines():
        pkgs, _, file = line.partition(": ")
        by_path[file.strip()] = pkgs.split(",")[0].split(":")[0].strip()
    return {p: next((by_path[c] for c in candidates(p) if c in by_path), None) for p in paths}


libraries = []  # (binary, lib, path)
for binary in binaries:
    if not os.path.exists(binary):
        fail(f"{binary}: not built")
        continue
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if not m:
            continue
        lib, path = m.groups()
        if path == "not":
            fail(f"{os.path.basename(binary)}: {lib} not found")
            continue
        libraries.append((binary, lib, path))
owners = resolve_owners([path for _, _, path in libraries])
needed = set()
for binary, lib, path in libraries:
    pkg = owners[path]
    if pkg is None:
        stem = lib.split(".so")[0]
        if "cuda" in path and re.search(rf"/{re.escape(stem)}\.so", open(dockerfile).read()):
            ok(f"{os.path.basename(binary)}: {lib} from the CUDA toolkit (copied by the Dockerfile)")
        else:
            fail(f"{os.path.basename(binary)}: {lib} ({path}) belongs to no Debian package")
        continue
    needed.add(pkg)
    if pkg not in listed:
        fail(f"{os.path.basename(binary)}: {lib} is in {pkg}, missing from deploy/runtime-packages.txt")
unused = sorted(set(listed) - needed)
if unused and not failures:
    fail(f"deploy/runtime-packages.txt lists packages no binary needs: {' '.join(unused)}")
ok(f"ldd: {len(needed)} Debian packages needed: {' '.join(sorted(needed))}")

print(f"dockerfile: {len(failures)} failures")
sys.exit(1 if failures else 0)
