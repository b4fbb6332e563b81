"""Step 4 for bigram shift over the CPU reference bodies: each system's English classifiers (``depth_cut.sh``'s
whole-model runs) read a language's test file through every save of that system's Step 2, through the pipeline's
cached ``scored``, then written as a pipeline's results.json for ``python -m ds_minimodel analysis``. Run from the
worktree that holds the runs (README.md here has the commands).

    python3 results/word-order/cpu-bodies/score.py OUT TASK_DIR \
        --system bl_base de STEP2_RUN 'runs/bshift/cpu-base/ft-cut6-seed*' [--system ...] [--every 200]

Each classifier's English dev scores (run_finetune.py's dev_scores.json) and English test reading
(``ft-cut<K>-seed<S>.test.json``) go in as the source-language records, the trivial baselines of every file of
TASK_DIR as the pipeline computes them. ``--every N``: only the saves at multiples of N updates (and each run's last)
are read: a reading takes seconds, a run has 19 saves. ``--until U``: none after update U but the last (the
further Step-2 seeds' runs, saved every 25: the crossings of 95% of BL_BASE's final lie before update 600);
``--whole SYSTEM LANG``: that system's run in that language read every N to its end all the same (one that crosses
later)."""
import argparse
import json
from pathlib import Path

from ds_minimodel.pipeline.records import DevScore, Score
from ds_minimodel.pipeline.results import scored, task_baselines, write_results
from ds_minimodel.pipeline.settings import TaskSettings
from ds_minimodel.systems import get_system
from ds_minimodel.train import checkpoint

p = argparse.ArgumentParser()
p.add_argument("out", type=Path)
p.add_argument("task_dir", type=Path)
p.add_argument("--every", type=int, default=1)
p.add_argument("--until", type=int, default=None)
p.add_argument("--whole", nargs=2, action="append", default=[], metavar=("SYSTEM", "LANG"))
p.add_argument("--system", nargs=4, action="append", required=True, metavar=("SYSTEM", "LANG", "STEP2_RUN", "GLOB"))
args = p.parse_args()
langs = sorted({lang for _, lang, _, _ in args.system})
files = {split: {lang: str(args.task_dir / f"{split}.{lang}.jsonl") for lang in ["en", *langs]}
         for split in ("dev", "test")}
task = TaskSettings(name="bshift", format="generic", train=str(args.task_dir / "train.en.jsonl"), **files)
new, dev, source_test, seen = [], [], [], set()
for system, lang, run, pattern in args.system:
    primary = get_system(system).primary
    classifiers = sorted(Path().glob(pattern))
    classifiers = [c for c in classifiers if c.is_dir()]
    if not classifiers:
        raise SystemExit(f"{pattern}: no classifier folder")
    for clf in classifiers:
        model = checkpoint.latest_checkpoint(clf)
        seed = checkpoint.load_meta(model).details["seed"]
        if (primary, seed) not in seen:
            seen.add((primary, seed))
            dev.append(DevScore(task="bshift", primary=primary, seed=seed, language="en", file=files["dev"]["en"],
                                metrics=json.loads((clf / "dev_scores.json").read_text())))
            test = json.loads(Path(f"{clf}.test.json").read_text())
            source_test.append(Score.from_dict({**test, "primary": primary}, f"{clf}.test.json"))
        saves = checkpoint.complete_checkpoints(Path(run))
        steps = {s: checkpoint.load_meta(s).step for s in saves}
        until = None if [system, lang] in args.whole else args.until
        for save in [s for s in saves if s == saves[-1] or (steps[s] % args.every == 0
                                                            and (until is None or steps[s] <= until))]:
            cache = args.out / "step4" / lang / system / f"seed{seed}" / f"{save.name}.json"
            record = scored(cache, model, save, Path(files["test"][lang]), lang, None)
            new.append(Score.from_dict({**record, "primary": None}, str(cache)))
            print(lang, system, new[-1].step2_update, seed, round(new[-1].score, 2), flush=True)
write_results(args.out, new, dev, source_test=source_test, baselines=task_baselines(task, "en"))
print(f"{len(new)} readings; {args.out / 'results.json'}")
