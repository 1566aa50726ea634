"""What the commands share about the terminal: whether stdout is one, and human sizes."""

from __future__ import annotations

import sys


def is_tty() -> bool:
    """True when stdout is a terminal (tables and progress bars); False in pipes and cron."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
