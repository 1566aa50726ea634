"""What a mutating command may touch: the one rule every command that changes or writes logs follows.

Logs: a log Kafka manages through raft rather than through its log layer is never changed by kstore.
That is the KRaft metadata log, ``__cluster_metadata-0``: LogManager.loadLogs skips
``KafkaRaftServer.MetadataTopic`` (so the broker's log manager neither recovers, retains nor cleans
it) and KafkaMetadataLog owns it; its control batches and snapshots (``.checkpoint``) are the raft
layer's, and a rewritten copy (a control batch dropped, a segment rolled) leaves Kafka's raft reader
reading nothing after the snapshot. In a data-dir walk it is skipped, and the skip reported; named as
a PATH, the command refuses (exit 2). ``__consumer_offsets`` and ``__transaction_state`` are normal
logs of the log layer (Kafka's cleaner compacts them, its loader recovers them): they stay allowed.
``kstore restore`` is the one exception: it only puts back bytes kstore itself cut.

A data dir's child that is a symlink to a partition dir is a log of that data dir to a broker (its lock, its
checkpoints) but not to kstore (a partition's data dir is where its files are): changed in place through the
link, it would bypass a running broker's lock and read another dir's high watermark. Every mutating command
leaves it unchanged (exit 1) and refuses it named; one that only reads it (output elsewhere) takes it.

Output dirs: an output dir (``--output-dir`` and the like) must not lie inside a Kafka data dir (a
directory holding meta.properties or a data dir's checkpoint files, at or above the output's
real path): a broker refuses to start with a directory it does not know there, and a live broker would
see what kstore writes. The one exception is a new partition dir directly in a data dir, written under
that data dir's lock (:func:`output_dir_guard`).
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

from kstore_cli.errors import UsageError
from kstore_cli.log import fileops, locks, names
from kstore_cli.log.logdir import DATA_DIR_FILES, Partition, Target

#: What makes a directory a Kafka data dir for the output-dir rule: meta.properties or a data dir's checkpoint
#: files (not a bare ``.lock``: other tools, pytest's temporary root among them, leave one).
_DATA_DIR_MARKERS = DATA_DIR_FILES - {fileops.LOCK_FILE}

#: Topics whose log Kafka manages through raft, not the log layer (LogManager.loadLogs skips
#: KafkaRaftServer.MetadataTopic; KafkaMetadataLog owns it).
RAFT_MANAGED_TOPICS = frozenset({names.METADATA_LOG_TOPIC})

#: Why such a log is left alone (text and JSON of every mutating command).
RAFT_LOG_REASON = ("the KRaft metadata log is managed by Kafka's raft layer (KafkaMetadataLog; the broker's "
                   "log manager does not load, recover, clean or retain it) and no tool may rewrite it: "
                   "kstore leaves it alone")


def left_alone_reason(partition: Partition) -> Optional[str]:
    """Why no mutating command may change `partition`'s log, or None when it may."""
    if partition.partition >= 0 and partition.topic in RAFT_MANAGED_TOPICS:
        return RAFT_LOG_REASON
    return None


def symlinked_reason(path: str) -> Optional[str]:
    """Why a data dir's child that is a symlink to a partition dir is not changed in place, or None when the
    partition dir at `path` is none. A broker loads it as a log of the data dir holding the link (LogManager lists the dir,
    ``isDirectory`` follows the link): under that dir's ``.lock``, with its checkpoints (high watermark, log
    start offset); kstore takes a partition's data dir to be where its files are, so it would take another
    dir's lock and checkpoints. An alias outside every data dir (``/srv/shortcuts/orders-0``) is no child of
    one: its real path is the partition, in its real data dir."""
    path = os.path.abspath(path)
    if not os.path.islink(path) or not any(
            os.path.exists(os.path.join(os.path.dirname(path), m)) for m in _DATA_DIR_MARKERS):
        return None
    return (f"its directory is a symlink (to {os.readlink(path)}): a broker loads it under the .lock and with the "
            "checkpoints of the data dir holding the link, and kstore follows no symlink to write: move the "
            "directory into the data dir, or give kstore the partition where the link points")


def write_refusal(partition: Partition) -> Optional[str]:
    """Why no mutating command may change `partition` in place (:func:`left_alone_reason`, or
    :func:`symlinked_reason`), or None when it may."""
    return left_alone_reason(partition) or symlinked_reason(partition.path)


def refusal(in_place: bool) -> Callable[[Partition], Optional[str]]:
    """The rule a command applies to the logs it may not take: :func:`write_refusal` when it changes them in
    place, :func:`left_alone_reason` when it only reads them (its output goes elsewhere)."""
    return write_refusal if in_place else left_alone_reason


def unhandled(skipped: Iterable[Tuple[str, str]]) -> bool:
    """Whether a partition in `skipped` was left for a reason the operator must act on (a symlinked dir: the
    run's exit status says so), not by the rule that leaves the KRaft metadata log alone."""
    return any(reason != RAFT_LOG_REASON for _path, reason in skipped)


def _named(paths: Iterable[str]) -> set:
    """The real paths of the partition dirs `paths` name themselves (a dir, or a ``.log`` in it)."""
    out = set()
    for raw in paths:
        real = os.path.realpath(raw)
        out.add(os.path.dirname(real) if os.path.isfile(real) else real)
    return out


