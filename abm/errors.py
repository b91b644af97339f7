"""Error types with their exit codes: user errors (2) and broken invariants (1)."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user (file, field, value, flag). The CLI prints one line, exits 2."""

    exit_code = 2


class InvariantError(Exception):
    """A run ended in a state that breaks an accounting or probability invariant (exit 1)."""

    exit_code = 1
