#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Loader rules (issue 29 item 6): what the serving engines' FP8 loaders require of a checkpoint,
checked on `fp8-worker calibrate` output for every weight granularity x activation scheme.

The rules are those of the engines' and libraries' own code (cited at each check):
  [CT-args]   compressed-tensors src/compressed_tensors/quantization/quant_args.py
              (QuantizationArgs: extra="forbid", validate_model_after)
  [CT-scheme] compressed-tensors src/compressed_tensors/quantization/quant_scheme.py
              (QuantizationScheme: extra="forbid", activation strategies; presets FP8,
              FP8_DYNAMIC, FP8_BLOCK)
  [CT-config] compressed-tensors src/compressed_tensors/quantization/quant_config.py
              (QuantizationConfig, QuantizationStatus)
  [CT-init]   compressed-tensors src/compressed_tensors/quantization/lifecycle/initialize.py
              (scale shapes: tensor (1,), channel (out, 1), block (ceil(out/bh), ceil(in/bw)))
  [V-config]  vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py
              (_quantization_scheme_map_from_config, _is_fp8_w8a8)
  [V-scheme]  vllm/model_executor/layers/quantization/compressed_tensors/schemes/
              compressed_tensors_w8a8_fp8.py (create_weights: weight, weight_scale, input_scale;
              __init__ asserts dynamic activations for block weights)
  [V-fp8]     vllm/model_executor/layers/quantization/fp8.py and
              sglang python/sglang/srt/layers/quantization/fp8.py (Fp8Config.from_config:
              quant_method, activation_scheme, weight_block_size, ignored_layers; block weights
              only with activation_scheme dynamic; Fp8LinearMethod registers weight_scale_inv for
              block weights)
  [V-gpt2]    vllm/model_executor/models/gpt2.py (load_weights transposes a Conv1D `.weight`,
              takes every other tensor as stored)
