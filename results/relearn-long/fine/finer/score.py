"""Step 4 for the finer checkpoints: every complete Step-2 checkpoint in FINER/step2/<lang>/<system>/ at a multiple of
25 updates but not of 100 (FINE's saves; a stop's own save, as 301, is left out too), scored with the fine run's three
English classifiers on that language's test file, and written with all of FINE's readings into FINER/results.json
(then `python -m ds_minimodel analysis --results ...`).

Run from the worktree that trained both: python3 results/relearn-long/fine/finer/score.py FINE FINER
(FINE: the fine-checkpoint run folder; FINER: run.sh's, its Step-2 runs resumed from FINE's saves)."""
import sys
from pathlib import Path

from ds_minimodel.pipeline.records import Results, Score
from ds_minimodel.pipeline.results import scored, write_results
from ds_minimodel.train import checkpoint

fine, finer = map(Path, sys.argv[1:3])
old = Results.load(fine / "results.json")
tests = {r.lang: Path(r.test_file) for r in old.zero_shot}
task_models = {(r.system, r.seed): Path(r.task_model) for r in old.zero_shot}
new = []
for run_dir in sorted(finer.glob("step2/*/*/")):
    lang, system = run_dir.parent.name, run_dir.name
    for ckpt in checkpoint.complete_checkpoints(run_dir):
        update = checkpoint.load_meta(ckpt).step
        if update % 25 or not update % 100:  # off the grid, or FINE's own (the same weights: checked in the README)
            continue
        for seed in (1, 2, 3):
            cache = finer / "step4" / "lohelp" / lang / system / f"seed{seed}" / f"{ckpt.name}.json"
            record = scored(cache, task_models[(system, seed)], ckpt, tests[lang], lang, None)
            new.append(Score.from_dict({**record, "primary": None}, str(cache)))
            print(lang, system, update, seed, round(new[-1].score, 2), flush=True)
write_results(finer, [*old.zero_shot, *new], old.source_dev, source_test=old.source_test, baselines=old.baselines,
              source_relearn=old.source_relearn, pretrain_runs=old.pretrain_runs, source_model=old.source_model)
print(f"{len(new)} new readings; {finer / 'results.json'}")
