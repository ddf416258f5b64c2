#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reads an fp8d run's TensorBoard event files with TensorBoard's own EventAccumulator.

`training.report_to: [tensorboard]` makes rank 0 of fp8-worker write
<output_dir>/runs/<job>/events.out.tfevents.<unix time>.<hostname> (worker/train/
tensorboard_writer.h). This loads a run folder the way `tensorboard --logdir` does and prints
every scalar tag it found with its steps. With --events (the worker's NDJSON stdout) it also
checks that each train/* scalar equals the progress event of its step and eval/loss the
eval_loss metric, as float32; with --steps N that train/loss has exactly the steps 1..N.

Usage (on the GPU machine, after a run):
  fp8-worker train --spec spec.json > events.ndjson    # spec: training.report_to: [tensorboard]
  python3 scripts/gpu/tensorboard_check.py OUTPUT_DIR/runs/JOB [--events events.ndjson]... [--steps N]
  python3 scripts/gpu/tensorboard_check.py --run-cpu   # trains the tiny model on the CPU first
                                                       # (needs FP8_WORKER and FP8_CORPUS)

Exits 0 when everything holds, 1 with a list of failures, 0 with "SKIP" when the tensorboard
package is not installed.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

# The progress event's field for each tag (ProgressScalars in tensorboard_writer.cc).
PROGRESS_FIELD = {
    "train/loss": "loss",
    "train/learning_rate": "lr",
    "train/grad_norm": "grad_norm",
    "train/tokens_per_second": "tokens_per_sec",
    "train/mfu": "mfu",
    "train/fp8_amax_max": "fp8_amax_max",
    "train/fp8_saturation_fraction": "fp8_saturation_fraction",
    "train/moe_load_min": "moe_load_min",
    "train/moe_load_max": "moe_load_max",
    "train/moe_load_cv": "moe_load_cv",
    "train/moe_dropped_fraction": "moe_dropped_fraction",
    "train/moe_aux_loss": "moe_aux_loss",
}


def f32(x):
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def read_events(path):
    progress, evals = {}, {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            e = json.loads(line)
            if "progress" in e:
                p = e["progress"]
                progress[int(p.get("step", 0))] = p
            elif "metric" in e and e["metric"].get("name") == "eval_loss":
                evals[int(e["metric"].get("step", 0))] = e["metric"]["value"]
    return progress, evals


def run_cpu(workdir):
    """Prepares the corpus and trains the tiny model for 8 steps with report_to tensorboard."""
    worker, corpus = os.environ.get("FP8_WORKER", "fp8-worker"), os.environ["FP8_CORPUS"]
    data = os.path.join(workdir, "data")
    subprocess.run([worker, "prepare-data", "--text", corpus, "--out", data], check=True,
                   stdout=subprocess.DEVNULL)
    spec = {"model": {"preset": "tiny"}, "backend": "cpu",
            "data": {"train": data + "/train_*.bin", "val": data + "/val_*.bin"},
            "precision": {"recipe": "fp8-tensorwise"},
            "training": {"max_steps": 8, "per_device_train_batch_size": 2, "logging_steps": 1,
                         "eval_steps": 4, "save_steps": 1000, "report_to": ["tensorboard"]},
            "output_dir": os.path.join(workdir, "out")}
    spec_path = os.path.join(workdir, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    events = os.path.join(workdir, "events.ndjson")
    with open(events, "w") as out:
        subprocess.run([worker, "train", "--spec", spec_path], check=True, stdout=out,
                       env=dict(os.environ, FP8D_JOB="tensorboard-check"))
    return os.path.join(workdir, "out", "runs", "tensorboard-check"), events, 8


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", nargs="?", help="<output_dir>/runs/<job>")
    ap.add_argument("--events", action="append", default=[],
                    help="the worker's NDJSON events of the same run (once per attempt, in order)")
    ap.add_argument("--steps", type=int, help="train/loss must have exactly the steps 1..N")
    ap.add_argument("--run-cpu", action="store_true", help="train the tiny model on the CPU first")
    args = ap.parse_args()
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError as e:
        print(f"SKIP: tensorboard is not installed ({e})")
        return 0

    tmp = None
    if args.run_cpu:
        tmp = tempfile.TemporaryDirectory(prefix="fp8-tensorboard-check-")
        args.run_dir, events, args.steps = run_cpu(tmp.name)
        args.events = [events]
    if not args.run_dir:
        ap.error("run_dir is required (or --run-cpu)")

    files = sorted(f for f in os.listdir(args.run_dir) if "tfevents" in f)
    print(f"{args.run_dir}: {len(files)} event file(s): {', '.join(files)}")
    acc = EventAccumulator(args.run_dir, size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    tags = acc.Tags().get("scalars", [])
    failures = []
    if not tags:
        failures.append("no scalar tags")
    for tag in sorted(tags):
        points = acc.Scalars(tag)
        steps = [p.step for p in points]
        print(f"  {tag:32s} {len(points):5d} points, steps {steps[0]}..{steps[-1]}, "
              f"last {points[-1].value:.6g}")
        if steps != sorted(set(steps)):
            failures.append(f"{tag}: steps not strictly increasing: {steps}")

    if args.steps is not None:
        got = [p.step for p in acc.Scalars("train/loss")] if "train/loss" in tags else []
        if got != list(range(1, args.steps + 1)):
            failures.append(f"train/loss: steps {got}, expected 1..{args.steps}")

    if args.events:
        progress, evals = {}, {}
        for path in args.events:  # a later attempt's figures replace an earlier one's
            p, e = read_events(path)
            progress.update(p)
            evals.update(e)
        for tag in tags:
            for p in acc.Scalars(tag):
                if tag == "eval/loss":
                    want = evals.get(p.step)
                elif tag in PROGRESS_FIELD:
                    want = progress.get(p.step, {}).get(PROGRESS_FIELD[tag])
                else:
                    failures.append(f"{tag}: not a tag fp8-worker writes")
                    break
                if want is None:
                    failures.append(f"{tag} step {p.step}: no such figure in {', '.join(args.events)}")
                elif f32(want) != p.value:
                    failures.append(f"{tag} step {p.step}: {p.value!r} in TensorBoard, {want!r} in the events")
        for field_tag in ("train/loss", "train/learning_rate", "train/grad_norm", "train/tokens_per_second"):
            if progress and field_tag not in tags:
                failures.append(f"{field_tag}: missing")
        if evals and "eval/loss" not in tags:
            failures.append("eval/loss: missing")

    if failures:
        print("FAIL:")
        for f in failures:
            print("  " + f)
        return 1
    print(f"OK: {len(tags)} scalar tags read by TensorBoard's EventAccumulator")
    return 0


if __name__ == "__main__":
    sys.exit(main())
