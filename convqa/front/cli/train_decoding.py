"""`convqa train reader-decoding`: calibrate an extractive reader's decoding defaults (passage
fusion, no-answer threshold) on training questions and write them into its folder
(readers/extractive/calibrate.py says how). Wired into `convqa train` by
`add_decoding_parser(jobs)` from convqa/front/cli/train.py.
"""
from __future__ import annotations

import argparse


def add_decoding_parser(jobs) -> argparse.ArgumentParser:
    """Add the `reader-decoding` subcommand to the `convqa train` subparsers `jobs`."""
    from readers.extractive.calibrate import add_arguments, run

    p = jobs.add_parser("reader-decoding",
                        help="calibrate the extractive reader's passage choice and no-answer "
                             "threshold on training questions",
                        description="Choose the extractive reader's passage fusion and "
                                    "no-answer threshold on training questions and write them "
                                    "into its folder's decoding block.")
    add_arguments(p)
    p.set_defaults(func=run)
    return p
