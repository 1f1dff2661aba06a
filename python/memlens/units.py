"""Byte formatting at the edges. Internally every size is an int of bytes."""

_IEC = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: int, precision: int = 1) -> str:
    """1536 -> '1.5 KiB'; negative numbers keep their sign (deltas)."""
    sign = "-" if n < 0 else ""
    value = float(abs(n))
    if value < 1024:
        return f"{sign}{_rounded(value, 0)} B"
    value /= 1024
    unit = 1
    # The rounded value decides, so 1023.96 KiB reads "1.0 MiB", not "1024.0 KiB": as
    # common/format.ts's formatBytes, so that the editor and the CLI print one format
    # (test/unit/format-parity.test.ts).
    while float(_rounded(value, precision)) >= 1024 and unit < len(_IEC) - 1:
        value /= 1024
        unit += 1
    return f"{sign}{_rounded(value, precision)} {_IEC[unit]}"


def _rounded(value: float, places: int) -> str:
    """`value` to `places` decimals, a tie rounded up, as JavaScript's toFixed does (Python's
    format rounds a tie to even: 1.25 KiB would read "1.2 KiB" here and "1.3 KiB" there)."""
    from decimal import ROUND_HALF_UP, Decimal

    return str(Decimal(value).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))


_SUFFIX = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024**2, "mb": 1000**2,
           "mib": 1024**2, "g": 1024**3, "gb": 1000**3, "gib": 1024**3, "t": 1024**4,
           "tb": 1000**4, "tib": 1024**4}


def parse_bytes(text: str) -> int:
    """'80GiB', '80 GB', '1024' -> bytes. Raises ValueError naming the text."""
    s = text.strip().lower().replace(" ", "")
    i = len(s)
    while i > 0 and not (s[i - 1].isdigit() or s[i - 1] == "."):
        i -= 1
    number, suffix = s[:i], s[i:]
    if not number or suffix not in _SUFFIX:
        raise ValueError(f"not a size: {text!r} (use e.g. 80GiB, 512MiB or a number of bytes)")
    return int(float(number) * _SUFFIX[suffix])
