"""Hugging Face tokenizers seen through our special ids (a model imported with ``ds-minimodel hf import``).

A model imported from a Hugging Face folder (ds_minimodel.model.hf) keeps the tokenizer it was trained with: WordPiece
(BERT), byte-level BPE (RoBERTa) or SentencePiece (XLM-R). `HFTokenizer` reads that folder with transformers'
AutoTokenizer (offline: the folder only) and shows it through the same interface as `Tokenizer`, in OUR id space:
the five special roles move to the reserved ids 0..4 and every other token keeps its relative order. The import
permutes the embedding rows the same way (`hf_of_ours`), so the rest of the pipeline (masking, packing, features,
embedding swaps) needs no case of its own.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ds_minimodel.data.special import BOS_ID, EOS_ID, MASK_ID, NUM_SPECIAL, PAD_ID, SPECIAL_PIECES, UNK_ID
from ds_minimodel.errors import InputError

HF_TOKENIZER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                      "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt", "sentencepiece.bpe.model",
                      "spiece.model", "tokenizer.model", "sentencepiece.model")
"""The files that make up a Hugging Face tokenizer (config.json: old folders name the tokenizer class only through
the model type there). They are hashed for the tokenizer's identity and copied when a folder is prepared."""
_HF_VOCABULARY_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "sentencepiece.bpe.model", "spiece.model",
                        "tokenizer.model", "sentencepiece.model")
WORD_START = "\u2581"  # SentencePiece's "▁": the piece starts a word


def hf_tokenizer_sha256(folder: Path) -> str:
    """Identity of the tokenizer in ``folder``: its tokenizer files' names and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(HF_TOKENIZER_FILES):
        path = Path(folder) / name
        if path.is_file():
            digest.update(f"{name}|{path.stat().st_size}|".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def copy_hf_tokenizer(source: Path, target: Path, *, config: bool = True) -> None:
    """Copy a Hugging Face tokenizer's files (`HF_TOKENIZER_FILES`; config.json only with `config`) into `target`."""
    target.mkdir(parents=True, exist_ok=True)
    for name in HF_TOKENIZER_FILES:
        if (Path(source) / name).is_file() and (config or name != "config.json"):
            shutil.copyfile(Path(source) / name, target / name)

def _piece_style(spec: dict, folder: Path) -> tuple[str, str]:
    """How the tokenizer marks word boundaries, from its tokenizer.json description: ("wordpiece", "##"),
    ("byte_level", "") or ("metaspace", "▁")."""
    model = spec.get("model") or {}
    if model.get("type") == "WordPiece":
        return "wordpiece", model.get("continuing_subword_prefix") or "##"
    parts = []
    for key in ("pre_tokenizer", "decoder"):
        part = spec.get(key) or {}
        parts += part.get("pretokenizers") or part.get("decoders") or [part]
    kinds = {part.get("type"): part for part in parts}
    if "ByteLevel" in kinds:
        return "byte_level", ""
    if "Metaspace" in kinds:
        return "metaspace", kinds["Metaspace"].get("replacement", WORD_START)
    raise InputError(f"{folder}: tokenizer model {model.get('type')!r} marks word boundaries in none of the ways "
                     "understood here (WordPiece '##', byte-level 'Ġ', SentencePiece '▁')")


def sentencepiece_style(tokens: Sequence[str], style: str, marker: str) -> list[str | None]:
    """Each token written as SentencePiece would write the same piece of text, or None where no SentencePiece
    piece can be the same (a byte-level token holding part of a UTF-8 character).

    Overlap initialisation (paper footnote 1) matches a target piece to a source token by string, and the target
    tokenizers here are SentencePiece: a word-initial piece is "▁the", a word-internal one "ing". WordPiece writes
    them "the" and "##ing"; byte-level BPE "Ġthe" and "ing" in its byte alphabet. Punctuation that BERT splits off
    as a word of its own becomes "▁," although SentencePiece usually glues it to the previous word (","): such
    pieces simply do not match, which costs overlap, never correctness.
    """
    if style == "wordpiece":
        return [t[len(marker):] if t.startswith(marker) else WORD_START + t for t in tokens]
    if style == "metaspace":
        return [t.replace(marker, WORD_START) for t in tokens]
    from tokenizers import decoders

    byte_level = decoders.ByteLevel()
    out: list[str | None] = []
    for token in tokens:
        text = byte_level.decode([token])
        out.append(None if "\ufffd" in text else text.replace(" ", WORD_START))
    return out


