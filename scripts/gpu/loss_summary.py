#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""FP8 vs BF16 held-out loss at equal steps (DeepSeek-V3's criterion: within 0.25%), from the
runs of scripts/gpu/trainer_cuda_loss.sh.

Input: JSON lines, one per run: {"run": "fp8-blockwise@2", "result": <bench_trainer_cuda --json row>}
(the script writes $OUT/loss_runs.jsonl; the files of several device calls can be concatenated).
Prints each run's val loss by step and its final loss against the bf16 run of the same seed, then
per recipe: the mean final loss over its seeds with its standard error, the difference of the
means to bf16's with the standard error of that difference, and a verdict at two standard errors:
"within 0.25%" only if the whole interval lies inside ±0.25%, "outside" only if it lies wholly
outside, else "undecided (more seeds)". A second verdict asks only whether FP8 costs loss (a
one-sided, non-inferiority reading of the same interval): "no worse than +0.25%" when its upper end
lies below +0.25%, "worse than +0.25%" when its lower end lies above, else undecided. An FP8 mean
below bf16's by more than 0.25% fails the first verdict but is no precision loss.

  python3 scripts/gpu/loss_summary.py loss_runs.jsonl [more.jsonl ...]
"""
import json
import math
import sys
from collections import defaultdict

CRITERION = 0.0025


def recipe_and_seed(run):
    recipe, _, seed = run.partition("@")
    return recipe, int(seed) if seed else 1


def mean_and_se(xs):
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, float("nan")
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
    return m, math.sqrt(var / len(xs))


def verdicts(lo, hi):
    """(two-sided, one-sided) verdicts on the interval lo .. hi of the difference (nan: one seed)."""
    if math.isnan(lo):
        return "undecided (one seed)", "undecided (one seed)"
    if -CRITERION <= lo and hi <= CRITERION:
        two_sided = "within 0.25%"
    elif hi < -CRITERION or lo > CRITERION:
        two_sided = "outside 0.25%"
    else:
        two_sided = "undecided (more seeds)"
    if hi < CRITERION:
        one_sided = "no worse than +0.25%"
    elif lo > CRITERION:
        one_sided = "worse than +0.25%"
    else:
        one_sided = "undecided (more seeds)"
    return two_sided, one_sided


def summarize(runs, out=sys.stdout):
    """runs: {run name: bench result}.
    Returns {recipe: (mean, se, diff, se_diff, verdict, penalty_verdict)}."""
    if not runs:
        print("no runs", file=out)
        return {}
    evals = sorted({s for r in runs.values() for s, _ in r["val_losses"]})
    names = sorted(runs, key=lambda n: (recipe_and_seed(n)[1], n))
    print("val loss by step: " + "  ".join("%-18s" % n for n in names), file=out)
    for s in evals:
        cells = ("%.5f" % dict(map(tuple, runs[n]["val_losses"])).get(s, float("nan")) for n in names)
        print("  %5d           " % s + "  ".join("%-18s" % c for c in cells), file=out)
    final = {n: runs[n]["val_loss_final"] for n in names}
    for n in names:
        recipe, seed = recipe_and_seed(n)
        ref = final.get("bf16" if seed == 1 and "bf16" in final else "bf16@%d" % seed)
        paired = "%+.3f%% vs bf16 of the same seed" % (100 * (final[n] / ref - 1)) if ref else "no bf16 run of this seed"
        last3 = [l for _, l in runs[n]["val_losses"][-3:]]
        print("%-18s final val loss %.5f (%s), mean of its last 3 evals %.5f, train loss of the last steps %.5f, %.0f tok/s"
              % (n, final[n], paired, sum(last3) / len(last3), runs[n].get("loss_tail_mean", float("nan")), runs[n]["tokens_per_s"]),
              file=out)

    by_recipe = defaultdict(list)
    for n in names:
        by_recipe[recipe_and_seed(n)[0]].append(final[n])
    if "bf16" not in by_recipe:
        print("no bf16 runs: no comparison", file=out)
        return {}
    ref_mean, ref_se = mean_and_se(by_recipe["bf16"])
    result = {}
    print("per recipe, final val loss over seeds (mean ± standard error), difference of the means to bf16:", file=out)
    for recipe, xs in sorted(by_recipe.items()):
        m, se = mean_and_se(xs)
        diff = m / ref_mean - 1
        if recipe == "bf16":
            print("  %-15s %d seeds  %.5f ± %.5f" % (recipe, len(xs), m, se), file=out)
            continue
        # Standard error of the difference of two independent means (nan with a single seed).
        se_diff = math.sqrt(se ** 2 + ref_se ** 2) / ref_mean
        lo, hi = diff - 2 * se_diff, diff + 2 * se_diff
        v, pv = verdicts(lo, hi)
        result[recipe] = (m, se, diff, se_diff, v, pv)
        print("  %-15s %d seeds  %.5f ± %.5f   %+.3f%% ± %.3f%% (2 SE: %+.3f%% .. %+.3f%%): %s; one-sided: %s"
              % (recipe, len(xs), m, se, 100 * diff, 100 * se_diff, 100 * lo, 100 * hi, v, pv), file=out)
    return result


def load(paths):
    """{run name: bench result} from JSON-lines files (a later line of the same run wins)."""
    runs = {}
    for p in paths:
        with open(p) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    runs[row["run"]] = row["result"]
    return runs


def main(paths):
    summarize(load(paths))


if __name__ == "__main__":
    main(sys.argv[1:])
