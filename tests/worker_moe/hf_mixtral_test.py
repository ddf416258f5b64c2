#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""MixtralForCausalLM in and out of fp8d (issue 27), end to end through fp8-worker.

An independent Mixtral: this file writes safetensors by hand with transformers' names (the
router as block_sparse_moe.gate.weight, one tensor per expert as
block_sparse_moe.experts.E.{w1,w2,w3}.weight, w1 the gate, w3 the up and w2 the down
projection) and runs its own numpy forward pass (Mistral's attention, softmax over all experts,
top-k renormalised as MixtralSparseMoeBlock does), so fp8d's import is checked against code that
shares nothing with it. The safetensors, events and norm helpers are the Llama and Qwen3-MoE
tests'. Every process is waited for; every file is under one temporary directory.
"""
import json
import os
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "worker_llama"))
sys.path.insert(0, HERE)
from hf_llama_test import dump_json, events, load_json, read_safetensors, rms_norm, run, to_bf16, write_model_dir  # noqa: E402
from hf_qwen3_moe_test import MoeHfCase, rope_theta, rotate  # noqa: E402

CORPUS = os.environ.get("FP8_TEST_CORPUS", "")
EXIT_BAD_DATA = 65
VOCAB, N_POS = 256, 16

BASE = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 32,
        "intermediate_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": N_POS, "vocab_size": VOCAB, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "tie_word_embeddings": False, "sliding_window": None, "router_jitter_noise": 0.0,
        "output_router_logits": False, "attention_dropout": 0.0}
CONFIGS = {
    # Top-2 of 8 experts (Mixtral-8x7B's routing), no head_dim (hidden_size / heads), top-level
    # rope_theta, F32 weights in one file.
    "top2-of-8": {**BASE, "num_hidden_layers": 2, "num_local_experts": 8, "num_experts_per_tok": 2,
                  "router_aux_loss_coef": 0.02, "rope_theta": 1000000.0},
    # Top-3 of 4, head_dim set, transformers 5's rope_parameters, BF16 weights over two shards.
    "top3-of-4-bf16": {**BASE, "num_hidden_layers": 3, "num_local_experts": 4, "num_experts_per_tok": 3,
                       "head_dim": 16, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
}
WEIGHTS = {"top2-of-8": ("F32", 1), "top3-of-4-bf16": ("BF16", 2)}
# Seeds whose routing is at least 1e-3 from a tie on the test's tokens (top-3 of 4 ties often).
SEEDS = {"top2-of-8": 300, "top3-of-4-bf16": 381}


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def mixtral_params(c, rng):
    """transformers' state dict of the config's MixtralForCausalLM as saved, float32."""
    h, d, kv, nh = c["hidden_size"], head_dim(c), c["num_key_value_heads"], c["num_attention_heads"]
    ffn, n_exp = c["intermediate_size"], c["num_local_experts"]
    p = {"model.embed_tokens.weight": rng.normal(0, 0.5, (VOCAB, h))}
    for i in range(c["num_hidden_layers"]):
        a = f"model.layers.{i}."
        p[a + "input_layernorm.weight"] = 1 + rng.normal(0, 0.1, h)
        for name, rows in (("q_proj", nh * d), ("k_proj", kv * d), ("v_proj", kv * d)):
            p[a + f"self_attn.{name}.weight"] = rng.normal(0, 0.25, (rows, h))
        p[a + "self_attn.o_proj.weight"] = rng.normal(0, 0.25, (h, nh * d))
        p[a + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.1, h)
        p[a + "block_sparse_moe.gate.weight"] = rng.normal(0, 0.5, (n_exp, h))
        for e in range(n_exp):
            x = a + f"block_sparse_moe.experts.{e}."
            p[x + "w1.weight"] = rng.normal(0, 0.3, (ffn, h))
            p[x + "w2.weight"] = rng.normal(0, 0.3, (h, ffn))
            p[x + "w3.weight"] = rng.normal(0, 0.3, (ffn, h))
    p["model.norm.weight"] = 1 + rng.normal(0, 0.1, h)
    p["lm_head.weight"] = rng.normal(0, 0.3, (VOCAB, h))
    return {k: v.astype(np.float32) for k, v in p.items()}


# --- an independent Mixtral -------------------------------------------------------------------

def expert(g, x, prefix):
    """MixtralBlockSparseTop2MLP: w2(silu(w1 x) * w3 x)."""
    a, b = x @ g[prefix + "w1.weight"].T, x @ g[prefix + "w3.weight"].T
    return (a / (1 + np.exp(-a)) * b) @ g[prefix + "w2.weight"].T


def sparse_moe_block(c, g, a, x, margins):
    """MixtralSparseMoeBlock: softmax over all experts, the top k, always renormalised."""
    logits = x @ g[a + "block_sparse_moe.gate.weight"].T
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    k = c["num_experts_per_tok"]
    order = np.argsort(-probs, axis=-1, kind="stable")
    ranked = np.take_along_axis(probs, order, axis=-1)
    if k < probs.shape[-1]:
        margins.append((ranked[:, k - 1] - ranked[:, k]).min())  # how far the choice is from a tie
    chosen = order[:, :k]
    w = np.take_along_axis(probs, chosen, axis=-1)
    w /= w.sum(-1, keepdims=True)
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(k):
            out[t] += w[t, j] * expert(g, x[t:t + 1], a + f"block_sparse_moe.experts.{chosen[t, j]}.")[0]
    return out


def numpy_mixtral_logits(c, p, tokens):
    g = {k: v.astype(np.float64) for k, v in p.items()}
    t, nh, kv, d = len(tokens), c["num_attention_heads"], c["num_key_value_heads"], head_dim(c)
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
        q = rotate((hn @ g[a + "self_attn.q_proj.weight"].T).reshape(t, nh, d).transpose(1, 0, 2), cos, sin)
        k = rotate((hn @ g[a + "self_attn.k_proj.weight"].T).reshape(t, kv, d).transpose(1, 0, 2), cos, sin)
        v = (hn @ g[a + "self_attn.v_proj.weight"].T).reshape(t, kv, d).transpose(1, 0, 2)
        k, v = np.repeat(k, nh // kv, axis=0), np.repeat(v, nh // kv, axis=0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
        s[:, mask] = -np.inf
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        x = x + (s @ v).transpose(1, 0, 2).reshape(t, nh * d) @ g[a + "self_attn.o_proj.weight"].T
        x = x + sparse_moe_block(c, g, a, rms_norm(x, g[a + "post_attention_layernorm.weight"], eps), margins)
    x = rms_norm(x, g["model.norm.weight"], eps)
    return x @ g["lm_head.weight"].T, min(margins) if margins else 1.0


class HfMixtralTest(MoeHfCase):
    numpy_logits = staticmethod(numpy_mixtral_logits)

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="fp8-mixtral-")
        cls.dir = cls.tmp.name
        run(["prepare-data", "--text", CORPUS, "--out", os.path.join(cls.dir, "data")])
        cls.train_glob = os.path.join(cls.dir, "data", "train_*.bin")
        cls.val_glob = os.path.join(cls.dir, "data", "val_*.bin")
        cls.params, cls.dirs = {}, {}
        for name, config in CONFIGS.items():
            params = mixtral_params(config, np.random.default_rng(SEEDS[name]))
            dtype, shards = WEIGHTS[name]
            if dtype == "BF16":  # the reference computes with the values the file holds
                params = {k: to_bf16(v)[1] for k, v in params.items()}
            cls.params[name] = params
            cls.dirs[name] = os.path.join(cls.dir, name)
            write_model_dir(cls.dirs[name], config, params, dtype=dtype, shards=shards)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    # --- must show -----------------------------------------------------------------------------

    def test_logits_match_numpy(self):
        for name, config in CONFIGS.items():
            with self.subTest(model=name):
                self.check_logits(self.dirs[name], config, self.params[name], name)

    def test_fine_tuning_starts_at_the_loaded_models_loss(self):
        name = "top2-of-8"
        _, ev, _ = self.train("finetune", init_from=self.dirs[name], precision={"recipe": "fp8-blockwise"})
        progress = [e for e in ev if e["type"] == "progress"]
        self.assertEqual(len(progress), 2)
        self.assertIn("moe_load_cv", progress[0])
        loaded = self.evaluate("--model", self.dirs[name], "--data", self.train_glob, "--seed", "42",
                               "--first-batch", "4", "--recipe", "fp8-blockwise")["first_batch_loss"]
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
                for key in ("architectures", "model_type", "hidden_size", "intermediate_size", "num_local_experts",
                            "num_experts_per_tok", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                            "max_position_embeddings", "vocab_size", "rms_norm_eps", "sliding_window",
                            "router_jitter_noise", "tie_word_embeddings"):
                    self.assertEqual(config[key], src[key], key)
                self.assertEqual(config["router_aux_loss_coef"], src.get("router_aux_loss_coef", 0.001))
                self.assertEqual(head_dim(config), head_dim(src))
                exported = read_safetensors(os.path.join(hf, "model.safetensors"))
                self.assertEqual(sorted(exported), sorted(self.params[name]))  # transformers' names, no others
                ev_hf = self.evaluate("--model", hf, "--data", self.val_glob, "--seed", "42", "--recipe", "bf16")
                print(f"{name} round trip: trainer eval_loss {done['eval_loss']!r}, export {ev_hf['eval_loss']!r}",
                      file=sys.stderr)
                self.assertAlmostEqual(ev_hf["eval_loss"] / done["eval_loss"], 1.0, delta=1e-6)
                # The export, read by the numpy Mixtral from its own config.json, gives fp8d's logits.
                self.check_logits(hf, config, exported, name + " export")
                # fp8-worker export of the run's checkpoint writes the same Mixtral.
                again = os.path.join(self.dir, "export-" + name)
                run(["export", "--checkpoint", os.path.join(out, "checkpoints"), "--out", again, "--format", "hf"])
                self.assertEqual(load_json(os.path.join(again, "config.json"))["architectures"], ["MixtralForCausalLM"])
                third = self.evaluate("--model", again, "--data", self.val_glob, "--seed", "42", "--recipe", "bf16")
                self.assertEqual(third["eval_loss"], ev_hf["eval_loss"])

    # --- bad input -----------------------------------------------------------------------------

    def test_bad_checkpoints_are_refused_naming_the_field_or_tensor_and_nothing_is_written(self):
        base = CONFIGS["top2-of-8"]
        params = self.params["top2-of-8"]
        gone = "model.layers.1.block_sparse_moe.experts.3.w3.weight"
        # Qwen3-MoE's (fp8d's) names for layer 0's experts in a Mixtral file.
        qwen_names = {k.replace("block_sparse_moe.", "mlp.") if k.startswith("model.layers.0.") else k: v
                      for k, v in params.items()}
        cases = [
            ("missing-expert", base, {k: v for k, v in params.items() if k != gone}, f'missing tensor "{gone}"'),
            ("sliding-window", {**base, "sliding_window": 4096}, params, 'field "sliding_window" is 4096'),
            ("jitter", {**base, "router_jitter_noise": 0.1}, params, 'field "router_jitter_noise" is 0.1'),
            ("top-k-over-experts", {**base, "num_experts_per_tok": 9}, params, 'field "num_experts_per_tok" is 9'),
            ("no-experts-field", {k: v for k, v in base.items() if k != "num_local_experts"}, params,
             'field "num_local_experts" is missing'),
            # The attention part is Mistral's reader, but the error names the file's class.
            ("gelu", {**base, "hidden_act": "gelu"}, params, '(MixtralForCausalLM): field "hidden_act"'),
            ("qwen3-moe-names", base, qwen_names, 'unexpected tensor "model.layers.0.mlp.'),
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
                self.assertNotIn("MistralForCausalLM", err[0]["message"])
                self.assertFalse(os.path.exists(out), f"{out} was written")
                p = run(["evaluate", "--model", d, "--tokens", "1,2,3"], check=False)
                self.assertEqual(p.returncode, EXIT_BAD_DATA, p.stderr)
                self.assertIn(needle, p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
