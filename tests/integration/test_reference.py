"""configs/reference.json cannot rot: its own preset, DeepSpeed files, shapes, controls and task layout run through the
whole pipeline, at a few updates, on slices of the shipped (xz-compressed) reference data.

What is cut for CI's time: the updates (one in Steps 1 and 1b, two in Step 2), the data (a prefix of each file), the
vocabulary (the prefixes are too small for 8,000 pieces), the target languages (the first), the seeds (one), the ranks
(one process, the same global batch by accumulation) and the systems (BL_BASE and MiniPost train; MiniJoint's and
BL_SMALL's models are built from the config but not trained: the demo pipeline test runs all four). Everything else
is the config as a user runs it."""
from __future__ import annotations

import argparse
import json
import lzma
import sys
from pathlib import Path

from ds_minimodel.config import get_preset
from ds_minimodel.stages.pretrain import model_config
from tests.integration.conftest import REPO, run_cmd

CORPUS_BYTES = {"en": 300_000, "target": 120_000}
TASK_LINES = 200


def slice_of(packed: Path, out: Path, *, max_bytes: int | None = None, lines: int | None = None) -> str:
    """The start of a shipped .xz file (whole lines), written to ``out``."""
    text = lzma.decompress(packed.read_bytes()).decode("utf-8")
    kept = text.splitlines(keepends=True)
    if lines is not None:
        kept = kept[:lines]
    else:
        size, taken = 0, []
        for line in kept:
            size += len(line.encode("utf-8"))
            if size > max_bytes:
                break
            taken.append(line)
        kept = taken
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(kept), encoding="utf-8")
    return str(out)


def test_reference_config_runs_end_to_end_at_a_few_updates(tmp_path):
    config = json.loads((REPO / "configs/reference.json").read_text())
    config.update(out=str(tmp_path / "out"), ranks=1, vocab_size=1000)
    config["targets"] = config["targets"][:1]
    target = config["targets"][0]["lang"]
    for corpus in [config["source"], *config["targets"]]:
        limit = CORPUS_BYTES["en" if corpus is config["source"] else "target"]
        corpus["corpus"] = slice_of(REPO / f"{corpus['corpus']}.xz", tmp_path / corpus["corpus"], max_bytes=limit)
    # One update where one is enough: each saves a full checkpoint of the reference body (weights and Adam state).
    # Step 2 saves at updates 0 and 2.
    for section, steps in (("step1", 1), ("step1b", 1), ("step2", 2)):
        config[section].update(steps=steps, save_every=steps, log_every=1)
    config["step3"].update(epochs=0.02, seeds=[1])
    task = config["tasks"][0]
    task["train"] = slice_of(REPO / f"{task['train']}.xz", tmp_path / task["train"], lines=2000)
    for split in ("dev", "test"):
        task[split] = {lang: slice_of(REPO / f"{path}.xz", tmp_path / path, lines=TASK_LINES)
                       for lang, path in task[split].items() if lang in ("en", target)}
    # Every system's Step-1 model is buildable from the config's shapes (the run below trains two of them).
    for variant in ("base", "small", "minijoint"):
        args = argparse.Namespace(preset=config["preset"], model_config=None, variant=variant,
                                  small_layers=config["small_layers"], aux_layer=config["aux_layer"])
        cfg = model_config(args, vocab_size=config["vocab_size"])
        assert cfg.pre_norm and config["seq_len"] <= cfg.max_positions
    assert config["keep_layers"] < get_preset(config["preset"]).num_layers
    config["systems"] = ["bl_base", "minipost"]
    path = tmp_path / "reference.json"
    path.write_text(json.dumps(config))

    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path)], timeout=600)
    results = json.loads((tmp_path / "out/results.json").read_text())
    systems = set(config["systems"])
    assert {r["system"] for r in results["zero_shot"]} == systems and {r["lang"] for r in results["zero_shot"]} == {
        target}
    # The controls: each primary with its own embeddings on English test, the relearn run on it, the baselines.
    assert {r["primary"] for r in results["source_test"]} == {"base"}
    assert {(r["system"], r["lang"]) for r in results["source_relearn"]} == {("bl_base", "en-relearn")}
    assert {(b["lang"], b["split"]) for b in results["baselines"]} == {
        (lang, split) for lang in ("en", target) for split in ("dev", "test")}
    relearn_meta = json.loads(next((tmp_path / "out/step2/en-relearn/bl_base/checkpoints").glob(
        "step_*/meta.json")).read_text())
    assert relearn_meta["init"] == "specials" and relearn_meta["overlap"]["overlap"] == 5
    primary_meta = json.loads(next((tmp_path / "out/step1/base/checkpoints").glob("step_*/meta.json")).read_text())
    assert primary_meta["model_config"]["pre_norm"] is True
    # A run this small transfers nothing, and the analysis says so instead of computing speedups.
    assert "Diagnostics (lohelp, accuracy" in proc.stdout and "majority class" in proc.stdout
