"""A click command whose every usage or input error is ONE line on stderr and exit status 2.

click's own standalone mode prints usage, a hint and the error on three lines; blinkrun
promises one line and no traceback (exit status 2 for bad usage or input). Commands raise :class:`click.UsageError` (or let a
:class:`blinkflow.errors.TopologyError` escape) and this class prints ``<prog>: error: <what>``.
"""
from __future__ import annotations

import sys

import click

from blinkflow.errors import BlinkflowError

USAGE_EXIT = 2


class OneLineErrorCommand(click.Command):
    """``click.Command`` that reports errors on one line (see the module docstring)."""

    def main(self, args=None, prog_name=None, **extra):
        name = prog_name or self.name or "blinkrun"
        try:
            result = super().main(args=args, prog_name=prog_name, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            click.echo(f"{name}: aborted", err=True)
            sys.exit(1)
        except click.ClickException as e:
            _fail(name, e.format_message())
        except BlinkflowError as e:
            _fail(name, str(e))
        sys.exit(result if isinstance(result, int) else 0)


def _fail(name: str, message: str) -> None:
    text = " ".join(message.split())  # one line, whatever the message held
    click.echo(f"{name}: error: {text}", err=True)
    sys.exit(USAGE_EXIT)
