"""Any sandboxed environment as a standard ``gymnasium.Env`` with ``Text`` spaces.

The adapter owns a :class:`JailedSession` and restarts it when a failure killed the jail.
A failed ``step`` ends the episode (``truncated=True``) with ``info["failure"]`` set, so
gymnasium tools see data, not an exception; a failed ``reset`` raises :class:`EnvFailure`.
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym
from gymnasium.spaces import Text

from spade.sandbox.failures import EnvFailure
from spade.sandbox.policy import SandboxPolicy
from spade.sandbox.session import JailedSession

_SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n"


class UnicodeText(Text):
    """A ``Text`` space that contains any ``str`` within its length bounds.

    Observations are free text (unicode, punctuation, newlines), which gymnasium's charset
    test would reject; sampling still draws from a printable ASCII charset.
    """

    def __init__(self, max_length: int, min_length: int = 0) -> None:
        super().__init__(max_length=max_length, min_length=min_length, charset=_SAMPLE_CHARSET)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


class SandboxedTextEnv(gym.Env[str, str]):
    """A designed environment, run in the jail, behind gymnasium's API.

    ``reset(options={"hint": ...})`` appends the hint to the first observation.
    """

    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium declares it an instance attribute)

    def __init__(
        self,
        code: str,
        *,
        policy: SandboxPolicy,
        max_turns: int = 25,
        max_action_length: int = 4096,
    ) -> None:
        self._code = code
        self._policy = policy
        self._max_turns = max_turns
        self._session: JailedSession | None = None
        self.observation_space = UnicodeText(max_length=self._policy.limits.max_message_bytes)
        self.action_space = UnicodeText(max_length=max_action_length)

    def _live(self) -> JailedSession:
        if self._session is None or not self._session.alive:
            if self._session is not None:
                self._session.close()
            self._session = JailedSession(
                self._code, policy=self._policy, env_kwargs={"max_turns": self._max_turns}
            )
            self._session.start()
        return self._session

    @property
    def session(self) -> JailedSession:
        return self._live()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        hint = options.pop("hint", None)
        return self._live().reset(seed, hint=hint, options=options or None)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        try:
            return self._live().step(action)
        except EnvFailure as exc:  # the design broke mid-episode: end it, report as data
            return "", 0.0, False, True, {"failure": exc.failure.to_dict()}

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
        super().close()
