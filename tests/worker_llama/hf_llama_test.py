#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Llama family in and out of Hugging Face (issue 26), end to end through fp8-worker.

An independent Llama: this file writes safetensors by hand with transformers' names (F32, BF16
and F16, single and sharded) and config.json in both of transformers' rope styles, and runs
its own numpy forward pass (RMSNorm, rotate_half RoPE with Llama-3's frequency bands, GQA,
SwiGLU, Qwen2's q/k/v biases, Qwen3's q/k norms), so fp8d's import is checked against code
that shares nothing with it. Every process is waited for; every file is under one temporary
directory.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

WORKER = os.environ.get("FP8_WORKER", "fp8-worker")
CORPUS = os.environ.get("FP8_TEST_CORPUS", "")
EXIT_BAD_DATA, EXIT_INVALID_SPEC = 65, 64
VOCAB, N_POS = 256, 16

# Three models of the family, small enough for a 2-core CI machine.
CONFIGS = {
    # Llama-3 style: GQA, llama3 rope scaling (top-level rope_theta / rope_scaling), untied head.
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": N_POS, "vocab_size": VOCAB, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8},
              "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False},
    # Qwen2: q/k/v biases, tied head, a sliding window that is not used.
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 32,
              "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
              "max_position_embeddings": 4096, "vocab_size": VOCAB, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
              "rope_scaling": None, "hidden_act": "silu", "tie_word_embeddings": True,
              "use_sliding_window": False, "sliding_window": 4096},
    # Qwen3: q/k norms, head_dim != hidden_size / heads, transformers 5's rope_parameters.
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "max_position_embeddings": N_POS, "vocab_size": VOCAB, "rms_norm_eps": 1e-6,
              "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
              "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
              "use_sliding_window": False},
}


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
    out = []
    for line in stdout.splitlines():
        if line.strip():
            e = json.loads(line)
            out += [{"type": k, **v} for k, v in e.items() if k != "time"]
    return out


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def llama_params(c, rng):
    """transformers' state dict of the config's model, float32."""
    h, d, kv, n_in = c["hidden_size"], head_dim(c), c["num_key_value_heads"], c["intermediate_size"]
    nh = c["num_attention_heads"]
    qkv_bias = c["architectures"][0] == "Qwen2ForCausalLM"
    qk_norm = c["architectures"][0] == "Qwen3ForCausalLM"
    p = {"model.embed_tokens.weight": rng.normal(0, 0.5, (VOCAB, h))}
    for i in range(c["num_hidden_layers"]):
        a = f"model.layers.{i}."
        p[a + "input_layernorm.weight"] = 1 + rng.normal(0, 0.1, h)
        for name, rows in (("q_proj", nh * d), ("k_proj", kv * d), ("v_proj", kv * d)):
            p[a + f"self_attn.{name}.weight"] = rng.normal(0, 0.25, (rows, h))
            if qkv_bias:
                p[a + f"self_attn.{name}.bias"] = rng.normal(0, 0.2, rows)
        p[a + "self_attn.o_proj.weight"] = rng.normal(0, 0.25, (h, nh * d))
        if qk_norm:
            p[a + "self_attn.q_norm.weight"] = 1 + rng.normal(0, 0.2, d)
            p[a + "self_attn.k_norm.weight"] = 1 + rng.normal(0, 0.2, d)
        p[a + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.1, h)
        p[a + "mlp.gate_proj.weight"] = rng.normal(0, 0.25, (n_in, h))
        p[a + "mlp.up_proj.weight"] = rng.normal(0, 0.25, (n_in, h))
        p[a + "mlp.down_proj.weight"] = rng.normal(0, 0.2, (h, n_in))
    p["model.norm.weight"] = 1 + rng.normal(0, 0.1, h)
    if not c["tie_word_embeddings"]:
        p["lm_head.weight"] = rng.normal(0, 0.3, (VOCAB, h))
    return {k: v.astype(np.float32) for k, v in p.items()}


