"""``python -m lastgood``: the same as the ``lastgood`` command."""

import sys

from lastgood.prefetch import prefetch_command

prefetch_command(sys.argv[1:])  # before lastgood.cli's imports (see lastgood.prefetch)

from lastgood.cli import entry  # noqa: E402

if __name__ == "__main__":
    sys.exit(entry())
