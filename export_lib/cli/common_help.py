"""Help for the arguments many ``exportctl`` commands share, given where a command declares
none: ``exportctl <command> --help`` and the generated docs/reference/cli.md then say the same
thing, and a new command's ``--company`` needs no copy of the sentence."""

from __future__ import annotations

import argparse

COMMON_HELP = {
    "--json": "print JSON instead of text",
    "config_dir": "the config directory (defaults.yaml and the company files), e.g. dags/config",
    "dags_dir": "the DAG folder holding config/, e.g. dags",
    "--check": "only report; write nothing (exit 1 when something is missing)",
    "run_key": "a run key, as exportctl runs prints it",
    "--company": "only this company's",
    "--schedule": "only this schedule id, e.g. acme/daily-spend",
    "schedule": "a schedule id, e.g. acme/daily-spend",
    "action": "what to do (see the values)",
    "target": "a run key (or an artifact id, where the command takes one)",
    "--dst-gap": "what a local time that does not exist on a spring-forward day does "
                 "(config: dst_gap)",
    "--dst-fold": "what a local time that occurs twice on a fall-back day does "
                  "(config: dst_fold)",
    "--config": "the config directory",
    "--days": "days of demo data",
    "--limit": "at most this many",
}


def fill_help(parser: argparse.ArgumentParser) -> None:
    """Give every argument without help (of ``parser`` and its subcommands) the shared words."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                fill_help(sub)
        elif action.help is None:
            name = action.option_strings[0] if action.option_strings else action.dest.lower()
            action.help = COMMON_HELP.get(name)
