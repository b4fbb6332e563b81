"""configs/reference.json, reference_focus.json, reference_wechsel.json and reference_gpu.json cannot rot: their
presets, DeepSpeed files, shapes, controls and task layout pass the pipeline's pre-flight check on slices of the
shipped (xz-compressed) reference data, and plan the jobs of the whole method.

Both run end to end elsewhere: ``test_gpu_run.py`` runs the GPU reference config through the pipeline at a few
updates on the same data (its settings other than the preset, the DeepSpeed files and the step counts are the CPU
config's), and the demo pipeline test runs all four systems. What is cut here for CI's time: the data (a prefix of
each file) and the vocabulary (the prefixes are too small for 8,000 pieces)."""
from __future__ import annotations

import json
import lzma
import sys
from pathlib import Path

import pytest

from ds_minimodel.config import get_preset
from ds_minimodel.stages.pretrain import model_config
from ds_minimodel.stages.specs import PretrainSpec
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


@pytest.mark.parametrize("name", ["reference.json", "reference_focus.json", "reference_wechsel.json",
                                  "reference_gpu.json"])
def test_reference_configs_pass_the_preflight_check_and_plan_every_job(tmp_path, name):
    config = json.loads((REPO / "configs" / name).read_text())
    config.update(out=str(tmp_path / "out"), vocab_size=1000)
    for corpus in [config["source"], *config["targets"]]:
        limit = CORPUS_BYTES["en" if corpus is config["source"] else "target"]
        corpus["corpus"] = slice_of(REPO / f"{corpus['corpus']}.xz", tmp_path / corpus["corpus"], max_bytes=limit)
    task = config["tasks"][0]
    task["train"] = slice_of(REPO / f"{task['train']}.xz", tmp_path / task["train"], lines=10**9)  # every label
    for split in ("dev", "test"):
        task[split] = {lang: slice_of(REPO / f"{path}.xz", tmp_path / path, lines=TASK_LINES)
                       for lang, path in task[split].items()}
    # Every system's Step-1 model is buildable from the config's shapes.
    for variant in ("base", "small", "minijoint"):
        spec = PretrainSpec(preset=config["preset"], variant=variant, small_layers=config["small_layers"],
                            aux_layer=config["aux_layer"], ds_config=Path("unused"), out=Path("unused"),
                            data=Path("unused"))
        cfg = model_config(spec, vocab_size=config["vocab_size"])
        assert cfg.pre_norm and config["seq_len"] <= cfg.max_positions
        if variant == "minijoint":
            assert cfg.aux_head_layer == config["aux_layer"] and cfg.num_layers == 3 * config["aux_layer"]
    assert config["keep_layers"] < get_preset(config["preset"]).num_layers
    path = tmp_path / name
    path.write_text(json.dumps(config))
    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--list"])
    jobs = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    assert jobs == ["prepare", "step1-base", "step1-minijoint", "step1-small", "step1b-minipost", "step2-bl_base",
                    "step2-bl_small", "step2-minijoint", "step2-minipost", "step3-base", "step3-minijoint",
                    "step3-small", "step4"]
    assert ("en-relearn" in proc.stdout) == bool(config.get("source_relearn"))  # none with WECHSEL
    assert all(lang in proc.stdout for lang in ("de", "fr", "es"))
