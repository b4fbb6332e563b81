"""What a corpus's text is, read from a sample before any work: its encoding (mostly UTF-8, no NUL bytes), its scripts
(SentencePiece's character coverage), and the characters a vocabulary must hold. The pipeline's pre-flight and the
tokenizer's training (``data.tokenizer``) both ask here, so a corpus is refused by the same rule wherever it is first
read."""
from __future__ import annotations

import collections
import re
from pathlib import Path

from ds_minimodel.data.special import NUM_SPECIAL
from ds_minimodel.errors import InputError, require_file

# SentencePiece's advice (README, "character_coverage"): 0.9995 for languages with a rich character set such as
# Chinese and Japanese, 1.0 for everything else, where full coverage avoids mapping rare letters to <unk>.
RICH_SCRIPT_COVERAGE = 0.9995
SMALL_SCRIPT_COVERAGE = 1.0
# Han, kana and Hangul: the scripts whose thousands of characters make full coverage waste the vocabulary.
_RICH_SCRIPT_CHARS = re.compile(
    "[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\U00020000-\U0003134f]"
)
_LETTERS = re.compile(r"[^\W\d_]")
_SAMPLE_WINDOWS = 16
_SAMPLE_WINDOW_BYTES = 64 * 1024


def check_corpus(corpus: Path) -> None:
    """A corpus file that exists, is not empty and reads as UTF-8 text."""
    require_file(corpus, "corpus file")
    if corpus.stat().st_size == 0:
        raise InputError(f"{corpus}: corpus file is empty")
    with corpus.open("rb") as f:
        # Before reading it line by line: a binary file may have no line breaks at all.
        if b"\0" in f.read(_SAMPLE_WINDOW_BYTES):
            raise InputError(f"{corpus}: contains NUL bytes; the file looks binary, not UTF-8 text")
    check_mostly_utf8(corpus)


def _sample_windows(corpus: Path) -> list[tuple[int, bytes]]:
    """Up to 1 MiB of the file as (offset, bytes) windows evenly spaced over it, so that a file whose first megabyte
    is atypical (a licence header, a different language) does not decide alone."""
    size = corpus.stat().st_size
    step = max(size // _SAMPLE_WINDOWS, 1)
    windows = []
    with corpus.open("rb") as f:
        for start in range(0, size, step):
            f.seek(start)
            windows.append((start, f.read(_SAMPLE_WINDOW_BYTES)))
            if len(windows) == _SAMPLE_WINDOWS:
                break
    return windows


def _sample_text(corpus: Path) -> str:
    return "".join(data.decode("utf-8", errors="ignore") for _, data in _sample_windows(corpus))


def check_mostly_utf8(corpus: Path) -> None:
    """Refuse a corpus most of whose sampled lines are not UTF-8 (another encoding, or binary): preparation's own
    rule (``shards._check_mostly_text``, which meets it only after the tokenizer is trained), read from a sample
    before any work. A few bad lines pass, as they do there (skipped and counted)."""
    size = corpus.stat().st_size
    good, bad, first_bad = 0, 0, None
    # A file no larger than the sample is read whole (its windows would overlap and count lines twice).
    windows = _sample_windows(corpus) if size > _SAMPLE_WINDOWS * _SAMPLE_WINDOW_BYTES else [(0, corpus.read_bytes())]
    for start, data in windows:
        lines = data.split(b"\n")
        offsets = [start]
        for line in lines[:-1]:
            offsets.append(offsets[-1] + len(line) + 1)
        whole = list(zip(offsets, lines))
        if start > 0:
            whole = whole[1:]  # begins inside a line
        if start + len(data) < size:
            whole = whole[:-1]  # ends inside one
        for offset, line in whole:
            if line.strip():
                try:
                    line.decode("utf-8")
                    good += 1
                except UnicodeDecodeError:
                    bad += 1
                    first_bad = offset if first_bad is None else first_bad
    if bad > good:
        raise InputError(f"{corpus}: {bad:,} of {good + bad:,} sampled lines are not valid UTF-8 (the first at byte "
                         f"{first_bad:,}); the file looks binary or is in another encoding: convert it to UTF-8 "
                         "(for example iconv -f latin1 -t utf-8)")


def choose_character_coverage(corpus: Path) -> float:
    """0.9995 when Han/kana/Hangul make up most letters of a sample of the corpus, else 1.0."""
    text = _sample_text(corpus)
    letters = len(_LETTERS.findall(text))
    rich = len(_RICH_SCRIPT_CHARS.findall(text))
    if letters == 0:
        raise InputError(f"{corpus}: no letters found in a sample of the corpus; is it a UTF-8 text file?")
    return RICH_SCRIPT_COVERAGE if rich / letters > 0.5 else SMALL_SCRIPT_COVERAGE


def check_vocabulary_fits(corpus: Path, vocab_size: int, character_coverage: float | None = None) -> None:
    """Refuse, before any training, a vocabulary too small for the corpus's characters: SentencePiece keeps every
    character needed to cover ``character_coverage`` of the text as a piece of its own, so a vocabulary below that
    count (plus the special pieces) cannot be trained (Chinese needs thousands). Estimated on a sample of the file."""
    coverage = choose_character_coverage(corpus) if character_coverage is None else character_coverage
    counts = collections.Counter(ch for ch in _sample_text(corpus) if not ch.isspace())
    total, covered, needed = sum(counts.values()), 0, 0
    for _, n in counts.most_common():
        if covered >= coverage * total:
            break
        covered += n
        needed += 1
    if needed + NUM_SPECIAL > vocab_size:
        raise InputError(
            f"{corpus}: a vocabulary of {vocab_size:,} pieces cannot hold this text's characters: about {needed:,} "
            f"are needed at character coverage {coverage} (estimated on a sample); raise vocab_size or lower "
            "character_coverage for this language")
