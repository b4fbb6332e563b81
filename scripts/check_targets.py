"""Issue 27's and issue 45's targets, read from a finished pipeline's results.json without the package's own analysis
code (only its typed records, ``ds_minimodel.pipeline.records``, which parse and check the file), so that the
analysis (analysis/table3.txt, time_to_target.json) is checked by a second reading of the same records.

    python scripts/check_targets.py runs/reference-focus/results.json [--task lohelp] [--json OUT]
    python scripts/check_targets.py runs/reference-minilm-focus/results.json \
        --compare results/reference-focus/results.json     # a run from a given model against the CPU-trained body

Every figure is the mean over finetuning seeds of accuracy or macro-F1 on the test files, at each system's last
Step-2 checkpoint unless said otherwise:
- BL_BASE's mean accuracy over the target languages against the mean majority class (at least 10 points above) and
  against the bag of words in each language (above it);
- BL_BASE's mean macro-F1 (at least 30) and its share of the English classifier's own macro-F1 on English test
  (BL_BASE's primary with its own embeddings; at least 60%);
- the source-relearn control's accuracy on English test as a share of the English classifier's (at least 80%);
- the paper's shape: BL_SMALL's final score below BL_BASE's; the V100-days each system needs to reach 95% of
  BL_BASE's final score (the paper's time to target) and, where BL_BASE's update 0 already meets that, to 95% of
  BL_BASE's gain from update 0 (ours), each by linear interpolation between checkpoints, and the speedup over BL_BASE,
  with the least speedup the checkpoints around each crossing allow (a target is judged by the interpolated one).

With ``--per-language`` (issue 46's targets, for languages tried one by one): in every language, BL_BASE's accuracy
at least 10 points above the majority class and above the bag of words, its macro-F1 at least half the English
classifier's on English test (``--english`` names a results.json with that score when the run has none); MiniPost
reaching 95% of BL_BASE's final score at least 1.4x sooner in every language where BL_BASE meets the first target.

A run that started from a given English model (results.json's ``source_model``, issue 45) is also checked for: the
English classifier above the bag of words on English test; BL_BASE's mean accuracy above the one of the run given as
``--compare`` (the CPU-trained body's, same recipe); MiniPost's final mean score within 1 point of BL_BASE's and its
speedup to 95% of BL_BASE's final score at least 1.5x in every language.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from ds_minimodel.errors import InputError
from ds_minimodel.pipeline.records import Results

NEAR = 0.95


def mean(values):
    values = list(values)
    return statistics.fmean(values) if values else None


def curves(records, task, metric):
    """{(lang, system): [(update, v100_days, mean over seeds)]} from the per-seed zero-shot records."""
    by_point = defaultdict(list)
    for r in records:
        if r.task == task:
            by_point[(r.lang, r.system, r.step2_update, r.v100_days)].append(r.metrics[metric])
    out = defaultdict(list)
    for (lang, system, update, days), scores in by_point.items():
        out[(lang, system)].append((update, days, statistics.fmean(scores)))
    return {key: sorted(points) for key, points in out.items()}


def crossing(curve, target):
    """(V100-days at which the curve first reaches ``target``, linear between checkpoints; the checkpoints' V100-days
    before it, 0 before the first, and at it), or (None, None, None) if never."""
    previous = None
    for _, days, score in curve:
        if score >= target:
            if previous is None:
                return days, 0.0, days
            p_days, p_score = previous
            return p_days + (target - p_score) / (score - p_score) * (days - p_days), p_days, days
        previous = (days, score)
    return None, None, None


def speedups(all_curves, langs, systems, gain, clear):
    rows = {}
    for lang in langs:
        base = all_curves.get((lang, "bl_base"))
        if not base or not clear[lang]:
            continue  # no target where BL_BASE does not clearly transfer
        start, final = base[0][2], base[-1][2]
        target = NEAR * final
        if gain:
            if base[0][0] != 0 or start < target or final <= start:
                continue  # the paper's target applies
            target = start + NEAR * (final - start)
        base_days, base_lower, _ = crossing(base, target)
        for system in systems:
            curve = all_curves.get((lang, system))
            if not curve:
                continue
            days, _, upper = crossing(curve, target)
            both = days is not None and base_days is not None and days > 0 and base_days > 0
            # what the checkpoints prove whatever a curve does between two of them: BL_BASE's lower bound over the
            # system's upper one (the package's speedup_at_least)
            at_least = base_lower / upper if both and system != "bl_base" else None
            rows[(lang, system)] = {"target": target, "v100_days": days, "base_v100_days": base_days,
                                    "speedup": base_days / days if both else None, "at_least": at_least}
    return rows


def minipost_sooner(say, acc, langs, where, at_least, no_target):
    """MiniPost reaching 95% of BL_BASE's final score ``at_least`` times sooner in each language; a language not in
    ``where`` has no target: ``no_target`` is what is said there (the value, and met or not)."""
    rows = speedups(acc, langs, ["minipost"], False, where)
    for lang in langs:
        row = rows.get((lang, "minipost"))
        if row is None:
            value, ok = no_target
        elif row["v100_days"] == 0 and row["base_v100_days"] == 0:  # as the package's analysis: no speedup defined
            value, ok = "both reach it at update 0 (the initial rows alone): no speedup defined", None
        elif row["v100_days"] == 0:
            value, ok = "at update 0 (the initial rows alone), BL_BASE only after Step 2", True
        else:
            value = "never" if row["speedup"] is None else (
                f"{row['speedup']:.2f}x (the checkpoints around each crossing: at least {row['at_least']:.2f}x)")
            ok = row["speedup"] is not None and row["speedup"] >= at_least
        say(f"MiniPost {lang} reaches 95% of BL_BASE's final score >= {at_least}x sooner", value, ok)


def given_model_targets(results, task, say, final, langs, systems, en_acc, base_acc, compare, clear, acc):
    """Issue 45's targets for a run from a given English model."""
    source = {b.lang: b for b in results.baselines
              if b.task == task and b.split == "test" and b.lang not in langs}  # the source language's
    english_bow = next(iter(source.values())).scores["bag_of_words"] if len(source) == 1 else None
    if english_bow is not None and en_acc is not None:
        say("English classifier (the given model, finetuned) > bag of words on English test",
            f"{en_acc:.1f} against {english_bow:.1f}", en_acc > english_bow)
    if compare is not None:
        other = [r for r in compare.zero_shot if r.task == task and r.system == "bl_base"]
        other_final = curves(other, task, "accuracy")
        theirs = mean(other_final[(lang, "bl_base")][-1][2] for lang in langs if (lang, "bl_base") in other_final)
        say("BL_BASE mean accuracy > the compared run's BL_BASE", f"{base_acc:.1f} against {theirs:.1f}",
            base_acc > theirs)
    if "minipost" in systems:
        post = mean(final[(lang, "minipost")] for lang in langs)
        say("MiniPost final mean accuracy within 1 point of BL_BASE's", f"{post:.1f} against {base_acc:.1f}",
            post >= base_acc - 1)
        minipost_sooner(say, acc, langs, clear, 1.5, ("no target (BL_BASE does not clearly transfer)", False))


