"""Step 4 for Step-2 saves made after the fine run (FINE), read by its three English classifiers through the
pipeline's cached ``scored``; then ``python -m ds_minimodel analysis --results OUT/results.json``. Run from the
worktree that trained them. A stop's own save (as 301) is off the grid of 25 and never scored.

    python3 results/relearn-long/fine/score.py FINE OUT
        OUT holds Step-2 runs resumed from FINE's saves (finer/run.sh): every save at a multiple of 25 updates but not
        of 100 (FINE's own, the same weights) is scored and written with all of FINE's readings into OUT/results.json.
    python3 results/relearn-long/fine/score.py FINE OUT --alone UNTIL
        OUT holds another Step-2 seed's runs (seed2/run.sh): every save at a multiple of 25 up to UNTIL and each run's
        last such save (BL_BASE's final score sets the target) are scored and written alone into OUT/results.json, a
        mean over classifiers being of one Step-2 run, with FINE's dev scores and its baselines of those languages."""
import sys
from pathlib import Path

from ds_minimodel.pipeline.records import Results, Score
from ds_minimodel.pipeline.results import scored, write_results
from ds_minimodel.train import checkpoint

fine, out = Path(sys.argv[1]), Path(sys.argv[2])
alone = sys.argv[3:4] == ["--alone"]
until = int(sys.argv[4]) if alone else None
old = Results.load(fine / "results.json")
tests = {r.lang: (r.task, Path(r.test_file)) for r in old.zero_shot}
task_models = {(r.system, r.seed): Path(r.task_model) for r in old.zero_shot}
seeds = sorted({r.seed for r in old.zero_shot})
new = []
for run_dir in sorted(out.glob("step2/*/*/")):
    lang, system = run_dir.parent.name, run_dir.name
    task, test = tests[lang]
    saves = [(checkpoint.load_meta(c).step, c) for c in checkpoint.complete_checkpoints(run_dir)]
    saves = [(u, c) for u, c in saves if u % 25 == 0]
    for update, ckpt in saves:
        if (update > until and update != saves[-1][0]) if alone else update % 100 == 0:
            continue
        for seed in seeds:
            cache = out / "step4" / task / lang / system / f"seed{seed}" / f"{ckpt.name}.json"
            record = scored(cache, task_models[(system, seed)], ckpt, test, lang, None)
            new.append(Score.from_dict({**record, "primary": None}, str(cache)))
            print(lang, system, update, seed, round(new[-1].score, 2), flush=True)
if alone:
    langs = {r.lang for r in new} | {d.language for d in old.source_dev}
    write_results(out, new, old.source_dev, source_test=old.source_test,
                  baselines=[b for b in old.baselines if b.lang in langs])
else:
    write_results(out, [*old.zero_shot, *new], old.source_dev, source_test=old.source_test, baselines=old.baselines,
                  source_relearn=old.source_relearn, pretrain_runs=old.pretrain_runs, source_model=old.source_model)
print(f"{len(new)} new readings; {out / 'results.json'}")
