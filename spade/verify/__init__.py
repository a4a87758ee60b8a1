"""The environment verifier: named checks, run in order in the sandbox, with reasons."""

from spade.verify.checks import CHECKS
from spade.verify.config import VerifyConfig
from spade.verify.novelty import Reference
from spade.verify.verifier import CheckResult, Verdict, verify, verify_file

__all__ = [
    "CHECKS",
    "CheckResult",
    "Reference",
    "Verdict",
    "VerifyConfig",
    "verify",
    "verify_file",
]
