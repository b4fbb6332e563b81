"""Readers for the finetuning and zero-shot evaluation sets of Marchisio et al. (2023), Sec. 3 "Evaluation".

One reader per distribution format, each reading the files exactly as their authors ship them:

| reader | files |
|---|---|
| `read_multinli_jsonl` | MultiNLI 1.0 `multinli_1.0_train.jsonl` (the English XNLI training set) |
| `read_xnli_tsv` | XNLI 1.0 `xnli.dev.tsv`, `xnli.test.tsv` (all 15 languages in one file) |
| `read_pawsx_tsv` | PAWS-X `<lang>/train.tsv`, `translated_train.tsv`, `dev_2k.tsv`, `test_2k.tsv` |
| `read_squad` | SQuAD v1.1 train/dev, MLQA `test-context-xx-question-xx.json`, XQuAD `xquad.xx.json` |
| `read_conllu` | Universal Dependencies CoNLL-U (and the demo's brown-pos) |
| `read_generic`, `read_lohelp` | our own JSONL / TSV classification format (and the demo's lohelp task) |

Every reader returns an `Examples` list and rejects a malformed file with an `InputError` that names the file,
the line (for line-based formats) and the problem, so that a bad download fails before finetuning starts rather
than as a shape error hours later.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ds_minimodel.errors import InputError

logger = logging.getLogger(__name__)

# XNLI's label order (Conneau et al., 2018; also the order of HF's `xnli` dataset); MultiNLI is mapped onto it so
# that a head finetuned on MultiNLI is evaluated zero-shot on XNLI with the same class indices.
NLI_LABELS: tuple[str, ...] = ("entailment", "neutral", "contradiction")
PAWSX_LABELS: tuple[str, ...] = ("0", "1")
# The lohelp demo task's 8 help modules (data README "tasks/lohelp"), sorted: the order `read_generic` infers from
# train.en.jsonl, fixed here so that a dev/test file can be read without the training file.
LOHELP_LABELS: tuple[str, ...] = (
    "sbasic", "scalc", "schart", "sdatabase", "sdraw", "simpress", "smath", "swriter")


@dataclass(frozen=True)
class ClassificationExample:
    id: str
    text: str
    text_pair: str | None
    label: int
    """Index of `label_name` in the task's label list."""
    label_name: str


@dataclass(frozen=True)
class TokenExample:
    id: str
    tokens: list[str]
    tags: list[str]


@dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    context: str
    answers: list[str]
    answer_starts: list[int]
    """Character offsets of `answers` in `context` (SQuAD's `answer_start`)."""


class Examples(list):
    """A reader's examples, in file order, plus what the reader passed over.

    `labels` is the label list the class indices refer to (classification readers only); `skipped` counts the
    records a reader drops by the format's convention (MultiNLI's "-" gold labels, PAWS-X's empty translations)."""

    def __init__(self, items: Sequence = (), *, labels: Sequence[str] | None = None, skipped: int = 0) -> None:
        super().__init__(items)
        self.labels = None if labels is None else list(labels)
        self.skipped = skipped


