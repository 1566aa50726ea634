"""What is read across partitions: the KRaft metadata image, consumer groups, transactions, replicas.

Depends on :mod:`kstore_cli.parsers`, :mod:`kstore_cli.log` and :mod:`kstore_cli.record`. Never imports
click or rich.
"""