def per_language_targets(say, langs, systems, final, final_f1, test, en_f1, acc):
    """Issue 46's targets, language by language."""
    transfers = {}
    for lang in langs:
        value, majority = final[(lang, "bl_base")], test[lang]["majority"]
        transfers[lang] = value - majority >= 10
        say(f"BL_BASE {lang} accuracy - majority class >= 10", f"{value:.1f} - {majority:.1f} = {value - majority:.1f}",
            transfers[lang])
        f1 = final_f1[(lang, "bl_base")]
        say(f"BL_BASE {lang} macro-F1 >= half the English classifier's (test)",
            f"{f1:.1f} against {en_f1 / 2:.1f}" if en_f1 is not None else "no English test score",
            None if en_f1 is None else f1 >= en_f1 / 2)
    if "minipost" in systems:
        minipost_sooner(say, acc, langs, transfers, 1.4, ("no target (BL_BASE does not transfer)", None))


def check(results, task, compare=None, per_language=False, english=None):
    zero = [r for r in results.zero_shot if r.task == task]
    langs = sorted({r.lang for r in zero})
    systems = sorted({r.system for r in zero})
    acc, f1 = curves(zero, task, "accuracy"), curves(zero, task, "macro_f1")
    final = {key: points[-1][2] for key, points in acc.items()}
    final_f1 = {key: points[-1][2] for key, points in f1.items()}
    test = {b.lang: b.scores for b in results.baselines if b.task == task and b.split == "test"}
    english = [r for r in (english or results).source_test if r.task == task and r.primary == "base"]
    en_acc, en_f1 = mean(r.metrics["accuracy"] for r in english), mean(r.metrics["macro_f1"] for r in english)
    base_acc = mean(final[(lang, "bl_base")] for lang in langs)
    base_f1 = mean(final_f1[(lang, "bl_base")] for lang in langs)
    majority = mean(test[lang]["majority"] for lang in langs)
    lines, report = [], {"langs": langs, "systems": systems}

    def say(name, value, ok):  # ok None: the target does not apply
        report[name] = {"value": value, "met": ok}
        lines.append(f"{'n/a   ' if ok is None else 'met   ' if ok else 'MISSED'} {name}: {value}")

    say("BL_BASE mean accuracy - mean majority class >= 10",
        f"{base_acc:.1f} - {majority:.1f} = {base_acc - majority:.1f}", base_acc - majority >= 10)
    for lang in langs:
        value, bow = final[(lang, "bl_base")], test[lang]["bag_of_words"]
        say(f"BL_BASE {lang} accuracy > bag of words", f"{value:.1f} against {bow:.1f}", value > bow)
    say("BL_BASE mean macro-F1 >= 30", f"{base_f1:.1f}", base_f1 >= 30)
    if en_f1 is None:  # a run without English test (--english names one that has it)
        say("BL_BASE mean macro-F1 >= 60% of English test's", "no English test score", None)
    else:
        say("BL_BASE mean macro-F1 >= 60% of English test's",
            f"{base_f1:.1f} / {en_f1:.1f} = {base_f1 / en_f1:.0%}", base_f1 >= 0.6 * en_f1)
    relearn = [r for r in results.source_relearn if r.task == task]
    if relearn:
        last = max(r.step2_update for r in relearn)
        value = mean(r.metrics["accuracy"] for r in relearn if r.step2_update == last)
        name = "source-relearn control accuracy >= 80% of the English classifier's (test)"
        if en_acc is None:
            say(name, "no English test score", None)
        else:
            say(name, f"{value:.1f} / {en_acc:.1f} = {value / en_acc:.0%}", value >= 0.8 * en_acc)
    else:
        lines.append("(no source-relearn control in this run)")
    if "bl_small" in systems:
        small = mean(final[(lang, "bl_small")] for lang in langs)
        say("BL_SMALL mean final accuracy < BL_BASE's", f"{small:.1f} against {base_acc:.1f}", small < base_acc)
    # The no-speedup-on-noise rule: a language counts only where BL_BASE's final accuracy is above the majority
    # class by 2 points and by twice its spread over seeds.
    last = {lang: max(r.step2_update for r in zero if r.lang == lang and r.system == "bl_base") for lang in langs}
    spread = {lang: statistics.stdev(seeds) if len(seeds) > 1 else 0.0 for lang, seeds in (
        (lang, [r.metrics["accuracy"] for r in zero if r.lang == lang and r.system == "bl_base"
                and r.step2_update == last[lang]]) for lang in langs)}
    clear = {lang: final[(lang, "bl_base")] - test[lang]["majority"] > max(2.0, 2 * spread[lang]) for lang in langs}
    lines.append("BL_BASE clearly above the majority class (by 2 points and twice its spread over seeds) in: "
                 + (", ".join(lang for lang in langs if clear[lang]) or "none"))
    for gain in (False, True):
        rows = speedups(acc, langs, systems, gain, clear)
        if not rows:
            continue
        label = "95% of BL_BASE's gain from update 0 (ours)" if gain else "95% of BL_BASE's final score (paper)"
        lines.append(f"V100-days to {label}, accuracy:")
        for (lang, system), row in sorted(rows.items()):
            days = "never" if row["v100_days"] is None else f"{row['v100_days']:.3g}"
            speed = "" if row["speedup"] is None else f", speedup {row['speedup']:.2f}" + (
                "" if row["at_least"] is None else f" (the checkpoints: at least {row['at_least']:.2f})")
            lines.append(f"  {lang} {system}: target {row['target']:.1f}, {days}{speed}")
        report["gain" if gain else "paper"] = {f"{lang} {system}": row for (lang, system), row in rows.items()}
    if per_language:
        per_language_targets(say, langs, systems, final, final_f1, test, en_f1, acc)
    if results.source_model:
        given_model_targets(results, task, say, final, langs, systems, en_acc, base_acc, compare, clear, acc)
    lines.append("final accuracy (macro-F1) per system, mean over languages: " + "; ".join(
        f"{s} {mean(final[(lang, s)] for lang in langs):.1f} ({mean(final_f1[(lang, s)] for lang in langs):.1f})"
        for s in systems))
    return lines, report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--task", default="lohelp")
    parser.add_argument("--json", type=Path, help="also write the checks here")
    parser.add_argument("--compare", type=Path, help="another run's results.json whose BL_BASE this run's must beat "
                        "(issue 45: a given model's run against the CPU-trained body's, same Step-2 recipe)")
    parser.add_argument("--per-language", action="store_true", help="issue 46's targets, in every language")
    parser.add_argument("--english", type=Path, help="a results.json whose English classifier's test score the "
                        "per-language targets compare with (default: this run's)")
    args = parser.parse_args(argv)
    try:  # each file parsed once, every record checked (ds_minimodel.pipeline.records): the reading is this script's
        loaded = {name: Results.load(path) for name, path in
                  (("results", args.results), ("compare", args.compare), ("english", args.english)) if path}
    except InputError as err:
        print(f"check_targets.py: {err}", file=sys.stderr)
        return 2
    lines, report = check(loaded["results"], args.task, loaded.get("compare"), args.per_language,
                          loaded.get("english"))
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
