"""The pipeline's config checks and its results files: every record and the means over seeds."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ds_minimodel.errors import InputError
from ds_minimodel.pipeline import PipelineConfig, over_seeds, write_results


def record(system: str, update: int, seed: int, accuracy: float, lang: str = "de") -> dict:
    return {"task": "lohelp", "system": system, "lang": lang, "step2_update": update, "seed": seed,
            "accuracy": accuracy, "macro_f1": accuracy / 2, "step2_flops": 1e18 * update, "v100_days": update / 2.592}


RESULTS = [record(s, u, seed, acc) for s, base in (("minijoint", 40.0), ("bl_base", 50.0))
           for u in (10, 20) for seed, acc in ((1, base + u), (2, base + u + 2))]


def test_means_and_standard_deviations_over_seeds_per_checkpoint():
    rows = over_seeds(RESULTS)
    assert [(r["system"], r["step2_update"]) for r in rows] == [("bl_base", 10), ("bl_base", 20), ("minijoint", 10),
                                                               ("minijoint", 20)]  # the paper's system order
    first = rows[0]
    assert first["mean"] == 61.0 and first["std"] == pytest.approx(2 ** 0.5) and first["seeds"] == [1, 2]
    assert first["metric"] == "accuracy" and first["step2_flops"] == 1e19


def test_results_files_hold_every_record_and_the_means(tmp_path):
    summary = write_results(tmp_path, RESULTS, [])
    saved = json.loads((tmp_path / "results.json").read_text())
    assert len(saved["zero_shot"]) == 8 and len(saved["zero_shot_over_seeds"]) == 4 and summary["has_results"]
    assert (tmp_path / "results.csv").read_text().count("\n") == 9
    assert (tmp_path / "results_mean.csv").read_text().count("\n") == 5


def test_config_errors_name_the_file(tmp_path):
    path = tmp_path / "p.json"
    base = json.loads((Path(__file__).resolve().parents[2] / "configs/demo.json").read_text())
    path.write_text(json.dumps({**base, "systems": ["bl_huge"]}))
    with pytest.raises(InputError, match=rf"{path}: systems must be"):
        PipelineConfig.load(path)
    path.write_text(json.dumps({**base, "step1b": None}))
    with pytest.raises(InputError, match="minipost needs a step1b section"):
        PipelineConfig.load(path)
    path.write_text(json.dumps({**base, "step2": {**base["step2"], "stepz": 3}}))
    with pytest.raises(InputError, match=r"step2: unknown key\(s\) stepz"):
        PipelineConfig.load(path).parsed(str(path))
    path.write_text(json.dumps({**base, "ranks": "two"}))
    with pytest.raises(InputError, match="ranks must be int"):
        PipelineConfig.load(path)
