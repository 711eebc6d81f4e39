"""`rlsim schema`: the JSON Schema of the scenario format, for editor completion and validation."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("schema", help="print the JSON Schema of scenario files",
                                   description="Print the JSON Schema of scenario files (see docs/editor.md to hook it "
                                   "into VS Code or any editor using yaml-language-server).")
    parser.add_argument("--out", type=Path, help="write to this file instead of stdout")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rlsim.config.schema import scenario_json_schema

    text = json.dumps(scenario_json_schema(), indent=2) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return 0
