"""Log compaction, split as Kafka's LogCleaner is: the manager that picks logs, the Cleaner that builds
the offset map and rewrites groups of segments, and what it keeps of transactions and stats.

Depends on :mod:`kstore_cli.log` and :mod:`kstore_cli.record`. Never imports click or rich.
"""
