"""The floor plan holds: the cluster tools do string handling only (no torch), and no source module grows past the
size a reader can hold (issue 17)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ds_minimodel"


def test_cluster_modules_and_the_command_list_import_without_torch():
    code = ("import sys\n"
            "import ds_minimodel.cluster.hostfile, ds_minimodel.cluster.launch, ds_minimodel.cluster.slurm\n"
            "import ds_minimodel.systems, ds_minimodel.flops, ds_minimodel.__main__\n"
            "heavy = sorted(m for m in ('torch', 'deepspeed', 'numpy', 'sentencepiece') if m in sys.modules)\n"
            "print(','.join(heavy))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""


def test_no_source_module_is_over_500_lines():
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 500} == {}
