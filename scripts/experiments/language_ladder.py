"""Issue 46's dev ladder: what each resource gives a new language, over a real pretrained English model.

    python scripts/experiments/language_ladder.py [--from runs/reference-minilm-continued] [--config CONFIG]
        [--out runs/language-ladder] [--langs ja ko km pl fi fi-small] [--variants focus,focus-translit,...]
        [--steps N] [--seeds 1] [--list]

For each variant, one pipeline (``ds-minimodel pipeline``) adds the languages to a finished MiniLM run, by default
the continued one (``configs/reference_minilm_continued.json``, ``scripts/experiments/minilm_continued_test.sh``:
the English body README advises; ``--from runs/reference-minilm-focus --config configs/reference_minilm_focus.json``
for the model as shipped): its Step 1 (the given model and its trained head), its English data and its Step-3
classifiers (its three seeds, or those ``--seeds`` names) are linked in, not retrained (the pipeline checks that
their settings are the ones asked), and only each language's data (prepared by the first variant, linked by the
others), Step 2 over BL_BASE and Step 4 run. Step 4 scores the languages' *dev*
files: the config's task names them as its test files, so that no test file is read while choosing (RESULTS.md
reports test once, with the chosen recipe). ``fi-small`` is the 0.40 MB Finnish cut (issue 46 item 3), scored on
Finnish dev. ``--test --variants V`` is that one run on test, once the recipe V is chosen: BL_BASE and MiniPost
(the finished run's Step 1b and the mini-model's classifiers linked too), the languages' test files, into
``runs/language-test/V``; it refuses to start without ``--variants``. Its config names each language's dev file too,
so its Step 4 also chooses each system's Step-2 checkpoint there and reads test at it (``chosen_on_dev``).

Variants (``step2`` settings over the run's own): ``focus`` (no resource), ``focus-translit`` (transliteration anchors),
``focus-ngrams`` (rare pieces' static vectors from character n-grams), ``wechsel-freedict`` (the FreeDict lists
``scripts/make_dictionaries.py`` builds, for the languages that have one: ja, pl, fi; ru and hi from English),
``wechsel-help`` (the help-page lexicons ``scripts/make_help_lexicons.py`` builds from the help outside the task's dev
and test pages: in-domain parallel text, every language), ``focus-freedict-anchors`` and ``focus-help-anchors`` (FOCUS
with word anchors from either list: a piece that is a listed word copies its translation's row),
``wechsel-freedict-anchors`` and ``wechsel-help-anchors`` (WECHSEL with them), and each of these four with ``-fixed``
(the copied and anchored rows kept as they start: ``freeze_copied``). ``auto-help`` is what the pipeline chooses by
itself (``"init": "auto"``) for a target given the help-page list: FOCUS with its word anchors, the run
``focus-help-anchors`` makes, with the pipeline's line saying so. Each variant's output is ``<out>/<variant>/``
(results.json, analysis/); run it again to resume. ``--steps`` shortens Step 2 (the run's 600 by default; its schedule
decays to 0 at its last update, so a shorter Step 2 is not the longer one's early checkpoints); ``--lr`` sets its
peak learning rate (a copy of its DeepSpeed file in the variant's folder). ``--list`` prints each pipeline's jobs and
what is done, and starts nothing. ``--table`` prints, from the variants finished so far, each
language's dev accuracy (macro-F1) at Step 2's last checkpoint, mean over the finetuning seeds, beside its majority
class and bag of words, and how each variant's rows started (copied / mixed / drawn; WECHSEL's word pairs used of those
listed); it starts nothing. ``--curves`` prints each language's dev curve over every Step-2 checkpoint, with its
corpus size, the share of its rows copied from English rows and how far the last and best checkpoints are from update 0.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
TASK = "reference_data/tasks/lohelp"
VARIANTS = {
    "focus": {"init": "focus"},
    "focus-translit": {"init": "focus", "transliterate": True},
    "focus-ngrams": {"init": "focus", "rare_vectors": "ngrams"},
    "wechsel-freedict": {"init": "wechsel"},
    "wechsel-help": {"init": "wechsel"},
    "focus-freedict-anchors": {"init": "focus", "word_anchors": True},
    "focus-help-anchors": {"init": "focus", "word_anchors": True},
    "wechsel-freedict-anchors": {"init": "wechsel", "word_anchors": True},
    "wechsel-help-anchors": {"init": "wechsel", "word_anchors": True},
    "auto-help": {"init": "auto"},
}
VARIANTS.update({f"{name}-fixed": {**settings, "freeze_copied": True}
                 for name, settings in list(VARIANTS.items()) if name.endswith("-anchors")})
FREEDICT = {"ja", "pl", "fi", "fi-small", "ru", "hi"}
"""The languages with a FreeDict dictionary with English (scripts/make_language_data.py's table; fi-small is Finnish;
Russian's and Hindi's run from English, read backwards: ``make_dictionaries.py --langs ru=eng-rus hi=eng-hin``)."""
FREEDICT_LIST = ("reference_data/dictionaries/{lang}-en.tsv", "make_dictionaries.py")
HELP_LIST = ("reference_data/lexicons/{lang}-en.help.tsv", "make_help_lexicons.py")
WORD_LISTS = {name: FREEDICT_LIST if "freedict" in name else HELP_LIST
              for name in VARIANTS if "freedict" in name or "help" in name}
"""Each variant's word list by language (a cut's ``-small`` left out: Finnish's list for fi-small), and the script
in scripts/ that builds it."""
SHARED = ("step1", "step3", "data/en")
"""What each variant's pipeline takes from the finished run, linked (``--test`` also its MiniPost: ``step1b``)."""
DEFAULT_VARIANTS = "focus,focus-translit,focus-ngrams,wechsel-freedict,wechsel-help"


