#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tokenizer files from prepare-data to a Llama export and through calibration (issue 26).

prepare-data --tokenizer records tokenizer.json, tokenizer_config.json and
special_tokens_map.json beside its shards; `export: hf` and `fp8-worker export` put them into
the export byte for byte, with generation_config.json's bos/eos ids from tokenizer_config.json;
byte shards give exports without them. Calibration of that Llama export writes FP8 weights under
the Llama names with their scales, keeps the tokenizer files, and its output reads back: the FP8
weights dequantized in numpy match the export's, and fp8d's dequantize of it evaluates to the
export's loss. The tokenizer is a small byte-level BPE written here. Every process is waited
for; every file is under one temporary directory.
"""
import json
import os
import shutil
import struct
import tempfile
import unittest

import numpy as np

from hf_llama_test import dump_json, events, load_json, run  # the same directory

WORKER = os.environ.get("FP8_WORKER", "fp8-worker")
CORPUS = os.environ.get("FP8_TEST_CORPUS", "")
EXIT_BAD_DATA, EXIT_INVALID_SPEC = 65, 64
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# Pieces the corpus is full of; each merge's result is a vocabulary entry ("Ġ" is GPT-2's space).
MERGES = ["h e", "Ġ t", "Ġt he", "i n", "a n", "e r", "Ġ a", "o n", "e d", "in g", "Ġ s", "Ġ w"]
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
MODEL_VOCAB = 384  # >= the tokenizer's 256 bytes + merges + 2 added tokens
N_LAYER = 2  # llama-tiny's


def slurp(path):
    with open(path, "rb") as f:
        return f.read()


def byte_to_unicode():
    """GPT-2's map from bytes to the printable characters byte-level vocabularies are written in."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def write_tokenizer(d, eos=EOS):
    """A byte-level BPE (GPT-2's pre-tokenizer): the 256 bytes, MERGES, then BOS and EOS as added
    tokens; its tokenizer_config.json and special_tokens_map.json name them."""
    os.makedirs(d, exist_ok=True)
    chars = byte_to_unicode()
    vocab = {chars[b]: b for b in range(256)}
    for m in MERGES:
        vocab["".join(m.split(" "))] = len(vocab)
    added = [{"id": len(vocab) + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate((BOS, EOS))]
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
                 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                   "use_regex": True},
                 "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True,
                                                     "trim_offsets": True, "use_regex": True},
                 "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                           "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                           "ignore_merges": False, "vocab": vocab, "merges": MERGES}}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, indent=2, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": BOS, "eos_token": eos, "model_max_length": 64,
                   "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}, f, indent=2)
    with open(os.path.join(d, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": {"content": BOS, "lstrip": False, "normalized": False, "rstrip": False,
                                 "single_word": False},
                   "eos_token": {"content": eos, "lstrip": False, "normalized": False, "rstrip": False,
                                 "single_word": False}}, f, indent=2)
    return {t["content"]: t["id"] for t in added}, len(vocab) + len(added)


