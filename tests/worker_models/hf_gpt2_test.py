#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Models in and out (issue 20), end to end through the fp8-worker executable.

An independent GPT-2: this file writes safetensors by hand in transformers' layout (names
`transformer.h.N...`, Conv1D weights [in, out]) and runs its own numpy forward pass, so fp8d's
import is checked against code that shares nothing with it. Every process the test starts is
waited for (subprocess.run); every file it writes is under one temporary directory.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

WORKER = os.environ.get("FP8_WORKER", "fp8-worker")
CORPUS = os.environ.get("FP8_TEST_CORPUS", "")
EXIT_BAD_DATA = 65

# The shape of every model here: small enough for a 2-core CI machine.
N_LAYER, N_HEAD, N_EMBD, N_POS, VOCAB = 2, 2, 32, 16, 256


def run(args, check=True):
    p = subprocess.run([WORKER] + args, capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"fp8-worker {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def load_json(path):
    with open(path) as f:
        return json.load(f)


def dump_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)


def events(stdout):
    """The worker's event lines (worker_event.proto as JSON: {"time": t, "<type>": {...}}),
    flattened to {"type": "<type>", "time": t, **fields}."""
    out = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        e = json.loads(line)
        for kind, fields in e.items():
            if kind != "time":
                out.append({"type": kind, "time": e.get("time"), **fields})
    return out


# --- an independent GPT-2 --------------------------------------------------------------------

def gpt2_params(rng, n_layer=N_LAYER, n_embd=N_EMBD, n_pos=N_POS, vocab=VOCAB, scale=1.0):
    """transformers' GPT2LMHeadModel state dict (tied head left out), Conv1D weights [in, out]."""
    c = n_embd
    p = {"transformer.wte.weight": rng.normal(0, 0.3 * scale, (vocab, c)),
         "transformer.wpe.weight": rng.normal(0, 0.1 * scale, (n_pos, c))}
    for i in range(n_layer):
        h = f"transformer.h.{i}."
        p[h + "ln_1.weight"] = 1 + rng.normal(0, 0.1, c)
        p[h + "ln_1.bias"] = rng.normal(0, 0.1, c)
        p[h + "attn.c_attn.weight"] = rng.normal(0, 0.2 * scale, (c, 3 * c))
        p[h + "attn.c_attn.bias"] = rng.normal(0, 0.1, 3 * c)
        p[h + "attn.c_proj.weight"] = rng.normal(0, 0.2 * scale, (c, c))
        p[h + "attn.c_proj.bias"] = rng.normal(0, 0.1, c)
        p[h + "ln_2.weight"] = 1 + rng.normal(0, 0.1, c)
        p[h + "ln_2.bias"] = rng.normal(0, 0.1, c)
        p[h + "mlp.c_fc.weight"] = rng.normal(0, 0.2 * scale, (c, 4 * c))
        p[h + "mlp.c_fc.bias"] = rng.normal(0, 0.1, 4 * c)
        p[h + "mlp.c_proj.weight"] = rng.normal(0, 0.1 * scale, (4 * c, c))
        p[h + "mlp.c_proj.bias"] = rng.normal(0, 0.1, c)
    p["transformer.ln_f.weight"] = 1 + rng.normal(0, 0.1, c)
    p["transformer.ln_f.bias"] = rng.normal(0, 0.1, c)
    return {k: v.astype(np.float32) for k, v in p.items()}


