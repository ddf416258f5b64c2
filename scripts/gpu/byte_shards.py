#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Byte-token llm.c shards of a text file (header: 256 int32, magic 20240520, version 1, token
count; then uint16 tokens): the first 90% as train_000.bin, the rest as val_000.bin.
  byte_shards.py TEXT OUT_DIR"""
import struct
import sys

raw = open(sys.argv[1], 'rb').read()
cut = int(len(raw) * 0.9)
for name, part in (('train_000.bin', raw[:cut]), ('val_000.bin', raw[cut:])):
    with open(sys.argv[2] + '/' + name, 'wb') as f:
        f.write(struct.pack('<256i', *([20240520, 1, len(part)] + [0] * 253)))
        f.write(struct.pack('<%dH' % len(part), *part))
