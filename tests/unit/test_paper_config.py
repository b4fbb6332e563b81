"""configs/paper.json: the paper's own experiment (Sec. 3-4) as one pipeline config, checked here without its data
(CC-100, MultiNLI/XNLI, SQuAD/MLQA, PAWS-X are the user's to download): its numbers are the paper's, and with its
files replaced by small stand-ins it passes the pipeline's whole pre-flight and writes its Slurm batch scripts."""
from __future__ import annotations

import json
import os
from pathlib import Path

from ds_minimodel.config import get_preset
from ds_minimodel.ds_config import load_ds_config
from ds_minimodel.pipeline.settings import PipelineConfig
from ds_minimodel.pipeline.submit import main as submit

REPO = Path(__file__).resolve().parents[2]
PAPER = REPO / "configs/paper.json"
FIXTURES = REPO / "tests/fixtures/tasks"
XNLI = ["ar", "bg", "de", "el", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh"]


def test_the_numbers_are_the_papers():
    cfg = PipelineConfig.load(PAPER)
    body = get_preset(cfg.preset)
    assert (body.num_layers, body.hidden_size, cfg.seq_len, cfg.vocab_size) == (12, 768, 512, 50_000)  # Sec. 3
    assert (cfg.aux_layer, cfg.small_layers, cfg.keep_layers, cfg.new_layers) == (4, 4, 4, 2)
    assert [t.lang for t in cfg.targets] == XNLI and cfg.step2.get("init") == "overlap"  # Table 1; footnote 1
    for stage in (cfg.step1, cfg.step1b, cfg.step2):  # 125k updates of 2,048 x 512, 7e-4, 10k warm-up, linear decay
        ds = load_ds_config(REPO / stage.ds_config)
        assert stage.steps == 125_000 and ds["train_batch_size"] == 2048
        assert ds["optimizer"]["params"]["lr"] == ds["scheduler"]["params"]["warmup_max_lr"] == 7e-4
        assert ds["scheduler"]["params"]["warmup_num_steps"] == 10_000
        assert ds["scheduler"]["params"]["total_num_steps"] == 125_000
    assert cfg.step3.get("seeds") == [1, 2, 3, 4, 5] and cfg.step3.get("epochs") == 3  # Sec. 3, Evaluation
    rates = {t.name: load_ds_config(REPO / (t.finetune.get("ds_config") or cfg.step3.ds_config))["optimizer"]
             ["params"]["lr"] for t in cfg.tasks}
    assert rates == {"xnli": 1e-5, "mlqa": 3e-5, "pawsx": 1e-5}
    assert {t.name: sorted(t.test) for t in cfg.tasks} == {
        "xnli": sorted(XNLI), "mlqa": ["ar", "de", "es", "hi", "vi", "zh"], "pawsx": ["de", "es", "fr", "zh"]}


def test_with_stand_in_files_it_passes_the_pre_flight_and_writes_its_batch_scripts(tmp_path, capsys):
    config = json.loads(PAPER.read_text())
    config["out"] = str(tmp_path / "paper")
    config["source"]["corpus"] = str(REPO / "demo_data/corpus/en.txt")
    config["targets"] = [{"lang": "de", "corpus": str(REPO / "demo_data/corpus/de.txt")}]
    stand_ins = {"xnli": ("multinli.jsonl", "xnli.dev.tsv", "xnli.dev.tsv"),
                 "mlqa": ("squad.train.json", "test-context-de-question-de.json", "test-context-de-question-de.json"),
                 "pawsx": ("pawsx_translated_train.tsv", "pawsx_dev_2k.tsv", "pawsx_dev_2k.tsv")}
    for task in config["tasks"]:
        train, dev, test = (str(FIXTURES / name) for name in stand_ins[task["name"]])
        task.update(train=train, dev={"de": dev}, test={"de": test})
    path = tmp_path / "paper.json"
    path.write_text(json.dumps(config))
    cwd = os.getcwd()
    os.chdir(REPO)  # the DeepSpeed JSONs are named relative to the checkout, as every shipped config names them
    try:
        assert submit(["--config", str(path), "--dry-run"]) == 0, capsys.readouterr().err
    finally:
        os.chdir(cwd)
    slurm = tmp_path / "paper/slurm"
    assert {"prepare.sbatch", "step1-base.sbatch", "step1b-minipost.sbatch", "step2-minipost.sbatch",
            "step3-base.sbatch", "step4.sbatch"} <= {p.name for p in slurm.glob("*.sbatch")}
    step1, step3 = ((slurm / f"{job}.sbatch").read_text() for job in ("step1-base", "step3-base"))
    for line in ("--nodes=4", "--ntasks-per-node=8", "--gpus-per-node=8", "--time=2-00:00:00", "--signal=USR1@600"):
        assert f"#SBATCH {line}\n" in step1
    assert "#SBATCH --nodes=1\n" in step3 and "--only step3-base --launcher srun" in step3
