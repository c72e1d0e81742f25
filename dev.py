#!/usr/bin/env python3
"""Set-up for a fresh machine with only python3: a local virtualenv, then the dashboard or the tests.

    python3 dev.py ui          # install into .venv and open the dashboard on sample_data/
    python3 dev.py test        # install into .venv (+ Debian's chromium and postgresql) and run every test
    python3 dev.py lock        # re-resolve constraints.txt (the versions dev.py and CI install) in a new venv
    python3 dev.py drift       # the newest versions pyproject.toml allows, in .venv-drift, and the whole suite
    python3 dev.py fixtures [NAME ...]   # regenerate sample stores written by other frameworks (their own venvs)
    python3 dev.py fixtures --verify [NAME ...]   # the framework round trips: a restore read back by the framework

``ui`` and ``test`` install exactly the versions pinned in ``constraints.txt``, so a new machine runs what
CI tested. ``drift`` ignores the pins: run it before ``lock`` (when a dependency has released, or monthly)
to find on purpose what a newer release breaks. Extra arguments are passed on (to pytest for ``test`` and
``drift``, to ``lastgood ui`` for ``ui``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
CONSTRAINTS = ROOT / "constraints.txt"
EXTRAS = {"ui": "s3,langgraph,postgres,training", "test": "s3,langgraph,postgres,training,dev"}
LOCKED_EXTRAS = "all,dev"  # constraints.txt covers every extra, so any command resolves inside it
DEBIAN_FOR_TESTS = {"chromium": "/usr/bin/chromium", "postgresql": "/usr/lib/postgresql"}
GENERATORS = ROOT / "sample_data" / "generators"


def step(text: str) -> None:
    print(f"dev.py: {text}", flush=True)


def run_logged(command: list[str], what: str, **kwargs: object) -> None:
    """Run ``command`` with its output kept in a log; one line says what it does and how long it took,
    and the log's tail is printed only when it fails."""
    started = time.monotonic()
    step(f"{what} …")
    with tempfile.NamedTemporaryFile("w+", prefix="lastgood-dev-", suffix=".log", delete=False) as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, **kwargs)  # type: ignore[call-overload]
        if done.returncode != 0:
            log.seek(0)
            tail = log.read()[-4000:]
            sys.exit(f"{tail}\ndev.py: {what} failed (exit {done.returncode}); whole log: {log.name}")
    os.unlink(log.name)
    step(f"{what}: done in {time.monotonic() - started:.0f} s")


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def create_venv(venv: Path) -> None:
    run_logged([sys.executable, "-m", "venv", str(venv)], f"creating the virtualenv {venv.name}")
    run_logged([str(python_of(venv)), "-m", "pip", "install", "--upgrade", "pip"], "upgrading pip in it")


def pip_install(venv: Path, extras: str, *, pinned: bool, upgrade: bool = False) -> None:
    command = [str(python_of(venv)), "-m", "pip", "install", "--progress-bar", "off", "-e", f".[{extras}]"]
    if pinned:
        command += ["-c", str(CONSTRAINTS)]
    if upgrade:
        command += ["--upgrade", "--upgrade-strategy", "eager"]
    source = "the versions pinned in constraints.txt" if pinned else "the newest versions pyproject.toml allows"
    run_logged(command, f"installing lastgood[{extras}] with {source} (a minute or two the first time)", cwd=ROOT)


def ensure_venv(extras: str) -> None:
    if not python_of(VENV).exists():
        create_venv(VENV)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + CONSTRAINTS.read_bytes()
                            + extras.encode()).hexdigest()
    stamp = VENV / f".installed-{extras.replace(',', '-')}"
    if stamp.exists() and stamp.read_text() == digest:
        step(f"{VENV.name} is up to date with pyproject.toml and constraints.txt")
        return
    pip_install(VENV, extras, pinned=True)
    stamp.write_text(digest)


