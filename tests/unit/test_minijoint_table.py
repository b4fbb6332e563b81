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
