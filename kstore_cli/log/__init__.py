"""The loaded log, as Kafka's ``storage/internals/log`` models it: segments and their indexes, a
partition's log (UnifiedLog), data dirs, checkpoints, producer state, leader epochs, topic configs,
and fileops, through which every change to a data dir is made.

Depends on :mod:`kstore_cli.record` only. Never imports click or rich.
"""
