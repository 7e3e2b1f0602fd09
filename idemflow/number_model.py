"""One number model on every store: what ``tx.increment`` computes, wherever it is computed.

DynamoDB adds server-side in decimal arithmetic on numbers of at most 38
significant digits, with exponents from -130 to 125. The other stores add in
this process; they follow the same rules, so a counter gives the same value
and the same type on every backend:

- ``int`` plus ``int`` is an ``int``; with a ``float`` the sum is a ``float``;
  with a ``Decimal`` it is a ``Decimal`` (a ``Decimal`` row stays one);
- the sum is exact in decimal: ``0.1 + 0.2`` is ``0.3`` (a float is taken as
  its shortest text, as DynamoDB receives it), never ``0.30000000000000004``;
- a delta or a sum beyond 38 significant digits or that exponent range is
  refused with :class:`InvalidValueError`, before anything is written where
  the store adds in this process, and by DynamoDB's own commit otherwise.

Numbers that are only stored, never incremented, are JSON text on every
store and keep every digit.

>>> sum_of(0.1, 0.2, "counter"), sum_of(7, 5, "counter"), sum_of(Decimal("1.10"), 1, "counter")
(0.3, 12, Decimal('2.10'))
"""

from __future__ import annotations

from decimal import Context, Decimal, Inexact, Overflow

from idemflow.errors import InvalidValueError

DIGITS = 38
"""Significant digits DynamoDB's number type holds."""
SMALLEST_EXPONENT, LARGEST_EXPONENT = -130, 125
"""Of the leading digit (``Decimal.adjusted``), as DynamoDB bounds them."""

_EXACT = Context(prec=2 * DIGITS + LARGEST_EXPONENT - SMALLEST_EXPONENT, traps=[Inexact, Overflow])
"""Wide enough that a sum of two numbers in range is exact; :func:`exact` then checks the sum."""

Number = int | float | Decimal


def is_number(value: object) -> bool:
    """Whether ``value`` is a number an increment can add to (``bool`` is not)."""
    return type(value) in (int, float, Decimal)


_SMALL = 10**DIGITS
"""Ints strictly inside ±10**38 need no decimal check: they are their own exact value."""


def check(value: Number, where: str) -> None:
    """Refuse ``value`` if no store could add it (the common small int costs one compare)."""
    if type(value) is not int or not -_SMALL < value < _SMALL:
        exact(value, where)


def exact(value: Number, where: str) -> Decimal:
    """``value`` as the decimal every store adds, or the error if no store may hold it."""
    held = Decimal(repr(value)) if type(value) is float else Decimal(value)
    if not held.is_finite():
        raise InvalidValueError(where, f"{value!r} is not a finite number")
    digits = "".join(map(str, held.as_tuple().digits)).rstrip("0")
    if held and not (len(digits) <= DIGITS and SMALLEST_EXPONENT <= held.adjusted() <= LARGEST_EXPONENT):
        raise InvalidValueError(where, f"{value!r} is beyond {DIGITS} significant digits or 1E-130..1E+125")
    return held


def sum_of(base: Number, delta: Number, where: str) -> Number:
    """``base + delta`` under the model above; ``where`` names the row in errors."""
    if type(base) is int and type(delta) is int:  # a counter: exact in Python, checked by size
        summed = base + delta
        if -_SMALL < summed < _SMALL and -_SMALL < delta < _SMALL:
            return summed
    total = _EXACT.add(exact(base, where), exact(delta, where))
    try:
        exact(total, where)
    except InvalidValueError:
        problem = f"{base!r} + {delta!r} needs more than {DIGITS} significant digits or leaves 1E-130..1E+125"
        raise InvalidValueError(where, problem) from None
    kinds = (type(base), type(delta))
    if Decimal in kinds:
        return total
    if float in kinds:
        return float(total)
    return int(total)
