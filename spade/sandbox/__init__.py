"""The nsjail sandbox: policy, jail configuration, persistent sessions and failure classification.

Untrusted (LLM-written) code runs only through :class:`JailedSession`; nothing here executes
it in the calling process.
"""

from spade.sandbox.failures import EnvFailure
from spade.sandbox.policy import SandboxPolicy, load_policy
from spade.sandbox.replies import SessionInfo
from spade.sandbox.session import JailedSession

__all__ = [
    "EnvFailure",
    "JailedSession",
    "SandboxPolicy",
    "SessionInfo",
    "load_policy",
]
