"""The narrowing options views share (``layers=``, ``heads=``, ``positions=``): checked lists of indices."""

from __future__ import annotations


def pick(name: str, given, allowed: list[int]) -> list[int]:
    """``given`` (None = all, an int, or an iterable of ints; a ``range`` or ``slice`` too) -> the sorted, unique
    entries of ``allowed`` it names; anything not in ``allowed`` is refused with the allowed values."""
    if given is None:
        return list(allowed)
    if isinstance(given, slice):
        return sorted(set(allowed[given]))
    items = [given] if isinstance(given, int) else list(given)
    out = []
    for x in items:
        if isinstance(x, bool) or not hasattr(x, "__index__"):
            raise ValueError(f"{name}={given!r}: expected integers, got {x!r}")
        x = int(x)
        if x not in allowed:
            lo, hi = (allowed[0], allowed[-1]) if allowed else (None, None)
            raise ValueError(f"{name}={given!r}: {x} not available; allowed: {lo}..{hi}"
                             if allowed == list(range(lo, hi + 1)) else f"{name}={given!r}: {x} not in {allowed}")
        out.append(x)
    if not out:
        raise ValueError(f"{name}={given!r} selects nothing; give at least one")
    return sorted(set(out))


def pick_positions(given, n: int) -> list[int]:
    """Positions of an n-token input: None = all, an int or a list (negative count from the end), a range or a
    slice -> sorted unique positions."""
    if given is None:
        return list(range(n))
    if isinstance(given, slice):
        return list(range(n))[given] or pick("positions", [], [])
    items = [given] if isinstance(given, int) else list(given)
    fixed = [int(p) + n if hasattr(p, "__index__") and not isinstance(p, bool) and int(p) < 0 else p for p in items]
    return pick("positions", fixed, list(range(n)))
