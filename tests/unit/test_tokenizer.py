"""SentencePiece training and loading: reserved special ids, input errors, the recorded training choices."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from ds_minimodel.data.corpus_text import check_mostly_utf8, choose_character_coverage
from ds_minimodel.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    MASK_ID,
    NUM_SPECIAL,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    read_training_record,
    train_sentencepiece,
)
from ds_minimodel.errors import InputError

VOCAB_SIZE = 400


def write_text(path: Path, *, lines: int, seed: int = 0, alphabet: str = "aeioubdfgklmnprstvzéü") -> Path:
    """Pseudo-words from a fixed alphabet, one paragraph per line, a blank line every fifth line."""
    rng = random.Random(seed)
    words = ["".join(rng.choices(alphabet, k=rng.randint(2, 8))) for _ in range(800)]
    with path.open("w", encoding="utf-8") as f:
        for i in range(lines):
            f.write(" ".join(rng.choices(words, k=rng.randint(4, 20))) + ".\n")
            if i % 5 == 4:
                f.write("\n")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_text(tmp_path_factory.mktemp("corpus") / "text.txt", lines=2000)


@pytest.fixture(scope="module")
def model(corpus: Path) -> Path:
    return train_sentencepiece(corpus, corpus.parent / "spm", vocab_size=VOCAB_SIZE, num_threads=1)


def test_special_ids_are_reserved(model: Path) -> None:
    tokenizer = Tokenizer.load(model)
    assert (BOS_ID, PAD_ID, EOS_ID, UNK_ID, MASK_ID, NUM_SPECIAL) == (0, 1, 2, 3, 4, 5)
    assert tokenizer.pieces()[:NUM_SPECIAL] == ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    assert tokenizer.special_ids == frozenset(range(NUM_SPECIAL))
    assert [tokenizer.id(p) for p in ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]] == list(range(NUM_SPECIAL))
    assert tokenizer.vocab_size == VOCAB_SIZE
    # Ordinary text never produces the control pieces; `<mask>` is a user symbol, matched in text like RoBERTa's.
    ids = tokenizer.encode("bada <mask> zuke")
    assert MASK_ID in ids and not {BOS_ID, PAD_ID, EOS_ID} & set(ids)


def test_encode_decode_and_lookups(model: Path) -> None:
    tokenizer = Tokenizer.load(model)
    texts = ["gamu dilo pere.", "zébu künst abba", ""]
    assert tokenizer.encode_batch(texts) == [tokenizer.encode(t) for t in texts]
    assert tokenizer.decode(tokenizer.encode(texts[0])) == texts[0]
    flat, lengths = tokenizer.encode_flat(texts)
    assert lengths.tolist() == [len(tokenizer.encode(t)) + 1 for t in texts]
    assert flat.tolist() == sum((tokenizer.encode(t) + [EOS_ID] for t in texts), [])
    assert tokenizer.id("certainly-not-a-piece") is None
    piece = tokenizer.piece(NUM_SPECIAL + 10)
    assert tokenizer.id(piece) == NUM_SPECIAL + 10
    with pytest.raises(IndexError):
        tokenizer.piece(VOCAB_SIZE)


def test_identity_is_the_file_hash(model: Path) -> None:
    import hashlib

    assert Tokenizer.load(model).sha256 == hashlib.sha256(model.read_bytes()).hexdigest()


def test_training_is_recorded_and_quiet(corpus: Path, tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    model = train_sentencepiece(corpus, tmp_path / "m", vocab_size=100, num_threads=1)
    captured = capfd.readouterr()
    assert "trainer_interface" not in captured.err + captured.out  # spm's log went to its file
    assert "trainer_interface" in (tmp_path / "m.log").read_text()
    record = read_training_record(model)
    assert record is not None
    assert record["character_coverage_used"] == 1.0
    assert record["arguments"]["vocab_size"] == 100
    assert record["arguments"]["character_coverage"] is None
    assert json.loads((tmp_path / "m.json").read_text()) == record


def test_same_seed_gives_the_same_model(corpus: Path, tmp_path: Path) -> None:
    first = train_sentencepiece(corpus, tmp_path / "a", vocab_size=100, num_threads=1, input_sentence_size=500)
    second = train_sentencepiece(corpus, tmp_path / "b", vocab_size=100, num_threads=1, input_sentence_size=500)
    # Compare the vocabularies: the files differ anyway, as they embed the training options (the prefix).
    assert Tokenizer.load(first).pieces() == Tokenizer.load(second).pieces()


def test_character_coverage_follows_the_script(tmp_path: Path) -> None:
    latin = write_text(tmp_path / "latin.txt", lines=50)
    han = write_text(tmp_path / "han.txt", lines=50, alphabet="的一是不了人我在有他这中大来上国个到说们为子和你")
    mixed = write_text(tmp_path / "kana.txt", lines=50, alphabet="あいうえおかきくけこアイウエオabc")
    assert choose_character_coverage(latin) == 1.0
    assert choose_character_coverage(han) == 0.9995
    assert choose_character_coverage(mixed) == 0.9995


def test_vocabulary_too_large_names_the_file(tmp_path: Path) -> None:
    small = write_text(tmp_path / "small.txt", lines=20, alphabet="ab")
    with pytest.raises(InputError, match="vocab-size") as error:
        train_sentencepiece(small, tmp_path / "m", vocab_size=5000, num_threads=1)
    assert str(small) in str(error.value)


@pytest.mark.parametrize("content", [None, b"", b"\n\n  \n"], ids=["missing", "empty", "blank"])
def test_unusable_corpus_names_the_file(tmp_path: Path, content: bytes | None) -> None:
    corpus = tmp_path / "corpus.txt"
    if content is not None:
        corpus.write_bytes(content)
    with pytest.raises(InputError) as error:
        train_sentencepiece(corpus, tmp_path / "m", vocab_size=100)
    assert str(corpus) in str(error.value)


def test_a_corpus_in_another_encoding_is_refused_before_training_a_few_bad_lines_are_not(tmp_path: Path) -> None:
    utf8 = write_text(tmp_path / "de.txt", lines=30_000)  # about 2.6 MB: windows start inside lines and characters
    assert utf8.stat().st_size > 2 * 16 * 64 * 1024
    check_mostly_utf8(utf8)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(utf8.read_text(encoding="utf-8").encode("latin-1"))
    data = latin1.read_bytes()
    first = data.rfind(b"\n", 0, data.index(b"\xe9")) + 1  # the line of the first non-ASCII letter
    with pytest.raises(InputError, match=rf"{latin1}: .* sampled lines are not valid UTF-8 \(the first at byte "
                                         rf"{first:,}\); .*another encoding"):
        check_mostly_utf8(latin1)
    with pytest.raises(InputError, match="not valid UTF-8"):  # training checks it too (the prepare command)
        train_sentencepiece(latin1, tmp_path / "m", vocab_size=100)
    small = tmp_path / "small.txt"
    small.write_bytes(b"caf\xe9\n" * 3)
    with pytest.raises(InputError, match=r"3 of 3 sampled lines .* \(the first at byte 0\)"):
        check_mostly_utf8(small)
    some = tmp_path / "some.txt"  # a few bad lines are skipped and counted when the corpus is prepared, as before
    some.write_bytes(b"caf\xe9\n" * 3 + "café\n".encode() * 10)
    check_mostly_utf8(some)


def test_load_rejects_other_files(tmp_path: Path, corpus: Path) -> None:
    junk = tmp_path / "junk.model"
    junk.write_bytes(b"not a model at all\n" * 10)
    with pytest.raises(InputError, match="not a SentencePiece model") as error:
        Tokenizer.load(junk)
    assert str(junk) in str(error.value)

    # SentencePiece's defaults put <unk> at 0 and <s> at 1: a model the embedding swap cannot use.
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "default"), vocab_size=100,
                                   num_threads=1, minloglevel=2)
    with pytest.raises(InputError, match="special pieces") as error:
        Tokenizer.load(tmp_path / "default.model")
    assert str(tmp_path / "default.model") in str(error.value)

    with pytest.raises(InputError, match="cannot read"):
        Tokenizer.load(tmp_path / "absent.model")


def test_training_sample_is_seeded_and_uniform(tmp_path: Path) -> None:
    from ds_minimodel.data.tokenizer import _sample_lines

    numbered = tmp_path / "numbered.txt"
    numbered.write_text("".join(f"{i}\n\n" for i in range(1000)))  # the blank lines are never sampled
    assert _sample_lines(numbered, 50, seed=3) == _sample_lines(numbered, 50, seed=3)
    assert _sample_lines(numbered, 50, seed=3) != _sample_lines(numbered, 50, seed=4)
    assert len(_sample_lines(numbered, 0, seed=0)) == len(_sample_lines(numbered, 5000, seed=0)) == 1000
    # 400 samples of 50 lines: each tenth of the file should get 2000 picks; the binomial standard deviation is
    # sqrt(20000 x 0.1 x 0.9) = 42, so 250 is six of them.
    picks = np.bincount([int(t) // 100 for seed in range(400) for t in _sample_lines(numbered, 50, seed)])
    assert np.all(np.abs(picks - 2000) < 250), picks


def test_a_tokenizer_replaced_since_its_data_or_checkpoint_was_written_is_refused(model: Path, corpus: Path,
                                                                               tmp_path: Path) -> None:
    from ds_minimodel.data.tokenizer import load_tokenizer

    recorded = {"path": str(model), "sha256": Tokenizer.load(model).sha256}
    assert load_tokenizer(recorded, "run/checkpoints/step_00000010").sha256 == recorded["sha256"]
    other = train_sentencepiece(corpus, tmp_path / "other", vocab_size=VOCAB_SIZE - 10, num_threads=1)
    with pytest.raises(InputError) as err:
        load_tokenizer({"path": str(other), "sha256": recorded["sha256"]}, "run/checkpoints/step_00000010")
    assert str(other) in str(err.value) and "changed since run/checkpoints/step_00000010 was written" in str(err.value)
    with pytest.raises(InputError, match="records no tokenizer"):
        load_tokenizer(None, "a/meta.json")


def test_a_folder_from_another_machine_finds_its_tokenizer_inside_it_by_hash(model: Path, corpus: Path,
                                                                            tmp_path: Path) -> None:
    from ds_minimodel.data.tokenizer import load_tokenizer

    # The GPU command's body: meta.json records the path on the machine that wrote it, the file travels inside.
    folder = tmp_path / "body" / "model"
    folder.mkdir(parents=True)
    (folder / "spm.model").write_bytes(model.read_bytes())
    recorded = {"path": "/tmp/elsewhere/en/spm.model", "sha256": Tokenizer.load(model).sha256}
    assert load_tokenizer(recorded, folder).path == folder / "spm.model"
    # Beside a checkpoint folder's parent too (a run folder holding the tokenizer).
    (folder / "spm.model").unlink()
    (folder.parent / "spm.model").write_bytes(model.read_bytes())
    assert load_tokenizer(recorded, folder).path == folder.parent / "spm.model"
    # Another tokenizer under that name is refused by its hash.
    other = train_sentencepiece(corpus, tmp_path / "other", vocab_size=VOCAB_SIZE - 10, num_threads=1)
    (folder.parent / "spm.model").write_bytes(Path(other).read_bytes())
    with pytest.raises(InputError, match="tokenizer changed since"):
        load_tokenizer(recorded, folder)


def test_a_run_read_from_another_directory_or_moved_finds_its_tokenizer_under_the_recorded_tail(
        model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ds_minimodel.data.tokenizer import load_tokenizer

    # A run started in tmp_path/project recorded its tokenizer relative to that directory, as older checkpoints do.
    project = tmp_path / "project"
    tokenizer = project / "runs" / "x" / "data" / "en" / "spm.model"
    checkpoint_dir = project / "runs" / "x" / "step1" / "base" / "checkpoints" / "step_00000010"
    checkpoint_dir.mkdir(parents=True)
    tokenizer.parent.mkdir(parents=True)
    tokenizer.write_bytes(model.read_bytes())
    # Another file under a shorter tail nearer the checkpoint (were it taken, the hash would refuse it).
    decoy = project / "runs" / "x" / "step1" / "base" / "en" / "spm.model"
    decoy.parent.mkdir()
    decoy.write_bytes(b"not this one")
    recorded = {"path": "runs/x/data/en/spm.model", "sha256": Tokenizer.load(model).sha256}
    monkeypatch.chdir(tmp_path)  # another working directory: the relative path is gone from here
    assert load_tokenizer(recorded, checkpoint_dir).path == tokenizer.resolve()
    # The whole project moved: an absolute path recorded on the old tree is found at its tail in the new one.
    moved = tmp_path / "moved"
    project.rename(moved)
    recorded_absolute = {"path": str(tokenizer), "sha256": recorded["sha256"]}
    found = load_tokenizer(recorded_absolute, moved / checkpoint_dir.relative_to(project))
    assert found.path == (moved / tokenizer.relative_to(project)).resolve()
    # Only the other file left: refused by name, never read as the run's tokenizer.
    (moved / tokenizer.relative_to(project)).unlink()
    with pytest.raises(InputError, match="base/en/spm.model: not a SentencePiece model"):
        load_tokenizer(recorded, moved / checkpoint_dir.relative_to(project))
    # Nothing at any tail: the error names the recorded path.
    (moved / decoy.relative_to(project)).unlink()
    with pytest.raises(InputError, match="runs/x/data/en/spm.model: cannot read tokenizer model"):
        load_tokenizer(recorded, moved / checkpoint_dir.relative_to(project))
