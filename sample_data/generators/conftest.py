"""The framework round trips: a Lastgood action on a copy of a sample store, then the framework's
own API reading back what an agent would resume from (``readback.py`` in that framework's pinned
virtualenv). Not part of the default suite (each framework is a virtualenv of its own, minutes to
install); run them with ``python3 dev.py fixtures --verify``, which creates the virtualenvs first.

Fixtures:
- ``framework_python(name)``: the interpreter of ``.venv-fixtures/<name>`` (created from the
  generator's ``requirements.txt`` when missing);
- ``readback(name, *args)``: ``readback.py``'s JSON output;
- ``lastgood(*args)``: the ``lastgood`` command of the project's own virtualenv, JSON-decoded when
  ``--format json`` is among the arguments (a ``CompletedProcess`` otherwise).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATORS = ROOT / "sample_data" / "generators"
VENVS = ROOT / ".venv-fixtures"


def _ensure_venv(name: str) -> Path:
    python = VENVS / name / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENVS / name)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(GENERATORS / name / "requirements.txt")],
                       check=True)
    return python


@pytest.fixture(scope="session")
def framework_python() -> Callable[[str], Path]:
    return _ensure_venv


@pytest.fixture(scope="session")
def readback(framework_python: Callable[[str], Path]) -> Callable[..., Any]:
    def run(name: str, *args: str) -> Any:
        done = subprocess.run([str(framework_python(name)), str(GENERATORS / name / "readback.py"), *args],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)
    return run


@pytest.fixture
def lastgood(tmp_path: Path) -> Callable[..., Any]:
    home = tmp_path / "lastgood-home"
    executable = Path(sys.executable).parent / "lastgood"

    def run(*args: str, check: bool = True) -> Any:
        env = {**os.environ, "LASTGOOD_HOME": str(home), "LASTGOOD_ALLOW_WRITE": "1",
               "LASTGOOD_OPERATOR": "roundtrip"}
        done = subprocess.run([str(executable), *args], capture_output=True, text=True, env=env, timeout=300)
        if check:
            assert done.returncode in (0, 1), done.stderr[-2000:]
        return json.loads(done.stdout) if "--format" in args and "json" in args and done.stdout else done
    return run
