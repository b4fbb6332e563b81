"""scripts/experiments/language_ladder.py: each variant's pipeline config scores dev, never test, with its own word
lists and Step-2 settings."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("language_ladder", REPO / "scripts/experiments/language_ladder.py")
language_ladder = importlib.util.module_from_spec(spec)
spec.loader.exec_module(language_ladder)
BASE = json.loads((REPO / "configs/reference_minilm_focus.json").read_text(encoding="utf-8"))


def test_each_variant_names_its_word_lists_and_the_dev_files_as_the_test_files(tmp_path: Path) -> None:
    langs = ["ja", "fi-small"]
    help_cfg = language_ladder.config(BASE, "wechsel-help", langs, tmp_path)
    assert [t["word_list"] for t in help_cfg["targets"]] == ["reference_data/lexicons/ja-en.help.tsv",
                                                             "reference_data/lexicons/fi-en.help.tsv"]
    freedict = language_ladder.config(BASE, "wechsel-freedict", langs, tmp_path)
    assert [t["word_list"] for t in freedict["targets"]] == ["reference_data/dictionaries/ja-en.tsv",
                                                             "reference_data/dictionaries/fi-en.tsv"]
    anchors = language_ladder.config(BASE, "focus-freedict-anchors", langs, tmp_path)
    assert [t["word_list"] for t in anchors["targets"]] == [t["word_list"] for t in freedict["targets"]]
    assert anchors["step2"]["word_anchors"] is True and anchors["step2"]["init"] == "focus"
    fixed = language_ladder.config(BASE, "focus-freedict-anchors-fixed", langs, tmp_path)
    assert fixed["targets"] == anchors["targets"] and fixed["step2"] == {**anchors["step2"], "freeze_copied": True}
    focus = language_ladder.config(BASE, "focus-translit", langs, tmp_path)
    assert all("word_list" not in t for t in focus["targets"])
    assert focus["step2"]["transliterate"] is True and focus["step2"]["init"] == "focus"
    for cfg in (help_cfg, freedict, focus):
        tests = cfg["tasks"][0]["test"]
        assert tests["ja"].endswith("dev.ja.jsonl") and tests["fi-small"].endswith("dev.fi.jsonl")
        assert not any("test." in path for path in tests.values())
        assert cfg["systems"] == ["bl_base"] and cfg["out"] == str(tmp_path)
    assert BASE["step2"]["init"] == "focus" and "transliterate" not in BASE["step2"]  # the run's config is untouched


def test_a_shorter_step2_keeps_six_saved_checkpoints(tmp_path: Path) -> None:
    cfg = language_ladder.config(BASE, "focus", ["pl"], tmp_path, steps=300)
    assert (cfg["step2"]["steps"], cfg["step2"]["save_every"]) == (300, 50)
    assert language_ladder.config(BASE, "focus", ["pl"], tmp_path)["step2"]["steps"] == BASE["step2"]["steps"]


def test_the_table_reads_each_finished_variants_last_checkpoint_and_how_its_rows_started(tmp_path: Path) -> None:
    def score(update: int, seed: int, accuracy: float) -> dict:
        return {"lang": "ja", "system": "bl_base", "step2_update": update, "seed": seed, "accuracy": accuracy,
                "macro_f1": accuracy / 2}

    results = {"zero_shot": [score(0, 1, 20.0), score(300, 1, 40.0), score(300, 2, 44.0), score(150, 2, 90.0)],
               "baselines": [{"lang": "ja", "split": "test", "majority": 30.0, "bag_of_words": 35.5},
                             {"lang": "ja", "split": "dev", "majority": 1.0, "bag_of_words": 1.0}]}
    (tmp_path / "wechsel-help").mkdir()
    (tmp_path / "wechsel-help" / "results.json").write_text(json.dumps(results))
    meta = tmp_path / "wechsel-help/step2/ja/bl_base/checkpoints/step_00000000/meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"initialisation": {"copied": 5, "mixed": 6397, "drawn": 1598,
                                                   "alignment": {"pairs": 1930, "pairs_used": 180}}}))
    lines = language_ladder.table(tmp_path, ["focus", "wechsel-help"], ["ja", "km"])
    # focus has no results.json yet: left out; km has no scores in any finished variant: no score row
    assert lines[0] == "| lang | majority class | bag of words | wechsel-help |"
    assert lines[2] == "| ja | 30.0 | 35.5 | 42.0 (21.0) |"
    assert lines[-2:] == ["| ja | 5 / 6,397 / 1,598; pairs 180 of 1,930 |", "| km | - |"]
    assert language_ladder.table(tmp_path, ["focus"], ["ja"]) == [
        f"no variant of focus has finished in {tmp_path} yet (its results.json)"]


def test_the_test_run_scores_the_test_files_with_minipost_and_needs_the_recipe_named(tmp_path: Path, capsys) -> None:
    cfg = language_ladder.config(BASE, "wechsel-help", ["km", "fi-small"], tmp_path, test=True)
    tests = cfg["tasks"][0]["test"]
    assert tests == {"en": "reference_data/tasks/lohelp/test.en.jsonl",
                     "km": "reference_data/tasks/lohelp/test.km.jsonl",
                     "fi-small": "reference_data/tasks/lohelp/test.fi.jsonl"}
    assert cfg["systems"] == ["bl_base", "minipost"] and cfg["source_minis"] == ["minipost"]
    assert cfg["tasks"][0]["dev"] == {"en": "reference_data/tasks/lohelp/dev.en.jsonl",  # Step 4's checkpoint choice
                                      "km": "reference_data/tasks/lohelp/dev.km.jsonl",
                                      "fi-small": "reference_data/tasks/lohelp/dev.fi.jsonl"}
    assert language_ladder.config(BASE, "focus", ["km"], tmp_path)["tasks"][0]["test"]["en"].endswith("dev.en.jsonl")
    with pytest.raises(SystemExit):
        language_ladder.main(["--test"])
    assert "name the recipe chosen on dev with --variants" in capsys.readouterr().err


def test_seeds_name_the_classifiers_that_score_the_rows(tmp_path: Path) -> None:
    assert language_ladder.config(BASE, "focus", ["pl"], tmp_path, seeds=[1])["step3"]["seeds"] == [1]
    assert language_ladder.config(BASE, "focus", ["pl"], tmp_path)["step3"]["seeds"] == BASE["step3"]["seeds"]


def test_a_language_is_prepared_once_and_linked_by_the_other_variants(tmp_path: Path) -> None:
    done = tmp_path / "focus" / "data" / "ja"
    done.mkdir(parents=True)
    (done / "meta.json").write_text("{}")
    (tmp_path / "focus" / "data" / "km").mkdir()  # started, not finished: not shared
    language_ladder.share_data(tmp_path, "wechsel-help", ["ja", "km"])
    assert (tmp_path / "wechsel-help" / "data" / "ja").resolve() == done.resolve()
    assert not (tmp_path / "wechsel-help" / "data" / "km").exists()
    language_ladder.share_data(tmp_path, "focus-ngrams", ["ja"])  # never from another variant's link
    assert (tmp_path / "focus-ngrams" / "data" / "ja").resolve() == done.resolve()
    language_ladder.share_data(tmp_path, "focus", ["ja"])  # the variant that prepared it keeps its own
    assert not (tmp_path / "focus" / "data" / "ja").is_symlink()


def test_auto_help_is_the_help_anchors_run_chosen_by_the_pipeline_itself(tmp_path: Path) -> None:
    from ds_minimodel.pipeline.settings import PipelineConfig
    from ds_minimodel.pipeline.step2_init import target_init

    chosen = {}
    for variant in ("auto-help", "focus-help-anchors"):
        cfg = language_ladder.config(BASE, variant, ["zh", "km"], tmp_path, test=True)
        (tmp_path / f"{variant}.json").write_text(json.dumps(cfg))
        loaded = PipelineConfig.load(tmp_path / f"{variant}.json")
        chosen[variant] = [target_init(loaded.step2, target)[:2] for target in loaded.targets]
        assert [t["word_list"] for t in cfg["targets"]] == ["reference_data/lexicons/zh-en.help.tsv",
                                                            "reference_data/lexicons/km-en.help.tsv"]
    assert chosen["auto-help"] == chosen["focus-help-anchors"] == [("focus", True)] * 2


def test_the_curves_read_every_checkpoint_against_update_0_from_a_run_or_its_results_folder(tmp_path: Path) -> None:
    def score(lang: str, update: int, seed: int, accuracy: float) -> dict:
        return {"lang": lang, "system": "bl_base", "step2_update": update, "seed": seed, "accuracy": accuracy,
                "macro_f1": accuracy - 10}

    zero_shot = [score("hi", 0, 1, 50.0), score("hi", 0, 2, 52.0), score("hi", 25, 1, 56.0), score("hi", 25, 2, 54.0),
                 score("hi", 50, 1, 40.0), score("hi", 50, 2, 42.0), score("ja", 0, 1, 30.0), score("ja", 50, 1, 20.0),
                 {**score("hi", 50, 1, 99.0), "system": "minipost"}]
    run = tmp_path / "focus-help-anchors"  # the run's own layout for hi, a results folder's files for ja
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"zero_shot": zero_shot}))
    meta = run / "step2/hi/bl_base/checkpoints/step_00000000/meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"global_batch": 64, "initialisation": {"copied": 700, "mixed": 200, "drawn": 100,
                                                                      "word_anchored": 500}}))
    (run / "step2/hi/bl_base/run.json").write_text(json.dumps({"seq_len": 128}))
    (run / "data/hi").mkdir(parents=True)
    (run / "data/hi/meta.json").write_text(json.dumps({"num_tokens": 8192}))
    (run / "step2-ja.start_meta.json").write_text(json.dumps({"global_batch": 32, "initialisation": {}}))
    (run / "config.json").write_text(json.dumps({"seq_len": 128}))
    lines = language_ladder.curves(tmp_path, ["focus", "focus-help-anchors"], ["hi", "ja", "km"])
    assert lines[:2] == [f"focus: not finished in {tmp_path} yet (its results.json)", ""]
    assert lines[3].endswith("| 0 | 25 | 50 | last - update 0 | best (update) - update 0 |")
    # hi: 64 x 128 tokens an update over 8,192 = one pass, 50 at update 50; MiniPost's row is not BL_BASE's
    assert lines[5] == ("| hi | 8,192 | 70% (50%) | 50.0 | 51.0 (41.0) | 55.0 (45.0) | 41.0 (31.0) | -10.0 (-10.0) | "
                        "+4.0 (+4.0) at 25 |")
    # ja: no data meta kept, no anchor count recorded; its update 0 is its best; km has no score and no row
    assert lines[6] == "| ja | - | - | - | 30.0 (20.0) | - | 20.0 (10.0) | -10.0 (-10.0) | none above it |"
    assert len(lines) == 7


def test_a_step2_learning_rate_is_a_copy_of_its_deepspeed_file_with_both_peaks_set(tmp_path: Path) -> None:
    cfg = language_ladder.config(BASE, "focus-help-anchors", ["pl"], tmp_path)
    source = json.loads((REPO / cfg["step2"]["ds_config"]).read_text(encoding="utf-8"))
    changed = language_ladder.with_lr(cfg, 1e-4, tmp_path)
    ds = json.loads(Path(changed["step2"]["ds_config"]).read_text(encoding="utf-8"))
    assert Path(changed["step2"]["ds_config"]) == (tmp_path / "step2_lr0.0001.ds.json").resolve()
    assert ds["optimizer"]["params"]["lr"] == ds["scheduler"]["params"]["warmup_max_lr"] == 1e-4
    source["optimizer"]["params"]["lr"] = source["scheduler"]["params"]["warmup_max_lr"] = 1e-4
    assert ds == source
    assert BASE["step2"]["ds_config"] != changed["step2"]["ds_config"]  # the run's config is untouched
