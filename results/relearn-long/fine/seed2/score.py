"""Step 4 for another Step-2 seed's German runs: every complete save in OUT/step2/de/<system>/ at a multiple of 25 up
to UNTIL, and each run's last save at a multiple of 25 (BL_BASE's at 1,800 gives the final score the target is 95%
of), scored with FINE's three English classifiers on German test and written alone into OUT/results.json, with FINE's
dev scores and baselines (the same classifiers and files). FINE's readings are Step-2 seed 1's and are left out: a
mean over classifiers must be of one Step-2 run.

Run from the worktree that trained both: python3 results/relearn-long/fine/seed2/score.py FINE OUT UNTIL"""
import sys
from pathlib import Path

from ds_minimodel.pipeline.records import Results, Score
from ds_minimodel.pipeline.results import scored, write_results
from ds_minimodel.train import checkpoint

fine, out, until = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
old = Results.load(fine / "results.json")
test = next(Path(r.test_file) for r in old.zero_shot if r.lang == "de")
task_models = {(r.system, r.seed): Path(r.task_model) for r in old.zero_shot}
new = []
for system in ("bl_base", "minipost"):
    saves = [(checkpoint.load_meta(c).step, c) for c in checkpoint.complete_checkpoints(out / "step2" / "de" / system)]
    saves = [(u, c) for u, c in saves if u % 25 == 0]
    for update, ckpt in saves:
        if update > until and update != saves[-1][0]:
            continue
        for seed in (1, 2, 3):
            cache = out / "step4" / "lohelp" / "de" / system / f"seed{seed}" / f"{ckpt.name}.json"
            record = scored(cache, task_models[(system, seed)], ckpt, test, "de", None)
            new.append(Score.from_dict({**record, "primary": None}, str(cache)))
            print(system, update, seed, round(new[-1].score, 2), flush=True)
write_results(out, new, old.source_dev, source_test=old.source_test,
              baselines=[b for b in old.baselines if b.lang in ("de", "en")])
print(f"{len(new)} readings; {out / 'results.json'}")
