"""The floor plan holds: every import follows the layers ARCHITECTURE.md states, with no cycle (issue 29); the
cluster tools do string handling only (no torch); no source module grows past the size a reader can hold (issue 17)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

# The test extra installs grimp; where only the package's own requirements are (the GPU machine's `pytest -m gpu`
# collects every module), these checks skip with the reason.
grimp = pytest.importorskip("grimp", reason="the layering checks need grimp (pip install -e '.[test]')")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ds_minimodel"


def stated_layers() -> list[list[str]]:
    """ARCHITECTURE.md's layers, lowest first: the numbered lines of its "## Layers" section."""
    section = (ROOT / "ARCHITECTURE.md").read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    return [[name.strip() for name in line.split(",")]
            for line in re.findall(r"^\s+\d+\.\s+(.+)$", section, flags=re.M)]


def import_graph() -> grimp.ImportGraph:
    """Every import in the package, those inside functions included (grimp reads them all)."""
    return grimp.build_graph("ds_minimodel", exclude_type_checking_imports=True, cache_dir=None)


def layer_violations(graph: grimp.ImportGraph) -> list[str]:
    layers = [grimp.Layer(*layer, independent=False) for layer in reversed(stated_layers())]
    illegal = graph.find_illegal_dependencies_for_layers(layers=layers, containers={"ds_minimodel"})
    return sorted(f"{d.importer} -> {d.imported}: " + " | ".join(
        " -> ".join((r.heads and next(iter(r.heads)), *r.middle, r.tails and next(iter(r.tails)))) for r in d.routes)
        for d in illegal)


def cycles(graph: grimp.ImportGraph) -> list[str]:
    """Each import a -> b of the package where b also reaches a, with the way back."""
    found = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported.startswith("ds_minimodel") and imported != module:
                back = graph.find_shortest_chain(importer=imported, imported=module)
                if back:
                    found.append(" -> ".join((module, *back)))
    return found


def test_every_import_follows_the_layers_architecture_md_states():
    graph = import_graph()
    placed = [name for layer in stated_layers() for name in layer]
    folders = {m.split(".")[1] for m in graph.find_children("ds_minimodel")}
    assert sorted(placed) == sorted(folders), "ARCHITECTURE.md's layers must place every folder and root module once"
    assert layer_violations(graph) == []


def test_no_module_imports_one_that_imports_it_back():
    assert cycles(import_graph()) == []


def test_both_checks_find_an_import_that_breaks_them():
    """The checks can fail: one import from data up into model, added to the real graph, breaks the layers and
    closes a cycle (model.loading already reaches data.tokenizer through model.hf)."""
    graph = import_graph()
    graph.add_import(importer="ds_minimodel.data.tokenizer", imported="ds_minimodel.model.loading")
    assert [v.split(":")[0] for v in layer_violations(graph)] == ["ds_minimodel.data -> ds_minimodel.model"]
    assert any(c.startswith("ds_minimodel.data.tokenizer -> ds_minimodel.model.loading") for c in cycles(graph))


def test_cluster_modules_and_the_command_list_import_without_torch():
    code = ("import sys\n"
            "import ds_minimodel.cluster.hostfile, ds_minimodel.cluster.launch, ds_minimodel.cluster.slurm\n"
            "import ds_minimodel.systems, ds_minimodel.flops, ds_minimodel.__main__\n"
            "heavy = sorted(m for m in ('torch', 'deepspeed', 'numpy', 'sentencepiece') if m in sys.modules)\n"
            "print(','.join(heavy))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""


def test_the_analysis_command_runs_without_torch(tmp_path):
    """``ds-minimodel analysis`` reads results.json and writes tables (STYLE: analysis only reads files): about 2 s of
    CPU less per call than with torch, which the pipeline's settings once reached through the static vectors' module."""
    results = ROOT / "results" / "reference-focus" / "results.json"
    code = ("import sys\n"
            "from ds_minimodel.__main__ import main\n"
            f"assert main(['analysis', '--results', {str(results)!r}, '--out', {str(tmp_path)!r}, '--no-plots']) == 0\n"
            "print('loaded:', ','.join(sorted(m for m in ('torch', 'deepspeed') if m in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "loaded:" and (tmp_path / "table2.txt").is_file()


def test_no_source_module_is_over_500_lines():
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 500} == {}


REGISTRIES = {"systems.py", "model/embedding_init.py", "tasks/formats.py", "model/encoder.py"}
"""The modules that hold the registries (systems and primaries, initialisers, kinds of task, heads): the only places
that may compare a name with its own entries."""
NOT_A_NAME = {("data/help_pages.py", 'tag == "span"')}
"""Literals that spell a registered name and mean something else (here an HTML tag)."""


def test_no_module_chooses_behaviour_by_comparing_a_registered_name():
    """Issue 50: a system, primary, initialiser, kind of task or head is asked (its entry's fields), never compared by
    name outside its registry; adding one then touches its entry alone."""
    from ds_minimodel import systems
    from ds_minimodel.model.embedding_init import INITIALISERS
    from ds_minimodel.model.encoder import HEADS
    from ds_minimodel.tasks.formats import KINDS

    systems.load_plugins()
    names = sorted({*systems.SYSTEMS, *systems.PRIMARIES, *INITIALISERS, *KINDS, *HEADS, "minipost", "head"})
    alt = "|".join(map(re.escape, names))
    compared = re.compile(rf'''(==|!=)\s*["']({alt})["']|["']({alt})["']\s*(==|!=)|\bin\s*[(\[{{]\s*["']({alt})["']''')
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module in REGISTRIES:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if compared.search(line) and not any(module == m and text in line for m, text in NOT_A_NAME):
                found.append(f"{module}:{number}: {line.strip()}")
    assert found == []
    assert compared.search('if spec.init == "wechsel":') and compared.search('kind in ("sequence", "token")')
