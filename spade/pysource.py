"""Parsing a design's Python source on the host: the syntax tree only, never run, and quiet.

The compiler warns about some source it still accepts (``SyntaxWarning: invalid escape
sequence '\\s'`` in a regex the model wrote as a plain string); those warnings belong to the
design, whose verdict and prompt already judge it, not to the log of whoever runs the campaign.
"""

from __future__ import annotations

import ast
import warnings

PARSE_ERRORS = (SyntaxError, ValueError, RecursionError, MemoryError)
"""What :func:`parse_module` raises for source that does not parse: a syntax error, NUL bytes
(ValueError on some Pythons), absurd nesting (RecursionError, MemoryError)."""


def parse_module(code: str, filename: str = "<design>") -> ast.Module:
    """``ast.parse(code)`` without the compiler's warnings; raises one of
    :data:`PARSE_ERRORS` for source that does not parse."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # the compiler's other kind
        return ast.parse(code, filename=filename)
