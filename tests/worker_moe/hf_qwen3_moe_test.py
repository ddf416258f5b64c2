#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Qwen3MoeForCausalLM in and out of fp8d (issue 27), end to end through fp8-worker.

An independent Qwen3-MoE: this file writes safetensors by hand with transformers' names (one
tensor per expert, mlp.experts.E.{gate,up,down}_proj.weight, the router as mlp.gate.weight) and
runs its own numpy forward pass (Qwen3 attention with q/k norms, softmax top-k routing with and
without renormalisation, dense mlp_only_layers), so fp8d's import is checked against code that
shares nothing with it. Every process is waited for; every file is under one temporary directory.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "worker_llama"))
from hf_llama_test import dump_json, events, load_json, read_safetensors, rms_norm, run  # noqa: E402

WORKER = os.environ.get("FP8_WORKER", "fp8-worker")
CORPUS = os.environ.get("FP8_TEST_CORPUS", "")
EXIT_BAD_DATA, EXIT_INVALID_SPEC = 65, 64
VOCAB, N_POS = 256, 16

BASE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 32,
        "intermediate_size": 48, "moe_intermediate_size": 16, "num_experts": 8, "num_experts_per_tok": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": N_POS,
        "vocab_size": VOCAB, "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False,
        "attention_bias": False, "use_sliding_window": False, "sliding_window": None, "decoder_sparse_step": 1,
        "router_aux_loss_coef": 0.001, "output_router_logits": False}
CONFIGS = {
    # Every layer sparse, renormalised top-2, top-level rope_theta.
    "every-layer": {**BASE, "num_hidden_layers": 2, "norm_topk_prob": True, "mlp_only_layers": [],
                    "rope_theta": 1000000.0},
    # The first layer dense (mlp_only_layers), plain top-2 weights, transformers 5's rope_parameters.
    "dense-first": {**BASE, "num_hidden_layers": 3, "norm_topk_prob": False, "mlp_only_layers": [0],
                    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
}


def sparse(c, layer):
    """transformers' Qwen3MoeDecoderLayer: which layers have the sparse MLP."""
    return layer not in c["mlp_only_layers"] and c["num_experts"] > 0 and (layer + 1) % c["decoder_sparse_step"] == 0


def qwen3_moe_params(c, rng):
    """transformers' state dict of the config's model, float32, one tensor per expert."""
    h, d, kv, nh = c["hidden_size"], c["head_dim"], c["num_key_value_heads"], c["num_attention_heads"]
    p = {"model.embed_tokens.weight": rng.normal(0, 0.5, (VOCAB, h))}
    for i in range(c["num_hidden_layers"]):
        a = f"model.layers.{i}."
        p[a + "input_layernorm.weight"] = 1 + rng.normal(0, 0.1, h)
        for name, rows in (("q_proj", nh * d), ("k_proj", kv * d), ("v_proj", kv * d)):
            p[a + f"self_attn.{name}.weight"] = rng.normal(0, 0.25, (rows, h))
        p[a + "self_attn.o_proj.weight"] = rng.normal(0, 0.25, (h, nh * d))
        p[a + "self_attn.q_norm.weight"] = 1 + rng.normal(0, 0.2, d)
        p[a + "self_attn.k_norm.weight"] = 1 + rng.normal(0, 0.2, d)
        p[a + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.1, h)
        if sparse(c, i):
            p[a + "mlp.gate.weight"] = rng.normal(0, 0.5, (c["num_experts"], h))
            mi = c["moe_intermediate_size"]
            for e in range(c["num_experts"]):
                x = a + f"mlp.experts.{e}."
                p[x + "gate_proj.weight"] = rng.normal(0, 0.3, (mi, h))
                p[x + "up_proj.weight"] = rng.normal(0, 0.3, (mi, h))
                p[x + "down_proj.weight"] = rng.normal(0, 0.3, (h, mi))
        else:
            n_in = c["intermediate_size"]
            p[a + "mlp.gate_proj.weight"] = rng.normal(0, 0.25, (n_in, h))
            p[a + "mlp.up_proj.weight"] = rng.normal(0, 0.25, (n_in, h))
            p[a + "mlp.down_proj.weight"] = rng.normal(0, 0.2, (h, n_in))
    p["model.norm.weight"] = 1 + rng.normal(0, 0.1, h)
    p["lm_head.weight"] = rng.normal(0, 0.3, (VOCAB, h))
    return {k: v.astype(np.float32) for k, v in p.items()}


def write_safetensors(path, tensors):
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


def write_model_dir(d, config, params):
    os.makedirs(d, exist_ok=True)
    dump_json(os.path.join(d, "config.json"), config)
    write_safetensors(os.path.join(d, "model.safetensors"), params)


# --- an independent Qwen3-MoE -----------------------------------------------------------------

def rope_theta(c):
    return (c.get("rope_parameters") or {}).get("rope_theta", c.get("rope_theta", 10000.0))


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., half:], x[..., :half]], axis=-1) * sin


