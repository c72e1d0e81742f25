#!/usr/bin/env python3
"""Set-up for a fresh machine with only python3: a local virtualenv, then the dashboard or the tests.

    python3 dev.py ui      # install into .venv and open the dashboard on sample_data/
    python3 dev.py test    # install into .venv (+ Debian's chromium and postgresql) and run every test

Extra arguments are passed on (to pytest for ``test``, to ``lastgood ui`` for ``ui``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / "bin"
PYTHON = BIN / "python"
EXTRAS = {"ui": "s3,langgraph,postgres", "test": "s3,langgraph,postgres,dev"}
DEBIAN_FOR_TESTS = {"chromium": "/usr/bin/chromium", "postgresql": "/usr/lib/postgresql"}


def run(command: list[str], **kwargs: object) -> None:
    print("+ " + " ".join(command), flush=True)
    subprocess.run(command, check=True, **kwargs)  # type: ignore[call-overload]


def ensure_venv(extras: str) -> None:
    if not PYTHON.exists():
        run([sys.executable, "-m", "venv", str(VENV)])
        run([str(PYTHON), "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    stamp = VENV / f".installed-{extras.replace(',', '-')}"
    if stamp.exists() and stamp.read_text() == digest:
        return
    run([str(PYTHON), "-m", "pip", "install", "--quiet", "-e", f".[{extras}]"], cwd=ROOT)
    stamp.write_text(digest)


def ensure_debian_packages() -> None:
    missing = [pkg for pkg, path in DEBIAN_FOR_TESTS.items() if not Path(path).exists()]
    if not missing:
        return
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if sudo and not shutil.which("sudo"):
        sys.exit(f"dev.py: the tests need Debian packages {missing}; install them as root "
                 f"(apt-get install -y {' '.join(missing)})")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run([*sudo, "apt-get", "update", "-qq"], env=env)
    run([*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)


def sample_stores() -> list[str]:
    stores = [ROOT / "sample_data" / "agents"]
    stores += sorted((ROOT / "sample_data").glob("*.sqlite"))
    return [str(s) for s in stores if s.exists()]


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in EXTRAS:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    ensure_venv(EXTRAS[command])
    if command == "test":
        ensure_debian_packages()
        return subprocess.call([str(PYTHON), "-m", "pytest", *rest], cwd=ROOT)
    # the dashboard replaces this process: a signal sent to it (a terminal closed, SIGTERM) stops the dashboard
    ui = [str(BIN / "lastgood"), "ui", *sample_stores(), *rest]
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(ROOT)
    os.execv(ui[0], ui)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