class HFTokenizer:
    """A Hugging Face tokenizer folder in our id space (see the section comment); build with `HFTokenizer.load`."""

    special_ids: frozenset[int] = frozenset(SPECIAL_PIECES)

    def __init__(self, path: Path, backend: object, sha256: str, hf_of_ours: np.ndarray, pieces: list[str]) -> None:
        self.path = path
        self.sha256 = sha256
        self._backend = backend  # a `tokenizers.Tokenizer`, padding and truncation off
        self.hf_of_ours = hf_of_ours  # (V,) int64: the Hugging Face id of each of our ids
        self.ours_of_hf = np.argsort(hf_of_ours)  # the inverse permutation
        self._pieces = pieces
        self._index = {piece: i for i, piece in enumerate(pieces)}

    @classmethod
    def load(cls, folder: Path | str) -> HFTokenizer:
        folder = Path(folder)
        if not folder.is_dir():
            raise InputError(f"{folder}: not a folder, so not a Hugging Face tokenizer")
        if not any((folder / name).is_file() for name in _HF_VOCABULARY_FILES):
            raise InputError(f"{folder}: no tokenizer vocabulary found (looked for {', '.join(_HF_VOCABULARY_FILES)})")
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise InputError(f"{folder}: reading a Hugging Face tokenizer needs transformers "
                             "(pip install 'ds_minimodel[hf]')") from None
        try:
            # A local folder: transformers reads only its files and never contacts a hub.
            hf = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except Exception as err:  # noqa: BLE001 - whatever transformers raises, the folder is what is wrong
            raise InputError(f"{folder}: transformers cannot load the tokenizer: {type(err).__name__}: {err}") from None
        backend = getattr(hf, "backend_tokenizer", None)
        if backend is None:
            raise InputError(f"{folder}: {type(hf).__name__} has no fast (Rust) tokenizer; save the folder with a "
                             "tokenizer.json (AutoTokenizer.from_pretrained(...).save_pretrained(...))")
        from tokenizers import Tokenizer as RustTokenizer

        # A private copy: a tokenizer.json may switch on padding and truncation (sentence-transformers' folders pad
        # everything to 128 tokens), which must not reach pretraining text or the caller's tokenizer object.
        spec = json.loads(backend.to_str())
        backend = RustTokenizer.from_str(backend.to_str())
        backend.no_padding()
        backend.no_truncation()
        size = len(hf)
        roles = {BOS_ID: ("cls", "bos"), PAD_ID: ("pad",), EOS_ID: ("sep", "eos"), UNK_ID: ("unk",),
                 MASK_ID: ("mask",)}
        special: dict[int, int] = {}
        for ours, names in roles.items():
            found = next((getattr(hf, f"{n}_token_id") for n in names if getattr(hf, f"{n}_token_id") is not None),
                         None)
            if found is None or not 0 <= found < size:
                raise InputError(f"{folder}: the tokenizer has no {'/'.join(names)} token (needed as "
                                 f"{SPECIAL_PIECES[ours]}); every model here uses RoBERTa's five special roles")
            special[ours] = found
        if len(set(special.values())) < NUM_SPECIAL:
            raise InputError(f"{folder}: special roles share a token ({special}); they need five distinct tokens")
        taken = set(special.values())
        hf_of_ours = np.array([special[i] for i in range(NUM_SPECIAL)] + [i for i in range(size) if i not in taken],
                              dtype=np.int64)
        style, marker = _piece_style(spec, folder)
        tokens = hf.convert_ids_to_tokens([int(i) for i in hf_of_ours])
        converted = sentencepiece_style(tokens, style, marker)
        pieces = [SPECIAL_PIECES[i] for i in range(NUM_SPECIAL)]
        seen = set(pieces)
        for ours in range(NUM_SPECIAL, size):
            piece = converted[ours]
            # A token with no SentencePiece spelling, or a second token with the same one (the first keeps it),
            # gets a name that no SentencePiece piece has, so that overlap initialisation passes it over.
            if piece is None or piece in seen:
                piece = f"<hf-only:{int(hf_of_ours[ours])}>"
            seen.add(piece)
            pieces.append(piece)
        return cls(folder, backend, hf_tokenizer_sha256(folder), hf_of_ours, pieces)

    @property
    def vocab_size(self) -> int:
        return len(self.hf_of_ours)

    def _ours(self, hf_ids: Sequence[int]) -> list[int]:
        return self.ours_of_hf[np.asarray(hf_ids, dtype=np.int64)].tolist()

    def encode(self, text: str) -> list[int]:
        return self._ours(self._backend.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self._ours(e.ids) for e in self._backend.encode_batch(texts, add_special_tokens=False)]

    def encode_flat(self, texts: list[str], *, num_threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """As `Tokenizer.encode_flat`: all ids with `</s>` after each text (int32), and per-text lengths (int64)."""
        if not texts:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        encoded = [np.append(np.asarray(e.ids, np.int64), -1)
                   for e in self._backend.encode_batch(texts, add_special_tokens=False)]
        flat = np.concatenate(encoded)
        ends = flat == -1
        ids = np.where(ends, EOS_ID, self.ours_of_hf[np.where(ends, 0, flat)])
        return ids.astype(np.int32), np.fromiter(map(len, encoded), np.int64, len(encoded))

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and the [begin, end) character span of `text` each token came from (for QA answer spans)."""
        encoding = self._backend.encode(text, add_special_tokens=False)
        return self._ours(encoding.ids), [tuple(span) for span in encoding.offsets]

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self._backend.decode(self.hf_of_ours[np.asarray(ids, dtype=np.int64)].tolist(),
                                    skip_special_tokens=False)

    def piece(self, id: int) -> str:
        if not 0 <= id < self.vocab_size:
            raise IndexError(f"id {id} is outside the vocabulary of {self.vocab_size} tokens ({self.path})")
        return self._pieces[id]

    def id(self, piece: str) -> int | None:
        return self._index.get(piece)

    def pieces(self) -> list[str]:
        """Our ids' tokens in SentencePiece spelling (see `sentencepiece_style`), for overlap initialisation."""
        return list(self._pieces)

    def backend_json(self) -> str:
        """The Rust tokenizer as tokenizer.json text (padding and truncation off), for writing it elsewhere."""
        return self._backend.to_str()

    def hf_token(self, id: int) -> str:
        """The folder's own string for our id (e.g. "[CLS]" for BOS_ID in a BERT vocabulary)."""
        return self._backend.id_to_token(int(self.hf_of_ours[id]))

    def __repr__(self) -> str:
        return f"HFTokenizer({str(self.path)!r}, vocab_size={self.vocab_size}, sha256={self.sha256[:12]}...)"


