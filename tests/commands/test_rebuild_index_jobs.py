"""rebuild-index --jobs: partitions rebuilt in forked worker processes under the lock this process holds;
the output and the files written are the same for any --jobs."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from tests.commands.test_doctor import make_data_dir
from tests.commands.test_rebuild_index import dir_hash
from tests.conftest import CORPUS

_register_commands()


def _damaged(root: Path) -> Path:
    """Every corpus partition, with indexes missing or wrong in several of them."""
    every = tuple(sorted(p.name for p in (CORPUS / "logs").iterdir() if p.is_dir()))
    data = make_data_dir(root, partitions=every)
    for name in ("v2-none-0", "v2-gzip-0", "transactional-0", "idempotent-0"):
        indexes = sorted((data / name).glob("*.index"))
        indexes[0].unlink()
        (data / name / indexes[-1].name.replace(".index", ".timeindex")).write_bytes(b"\x00" * 12)
    return data


def _run(*args: str):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_rebuild_index_gives_the_same_output_and_files_for_any_jobs(tmp_path: Path) -> None:
    original = _damaged(tmp_path / "original")
    outputs, hashes = set(), set()
    for jobs in ("1", "3"):
        for args in (["--dry-run", "--json"], ["--json"], []):
            copy = tmp_path / f"jobs-{jobs}-{len(args)}"
            shutil.copytree(original, copy)
            code, out = _run("rebuild-index", "--jobs", jobs, *args, str(copy))
            assert code == 0, out
            outputs.add((tuple(args), out.replace(str(copy), "DATA")))
            hashes.add((tuple(args), dir_hash(copy, with_lock=False)))
    assert len(outputs) == 3 and len(hashes) == 3  # one per mode, whatever --jobs
    written = [out for args, out in outputs if args == ("--json",)][0]
    assert written.count('"rebuilt"') >= 4
    assert dict(hashes)[("--dry-run", "--json")] == dir_hash(original, with_lock=False)
    assert dict(hashes)[("--json",)] != dir_hash(original, with_lock=False)