The safetensors headers are parsed by hand (u64 length + JSON), independent of fp8d's reader.
Every process is waited for (subprocess.run); every file lives under one temporary directory.
"""
import json
import math
import os
import random
import struct
import subprocess
import tempfile
import unittest

WORKER = os.environ.get("FP8_WORKER", "fp8-worker")
CORPUS = os.environ.get("FP8_TEST_CORPUS", "")
EXIT_BAD_SPEC = 64

# GPT-2 in transformers' layout; every linear dimension a multiple of 128 (block FP8 needs it).
N_LAYER, N_HEAD, N_EMBD, N_POS, VOCAB = 2, 2, 128, 16, 256
CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
KEPT = "mlp.c_proj"  # excluded by the specs here: must show up in the ignore lists

# [CT-args] QuantizationArgs' fields; [CT-scheme] QuantizationScheme's. Both forbid others.
ARGS_FIELDS = {"num_bits", "type", "symmetric", "group_size", "strategy", "block_structure", "dynamic",
               "actorder", "scale_dtype", "zp_dtype", "observer", "observer_kwargs"}
SCHEME_FIELDS = {"targets", "weights", "input_activations", "output_activations", "format"}
STRATEGIES = {"tensor", "channel", "group", "block", "token", "tensor_group", "attn_head"}
# [CT-config] QuantizationStatus values.
STATUSES = {"initialized", "calibration", "frozen", "compressed", "decompressed"}


def run(args, check=True):
    p = subprocess.run([WORKER] + args, capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"fp8-worker {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def load_json(path):
    with open(path) as f:
        return json.load(f)


def write_safetensors(path, tensors):
    """{name: (shape, [floats])} as F32, by hand: u64 header length, JSON header, data."""
    header, blobs, offset = {}, [], 0
    for name, (shape, values) in tensors.items():
        b = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)}."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name != "__metadata__":
            b, e = t["data_offsets"]
            out[name] = (t["dtype"], tuple(t["shape"]), data[b:e])
    return out


def read_model_dir(d):
    index = load_json(os.path.join(d, "model.safetensors.index.json"))
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        out.update(read_safetensors(os.path.join(d, shard)))
    return out


def e4m3(b):
    sign, e, m = -1.0 if b & 0x80 else 1.0, (b >> 3) & 0xF, b & 0x7
    if e == 0xF and m == 0x7:
        return math.nan
    return sign * (m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


E4M3 = [e4m3(b) for b in range(256)]


def floats(raw):
    return struct.unpack(f"<{len(raw) // 4}f", raw)


def gpt2_model(rng):
    c = N_EMBD
    p = {"transformer.wte.weight": ((VOCAB, c), 0.3), "transformer.wpe.weight": ((N_POS, c), 0.1),
         "transformer.ln_f.weight": ((c,), None), "transformer.ln_f.bias": ((c,), 0.0)}
    for i in range(N_LAYER):
        h = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            p[h + ln + ".weight"], p[h + ln + ".bias"] = ((c,), None), ((c,), 0.0)
        for name, shape in (("attn.c_attn", (c, 3 * c)), ("attn.c_proj", (c, c)), ("mlp.c_fc", (c, 4 * c)),
                            ("mlp.c_proj", (4 * c, c))):
            p[h + name + ".weight"], p[h + name + ".bias"] = (shape, 0.05), ((shape[1],), 0.0)
    out = {}
    for name, (shape, sd) in p.items():
        n = math.prod(shape)
        out[name] = (shape, [1.0] * n if sd is None else [rng.gauss(0, sd) if sd else 0.0 for _ in range(n)])
    return out


class LoaderRulesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="fp8-loader-rules-")
        cls.dir = cls.tmp.name
        run(["prepare-data", "--text", CORPUS, "--out", os.path.join(cls.dir, "data")])
        cls.data = os.path.join(cls.dir, "data", "train_*.bin")
        cls.model = os.path.join(cls.dir, "gpt2")
        os.makedirs(cls.model)
        cls.params = gpt2_model(random.Random(29))
        write_safetensors(os.path.join(cls.model, "model.safetensors"), cls.params)
        config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": N_EMBD, "n_layer": N_LAYER,
                  "n_head": N_HEAD, "n_positions": N_POS, "vocab_size": VOCAB, "layer_norm_epsilon": 1e-5,
                  "activation_function": "gelu_new", "tie_word_embeddings": True}
        with open(os.path.join(cls.model, "config.json"), "w") as f:
            json.dump(config, f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def calibrate(self, name, granularity, static, output_format=None, check=True):
        spec = {"input": self.model, "output_dir": os.path.join(self.dir, name), "backend": "cpu",
                "weights": {"granularity": granularity, "exclude": [f"*{KEPT}*"]}}
        if static:
            spec["activations"] = {"data": self.data, "num_samples": 4}
        if output_format:
            spec["output_format"] = output_format
        path = os.path.join(self.dir, name + ".json")
        with open(path, "w") as f:
            json.dump(spec, f)
        p = run(["calibrate", "--spec", path], check=check)
        return p, spec["output_dir"]

    def fp8_linears(self):
        return [f"transformer.h.{i}.{m}" for i in range(N_LAYER) for m in CONV1D if m != KEPT]

    def kept_modules(self, embeddings=True):
        """Modules of 2-D `.weight` tensors the specs leave in high precision (the linears only,
        without the token and position embeddings)."""
        kept = [n for n, (shape, _) in self.params.items() if n.endswith(".weight") and len(shape) == 2
                and (KEPT in n or embeddings and n.startswith(("transformer.wte", "transformer.wpe")))]
        return sorted(n[:-len(".weight")] for n in kept)

    def vllm_view(self, tensors, name):
        """[V-gpt2]: a Conv1D `.weight` transposed to nn.Linear's [out, in]; scales as stored."""
        dtype, shape, raw = tensors[name]
        if any(m in name for m in CONV1D) and name.endswith(".weight"):
            shape = shape[::-1]
        return dtype, shape, raw

    def check_values(self, tensors, layer, scale_name, granularity):
        """float(q) * scale gives back the weight (compressed-tensors' dequantize and DeepSeek's
        weight_scale_inv mean the same product), per block/channel/tensor as the scale's shape says."""
        _, (n_in, n_out), raw = tensors[layer + ".weight"]  # stored [in, out] (Conv1D)
        _, sshape, sraw = tensors[scale_name]
        s = floats(sraw)
        x = self.params[layer + ".weight"][1]
        num = den = 0.0
        for i in range(n_in):
            for o in range(n_out):
                k = i * n_out + o
                if granularity == "block":
                    sc = s[(o // 128) * sshape[1] + i // 128]  # [out/128, in/128]
                elif granularity == "channel":
                    sc = s[o]  # [out, 1]: per output feature
                else:
                    sc = s[0]
                num += (E4M3[raw[k]] * sc - x[k]) ** 2
                den += x[k] ** 2
        self.assertLess(math.sqrt(num / den), 0.07, (layer, granularity))

    def check_args(self, args, where):
        """[CT-args] validate_model_after, re-stated."""
        self.assertLessEqual(set(args), ARGS_FIELDS, where)  # extra="forbid"
        st, dyn, gs, bs = args.get("strategy"), args.get("dynamic", False), args.get("group_size"), args.get(
            "block_structure")
        self.assertIn(st, STRATEGIES, where)
        self.assertEqual((args["num_bits"], args["type"], args["symmetric"]), (8, "float", True), where)
        if st == "token":
            self.assertTrue(dyn, where + ": static token quantization is refused")
        if st in ("group", "tensor_group"):
            self.assertTrue(isinstance(gs, int) and gs > 0, where)
        if gs is not None and gs > 0:
            self.assertIn(st, ("group", "tensor_group"), where)
        self.assertEqual(st == "block", bs is not None, where + ": block strategy <=> block_structure")
        if bs is not None:
            self.assertTrue(isinstance(bs, list) and len(bs) == 2 and all(isinstance(v, int) for v in bs), where)
        if dyn:
            self.assertIn(st, ("token", "tensor", "tensor_group", "group"), where)

    def check_compressed_tensors(self, out, granularity, static, report):
        config = load_json(os.path.join(out, "config.json"))
        qc = config["quantization_config"]
        # vLLM's and transformers' registries name the method "compressed-tensors"; the format
        # float-quantized is one vLLM reads input_activations for (is_activation_quantization_format).
        self.assertEqual(qc["quant_method"], "compressed-tensors")
        self.assertEqual(qc["format"], "float-quantized")
        self.assertIn(qc["quantization_status"], STATUSES)
        self.assertEqual(qc["quantization_status"], "compressed")
        self.assertEqual(list(qc["config_groups"]), ["group_0"])
        group = qc["config_groups"]["group_0"]
        self.assertLessEqual(set(group), SCHEME_FIELDS)  # [CT-scheme] extra="forbid"
        self.assertEqual(group["targets"], ["Linear"])
        w, a = group["weights"], group["input_activations"]
        self.check_args(w, "weights")
        self.check_args(a, "input_activations")
        # [CT-scheme] activation strategies; the presets' choices.
        self.assertIn(a["strategy"], ("token", "tensor", "group", "tensor_group", "attn_head"))
        self.assertEqual(w["strategy"], granularity)
        self.assertFalse(w["dynamic"])
        if granularity == "block":
            self.assertEqual(w["block_structure"], [128, 128])
        if static:
            self.assertEqual((a["strategy"], a["dynamic"]), ("tensor", False))  # preset FP8
        elif granularity == "block":
            self.assertEqual((a["strategy"], a["group_size"], a["dynamic"]), ("group", 128, True))  # FP8_BLOCK
        else:
            self.assertEqual((a["strategy"], a["dynamic"]), ("token", True))  # FP8_DYNAMIC
        # [V-config] _is_fp8_w8a8: float weights and inputs, symmetric static weights of strategy
        # tensor/channel/block; inputs dynamic, or symmetric per tensor.
        self.assertTrue(w["type"] == a["type"] == "float" and w["symmetric"] and not w["dynamic"])
        self.assertIn(w["strategy"], ("tensor", "channel", "block"))
        self.assertTrue(a["dynamic"] or (a["symmetric"] and a["strategy"] == "tensor"))
        # [V-scheme] block weights with static inputs: the assert fires, so the report says vLLM
        # (and SGLang) refuse it; any other pairing carries no such warning.
        warned = [x for x in report.get("warnings", []) if "vllm" in x.get("engines", []) and "tensor" not in x]
        self.assertEqual(len(warned), 1 if granularity == "block" and static else 0, report.get("warnings"))

        tensors = read_model_dir(out)
        self.assertFalse([n for n in tensors if n.endswith("_scale_inv")])
        for layer in self.fp8_linears():
            dtype, (n_out, n_in), _ = self.vllm_view(tensors, layer + ".weight")
            self.assertEqual(dtype, "F8_E4M3", layer)
            sdtype, sshape, sraw = tensors[layer + ".weight_scale"]
            self.assertEqual(sdtype, "F32", layer)
            want = {"tensor": (1,), "channel": (n_out, 1),  # [CT-init], [V-scheme] create_weights
                    "block": (-(-n_out // 128), -(-n_in // 128))}[granularity]
            self.assertEqual(sshape, want, layer)
            if granularity == "block":  # vLLM's validate_fp8_block_shape
                self.assertEqual((n_out % 128, n_in % 128), (0, 0), layer)
            self.assertTrue(all(v > 0 and math.isfinite(v) for v in floats(sraw)), layer)
            if static:
                idtype, ishape, iraw = tensors[layer + ".input_scale"]
                self.assertEqual((idtype, ishape), ("F32", (1,)), layer)  # [CT-init] per tensor: (1,)
                self.assertGreater(floats(iraw)[0], 0, layer)
            else:
                self.assertNotIn(layer + ".input_scale", tensors)
            self.check_values(tensors, layer, layer + ".weight_scale", granularity)
        self.assertFalse([n for n in tensors if n.endswith(".input_scale") and KEPT in n])
        # Ignore: vLLM's should_ignore_layer matches module names; every linear kept in high
        # precision is listed, no FP8 one is; lm_head too, since transformers' compressed-tensors
        # targets every nn.Linear (the tied head included). No embedding: [V-config]'s
        # get_quant_method answers an ignored layer of any type with UnquantizedLinearMethod.
        fp8_modules = {n[:-len(".weight")] for n, (d, _, _) in tensors.items() if d == "F8_E4M3"}
        self.assertEqual(fp8_modules, set(self.fp8_linears()))
        self.assertEqual(sorted(qc["ignore"]), sorted(self.kept_modules(embeddings=False) + ["lm_head"]))
        self.assertFalse(fp8_modules & set(qc["ignore"]))

    def check_deepseek(self, out, report):
        qc = load_json(os.path.join(out, "config.json"))["quantization_config"]
        # [V-fp8] Fp8Config.from_config: "fp8" in quant_method; block weights need activation_scheme
        # dynamic and a 2-long weight_block_size; ignored_layers (vLLM, SGLang),
        # modules_to_not_convert (transformers' FineGrainedFP8Config).
        self.assertEqual(qc["quant_method"], "fp8")
        self.assertEqual(qc["activation_scheme"], "dynamic")
        self.assertEqual(qc["weight_block_size"], [128, 128])
        self.assertEqual(qc["ignored_layers"], self.kept_modules())
        self.assertEqual(qc["modules_to_not_convert"], self.kept_modules())
        self.assertFalse(report.get("warnings"))
        tensors = read_model_dir(out)
        self.assertFalse([n for n in tensors if n.endswith(".input_scale") or n.endswith(".weight_scale")])
        for layer in self.fp8_linears():
            dtype, (n_out, n_in), _ = self.vllm_view(tensors, layer + ".weight")
            self.assertEqual(dtype, "F8_E4M3", layer)
            # [V-fp8] Fp8LinearMethod.create_weights, block: weight_scale_inv [out/128, in/128].
            sdtype, sshape, _ = tensors[layer + ".weight_scale_inv"]
            self.assertEqual((sdtype, sshape), ("F32", (n_out // 128, n_in // 128)), layer)
            self.check_values(tensors, layer, layer + ".weight_scale_inv", "block")

    def test_every_granularity_and_activation_scheme_meets_its_loaders_rules(self):
        for granularity in ("block", "channel", "tensor"):
            for static in (False, True):
                with self.subTest(granularity=granularity, static=static):
                    _, out = self.calibrate(f"{granularity}-{'static' if static else 'dynamic'}", granularity, static)
                    report = load_json(os.path.join(out, "report.json"))
                    deepseek = granularity == "block" and not static  # output_format auto
                    self.assertEqual(report["summary"]["output_format"],
                                     "deepseek" if deepseek else "compressed-tensors")
                    if deepseek:
                        self.check_deepseek(out, report)
                    else:
                        self.check_compressed_tensors(out, granularity, static, report)
                    if static:  # the eval read the FP8 weights back through their weight_scale
                        self.assertEqual(report["eval"]["fp8_weights"], len(self.fp8_linears()))

    def test_block_dynamic_as_compressed_tensors_and_back(self):
        _, out = self.calibrate("block-ct", "block", False, output_format="compressed-tensors")
        self.check_compressed_tensors(out, "block", False, load_json(os.path.join(out, "report.json")))
        # fp8d's dequantize reads weight_scale as it reads weight_scale_inv: same BF16 weights.
        _, ds = self.calibrate("block-ds", "block", False, output_format="deepseek")
        back = {}
        for name, src in (("ct", out), ("ds", ds)):
            path = os.path.join(self.dir, f"back-{name}.json")
            with open(path, "w") as f:
                json.dump({"input": src, "output_dir": src + "-bf16", "direction": "dequantize", "backend": "cpu"}, f)
            run(["calibrate", "--spec", path])
            back[name] = read_model_dir(src + "-bf16")
            self.assertFalse([n for n in back[name] if "_scale" in n])
            self.assertNotIn("quantization_config", load_json(os.path.join(src + "-bf16", "config.json")))
        self.assertEqual(back["ct"], back["ds"])

    def test_deepseek_refuses_what_its_loaders_refuse(self):
        for granularity, static in (("channel", False), ("tensor", False), ("block", True)):
            with self.subTest(granularity=granularity, static=static):
                name = f"ds-{granularity}-{static}"
                p, out = self.calibrate(name, granularity, static, output_format="deepseek", check=False)
                self.assertEqual(p.returncode, EXIT_BAD_SPEC, p.stderr)
                self.assertIn("output_format: deepseek holds", p.stderr)
                self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
