"""A third-party reader installed as a plugin (an entry point in the ``lastgood.readers`` group of an
installed distribution) is found by the registry, picked from a store's contents, used by the CLI,
and passes the shipped conformance kit (docs/readers.md walks through writing it)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lastgood.checks import Check
from lastgood.readers import registry
from lastgood.readers.testing import Damage, ReaderConformance
from tests.helpers import SECRET, lastgood_cli

EXAMPLE = Path(__file__).parent / "plugin_example" / "lastgood_jsonl_demo"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def install_plugin(site: Path) -> None:
    """The example package and its distribution's metadata (what ``pip install`` leaves in
    site-packages), under ``site``."""
    shutil.copytree(EXAMPLE, site / EXAMPLE.name, dirs_exist_ok=True)
    info = site / "lastgood_jsonl_demo-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lastgood-jsonl-demo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[lastgood.readers]\njsonl-demo = lastgood_jsonl_demo:JsonlReader\n")


@pytest.fixture
def plugin_site(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path_factory.mktemp("site-packages")
    install_plugin(site)
    monkeypatch.syspath_prepend(str(site))
    registry._available_readers.cache_clear()
    yield site
    registry._available_readers.cache_clear()
    sys.modules.pop("lastgood_jsonl_demo", None)


def write_runs(root: Path, runs: int = 2, steps: int = 4) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for r in range(runs):
        with (root / f"run-{r}.ckpt.jsonl").open("w") as handle:
            for step in range(steps):
                handle.write(_line(f"r{r}-c{step:04d}", step) + "\n")


def _line(cid: str, step: int) -> str:
    state = {"messages": [{"role": "user", "content": f"step {step}"}], "tools": {"api_key": SECRET}}
    return json.dumps({"checkpoint": cid, "step": step,
                       "time": (T0 + timedelta(minutes=step)).isoformat().replace("+00:00", "Z"), "state": state})


def test_the_plugin_is_listed_and_picked_from_the_stores_contents(plugin_site: Path, tmp_path: Path) -> None:
    write_runs(tmp_path / "store")
    assert registry.available_readers()["jsonl-demo"] == "lastgood_jsonl_demo:JsonlReader"
    assert registry.pick_reader(str(tmp_path / "store")) == "jsonl-demo"
    assert "jsonl-demo" not in registry.BUILTIN


def test_the_cli_uses_an_installed_plugin(plugin_site: Path, tmp_path: Path) -> None:
    write_runs(tmp_path / "store")
    env = {"PYTHONPATH": os.pathsep.join([str(plugin_site), os.environ.get("PYTHONPATH", "")])}
    listed = lastgood_cli("ls", str(tmp_path / "store"), "--format", "json", home=tmp_path / "home", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert len(rows) == 8 and {r["run_id"] for r in rows} == {"run-0", "run-1"}
    shown = lastgood_cli("show", str(tmp_path / "store"), "r1-c0002", "--format", "json", home=tmp_path / "home",
                         env=env)
    assert shown.returncode == 0 and SECRET not in shown.stdout
    assert json.loads(shown.stdout)["state"]["messages"][0]["content"] == "step 2"


def test_without_the_plugin_the_store_is_not_recognised_and_says_which_readers_exist(tmp_path: Path) -> None:
    write_runs(tmp_path / "store")
    done = lastgood_cli("ls", str(tmp_path / "store"), home=tmp_path / "home")
    assert done.returncode == 2 and "no reader recognises" in done.stderr and "native" in done.stderr


def _malformed_line(url: str) -> None:
    with (Path(url) / "run-0.ckpt.jsonl").open("a") as handle:
        handle.write("{not json\n")


def _no_state(url: str) -> None:
    with (Path(url) / "run-1.ckpt.jsonl").open("a") as handle:
        handle.write(json.dumps({"checkpoint": "r1-broken", "step": 9, "time": "2026-11-02T10:00:00Z",
                                 "stat": {}}) + "\n")


class TestJsonlPluginKit(ReaderConformance):
    reader_name = "jsonl-demo"
    secret = SECRET

    @pytest.fixture(autouse=True)
    def _installed(self, plugin_site: Path) -> None:
        pass

    def make_store(self, tmp: Path) -> str:
        write_runs(tmp / "jsonl")
        return str(tmp / "jsonl")

    def append(self, url: str) -> int:
        with (Path(url) / "run-0.ckpt.jsonl").open("a") as handle:
            for step in range(4, 7):
                handle.write(_line(f"r0-c{step:04d}", step) + "\n")
        return 3

    def damages(self) -> list[Damage]:
        return [Damage("a malformed line", _malformed_line, {Check.CATALOG_LINE}, "structure"),
                Damage("a line without a state", _no_state, {Check.UNDECODABLE})]