def to_bf16(a):
    """float32 → the bf16 bit pattern (round to nearest even) and back, as float32."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return u, (u.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors, dtype="F32"):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        if dtype == "F32":
            b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        elif dtype == "F16":
            b = np.ascontiguousarray(a, dtype="<f2").tobytes()
        else:
            b = to_bf16(a)[0].astype("<u2").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name != "__metadata__":
            assert t["dtype"] == "F32", (name, t["dtype"])
            b, e = t["data_offsets"]
            out[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(t["shape"])
    return out


def write_model_dir(d, config, params, dtype="F32", shards=1):
    """config.json and the weights; with shards > 1, model-0000i-of-0000n + the index."""
    os.makedirs(d, exist_ok=True)
    dump_json(os.path.join(d, "config.json"), config)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), params, dtype)
        return
    names = list(params)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: params[n] for n in names[s::shards]}
        write_safetensors(os.path.join(d, file), part, dtype)
        weight_map.update({n: file for n in part})
    dump_json(os.path.join(d, "model.safetensors.index.json"), {"metadata": {}, "weight_map": weight_map})


# --- an independent Llama ---------------------------------------------------------------------

def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def inv_frequencies(c):
    rope = c.get("rope_parameters") or {"rope_theta": c.get("rope_theta", 10000.0), **(c.get("rope_scaling") or {})}
    d = head_dim(c)
    inv = 1.0 / rope["rope_theta"] ** (np.arange(0, d, 2, dtype=np.float64) / d)
    if rope.get("rope_type", "default") == "llama3":
        factor, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        wavelen = 2 * np.pi / inv
        scaled = np.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        medium = (wavelen >= old / hi) & (wavelen <= old / lo)
        inv = np.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    return inv


def rotate(x, cos, sin):
    """transformers' apply_rotary_pos_emb: x·cos + rotate_half(x)·sin, x [heads, t, d]."""
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def numpy_llama_logits(c, p, tokens):
    g = {k: v.astype(np.float64) for k, v in p.items()}
    t, nh, kv, d = len(tokens), c["num_attention_heads"], c["num_key_value_heads"], head_dim(c)
    eps = c["rms_norm_eps"]
    freqs = np.outer(np.arange(t), inv_frequencies(c))
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)
    mask = np.triu(np.ones((t, t), dtype=bool), 1)
    x = g["model.embed_tokens.weight"][tokens]
    for i in range(c["num_hidden_layers"]):
        a = f"model.layers.{i}."
        hn = rms_norm(x, g[a + "input_layernorm.weight"], eps)

        def proj(name):
            y = hn @ g[a + f"self_attn.{name}.weight"].T
            return y + g[a + f"self_attn.{name}.bias"] if a + f"self_attn.{name}.bias" in g else y

        q = proj("q_proj").reshape(t, nh, d).transpose(1, 0, 2)
        k = proj("k_proj").reshape(t, kv, d).transpose(1, 0, 2)
        v = proj("v_proj").reshape(t, kv, d).transpose(1, 0, 2)
        if a + "self_attn.q_norm.weight" in g:
            q = rms_norm(q, g[a + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, g[a + "self_attn.k_norm.weight"], eps)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k, v = np.repeat(k, nh // kv, axis=0), np.repeat(v, nh // kv, axis=0)  # repeat_kv
        s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
        s[:, mask] = -np.inf
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        y = (s @ v).transpose(1, 0, 2).reshape(t, nh * d)
        x = x + y @ g[a + "self_attn.o_proj.weight"].T
        m = rms_norm(x, g[a + "post_attention_layernorm.weight"], eps)
        gate, up = m @ g[a + "mlp.gate_proj.weight"].T, m @ g[a + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ g[a + "mlp.down_proj.weight"].T
    x = rms_norm(x, g["model.norm.weight"], eps)
    head = g["model.embed_tokens.weight"] if c["tie_word_embeddings"] else g["lm_head.weight"]
    return x @ head.T


class HfLlamaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="fp8-llama-")
        cls.dir = cls.tmp.name
        run(["prepare-data", "--text", CORPUS, "--out", os.path.join(cls.dir, "data")])
        cls.train_glob = os.path.join(cls.dir, "data", "train_*.bin")
        cls.val_glob = os.path.join(cls.dir, "data", "val_*.bin")
        cls.params, cls.dirs = {}, {}
        for i, (name, config) in enumerate(CONFIGS.items()):
            cls.params[name] = llama_params(config, np.random.default_rng(100 + i))
            cls.dirs[name] = os.path.join(cls.dir, name)
            write_model_dir(cls.dirs[name], config, cls.params[name])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def evaluate(self, *args):
        return json.loads(run(["evaluate"] + list(args)).stdout)

    def train(self, name, check=True, **kw):
        training = {"max_steps": 2, "per_device_train_batch_size": 4, "logging_steps": 1, "eval_steps": 100,
                    "save_steps": 100, "learning_rate": 1e-3}
        training.update(kw.pop("training", {}))
        out = os.path.join(self.dir, "runs", name)
        spec = {"data": {"train": self.train_glob, "val": self.val_glob}, "training": training, "output_dir": out,
                "backend": "cpu", **kw}
        path = os.path.join(self.dir, name + ".json")
        dump_json(path, spec)
        p = run(["train", "--spec", path], check=check)
        return p, events(p.stdout), out

    def check_logits(self, model_dir, config, params, label, tol=1e-4):
        tokens = [3, 101, 7, 255, 0, 42, 42, 200, 17, 64, 9, 128, 5]
        got = self.evaluate("--model", model_dir, "--tokens", ",".join(map(str, tokens)), "--recipe", "fp32")
        self.assertEqual(got["architecture"], "llama")
        got = np.array(got["logits"], dtype=np.float64)
        want = numpy_llama_logits(config, params, tokens)
        self.assertEqual(got.shape, want.shape)
        self.assertGreater(np.abs(want).max(), 1.0)  # logits of some size, not a degenerate model
        rel = np.abs(got - want).max() / np.abs(want).max()
        print(f"{label}: max |fp8d - numpy| / max |numpy| = {rel:.3g}", file=sys.stderr)
        self.assertLess(rel, tol, label)

    # --- must show -----------------------------------------------------------------------------

    def test_logits_match_numpy(self):
        for name, config in CONFIGS.items():
            with self.subTest(model=name):
                self.check_logits(self.dirs[name], config, self.params[name], name)

    def test_sharded_bf16_and_f16_weights_import(self):
        for dtype in ("BF16", "F16"):
            with self.subTest(dtype=dtype):
                config = CONFIGS["qwen3"]
                params = self.params["qwen3"]
                rounded = {k: (to_bf16(v)[1] if dtype == "BF16" else v.astype(np.float16).astype(np.float32))
                           for k, v in params.items()}
                d = os.path.join(self.dir, "qwen3-" + dtype)
                write_model_dir(d, config, params, dtype=dtype, shards=3)
                self.check_logits(d, config, rounded, "qwen3 " + dtype + " in 3 shards")

    def test_fine_tuning_starts_at_the_loaded_models_loss(self):
        for name in CONFIGS:
            for recipe in ("bf16", "fp8-tensorwise", "fp8-blockwise"):
                with self.subTest(model=name, recipe=recipe):
                    _, ev, _ = self.train(f"finetune-{name}-{recipe}", init_from=self.dirs[name],
                                          precision={"recipe": recipe})
                    self.assertEqual([e for e in ev if e["type"] == "done"][0]["result"]["steps"], 2)
                    step1 = [e for e in ev if e["type"] == "progress"][0]["loss"]
                    loaded = self.evaluate("--model", self.dirs[name], "--data", self.train_glob, "--seed", "42",
                                           "--first-batch", "4", "--recipe", recipe)["first_batch_loss"]
                    print(f"{name} {recipe}: step-1 loss {step1:.6f}, loaded model {loaded:.6f}", file=sys.stderr)
                    self.assertAlmostEqual(step1 / loaded, 1.0, delta=1e-6)

    def test_export_import_round_trip_same_eval_loss(self):
        for name in CONFIGS:
            with self.subTest(model=name):
                _, ev, out = self.train("roundtrip-" + name, init_from=self.dirs[name],
                                        training={"max_steps": 3, "eval_steps": 3, "export": "hf"})
                done = [e for e in ev if e["type"] == "done"][0]["result"]
                hf = os.path.join(out, "hf")
                config = load_json(os.path.join(hf, "config.json"))
                src = CONFIGS[name]
                self.assertEqual(config["architectures"], src["architectures"])
                for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                            "num_key_value_heads", "max_position_embeddings", "vocab_size", "rms_norm_eps",
                            "tie_word_embeddings"):
                    self.assertEqual(config[key], src[key], key)
                self.assertEqual(config["head_dim"], head_dim(src))
                self.assertTrue(os.path.exists(os.path.join(hf, "generation_config.json")))
                exported = read_safetensors(os.path.join(hf, "model.safetensors"))
                self.assertEqual(sorted(exported), sorted(self.params[name]))  # transformers' names, no others
                ev_hf = self.evaluate("--model", hf, "--data", self.val_glob, "--seed", "42", "--recipe", "bf16")
                print(f"{name} round trip: trainer eval_loss {done['eval_loss']!r}, export {ev_hf['eval_loss']!r}",
                      file=sys.stderr)
                self.assertAlmostEqual(ev_hf["eval_loss"] / done["eval_loss"], 1.0, delta=1e-6)
                # The export, read by the numpy Llama from its own config.json, gives fp8d's logits.
                self.check_logits(hf, config, exported, name + " export")

    def test_a_llama_spec_trains_exports_and_reads_back(self):
        _, ev, out = self.train("llama-tiny", model={"preset": "llama-tiny", "seq_len": 32},
                                training={"max_steps": 4, "eval_steps": 4, "export": "hf"})
        done = [e for e in ev if e["type"] == "done"][0]["result"]
        config = load_json(os.path.join(out, "hf", "config.json"))
        self.assertEqual(config["architectures"], ["LlamaForCausalLM"])
        self.assertEqual((config["num_attention_heads"], config["num_key_value_heads"]), (4, 2))
        again = self.evaluate("--model", os.path.join(out, "hf"), "--data", self.val_glob, "--seed", "42",
                              "--recipe", "bf16")
        self.assertAlmostEqual(again["eval_loss"] / done["eval_loss"], 1.0, delta=1e-6)
        # fp8-worker export of the checkpoint writes the same model.
        exported = os.path.join(self.dir, "llama-tiny-export")
        run(["export", "--checkpoint", os.path.join(out, "checkpoints"), "--out", exported, "--format", "hf",
             "--max-shard-bytes", "100000"])
        self.assertTrue(os.path.exists(os.path.join(exported, "model.safetensors.index.json")))
        third = self.evaluate("--model", exported, "--data", self.val_glob, "--seed", "42", "--recipe", "bf16")
        self.assertEqual(third["eval_loss"], again["eval_loss"])

    def test_unsupported_configs_are_refused_naming_the_field_and_nothing_is_written(self):
        base = CONFIGS["llama"]
        cases = [
            ("sliding", {**CONFIGS["qwen2"], "architectures": ["MistralForCausalLM"], "model_type": "mistral",
                         "sliding_window": 4096}, "sliding_window"),
            ("qwen-sliding", {**CONFIGS["qwen2"], "use_sliding_window": True}, "use_sliding_window"),
            ("yarn", {**base, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_type"),
            ("yarn-v5", {**CONFIGS["qwen3"], "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}},
             "rope_type"),
            ("gelu", {**base, "hidden_act": "gelu"}, "hidden_act"),
            ("mlp-bias", {**base, "mlp_bias": True}, "mlp_bias"),
            ("kv-heads", {**base, "num_key_value_heads": 3}, "num_key_value_heads"),
            ("gemma", {**base, "architectures": ["GemmaForCausalLM"], "model_type": "gemma"}, "GemmaForCausalLM"),
        ]
        for name, config, needle in cases:
            with self.subTest(case=name):
                d = os.path.join(self.dir, "bad-" + name)
                write_model_dir(d, config, self.params["llama"])
                p, ev, out = self.train("bad-" + name, check=False, init_from=d)
                self.assertEqual(p.returncode, EXIT_BAD_DATA, p.stderr)
                err = [e for e in ev if e["type"] == "error"]
                self.assertEqual(len(err), 1)
                self.assertIn("init_from", err[0]["message"])
                self.assertIn(needle, err[0]["message"])
                self.assertFalse(os.path.exists(out), f"{out} was written")
                p = run(["export", "--checkpoint", d, "--out", d + "-export", "--format", "hf"], check=False)
                self.assertEqual(p.returncode, EXIT_BAD_DATA, p.stderr)
                self.assertIn(needle, p.stderr)
                self.assertFalse(os.path.exists(d + "-export"))

    def test_backend_cuda_takes_a_llama(self):
        # The CUDA backend trains the Llama family too: the run either trains (a GPU is visible)
        # or is refused for the backend alone (no GPU, or a build without CUDA), never for the model.
        for name, kw in (("spec", {"model": {"architecture": "llama"}}), ("init-from", {"init_from": self.dirs["llama"]})):
            with self.subTest(source=name):
                p, ev, out = self.train("cuda-" + name, check=False, backend="cuda", **kw)
                if p.returncode == 0:
                    continue
                self.assertEqual(p.returncode, EXIT_INVALID_SPEC, p.stderr)
                message = [e for e in ev if e["type"] == "error"][0]["message"]
                self.assertTrue(message.startswith("backend: cuda"), message)
                self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main(verbosity=2)
