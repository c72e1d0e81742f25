"""``python -m lastgood``: the same as the ``lastgood`` command."""

import sys

from lastgood.index.prefetch import prefetch_command

prefetch_command(sys.argv[1:])  # before lastgood.cli.main's imports (see lastgood.index.prefetch)

from lastgood.cli.main import entry  # noqa: E402

if __name__ == "__main__":
    sys.exit(entry())
