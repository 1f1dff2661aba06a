"""Byte formatting at the edges. Internally every size is an int of bytes."""

_IEC = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: int, precision: int = 1) -> str:
    """1536 -> '1.5 KiB'; negative numbers keep their sign (deltas)."""
    sign = "-" if n < 0 else ""
    value = float(abs(n))
    unit = 0
    while value >= 1024 and unit < len(_IEC) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{sign}{int(value)} B"
    return f"{sign}{value:.{precision}f} {_IEC[unit]}"


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
