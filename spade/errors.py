"""Errors named by the boundary they cross.

A broken generated environment is *data* (see :class:`spade.records.Failure`), not
one of these. These errors mean our own set-up or input is wrong and should fail loudly.
"""


class SpadeError(Exception):
    """Base class of every error raised by the spade package itself."""


class ConfigError(SpadeError):
    """A configuration file or value is invalid."""


class ConfigValueError(ConfigError, ValueError):
    """A configured value the code cannot take, found where it is used (a held-out subset the
    suite does not have); also a ValueError, as pydantic validators and callers expect."""


class SandboxError(SpadeError):
    """The sandbox itself cannot run (nsjail missing, policy unusable, host misconfigured)."""


class DesignParseError(SpadeError):
    """A designer completion or environment file cannot be turned into a design."""


class InferenceError(SpadeError):
    """Inference cannot be trusted: a backend or server cannot serve (set-up problem: a launch,
    adapter load or listing failed), or too many requests of one stage failed.

    A single request that fails is *data* (:class:`spade.inference.base.InferenceFailure`),
    counted and left out of what is measured; past a threshold (``evaluation.max_failed_share``
    of an environment's plays, ``designer.max_failed_share`` of a design or repair batch, or
    any hint request that leaves a design without a hint) the stage raises this, so that
    Prefect retries it instead of storing numbers made of an outage.
    """


class CheckpointError(SpadeError):
    """A training checkpoint is incomplete or corrupt (missing manifest or file, bad checksum)."""


class TrainingError(SpadeError):
    """A training update could not be made: a rank of a multi-rank stage failed (the message
    carries its log's tail) or the launcher gave no result."""


class StorageError(SpadeError):
    """The object store is unusable or holds corrupt data (unreachable, bad blob checksum)."""


class ObjectMissingError(StorageError, FileNotFoundError):
    """An object the store should hold is absent; the message names it.

    Also a FileNotFoundError, which callers that treat "absent" as a normal case catch.
    """


class ObjectCorruptError(StorageError, ValueError):
    """An object is stored but unreadable: not the JSON it should be, or not the size and
    sha256 its manifest recorded; the message names it. Also a ValueError (a decode error)."""


class InvalidKeyError(StorageError, ValueError):
    """A key, campaign id or blob digest the store does not take (a user's campaign id, a
    reference read back from a manifest); the message says which rule. Also a ValueError."""


class LeaseHeldError(StorageError):
    """Another run holds the campaign's lease: one campaign id runs once at a time."""