def write_safetensors(path, tensors):
    """The format by hand: u64 header length, JSON header, raw little-endian F32 data."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    """An all-F32 file as {name: float32 array}."""
    out = {}
    for name, (dtype, a) in read_safetensors_raw(path).items():
        assert dtype == "F32", (name, dtype)
        out[name] = a
    return out


def write_gpt2_dir(d, params, vocab=VOCAB, n_layer=N_LAYER, config_extra=None):
    os.makedirs(d, exist_ok=True)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": N_EMBD, "n_layer": n_layer,
              "n_head": N_HEAD, "n_positions": N_POS, "vocab_size": vocab, "layer_norm_epsilon": 1e-5,
              "activation_function": "gelu_new", "tie_word_embeddings": True}
    config.update(config_extra or {})
    dump_json(os.path.join(d, "config.json"), config)
    write_safetensors(os.path.join(d, "model.safetensors"), params)


def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def numpy_gpt2_logits(p, tokens, n_layer=N_LAYER, n_head=N_HEAD):
    """GPT-2's forward in float64 (transformers' GPT2LMHeadModel, eval mode)."""
    g = {k: v.astype(np.float64) for k, v in p.items()}
    t = len(tokens)
    x = g["transformer.wte.weight"][tokens] + g["transformer.wpe.weight"][:t]
    c = x.shape[1]
    hd = c // n_head
    mask = np.triu(np.ones((t, t), dtype=bool), 1)
    for i in range(n_layer):
        h = f"transformer.h.{i}."
        a = layer_norm(x, g[h + "ln_1.weight"], g[h + "ln_1.bias"])
        qkv = a @ g[h + "attn.c_attn.weight"] + g[h + "attn.c_attn.bias"]  # Conv1D: x·W + b
        q, k, v = np.split(qkv, 3, axis=1)
        q, k, v = (m.reshape(t, n_head, hd).transpose(1, 0, 2) for m in (q, k, v))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
        s[:, mask] = -np.inf
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        y = (s @ v).transpose(1, 0, 2).reshape(t, c)
        x = x + y @ g[h + "attn.c_proj.weight"] + g[h + "attn.c_proj.bias"]
        m = layer_norm(x, g[h + "ln_2.weight"], g[h + "ln_2.bias"])
        m = gelu_tanh(m @ g[h + "mlp.c_fc.weight"] + g[h + "mlp.c_fc.bias"])
        x = x + m @ g[h + "mlp.c_proj.weight"] + g[h + "mlp.c_proj.bias"]
    x = layer_norm(x, g["transformer.ln_f.weight"], g["transformer.ln_f.bias"])
    return x @ g["transformer.wte.weight"].T  # the tied head


def e4m3_table():
    """float value of every FP8 E4M3 byte (bias 7, no infinities, 0x7F/0xFF NaN)."""
    t = np.zeros(256, np.float64)
    for b in range(256):
        sign, e, m = -1.0 if b & 0x80 else 1.0, (b >> 3) & 0xF, b & 0x7
        if e == 0xF and m == 0x7:
            t[b] = np.nan
        elif e == 0:
            t[b] = sign * m / 8 * 2.0 ** -6
        else:
            t[b] = sign * (1 + m / 8) * 2.0 ** (e - 7)
    return t


def read_safetensors_raw(path):
    """Any dtype this test meets: F32, BF16 (widened to float32) and F8_E4M3 (the raw bytes)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = data[b:e]
        if t["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif t["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] == "F8_E4M3":
            a = np.frombuffer(raw, dtype=np.uint8)
        else:
            raise AssertionError((name, t["dtype"]))
        out[name] = (t["dtype"], a.reshape(t["shape"]))
    return out


