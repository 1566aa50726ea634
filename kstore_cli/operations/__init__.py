"""What kstore does to a log, one module an operation: recovery (Kafka's LogLoader, offline), retention,
convert-format, salvage, merge, restore, verify, rebuild-index, the startup survey doctor reports, and
the quarantine every cut goes to. The cleaner has a package of its own (:mod:`kstore_cli.cleaner`).

Depends on :mod:`kstore_cli.cluster`, :mod:`kstore_cli.log` and :mod:`kstore_cli.record`. Never imports
click or rich.
"""
