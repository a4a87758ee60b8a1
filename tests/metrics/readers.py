"""Reading back what the sinks and the exporter wrote: W&B offline run files, Prometheus
scrapes. Test helpers only."""

from __future__ import annotations

import json
import struct
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# W&B's transaction log (`run-<id>.wandb`) is LevelDB's log format with its own file header:
# 32 KiB blocks of records, each with a 7-byte header (crc32, length, type); a record that does
# not fit a block is split FIRST / MIDDLE / LAST. Each full record is a wandb Record protobuf.
_BLOCK = 32768
_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _log_records(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    ident, _magic, _version = struct.unpack("<4sHB", data[:_HEADER])
    assert ident == b":W&B", f"{path}: not a W&B transaction log"
    offset, pending = _HEADER, b""
    while offset + _HEADER <= len(data):
        left = _BLOCK - offset % _BLOCK
        if left < _HEADER:  # the block's zero-padded tail
            offset += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[offset : offset + _HEADER])
        offset += _HEADER
        chunk = data[offset : offset + length]
        offset += length
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk


@dataclass
class OfflineRun:
    """One offline run folder: its run id and its history rows (step -> values)."""

    folder: Path
    run_id: str = ""
    project: str = ""
    history: dict[int, dict[str, Any]] = field(default_factory=dict)

    def table(self, step: int, key: str) -> list[dict[str, Any]]:
        """The rows of the table logged as ``key`` at ``step``, from the JSON the offline run
        wrote under ``files/media/table/`` (its history row holds the path)."""
        row = self.history[step]
        assert row[f"{key}/_type"] == "table-file", row
        table = json.loads((self.folder / "files" / row[f"{key}/path"]).read_text())
        return [dict(zip(table["columns"], values, strict=True)) for values in table["data"]]


def offline_runs(wandb_dir: Path) -> list[OfflineRun]:
    """Every ``offline-run-*`` folder under ``wandb_dir/wandb``, oldest first."""
    from wandb.proto import wandb_internal_pb2 as pb

    runs = []
    for folder in sorted((wandb_dir / "wandb").glob("offline-run-*")):
        run = OfflineRun(folder)
        for raw in _log_records(next(folder.glob("run-*.wandb"))):
            record = pb.Record()
            record.ParseFromString(raw)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run.run_id, run.project = record.run.run_id, record.run.project
            elif kind == "history":
                row = {
                    "/".join(item.nested_key) or item.key: json.loads(item.value_json)
                    for item in record.history.item
                }
                run.history[int(row["_step"])] = row
        runs.append(run)
    return runs


# ---- TensorBoard ----------------------------------------------------------------------------


def text_tables(log_dir: Path, tag: str) -> dict[int, list[list[str]]]:
    """The 2-D text summaries ``tag`` in the event files of ``log_dir``: step -> cells (rows of
    markdown strings, as TensorBoard's text tab renders them); none when nothing has that tag."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})  # 0: keep every step
    acc.Reload()
    out: dict[int, list[list[str]]] = {}
    for event in acc.Tensors(tag) if tag in acc.Tags()["tensors"] else []:
        cells = tensor_util.make_ndarray(event.tensor_proto)
        out[event.step] = [[c.decode() for c in row] for row in cells]
    return out


# ---- Prometheus ------------------------------------------------------------------------------


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample on ``http://127.0.0.1:port/metrics``: (name, labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    """The sample ``name{labels}`` (0 when absent: a labelled series appears on first use)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def sample_names(samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> set[str]:
    return {name for name, _labels in samples}