def read_model_dir(d):
    index = os.path.join(d, "model.safetensors.index.json")
    shards = sorted(set(load_json(index)["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    out = {}
    for s in shards:
        out.update(read_safetensors_raw(os.path.join(d, s)))
    return out


CONV1D_MODULES = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


def vllm_gpt2_load(tensors):
    """vLLM's GPT-2 load_weights rule: a Conv1D layer's `.weight` is transposed to [out, in];
    every other tensor, `weight_scale` / `weight_scale_inv` included, is taken as stored."""
    out = {}
    for name, (dtype, a) in tensors.items():
        if any(m in name for m in CONV1D_MODULES) and name.endswith(".weight"):
            a = a.T
        out[name] = (dtype, a)
    return out


def cdiv(a, b):
    return -(-a // b)


class HfGpt2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="fp8-models-")
        cls.dir = cls.tmp.name
        run(["prepare-data", "--text", CORPUS, "--out", os.path.join(cls.dir, "data")])
        cls.train_glob = os.path.join(cls.dir, "data", "train_*.bin")
        cls.val_glob = os.path.join(cls.dir, "data", "val_*.bin")
        cls.numpy_params = gpt2_params(np.random.default_rng(20))
        cls.numpy_dir = os.path.join(cls.dir, "numpy-gpt2")
        # Checkpoints saved by older transformers also hold each layer's causal-mask buffer.
        buffers = {f"transformer.h.{i}.attn.bias": np.tril(np.ones((1, 1, N_POS, N_POS), np.float32))
                   for i in range(N_LAYER)}
        write_gpt2_dir(cls.numpy_dir, {**cls.numpy_params, **buffers})

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def spec(self, name, **kw):
        training = {"max_steps": 4, "per_device_train_batch_size": 4, "logging_steps": 1, "eval_steps": 4,
                    "save_steps": 100, "learning_rate": 1e-3}
        training.update(kw.pop("training", {}))
        s = {"data": {"train": self.train_glob, "val": self.val_glob}, "training": training,
             "output_dir": os.path.join(self.dir, name, "out"), "backend": "cpu"}
        s.update(kw)
        path = os.path.join(self.dir, name + ".json")
        os.makedirs(os.path.join(self.dir, name), exist_ok=True)
        dump_json(path, s)
        return path, s["output_dir"]

    def train(self, name, check=True, **kw):
        path, out = self.spec(name, **kw)
        p = run(["train", "--spec", path], check=check)
        return p, events(p.stdout), out

    def evaluate(self, *args):
        return json.loads(run(["evaluate"] + list(args)).stdout)

    # --- must show -----------------------------------------------------------------------------

    def test_round_trip_train_export_import_same_eval_loss(self):
        tiny = {"n_layer": N_LAYER, "n_head": N_HEAD, "d_model": N_EMBD, "seq_len": N_POS, "vocab_size": VOCAB}
        _, ev, out = self.train("roundtrip", model=tiny, training={"export": "hf"})
        done = [e for e in ev if e["type"] == "done"][0]["result"]
        hf = os.path.join(out, "hf")
        self.assertEqual(done["export"], os.path.abspath(hf))
        config = load_json(os.path.join(hf, "config.json"))
        self.assertEqual(config["architectures"], ["GPT2LMHeadModel"])
        self.assertEqual((config["n_embd"], config["n_layer"], config["n_head"], config["n_positions"],
                          config["vocab_size"]), (N_EMBD, N_LAYER, N_HEAD, N_POS, VOCAB))
        self.assertEqual(config["activation_function"], "gelu_new")
        self.assertEqual(config["layer_norm_epsilon"], 1e-5)
        self.assertTrue(config["tie_word_embeddings"])
        self.assertTrue(os.path.exists(os.path.join(hf, "generation_config.json")))
        # transformers' names and Conv1D orientation, against fp8d's own checkpoint layout.
        exported = read_safetensors(os.path.join(hf, "model.safetensors"))
        ckpt = read_safetensors(os.path.join(done["checkpoint"], "model.safetensors"))
        self.assertEqual(exported["transformer.h.0.attn.c_attn.weight"].shape, (N_EMBD, 3 * N_EMBD))
        np.testing.assert_array_equal(exported["transformer.h.1.mlp.c_fc.weight"], ckpt["h.1.mlp.c_fc.weight"].T)
        np.testing.assert_array_equal(exported["transformer.wte.weight"], ckpt["wte.weight"])
        self.assertNotIn("lm_head.weight", exported)

        # The trainer's eval loss, measured again on the same batches from the export.
        ev_hf = self.evaluate("--model", hf, "--data", self.val_glob, "--seed", "42", "--recipe", "bf16")
        print(f"round trip: trainer eval_loss {done['eval_loss']!r}, from the export {ev_hf['eval_loss']!r}",
              file=sys.stderr)
        self.assertAlmostEqual(ev_hf["eval_loss"] / done["eval_loss"], 1.0, delta=1e-6)

        # A sharded export (forced by a small shard size) holds the same model.
        sharded = os.path.join(self.dir, "roundtrip", "sharded")
        run(["export", "--checkpoint", os.path.join(out, "checkpoints"), "--out", sharded, "--format", "hf",
             "--max-shard-bytes", "30000"])
        index = load_json(os.path.join(sharded, "model.safetensors.index.json"))
        shards = sorted(set(index["weight_map"].values()))
        self.assertGreater(len(shards), 1)
        self.assertEqual(len(index["weight_map"]), len(exported))
        ev_sh = self.evaluate("--model", sharded, "--data", self.val_glob, "--seed", "42", "--recipe", "bf16")
        self.assertAlmostEqual(ev_sh["eval_loss"] / done["eval_loss"], 1.0, delta=1e-6)

        # init_from the export: step 1's loss is the loaded model's loss on the first batch.
        _, ev2, _ = self.train("roundtrip-import", init_from=hf, training={"max_steps": 1})
        step1 = [e for e in ev2 if e["type"] == "progress"][0]["loss"]
        first = self.evaluate("--model", done["checkpoint"], "--data", self.train_glob, "--seed", "42",
                              "--first-batch", "4", "--recipe", "bf16")["first_batch_loss"]
        self.assertAlmostEqual(step1 / first, 1.0, delta=1e-6)

    def test_independent_gpt2_logits_match_numpy(self):
        tokens = [3, 101, 7, 255, 0, 42, 42, 200, 17, 64, 9]
        got = self.evaluate("--model", self.numpy_dir, "--tokens", ",".join(map(str, tokens)), "--recipe", "fp32")
        got = np.array(got["logits"], dtype=np.float64)
        want = numpy_gpt2_logits(self.numpy_params, tokens)
        self.assertEqual(got.shape, want.shape)
        self.assertGreater(np.abs(want).max(), 1.0)  # logits of some size, not a degenerate model
        rel = np.abs(got - want).max() / np.abs(want).max()
        print(f"logits: max |fp8d - numpy| / max |numpy| = {rel:.3g}", file=sys.stderr)
        self.assertLess(rel, 1e-4, f"max |fp8d - numpy| / max |numpy| = {rel}")

    def test_fine_tuning_starts_at_the_loaded_models_loss(self):
        _, ev0, _ = self.train("random-init", model={"n_layer": N_LAYER, "n_head": N_HEAD, "d_model": N_EMBD,
                                                     "seq_len": N_POS, "vocab_size": VOCAB},
                               training={"max_steps": 1})
        random_loss = [e for e in ev0 if e["type"] == "progress"][0]["loss"]
        for recipe in ["bf16", "fp8-tensorwise", "fp8-blockwise"]:
            with self.subTest(recipe=recipe):
                _, ev, out = self.train("finetune-" + recipe, init_from=self.numpy_dir, precision={"recipe": recipe},
                                        training={"max_steps": 2, "save_steps": 1})
                self.assertEqual([e for e in ev if e["type"] == "done"][0]["result"]["steps"], 2)
                step1 = [e for e in ev if e["type"] == "progress"][0]["loss"]
                loaded = self.evaluate("--model", self.numpy_dir, "--data", self.train_glob, "--seed", "42",
                                       "--first-batch", "4", "--recipe", recipe)["first_batch_loss"]
                print(f"{recipe}: step-1 loss {step1:.6f}, loaded model {loaded:.6f}, random init {random_loss:.6f}",
                      file=sys.stderr)
                self.assertAlmostEqual(step1 / loaded, 1.0, delta=1e-6)
                self.assertGreater(abs(step1 - random_loss), 0.5, (step1, random_loss))
                if recipe == "fp8-tensorwise":
                    # No history before step 1: its weight casts were scaled by the loaded weights' amax.
                    state = load_json(os.path.join(out, "checkpoints", "step-1", "trainer_state.json"))
                    for i in range(N_LAYER):
                        w = self.numpy_params[f"transformer.h.{i}.attn.c_attn.weight"]
                        hist = state["fp8_scaling"][f"h.{i}.attn.c_attn"]["w"]["amax_history"]
                        self.assertEqual(np.float32(hist[0]), np.abs(w).max())

    def test_bad_inputs_exit_65_naming_the_problem_and_write_nothing(self):
        rng = np.random.default_rng(7)
        llama = os.path.join(self.dir, "llama")
        os.makedirs(llama)
        dump_json(os.path.join(llama, "config.json"),
                  {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
                   "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 256})
        write_safetensors(os.path.join(llama, "model.safetensors"),
                          {"model.embed_tokens.weight": np.zeros((256, 32), np.float32)})
        small_vocab = os.path.join(self.dir, "gpt2-vocab64")
        write_gpt2_dir(small_vocab, gpt2_params(rng, vocab=64), vocab=64)
        missing = os.path.join(self.dir, "gpt2-missing")
        params = gpt2_params(rng)
        del params["transformer.h.1.mlp.c_fc.weight"]
        write_gpt2_dir(missing, params)
        misshapen = os.path.join(self.dir, "gpt2-misshapen")
        params = gpt2_params(rng)
        params["transformer.h.0.attn.c_attn.weight"] = params["transformer.h.0.attn.c_attn.weight"].T.copy()
        write_gpt2_dir(misshapen, params)
        truncated = os.path.join(self.dir, "gpt2-truncated")
        run(["export", "--checkpoint", self.numpy_dir, "--out", truncated, "--format", "hf", "--max-shard-bytes", "30000"])
        index = load_json(os.path.join(truncated, "model.safetensors.index.json"))
        shard = index["weight_map"]["transformer.h.1.mlp.c_fc.weight"]
        with open(os.path.join(truncated, shard), "r+b") as f:
            f.truncate(os.path.getsize(os.path.join(truncated, shard)) - 100)

        cases = [("llama", llama, "LlamaForCausalLM"),
                 ("vocab", small_vocab, "vocab_size 64"),
                 ("missing", missing, "transformer.h.1.mlp.c_fc.weight"),
                 ("misshapen", misshapen, "transformer.h.0.attn.c_attn.weight"),
                 ("truncated", truncated, shard),
                 ("absent", os.path.join(self.dir, "no-such-model"), "no-such-model")]
        for name, path, needle in cases:
            with self.subTest(case=name):
                p, ev, out = self.train("bad-" + name, check=False, init_from=path)
                self.assertEqual(p.returncode, EXIT_BAD_DATA, p.stderr)
                err = [e for e in ev if e["type"] == "error"]
                self.assertEqual(len(err), 1)
                self.assertEqual(err[0]["class"], "DATA_ERROR")
                self.assertIn("init_from", err[0]["message"])
                self.assertIn(needle, err[0]["message"])
                self.assertFalse(os.path.exists(out), f"{out} was written")
        # The shape comes from init_from: a model section beside it is a spec error.
        p, ev, out = self.train("bad-model-section", check=False, init_from=self.numpy_dir, model={"preset": "tiny"})
        self.assertEqual(p.returncode, 64, p.stderr)
        self.assertIn("model", [e for e in ev if e["type"] == "error"][0]["message"])
        p, ev, out = self.train("bad-export", check=False, init_from=self.numpy_dir, training={"export": "onnx"})
        self.assertEqual(p.returncode, 64, p.stderr)
        self.assertIn("training.export", [e for e in ev if e["type"] == "error"][0]["message"])
        # export refuses to replace a directory that is not an earlier export.
        precious = os.path.join(self.dir, "precious")
        os.makedirs(precious)
        dump_json(os.path.join(precious, "notes.json"), {})
        p = run(["export", "--checkpoint", self.numpy_dir, "--out", precious, "--format", "hf"], check=False)
        self.assertEqual(p.returncode, 64, p.stderr)
        self.assertIn("refusing to replace", p.stderr)
        self.assertEqual(os.listdir(precious), ["notes.json"])

    def calibrate(self, name, spec, check=True):
        path = os.path.join(self.dir, name + "-calibrate.json")
        dump_json(path, spec)
        return run(["calibrate", "--spec", path], check=check)

    def test_calibrate_an_export_warns_about_unaligned_blocks(self):
        export = os.path.join(self.dir, "calib-export")
        run(["export", "--checkpoint", self.numpy_dir, "--out", export, "--format", "hf", "--max-shard-bytes", "30000"])
        out = os.path.join(self.dir, "calib-out")
        p = self.calibrate("export", {"input": export, "output_dir": out, "backend": "cpu"})
        report = load_json(os.path.join(out, "report.json"))
        # Every linear weight of this model (n_embd 32) has dimensions that are not multiples of 128.
        linear = sorted(f"transformer.h.{i}.{m}.weight" for i in range(N_LAYER)
                        for m in ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"])
        self.assertEqual(sorted(w["tensor"] for w in report["warnings"]), linear)
        self.assertEqual(report["summary"]["unaligned_tensors"], len(linear))
        for w in report["warnings"]:
            self.assertEqual(w["engines"], ["transformers", "vllm"])
            self.assertIn("transformers", w["message"])
            self.assertIn("vLLM", w["message"])
            self.assertIn(w["tensor"], p.stderr)
        with open(os.path.join(out, "report.txt")) as f:
            self.assertIn("not a multiple of the block size 128", f.read())
        # transformers' names survive; the FP8 weights get DeepSeek-style scales next to them.
        index = load_json(os.path.join(out, "model.safetensors.index.json"))
        for name in linear:
            self.assertIn(name, index["weight_map"])
            self.assertIn(name + "_scale_inv", index["weight_map"])
        self.assertIn("transformer.wte.weight", index["weight_map"])
        config = load_json(os.path.join(out, "config.json"))
        self.assertEqual(config["architectures"], ["GPT2LMHeadModel"])
        self.assertEqual(config["quantization_config"]["weight_block_size"], [128, 128])

        # Static activation scales and the eval loss work on the export too (transformers' names).
        act = out + "-static"
        self.calibrate("export-static", {"input": export, "output_dir": act, "backend": "cpu",
                                         "activations": {"data": self.train_glob, "num_samples": 8}})
        report = load_json(os.path.join(act, "report.json"))
        index = load_json(os.path.join(act, "model.safetensors.index.json"))
        for i in range(N_LAYER):
            self.assertIn(f"transformer.h.{i}.attn.c_attn.input_scale", index["weight_map"])
        self.assertEqual(len(report["activations"]["layers"]), len(linear))
        bf16, fp8 = report["summary"]["eval_loss_bf16"], report["summary"]["eval_loss_fp8_weights"]
        bf16_here = self.evaluate("--model", export, "--data", self.train_glob, "--seed", "42", "--recipe", "bf16")
        self.assertLess(abs(bf16 - bf16_here["eval_loss"]) / bf16, 0.2)  # same model, other samples
        self.assertLess(abs(fp8 - bf16) / bf16, 0.05)  # FP8 weights read back in the right orientation

        # skip_unaligned: nothing of this model could stay FP8, which is an error naming the option.
        p = self.calibrate("export-skip", {"input": export, "output_dir": out + "-skip", "backend": "cpu",
                                           "weights": {"skip_unaligned": True}}, check=False)
        self.assertEqual(p.returncode, EXIT_BAD_DATA, p.stderr)
        self.assertIn("skip_unaligned", p.stderr)
        self.assertFalse(os.path.exists(out + "-skip"))

    def test_calibrated_export_loads_the_vllm_way(self):
        """The FP8 output of an export, read as vLLM's GPT-2 loader reads it, dequantizes (block
        or per channel) to the original weights; fp8d's own dequantize reads it back alike."""
        decode = e4m3_table()
        # n_embd 128: every dimension a multiple of 128; 160: ceil-div grids (c_fc: [640, 160]).
        for n_embd in (128, 160):
            for granularity in ("block", "channel"):
                with self.subTest(n_embd=n_embd, granularity=granularity):
                    self.check_vllm_layout(n_embd, granularity, decode)

    def check_vllm_layout(self, n_embd, granularity, decode):
        name = f"vllm-{n_embd}-{granularity}"
        src = os.path.join(self.dir, name + "-numpy")
        params = gpt2_params(np.random.default_rng(n_embd), n_embd=n_embd)
        # Every other block of 128 output features 16x smaller: a scale read in the wrong
        # orientation (or per input instead of per output feature) then shows in the eval loss.
        for k in params:
            if any(m in k for m in CONV1D_MODULES) and k.endswith(".weight"):
                n_out = params[k].shape[1]
                params[k] = params[k] * np.where((np.arange(n_out) // 128) % 2 == 0, 1.0, 1 / 16).astype(np.float32)
        write_gpt2_dir(src, params, config_extra={"n_embd": n_embd})
        export = os.path.join(self.dir, name + "-export")
        run(["export", "--checkpoint", src, "--out", export, "--format", "hf"])
        original = read_model_dir(export)
        out = os.path.join(self.dir, name + "-fp8")
        # With static activation scales, which also evaluate the model with its FP8 weights read back.
        self.calibrate(name, {"input": export, "output_dir": out, "backend": "cpu",
                              "weights": {"granularity": granularity},
                              "activations": {"data": self.train_glob, "num_samples": 8}})
        full_report = load_json(os.path.join(out, "report.json"))
        bf16_loss, fp8_loss = full_report["summary"]["eval_loss_bf16"], full_report["summary"]["eval_loss_fp8_weights"]
        print(f"n_embd {n_embd} {granularity}: eval loss bf16 {bf16_loss:.5f} fp8 weights {fp8_loss:.5f}", file=sys.stderr)
        self.assertLess(abs(fp8_loss - bf16_loss) / bf16_loss, 0.015, (bf16_loss, fp8_loss))
        report = {t["name"]: t for t in full_report["tensors"]}
        loaded = vllm_gpt2_load(read_model_dir(out))
        conv1d = [f"transformer.h.{i}.{m}.weight" for i in range(N_LAYER) for m in CONV1D_MODULES]
        vllm_dequantized = {}
        for w in conv1d:
            dtype, x = original[w]
            self.assertEqual(dtype, "F32")
            n_in, n_out = x.shape  # Conv1D as exported
            ref = x.T.astype(np.float64)  # nn.Linear's [out, in]
            qdtype, q = loaded[w]
            # Static activation scales: compressed-tensors' layout (output_format auto).
            self.assertNotIn(w + "_scale_inv", loaded)
            sdtype, s = loaded[w + "_scale"]
            self.assertEqual((qdtype, sdtype), ("F8_E4M3", "F32"))
            self.assertEqual(q.shape, (n_out, n_in), w)  # stored [in, out], transposed by the loader
            f = decode[q]
            if granularity == "block":
                self.assertEqual(s.shape, (cdiv(n_out, 128), cdiv(n_in, 128)), w)
                deq = f * np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:n_out, :n_in]
                blocks = [(slice(i, i + 128), slice(j, j + 128)) for i in range(0, n_out, 128)
                          for j in range(0, n_in, 128)]
            else:
                self.assertEqual(s.shape, (n_out, 1), w)  # one scale per output feature
                deq = f * s
                blocks = [(slice(i, i + 1), slice(0, n_in)) for i in range(n_out)]
            self.assertTrue(np.all(np.isfinite(deq)), w)
            for b in blocks:
                err = np.linalg.norm(deq[b] - ref[b]) / np.linalg.norm(ref[b])
                self.assertLessEqual(err, 1 / 16, (w, b))
            total = np.linalg.norm(deq - ref) / np.linalg.norm(ref)
            self.assertLess(total, 0.05, w)
            # The report's round trip is the same one.
            self.assertEqual(report[w]["granularity"], granularity)
            self.assertAlmostEqual(report[w]["rel_error"], total, delta=1e-3 * total + 1e-6)
            vllm_dequantized[w] = deq

        # fp8d's own dequantize gives the same weights, back in Conv1D's [in, out].
        back = out + "-bf16"
        self.calibrate(name + "-back", {"input": out, "output_dir": back, "direction": "dequantize",
                                        "backend": "cpu"})
        bf16 = read_model_dir(back)
        for w in conv1d:
            dtype, x = bf16[w]
            self.assertEqual(dtype, "BF16")
            self.assertEqual(x.shape, original[w][1].shape, w)
            want = vllm_dequantized[w].T
            np.testing.assert_allclose(x, want, rtol=2 ** -8, atol=0, err_msg=w)
            self.assertNotIn(w + "_scale", bf16)

    def test_skip_unaligned_leaves_unaligned_tensors_unquantized(self):
        model = os.path.join(self.dir, "mixed.safetensors")
        rng = np.random.default_rng(3)
        write_safetensors(model, {"a.weight": rng.normal(0, 1, (256, 256)).astype(np.float32),
                                  "b.weight": rng.normal(0, 1, (100, 256)).astype(np.float32)})
        out = os.path.join(self.dir, "mixed-out")
        self.calibrate("mixed", {"input": model, "output_dir": out, "backend": "cpu",
                                 "weights": {"skip_unaligned": True}})
        report = load_json(os.path.join(out, "report.json"))
        self.assertEqual([(w["tensor"], w["dims"], w["skipped"]) for w in report["warnings"]], [("b.weight", [0], True)])
        index = load_json(os.path.join(out, "model.safetensors.index.json"))
        self.assertIn("a.weight_scale_inv", index["weight_map"])
        self.assertNotIn("b.weight_scale_inv", index["weight_map"])
        config = load_json(os.path.join(out, "config.json"))
        self.assertEqual(config["quantization_config"]["ignored_layers"], ["b"])

    def test_resume_takes_precedence_over_init_from(self):
        init = os.path.join(self.dir, "resume-init")
        shutil.copytree(self.numpy_dir, init)
        _, ev, out = self.train("resume", init_from=init, training={"max_steps": 2, "save_steps": 1})
        losses = [e["loss"] for e in ev if e["type"] == "progress"]
        # A retry resumes from step-1 (not from init_from, which need not exist anymore): it
        # repeats step 2 bit for bit.
        shutil.rmtree(init)
        path = os.path.join(self.dir, "resume.json")
        p = run(["train", "--spec", path, "--resume-from", os.path.join(out, "checkpoints", "step-1")])
        ev2 = events(p.stdout)
        self.assertEqual([e for e in ev2 if e["type"] == "started"][0]["step"], "1")  # proto JSON: int64 as a string
        self.assertEqual([e["loss"] for e in ev2 if e["type"] == "progress"], losses[1:])


if __name__ == "__main__":
    unittest.main(verbosity=2)