# --- line-level helpers --------------------------------------------------------------------------------------------


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its line break), decoding each line separately so that a bad byte is
    reported with its line. A UTF-8 byte-order mark on the first line is dropped."""
    try:
        f = path.open("rb")
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    with f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise InputError(f"{path}:{number}: not UTF-8 ({err.reason} at byte {err.start})") from None
            if number == 1:
                line = line.removeprefix("\ufeff")
            yield number, line.rstrip("\r\n")


def _tsv_rows(path: Path, required: Sequence[str]) -> tuple[dict[str, int], Iterator[tuple[int, list[str]]]]:
    """The header's column indices and an iterator of (line number, cells) for the non-blank rows after it.

    Cells are split on tabs only, with no quote handling: XNLI and PAWS-X sentences contain unbalanced quotes
    (XNLI's README asks for `quoting=csv.QUOTE_NONE` for this reason). Every row must have the header's width."""
    lines = _lines(path)
    header_line = next(lines, None)
    if header_line is None:
        raise InputError(f"{path}: empty file; expected a header row with columns {', '.join(required)}")
    header = header_line[1].split("\t")
    columns = {name: index for index, name in enumerate(header)}
    missing = [name for name in required if name not in columns]
    if missing:
        raise InputError(
            f"{path}:1: header lacks column(s) {', '.join(missing)} (found: {', '.join(header)})")

    def rows() -> Iterator[tuple[int, list[str]]]:
        for number, line in lines:
            if not line.strip():
                continue
            cells = line.split("\t")
            if len(cells) != len(header):
                raise InputError(
                    f"{path}:{number}: {len(cells)} tab-separated columns, the header has {len(header)}")
            yield number, cells

    return columns, rows()


def jsonl_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON Lines file."""
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{path}:{number}: bad JSON: {err.msg} (column {err.colno})") from None
        if not isinstance(record, dict):
            raise InputError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        yield number, record


def _label_index(path: Path, number: int, name: str, labels: Sequence[str]) -> int:
    try:
        return labels.index(name)
    except ValueError:
        raise InputError(
            f"{path}:{number}: unknown label {name!r}; allowed labels: {', '.join(labels)}") from None


def _text_field(path: Path, number: int, record: dict, field: str, *, optional: bool = False) -> str | None:
    if field not in record or (optional and record[field] is None):
        if optional:
            return None
        raise InputError(f"{path}:{number}: missing field {field!r}")
    value = record[field]
    if not isinstance(value, str):
        raise InputError(f"{path}:{number}: field {field!r} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise InputError(f"{path}:{number}: field {field!r} is empty")
    return value


def _label_key(name: str) -> tuple[int, int | str]:
    # Integer labels ("0", "1", ..., "10") sort numerically, so that class i is label "i"; other names sort as text.
    return (0, int(name)) if re.fullmatch(r"-?\d+", name) else (1, name)


# --- generic classification ----------------------------------------------------------------------------------------


def read_generic(path: Path | str, labels: Sequence[str] | None = None) -> Examples:
    """Sentence(-pair) classification in our own format, chosen by suffix.

    * `.jsonl` / `.json`: one object per line, `{"text", optional "text_pair", "label", optional "id"}`; a label
      may be a string or an integer (compared as its decimal string).
    * `.tsv`: a header row naming the columns `text`, `label`, optionally `text_pair` and `id`, in any order.

    With `labels=None` the label list is inferred from this file (sorted; integers numerically): pass the
    training file here and read evaluation files with `labels=train.labels`, so that indices agree.
    Missing ids become `<file name>:<line>`.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        records = _generic_jsonl(path)
    elif suffix == ".tsv":
        records = _generic_tsv(path)
    else:
        raise InputError(f"{path}: unknown classification file type {path.suffix!r}; use .jsonl, .json or .tsv")
    records = list(records)
    if not records:
        raise InputError(f"{path}: no examples")
    if labels is None:
        labels = sorted({record[3] for record in records}, key=_label_key)
    labels = list(labels)
    examples = Examples(labels=labels)
    for number, id_, (text, text_pair), name in records:
        examples.append(ClassificationExample(
            id=id_ if id_ is not None else f"{path.name}:{number}", text=text, text_pair=text_pair,
            label=_label_index(path, number, name, labels), label_name=name))
    return examples


def _generic_jsonl(path: Path) -> Iterator[tuple[int, str | None, tuple[str, str | None], str]]:
    for number, record in jsonl_objects(path):
        text = _text_field(path, number, record, "text")
        text_pair = _text_field(path, number, record, "text_pair", optional=True)
        if "label" not in record:
            raise InputError(f"{path}:{number}: missing field 'label'")
        label = record["label"]
        # bool is an int subclass; `true` as a label is almost certainly a mistake, so it is refused with the rest.
        if isinstance(label, bool) or not isinstance(label, (str, int)):
            raise InputError(f"{path}:{number}: field 'label' must be a string or an integer, got {label!r}")
        id_ = record.get("id")
        yield number, None if id_ is None else str(id_), (text, text_pair), str(label)


def _generic_tsv(path: Path) -> Iterator[tuple[int, str | None, tuple[str, str | None], str]]:
    columns, rows = _tsv_rows(path, ("text", "label"))
    for number, cells in rows:
        record = {name: cells[index] for name, index in columns.items()}
        text = _text_field(path, number, record, "text")
        text_pair = _text_field(path, number, record, "text_pair") if "text_pair" in columns else None
        label = record["label"].strip()
        if not label:
            raise InputError(f"{path}:{number}: field 'label' is empty")
        yield number, record.get("id") or None, (text, text_pair), label


def read_lohelp(path: Path | str, labels: Sequence[str] | None = None) -> Examples:
    """The demo task `lohelp` (JSONL `{"id", "text", "label"}`): `read_generic` with its 8 labels by default."""
    return read_generic(path, LOHELP_LABELS if labels is None else labels)


# --- NLI -----------------------------------------------------------------------------------------------------------


def read_multinli_jsonl(path: Path | str) -> Examples:
    """MultiNLI 1.0 JSONL (`sentence1`, `sentence2`, `gold_label`, `pairID`, ...), labels in XNLI's order.

    Pairs whose annotators reached no majority have `gold_label` "-" and are skipped, as in every MultiNLI
    training recipe; `.skipped` counts them."""
    path = Path(path)
    examples = Examples(labels=NLI_LABELS)
    for number, record in jsonl_objects(path):
        if "gold_label" not in record:
            raise InputError(f"{path}:{number}: missing field 'gold_label'")
        name = record["gold_label"]
        if name == "-":
            examples.skipped += 1
            continue
        text = _text_field(path, number, record, "sentence1")
        text_pair = _text_field(path, number, record, "sentence2")
        label = _label_index(path, number, str(name), NLI_LABELS)
        examples.append(ClassificationExample(
            id=str(record.get("pairID", f"{path.name}:{number}")), text=text, text_pair=text_pair,
            label=label, label_name=name))
    if examples.skipped:
        logger.info("%s: skipped %d pairs without a gold label ('-')", path, examples.skipped)
    return examples


def read_xnli_tsv(path: Path | str, language: str) -> Examples:
    """The rows of one language from XNLI 1.0's `xnli.dev.tsv` / `xnli.test.tsv`.

    Columns are found by header name (`language`, `gold_label`, `sentence1`, `sentence2`, optional `pairID`):
    the file also carries parses, tokenised copies and the five annotator labels. A language with no rows is an
    error listing the languages that are present."""
    path = Path(path)
    columns, rows = _tsv_rows(path, ("language", "gold_label", "sentence1", "sentence2"))
    examples = Examples(labels=NLI_LABELS)
    present: set[str] = set()
    for number, cells in rows:
        row_language = cells[columns["language"]]
        present.add(row_language)
        if row_language != language:
            continue
        record = {name: cells[index] for name, index in columns.items()}
        text = _text_field(path, number, record, "sentence1")
        text_pair = _text_field(path, number, record, "sentence2")
        name = record["gold_label"]
        examples.append(ClassificationExample(
            id=record.get("pairID") or f"{path.name}:{number}", text=text, text_pair=text_pair,
            label=_label_index(path, number, name, NLI_LABELS), label_name=name))
    if not examples:
        raise InputError(
            f"{path}: no rows for language {language!r}; languages present: {', '.join(sorted(present)) or 'none'}")
    return examples


# --- paraphrase identification -------------------------------------------------------------------------------------


def read_pawsx_tsv(path: Path | str, *, skip_empty: bool | None = None) -> Examples:
    """PAWS-X TSV: header `id  sentence1  sentence2  label`, label 0 or 1.

    The machine-translated training files have rows whose translation is empty; they are skipped (and counted in
    `.skipped`) when `skip_empty` is true, which by default it is for files whose name contains "train". In the
    human-translated dev/test files (`dev_2k.tsv`, `test_2k.tsv`) an empty sentence is an error."""
    path = Path(path)
    if skip_empty is None:
        skip_empty = "train" in path.name
    columns, rows = _tsv_rows(path, ("id", "sentence1", "sentence2", "label"))
    examples = Examples(labels=PAWSX_LABELS)
    for number, cells in rows:
        record = {name: cells[index] for name, index in columns.items()}
        if skip_empty and not (record["sentence1"].strip() and record["sentence2"].strip()):
            examples.skipped += 1
            continue
        text = _text_field(path, number, record, "sentence1")
        text_pair = _text_field(path, number, record, "sentence2")
        name = record["label"].strip()
        examples.append(ClassificationExample(
            id=record["id"], text=text, text_pair=text_pair,
            label=_label_index(path, number, name, PAWSX_LABELS), label_name=name))
    if examples.skipped:
        logger.info("%s: skipped %d rows with an empty sentence", path, examples.skipped)
    return examples


# --- CoNLL-U -------------------------------------------------------------------------------------------------------

UPOS = ["ADJ", "ADP", "ADV", "AUX", "CCONJ", "CONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PRT",
        "PUNCT", "SCONJ", "SYM", "VERB", "X"]  # UD's 17 tags plus Petrov et al.'s CONJ and PRT
CONLLU_COLUMNS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")


def read_conllu(path: Path | str, column: str = "upos") -> Examples:
    """Sentences of a CoNLL-U file as (FORM, `column`) sequences.

    Follows the CoNLL-U format (universaldependencies.org/format.html): 10 tab-separated columns, `#` comments
    before a sentence (the `sent_id` one names the example; otherwise `<file name>:<sentence number>`), a blank
    line after each sentence. Multiword-token lines (`1-2`) and empty nodes (`1.1`) are skipped: the words are the
    integer-ID lines, which must run 1, 2, ..., n."""
    path = Path(path)
    if column not in CONLLU_COLUMNS[1:]:
        raise InputError(f"{path}: unknown CoNLL-U column {column!r}; one of {', '.join(CONLLU_COLUMNS[1:])}")
    tag_index = CONLLU_COLUMNS.index(column)
    examples = Examples()
    tokens: list[str] = []
    tags: list[str] = []
    sent_id: str | None = None

    def finish() -> None:
        nonlocal tokens, tags, sent_id
        if tokens:
            examples.append(TokenExample(
                id=sent_id or f"{path.name}:{len(examples) + 1}", tokens=tokens, tags=tags))
        tokens, tags, sent_id = [], [], None

    for number, line in _lines(path):
        if not line.strip():
            finish()
            continue
        if line.startswith("#"):
            found = re.match(r"#\s*sent_id\s*=\s*(.*\S)", line)
            if found:
                sent_id = found.group(1)
            continue
        cells = line.split("\t")
        if len(cells) != len(CONLLU_COLUMNS):
            raise InputError(f"{path}:{number}: {len(cells)} tab-separated columns, CoNLL-U has 10")
        word_id = cells[0]
        if re.fullmatch(r"\d+-\d+|\d+\.\d+", word_id):
            continue  # multiword token or empty node: not a word of the sentence
        if not re.fullmatch(r"\d+", word_id):
            raise InputError(f"{path}:{number}: ID {word_id!r} is not an integer, a range (1-2) or a decimal (1.1)")
        if int(word_id) != len(tokens) + 1:
            raise InputError(f"{path}:{number}: ID {word_id} out of sequence, expected {len(tokens) + 1}")
        if not cells[1]:
            raise InputError(f"{path}:{number}: empty FORM")
        if column == "upos" and cells[tag_index] not in UPOS:
            raise InputError(f"{path}:{number}: unknown UPOS tag {cells[tag_index]!r}; Universal Dependencies' "
                             f"tags are {', '.join(UPOS)}")
        tokens.append(cells[1])
        tags.append(cells[tag_index])
    finish()
    if not examples:
        raise InputError(f"{path}: no sentences")
    return examples


# --- extractive QA -------------------------------------------------------------------------------------------------


def read_squad(path: Path | str, *, strict: bool = True) -> Examples:
    """SQuAD v1.1 JSON: `{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question", "answers":
    [{"text", "answer_start"}]}]}]}]}`. MLQA and XQuAD ship the same schema.

    With `strict` (training files) every answer must sit at its `answer_start`:
    `context[answer_start:answer_start + len(text)] == text`, since training targets are built from the offsets.
    Evaluation only compares answer texts, so `strict=False` accepts the few misplaced offsets in dev files.
    Problems are reported with the question id (JSON has no useful line numbers)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 ({err.reason} at byte {err.start})") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}: bad JSON: {err.msg} (column {err.colno})") from None

    def need(value: object, kind: type, where: str) -> object:
        if not isinstance(value, kind) or isinstance(value, bool):
            raise InputError(f"{path}: {where} must be a JSON {kind.__name__}, got {type(value).__name__}")
        return value

    def field(record: dict, name: str, kind: type, where: str) -> object:
        if name not in record:
            raise InputError(f"{path}: {where}: missing field {name!r}")
        return need(record[name], kind, f"{where}.{name}")

    need(document, dict, "the top level")
    examples = Examples()
    seen: set[str] = set()
    for a, article in enumerate(field(document, "data", list, "top level")):
        need(article, dict, f"data[{a}]")
        for p, paragraph in enumerate(field(article, "paragraphs", list, f"data[{a}]")):
            where = f"data[{a}].paragraphs[{p}]"
            need(paragraph, dict, where)
            context = field(paragraph, "context", str, where)
            for q, qa in enumerate(field(paragraph, "qas", list, where)):
                need(qa, dict, f"{where}.qas[{q}]")
                if "id" not in qa:
                    raise InputError(f"{path}: {where}.qas[{q}]: missing field 'id'")
                qid = str(qa["id"])
                where_q = f"question {qid}"
                if qid in seen:
                    raise InputError(f"{path}: {where_q}: duplicate question id")
                seen.add(qid)
                question = field(qa, "question", str, where_q)
                answers = field(qa, "answers", list, where_q)
                if not answers:
                    raise InputError(f"{path}: {where_q}: no answers (SQuAD v1.1 questions all have one)")
                texts, starts = [], []
                for i, answer in enumerate(answers):
                    need(answer, dict, f"{where_q}: answers[{i}]")
                    answer_text = field(answer, "text", str, f"{where_q}: answers[{i}]")
                    start = field(answer, "answer_start", int, f"{where_q}: answers[{i}]")
                    found = context[start:start + len(answer_text)] if start >= 0 else ""
                    if strict and found != answer_text:
                        raise InputError(
                            f"{path}: {where_q}: answer {answer_text!r} is not at answer_start {start} "
                            f"(the context there reads {found!r})")
                    texts.append(answer_text)
                    starts.append(start)
                examples.append(QAExample(id=qid, question=question, context=context, answers=texts,
                                          answer_starts=starts))
    if not examples:
        raise InputError(f"{path}: no questions")
    return examples
