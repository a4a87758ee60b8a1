"""Grounding documents: every corpus format, filtering, truncation and seeded sampling."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from spade.config import CorpusConfig
from spade.designer.corpus import BUILTIN_WIKI, Corpus, Document
from spade.errors import ConfigError


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def load(path, **kw) -> Corpus:
    return Corpus.load(CorpusConfig(path=str(path), **kw))


def write_jsonl(path: Path, records: Sequence[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


DOCS = [f"Document {i} about {words(25, f'd{i}x')}" for i in range(5)]


# ----------------------------------------------------------------------------- formats


def test_jsonl_with_text(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": t} for t in DOCS])
    corpus = load(path)
    assert len(corpus) == 5
    assert [d.text for d in corpus.documents] == DOCS  # file order
    assert [d.doc_id for d in corpus.documents] == ["0", "1", "2", "3", "4"]


def test_jsonl_ids_and_blank_lines(tmp_path):
    path = tmp_path / "c.json"  # .json is read as JSON lines too
    path.write_text(
        json.dumps({"id": "alpha", "text": DOCS[0]}) + "\n\n   \n" + json.dumps({"text": DOCS[1]})
    )
    corpus = load(path)
    assert [d.doc_id for d in corpus.documents] == ["alpha", "1"]


def test_jsonl_with_only_orig_doc(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"orig_doc": t, "other": 1} for t in DOCS])
    assert [d.text for d in load(path).documents] == DOCS


def test_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": [f"p{i}" for i in range(5)], "text": DOCS}), path)
    corpus = load(path)
    assert [d.doc_id for d in corpus.documents] == [f"p{i}" for i in range(5)]
    assert [d.text for d in corpus.documents] == DOCS


def test_datasets_folder(tmp_path):
    import datasets

    folder = tmp_path / "ds"
    datasets.Dataset.from_dict({"orig_doc": DOCS, "n": list(range(5))}).save_to_disk(str(folder))
    corpus = load(folder)
    assert [d.text for d in corpus.documents] == DOCS
    assert load(folder, format="datasets").documents == corpus.documents


def test_datasets_dict_folder_reads_its_rows_or_fails_loudly(tmp_path):
    import datasets

    folder = tmp_path / "dd"
    split = datasets.Dataset.from_dict({"text": DOCS})
    datasets.DatasetDict({"train": split}).save_to_disk(str(folder))
    try:
        corpus = load(folder)
    except ConfigError:
        return  # refusing it loudly is fine too
    assert sorted(d.text for d in corpus.documents) == sorted(DOCS)


def test_folder_of_text_files(tmp_path):
    folder = tmp_path / "txt"
    (folder / "sub").mkdir(parents=True)
    for i, text in enumerate(DOCS[:3]):
        (folder / f"{i}.txt").write_text(text)
    (folder / "sub" / "deep.txt").write_text(DOCS[3])
    corpus = load(folder)
    assert len(corpus) == 4
    assert sorted(d.text for d in corpus.documents) == sorted(DOCS[:4])
    assert all(d.doc_id.endswith(".txt") for d in corpus.documents)  # named by file


def test_single_text_file(tmp_path):
    path = tmp_path / "one.txt"
    path.write_text(DOCS[0])
    assert [d.text for d in load(path).documents] == [DOCS[0]]


def test_builtin_wiki():
    corpus = Corpus.load(CorpusConfig(path=BUILTIN_WIKI))
    assert len(corpus) > 9000
    doc = corpus.documents[0]
    title, _, body = doc.text.partition("\n\n")
    assert title and title == doc.doc_id
    assert len(body.split()) >= 20
    assert len({d.doc_id for d in corpus.documents}) == len(corpus)


def test_default_corpus_is_the_builtin_wiki():
    assert CorpusConfig().path == BUILTIN_WIKI


# ----------------------------------------------------------------------------- s3 (moto)


@pytest.fixture
def corpus_bucket(s3_bucket):
    """A fresh bucket holding corpus.jsonl; its name."""
    body = "".join(json.dumps({"id": f"s{i}", "text": t}) + "\n" for i, t in enumerate(DOCS))
    s3_bucket.client.put_object(Bucket=s3_bucket.name, Key="corpus.jsonl", Body=body.encode())
    return s3_bucket.name


def test_s3_jsonl_through_storage_options(moto_endpoint, corpus_bucket):
    cfg = CorpusConfig(
        path=f"s3://{corpus_bucket}/corpus.jsonl",
        storage_options={"endpoint_url": moto_endpoint, "key": "testing", "secret": "testing"},
    )
    corpus = Corpus.load(cfg)
    assert [d.doc_id for d in corpus.documents] == [f"s{i}" for i in range(5)]
    assert [d.text for d in corpus.documents] == DOCS


def test_s3_missing_object_is_a_config_error(moto_endpoint, corpus_bucket):
    cfg = CorpusConfig(
        path=f"s3://{corpus_bucket}/absent.jsonl", storage_options={"endpoint_url": moto_endpoint}
    )
    with pytest.raises(ConfigError, match="not found"):
        Corpus.load(cfg)


def test_s3_client_kwargs_form_of_the_endpoint(moto_endpoint, corpus_bucket):
    cfg = CorpusConfig(
        path=f"s3://{corpus_bucket}/corpus.jsonl",
        storage_options={"client_kwargs": {"endpoint_url": moto_endpoint}},
    )
    assert len(Corpus.load(cfg)) == 5


def test_s3_datasets_folder_through_storage_options(s3_bucket, tmp_path):
    import datasets

    folder = tmp_path / "ds"
    datasets.Dataset.from_dict({"text": DOCS, "id": [f"d{i}" for i in range(5)]}).save_to_disk(
        str(folder)
    )
    for file in folder.iterdir():  # upload the saved folder as it is
        s3_bucket.client.upload_file(str(file), s3_bucket.name, f"corpora/ds/{file.name}")
    cfg = CorpusConfig(
        path=f"s3://{s3_bucket.name}/corpora/ds", storage_options=s3_bucket.storage_options
    )
    corpus = Corpus.load(cfg)
    assert [d.doc_id for d in corpus.documents] == [f"d{i}" for i in range(5)]
    picks = corpus.sample(random.Random(0), 3)
    assert len({d.doc_id for d in picks}) == 3 and all(d.text in DOCS for d in picks)
    assert Corpus.load(cfg.model_copy(update={"format": "datasets"})).documents == corpus.documents


# ----------------------------------------------------------------------------- fields, filters


def test_min_words_filters_short_documents(tmp_path):
    records = [{"text": words(n)} for n in (0, 5, 19, 20, 21, 100)]
    path = write_jsonl(tmp_path / "c.jsonl", records)
    assert [len(d.text.split()) for d in load(path).documents] == [20, 21, 100]  # default 20
    assert len(load(path, min_words=0)) == 5  # an empty text is never a document
    assert len(load(path, min_words=50)) == 1


def test_text_fields_are_tried_in_order(tmp_path):
    path = write_jsonl(
        tmp_path / "c.jsonl",
        [
            {"text": "T " + words(30), "orig_doc": "O " + words(30)},
            {"orig_doc": "O " + words(30)},
            {"text": None, "orig_doc": "O " + words(30)},  # a non-string is skipped
            {"text": 42, "body": "B " + words(30)},
            {"title": "no usable field"},
        ],
    )
    default = [d.text[0] for d in load(path).documents]
    assert default == ["T", "O", "O"]
    swapped = [d.text[0] for d in load(path, text_fields=["orig_doc", "text"]).documents]
    assert swapped == ["O", "O", "O"]
    custom = [d.text[0] for d in load(path, text_fields=["body", "text"]).documents]
    assert custom == ["T", "B"]
    # ids stay the record index, counted over every record (skipped ones too)
    assert [d.doc_id for d in load(path, text_fields=["body", "text"]).documents] == ["0", "3"]


def test_truncation_by_words():
    doc = Document("d", words(100))
    cut = doc.truncated(10)
    assert cut.text == words(10) and cut.doc_id == "d"
    assert doc.truncated(100) is doc and doc.truncated(1000) is doc
    assert len(doc.truncated(99).text.split()) == 99


# ----------------------------------------------------------------------------- sampling


@pytest.fixture
def corpus10() -> Corpus:
    return Corpus([Document(str(i), f"doc {i}") for i in range(10)])


def test_sampling_is_reproducible(corpus10):
    a = [d.doc_id for d in corpus10.sample(random.Random(3), 7)]
    b = [d.doc_id for d in corpus10.sample(random.Random(3), 7)]
    c = [d.doc_id for d in corpus10.sample(random.Random(4), 7)]
    assert a == b
    assert a != c


def test_no_document_repeats_until_the_corpus_is_exhausted(corpus10):
    picks = [d.doc_id for d in corpus10.sample(random.Random(0), 25)]
    assert len(picks) == 25
    assert len(set(picks[:10])) == 10  # a full pass first
    assert len(set(picks[10:20])) == 10  # then another full pass
    assert len(set(picks[20:])) == 5
    assert len(set(corpus10.sample(random.Random(1), 10))) == 10


def test_sampling_is_uniform(corpus10):
    rng = random.Random(0)
    counts = Counter(d.doc_id for _ in range(5000) for d in corpus10.sample(rng, 1))
    assert set(counts) == {str(i) for i in range(10)}
    assert all(400 <= c <= 600 for c in counts.values()), counts  # expected 500 each


def test_sampling_zero_documents(corpus10):
    assert corpus10.sample(random.Random(0), 0) == []


# ----------------------------------------------------------------------------- bad input


def test_missing_path_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load(tmp_path / "nope.jsonl")


def test_empty_corpus_is_a_config_error(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ConfigError, match="no usable documents"):
        load(empty)
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(ConfigError, match="no usable documents"):
        load(tmp_path / "empty_dir")
    too_short = write_jsonl(tmp_path / "short.jsonl", [{"text": "three short words"}])
    with pytest.raises(ConfigError, match="no usable documents"):
        load(too_short)
    wrong_field = write_jsonl(tmp_path / "field.jsonl", [{"body": words(50)}])
    with pytest.raises(ConfigError, match="no usable documents"):
        load(wrong_field)
    with pytest.raises(ConfigError):
        Corpus([])


def test_malformed_jsonl_is_a_config_error(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"text": DOCS[0]}) + '\n{"text": "unterminated\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl"):
        load(path)


def test_jsonl_line_that_is_not_an_object_is_a_config_error(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"text": DOCS[0]}) + '\n"just a string"\n[1, 2]\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl"):
        load(path)


def test_malformed_parquet_is_a_config_error(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"this is not parquet at all")
    with pytest.raises(ConfigError, match=r"bad\.parquet"):
        load(path)


def test_invalid_utf8_jsonl_is_a_config_error(tmp_path):
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"text": "caf\xe9 ' + words(30).encode() + b'"}\n')
    with pytest.raises(ConfigError):
        load(path)


def test_unknown_protocol_is_a_config_error():
    with pytest.raises(ConfigError, match="nosuchproto"):
        Corpus.load(CorpusConfig(path="nosuchproto://bucket/x.jsonl"))
