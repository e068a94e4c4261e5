"""Errors that mean "the tool could not run" (exit code 2).

Anything raised as :class:`InputError` is printed by the CLI as one line on
stderr (no traceback unless ``--debug``) and the process exits with 2, as
DESIGN.md's exit codes say.
"""


class InputError(Exception):
    """The tool cannot use its input: usage error, missing or unreadable file,
    a spec that fails to import or lacks a required name, weights that cannot
    be loaded into the candidate at all.

    The message is one sentence that names the input and says what to do.
    """