def ensure_debian_packages() -> None:
    missing = [pkg for pkg, path in DEBIAN_FOR_TESTS.items() if not Path(path).exists()]
    if not missing:
        step(f"Debian packages present: {', '.join(DEBIAN_FOR_TESTS)}")
        return
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if sudo and not shutil.which("sudo"):
        sys.exit(f"dev.py: the tests need Debian packages {missing}; install them as root "
                 f"(apt-get install -y {' '.join(missing)})")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run_logged([*sudo, "apt-get", "update", "-qq"], "updating Debian's package lists", env=env)
    run_logged([*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
               f"installing Debian packages {', '.join(missing)} (for the browser and PostgreSQL tests)", env=env)


def sample_stores() -> list[str]:
    """Every store under sample_data/: the native store, the databases, the framework folders and
    one store per training layout (the generators and the manifest are not stores)."""
    data = ROOT / "sample_data"
    stores = [p for p in sorted(data.iterdir())
              if p.name not in ("generators", "training") and not p.name.startswith((".", "_"))
              and (p.is_dir() or p.suffix in (".sqlite", ".db"))]
    training = data / "training"
    stores += sorted(p for p in training.iterdir() if p.is_dir()) if training.is_dir() else []
    return [str(s) for s in stores]


def lock() -> int:
    """constraints.txt from a new virtualenv that resolved every extra with nothing pinned."""
    with tempfile.TemporaryDirectory(prefix="lastgood-lock-") as tmp:
        venv = Path(tmp) / "venv"
        create_venv(venv)
        pip_install(venv, LOCKED_EXTRAS, pinned=False)
        frozen = subprocess.run([str(python_of(venv)), "-m", "pip", "freeze", "--exclude-editable"],
                                check=True, capture_output=True, text=True).stdout
    pins = sorted((line for line in frozen.splitlines() if line and not line.startswith("lastgood")),
                  key=str.lower)
    header = ("# The versions dev.py and CI install (pip -c constraints.txt), resolved for lastgood[all,dev]\n"
              f"# on Python {sys.version_info.major}.{sys.version_info.minor} by `python3 dev.py lock`. "
              "Regenerate after `python3 dev.py drift` passes.\n")
    CONSTRAINTS.write_text(header + "\n".join(pins) + "\n")
    step(f"wrote {CONSTRAINTS.name}: {len(pins)} pinned packages")
    return 0


def drift(rest: list[str]) -> int:
    """The whole suite on the newest versions pyproject.toml allows (not in CI's path)."""
    venv = ROOT / ".venv-drift"
    if not python_of(venv).exists():
        create_venv(venv)
    pip_install(venv, EXTRAS["test"], pinned=False, upgrade=True)
    ensure_debian_packages()
    changed = _versions_against_lock(venv)
    step("newer than constraints.txt: " + (", ".join(changed) if changed else "nothing"))
    args = [*SUITE_OPTIONS, *rest] if not _chose_workers(rest) else rest
    return subprocess.call([str(python_of(venv)), "-m", "pytest", *args], cwd=ROOT)


def _versions_against_lock(venv: Path) -> list[str]:
    frozen = subprocess.run([str(python_of(venv)), "-m", "pip", "freeze", "--exclude-editable"],
                            check=True, capture_output=True, text=True).stdout
    pinned = dict(_pin(line) for line in CONSTRAINTS.read_text().splitlines() if "==" in line)
    now = dict(_pin(line) for line in frozen.splitlines() if "==" in line)
    return [f"{name} {pinned[name]} -> {version}" for name, version in sorted(now.items())
            if name in pinned and pinned[name] != version]


def _pin(line: str) -> tuple[str, str]:
    name, _, version = line.partition("==")
    return name.strip().lower().replace("_", "-"), version.strip()


def fixtures(names: list[str]) -> int:
    """Regenerate the sample stores of other frameworks, each in its own pinned virtualenv; with
    ``--verify``, run the framework round trips instead (a Lastgood action read back through each
    framework's own API; the virtualenvs are created when missing)."""
    if "--verify" in names:
        return verify_round_trips([n for n in names if n != "--verify"])
    available = sorted(p.name for p in GENERATORS.iterdir() if (p / "generate.py").exists())
    for name in names or available:
        if name not in available:
            sys.exit(f"dev.py: no generator {name!r} (known: {', '.join(available)})")
        folder = GENERATORS / name
        venv = ROOT / ".venv-fixtures" / name
        if not python_of(venv).exists():
            create_venv(venv)
            run_logged([str(python_of(venv)), "-m", "pip", "install", "--progress-bar", "off",
                        "-r", str(folder / "requirements.txt")], f"installing {name}'s pinned requirements")
        run_logged([str(python_of(venv)), str(folder / "generate.py"), *_generator_args(folder)],
                   f"writing {name}'s sample store", cwd=ROOT)
    return 0


def verify_round_trips(names: list[str]) -> int:
    ensure_venv(EXTRAS["test"])
    ensure_debian_packages()
    files = sorted(GENERATORS.glob("*/test_roundtrip*.py"))
    files = [f for f in files if not names or f.parent.name in names]
    step(f"running {len(files)} framework round-trip files (each framework's pinned virtualenv)")
    return subprocess.call([str(python_of(VENV)), "-m", "pytest", "--import-mode=importlib", "-p", "no:cacheprovider",
                            *map(str, files)], cwd=ROOT)


def _generator_args(folder: Path) -> list[str]:
    """The generator's own default command line (its README says where it writes)."""
    args = folder / "args.txt"
    return args.read_text().split() if args.exists() else []


# Two workers (pytest-xdist), one test file each at a time: most tests wait on a subprocess, a server
# or a browser, so two files run side by side on two cores; a file's module-scoped servers stay in one
# worker. The slowest 15 tests are listed at the end.
SUITE_OPTIONS = ("-n", "2", "--dist", "loadfile", "--durations=15")


def _chose_workers(rest: list[str]) -> bool:
    """The caller picked how to run (``-n``, ``-p no:xdist``, one test by node id): leave it."""
    return any(a.startswith(("-n", "--numprocesses", "-p")) or "::" in a for a in rest)


def main(argv: list[str]) -> int:
    commands = ("ui", "test", "lock", "drift", "fixtures")
    if not argv or argv[0] not in commands:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "lock":
        return lock()
    if command == "drift":
        return drift(rest)
    if command == "fixtures":
        return fixtures(rest)
    ensure_venv(EXTRAS[command])
    if command == "test":
        ensure_debian_packages()
        args = [*SUITE_OPTIONS, *rest] if not _chose_workers(rest) else rest
        step("running the test suite (pytest " + " ".join(args) + ")")
        return subprocess.call([str(python_of(VENV)), "-m", "pytest", *args], cwd=ROOT)
    # the dashboard replaces this process: a signal sent to it (a terminal closed, SIGTERM) stops the dashboard
    ui = [str(VENV / "bin" / "lastgood"), "ui", *sample_stores(), *rest]
    step("starting the dashboard on sample_data/")
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(ROOT)
    os.execv(ui[0], ui)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
