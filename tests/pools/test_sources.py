"""Reading published pools (``spade.pools.sources``): each layout, local and on S3, and every
declared checksum checked (a mismatch or a missing file is a rejection, never silent)."""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spade.errors import ConfigError
from spade.pools import read_source
from tests.pools.builders import games_pool, rows, sha256, sources


def _codes(found) -> dict[str, str | None]:
    return {e.name: e.code for e in found.envs}


def test_a_games_folder_is_read_with_its_checksums_and_manifest(tmp_path):
    envs = sources()
    found = read_source(str(games_pool(tmp_path / "pool", envs)))
    assert found.layout == "games folder with checksums.sha256, manifest.jsonl"
    assert _codes(found) == envs
    assert all(e.problem is None and e.declared_sha256 == e.sha256 for e in found.envs)
    assert all(e.meta["win_rate"] == 0.5 and "sha256" not in e.meta for e in found.envs)


def test_a_checksum_mismatch_and_a_missing_file_are_rejections(tmp_path):
    envs = sources()
    root = games_pool(tmp_path / "pool", envs, tamper="game_switchboard")
    (root / "games" / "game_code_breaker.py").unlink()
    by_name = {e.name: e for e in read_source(str(root)).envs}
    tampered = by_name["game_switchboard"]
    assert tampered.problem == "checksum" and sha256(envs["game_switchboard"]) in tampered.reason
    assert "checksums.sha256" in tampered.reason
    missing = by_name["game_code_breaker"]
    assert missing.problem == "missing" and missing.code is None
    assert missing.reason == "games/game_code_breaker.py is listed in checksums.sha256 but absent"
    assert sum(e.problem is None for e in by_name.values()) == len(envs) - 2


def test_checksums_of_the_pools_other_files_are_checked_and_bare_names_match(tmp_path):
    """As `sha256sum` over the whole download writes it: the manifest listed too, a game by
    its bare name; a corrupt manifest refuses the pool (its metadata would be trusted)."""
    envs = sources()
    root = games_pool(tmp_path / "pool", envs)
    manifest = (root / "manifest.jsonl").read_bytes()
    lines = [f"{sha256(c)}  {n}.py\n" for n, c in envs.items()]
    lines.append(f"{hashlib.sha256(manifest).hexdigest()}  manifest.jsonl\n")
    (root / "checksums.sha256").write_text("".join(lines))
    found = read_source(str(root))
    assert all(e.problem is None and e.declared_sha256 == e.sha256 for e in found.envs)
    assert _codes(found) == envs
    (root / "manifest.jsonl").write_bytes(manifest + b"\n")
    with pytest.raises(ConfigError, match=r"manifest\.jsonl: sha256 .* the pool's own files"):
        read_source(str(root))


def test_a_manifest_sha256_alone_is_checked_too(tmp_path):
    root = games_pool(tmp_path / "pool", sources(), tamper="game_fixed")
    (root / "checksums.sha256").unlink()
    by_name = {e.name: e for e in read_source(str(root)).envs}
    assert by_name["game_fixed"].problem == "checksum"
    assert "manifest.jsonl" in by_name["game_fixed"].reason


def test_jsonl_parquet_and_dataset_folders_give_the_same_environments(tmp_path):
    import datasets

    envs = sources()
    table = pa.Table.from_pylist(rows(envs))
    (tmp_path / "pool.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(envs)))
    (tmp_path / "shards").mkdir()
    pq.write_table(table.slice(0, 2), tmp_path / "shards" / "part-0.parquet")
    pq.write_table(table.slice(2), tmp_path / "shards" / "part-1.parquet")
    (tmp_path / "hub" / "data").mkdir(parents=True)
    pq.write_table(table, tmp_path / "hub" / "data" / "train-00000-of-00001.parquet")
    datasets.Dataset(table).save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"train": datasets.Dataset(table)}).save_to_disk(str(tmp_path / "dict"))
    for where, layout in [
        ("pool.jsonl", "shard set"),
        ("shards", "shard set"),
        ("hub", "hub dataset folder"),
        ("saved", "Hugging Face dataset (save_to_disk)"),
        ("dict", "Hugging Face dataset (save_to_disk)"),
    ]:
        found = read_source(str(tmp_path / where))
        assert (found.layout, _codes(found)) == (layout, envs), where
        assert all(e.problem is None and e.meta["skill"] == "x" for e in found.envs)


def test_a_row_with_a_wrong_sha256_or_no_code_is_a_rejection(tmp_path):
    bad = rows(sources())
    bad[0]["sha256"] = "0" * 64
    del bad[1]["code"]
    (tmp_path / "pool.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bad))
    envs = read_source(str(tmp_path / "pool.jsonl")).envs
    assert (envs[0].problem, envs[1].problem) == ("checksum", "no_code")
    assert envs[1].reason == "pool.jsonl:2: no code / env_code / source"
    assert all(e.problem is None for e in envs[2:])


def test_a_pool_on_s3_reads_as_the_same_pool_on_disk(tmp_path, s3_bucket):
    envs = sources()
    root = games_pool(tmp_path / "pool", envs, tamper="game_broken")
    for path in root.rglob("*"):
        if path.is_file():
            key = f"pools/ref/{path.relative_to(root)}"
            s3_bucket.client.put_object(Bucket=s3_bucket.name, Key=key, Body=path.read_bytes())
    far = read_source(f"s3://{s3_bucket.name}/pools/ref", s3_bucket.storage_options)
    near = read_source(str(root))
    assert far.layout == near.layout and _codes(far) == _codes(near) == {
        n: c + ("# edited\n" if n == "game_broken" else "") for n, c in envs.items()
    }
    assert [e.problem for e in far.envs] == [e.problem for e in near.envs]
    assert {e.name for e in far.envs if e.problem} == {"game_broken"}


def test_nothing_there_or_no_pool_layout_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no environment pool at"):
        read_source(str(tmp_path / "nowhere"))
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ConfigError, match="no environment pool layout"):
        read_source(str(tmp_path))
