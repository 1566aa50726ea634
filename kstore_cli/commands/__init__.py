"""One module per subcommand; each parses options, calls the core, renders.

COMMANDS lists them in the order `kstore --help` shows them.
"""

from __future__ import annotations

from typing import List

import click


def _load() -> List[click.Command]:
    commands: List[click.Command] = []
    from kstore_cli.commands import dump_segment

    commands.append(dump_segment.command)
    from kstore_cli.commands import find, inspect, rebuild_index, verify_index

    commands.append(rebuild_index.command)
    commands.append(verify_index.command)
    from kstore_cli.commands import doctor; commands.append(doctor.command)  # noqa: E702
    commands.append(find.command)
    commands.append(inspect.command)
    from kstore_cli.commands import convert_format; commands.append(convert_format.command)  # noqa: E702
    from kstore_cli.commands import retain; commands.append(retain.command)  # noqa: E702
    from kstore_cli.commands import compact; commands.append(compact.command)  # noqa: E702
    from kstore_cli.commands import restore; commands.append(restore.command)  # noqa: E702
    from kstore_cli.commands import groups; commands.append(groups.command)  # noqa: E702
    from kstore_cli.commands import spark_export; commands.append(spark_export.command)  # noqa: E702
    return commands


COMMANDS = _load()
