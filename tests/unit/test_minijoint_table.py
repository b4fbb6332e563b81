"""scripts/experiments/minijoint_table.py: the control's and the levers' German scores against the control BL_BASE's
target, read from the pipeline's results.json, and the probe's layers."""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("minijoint_table", REPO / "scripts/experiments/minijoint_table.py")
minijoint_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(minijoint_table)


def test_each_part_is_read_against_the_control_bl_bases_target_and_the_probe_by_layer(tmp_path):
    # The committed WECHSEL reference run (test files) stands in for the control: its Table 3 says MiniPost 1.78x in
    # German at 7.52e-06 V100-days and MiniJoint never (RESULTS.md); the table must say the same from results.json.
    (tmp_path / "control").mkdir()
    shutil.copy(REPO / "results/reference-wechsel/results.json", tmp_path / "control/results.json")
    probe = [{"step2_update": u, "top1": [0.5, t]} for u, t in ((600, 0.25), (0, 0.125))]
    (tmp_path / "control/align-minijoint.jsonl").write_text("".join(json.dumps(r) + "\n" for r in probe))
    # The part full-depth's system is the experiment's own (a plugin the table script loads): MiniJoint's rows as
    # another system name, read as any other.
    results = json.loads((REPO / "results/reference-wechsel/results.json").read_text())
    for key in ("zero_shot", "zero_shot_over_seeds"):
        results[key] = [{**row, "system": "minijoint_full"} for row in results[key] if row["system"] == "minijoint"]
    (tmp_path / "full-depth").mkdir()
    (tmp_path / "full-depth/results.json").write_text(json.dumps(results))
    lines = minijoint_table.rows(tmp_path)
    assert any(line.startswith("| full-depth | minijoint_full | ") and line.endswith("| - | never |") for line in lines)
    assert lines[0].endswith("(55.2) = 52.5")
    by_system = {line.split(" | ")[1]: line for line in lines if line.startswith("| control |")}
    assert by_system["minipost"].endswith("| 7.52e-06 | 1.78x |")
    assert by_system["minijoint"].endswith("| - | never |")
    assert by_system["bl_base"].split(" | ")[2:4] == ["72.1", "42.2 (26.0)"]  # English dev; update 0 with macro-F1
    assert "| long-step2 | not scored yet |" in "\n".join(lines)
    assert any(line.endswith("control/align-bl_base.jsonl: not there yet") for line in lines)
    assert any(line.endswith("aux-layer/align-minijoint.jsonl: not there yet") for line in lines)
    probes = [line for line in lines if line.startswith("probe ")]
    assert probes == ["probe control minijoint update 0: top-1 % by layer 0..1: 50.0 12.5",
                      "probe control minijoint update 600: top-1 % by layer 0..1: 50.0 25.0"]


aux3_spec = importlib.util.spec_from_file_location("minijoint_aux3_table",
                                                   REPO / "scripts/experiments/minijoint_aux3_table.py")
minijoint_aux3_table = importlib.util.module_from_spec(aux3_spec)
aux3_spec.loader.exec_module(minijoint_aux3_table)


def test_the_new_minijoint_replaces_the_reference_runs_and_is_read_against_its_bl_base(tmp_path):
    # A stand-in for the new run: the reference run's MiniJoint scores, each 8 points higher, and its English
    # classifiers; the merged file must hold the reference run's other systems and the new MiniJoint only.
    reference = REPO / "results/reference-wechsel/results.json"
    new = json.loads(reference.read_text())
    for row in new["zero_shot_over_seeds"]:
        row["mean"] += 8
    new["zero_shot_over_seeds"] = [row for row in new["zero_shot_over_seeds"] if row["system"] == "minijoint"]
    new["zero_shot"] = [row for row in new["zero_shot"] if row["system"] == "minijoint"]
    (tmp_path / "new.json").write_text(json.dumps(new))
    code = minijoint_aux3_table.main([str(tmp_path / "new.json"), "--reference", str(reference),
                                      "--out", str(tmp_path / "out")])
    assert code == 0
    merged = json.loads((tmp_path / "out/results.json").read_text())
    original = json.loads(reference.read_text())
    mine = [r for r in merged["zero_shot_over_seeds"] if r["system"] == "minijoint"]
    assert mine == new["zero_shot_over_seeds"]
    others = [r for r in merged["zero_shot_over_seeds"] if r["system"] != "minijoint"]
    assert others == [r for r in original["zero_shot_over_seeds"] if r["system"] != "minijoint"]
    assert merged["baselines"] == original["baselines"]
    assert len(merged["source_test"]) == len(original["source_test"])  # MiniJoint's classifiers once, not twice
    # German: BL_BASE ends on 55.2, target 52.5; MiniJoint's 47.3 + 8 = 55.3 at update 600 now reaches it.
    table3 = (tmp_path / "out/analysis/table3.txt").read_text()
    minijoint_row = next(line for line in table3.splitlines() if line.startswith("minijoint"))
    assert "never" not in minijoint_row.split()[1:3]


def test_the_side_by_side_table_says_where_the_new_run_is_not_scored_yet(tmp_path):
    reference = REPO / "results/reference-wechsel/results.json"
    empty = {**json.loads(reference.read_text()), "zero_shot": [], "zero_shot_over_seeds": []}
    (tmp_path / "new.json").write_text(json.dumps(empty))
    lines = minijoint_aux3_table.table(minijoint_aux3_table.Results.load(reference),
                                       minijoint_aux3_table.Results.load(tmp_path / "new.json"), ("a", "b"))
    de = next(line for line in lines if line.startswith("| de |"))
    assert de.startswith("| de | 55.2 +- 2.1 (41.5) | 52.5 | 38.0 +- 2.1 (22.4) | 47.3 +- 3.2 (33.9) | never |")
    assert de.endswith("| not scored yet | not scored yet | not scored yet | - |")
