"""kstore: inspect, verify, repair, compact, expire, convert and export Kafka's on-disk logs.

Importing this package (or its core: ``segment``, ``codecs``) never imports click or rich.
"""

__version__ = "0.1.0"
