"""Hostfile checking: DeepSpeed's format, each error naming the line, and the batch arithmetic on its slots."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ds_minimodel.cluster.hostfile import main, read_hostfile
from ds_minimodel.errors import InputError

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hostfile"
    path.write_text(text)
    return path


def test_shipped_hostfiles_and_comments_and_blank_lines(tmp_path):
    assert read_hostfile(REPO / "hostfiles/local") == {"localhost": 2}
    v100 = read_hostfile(REPO / "hostfiles/v100_64gpu")
    assert len(v100) == 8 and sum(v100.values()) == 64
    path = write(tmp_path, "# cluster\n\nworker-1.example.org slots=4  # first\n10.0.0.2 slots=8\n"
                           "run_worker_1 slots=1\n")  # Docker Compose's container names have underscores
    assert read_hostfile(path) == {"worker-1.example.org": 4, "10.0.0.2": 8, "run_worker_1": 1}


@pytest.mark.parametrize("text, line, problem", [
    ("a slots=2\na slots=2\n", 2, "listed twice"),
    ("a\n", 1, "expected '<host> slots=<number of GPUs>'"),
    ("a slots=4 slots=2\n", 1, "expected '<host> slots="),
    ("a gpus=4\n", 1, "expected '<host> slots="),
    ("a slots=0\n", 1, "slots must be a positive integer, got '0'"),
    ("a slots=-1\n", 1, "slots must be a positive integer"),
    ("a slots=two\n", 1, "slots must be a positive integer, got 'two'"),
    ("ok slots=1\nnode;rm -rf ~ slots=2\n", 2, "not a valid host name"),
    ("$(reboot) slots=2\n", 1, "not a valid host name"),
    ("-oProxyCommand=x slots=2\n", 1, "not a valid host name"),
    ("node 1 slots=2\n", 1, "expected '<host> slots="),
    ("node/1 slots=2\n", 1, "not a valid host name"),
    ("\ufeffnode1 slots=2\n", 1, "starts with a byte-order mark"),
])
def test_errors_name_the_line_and_the_problem(tmp_path, text, line, problem):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        read_hostfile(path)
    assert f"{path}:{line}: " in str(err.value) and problem in str(err.value)


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(InputError, match="no hosts"):
        read_hostfile(write(tmp_path, "# nothing\n\n"))
    with pytest.raises(InputError, match="hostfile not found"):
        read_hostfile(tmp_path / "nope")


def test_batch_arithmetic_is_checked_against_the_total_slots(tmp_path, capsys):
    assert main([str(REPO / "hostfiles/v100_64gpu"), "--ds-config", str(REPO / "ds_configs/v100_fp16_zero1.json")]) == 0
    assert "global batch 2048 = micro 16 x accumulation 2 x 64 ranks" in capsys.readouterr().out
    config = json.loads((REPO / "ds_configs/v100_fp16_zero1.json").read_text())
    config.update(train_batch_size=2048, train_micro_batch_size_per_gpu=16, gradient_accumulation_steps=2)
    bad = tmp_path / "ds.json"
    bad.write_text(json.dumps(config))
    hosts = write(tmp_path, "n1 slots=8\nn2 slots=8\n")
    assert main([str(hosts), "--ds-config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and str(hosts) in err and "x world size 16 = 512" in err
