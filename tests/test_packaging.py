"""Packaging: one importable package named ``lastgood``; layering of its modules; the wheel works.

The wheel test builds the project as a user's ``pip`` would, installs it into a
clean virtualenv outside the checkout, starts ``lastgood ui`` from there and
loads the Overview in real Chromium.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.fixtures_browser import free_port, group_pids, wait_for_health

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("app", "readers", "pages", "tests", "benchmarks", "sample_data")
OLD_TOP_LEVEL = {"app", "readers", "pages", "rewind"}
# what readers may import from the rest of the package: tests/test_layering.py


def imports_of(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def python_files(*dirs: str) -> list[Path]:
    files = [p for d in dirs for p in _walk_py(ROOT / d)]
    return [*files, ROOT / "dev.py"] if "tests" in dirs else files


def _walk_py(folder: Path) -> list[Path]:
    """The project's Python files under ``folder``: hidden folders (virtualenvs, benchmark caches) and
    ``__pycache__`` are not descended into."""
    found = []
    for here, subdirs, names in os.walk(folder):
        subdirs[:] = [d for d in subdirs if not d.startswith(".") and d != "__pycache__"]
        found += [Path(here) / n for n in names if n.endswith(".py")]
    return sorted(found)


def test_no_module_imports_the_old_top_level_names() -> None:
    offenders = [f"{p.relative_to(ROOT)}: {name}" for p in python_files(*SOURCE_DIRS)
                 for name in imports_of(p) if name.split(".")[0] in OLD_TOP_LEVEL]
    assert offenders == []


def test_errors_and_checks_import_nothing_above_them() -> None:
    for module in ("errors.py", "checks.py"):
        names = [n for n in imports_of(ROOT / "app" / module) if n.startswith("lastgood")]
        assert set(names) <= {"lastgood.checks"}, module


# a check named by a literal: Finding("x", …), check="x", f.check == "x", SQL "check" = 'x'
CHECK_LITERAL = re.compile(
    r"""(?:Finding\(\s*(?:check=)?|\bcheck\s*(?:==|!=|=)\s*|"check"\s*(?:=|<>|!=|IN)\s*\(?)["']([a-z0-9-]+)["']""")


def test_check_ids_are_not_spelled_as_literals() -> None:
    from lastgood.checks import Check

    ids = {c.value for c in Check}
    offenders = []
    for path in python_files("app", "readers", "pages"):
        if path.name == "checks.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if any(m.group(1) in ids for m in CHECK_LITERAL.finditer(line)):
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert offenders == []


def test_python_dash_m_lastgood_runs_the_cli() -> None:
    result = subprocess.run([sys.executable, "-m", "lastgood", "--help"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0
    assert "usage: lastgood" in result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import shutil

    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")  # a clean copy: no stale build/ from earlier builds
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("app", "readers", "pages"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "-w", str(out), str(source)], check=True, timeout=300)
    (found,) = out.glob("lastgood-*.whl")
    return found


def test_wheel_holds_one_top_level_package_with_its_pages(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"lastgood"}
    for needed in ("lastgood/streamlit_app.py", "lastgood/pages/overview.py", "lastgood/pages/timeline.py",
                   "lastgood/readers/native/writer.py", "lastgood/__main__.py", "lastgood/ui/diff.py"):
        assert needed in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "lastgood = lastgood.cli.main:entry" in zipfile.ZipFile(wheel).read(entry_points).decode()


@pytest.fixture(scope="module")
def wheel_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean virtualenv outside the checkout with the wheel installed (dependencies from this
    environment's site-packages, so no network is needed)."""
    import sysconfig

    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # the dependencies come from this environment as a plain path entry: a .pth line is not a site
    # dir, so the checkout's editable finder (itself a .pth in that dir) stays out of the new venv
    (Path(purelib) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, timeout=300)
    return venv


def _clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LASTGOOD_", "PYTHONPATH"))}
    env["LASTGOOD_HOME"] = str(tmp / "home")
    return env


def test_user_project_with_its_own_app_package_imports_lastgood(wheel_venv: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text("NAME = 'users own app'\n")
    (project / "readers").mkdir()
    (project / "readers" / "__init__.py").write_text("")
    script = ("import app, lastgood, lastgood.readers.native.writer as w\n"
              "assert app.NAME == 'users own app'\n"
              "assert 'site-packages' in lastgood.__file__, lastgood.__file__\n"
              "print(w.NativeWriter.__name__)\n")
    result = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", script], cwd=project,
                            capture_output=True, text=True, timeout=120, env=_clean_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "NativeWriter"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, seconds: float = 90) -> None:
    import urllib.request

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the dashboard exited"
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError("dashboard did not come up")



@pytest.mark.browser
def test_wheel_install_serves_a_working_dashboard(wheel_venv: Path, tmp_path: Path, chromium_browser) -> None:
    port = free_port()
    store = ROOT / "sample_data" / "agents"
    proc = subprocess.Popen([str(wheel_venv / "bin" / "lastgood"), "ui", str(store), "--port", str(port)],
                            cwd=tmp_path, env=_clean_env(tmp_path), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_health(url, proc, 90)
        page = chromium_browser.new_page()
        page.goto(url)
        page.get_by_text("Checkpoints", exact=True).first.wait_for(timeout=60_000)
        body = page.inner_text("body")
        assert "2,386" in body
        assert "could not be found" not in body and "Traceback" not in body
        page.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_sigterm_to_lastgood_ui_leaves_no_streamlit_behind(tmp_path: Path) -> None:
    port = free_port()
    lastgood = Path(sys.executable).with_name("lastgood")
    proc = subprocess.Popen([str(lastgood), "ui", str(ROOT / "sample_data" / "agents"), "--port", str(port)],
                            env=_clean_env(tmp_path), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_health(f"http://127.0.0.1:{port}", proc, 90)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while group_pids(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert group_pids(proc.pid) == []
    finally:
        for pid in group_pids(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# a status named by a literal in SQL: status = 'ok', status IN ('corrupt', …), 'ok' AS status
STATUS_WORDS = "ok|corrupt|incomplete|quarantined|superseded"
STATUS_LITERAL = re.compile(
    rf"""status\s*(?:=|<>|!=|\bIN\b|\bNOT IN\b)\s*\(?\s*'({STATUS_WORDS})'|'({STATUS_WORDS})'\s+AS\s+\w*status""",
    re.IGNORECASE)


def test_statuses_are_not_spelled_as_sql_literals() -> None:
    """Statuses are a StrEnum (lastgood.readers.base.Status); SQL names them through sql_statuses."""
    offenders = []
    for path in python_files("app", "readers", "pages"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if STATUS_LITERAL.search(line) and not line.lstrip().startswith("#"):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []
    assert STATUS_LITERAL.search("WHERE c.status = 'ok' AND") and STATUS_LITERAL.search("'ok' AS listed_status")
