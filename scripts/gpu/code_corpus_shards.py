#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Byte-token llm.c shards (vocab 256) of a real, natural text corpus that is large enough not to
be memorised: every *.py file under the Python installation's site-packages (on the GPU host:
torch, numpy, jax, transformers, sympy, scipy, ... several hundred MB of source).

Deterministic: files in sorted path order, exact duplicates (by content) dropped, the split made
per file (a file goes to val when a hash of its path, relative to site-packages, falls in the
VAL_PERCENT bucket), so no val text is ever trained on. Files are joined with a blank line.
Shard header as byte_shards.py (256 int32: magic 20240520, version 1, token count; then uint16
tokens); train_NNN.bin of at most 100M tokens each, val_000.bin.
  code_corpus_shards.py OUT_DIR [MAX_TRAIN_MB=300] [VAL_PERCENT=2]"""
import hashlib
import os
import site
import struct
import sys
import sysconfig
from array import array

out_dir = sys.argv[1]
max_train = int(float(sys.argv[2]) * 1e6) if len(sys.argv) > 2 else 300_000_000
val_percent = int(sys.argv[3]) if len(sys.argv) > 3 else 2
SHARD_TOKENS = 100_000_000

roots = sorted({p for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]] if os.path.isdir(p)})
paths = []
for root in roots:
    for d, dirs, files in os.walk(root):
        dirs.sort()
        paths += [(os.path.relpath(os.path.join(d, f), root), os.path.join(d, f)) for f in sorted(files) if f.endswith(".py")]
paths.sort()

seen = set()
parts = {"train": [], "val": []}
size = {"train": 0, "val": 0}
dupes = files_used = 0
for rel, full in paths:
    try:
        data = open(full, "rb").read()
    except OSError:
        continue
    if not data:
        continue
    digest = hashlib.sha1(data).digest()
    if digest in seen:
        dupes += 1
        continue
    seen.add(digest)
    split = "val" if int(hashlib.md5(rel.encode()).hexdigest(), 16) % 100 < val_percent else "train"
    if split == "train" and size["train"] >= max_train:
        break  # both splits come from the same sorted prefix of the files
    parts[split].append(data + b"\n\n")
    size[split] += len(data) + 2
    files_used += 1


def write(name, raw):
    try:  # numpy (there on the GPU host) widens hundreds of MB in a second
        import numpy as np
        tokens = np.frombuffer(raw, dtype=np.uint8).astype("<u2").tobytes()
    except ImportError:
        wide = array("H")
        wide.extend(raw)
        if sys.byteorder != "little":
            wide.byteswap()
        tokens = wide.tobytes()
    with open(os.path.join(out_dir, name), "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 1, len(raw)] + [0] * 253)))
        f.write(tokens)


os.makedirs(out_dir, exist_ok=True)
train = b"".join(parts["train"])
for i in range(0, max(1, (len(train) + SHARD_TOKENS - 1) // SHARD_TOKENS)):
    write("train_%03d.bin" % i, train[i * SHARD_TOKENS:(i + 1) * SHARD_TOKENS])
write("val_000.bin", b"".join(parts["val"]))
print("code corpus: %s; %d .py files found, %d used, %d exact duplicates dropped; train %.1f MB (tokens), val %.1f MB (%d%% of files by path hash)"
      % (", ".join(roots), len(paths), files_used, dupes, size["train"] / 1e6, size["val"] / 1e6, val_percent))
