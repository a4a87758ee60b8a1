"""The environment verifier: named checks, run in order in the sandbox, with reasons."""

from spade.verify.checks import CHECKS
from spade.verify.novelty import Reference
from spade.verify.verifier import verify, verify_file

__all__ = [
    "CHECKS",
    "Reference",
    "verify",
    "verify_file",
]
