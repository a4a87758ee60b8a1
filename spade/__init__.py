"""SPADE: self-play in adaptive, LLM-designed executable environments.

Importing ``spade`` is deliberately cheap (no torch, no Prefect, no pydantic): the
subpackages are imported where they are used. ``spade.envs`` must stay importable by the
jailed interpreter (Debian's Python 3.11, standard library only).
"""

__version__ = "0.1.0"
