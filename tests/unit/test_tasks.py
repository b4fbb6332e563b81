"""Task data: the readers on fixtures in each distribution format, QA span mapping, and feature layouts."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from ds_minimodel.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_sentencepiece
from ds_minimodel.errors import InputError
from ds_minimodel.tasks import qa
from ds_minimodel.tasks.features import (
    IGNORE_INDEX,
    _truncate_longest_first,
    classification_features,
    token_classification_features,
)
from ds_minimodel.tasks.formats import FORMATS, KIND_OF_FORMAT, read_examples
from ds_minimodel.tasks.readers import (
    LOHELP_LABELS,
    NLI_LABELS,
    ClassificationExample,
    QAExample,
    TokenExample,
    read_conllu,
    read_generic,
    read_lohelp,
    read_multinli_jsonl,
    read_pawsx_tsv,
    read_squad,
    read_xnli_tsv,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"


def fixture(name: str) -> Path:
    return FIXTURES / name


def assert_input_error(call, *fragments: str) -> str:
    """`call()` raises InputError whose message contains every fragment (file path, line, problem)."""
    with pytest.raises(InputError) as caught:
        call()
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


# --- readers: well-formed files ------------------------------------------------------------------------------------


def test_xnli_keeps_one_language_by_header_name() -> None:
    german = read_xnli_tsv(fixture("xnli.dev.tsv"), "de")
    assert german.labels == list(NLI_LABELS) == ["entailment", "neutral", "contradiction"]
    assert [(e.id, e.label, e.label_name) for e in german] == [("1", 1, "neutral"), ("2", 2, "contradiction")]
    assert german[0].text == "Die Fähre fährt jeden Tag um zwölf ab."
    assert german[0].text_pair == "Die Fähre ist oft verspätet."
    # Unbalanced and doubled quotes are text, not CSV quoting (XNLI must be read with QUOTE_NONE).
    assert german[1].text == 'Er sagte zweimal "nein".'
    assert read_xnli_tsv(fixture("xnli.dev.tsv"), "zh")[0].text == "渡轮每天中午出发。"
    assert read_xnli_tsv(fixture("xnli.dev.tsv"), "ar")[0].label_name == "entailment"


def test_xnli_unknown_language_lists_those_present() -> None:
    path = fixture("xnli.dev.tsv")
    assert_input_error(lambda: read_xnli_tsv(path, "fr"), str(path), "'fr'", "ar, de, en, zh")


def test_multinli_skips_and_counts_pairs_without_gold_label() -> None:
    examples = read_multinli_jsonl(fixture("multinli.jsonl"))
    assert examples.skipped == 1
    assert [(e.id, e.label_name, e.label) for e in examples] == [
        ("100e", "entailment", 0), ("102c", "contradiction", 2), ("103n", "neutral", 1)]
    assert examples[0].text_pair == "An animal is moving."


def test_pawsx_dev_and_translated_train() -> None:
    dev = read_pawsx_tsv(fixture("pawsx_dev_2k.tsv"))
    assert [(e.id, e.label, e.label_name) for e in dev] == [("1", 0, "0"), ("2", 1, "1"), ("3", 1, "1")]
    assert dev[2].text == 'The "Blue" album was released in 1999.'
    train = read_pawsx_tsv(fixture("pawsx_translated_train.tsv"))  # two rows with an empty translation
    assert (len(train), train.skipped) == (3, 2)


def test_conllu_skips_multiword_tokens_and_empty_nodes() -> None:
    sentences = read_conllu(fixture("sample.conllu"))
    assert sentences[0] == TokenExample(
        id="s1", tokens=["Vamos", "nos", "a", "el", "mar", "."], tags=["VERB", "PRON", "ADP", "DET", "NOUN", "PUNCT"])
    # No sent_id comment: the id is the file name and the sentence's number.
    assert sentences[1] == TokenExample(
        id="sample.conllu:2", tokens=["Sleep", "well", "."], tags=["VERB", "ADV", "PUNCT"])
    assert read_conllu(fixture("sample.conllu"), column="xpos")[1].tags == ["vb", "rb", "."]


def test_conllu_reads_the_demo_pos_file_head(tmp_path: Path) -> None:
    demo = Path("/work/shared/data/tasks/brown-pos/dev.conllu")
    if not demo.exists():
        pytest.skip("demo data not present")
    head = tmp_path / "dev.conllu"
    with demo.open(encoding="utf-8") as source:
        lines = [next(source) for _ in range(400)]
    head.write_text("".join(lines[:max(i for i, line in enumerate(lines) if not line.strip()) + 1]))
    sentences = read_conllu(head)
    assert sentences and all(len(s.tokens) == len(s.tags) for s in sentences)
    assert {tag for s in sentences for tag in s.tags} <= {
        "NOUN", "VERB", "ADJ", "ADV", "PRON", "DET", "ADP", "NUM", "CONJ", "PRT", "PUNCT", "X"}


def test_squad_and_mlqa() -> None:
    train = read_squad(fixture("squad.train.json"))
    assert [e.id for e in train] == ["q-rhine-1", "q-rhine-2", "q-curie-1"]
    first = train[0]
    assert first.answers == ["the North Sea"]
    start = first.answer_starts[0]
    assert first.context[start:start + len(first.answers[0])] == "the North Sea"
    # MLQA's file has a second reference answer whose offset is one character off: fine for evaluation only.
    mlqa = fixture("test-context-de-question-de.json")
    assert_input_error(lambda: read_squad(mlqa), str(mlqa), "a1b2c3", "answer_start 64")
    (example,) = read_squad(mlqa, strict=False)
    assert example.answers == ["die Nordsee", "Nordsee"]


def test_generic_jsonl_infers_sorted_labels_and_fills_ids() -> None:
    examples = read_generic(fixture("generic.jsonl"))
    assert examples.labels == ["calc", "writer"]
    assert examples[0] == ClassificationExample(
        id="g1", text="Open the spreadsheet.", text_pair=None, label=0, label_name="calc")
    assert examples[1].id == "generic.jsonl:2" and examples[1].label == 1
    assert examples[2].text_pair == "Use a formula."


def test_generic_tsv_by_header_with_integer_labels_sorted_numerically() -> None:
    examples = read_generic(fixture("generic.tsv"))
    assert examples.labels == ["0", "1", "10"]
    assert [(e.label_name, e.label) for e in examples] == [("1", 1), ("0", 0), ("10", 2)]
    assert examples[0].text == "The cat sat." and examples[0].text_pair == "A cat was sitting."


def test_evaluation_file_read_with_training_labels() -> None:
    train = read_generic(fixture("generic.jsonl"))
    path = fixture("generic_unknown_label.jsonl")
    assert len(read_generic(path)) == 3  # alone, its labels are simply inferred
    assert_input_error(lambda: read_generic(path, train.labels), f"{path}:3", "'draw'", "calc, writer")


def test_multinli_training_evaluated_on_xnli_and_mismatched_formats_refused() -> None:
    from ds_minimodel.tasks.formats import TaskSpec, read_eval_examples, read_examples, task_labels

    train = read_examples("multinli", fixture("multinli.jsonl"), training=True)
    spec = TaskSpec(name="xnli", format="multinli", labels=task_labels("multinli", train))
    german = read_eval_examples(spec, "xnli", fixture("xnli.dev.tsv"), "de")
    assert [e.label_name for e in german] == ["neutral", "contradiction"]
    path = fixture("xnli.dev.tsv")
    assert_input_error(lambda: read_eval_examples(spec, "squad", path, "de"), str(path), "'squad'",
                       "trained as 'multinli' (sequence)", "generic")


def test_lohelp_real_lines() -> None:
    examples = read_lohelp(fixture("lohelp.train.en.jsonl"))
    assert examples.labels == list(LOHELP_LABELS) == sorted(LOHELP_LABELS)
    assert [e.label_name for e in examples] == ["scalc", "swriter", "simpress", "smath", "sdraw"]
    assert [e.label for e in examples] == [LOHELP_LABELS.index(e.label_name) for e in examples]
    assert examples[1].id == "swriter/00/00000404.html#par_id3149130"
    assert examples[1].text == "Choose Insert - More Breaks - Manual Break"
    assert read_generic(fixture("lohelp.train.en.jsonl")).labels == ["scalc", "sdraw", "simpress", "smath", "swriter"]


def test_registry_names_every_format() -> None:
    assert set(FORMATS) == {"generic", "multinli", "xnli", "pawsx", "conllu", "squad"}
    assert {f.main_metric for f in FORMATS.values()} == {"accuracy", "f1"}
    assert KIND_OF_FORMAT == {name: f.kind for name, f in FORMATS.items()}


# --- readers: malformed files --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, read, fragments", [
    ("xnli_bad_columns.tsv", lambda p: read_xnli_tsv(p, "de"), (":4:", "12 tab-separated columns", "header has 19")),
    ("xnli_bad_label.tsv", lambda p: read_xnli_tsv(p, "de"), (":5:", "'contradicts'", "entailment, neutral")),
    ("xnli_missing_column.tsv", lambda p: read_xnli_tsv(p, "de"), (":1:", "lacks column(s) sentence2")),
    ("multinli_missing_field.jsonl", read_multinli_jsonl, (":3:", "missing field 'gold_label'")),
    ("multinli_bad_json.jsonl", read_multinli_jsonl, (":4:", "bad JSON")),
    ("multinli_bad_label.jsonl", read_multinli_jsonl, (":1:", "unknown label 'entails'")),
    ("pawsx_bad_label.tsv", read_pawsx_tsv, (":3:", "unknown label '2'", "allowed labels: 0, 1")),
    ("pawsx_empty_dev_2k.tsv", read_pawsx_tsv, (":4:", "'sentence2' is empty")),
    ("conllu_bad_columns.conllu", read_conllu, (":6:", "8 tab-separated columns", "CoNLL-U has 10")),
    ("conllu_bad_id.conllu", read_conllu, (":8:", "ID 'three' is not an integer")),
    ("conllu_gap_id.conllu", read_conllu, (":16:", "ID 3 out of sequence, expected 2")),
    ("squad_mismatch.json", read_squad, ("question q-rhine-2", "'Basel' is not at answer_start 26")),
    ("squad_missing_field.json", read_squad, ("question q-curie-1", "missing field 'question'")),
    ("squad_bad_json.json", read_squad, (":6:", "bad JSON")),
    ("generic_missing_label.jsonl", read_generic, (":2:", "missing field 'label'")),
    ("generic_empty_text.jsonl", read_generic, (":3:", "'text' is empty")),
    ("generic_not_object.jsonl", read_generic, (":2:", "expected a JSON object, got list")),
    ("generic_bad_json.jsonl", read_generic, (":1:", "bad JSON")),
    ("generic_missing_column.tsv", read_generic, (":1:", "lacks column(s) text")),
    ("generic_bad_columns.tsv", read_generic, (":3:", "3 tab-separated columns", "header has 2")),
])
def test_malformed_file_names_file_line_and_problem(name: str, read, fragments: tuple[str, ...]) -> None:
    path = fixture(name)
    message = assert_input_error(lambda: read(path), str(path), *fragments)
    assert message.startswith(str(path))


def test_unknown_suffix_and_bad_bytes(tmp_path: Path) -> None:
    csv = tmp_path / "train.csv"
    shutil.copy(fixture("generic.tsv"), csv)
    assert_input_error(lambda: read_generic(csv), str(csv), "'.csv'")
    latin1 = tmp_path / "train.jsonl"
    latin1.write_bytes(b'{"text": "ok", "label": "a"}\n{"text": "caf\xe9", "label": "a"}\n')
    assert_input_error(lambda: read_generic(latin1), f"{latin1}:2:", "not UTF-8")
    assert_input_error(lambda: read_conllu(tmp_path / "missing.conllu"), "missing.conllu", "cannot read")


def test_a_training_file_with_one_label_is_refused_an_evaluation_file_is_not(tmp_path: Path) -> None:
    one = tmp_path / "train.jsonl"
    one.write_text('{"text": "a", "label": "x"}\n{"text": "b", "label": "x"}\n')
    assert_input_error(lambda: read_examples("generic", one, training=True), str(one),
                       "every training example has the label 'x'", "at least two labels")
    assert len(read_examples("generic", one, labels=["x", "y"])) == 2  # a test file may hold one label


# --- a tokenizer with Latin, accented, CJK and Arabic pieces -------------------------------------------------------

WORDS = [
    "the", "river", "flows", "through", "city", "north", "sea", "before", "reaches", "Basel", "Cologne", "Rhine",
    "answer", "question", "der", "Rhein", "fließt", "durch", "Straßburg", "Köln", "über", "Grüße", "Fähre",
    "café", "niño", "año", "señor", "Ángeles",
    "北京", "大学", "东京", "我们", "学习", "中文", "河流", "城市",
    "الكتاب", "المدرسة", "النهر", "يغادر", "القارب", "مدينة", "في",
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    folder = tmp_path_factory.mktemp("task_spm")
    rng = random.Random(0)
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) + "."
                                for _ in range(3000)) + "\n", encoding="utf-8")
    return Tokenizer.load(train_sentencepiece(corpus, folder / "spm", vocab_size=100, num_threads=1))


MIXED_CONTEXT = "Der Rhein fließt  durch Köln.  北京大学 学习中文。 الكتاب في المدرسة  café niño, Ángeles."


def test_offsets_are_characters_that_reproduce_each_piece(tokenizer: Tokenizer) -> None:
    ids, spans = qa.context_token_offsets(tokenizer, MIXED_CONTEXT)
    assert tokenizer.encode(MIXED_CONTEXT) == ids
    assert len(MIXED_CONTEXT) < len(MIXED_CONTEXT.encode("utf-8"))  # so byte offsets would be visibly wrong
    for id_, (begin, end) in zip(ids, spans):
        surface = MIXED_CONTEXT[begin:end]
        assert surface == surface.strip()  # the whitespace a "▁" stands for is trimmed
        if id_ == UNK_ID:
            assert len(surface) == 1  # unknown characters keep their own text
        else:
            assert surface == tokenizer.piece(id_).replace("▁", "")
    # The visible text of the pieces, in order, is the context without its whitespace.
    assert "".join(MIXED_CONTEXT[b:e] for b, e in spans) == "".join(MIXED_CONTEXT.split())


def test_byte_offsets_of_older_sentencepiece_convert_to_characters(tokenizer: Tokenizer) -> None:
    pytest.importorskip("google.protobuf")
    proto = tokenizer._sp.encode(MIXED_CONTEXT, out_type="proto")  # byte offsets, as 0.2.0's immutable_proto
    converted = qa._bytes_to_chars(MIXED_CONTEXT, [(p.begin, p.end) for p in proto.pieces])
    assert converted == qa._piece_offsets(tokenizer, MIXED_CONTEXT)[1]


def answer_text(window: qa.QAWindow) -> str:
    return window.context[window.offsets[window.start_position][0]:window.offsets[window.end_position][1]]


@pytest.mark.parametrize("context, question, answer", [
    ("The Rhine flows through Basel before it reaches the North Sea.", "Which sea?", "the North Sea"),
    ("Der Rhein fließt durch Straßburg und Köln.", "Welche Städte?", "Straßburg und Köln"),
    ("河流 城市 北京大学 东京。", "哪个大学？", "北京大学"),
    ("يغادر القارب النهر في المدينة", "ما الذي يغادر؟", "القارب"),
    ("señor café, niño año", "¿Quién?", "niño"),
])
def test_gold_answer_round_trips_through_its_token_span(tokenizer: Tokenizer, context: str, question: str,
                                                        answer: str) -> None:
    example = QAExample(id="q", question=question, context=context, answers=[answer],
                        answer_starts=[context.index(answer)])
    (window,) = qa.qa_features(example, tokenizer, max_len=128, doc_stride=16)
    assert 0 < window.start_position <= window.end_position
    assert answer_text(window) == answer
    n_question = len(tokenizer.encode(question))
    assert window.input_ids[:n_question + 3] == [BOS_ID, *tokenizer.encode(question), EOS_ID, EOS_ID]
    assert window.offsets[:n_question + 3] == [None] * (n_question + 3)


def test_long_context_windows_overlap_by_doc_stride(tokenizer: Tokenizer) -> None:
    rng = random.Random(1)
    sentences = [" ".join(rng.choices(WORDS[:30], k=8)) + "." for _ in range(30)]
    answer = "北京大学"
    context = " ".join(sentences[:25]) + f" {answer} " + " ".join(sentences[25:])
    example = QAExample(id="long", question="Welche?", context=context, answers=[answer],
                        answer_starts=[context.index(answer)])
    max_len, stride = 48, 12
    windows = qa.qa_features(example, tokenizer, max_len=max_len, doc_stride=stride, max_query_len=8)
    context_ids, spans = qa.context_token_offsets(tokenizer, context)
    assert len(windows) > 3
    prefix = 3 + len(tokenizer.encode("Welche?"))
    room = max_len - prefix - 1
    covered = []
    for number, window in enumerate(windows):
        assert len(window.input_ids) == len(window.attention_mask) == len(window.offsets) == max_len
        used = sum(window.attention_mask)
        assert window.input_ids[used - 1] == EOS_ID and all(i == PAD_ID for i in window.input_ids[used:])
        window_spans = [o for o in window.offsets if o is not None]
        first = number * (room - stride)  # each window starts `stride` tokens before the previous one ends
        assert window_spans == spans[first:first + room]
        assert window.input_ids[prefix:prefix + len(window_spans)] == context_ids[first:first + room]
        covered.extend(range(first, first + len(window_spans)))
        if window.start_position:
            assert answer_text(window) == answer
        else:
            assert window.end_position == 0  # answer not (wholly) in this window: both point at <s>
            inside = window_spans[0][0] <= example.answer_starts[0] < window_spans[-1][1]
            assert not inside or window_spans[-1][1] < example.answer_starts[0] + len(answer)
    assert sorted(set(covered)) == list(range(len(context_ids)))
    assert 1 <= sum(w.start_position > 0 for w in windows) < len(windows)
    batch = qa.stack_qa_windows(windows)
    assert batch["input_ids"].shape == (len(windows), max_len) and batch["input_ids"].dtype == np.int64
    assert batch["attention_mask"].dtype == bool
    assert batch["start_positions"].tolist() == [w.start_position for w in windows]


def test_window_too_small_for_the_stride_is_refused(tokenizer: Tokenizer) -> None:
    example = QAExample(id="x", question="Which sea?", context="the sea", answers=["sea"], answer_starts=[4])
    assert_input_error(lambda: qa.qa_features(example, tokenizer, max_len=24, doc_stride=16), "doc_stride=16")


def test_postprocess_picks_best_valid_span_across_windows(tokenizer: Tokenizer) -> None:
    context = " ".join(["river city north sea"] * 12) + " Köln Straßburg"
    examples = [QAExample(id="a", question="Wo?", context=context, answers=["Köln"],
                          answer_starts=[context.index("Köln")]),
                QAExample(id="b", question="Wo?", context="the north sea", answers=["sea"], answer_starts=[10])]
    windows = [w for e in examples for w in qa.qa_features(e, tokenizer, max_len=32, doc_stride=8)]
    assert len({w.example_id for w in windows}) == 2 and len(windows) > 3
    start = np.full((len(windows), 32), -100.0)
    end = np.full((len(windows), 32), -100.0)
    for row, window in enumerate(windows):
        if window.start_position:  # the gold span scores 5 + 5
            start[row, window.start_position] = end[row, window.end_position] = 5.0
    # Distractors that must lose: a higher score on <s> (not context), an end before its start, an overlong span.
    start[0, 0] = end[0, 0] = 50.0
    start[1, 20], end[1, 10] = 40.0, 40.0
    first = windows[2].offsets.index(next(o for o in windows[2].offsets if o is not None))
    assert windows[2].offsets[first + 10] is not None and windows[2].example_id == "a"
    start[2, first], end[2, first + 10] = 6.0, 6.0  # 11 tokens > max_answer_len
    answers = qa.postprocess_qa(windows, start, end, n_best=5, max_answer_len=10)
    assert answers == {"a": "Köln", "b": "sea"}
    # With nothing valid an example still gets an (empty) answer.
    none = qa.postprocess_qa(windows[:1], np.zeros((1, 32)), np.zeros((1, 32)), max_answer_len=0)
    assert none == {"a": ""}


# --- features ------------------------------------------------------------------------------------------------------


def test_classification_single_and_pair_layout(tokenizer: Tokenizer) -> None:
    examples = [ClassificationExample("1", "the river flows", None, 1, "b"),
                ClassificationExample("2", "der Rhein", "北京 大学", 0, "a")]
    features = classification_features(examples, tokenizer, max_len=24)
    a = tokenizer.encode("the river flows")
    b1, b2 = tokenizer.encode("der Rhein"), tokenizer.encode("北京 大学")
    single = [BOS_ID, *a, EOS_ID]
    pair = [BOS_ID, *b1, EOS_ID, EOS_ID, *b2, EOS_ID]
    assert features["input_ids"].tolist() == [single + [PAD_ID] * (24 - len(single)),
                                              pair + [PAD_ID] * (24 - len(pair))]
    assert features["attention_mask"].sum(axis=1).tolist() == [len(single), len(pair)]
    assert features["labels"].tolist() == [1, 0]
    assert (features["input_ids"].dtype, features["attention_mask"].dtype, features["labels"].dtype) == (
        np.int64, bool, np.int64)


def test_pair_truncation_is_longest_first(tokenizer: Tokenizer) -> None:
    long = " ".join(["river city north"] * 20)
    short = "北京 大学"
    examples = [ClassificationExample("1", long, short, 0, "a"), ClassificationExample("2", long, None, 0, "a")]
    features = classification_features(examples, tokenizer, max_len=16)
    row = features["input_ids"][0].tolist()
    b = tokenizer.encode(short)
    assert len(b) < 6  # the short side fits in its half, so only the long side is cut
    assert row == [BOS_ID, *tokenizer.encode(long)[:12 - len(b)], EOS_ID, EOS_ID, *b, EOS_ID]
    assert features["input_ids"][1].tolist() == [BOS_ID, *tokenizer.encode(long)[:14], EOS_ID]
    assert features["attention_mask"].all()


def test_longest_first_matches_one_token_at_a_time() -> None:
    def reference(la: int, lb: int, room: int) -> tuple[int, int]:
        while la + lb > room:  # HF's longest_first: drop from the longer, from the second on a tie
            if la > lb:
                la -= 1
            else:
                lb -= 1
        return la, lb

    for la in range(12):
        for lb in range(12):
            for room in range(2, 20):
                a, b = _truncate_longest_first(list(range(la)), list(range(lb)), room)
                assert (len(a), len(b)) == reference(la, lb, room)
                assert a == list(range(len(a))) and b == list(range(len(b)))  # cut from the end


def test_token_classification_labels_first_piece_of_each_word(tokenizer: Tokenizer) -> None:
    tags = ["NOUN", "VERB", "PROPN", "PUNCT"]
    words = ["Straßburg", "flows", "北京大学", "Köln", "."]
    example = TokenExample("s", words, ["PROPN", "VERB", "PROPN", "PROPN", "PUNCT"])
    features, truncated = token_classification_features([example], tokenizer, tags, max_len=64)
    pieces = [tokenizer.encode(w) for w in words]
    assert all(tokenizer.piece(p[0]).startswith("▁") for p in pieces)  # each word starts a "▁" word
    expected_ids = [BOS_ID] + [i for p in pieces for i in p] + [EOS_ID]
    expected_labels = [IGNORE_INDEX]
    for p, tag in zip(pieces, example.tags):
        expected_labels += [tags.index(tag)] + [IGNORE_INDEX] * (len(p) - 1)
    expected_labels += [IGNORE_INDEX]
    n = len(expected_ids)
    assert features["input_ids"][0, :n].tolist() == expected_ids
    assert (features["input_ids"][0, n:] == PAD_ID).all()
    assert features["labels"][0, :n].tolist() == expected_labels
    assert (features["labels"][0, n:] == IGNORE_INDEX).all()
    assert features["attention_mask"][0].sum() == n and truncated == 0


def test_token_classification_truncation_counts_words(tokenizer: Tokenizer) -> None:
    words = ["river"] * 10
    example = TokenExample("s", words, ["NOUN"] * 10)
    per_word = len(tokenizer.encode("river"))
    max_len = 2 + 4 * per_word
    features, truncated = token_classification_features([example], tokenizer, ["NOUN"], max_len=max_len)
    assert truncated == 6
    assert (features["labels"][0] == 0).sum() == 4
    assert features["input_ids"][0, -1] == EOS_ID
    assert_input_error(lambda: token_classification_features(
        [TokenExample("s7", ["river"], ["VERB"])], tokenizer, ["NOUN"]), "s7", "'VERB'", "NOUN")


# --- trivial baselines ------------------------------------------------------------------------------------------------


def test_majority_and_bag_of_words_baselines(tmp_path: Path) -> None:
    from ds_minimodel.tasks.baselines import baselines
    from ds_minimodel.tasks.formats import TaskSpec
    from ds_minimodel.tasks.readers import ClassificationExample, TokenExample

    def cls(text: str, label: int) -> ClassificationExample:
        return ClassificationExample(id=text, text=text, text_pair=None, label=label, label_name=str(label))

    train = [cls("sum of cells in a sheet", 0), cls("the cell formula", 0), cls("a macro module", 1),
             cls("sheet cells", 0)]
    test = [cls("Cells of the SHEET", 0), cls("macro", 1), cls("module in a macro", 1), cls("unseen words", 0)]
    # majority (label 0): 2 of 4; Naive Bayes gets the first three by their words and the last by the prior.
    assert baselines(train, test) == {"majority": 50.0, "bag_of_words": 100.0}
    tagged = [TokenExample(id="a", tokens=["x", "y", "z"], tags=["NOUN", "NOUN", "VERB"])]
    assert baselines(tagged, [TokenExample(id="b", tokens=["p", "q"], tags=["NOUN", "DET"])]) == {"majority": 50.0}
    with pytest.raises(InputError, match="unknown pooling 'max'"):
        TaskSpec(name="t", format="generic", pooling="max")


def test_batches_are_cut_to_their_longest_input_and_predictions_do_not_change() -> None:
    import torch

    from ds_minimodel.config import ModelConfig
    from ds_minimodel.data.streams import ArrayStream, trim_padding
    from ds_minimodel.model.encoder import TaskModel
    from ds_minimodel.tasks.formats import predict

    rng = np.random.default_rng(0)
    lengths = np.array([3, 7, 13, 2])
    ids = np.ones((4, 20), dtype=np.int64)  # PAD_ID 1
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(5, 50, n)
    arrays = {"input_ids": ids, "attention_mask": ids != 1, "labels": np.arange(4),
              "tags": np.where(ids != 1, 1, -100)}
    cut = trim_padding(arrays)  # the longest input, 13, rounded up to a multiple of WIDTH_MULTIPLE (8), at most 20
    assert cut["input_ids"].shape == (4, 16) and cut["tags"].shape == (4, 16) and cut["labels"].shape == (4,)
    assert trim_padding({k: v[[0, 3]] for k, v in arrays.items()})["input_ids"].shape == (2, 8)
    assert trim_padding({k: v[[1]] for k, v in arrays.items()})["input_ids"].shape == (1, 8)
    assert trim_padding(arrays, multiple=1)["input_ids"].shape == (4, 13)  # as cut
    assert trim_padding(arrays, multiple=16)["tags"].shape == (4, 16)
    stream = ArrayStream(arrays, micro_batch_size=2, world_size=1, rank=0, seed=1, source="t")
    batch = next(iter(stream))
    assert batch["input_ids"].shape[1] == min(20, -(-max(lengths[batch["labels"].numpy()]) // 8) * 8)
    cfg = ModelConfig(vocab_size=50, hidden_size=16, num_layers=2, num_heads=2, ffn_size=32, max_positions=20)
    for kind in ("sequence", "token"):
        torch.manual_seed(0)
        model = TaskModel(cfg, kind, 3, pooling="mean" if kind == "sequence" else "cls")
        full = model.eval()(torch.from_numpy(ids), torch.from_numpy(ids != 1)).detach().numpy()
        got = predict(model, arrays, batch_size=2)
        assert got.shape == full.shape
        real = (ids != 1) if kind == "token" else np.ones(4, dtype=bool)
        assert np.allclose(got[real], full[real], atol=1e-5)


@pytest.mark.gpu
def test_predictions_on_the_gpu_match_the_cpu() -> None:
    """Step 4 moves a task model to the GPU where there is one (``evaluate.predict_zero_shot``): the same logits."""

    from ds_minimodel.config import ModelConfig
    from ds_minimodel.model.encoder import TaskModel
    from ds_minimodel.tasks.formats import predict

    rng = np.random.default_rng(0)
    ids = np.ones((6, 16), dtype=np.int64)
    for row, n in enumerate([3, 16, 5, 2, 9, 12]):
        ids[row, :n] = rng.integers(5, 50, n)
    arrays = {"input_ids": ids, "attention_mask": ids != 1}
    cfg = ModelConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=2, ffn_size=64, max_positions=16)
    model = TaskModel(cfg, "sequence", 3)
    on_cpu = predict(model, arrays, batch_size=4)
    on_gpu = predict(model.to("cuda"), arrays, batch_size=4)
    assert np.allclose(on_cpu, on_gpu, atol=1e-4), np.abs(on_cpu - on_gpu).max()
