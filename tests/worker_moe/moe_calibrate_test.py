#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Calibration of mixture-of-experts checkpoints (issue 27): Qwen3-MoE and Mixtral through
`fp8-worker calibrate`, end to end.

The checkpoints are the Qwen3-MoE and Mixtral tests' independent writers' (transformers' names,
BF16 here). The output is read back by this file's own safetensors and E4M3 decoding: the
routers stay BF16 byte for byte, every expert projection is F8_E4M3 with DeepSeek-V3's
weight_scale_inv (F32, one scale per 128x128 block), and the FP8 values times their block
scales give back the weights. The dequantized checkpoint then loads in fp8d and evaluates within
a stated tolerance of the source. The worker's peak RSS, from wait4's rusage, stays a small
multiple of the largest tensor on a checkpoint many times larger. A checkpoint missing an expert
is refused naming it, nothing written. Every process is waited for; every file is under one
temporary directory.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "worker_llama"))
sys.path.insert(0, HERE)
from hf_llama_test import WORKER, dump_json, events, load_json, run, to_bf16, write_model_dir  # noqa: E402
from hf_mixtral_test import mixtral_params  # noqa: E402
from hf_qwen3_moe_test import qwen3_moe_params  # noqa: E402

CORPUS = os.environ.get("FP8_TEST_CORPUS", "")
EXIT_BAD_DATA = 65
BLOCK = 128
# The relative change of the eval loss that weight-only FP8 (E4M3, 128x128 block scales) may
# cause on these random models, whose weights are noise at the scale of their block maxima.
EVAL_TOLERANCE = 0.01
# Peak RSS of a calibration beyond that of a tiny one (fp8-worker's own start, its CUDA and
# Gloo libraries mapped, is about 220 MiB whatever the input), in units of the largest tensor
# (its BF16 bytes): the tensor read, its F32 copy, the FP8 output and the scales are a few of
# them; the checkpoint (about 50 tensors as large) or one of its layers must never be held.
RSS_TENSORS = 8

SMALL = {"hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 32,
         "max_position_embeddings": 64, "vocab_size": 256, "rms_norm_eps": 1e-6, "hidden_act": "silu",
         "tie_word_embeddings": False, "num_hidden_layers": 2, "num_experts_per_tok": 2,
         "router_aux_loss_coef": 0.001}
CONFIGS = {
    "qwen3-moe": {**SMALL, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": 4,
                  "intermediate_size": 256, "moe_intermediate_size": 128, "norm_topk_prob": True,
                  "decoder_sparse_step": 1, "mlp_only_layers": [0], "use_sliding_window": False,
                  "sliding_window": None, "attention_bias": False, "rope_theta": 1000000.0},
    "mixtral": {**SMALL, "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 4,
                "intermediate_size": 128, "sliding_window": None, "router_jitter_noise": 0.0,
                "rope_theta": 1000000.0},
}
PARAMS = {"qwen3-moe": qwen3_moe_params, "mixtral": mixtral_params}