def read_shard(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        width = 2 if header[0] == 20240520 else 4
        return np.frombuffer(f.read(), dtype="<u2" if width == 2 else "<u4").astype(np.int64)


def read_safetensors_raw(path):
    """F32, BF16 (widened to float32) and F8_E4M3 (the raw bytes)."""
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


def llama_linear_weights():
    return [f"model.layers.{i}.{m}.weight" for i in range(N_LAYER)
            for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                      "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]


class TokenizerExportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="fp8-llama-tok-")
        cls.dir = cls.tmp.name
        cls.tok = os.path.join(cls.dir, "tokenizer")
        cls.added, cls.tokenizer_vocab = write_tokenizer(cls.tok)
        cls.tok_data = os.path.join(cls.dir, "data-tok")
        run(["prepare-data", "--text", CORPUS, "--out", cls.tok_data, "--tokenizer", cls.tok,
             "--doc-separator", "\\n\\n"])
        cls.byte_data = os.path.join(cls.dir, "data-bytes")
        run(["prepare-data", "--text", CORPUS, "--out", cls.byte_data])
        # One training run on each; their exports and checkpoints are what the tests look at.
        cls.tok_run = cls.train_run("tok", cls.tok_data)
        cls.byte_run = cls.train_run("bytes", cls.byte_data)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def train_run(cls, name, data_dir, train_glob=None, check=True, vocab=MODEL_VOCAB):
        out = os.path.join(cls.dir, "runs", name)
        spec = {"model": {"preset": "llama-tiny", "vocab_size": vocab},
                "data": {"train": train_glob or os.path.join(data_dir, "train_*.bin"),
                         "val": os.path.join(data_dir, "val_*.bin")},
                "training": {"max_steps": 2, "per_device_train_batch_size": 4, "logging_steps": 1, "eval_steps": 2,
                             "save_steps": 2, "learning_rate": 1e-3, "export": "hf"},
                "output_dir": out, "backend": "cpu"}
        path = os.path.join(cls.dir, name + ".json")
        dump_json(path, spec)
        p = run(["train", "--spec", path], check=check)
        done = [e for e in events(p.stdout) if e["type"] == "done"]
        return {"out": out, "hf": os.path.join(out, "hf"), "p": p, "done": done[0]["result"] if done else None}

    def assert_same_tokenizer_files(self, got_dir, want_dir):
        for name in TOKENIZER_FILES:
            self.assertEqual(slurp(os.path.join(got_dir, name)), slurp(os.path.join(want_dir, name)),
                             f"{got_dir}/{name}")

    def assert_no_tokenizer_files(self, d):
        for name in TOKENIZER_FILES:
            self.assertFalse(os.path.exists(os.path.join(d, name)), f"{d}/{name}")

    def assert_generation_ids(self, hf):
        gen = load_json(os.path.join(hf, "generation_config.json"))
        self.assertEqual(gen["eos_token_id"], self.added[EOS])
        self.assertEqual(gen["bos_token_id"], self.added[BOS])

    # --- prepare-data --------------------------------------------------------------------------

    def test_prepare_data_records_the_tokenizer_beside_its_shards(self):
        self.assert_same_tokenizer_files(self.tok_data, self.tok)
        tokens = np.concatenate([read_shard(os.path.join(self.tok_data, s)) for s in ("train_000.bin", "val_000.bin")])
        self.assertTrue((tokens >= 256).any())  # merges applied
        self.assertIn(self.added[EOS], tokens)  # between documents
        self.assertLess(tokens.max(), self.tokenizer_vocab)
        self.assertEqual(sorted(os.listdir(self.tok_data)), sorted(["train_000.bin", "val_000.bin", *TOKENIZER_FILES]))
        self.assert_no_tokenizer_files(self.byte_data)
        # Byte shards over a recorded tokenizer would pass for its ids: refused, nothing changed.
        before = {n: slurp(os.path.join(self.tok_data, n)) for n in os.listdir(self.tok_data)}
        p = run(["prepare-data", "--text", CORPUS, "--out", self.tok_data], check=False)
        self.assertEqual(p.returncode, EXIT_INVALID_SPEC, p.stderr)
        self.assertIn("tokenizer.json", p.stderr)
        self.assertEqual({n: slurp(os.path.join(self.tok_data, n)) for n in os.listdir(self.tok_data)}, before)

    def test_an_eos_other_than_the_configs_is_what_the_recorded_config_names(self):
        out = os.path.join(self.dir, "data-eos")
        os.makedirs(out)
        with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
            f.write("{}")  # an earlier run's, to be replaced
        run(["prepare-data", "--text", CORPUS, "--out", out, "--tokenizer", os.path.join(self.tok, "tokenizer.json"),
             "--doc-separator", "\\n\\n", "--eos", BOS])
        config = load_json(os.path.join(out, "tokenizer_config.json"))
        want = load_json(os.path.join(self.tok, "tokenizer_config.json"))
        self.assertEqual(config["eos_token"], BOS)
        self.assertEqual(list(config), list(want))  # the other fields, in their order
        self.assertEqual({k: v for k, v in config.items() if k != "eos_token"},
                         {k: v for k, v in want.items() if k != "eos_token"})
        for name in ("tokenizer.json", "special_tokens_map.json"):
            self.assertEqual(slurp(os.path.join(out, name)), slurp(os.path.join(self.tok, name)), name)

    # --- export --------------------------------------------------------------------------------

    def test_export_hf_carries_the_tokenizer_of_the_training_data(self):
        hf, done = self.tok_run["hf"], self.tok_run["done"]
        self.assertEqual(load_json(os.path.join(hf, "config.json"))["architectures"], ["LlamaForCausalLM"])
        self.assert_same_tokenizer_files(hf, self.tok)
        self.assert_generation_ids(hf)
        self.assertEqual(done["export_tokenizer"], os.path.abspath(self.tok_data))
        self.assertNotIn("export_tokenizer_skipped", done)
        # fp8-worker export finds the same tokenizer through the checkpoint's data.train.
        for name, extra in (("from-checkpoint", []), ("explicit", ["--tokenizer", self.tok])):
            with self.subTest(source=name):
                out = os.path.join(self.dir, "export-" + name)
                p = run(["export", "--checkpoint", os.path.join(self.tok_run["out"], "checkpoints"), "--out", out,
                         "--format", "hf"] + extra)
                self.assertIn("with the tokenizer files of", p.stderr)
                self.assert_same_tokenizer_files(out, self.tok)
                self.assert_generation_ids(out)
                self.assertEqual(slurp(os.path.join(out, "model.safetensors")), slurp(os.path.join(hf, "model.safetensors")))

    def test_byte_data_exports_have_no_tokenizer(self):
        hf, done = self.byte_run["hf"], self.byte_run["done"]
        self.assert_no_tokenizer_files(hf)
        gen = load_json(os.path.join(hf, "generation_config.json"))
        self.assertNotIn("eos_token_id", gen)
        self.assertNotIn("export_tokenizer", done)
        self.assertNotIn("export_tokenizer_skipped", done)
        out = os.path.join(self.dir, "export-bytes")
        run(["export", "--checkpoint", os.path.join(self.byte_run["out"], "checkpoints"), "--out", out, "--format", "hf"])
        self.assert_no_tokenizer_files(out)

    def test_a_tokenizer_larger_than_the_model_is_left_out_or_refused(self):
        # The data's ids past the model's vocab_size are refused before training (exit 65).
        small = self.train_run("tok-small-vocab", self.tok_data, vocab=256, check=False)
        self.assertEqual(small["p"].returncode, EXIT_BAD_DATA, small["p"].stderr)
        self.assertIn("vocab_size 256", small["p"].stderr)
        self.assertFalse(os.path.exists(small["out"]))
        # Byte ids under a tokenizer with more ids than the model: the export leaves it out, saying so.
        mixed = os.path.join(self.dir, "data-mixed")
        shutil.copytree(self.byte_data, mixed)
        for name in TOKENIZER_FILES:
            shutil.copy(os.path.join(self.tok, name), mixed)
        r = self.train_run("mixed", mixed, vocab=256)
        self.assertIn("vocab_size 256", r["done"]["export_tokenizer_skipped"])
        self.assertIn("no tokenizer files", r["p"].stderr)
        self.assert_no_tokenizer_files(r["hf"])
        # Asked for by name, it is an error naming the file, and nothing is written.
        out = os.path.join(self.dir, "export-too-small")
        p = run(["export", "--checkpoint", os.path.join(r["out"], "checkpoints"), "--out", out,
                 "--format", "hf", "--tokenizer", self.tok], check=False)
        self.assertEqual(p.returncode, EXIT_BAD_DATA, p.stderr)
        self.assertIn(os.path.join(self.tok, "tokenizer.json"), p.stderr)
        self.assertIn("vocab_size", p.stderr)
        self.assertFalse(os.path.exists(out))

    def test_shards_from_several_directories_share_a_tokenizer_only_when_it_is_the_same(self):
        same = os.path.join(self.dir, "multi-same")
        os.makedirs(same)
        for part in ("a", "b"):
            shutil.copytree(self.tok_data, os.path.join(same, part))
        r = self.train_run("multi-same", self.tok_data, train_glob=os.path.join(same, "*", "train_*.bin"))
        self.assert_same_tokenizer_files(r["hf"], self.tok)
        # Another tokenizer in one of them (here only its eos differs): no tokenizer, and why.
        other = os.path.join(self.dir, "multi-other")
        os.makedirs(other)
        shutil.copytree(self.tok_data, os.path.join(other, "a"))
        write_tokenizer(os.path.join(self.dir, "tokenizer-b"), eos=BOS)
        run(["prepare-data", "--text", CORPUS, "--out", os.path.join(other, "b"), "--tokenizer",
             os.path.join(self.dir, "tokenizer-b")])
        r = self.train_run("multi-other", self.tok_data, train_glob=os.path.join(other, "*", "train_*.bin"))
        note = r["done"]["export_tokenizer_skipped"]
        self.assertIn("2 directories", note)
        self.assertIn(os.path.join(other, "b"), note)
        self.assert_no_tokenizer_files(r["hf"])

    # --- calibration of the Llama export -------------------------------------------------------

    def calibrate(self, name, spec, check=True):
        path = os.path.join(self.dir, name + "-calibrate.json")
        dump_json(path, spec)
        return run(["calibrate", "--spec", path], check=check)

    def test_calibrated_llama_export_keeps_names_and_tokenizer_and_reads_back(self):
        export = self.tok_run["hf"]
        out = os.path.join(self.dir, "calib-llama")
        self.calibrate("llama", {"input": export, "output_dir": out, "backend": "cpu"})
        linear = llama_linear_weights()
        index = load_json(os.path.join(out, "model.safetensors.index.json"))
        original, fp8 = read_model_dir(export), read_model_dir(out)
        self.assertEqual(set(index["weight_map"]), set(fp8))
        # Every linear weight FP8 with its scales, under its Llama name; the rest as exported.
        self.assertEqual(sorted(n for n in fp8 if n.endswith("_scale_inv")), sorted(n + "_scale_inv" for n in linear))
        self.assertEqual(set(fp8) - {n + "_scale_inv" for n in linear}, set(original))
        for name in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
                     "model.layers.0.input_layernorm.weight"):
            self.assertEqual(fp8[name][0], "F32", name)
            np.testing.assert_array_equal(fp8[name][1], original[name][1], err_msg=name)
        config = load_json(os.path.join(out, "config.json"))
        self.assertEqual(config["architectures"], ["LlamaForCausalLM"])
        self.assertEqual(config["quantization_config"]["weight_block_size"], [128, 128])
        report = load_json(os.path.join(out, "report.json"))
        # k/v projections are [64, 128] in llama-tiny (2 KV heads of 32): not whole 128 blocks.
        self.assertEqual(sorted(w["tensor"] for w in report["warnings"]),
                         sorted(n for n in linear if ".k_proj." in n or ".v_proj." in n))
        # The tokenizer files (and generation_config.json) travel with the model.
        self.assert_same_tokenizer_files(out, self.tok)
        self.assertEqual(slurp(os.path.join(out, "generation_config.json")),
                         slurp(os.path.join(export, "generation_config.json")))

        # Read back as an nn.Linear FP8 loader reads it: [out, in] bytes, [⌈out/128⌉, ⌈in/128⌉] scales.
        decode = e4m3_table()
        for w in linear:
            (qdtype, q), (sdtype, s) = fp8[w], fp8[w + "_scale_inv"]
            self.assertEqual((qdtype, sdtype), ("F8_E4M3", "F32"), w)
            ref = original[w][1].astype(np.float64)
            self.assertEqual(q.shape, ref.shape, w)
            rows, cols = ref.shape
            self.assertEqual(s.shape, (-(-rows // 128), -(-cols // 128)), w)
            deq = decode[q] * np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:rows, :cols]
            self.assertLess(np.linalg.norm(deq - ref) / np.linalg.norm(ref), 1 / 16, w)

        # fp8d's dequantize reads it back into a model that evaluates to the export's loss.
        back = out + "-bf16"
        self.calibrate("llama-back", {"input": out, "output_dir": back, "direction": "dequantize", "backend": "cpu"})
        self.assertNotIn("quantization_config", load_json(os.path.join(back, "config.json")))
        self.assert_same_tokenizer_files(back, self.tok)
        val = os.path.join(self.tok_data, "val_*.bin")
        want = json.loads(run(["evaluate", "--model", export, "--data", val, "--recipe", "bf16"]).stdout)["eval_loss"]
        got = json.loads(run(["evaluate", "--model", back, "--data", val, "--recipe", "bf16"]).stdout)["eval_loss"]
        self.assertLess(abs(got - want) / want, 0.01, (got, want))

        # Static activation scales run fp8d's GPT-2 only: a Llama (export or checkpoint) is refused naming why.
        step = os.path.join(self.tok_run["out"], "checkpoints", "step-2")
        for name, model, needle in (("export", export, "LlamaForCausalLM"), ("checkpoint", step, "architecture is llama")):
            with self.subTest(input=name):
                static = f"{out}-static-{name}"
                p = self.calibrate("llama-static-" + name, {"input": model, "output_dir": static, "backend": "cpu",
                                                            "activations": {"data": val, "num_samples": 8}}, check=False)
                self.assertEqual(p.returncode, EXIT_BAD_DATA, p.stderr)
                self.assertIn(needle, p.stderr)
                self.assertIn("GPT-2", p.stderr)
                self.assertFalse(os.path.exists(static))


if __name__ == "__main__":
    unittest.main(verbosity=2)
