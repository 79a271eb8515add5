"""Every ``exportctl`` argument says what it is, in ``--help`` and in docs/reference/cli.md
alike (both read the parser; the shared words come from export_lib.cli.common_help)."""

from __future__ import annotations

import argparse

from export_lib.cli.main import build_parser


def _unexplained(parser: argparse.ArgumentParser, path: str) -> list[str]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _unexplained(sub, f"{path} {name}")
        elif not action.help and not isinstance(action, argparse._HelpAction):
            out.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return out


def test_every_argument_of_every_command_has_help():
    assert _unexplained(build_parser(), "exportctl") == []

