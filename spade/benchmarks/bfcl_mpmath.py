"""A stand-in for the part of mpmath BFCL's MathAPI uses, for the jail (mpmath is not there).

``MathAPI.logarithm`` sets ``mpmath.mp.dps``, divides two ``mpmath.log`` results and returns
the mpf, which BFCL records as ``str({'result': mpf('4.51947')})``. Ground truth reuses those
digits (``echo(content='4.51947', ...)`` follows a logarithm in long_context_32), so the
result must print as mpmath prints it: the logs are rounded to the context's binary precision
(round-half-even, like mpmath's default), the quotient too, and ``repr`` follows mpmath's
``to_str`` at ``repr_dps`` digits. The logarithms come from ``decimal`` with 30 guard digits,
exact rationals do the rest. Shipped as text into tasks that involve MathAPI (standard
library only, Python 3.11); the host imports it only for tests.
"""

import decimal
from fractions import Fraction
from typing import Any

_BITS_PER_DIGIT = 3.3219280948873626  # mpmath.libmp.libmpf's constant
_MAX_DPS = 1000  # an absurd requested precision would only stall the jail's call


class MpContext:
    """``mpmath.mp``: a binary precision, read and set in decimal digits as mpmath does."""

    def __init__(self) -> None:
        self.prec = 53

    @property
    def dps(self) -> int:
        return max(1, round(self.prec / _BITS_PER_DIGIT) - 1)

    @dps.setter
    def dps(self, n: Any) -> None:
        digits = min(int(n), _MAX_DPS)
        self.prec = max(1, round((digits + 1) * _BITS_PER_DIGIT))


def round_bits(x: Fraction, prec: int) -> Fraction:
    """``x`` rounded to ``prec`` significant bits, ties to even."""
    if x == 0:
        return x
    sign, x = (-1 if x < 0 else 1), abs(x)
    k = x.numerator.bit_length() - x.denominator.bit_length() - prec
    while x / Fraction(2) ** k >= 2**prec:
        k += 1
    while x / Fraction(2) ** k < 2 ** (prec - 1):
        k -= 1
    return sign * round(x / Fraction(2) ** k) * Fraction(2) ** k


def mp_str(x: Fraction, dps: int) -> str:
    """mpmath's ``to_str(x, dps)`` for a finite ``x``: digits cut, rounded half up on the next
    one, fixed-point near unit magnitude, trailing zeros stripped."""
    if x == 0:
        return "0.0"
    sign, x = ("-" if x < 0 else ""), abs(x)
    exponent = len(str(x.numerator)) - len(str(x.denominator))
    while Fraction(10) ** exponent > x:
        exponent -= 1
    while Fraction(10) ** (exponent + 1) <= x:
        exponent += 1
    cut = str(int(x * Fraction(10) ** (dps - exponent)))  # dps digits and the next one
    digits = cut[:dps]
    if cut[dps] in "56789":
        digits = str(int(digits) + 1)
        if len(digits) > dps:
            digits, exponent = digits[:dps], exponent + 1
    if min(-(dps // 3), -5) < exponent < dps:
        if exponent < 0:
            digits, split = "0" * -exponent + digits, 1
        else:
            split = exponent + 1
            digits += "0" * max(0, split - dps)
        exponent = 0
    else:
        split = 1
    digits = (digits[:split] + "." + digits[split:]).rstrip("0")
    digits += "0" if digits.endswith(".") else ""
    if exponent == 0:
        return sign + digits
    return sign + digits + ("e+" if exponent > 0 else "e") + str(exponent)


class Mpf:
    """An mpf: an exact binary value, operated on and printed at its context's precision."""

    def __init__(self, value: Fraction, context: MpContext) -> None:
        self.value = value
        self.context = context

    def __truediv__(self, other: Any) -> "Mpf":
        divisor = other.value if isinstance(other, Mpf) else Fraction(other)
        return Mpf(round_bits(self.value / divisor, self.context.prec), self.context)

    def __float__(self) -> float:
        return float(self.value)

    def __repr__(self) -> str:
        dps = self.context.dps
        return f"mpf('{mp_str(self.value, 17 if dps == 15 else dps + 3)}')"


class MpmathShim:
    """What ``mpmath`` offers MathAPI here: ``mp`` and ``log``."""

    def __init__(self) -> None:
        self.mp = MpContext()

    def log(self, x: Any) -> Mpf:
        value = decimal.Decimal(x) if isinstance(x, int | float) else decimal.Decimal(str(x))
        with decimal.localcontext() as ctx:
            ctx.prec = int(self.mp.prec / _BITS_PER_DIGIT) + 30
            exact = Fraction(ctx.ln(value))
        return Mpf(round_bits(exact, self.mp.prec), self.mp)