def routers_and_experts(config, names):
    """The router and expert-projection tensors among `names`, by the family's naming."""
    if config["model_type"] == "mixtral":
        return ([n for n in names if n.endswith("block_sparse_moe.gate.weight")],
                [n for n in names if ".block_sparse_moe.experts." in n])
    return [n for n in names if n.endswith("mlp.gate.weight")], [n for n in names if ".mlp.experts." in n]


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def read_raw(d):
    """Every tensor of a model directory: name → (dtype, shape, raw bytes)."""
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(load_json(index)["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    out = {}
    for file in files:
        header, start = read_header(os.path.join(d, file))
        with open(os.path.join(d, file), "rb") as f:
            data = f.read()
        for name, t in header.items():
            if name != "__metadata__":
                b, e = t["data_offsets"]
                out[name] = (t["dtype"], t["shape"], data[start + b:start + e])
    return out


def e4m3_values():
    """The 256 float values of OCP FP8 E4M3 (bias 7, no infinities, S.1111.111 NaN)."""
    v = np.zeros(256)
    for b in range(256):
        sign, exp, mant = -1.0 if b & 0x80 else 1.0, (b >> 3) & 0xF, b & 7
        if exp == 15 and mant == 7:
            v[b] = np.nan
        elif exp == 0:
            v[b] = sign * mant / 8 * 2.0 ** -6
        else:
            v[b] = sign * (1 + mant / 8) * 2.0 ** (exp - 7)
    return v


E4M3 = e4m3_values()


def dequantize(raw, shape, scales):
    """FP8 E4M3 bytes times their 128x128 block's scale."""
    q = E4M3[np.frombuffer(raw, dtype=np.uint8)].reshape(shape)
    s = np.repeat(np.repeat(scales, BLOCK, axis=0), BLOCK, axis=1)[:shape[0], :shape[1]]
    return q * s


def write_big_mixtral(d, h, ffn, experts, layers, vocab):
    """A BF16 Mixtral far larger than any of its tensors, written one tensor at a time so this
    process never holds it. Returns (checkpoint bytes, largest tensor bytes, one layer's bytes)."""
    c = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": h,
         "intermediate_size": ffn, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": h // 8,
         "max_position_embeddings": 64, "vocab_size": vocab, "rms_norm_eps": 1e-5, "hidden_act": "silu",
         "tie_word_embeddings": False, "num_hidden_layers": layers, "num_local_experts": experts,
         "num_experts_per_tok": 2, "sliding_window": None, "router_jitter_noise": 0.0}
    shapes = {"model.embed_tokens.weight": (vocab, h)}
    for i in range(layers):
        a = f"model.layers.{i}."
        shapes.update({a + "input_layernorm.weight": (h,), a + "self_attn.q_proj.weight": (h, h),
                       a + "self_attn.k_proj.weight": (h // 4, h), a + "self_attn.v_proj.weight": (h // 4, h),
                       a + "self_attn.o_proj.weight": (h, h), a + "post_attention_layernorm.weight": (h,),
                       a + "block_sparse_moe.gate.weight": (experts, h)})
        for e in range(experts):
            x = a + f"block_sparse_moe.experts.{e}."
            shapes.update({x + "w1.weight": (ffn, h), x + "w2.weight": (h, ffn), x + "w3.weight": (ffn, h)})
    shapes.update({"model.norm.weight": (h,), "lm_head.weight": (vocab, h)})
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes.items():
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    os.makedirs(d)
    dump_json(os.path.join(d, "config.json"), c)
    rng = np.random.default_rng(7)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for shape in shapes.values():
            f.write(to_bf16(rng.standard_normal(shape, dtype=np.float32) * 0.02)[0].astype("<u2").tobytes())
    layer = sum(2 * int(np.prod(s)) for n, s in shapes.items() if n.startswith("model.layers.0."))
    return offset, 2 * max(int(np.prod(s)) for s in shapes.values()), layer


def calibrate_with_rusage(spec_path):
    """fp8-worker calibrate, waited for with wait4: (exit code, stdout, stderr, peak RSS bytes)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen([WORKER, "calibrate", "--spec", spec_path], stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return p.returncode, out.read().decode(), err.read().decode(), usage.ru_maxrss * 1024  # KiB on Linux


class MoeCalibrateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="fp8-moe-calibrate-")
        cls.dir = cls.tmp.name
        run(["prepare-data", "--text", CORPUS, "--out", os.path.join(cls.dir, "data")])
        cls.val_glob = os.path.join(cls.dir, "data", "val_*.bin")
        cls.params, cls.dirs = {}, {}
        for i, (name, config) in enumerate(CONFIGS.items()):
            params = {k: to_bf16(v)[1] for k, v in PARAMS[name](config, np.random.default_rng(400 + i)).items()}
            cls.params[name] = params
            cls.dirs[name] = os.path.join(cls.dir, name)
            write_model_dir(cls.dirs[name], config, params, dtype="BF16", shards=2)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def calibrate(self, name, check=True, **spec):
        path = os.path.join(self.dir, name + "-spec.json")
        dump_json(path, {"backend": "cpu", **spec})
        p = run(["calibrate", "--spec", path], check=check)
        return p, events(p.stdout)

    def eval_loss(self, model_dir):
        got = run(["evaluate", "--model", model_dir, "--data", self.val_glob, "--seed", "42", "--recipe", "fp32"])
        return json.loads(got.stdout)["eval_loss"]

    def test_routers_stay_bf16_experts_become_fp8_with_block_scales_and_the_model_loads_back(self):
        for name, config in CONFIGS.items():
            with self.subTest(model=name):
                fp8 = os.path.join(self.dir, name + "-fp8")
                self.calibrate(name + "-quantize", input=self.dirs[name], output_dir=fp8)
                source, out = read_raw(self.dirs[name]), read_raw(fp8)
                routers, experts = routers_and_experts(config, source)
                self.assertEqual(len(routers), 2 if name == "mixtral" else 1)
                n_exp = config.get("num_experts", config.get("num_local_experts"))
                self.assertEqual(len(experts), 3 * n_exp * len(routers))
                for r in routers:
                    self.assertEqual(out[r], source[r], r)  # BF16, byte for byte
                    self.assertNotIn(r + "_scale_inv", out)
                worst = 0.0
                for e in experts:
                    dtype, shape, raw = out[e]
                    self.assertEqual(dtype, "F8_E4M3", e)
                    s_dtype, s_shape, s_raw = out[e + "_scale_inv"]
                    self.assertEqual((s_dtype, s_shape), ("F32", [-(-shape[0] // BLOCK), -(-shape[1] // BLOCK)]), e)
                    w = dequantize(raw, shape, np.frombuffer(s_raw, dtype="<f4").reshape(s_shape))
                    want = self.params[name][e]
                    worst = max(worst, np.linalg.norm(w - want) / np.linalg.norm(want))
                # E4M3's 3 mantissa bits: about 2.6% RMS relative error on Gaussian weights.
                self.assertLess(worst, 0.04)
                qc = load_json(os.path.join(fp8, "config.json"))["quantization_config"]
                self.assertEqual((qc["quant_method"], qc["weight_block_size"]), ("fp8", [BLOCK, BLOCK]))
                for r in routers:
                    self.assertIn(r[:-len(".weight")], qc["modules_to_not_convert"])

                back = os.path.join(self.dir, name + "-dequantized")
                self.calibrate(name + "-dequantize", input=fp8, output_dir=back, direction="dequantize")
                loss_src, loss_fp8 = self.eval_loss(self.dirs[name]), self.eval_loss(back)
                rel = abs(loss_fp8 - loss_src) / loss_src
                print(f"{name}: worst expert |W_fp8 - W| / |W| = {worst:.4f}; eval loss source {loss_src:.5f}, "
                      f"dequantized FP8 {loss_fp8:.5f} (relative {rel:.2e}, tolerance {EVAL_TOLERANCE})",
                      file=sys.stderr)
                self.assertLess(rel, EVAL_TOLERANCE)

    def test_peak_rss_is_a_few_tensors_not_the_checkpoint(self):
        big = os.path.join(self.dir, "big-mixtral")
        total, largest, layer = write_big_mixtral(big, h=1024, ffn=2048, experts=8, layers=2, vocab=256)
        rss = {}
        for name, src in (("small", self.dirs["mixtral"]), ("big", big)):
            path = os.path.join(self.dir, f"rss-{name}.json")
            dump_json(path, {"backend": "cpu", "input": src, "output_dir": os.path.join(self.dir, f"rss-{name}-fp8")})
            code, _, err, rss[name] = calibrate_with_rusage(path)
            self.assertEqual(code, 0, err)
        growth = rss["big"] - rss["small"]
        mib = 1 << 20
        print(f"calibrate peak RSS: {rss['big'] / mib:.1f} MiB for a {total / mib:.0f} MiB Mixtral (one layer "
              f"{layer / mib:.0f} MiB, largest tensor {largest / mib:.0f} MiB); a tiny one's {rss['small'] / mib:.1f} "
              f"MiB; growth {growth / mib:.1f} MiB = {growth / largest:.2f} largest tensors", file=sys.stderr)
        self.assertLess(growth, RSS_TENSORS * largest)
        self.assertLess(growth, layer / 2)

    def test_a_checkpoint_missing_an_expert_is_refused_naming_it_and_nothing_is_written(self):
        gone = {"qwen3-moe": "model.layers.1.mlp.experts.2.down_proj.weight",
                "mixtral": "model.layers.0.block_sparse_moe.experts.1.w2.weight"}
        for name, config in CONFIGS.items():
            with self.subTest(model=name):
                d = os.path.join(self.dir, "missing-" + name)
                write_model_dir(d, config, {k: v for k, v in self.params[name].items() if k != gone[name]},
                                dtype="BF16")
                out = os.path.join(self.dir, "missing-" + name + "-fp8")
                p, ev = self.calibrate("missing-" + name, check=False, input=d, output_dir=out)
                self.assertEqual(p.returncode, EXIT_BAD_DATA, p.stderr)
                err = [e for e in ev if e["type"] == "error"]
                self.assertEqual(len(err), 1)
                self.assertIn(f'missing tensor "{gone[name]}"', err[0]["message"])
                self.assertIn(config["architectures"][0], err[0]["message"])
                self.assertFalse(os.path.exists(out), f"{out} was written")
                self.assertFalse(os.path.exists(out + ".partial"), f"{out}.partial was written")


if __name__ == "__main__":
    unittest.main(verbosity=2)
