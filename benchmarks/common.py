"""Helpers shared by Lastgood's benchmarks: child-process timing and peak RSS,
machine info, and rewriting one section of ``docs/benchmarks.md``.

Every measured thing runs in a fresh subprocess (``run_child``), so import
costs, caches and memory of one measurement never leak into another. The
child's wall time is taken around the process, its peak RSS from the kernel's
rusage for exactly that child (``os.wait4``). A child can also report its own
in-process timings as one JSON object on its last stdout line
(``ChildResult.report``; ``python_child`` builds such a child from a snippet).

Nothing here imports the packages under test, so the parent stays light.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
DOC_INTRO = """\
# Benchmarks

What is measured: the targets of the *Targets* table in `PRODUCT.md`. Each
benchmark in `benchmarks/` measures Lastgood **and its anchor in the same run on
the same machine**, and every figure below sits next to its anchor from that
run, so a number is only ever compared with something measured alongside it.

How it is measured: every timed thing runs in a fresh Python subprocess (no
warm imports or caches carried over), a few times; the table shows the median
(and the samples where useful). Peak RSS is the kernel's high-water mark for
that one child process (`getrusage`/`wait4` `ru_maxrss`). Machine, versions
and date are listed under each table.

How to rerun (each command rewrites only its own section of this file; every
command is timed exactly as a user types it, default options, whole process):

    .venv/bin/python benchmarks/bench_native_index.py        # native store, 1M checkpoints
    .venv/bin/python benchmarks/bench_langgraph_index.py     # `lastgood index DB`, 100k LangGraph SQLite
    .venv/bin/python benchmarks/bench_huge_blobs.py          # first `lastgood ls`, 303 huge checkpoints
    .venv/bin/python benchmarks/bench_ui_open.py             # `lastgood ui DB` → Overview in Chromium
    .venv/bin/python benchmarks/bench_ui_open.py --postgres  # the same on PostgreSQL (PostgresSaver)

