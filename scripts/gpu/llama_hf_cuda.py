#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A Llama (and a Qwen3) made by transformers, through fp8d on the CUDA backend and back (issue 26).

For each model: transformers builds it (its own initialisation, float32) and saves it with
save_pretrained; fp8d's logits of a token sequence (`fp8-worker evaluate`, CPU reference, fp32)
must equal transformers' (eager attention, float32) to 1e-4 relative; `fp8-worker train` fine-tunes
it with `init_from` and `backend: cuda` under fp8-blockwise, whose step-1 loss must be the loaded
model's loss on the same batch (2e-2 relative: the FP8 step against the CPU's fp8-blockwise
forward) and whose loss must fall; its `export: hf` must load back in transformers
(AutoModelForCausalLM) with logits equal to fp8d's of the exported directory (1e-4 relative).
The third model trains on shards that `prepare-data --tokenizer` encoded with a byte-level BPE
tokenizer trained here by the `tokenizers` library; its export must carry that tokenizer, and
transformers' AutoTokenizer loaded from the export must encode the corpus to the same ids.
Prints one JSON line per model and exits 1 if any check fails.
  usage: llama_hf_cuda.py FP8_WORKER CORPUS_TXT
"""
import json
import sys
import tempfile

import torch
import transformers

from hf_check_common import fp8d_logits, hf_logits, rel, run, train_events

WORKER, CORPUS = sys.argv[1], sys.argv[2]
BATCH, STEPS = 4, 20
# CUDA-friendly widths (the blockwise recipe tiles 128), byte vocabulary.
COMMON = dict(vocab_size=256, hidden_size=256, intermediate_size=768, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-5, tie_word_embeddings=False)
BPE_VOCAB = 512
# name -> (model maker, whether its data comes from the BPE tokenizer)
MODELS = {
    "llama": (lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**COMMON)), False),
    "qwen3": (lambda: transformers.Qwen3ForCausalLM(transformers.Qwen3Config(head_dim=64, **COMMON)), False),
    "llama-bpe": (lambda: transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**dict(COMMON, vocab_size=BPE_VOCAB))), True),
}


def bpe_tokenizer(out_dir):
    """A GPT-2-style byte-level BPE trained on the corpus, saved as transformers saves it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([CORPUS], trainers.BpeTrainer(vocab_size=BPE_VOCAB, special_tokens=["<|endoftext|>"],
                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    fast.save_pretrained(out_dir)
    return fast


def same_encoding(original, exported_dir):
    with open(CORPUS, encoding="utf-8") as f:
        text = f.read()[:20000]
    back = transformers.AutoTokenizer.from_pretrained(exported_dir)
    return back.encode(text, add_special_tokens=False) == original.encode(text, add_special_tokens=False)


torch.manual_seed(26)
failures = 0
with tempfile.TemporaryDirectory(prefix="fp8-llama-hf-cuda-") as d:
    run(WORKER, ["prepare-data", "--text", CORPUS, "--out", f"{d}/data"])
    tokenizer = bpe_tokenizer(f"{d}/tok")
    run(WORKER, ["prepare-data", "--text", CORPUS, "--tokenizer", f"{d}/tok", "--out", f"{d}/data-bpe"])
    for name, (make, uses_bpe) in MODELS.items():
        data = f"{d}/data-bpe" if uses_bpe else f"{d}/data"
        src = f"{d}/{name}"
        model = make().float()
        model.config._attn_implementation = "eager"
        model.save_pretrained(src)
        imported = rel(fp8d_logits(WORKER, src), hf_logits(model))
        spec = {"data": {"train": f"{data}/train_*.bin", "val": f"{data}/val_*.bin"},
                "training": {"max_steps": STEPS, "per_device_train_batch_size": BATCH, "logging_steps": 1,
                             "eval_steps": STEPS, "save_steps": STEPS, "learning_rate": 1e-3, "export": "hf"},
                "init_from": src, "precision": {"recipe": "fp8-blockwise"},
                "output_dir": f"{d}/run-{name}", "backend": "cuda"}
        with open(f"{d}/{name}.json", "w") as f:
            json.dump(spec, f)
        events = train_events(WORKER, f"{d}/{name}.json")
        losses = [e["progress"]["loss"] for e in events if "progress" in e]
        loaded = json.loads(run(WORKER, ["evaluate", "--model", src, "--data", f"{data}/train_*.bin", "--seed", "42",
                                 "--first-batch", str(BATCH), "--recipe", "fp8-blockwise"]).stdout)["first_batch_loss"]
        step1 = abs(losses[0] / loaded - 1)
        exported = f"{d}/run-{name}/hf"
        back = transformers.AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32,
                                                                 attn_implementation="eager")
        round_trip = rel(hf_logits(back), fp8d_logits(WORKER, exported))
        ok = imported < 1e-4 and step1 < 2e-2 and losses[-1] < losses[0] and round_trip < 1e-4
        result = {"model": name, "class": type(back).__name__,
                  "import_logits_rel": imported, "cuda_step1_loss": losses[0], "loaded_loss": loaded,
                  "step1_rel": step1, "last_loss": losses[-1], "export_logits_rel": round_trip}
        if uses_bpe:
            result["exported_tokenizer_encodes_the_same"] = same_encoding(tokenizer, exported)
            ok = ok and result["exported_tokenizer_encodes_the_same"]
        failures += not ok
        print(json.dumps(dict(result, ok=ok)), flush=True)
sys.exit(1 if failures else 0)
