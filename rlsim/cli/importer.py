"""`rlsim import verl CONFIG_OR_SCRIPT... [--gpu PROFILE] [--out FILE]` and `rlsim import nemo-rl RECIPE`.

verl     reads verl config YAMLs (their local `defaults:` merged) and launch scripts (`python3 -m verl.trainer.main_ppo
         key=value ...`, shell variables expanded), later files overriding earlier ones
nemo-rl  reads a NeMo-RL recipe with its `defaults:` parents

Both write an rlsim scenario whose every field says where it came from, print the keys they could not map (also
listed at the top of the file), and write the file only once `rlsim check` accepts it. The mapping tables:
docs/import.md.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rlsim.cli.lazy import lazy_handler


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("import", help="write a scenario from a verl or NeMo-RL run's config",
                                   description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="import_command", metavar="FRAMEWORK", required=True)
    verl = commands.add_parser("verl", help="import verl config YAMLs and/or launch scripts")
    verl.add_argument("paths", type=Path, nargs="+", metavar="CONFIG_OR_SCRIPT")
    nemo = commands.add_parser("nemo-rl", help="import a NeMo-RL recipe")
    nemo.add_argument("paths", type=Path, nargs=1, metavar="RECIPE")
    for command, framework in ((verl, "verl"), (nemo, "nemo-rl")):
        command.add_argument("--gpu", default=None, metavar="PROFILE",
                             help="the GPU profile the run used (the frameworks' files do not say)")
        command.add_argument("--out", type=Path, default=None,
                             help="scenario file to write (default: <first input's name>.rlsim.yaml here)")
        command.set_defaults(handler=lazy_handler("rlsim.cli.import_run", "run_import"), framework=framework)