Generated data is cached under `benchmarks/.cache/` (gitignored): the LangGraph
databases are written by real LangGraph the first time (the 100k SQLite DB takes
a few minutes, the PostgreSQL one longer). The machine may be shared: each
benchmark notes the idle CPU share it saw before measuring, and CPU time
(user+sys) where wall time is unreliable; rerun on a quiet machine for the
figures that count.
"""


# ---- timing -------------------------------------------------------------------

@dataclass
class Samples:
    """Repeated measurements of one quantity (seconds, bytes, …)."""

    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(float(value))

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def best(self) -> float:
        return min(self.values) if self.values else float("nan")

    @property
    def worst(self) -> float:
        return max(self.values) if self.values else float("nan")

    def __len__(self) -> int:
        return len(self.values)


BYTECODE_NOTE: list[str] = []


def cache_bytecode() -> None:
    """Run the children as an installed package runs: with its modules' bytecode cached
    (pip compiles a wheel's at install time). A PYTHONDONTWRITEBYTECODE=1 environment
    (this machine's sessions set it) would recompile every Lastgood module in every
    command, ~0.1 s of each."""
    import compileall

    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
        BYTECODE_NOTE.append("PYTHONDONTWRITEBYTECODE was set here; the children run without it")
    for folder in ("app", "readers", "pages"):
        compileall.compile_dir(str(ROOT / folder), quiet=1)


def time_call(fn: Callable[[], Any], repeat: int = 3) -> tuple[Samples, Any]:
    """Run ``fn`` ``repeat`` times in this process; the samples and the last result."""
    samples, result = Samples(), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        samples.add(time.perf_counter() - started)
    return samples, result


# ---- child processes ------------------------------------------------------------

@dataclass
class ChildResult:
    command: list[str]
    returncode: int
    wall: float          # seconds, process start to exit, measured by the parent
    peak_rss: int        # bytes, this child's ru_maxrss
    user: float          # CPU seconds in user mode
    system: float        # CPU seconds in the kernel
    stdout: str
    stderr: str

    @property
    def report(self) -> dict[str, Any]:
        """The JSON object on the child's last non-empty stdout line ({} if none)."""
        for line in reversed(self.stdout.splitlines()):
            line = line.strip()
            if line.startswith("{"):
                try:
                    value = json.loads(line)
                except json.JSONDecodeError:
                    break
                return value if isinstance(value, dict) else {}
            if line:
                break
        return {}

    def check(self) -> ChildResult:
        if self.returncode != 0:
            raise RuntimeError(
                f"{' '.join(self.command)} exited {self.returncode}\n"
                f"--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}")
        return self


def run_child(command: Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike[str] | None = None, timeout: float | None = None,
              extra_env: Mapping[str, str] | None = None) -> ChildResult:
    """Run ``command`` in a fresh process; wall time, peak RSS and output of that child."""
    environment = dict(os.environ if env is None else env)
    environment.update(extra_env or {})
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(list(command), stdout=out, stderr=err, env=environment,
                                cwd=cwd, stdin=subprocess.DEVNULL)
        deadline = None if timeout is None else started + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, 0 if deadline is None else os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                raise TimeoutError(f"{' '.join(command)} ran longer than {timeout} s")
            time.sleep(0.005)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    # ru_maxrss is in KiB on Linux, bytes on macOS
    rss = usage.ru_maxrss if sys.platform == "darwin" else usage.ru_maxrss * 1024
    return ChildResult(list(command), proc.returncode, wall, rss, usage.ru_utime, usage.ru_stime,
                       stdout, stderr)


def python_child(code: str, *args: str, python: str | None = None, **kwargs: Any) -> ChildResult:
    """Run a Python snippet in a fresh interpreter (``sys.argv[1:]`` = ``args``).

    The snippet reports in-process figures by printing one JSON object as its
    last stdout line; read it back with ``ChildResult.report``.
    """
    return run_child([python or sys.executable, "-c", code, *args], **kwargs)


def cpu_idle_fraction(window: float = 1.0) -> float | None:
    """Share of all CPUs idle over ``window`` seconds (from /proc/stat; None elsewhere)."""
    def sample() -> tuple[int, int] | None:
        try:
            fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        return fields[3] + (fields[4] if len(fields) > 4 else 0), sum(fields)
    first = sample()
    time.sleep(window)
    second = sample()
    if not first or not second or second[1] == first[1]:
        return None
    return (second[0] - first[0]) / (second[1] - first[1])


def wait_for_idle(min_idle: float = 0.7, timeout: float = 60.0, window: float = 1.0) -> float | None:
    """Wait (up to ``timeout`` s) until the machine is mostly idle; the last idle share seen.

    Timings on a shared machine are only comparable when nothing else runs;
    benchmarks call this before each measurement and report what they saw.
    """
    deadline = time.monotonic() + timeout
    idle = cpu_idle_fraction(window)
    while idle is not None and idle < min_idle and time.monotonic() < deadline:
        idle = cpu_idle_fraction(window)
    return idle


# ---- machine -----------------------------------------------------------------

def machine_info(packages: Iterable[str] = ("duckdb", "pandas", "pyarrow")) -> dict[str, Any]:
    """Where a run happened: CPU, memory, OS, Python and package versions, load."""
    info: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory": _mem_total(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }
    for name in packages:
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = "not installed"
    try:
        info["load"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        pass
    return info


def machine_line(info: Mapping[str, Any]) -> str:
    """The machine info as one Markdown line."""
    parts = [f"{info.get('date')}", f"{info.get('cpu')} ({info.get('usable_cpus') or info.get('cpus')} CPUs)"]
    if info.get("memory"):
        parts.append(f"{fmt_bytes(info['memory'])} RAM")
    parts.append(info.get("os", ""))
    parts.append(f"Python {info.get('python')}")
    skip = {"date", "cpu", "cpus", "usable_cpus", "memory", "os", "python", "load"}
    parts += [f"{k} {v}" for k, v in info.items() if k not in skip]
    if info.get("load"):
        parts.append(f"load average at start {info['load']}")
    if BYTECODE_NOTE:
        parts.append("Lastgood's bytecode compiled before timing, as an installed wheel's is")
    return " · ".join(p for p in parts if p)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_total() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


# ---- formatting ----------------------------------------------------------------

def fmt_seconds(seconds: float) -> str:
    if math.isnan(seconds):
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 100:
        return f"{seconds:.2f} s"
    return f"{seconds:.0f} s"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit in ("B", "KiB") else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n}"


def fmt_ratio(anchor: float, measured: float) -> str:
    """How many times faster ``measured`` is than ``anchor``."""
    if not measured or math.isnan(measured) or math.isnan(anchor):
        return "—"
    return f"{anchor / measured:.1f}×"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
    return "\n".join(lines)


def text_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """The same table aligned for a terminal."""
    rows = [[str(c) for c in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line([str(h) for h in headers]), line(["-" * w for w in widths]),
                      *(line(r) for r in rows)])


# ---- docs/benchmarks.md ------------------------------------------------------------

def publish_section(name: str, *, title: str, intro: str, headers: Sequence[str], rows: list[list[str]],
                    summary: str, notes: Sequence[str], machine: Mapping[str, Any], started: float,
                    write: bool = True) -> None:
    """A benchmark's result: its section of docs/benchmarks.md (``## title``, the intro with its rerun
    command, the table, the verdicts, the notes, the machine) and the same as text on stdout."""
    body = "\n\n".join([f"## {title}", intro, markdown_table(headers, rows), summary,
                         "\n".join(f"- {line}" for line in notes), f"Machine: {machine_line(machine)}."])
    print()
    print(title.replace("`", ""))
    print(text_table(headers, [[str(c).replace("`", "").replace("**", "") for c in row] for row in rows]))
    print()
    print(summary.replace("`", ""))
    for line in notes:
        print(f"- {line}")
    print(f"(benchmark took {fmt_seconds(time.perf_counter() - started)})", file=sys.stderr)
    if write:
        path = write_section(name, body)
        print(f"wrote section {name!r} of {path}", file=sys.stderr)


def load_note(log: Sequence[Mapping[str, Any]], runs: str, idle_wait: float) -> str:
    """How loaded the machine was around the measurements (``log``: one {load, idle} per measurement)."""
    loads = [x["load"] for x in log]
    idles = [x["idle"] for x in log if x["idle"] is not None]
    return (f"{runs}. The machine is shared: the 1-minute load average just before each measurement was "
            f"{min(loads):.1f}–{max(loads):.1f} (median {sorted(loads)[len(loads) // 2]:.1f})"
            + (f", the idle CPU share {min(idles):.0%}–{max(idles):.0%} (each waited ≤ {idle_wait:.0f} s for "
               "≥ 70 %)" if idles else "") + " on 2 CPUs; wall times on a busy machine run long, CPU time "
            "(user+sys of the process and its children) is the fairer view.")


def write_section(name: str, body: str, path: str | os.PathLike[str] = DOC,
                  intro: str = DOC_INTRO) -> Path:
    """Replace the text between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``.

    The file is created with ``intro`` if missing; a section not there yet is
    appended. Other sections are left byte for byte as they were. A lock on
    the file keeps two benchmarks finishing at once from losing an update.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{body.strip()}\n{end}"
    with open(target, "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.seek(0)
            text = handle.read() or intro.rstrip("\n") + "\n"
            i = text.find(start)
            j = text.find(end, i + len(start)) if i >= 0 else -1
            if i >= 0 and j >= 0:
                text = text[:i] + block + text[j + len(end):]
            else:
                text = text.rstrip("\n") + "\n\n" + block + "\n"
            handle.seek(0)
            handle.truncate()
            handle.write(text)
            handle.flush()
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    return target
