"""A Kafka release, as an operator names it (``2.8``, ``3.9.1``, ``4.0``), and ranges of them.

Verdicts that differ between brokers are taken from the release that wrote a data dir (or the one asked
for with ``--kafka-version``); this is the one type that names such a release.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?(?:[-.][A-Za-z0-9.-]*)?\s*$")

#: The oldest and newest releases kstore knows the rules of.
OLDEST_KNOWN = (0, 10, 0)
NEWEST_KNOWN = (4, 2, 0)


class KafkaVersion(NamedTuple):
    """major.minor.patch; ordered as releases are."""

    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: str) -> "KafkaVersion":
        """'3.9' -> 3.9.0; '2.8.1' -> 2.8.1; '4.0.0-SNAPSHOT' -> 4.0.0. ValueError when it is not a release."""
        match = _VERSION.match(text)
        if match is None:
            raise ValueError(f"{text!r} is not a Kafka version (e.g. 2.8, 3.9.1, 4.0)")
        version = cls(int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))
        if version < OLDEST_KNOWN:
            raise ValueError(f"{text!r} is older than Kafka {KafkaVersion(*OLDEST_KNOWN)}, "
                             "the oldest release kstore knows the rules of")
        return version

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}" + (f".{self.patch}" if self.patch else "")

    def at_least(self, text: str) -> bool:
        """True when this release is ``text`` or newer ('3.0' style)."""
        return self >= KafkaVersion.parse(text)


class VersionRange(NamedTuple):
    """The releases a data dir's files are consistent with: [low, high], high None = any newer."""

    low: KafkaVersion
    high: Optional[KafkaVersion] = None

    def __str__(self) -> str:
        if self.high is None:
            return f"{self.low} or newer"
        if self.high == self.low:
            return str(self.low)
        return f"{self.low}-{self.high}"

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, KafkaVersion):
            return False
        return version >= self.low and (self.high is None or version <= self.high)