def refuse_named(paths: Iterable[str], targets: Iterable[Target], command: str,
                 why: Callable[[Partition], Optional[str]] = write_refusal) -> None:
    """A usage error (exit 2) when a PATH names a log no mutating command may change (`why` says why not)."""
    named = _named(paths)
    for target in targets:
        reason = why(target.partition)
        if reason is not None and os.path.realpath(target.partition.path) in named:
            raise UsageError(f"{command} does not change {target.partition.name}: {reason}",
                             path=target.partition.path)


def mutable_targets(paths: Sequence[str], targets: Sequence[Target], command: str, *,
                    in_place: bool = True) -> Tuple[List[Target], List[Tuple[str, str]]]:
    """(the targets `command` may change, the (partition path, reason) of those a data-dir walk skips);
    a PATH naming a log no command may change is refused (:func:`refuse_named`). Not `in_place` (the command
    writes elsewhere), only :func:`left_alone_reason` leaves a log out."""
    why = refusal(in_place)
    refuse_named(paths, targets, command, why)
    return split_left_alone(targets, why)


def split_left_alone(targets: Sequence[Target], why: Callable[[Partition], Optional[str]] = left_alone_reason
                     ) -> Tuple[List[Target], List[Tuple[str, str]]]:
    """(the targets whose log a command may change, the (partition path, reason) of each other one, once);
    `why` says why one is left out (by default :func:`left_alone_reason`, as a command that compares copies
    leaves them out; a mutating one gives :func:`write_refusal`)."""
    kept: List[Target] = []
    skipped: List[Tuple[str, str]] = []
    for target in targets:
        reason = why(target.partition)
        if reason is None:
            kept.append(target)
        elif all(path != target.partition.path for path, _ in skipped):
            skipped.append((target.partition.path, reason))
    return kept, skipped


def skipped_dict(path: str, reason: str) -> dict:
    """The JSON line of a partition a command left alone."""
    return {"type": "skipped", "partition": path, "reason": reason}


# --------------------------------------------------------------------------- output dirs


def enclosing_data_dir(path: str) -> Optional[str]:
    """The nearest Kafka data dir at or above `path`'s real path (symlinks resolved), or None."""
    current = os.path.realpath(path)
    while True:
        try:
            entries = os.listdir(current)
        except OSError:
            entries = []
        if any(n in _DATA_DIR_MARKERS for n in entries):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def check_output_dir(output_dir: str, *, option: str = "--output-dir", inputs: Iterable[str] = (),
                     new_partitions: Optional[Sequence[str]] = None) -> Optional[str]:
    """Refuse (exit 2) an output dir that is or lies inside one of `inputs` or a Kafka data dir; return the
    data dir whose lock the caller must hold while writing when the output is allowed there, else None.

    Allowed inside a data dir only when `output_dir` is the data dir itself and the command writes
    nothing there but `new_partitions` (partition dir names, none existing yet); None means the command
    writes other files there (checkpoints, a data dir's own files) or dirs that are no partition.
    Real paths throughout: an alias (symlink) of a data dir is that data dir."""
    out_real = os.path.realpath(output_dir)
    for inp in sorted({os.path.realpath(p) for p in inputs}):
        if out_real == inp or out_real.startswith(inp.rstrip(os.sep) + os.sep):
            raise UsageError(f"{option} is or lies inside the input {inp}; choose a directory outside the "
                             "data dir", path=output_dir)
    data_dir = enclosing_data_dir(out_real)
    if data_dir is None:
        return None
    marker = sorted(n for n in os.listdir(data_dir) if n in _DATA_DIR_MARKERS)[0]
    where = f"{option} is or lies inside the Kafka data dir {data_dir} (it holds {marker})"
    if out_real == data_dir and not new_partitions:
        raise UsageError(f"{where}: this command writes more than new partition dirs there (a data dir's own "
                         "files, checkpoints); choose a directory outside every data dir", path=output_dir)
    if out_real != data_dir:
        raise UsageError(f"{where}: a broker refuses to start with a directory it does not know there, and a "
                         "running one would see the files; choose a directory outside every data dir",
                         path=output_dir)
    for name in new_partitions:
        if names.parse_partition_dir(name) is None:
            raise UsageError(f"{where}: only a new partition dir may go there, and {name} is not a "
                             "<topic>-<partition> name", path=output_dir)
        if os.path.lexists(os.path.join(data_dir, name)):
            raise UsageError(f"{where}: only a new partition dir may go there, and {name} exists there already",
                             path=output_dir)
    return data_dir


def check_quarantine_dir(quarantine_dir: Optional[str], paths: Iterable[str], targets: Iterable[Target]) -> None:
    """A --quarantine-dir given holds to the output-dir rule: never in an input, its data dir or any Kafka
    data dir (its ``<partition>/`` dirs there would be loaded, or refused, by the broker)."""
    if quarantine_dir:
        check_output_dir(quarantine_dir, option="--quarantine-dir",
                         inputs=[*paths, *(t.partition.data_dir for t in targets)])


@contextlib.contextmanager
def output_dir_guard(output_dir: str, *, option: str = "--output-dir", inputs: Iterable[str] = (),
                     new_partitions: Optional[Sequence[str]] = None, force: bool = False,
                     lock: bool = True) -> Iterator[None]:
    """:func:`check_output_dir`, then, when the output is a new partition dir in a data dir, that data
    dir's ``.lock`` held for the block (a running broker makes this refuse, unless `force`; none taken
    when not `lock`, a dry run)."""
    data_dir = check_output_dir(output_dir, option=option, inputs=inputs, new_partitions=new_partitions)
    with locks.lock_data_dirs({data_dir: []} if data_dir is not None and lock else {}, force=force):
        yield