def swiglu(x, g, a):
    gate, up = x @ g[a + "gate_proj.weight"].T, x @ g[a + "up_proj.weight"].T
    return (gate / (1 + np.exp(-gate)) * up) @ g[a + "down_proj.weight"].T


def sparse_moe_block(c, g, a, x, margins):
    """transformers' Qwen3MoeSparseMoeBlock: softmax over all experts, top-k, optionally renormalised."""
    logits = x @ g[a + "mlp.gate.weight"].T
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    k = c["num_experts_per_tok"]
    order = np.argsort(-probs, axis=-1, kind="stable")
    chosen = order[:, :k]
    ranked = np.take_along_axis(probs, order, axis=-1)
    margins.append((ranked[:, k - 1] - ranked[:, k]).min())  # how far the choice is from a tie
    w = np.take_along_axis(probs, chosen, axis=-1)
    if c["norm_topk_prob"]:
        w = w / w.sum(-1, keepdims=True)
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(k):
            out[t] += w[t, j] * swiglu(x[t:t + 1], g, a + f"mlp.experts.{chosen[t, j]}.")[0]
    return out


def numpy_qwen3_moe_logits(c, p, tokens):
    g = {k: v.astype(np.float64) for k, v in p.items()}
    t, nh, kv, d = len(tokens), c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    eps = c["rms_norm_eps"]
    inv = 1.0 / rope_theta(c) ** (np.arange(0, d, 2, dtype=np.float64) / d)
    freqs = np.outer(np.arange(t), inv)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)
    mask = np.triu(np.ones((t, t), dtype=bool), 1)
    margins = []
    x = g["model.embed_tokens.weight"][tokens]
    for i in range(c["num_hidden_layers"]):
        a = f"model.layers.{i}."
        hn = rms_norm(x, g[a + "input_layernorm.weight"], eps)
        q = (hn @ g[a + "self_attn.q_proj.weight"].T).reshape(t, nh, d).transpose(1, 0, 2)
        k = (hn @ g[a + "self_attn.k_proj.weight"].T).reshape(t, kv, d).transpose(1, 0, 2)
        v = (hn @ g[a + "self_attn.v_proj.weight"].T).reshape(t, kv, d).transpose(1, 0, 2)
        q = rotate(rms_norm(q, g[a + "self_attn.q_norm.weight"], eps), cos, sin)
        k = rotate(rms_norm(k, g[a + "self_attn.k_norm.weight"], eps), cos, sin)
        k, v = np.repeat(k, nh // kv, axis=0), np.repeat(v, nh // kv, axis=0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
        s[:, mask] = -np.inf
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        x = x + (s @ v).transpose(1, 0, 2).reshape(t, nh * d) @ g[a + "self_attn.o_proj.weight"].T
        m = rms_norm(x, g[a + "post_attention_layernorm.weight"], eps)
        x = x + (sparse_moe_block(c, g, a, m, margins) if sparse(c, i) else swiglu(m, g, a + "mlp."))
    x = rms_norm(x, g["model.norm.weight"], eps)
    return x @ g["lm_head.weight"].T, min(margins)


class MoeHfCase(unittest.TestCase):
    """What the tests of both MoE families do with fp8-worker: evaluate, train a spec, and check
    its logits against the family's numpy forward (`numpy_logits`, set by the subclass)."""

    numpy_logits = None

    def evaluate(self, *args):
        return json.loads(run(["evaluate"] + list(args)).stdout)

    def train(self, name, check=True, **kw):
        training = {"max_steps": 2, "per_device_train_batch_size": 4, "logging_steps": 1, "eval_steps": 100,
                    "save_steps": 100, "learning_rate": 1e-3}
        training.update(kw.pop("training", {}))
        out = os.path.join(self.dir, "runs", name)
        spec = {"data": {"train": self.train_glob, "val": self.val_glob}, "training": training, "output_dir": out,
                "backend": kw.pop("backend", "cpu"), **kw}
        path = os.path.join(self.dir, name + ".json")
        dump_json(path, spec)
        p = run(["train", "--spec", path], check=check)
        return p, events(p.stdout), out

    def check_logits(self, model_dir, config, params, label, tol=1e-4):
        tokens = [3, 101, 7, 255, 0, 42, 42, 200, 17, 64, 9, 128, 5]
        got = self.evaluate("--model", model_dir, "--tokens", ",".join(map(str, tokens)), "--recipe", "fp32")
        got = np.array(got["logits"], dtype=np.float64)
        want, margin = self.numpy_logits(config, params, tokens)
        self.assertGreater(margin, 1e-4, "a token's k-th and next expert nearly tie: pick another seed")
        self.assertEqual(got.shape, want.shape)
        self.assertGreater(np.abs(want).max(), 1.0)
        rel = np.abs(got - want).max() / np.abs(want).max()
        print(f"{label}: max |fp8d - numpy| / max |numpy| = {rel:.3g} (closest routing tie {margin:.2g})",
              file=sys.stderr)
        self.assertLess(rel, tol, label)


class HfQwen3MoeTest(MoeHfCase):
    numpy_logits = staticmethod(numpy_qwen3_moe_logits)

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="fp8-moe-")
        cls.dir = cls.tmp.name
        run(["prepare-data", "--text", CORPUS, "--out", os.path.join(cls.dir, "data")])
        cls.train_glob = os.path.join(cls.dir, "data", "train_*.bin")
        cls.val_glob = os.path.join(cls.dir, "data", "val_*.bin")
        cls.params, cls.dirs = {}, {}
        for i, (name, config) in enumerate(CONFIGS.items()):
            cls.params[name] = qwen3_moe_params(config, np.random.default_rng(200 + i))
            cls.dirs[name] = os.path.join(cls.dir, name)
            write_model_dir(cls.dirs[name], config, cls.params[name])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    # --- must show -----------------------------------------------------------------------------

    def test_logits_match_numpy(self):
        for name, config in CONFIGS.items():
            with self.subTest(model=name):
                self.check_logits(self.dirs[name], config, self.params[name], name)

    def test_fine_tuning_starts_at_the_loaded_models_loss_with_each_recipe(self):
        name = "dense-first"
        for recipe in ("bf16", "fp8-tensorwise", "fp8-blockwise"):
            with self.subTest(recipe=recipe):
                _, ev, _ = self.train(f"finetune-{recipe}", init_from=self.dirs[name], precision={"recipe": recipe})
                progress = [e for e in ev if e["type"] == "progress"]
                self.assertEqual(len(progress), 2)
                self.assertIn("moe_load_cv", progress[0])
                self.assertIn("moe_aux_loss", progress[0])
                loaded = self.evaluate("--model", self.dirs[name], "--data", self.train_glob, "--seed", "42",
                                       "--first-batch", "4", "--recipe", recipe)["first_batch_loss"]
                print(f"{recipe}: step-1 loss {progress[0]['loss']:.6f}, loaded model {loaded:.6f}", file=sys.stderr)
                self.assertAlmostEqual(progress[0]["loss"] / loaded, 1.0, delta=1e-6)

    def test_export_import_round_trip_same_eval_loss(self):
        for name in CONFIGS:
            with self.subTest(model=name):
                _, ev, out = self.train("roundtrip-" + name, init_from=self.dirs[name],
                                        training={"max_steps": 3, "eval_steps": 3, "export": "hf"})
                done = [e for e in ev if e["type"] == "done"][0]["result"]
                hf = os.path.join(out, "hf")
                config = load_json(os.path.join(hf, "config.json"))
                src = CONFIGS[name]
                for key in ("architectures", "model_type", "hidden_size", "intermediate_size", "moe_intermediate_size",
                            "num_experts", "num_experts_per_tok", "norm_topk_prob", "decoder_sparse_step",
                            "mlp_only_layers", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                            "head_dim", "max_position_embeddings", "vocab_size", "rms_norm_eps", "router_aux_loss_coef"):
                    self.assertEqual(config[key], src[key], key)
                exported = read_safetensors(os.path.join(hf, "model.safetensors"))
                self.assertEqual(sorted(exported), sorted(self.params[name]))  # transformers' names, no others
                ev_hf = self.evaluate("--model", hf, "--data", self.val_glob, "--seed", "42", "--recipe", "bf16")
                print(f"{name} round trip: trainer eval_loss {done['eval_loss']!r}, export {ev_hf['eval_loss']!r}",
                      file=sys.stderr)
                self.assertAlmostEqual(ev_hf["eval_loss"] / done["eval_loss"], 1.0, delta=1e-6)
                # The export, read by the numpy Qwen3-MoE from its own config.json, gives fp8d's logits.
                self.check_logits(hf, config, exported, name + " export")

    def test_a_moe_tiny_spec_trains_exports_and_reads_back(self):
        _, ev, out = self.train("moe-tiny", model={"preset": "moe-tiny", "seq_len": 32},
                                training={"max_steps": 4, "eval_steps": 4, "export": "hf"})
        done = [e for e in ev if e["type"] == "done"][0]["result"]
        config = load_json(os.path.join(out, "hf", "config.json"))
        self.assertEqual(config["architectures"], ["Qwen3MoeForCausalLM"])
        self.assertEqual((config["num_experts"], config["num_experts_per_tok"]), (8, 2))
        again = self.evaluate("--model", os.path.join(out, "hf"), "--data", self.val_glob, "--seed", "42",
                              "--recipe", "bf16")
        self.assertAlmostEqual(again["eval_loss"] / done["eval_loss"], 1.0, delta=1e-6)
        exported = os.path.join(self.dir, "moe-tiny-export")
        run(["export", "--checkpoint", os.path.join(out, "checkpoints"), "--out", exported, "--format", "hf"])
        third = self.evaluate("--model", exported, "--data", self.val_glob, "--seed", "42", "--recipe", "bf16")
        self.assertEqual(third["eval_loss"], again["eval_loss"])

    def test_two_ranks_over_gloo_match_one_rank_with_each_router(self):
        # The sigmoid router's bias moves by the loads of both ranks' tokens (summed in the
        # all-reduce), so the two ranks keep one model and follow the one-rank curve (to 1e-3: the
        # FP8 casts differ, tensorwise's first by each rank's own amax, blockwise's dW operands
        # by their 128-row blocks over each rank's rows). Under fp8-tensorwise every expert
        # casts on every rank, with tokens or none, so the ranks max-reduce the same amaxes.
        for router, recipe in (("softmax-topk", "fp8-tensorwise"), ("sigmoid-bias", "fp8-blockwise")):
            with self.subTest(router=router, recipe=recipe):
                moe = {"router": router}
                if router == "sigmoid-bias":
                    moe["bias_update_rate"] = 0.01
                model = {"preset": "moe-tiny", "seq_len": 32, "moe": moe}
                training = {"max_steps": 8, "logging_steps": 1}
                _, one, _ = self.train("ranks1-" + router, model=model, precision={"recipe": recipe},
                                       training={**training, "per_device_train_batch_size": 8})
                out = os.path.join(self.dir, "runs", "ranks2-" + router)
                spec = {"data": {"train": self.train_glob}, "output_dir": out, "backend": "cpu", "model": model,
                        "precision": {"recipe": recipe}, "training": {**training, "per_device_train_batch_size": 4}}
                path = os.path.join(self.dir, "ranks2-" + router + ".json")
                dump_json(path, spec)
                procs = [subprocess.Popen([WORKER, "train", "--spec", path], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True,
                                          env={**os.environ, "FP8D_RANK": str(r), "FP8D_WORLD_SIZE": "2",
                                               "FP8D_RENDEZVOUS_DIR": out + "-rdzv"})
                         for r in range(2)]
                outs = [p.communicate(timeout=300) for p in procs]
                for p, (_, err) in zip(procs, outs):
                    self.assertEqual(p.returncode, 0, err)
                losses = [[e["loss"] for e in events(o) if e["type"] == "progress"] for o, _ in outs]
                ref = [e["loss"] for e in one if e["type"] == "progress"]
                self.assertEqual(len(ref), 8)
                self.assertEqual(losses[0], losses[1])
                cv = [[e["moe_load_cv"] for e in events(o) if e["type"] == "progress"] for o, _ in outs]
                self.assertEqual(cv[0], cv[1])  # the loads of all tokens, on every rank
                for i, (a, b) in enumerate(zip(losses[0], ref)):
                    self.assertAlmostEqual(a / b, 1.0, delta=1e-3, msg=f"step {i + 1}")

    # --- bad input -----------------------------------------------------------------------------

    def test_bad_checkpoints_are_refused_naming_the_field_or_tensor_and_nothing_is_written(self):
        base = CONFIGS["every-layer"]
        params = self.params["every-layer"]
        missing = {k: v for k, v in params.items() if k != "model.layers.1.mlp.experts.3.up_proj.weight"}
        cases = [
            ("missing-expert", base, missing, "model.layers.1.mlp.experts.3.up_proj.weight"),
            ("top-k-over-experts", {**base, "num_experts_per_tok": 9}, params, "num_experts_per_tok"),
            ("sparse-step", {**base, "decoder_sparse_step": 2}, params, "decoder_sparse_step"),
            ("dense-later-layer", {**base, "mlp_only_layers": [1]}, params, "mlp_only_layers"),
            ("no-experts-field", {k: v for k, v in base.items() if k != "num_experts"}, params, "num_experts"),
        ]
        for name, config, tensors, needle in cases:
            with self.subTest(case=name):
                d = os.path.join(self.dir, "bad-" + name)
                write_model_dir(d, config, tensors)
                p, ev, out = self.train("bad-" + name, check=False, init_from=d)
                self.assertEqual(p.returncode, EXIT_BAD_DATA, p.stderr)
                err = [e for e in ev if e["type"] == "error"]
                self.assertEqual(len(err), 1)
                self.assertIn("init_from", err[0]["message"])
                self.assertIn(needle, err[0]["message"])
                self.assertFalse(os.path.exists(out), f"{out} was written")
                p = run(["evaluate", "--model", d, "--tokens", "1,2,3"], check=False)
                self.assertEqual(p.returncode, EXIT_BAD_DATA, p.stderr)
                self.assertIn(needle, p.stderr)

    def test_bad_specs_are_refused_naming_the_field_and_nothing_is_written(self):
        cases = [
            ("spec-top-k", {"model": {"preset": "moe-tiny", "moe": {"num_experts": 4, "experts_per_token": 5}}},
             "model.moe.experts_per_token: must be at most model.moe.num_experts (4)"),
            ("spec-sigmoid-export", {"model": {"preset": "moe-tiny", "moe": {"router": "sigmoid-bias"}},
                                     "training": {"export": "hf"}}, "training.export: hf writes Qwen3MoeForCausalLM"),
            ("spec-moe-on-gpt2", {"model": {"preset": "tiny", "moe": {"num_experts": 4}}}, "(set: moe)"),
        ]
        for name, kw, needle in cases:
            with self.subTest(case=name):
                p, ev, out = self.train(name, check=False, **kw)
                self.assertEqual(p.returncode, EXIT_INVALID_SPEC, p.stderr)
                self.assertIn(needle, [e for e in ev if e["type"] == "error"][0]["message"])
                self.assertFalse(os.path.exists(out), f"{out} was written")

    def test_a_model_qwen3_moe_cannot_hold_is_not_exported(self):
        # sigmoid-bias trains (no export asked), but fp8-worker export refuses its checkpoint.
        _, _, out = self.train("sigmoid", model={"preset": "moe-tiny", "seq_len": 32,
                                                 "moe": {"router": "sigmoid-bias", "num_shared_experts": 1}})
        target = os.path.join(self.dir, "sigmoid-export")
        p = run(["export", "--checkpoint", os.path.join(out, "checkpoints"), "--out", target, "--format", "hf"],
                check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("routes by softmax-topk", p.stderr)
        self.assertFalse(os.path.exists(target))

    def test_backend_cuda_refuses_moe(self):
        for name, kw in (("spec", {"model": {"preset": "moe-tiny"}}), ("init-from", {"init_from": self.dirs["every-layer"]})):
            with self.subTest(source=name):
                p, ev, out = self.train("cuda-" + name, check=False, backend="cuda", **kw)
                self.assertEqual(p.returncode, EXIT_INVALID_SPEC, p.stderr)
                message = [e for e in ev if e["type"] == "error"][0]["message"]
                # A build without CUDA refuses the backend first.
                self.assertTrue(message.startswith("model.moe: the cuda backend does not run MoE yet") or
                                message.startswith("backend: cuda"), message)
                self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main(verbosity=2)
