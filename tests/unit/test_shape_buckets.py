"""scripts/experiments/shape_buckets.py (BENCHMARKS.md, "Memory: the masked rows"): a run prints one line
per reported update, with the shapes met, the process's memory and the seconds per update, then a summary; tiny here,
its figures are the benchmark's."""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts/experiments/shape_buckets.py"
spec = importlib.util.spec_from_file_location("shape_buckets", SCRIPT)
shape_buckets = importlib.util.module_from_spec(spec)
spec.loader.exec_module(shape_buckets)

TINY = ["--updates", "4", "--every", "2", "--batch", "3", "--seq-len", "16", "--dtype", "float32"]


def report(out: str) -> tuple[list[str], str]:
    *lines, summary = out.splitlines()
    return lines, summary


@pytest.mark.parametrize("case", shape_buckets.CASES)
def test_a_run_reports_shapes_memory_and_time(capsys, case):
    assert shape_buckets.main(["--case", case, "--multiple", "8", *TINY]) == 0
    lines, summary = report(capsys.readouterr().out)
    assert [int(re.search(r"update +(\d+)", line).group(1)) for line in lines] == [1, 2, 4]
    for line in lines:
        assert re.fullmatch(rf"{case}  multiple  8  update +\d+  shapes so far +\d+  RSS +[\d,]+ MB  "
                            r"\d+\.\d{4} s/update", line), line
    assert re.fullmatch(rf"{case}  multiple  8  4 updates  \d+ shapes  mean \d+\.\d{{4}} s/update  "
                        r"second half \d+\.\d{4} s/update", summary), summary


def test_widths_are_the_cut_widths_rounded(tmp_path, capsys):
    """With --multiple 1 a batch is as wide as its longest input; with 8 every width is a multiple of 8, so there
    are fewer of them. Lengths from a tokenizer over a jsonl of texts."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    texts = tmp_path / "train.jsonl"
    texts.write_text("".join(json.dumps({"text": " ".join("a" * n)}) + "\n" for n in range(1, 40)))
    files = ["--tokenizer", str(tmp_path / "tokenizer.json"), "--texts", str(texts)]
    args = shape_buckets.build_parser().parse_args(["--case", "widths", "--multiple", "1", *files, "--updates", "30",
                                                    "--batch", "2", "--seq-len", "64"])
    as_cut = [ids.shape[1] for ids, _, _ in shape_buckets.batches(args, 50)]
    args.multiple = 8
    rounded = [ids.shape[1] for ids, _, _ in shape_buckets.batches(args, 50)]
    assert all(w % 8 == 0 for w in rounded) and len(set(rounded)) < len(set(as_cut))
    assert all(c <= r < c + 8 for r, c in zip(rounded, as_cut)) and max(as_cut) <= 40


def test_tokenizer_and_texts_go_together(capsys):
    with pytest.raises(SystemExit):
        shape_buckets.main(["--case", "widths", "--tokenizer", "t.json"])
    assert "--tokenizer and --texts go together" in capsys.readouterr().err
