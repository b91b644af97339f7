"""What the scripts of benchmarks/ share: argparse with its errors as one line (``error: ...``,
exit 2, no usage block: a missing or unknown argument, a bad value), ``fail`` for their other bad
input (the message as given, naming the file or argument, exit 2) and the whole-number type of
their counts. A script run as ``python benchmarks/X.py`` finds this module beside it."""
from __future__ import annotations

import argparse
import sys


def fail(message: str):
    """Stop the script with ``message`` as its one line on stderr, exit 2."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors as one line (no usage block), exit 2."""

    def error(self, message: str):
        fail(f"error: {message}")


def positive(text: str) -> int:
    """A whole number of at least 1 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number is needed, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
