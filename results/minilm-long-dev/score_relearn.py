"""Score the source-relearn control's Step-2 checkpoints (and the classifier's own embeddings) on English dev with
the seed-1 classifier, through the pipeline's own Step-4 function and cache paths, so that a later whole-pipeline run
reuses them. Run while the control trains: scores what is complete and not yet scored."""
import sys
from pathlib import Path

from ds_minimodel.pipeline.results import scored
from ds_minimodel.train import checkpoint

out = Path("runs/minilm-long-dev")
task_run = out / "step3/lohelp/base/seed1"
task_model = checkpoint.latest_checkpoint(task_run)
if task_model is None:
    sys.exit("no classifier yet")
test = Path("reference_data/tasks/lohelp/dev.en.jsonl")
rec = scored(out / "step4/lohelp/en/own-base/seed1.json", task_model, None, test, "en", "generic")
print(f"own embeddings: accuracy {rec['accuracy']:.2f} macro-F1 {rec['macro_f1']:.2f}", flush=True)
for ckpt in checkpoint.complete_checkpoints(out / "step2/en-relearn/bl_base"):
    cache = out / f"step4/lohelp/en-relearn/bl_base/seed1/{ckpt.name}.json"
    rec = scored(cache, task_model, ckpt, test, "en", "generic")
    print(f"{ckpt.name}: accuracy {rec['accuracy']:.2f} macro-F1 {rec['macro_f1']:.2f}", flush=True)
