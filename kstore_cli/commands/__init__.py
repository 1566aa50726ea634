"""One module per subcommand; each parses options, calls the core, renders.

:data:`TABLE` is the registry: one line per command, in the order ``kstore --help`` shows them
(the order an operator meets them). The root group (kstore_cli/cli.py) reads it to list commands
and their one-line help without importing any command module; a command's module is imported only
when that command runs (or its ``--help``, or shell completion inside it), so ``kstore --version``
and ``kstore dump-segment --help`` start as fast as click itself. A new command is one line here;
tests/test_cli.py checks each line's help against the command's own docstring.

``COMMANDS`` (every command object, all modules imported) is still there for tests and tools.
"""

from __future__ import annotations

import importlib
from typing import List, NamedTuple, Optional

import click


class Entry(NamedTuple):
    """A command of the registry: its name, its module under kstore_cli.commands, its one-line help
    (the first sentence of its docstring, as ``kstore --help`` shows it)."""

    name: str
    module: str
    short_help: str


TABLE = (
    Entry("dump-segment", "dump_segment", "Dump log segments, indexes, snapshots and KRaft checkpoints exactly as Kafka's kafka-dump-log.sh does (same options, same output byte for byte)."),  # noqa: E501
    Entry("rebuild-index", "rebuild_index", "Regenerate the wrong or missing .index, .timeindex and .txnindex files as Kafka's recovery writes them."),  # noqa: E501
    Entry("verify-index", "verify_index", "Check every .index, .timeindex and .txnindex against its .log (read-only)."),
    Entry("doctor", "doctor", "Why would my broker not start on these data dirs, and what do I run (read-only)."),
    Entry("find", "find", "Print the record at --offset N, or the first record with timestamp >= --timestamp MS."),
    Entry("inspect", "inspect", "Summarise partitions: segments, offsets, log start offset, sizes, time range, record formats and codecs, producer ids, open and aborted transactions, index health, and leftover .deleted/.cleaned/.swap files."),  # noqa: E501
    Entry("convert-format", "convert_format", "Rewrite partitions into another message format (magic) and/or compression codec."),  # noqa: E501
    Entry("retain", "retain", "Delete old segments exactly as Kafka's retention does (UnifiedLog.deleteOldSegments)."),
    Entry("compact", "compact", "Compact partitions exactly as Kafka's log cleaner does: one cleaner pass per partition."),  # noqa: E501
    Entry("replicas", "replicas", "Compare the copies of every partition found in two or more of PATHS, as Kafka's replication would."),  # noqa: E501
    Entry("merge", "merge", "Build one partition from several copies: every offset once, from the surviving leader-epoch lineage."),  # noqa: E501
    Entry("recover", "recover", "Do the recovery a broker would do at startup after an unclean shutdown, offline and in parallel."),  # noqa: E501
    Entry("repair", "repair", "Write what doctor finds missing or wrong and Kafka needs, as Kafka writes it."),
    Entry("salvage", "salvage", "Keep every intact batch of a damaged partition, not only those before the first damage."),  # noqa: E501
    Entry("restore", "restore", "Undo a `rebuild-index --truncate`: append the cut tail back to its .log, move the later segments and snapshots back, and raise the checkpoints it lowered back to their old values."),  # noqa: E501
    Entry("spark-export", "spark_export", "Export whole topic directories to Parquet with Spark's Kafka source schema."),
    Entry("metadata", "metadata", "The cluster from a KRaft metadata log: brokers, topics, configs, ACLs, quotas, features."),  # noqa: E501
    Entry("transactions", "transactions", "Transactional ids from the __transaction_state partitions in PATHS and the transactions still open in each data partition, hanging ones marked as kafka-transactions.sh find-hanging defines them."),  # noqa: E501
    Entry("groups", "groups", "Committed offsets per group, topic and partition from the __consumer_offsets partitions in PATHS, as the group coordinator would load them, with log end offset, high watermark and lag; each group's state, members, last commit time and total lag (--members, --state: other views)."),  # noqa: E501
    Entry("schemas", "schemas", "Confluent Schema Registry's subjects, versions, ids, types, compatibility and deleted state, read from its _schemas topic in PATHS with no registry running, replayed as the registry's KafkaStore reads it."),  # noqa: E501
    Entry("log-dirs", "log_dirs", "Per broker and data dir, each partition's size and offset lag, as kafka-log-dirs.sh --describe reports them."),  # noqa: E501
    Entry("reassign", "reassign", "The kafka-reassign-partitions.sh JSON that restores every partition's replication factor after brokers are lost."),  # noqa: E501
)

_BY_NAME = {entry.name: entry for entry in TABLE}


def names() -> List[str]:
    """Every command name, in ``kstore --help`` order (imports nothing)."""
    return [entry.name for entry in TABLE]


def entry(name: str) -> Optional[Entry]:
    """The registry line of a command, or None."""
    return _BY_NAME.get(name)


def load(name: str) -> Optional[click.Command]:
    """The command object named `name` (its module imported now), or None for no such command."""
    found = _BY_NAME.get(name)
    if found is None:
        return None
    return importlib.import_module(f"{__name__}.{found.module}").command


def __getattr__(attr: str):
    # COMMANDS: the command objects of the whole table, imported on first use only (PEP 562).
    if attr == "COMMANDS":
        return [load(entry.name) for entry in TABLE]
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
