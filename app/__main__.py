"""``python -m lastgood``: the same as the ``lastgood`` command."""

import sys

from lastgood.cli import entry

if __name__ == "__main__":
    sys.exit(entry())