def task_file(lang: str, split: str) -> str:
    """The lohelp file of a language's split (a cut such as fi-small reads its language's)."""
    return f"{TASK}/{split}.{lang.split('-')[0]}.jsonl"


def config(base: dict, variant: str, langs: list[str], out: Path, steps: int | None = None, *,
           test: bool = False, seeds: list[int] | None = None) -> dict:
    """The finished run's config with the languages as its targets, their dev files as the task's test files, and
    the variant's Step-2 settings (``steps``: Step 2's length where not the run's); BL_BASE alone. ``test``: the
    chosen recipe's run on the test files, BL_BASE and MiniPost (with its mini-model's classifiers). ``seeds``: the
    finetuning seeds whose classifiers score the rows, where not all of the run's."""
    cfg = json.loads(json.dumps(base))
    cfg.update(out=str(out), systems=["bl_base"], source_minis=[], fit_vocab=True)
    if seeds is not None:
        cfg["step3"]["seeds"] = seeds
    if test:
        cfg.update(systems=["bl_base", "minipost"], source_minis=["minipost"])
    word_list = WORD_LISTS.get(variant, ("",))[0]
    cfg["targets"] = [{"lang": lang, "corpus": f"reference_data/corpus/{lang}.txt",
                       **({"word_list": word_list.format(lang=lang.split("-")[0])} if word_list else {})}
                      for lang in langs]
    task = cfg["tasks"][0]
    task["dev"] = {"en": task["dev"]["en"]}  # Step 3's English dev (its runs are linked, unchanged)
    split = "test" if test else "dev"
    task["test"] = {lang: task_file(lang, split) for lang in ["en", *langs]}
    if test:  # Step 4 also chooses each language's Step-2 checkpoint on its dev file (pipeline.dev_choice)
        task["dev"].update({lang: task_file(lang, "dev") for lang in langs})
    cfg["step2"].update(VARIANTS[variant])
    if steps is not None:  # six saved checkpoints after update 0, as the run's 600 updates have
        cfg["step2"].update(steps=steps, save_every=max(1, steps // 6))
    return cfg


def with_lr(cfg: dict, lr: float, out: Path) -> dict:
    """``cfg`` with Step 2's peak learning rate set to ``lr``: its DeepSpeed file copied to ``out`` with the
    optimizer's lr and the scheduler's warmup_max_lr changed (the rest of the schedule as it was)."""
    ds = json.loads((REPO / cfg["step2"]["ds_config"]).read_text(encoding="utf-8"))
    ds["optimizer"]["params"]["lr"] = lr
    if "warmup_max_lr" in ds.get("scheduler", {}).get("params", {}):
        ds["scheduler"]["params"]["warmup_max_lr"] = lr
    path = out / f"step2_lr{lr:g}.ds.json"
    path.write_text(json.dumps(ds, indent=1) + "\n", encoding="utf-8")
    cfg["step2"]["ds_config"] = str(path.resolve())
    return cfg


def link_finished(run: Path, out: Path, shared: tuple[str, ...] = SHARED) -> None:
    """The finished run's steps in ``shared`` (Step 1, Step 3 and English data; with ``--test`` Step 1b too) in
    ``out``, as links (made once), in a folder marked as a pipeline's own (``pipeline.ownership``) so that the
    pipeline takes it."""
    from ds_minimodel.pipeline.ownership import OWNER_MARK

    if not (out / OWNER_MARK).exists():
        (out / OWNER_MARK).write_text(f"a pipeline's folder: {run}'s {', '.join(shared)} linked by "
                                      "language_ladder.py\n")
    for rel in shared:
        link = out / rel
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to((run / rel).resolve(), target_is_directory=True)


def share_data(root: Path, variant: str, langs: list[str]) -> None:
    """Each language's prepared data (tokenizer, encoded corpus, cached static vectors) taken, as a link, from a
    variant of the same ladder that prepared it (the data's meta file, written last, marks it done): the variants
    differ in Step 2 only, so their data are the same and are prepared once."""
    from ds_minimodel.data.shards import META_FILE

    for lang in langs:
        link = root / variant / "data" / lang
        if link.exists() or link.is_symlink():
            continue
        done = sorted(p for p in root.glob(f"*/data/{lang}") if not p.is_symlink() and (p / META_FILE).is_file())
        if done:
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(done[0].resolve(), target_is_directory=True)


def scores(results: dict, lang: str) -> str:
    """BL_BASE's dev accuracy (macro-F1) at its last Step-2 checkpoint in one language, mean over seeds."""
    points = curve(results, lang)
    return cell(points[max(points)]) if points else "-"


def cell(point: tuple[float, float]) -> str:
    """An (accuracy, macro-F1) pair as the tables print it."""
    return f"{point[0]:.1f} ({point[1]:.1f})"


def record(out: Path, lang: str, run_path: str, kept: str) -> dict:
    """A JSON record of one language's BL_BASE run, from a variant's run folder (``run_path`` under
    ``step2/<lang>/bl_base/``; ``data/<lang>/...`` for the prepared data's) or from the copy a results folder keeps
    (``kept``, with ``{lang}`` filled in); {} where neither has it."""
    paths = [out / run_path.format(lang=lang), out / kept.format(lang=lang)]
    found = [path for path in paths if path.is_file()]
    return json.loads(found[0].read_text(encoding="utf-8")) if found else {}


def start_meta(out: Path, lang: str) -> dict:
    """The update-0 checkpoint's record of a language's BL_BASE Step 2 (how its rows started)."""
    return record(out, lang, "step2/{lang}/bl_base/checkpoints/step_00000000/meta.json", "step2-{lang}.start_meta.json")


def start(out: Path, lang: str) -> str:
    """How a variant's Step 2 started in one language: its rows copied / mixed / drawn, and WECHSEL's pairs."""
    init = start_meta(out, lang).get("initialisation")
    if init is None:
        return "-"
    pairs = init.get("alignment")
    return (f"{init['copied']:,} / {init['mixed']:,} / {init['drawn']:,}"
            + (f"; pairs {pairs['pairs_used']:,} of {pairs['pairs']:,}" if pairs else ""))


def table(out: Path, variants: list[str], langs: list[str]) -> list[str]:
    """The ladder's Markdown tables: dev scores by language and variant, then how each variant's rows started."""
    results = {v: json.loads((out / v / "results.json").read_text(encoding="utf-8")) for v in variants
               if (out / v / "results.json").is_file()}
    baselines = {b["lang"]: b for r in results.values() for b in r["baselines"] if b["split"] == "test"}
    done = [v for v in variants if v in results]
    if not done:
        return [f"no variant of {', '.join(variants)} has finished in {out} yet (its results.json)"]
    head = ["| lang | majority class | bag of words | " + " | ".join(done) + " |", "|---" * (3 + len(done)) + "|"]
    lines = head + [f"| {lang} | {baselines[lang]['majority']:.1f} | {baselines[lang]['bag_of_words']:.1f} | "
                    + " | ".join(scores(results[v], lang) for v in done) + " |" for lang in langs if lang in baselines]
    lines += ["", "| lang | " + " | ".join(done) + " |", "|---" * (1 + len(done)) + "|"]
    return lines + [f"| {lang} | " + " | ".join(start(out / v, lang) for v in done) + " |" for lang in langs]


def curve(results: dict, lang: str) -> dict[int, tuple[float, float]]:
    """BL_BASE's dev accuracy and macro-F1 at each Step-2 checkpoint in one language, mean over seeds."""
    by_update: dict[int, list[dict]] = {}
    for r in results["zero_shot"]:
        if r["lang"] == lang and r["system"] == "bl_base":
            by_update.setdefault(r["step2_update"], []).append(r)
    return {update: tuple(sum(r[key] for r in rows) / len(rows) for key in ("accuracy", "macro_f1"))
            for update, rows in sorted(by_update.items())}


def reading(out: Path, lang: str) -> tuple[int | None, str, int]:
    """A language's corpus tokens, the share of its rows copied from English rows (its word anchors' share in
    brackets) and the tokens one Step-2 update reads, from a variant's run folder or from the files a results folder
    keeps of it (``step2-<lang>.start_meta.json``, ``data-<lang>.meta.json``, ``config.json``); None, "-" or 0
    where neither has it."""
    meta = start_meta(out, lang)
    data = record(out, lang, "data/{lang}/meta.json", "data-{lang}.meta.json")
    seq_len = record(out, lang, "step2/{lang}/bl_base/run.json", "config.json").get("seq_len", 0)
    init = meta.get("initialisation", {})
    rows = sum(init.get(key, 0) for key in ("copied", "mixed", "drawn"))
    copied = f"{init['copied'] / rows:.0%}" if rows else "-"
    if "word_anchored" in init:
        copied += f" ({init['word_anchored'] / rows:.0%})"
    return data.get("num_tokens"), copied, meta.get("global_batch", 0) * seq_len


def curves(out: Path, variants: list[str], langs: list[str]) -> list[str]:
    """Each finished variant's dev curve per language: accuracy (macro-F1) at every Step-2 checkpoint, mean over
    seeds, with the corpus, the share of rows copied from English rows (word anchors' in brackets), the passes over
    the corpus at the last checkpoint, and the last and best checkpoints against update 0."""
    lines: list[str] = []
    for variant in variants:
        path = out / variant / "results.json"
        if not path.is_file():
            lines += [f"{variant}: not finished in {out} yet (its results.json)", ""]
            continue
        results = json.loads(path.read_text(encoding="utf-8"))
        by_lang = {lang: curve(results, lang) for lang in langs}
        updates = sorted({u for c in by_lang.values() for u in c})
        lines += [f"{variant}: BL_BASE's dev accuracy (macro-F1), mean over seeds, by Step-2 update",
                  "| lang | corpus tokens | rows copied (anchored) | passes at last | " + " | ".join(map(str, updates))
                  + " | last - update 0 | best (update) - update 0 |", "|---" * (6 + len(updates)) + "|"]
        for lang, points in by_lang.items():
            if not points:
                continue
            tokens, copied, per_update = reading(out / variant, lang)
            passes = f"{per_update * max(points) / tokens:.1f}" if tokens and per_update else "-"
            first, last = points[min(points)], points[max(points)]
            best = max(points, key=lambda u: points[u])
            cells = [cell(points[u]) if u in points else "-" for u in updates]
            lines.append(f"| {lang} | {f'{tokens:,}' if tokens else '-'} | {copied} | {passes} | " + " | ".join(cells)
                         + f" | {last[0] - first[0]:+.1f} ({last[1] - first[1]:+.1f}) | "
                         + (f"{points[best][0] - first[0]:+.1f} ({points[best][1] - first[1]:+.1f}) at {best} |"
                            if best != min(points) else "none above it |"))
        lines.append("")
    return lines[:-1] if lines and not lines[-1] else lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="run", type=Path, default=Path("runs/reference-minilm-continued"),
                   help="the finished MiniLM run")
    p.add_argument("--config", type=Path, default=Path("configs/reference_minilm_continued.json"),
                   help="its config")
    p.add_argument("--out", type=Path, help="default runs/language-ladder, with --test runs/language-test")
    p.add_argument("--langs", nargs="+", default=["ja", "ko", "km", "pl", "fi", "fi-small"])
    p.add_argument("--variants", help=f"default {DEFAULT_VARIANTS}; with --test named, the recipe chosen on dev")
    p.add_argument("--steps", type=int, help="Step 2's updates (default: the finished run's)")
    p.add_argument("--seeds", help="the finetuning seeds whose classifiers score the rows, e.g. 1 (default: the "
                                   "run's; the run's Step 3 trains any it lacks)")
    p.add_argument("--lr", type=float, help="Step 2's peak learning rate (default: its DeepSpeed file's)")
    p.add_argument("--list", action="store_true", help="print each pipeline's jobs; start nothing")
    p.add_argument("--table", action="store_true", help="print the finished variants' dev tables; start nothing")
    p.add_argument("--curves", action="store_true",
                   help="print the finished variants' dev curves, every Step-2 checkpoint; start nothing")
    p.add_argument("--test", action="store_true",
                   help="score the test files (read once), BL_BASE and MiniPost, with the --variants chosen on dev")
    args = p.parse_args(argv)
    if args.test and not args.variants:
        p.error("--test scores the test files once: name the recipe chosen on dev with --variants")
    args.variants = args.variants or DEFAULT_VARIANTS
    args.out = args.out or Path("runs/language-test" if args.test else "runs/language-ladder")
    shared = SHARED + ("step1b",) * args.test
    if args.table:
        print("\n".join(table(args.out, args.variants.split(","), args.langs)))
        return 0
    if args.curves:
        print("\n".join(curves(args.out, args.variants.split(","), args.langs)))
        return 0
    base = json.loads(args.config.read_text(encoding="utf-8"))
    split = "test" if args.test else "dev"
    missing = [path for path in [args.run / rel for rel in shared]
               + [REPO / task_file(lang, split) for lang in args.langs]
               + [REPO / f"reference_data/corpus/{lang}.txt" for lang in args.langs] if not path.exists()]
    if missing:
        raise SystemExit(f"language_ladder.py: missing {', '.join(map(str, missing))} (the finished run: "
                         "scripts/experiments/minilm_continued_test.sh; the languages: scripts/make_language_data.py)")
    seeds = None if args.seeds is None else [int(seed) for seed in args.seeds.split(",")]
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            raise SystemExit(f"language_ladder.py: unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
        langs = [lang for lang in args.langs if WORD_LISTS.get(variant) != FREEDICT_LIST or lang in FREEDICT]
        out = args.out / variant
        cfg = config(base, variant, langs, out, args.steps, test=args.test, seeds=seeds)
        lists = [REPO / t["word_list"] for t in cfg["targets"] if "word_list" in t]
        if any(not path.is_file() for path in lists):
            needed = ", ".join(sorted(set(map(str, lists))))
            raise SystemExit(f"language_ladder.py: {variant} needs {needed}: python scripts/{WORD_LISTS[variant][1]} "
                             f"--langs {' '.join(sorted({x.split('-')[0] for x in langs}))}")
        out.mkdir(parents=True, exist_ok=True)
        if args.lr is not None:
            cfg = with_lr(cfg, args.lr, out)
        path = args.out / f"{variant}.json"
        path.write_text(json.dumps(cfg, indent=1) + "\n", encoding="utf-8")
        link_finished(args.run, out, shared)
        share_data(args.out, variant, langs)
        cmd = [sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), *(["--list"] * args.list)]
        print(f"$ {' '.join(cmd)}", flush=True)
        code = subprocess.run(cmd, cwd=REPO, check=False).returncode
        if code:
            return code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
