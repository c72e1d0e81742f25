"""`lastgood ls / index / verify / verify --read-data` on S3 behind a per-request latency, next to
a loop of sequential GETs through the same latency.

    python benchmarks/bench_s3_latency.py [--latency-ms 20] [--checkpoints 10000] [--runs 3]
                                          [--anchor-runs 1] [--trainer-checkpoints 50] [--no-trainer]
                                          [--diagnose] [--write-on-s3] [--no-write]

Why: moto's server on loopback answers with ~0 network latency, so a sequential client and a
concurrent one look alike there, and the "verify on S3 ≥ 5× sequential GETs" target could be
neither met nor disproved. Real object stores answer many requests in parallel, each after
10–50 ms to first byte. This benchmark puts that latency back:

* moto's S3 server in THREADED mode (``ThreadedMotoServer``: werkzeug, a thread per connection)
  in its own process, request logging off;
* in front of it a small latency proxy (stdlib only: ``ThreadingHTTPServer`` + ``http.client``,
  one keep-alive connection to moto per client connection, TCP_NODELAY) in its own process: it
  sleeps ``--latency-ms`` (default 20 ms) before forwarding EACH request, streams the answer
  back, and counts requests (by kind and by what they read), bytes, client connections and how
  many requests were in flight at once (time-weighted mean and peak). Its own overhead is
  measured: the same sequential GETs through a second proxy at latency 0 next to moto direct;
* both the anchor and Lastgood use the proxy's URL as their S3 endpoint
  (``FSSPEC_S3_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL`` + dummy credentials, as a user sets them).

Data (moto is in-memory, so it is loaded in every run, straight into moto — never through the proxy):

* ``s3://bench/agents``: a native store of ``--checkpoints`` checkpoints written by
  ``NativeWriter`` (``save_many`` per run, ``compact()`` into one Parquet part, then ``--tail``
  more saves as a small tail; states are the tests' ``agent_state``, a few hundred bytes to a few
  KB, so requests, not decoding, dominate). Written once into ``benchmarks/.cache/`` (reused while
  the writer's code and the parameters match) and put object by object into moto's in-memory
  backend before the server starts (seconds; one PUT per checkpoint through moto's HTTP takes
  minutes here). ``--write-on-s3`` writes it with ``NativeWriter`` straight to ``s3://`` through
  moto instead.
* ``s3://bench/trainer``: a Trainer output folder: ``--trainer-checkpoints`` ``checkpoint-N``
  folders laid out as ``transformers.Trainer`` writes them (the files of
  ``sample_data/training/hf_trainer``'s first checkpoint, a ``model.safetensors`` of
  ``--trainer-mb`` MiB of float32, ``trainer_state.json`` with the step), cached the same way.

Measured, each in a fresh process, exactly as a user types it (default options, table output,
whole process), ``--runs`` times, medians:

* home A (fresh, empty LASTGOOD_HOME): ``lastgood ls s3://bench/agents`` (never seen; target
  ≤ 5 s), ``lastgood ls`` again (index warm), ``lastgood verify s3://bench/agents``;
* home B (fresh): ``lastgood index s3://bench/agents``, then ``lastgood verify s3://bench/agents
  --read-data`` (target ≥ 5× the loop below);
* the Trainer folder, fresh homes: ``lastgood ls s3://bench/trainer`` and
  ``lastgood verify s3://bench/trainer --read-data``;
* anchor: a fresh process GETs every blob object of the store one after another through the
  proxy (``S3FileSystem.cat_file(path, max_concurrency=1)``: one GET each, no HEAD); the loop is
  timed (imports and the listing excluded, which favours the anchor) and so is each GET. At
  ~25 ms a GET one loop of 10,000 takes minutes and is its own sample of 10,000, so
  ``--anchor-runs`` defaults to 1. The Trainer folder's anchor: every file, the same way.

For every command: requests through the proxy (by kind), mean/peak requests in flight, client
CPU (user+sys of the command and its workers), and moto's and the proxy's CPU during it.
``--diagnose`` adds, once each, the same work with one limit changed (no automatic data check,
``--workers 1``/``4``, a fetch-only client with 10 or 64 connections) to show which limit each
figure sits on.

Runtime: ~11 min on a quiet 2-CPU machine (three 10,000-GET commands per run and one
10,000-GET sequential loop; estimated from CPU time), much longer on a busy one; ``--runs 1``
for a quick look. Writes the ``s3-latency`` section of docs/benchmarks.md (``--no-write`` to
skip) and every sample to ``benchmarks/.cache/s3-latency-last.json``. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    ROOT,
    ChildResult,
    Samples,
    cache_bytecode,
    fmt_bytes,
    fmt_seconds,
    machine_info,
    machine_line,
    markdown_table,
    python_child,
    run_child,
    wait_for_idle,
    write_section,
)

SECTION = "s3-latency"
LASTGOOD = str(Path(sys.executable).with_name("lastgood"))
BUCKET = "bench"
STORE = f"s3://{BUCKET}/agents"
TRAINER = f"s3://{BUCKET}/trainer"
VERIFY_TARGET = 5.0
LS_TARGET = 5.0
CACHE = ROOT / "benchmarks" / ".cache"
CONTROL = "/__bench__/"  # proxy control paths (a bucket name cannot hold "_")


# ---- the latency proxy (runs in its own process: `bench_s3_latency.py --serve-proxy …`) ----------

def serve_proxy(port: int, upstream: str, latency_ms: float) -> None:
    """A threaded HTTP proxy: sleep ``latency_ms``, forward to ``upstream`` (keep-alive), stream back."""
    import http.client
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, unquote, urlsplit

    up = urlsplit(upstream)
    hop = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
           "proxy-authorization", "proxy-authenticate"}
    state = {"latency": latency_ms / 1000.0}
    lock = threading.Lock()
    stats: dict[str, Any] = {}

    def reset() -> None:
        stats.clear()
        stats.update(requests=0, kinds={}, bytes_out=0, bytes_in=0, connections=0, in_flight=0,
                     peak_in_flight=0, area=0.0, busy=0.0, last=time.perf_counter(), started=time.perf_counter())

    def tick(now: float) -> None:  # integrate requests-in-flight over time (under the lock)
        span = now - stats["last"]
        stats["area"] += stats["in_flight"] * span
        if stats["in_flight"]:
            stats["busy"] += span
        stats["last"] = now

    reset()

    def kind_of(method: str, path: str, headers: Any) -> str:
        """``GET blob``, ``GET range part``, ``LIST``, ``HEAD marker``, …: the request and what it reads."""
        target, _, query = path.partition("?")
        key = unquote(target.lstrip("/").partition("/")[2])
        if method == "GET" and (not key or "list-type" in query or "prefix=" in query or "delimiter=" in query):
            prefix = parse_qs(query).get("prefix", [""])[0].partition("/")[2]  # below the store's folder
            top, _, rest = prefix.partition("/")
            top = "checkpoint-N" if top.startswith("checkpoint-") else top
            return f"LIST {top or '(root)'}{'/…' if rest.strip('/') else ''}"
        if "/blobs/" in key:
            area = "blob"
        elif "/catalog/parts/" in key:
            area = "part"
        elif "/catalog/tail/" in key:
            area = "tail"
        elif "/heads/" in key:
            area = "head"
        elif key.endswith("lastgood-store.json"):
            area = "marker"
        else:
            area = key.rsplit("/", 1)[-1]  # a training folder's file name
        if method == "GET" and headers.get("Range"):
            method = "GET range"
        return f"{method} {area}"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # else a small write after the headers waits for a delayed ACK (~40 ms)
        upstream_conn: http.client.HTTPConnection | None = None

        def log_message(self, *args: Any) -> None:
            pass

        def setup(self) -> None:
            super().setup()
            with lock:
                stats["connections"] += 1

        def finish(self) -> None:
            super().finish()
            if self.upstream_conn is not None:
                self.upstream_conn.close()

        def _body(self) -> bytes | None:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                parts = []
                while True:
                    size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        break
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
                return b"".join(parts)
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else None

        def _control(self) -> None:
            command, _, query = self.path[len(CONTROL):].partition("?")
            with lock:
                if command == "reset":
                    reset()
                elif command == "latency":
                    state["latency"] = float(query.split("=", 1)[1]) / 1000.0
                tick(time.perf_counter())
                body = json.dumps({**stats, "latency_ms": state["latency"] * 1000.0,
                                   "wall": time.perf_counter() - stats["started"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _forward(self) -> None:
            if self.path.startswith(CONTROL):
                self._control()
                return
            body = self._body()
            kind = kind_of(self.command, self.path, self.headers)
            with lock:
                now = time.perf_counter()
                tick(now)
                stats["requests"] += 1
                stats["kinds"][kind] = stats["kinds"].get(kind, 0) + 1
                stats["bytes_in"] += len(body or b"")
                stats["in_flight"] += 1
                stats["peak_in_flight"] = max(stats["peak_in_flight"], stats["in_flight"])
            sent = 0
            try:
                if state["latency"]:
                    time.sleep(state["latency"])
                headers = {k: v for k, v in self.headers.items() if k.lower() not in hop}
                if body is not None:
                    headers["Content-Length"] = str(len(body))
                for attempt in (0, 1):  # a keep-alive connection moto closed meanwhile: once more on a new one
                    if self.upstream_conn is None:
                        self.upstream_conn = http.client.HTTPConnection(up.hostname, up.port, timeout=120)
                    try:
                        self.upstream_conn.request(self.command, self.path, body=body, headers=headers)
                        response = self.upstream_conn.getresponse()
                        break
                    except (http.client.HTTPException, OSError):
                        self.upstream_conn.close()
                        self.upstream_conn = None
                        if attempt:
                            raise
                length = response.getheader("Content-Length")
                no_body = self.command == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200
                self.send_response(response.status, response.reason)
                for name, value in response.getheaders():
                    if name.lower() not in hop and name.lower() not in ("server", "date"):
                        self.send_header(name, value)
                chunked = length is None and not no_body
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while True:
                    piece = response.read(65536)
                    if not piece:
                        break
                    sent += len(piece)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                if chunked:
                    self.wfile.write(b"0\r\n\r\n")
                if response.will_close:
                    self.upstream_conn.close()
                    self.upstream_conn = None
            finally:
                with lock:
                    tick(time.perf_counter())
                    stats["in_flight"] -= 1
                    stats["bytes_out"] += sent

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 512

    server = Server(("127.0.0.1", port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print("ready", flush=True)
    server.serve_forever()


MOTO = """
import json, logging, os, signal, sys, time
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no log line per request
started = time.perf_counter()
loaded = {}
if len(sys.argv) > 2:  # objects put into moto's own in-memory backend before it serves (no HTTP: fast)
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    plan = json.loads(sys.argv[2])
    backend.create_bucket(plan["bucket"], "us-east-1")
    for local, prefix in plan["trees"]:
        count = size = 0
        for folder, _, names in os.walk(local):
            for name in sorted(names):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, local)
                if rel == "stamp.json":
                    continue
                with open(path, "rb") as handle:
                    value = handle.read()
                backend.put_object(plan["bucket"], f"{prefix}/{rel}", value)
                count, size = count + 1, size + len(value)
        loaded[prefix] = {"objects": count, "bytes": size}
server = ThreadedMotoServer(ip_address="127.0.0.1", port=int(sys.argv[1]), verbose=False)
server.start()
print("ready " + json.dumps({"seconds": time.perf_counter() - started, "loaded": loaded}), flush=True)
signal.sigwait({signal.SIGTERM, signal.SIGINT})
server.stop()
"""


class Service:
    """A helper server in its own process (moto, a proxy), stopped by its pid."""

    def __init__(self, command: list[str], port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("ready"):
            self.stop()
            raise RuntimeError(f"{command[:3]} did not start")
        self.started = json.loads(line[5:]) if line[5:].strip() else {}

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def control(self, command: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}{CONTROL}{command}", timeout=30) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto(preload: dict[str, Any] | None = None) -> Service:
    """moto's threaded server in its own process, with ``preload`` (bucket, [local folder, key prefix]…)
    already in its in-memory backend."""
    port = free_port()
    return Service([sys.executable, "-c", MOTO, str(port), *([json.dumps(preload)] if preload else [])], port)


def start_proxy(upstream: str, latency_ms: float) -> Service:
    port = free_port()
    return Service([sys.executable, __file__, "--serve-proxy", str(port), "--upstream", upstream,
                    "--latency-ms", str(latency_ms)], port)


def s3_env(endpoint: str) -> dict[str, str]:
    """What a user sets for an S3-compatible endpoint (fsspec + AWS conventions)."""
    return {"FSSPEC_S3_ENDPOINT_URL": endpoint, "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


# ---- data --------------------------------------------------------------------------------------

WRITE_STORE = """
import json, sys, time
from datetime import timedelta
sys.path.insert(0, sys.argv[1])
from tests.helpers import T0, agent_state
from lastgood.readers.native.writer import NativeWriter, SaveRequest
url, total, runs, tail = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
options = {"endpoint_url": sys.argv[6], "key": "testing", "secret": "testing"} if len(sys.argv) > 6 else None
started = time.perf_counter()
writer = NativeWriter(url, options)
steps = -(-total // runs)
def requests(run, first, count):
    return [SaveRequest(f"run-{run:03d}", agent_state(step % 40), trigger="final" if step == steps - 1 else "periodic",
                        agent=f"agent-{run % 4}", step=step, created_at=T0 + timedelta(minutes=run, seconds=step))
            for step in range(first, first + count)]
body, done = total - tail, 0
for run in range(runs):  # the first (total - tail) checkpoints, one commit per run
    count = min(steps, body - done)
    if count > 0:
        writer.save_many(requests(run, 0, count))
        done += count
report = writer.compact()  # the catalog: one Parquet part
left = total - done
if left:  # then a small tail: the latest saves of the last run, one commit
    run = (done - 1) // steps
    writer.save_many(requests(run, done - run * steps, left))
print(json.dumps({"seconds": time.perf_counter() - started, "entries": report.entries + left,
                  "compacted": report.entries, "tail_entries": left}))
"""

WRITE_TRAINER = """
import json, struct, sys, time
from pathlib import Path
sample, out, count, mib = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
template = sorted(sample.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))[0]
base_state = json.loads((template / "trainer_state.json").read_text())
every = 10
def safetensors(step):
    n = int(mib * (1 << 20)) // 4 // 2
    header, payload = {"__metadata__": {"format": "pt"}}, b""
    for name in ("model.embed.weight", "model.head.weight"):
        data = struct.pack("<f", 0.001 * (step + 1)) * n  # real float32 tensors, cheap to build
        header[name] = {"dtype": "F32", "shape": [n], "data_offsets": [len(payload), len(payload) + len(data)]}
        payload += data
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + payload
started = time.perf_counter()
history = []
for k in range(1, count + 1):  # checkpoint-10, -20, …: the sample's files, a bigger model, the state's step
    step = k * every
    folder = out / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    history.append({"epoch": k / count, "loss": 2.0 / k, "step": step})
    state = dict(base_state, global_step=step, max_steps=count * every, log_history=list(history),
                 best_model_checkpoint=None)
    for item in template.iterdir():
        if item.name == "model.safetensors":
            (folder / item.name).write_bytes(safetensors(step))
        elif item.name == "trainer_state.json":
            (folder / item.name).write_text(json.dumps(state, indent=2))
        elif item.is_file():
            (folder / item.name).write_bytes(item.read_bytes())
for item in sample.iterdir():
    if item.is_file():
        (out / item.name).write_bytes(item.read_bytes())
print(json.dumps({"seconds": time.perf_counter() - started, "checkpoints": count}))
"""


def cached(name: str, stamp: dict[str, Any], snippet: str, *args: str) -> tuple[Path, dict[str, Any]]:
    """A folder written once into benchmarks/.cache by ``snippet`` (argv: ROOT-free ``*args`` with the
    folder in place of ``{out}``); reused while its stamp matches."""
    folder = CACHE / name
    marker = folder / "stamp.json"
    if marker.exists() and json.loads(marker.read_text()).get("stamp") == stamp:
        return folder, json.loads(marker.read_text())["written"]
    shutil.rmtree(folder, ignore_errors=True)
    written = python_child(snippet, *(str(folder) if a == "{out}" else a for a in args),
                           timeout=1800).check().report
    folder.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"stamp": stamp, "written": written}))
    return folder, written


def code_stamp(snippet: str, *files: Path) -> str:
    import hashlib

    return hashlib.sha256("".join([snippet, *(p.read_text() for p in files)]).encode()).hexdigest()[:16]


def native_store(checkpoints: int, runs: int, tail: int) -> tuple[Path, dict[str, Any]]:
    """The store written by NativeWriter (``save_many`` per run, ``compact``, a small tail) into the cache."""
    stamp = {"checkpoints": checkpoints, "runs": runs, "tail": tail,
             "code": code_stamp(WRITE_STORE, ROOT / "readers" / "native" / "writer.py",
                                ROOT / "readers" / "native" / "format.py", ROOT / "tests" / "helpers.py")}
    return cached(f"s3-latency-agents-{checkpoints}", stamp, WRITE_STORE, str(ROOT), "{out}", str(checkpoints),
                  str(runs), str(tail))


def trainer_folder(checkpoints: int, mib: float) -> tuple[Path, dict[str, Any]]:
    sample = ROOT / "sample_data" / "training" / "hf_trainer"
    stamp = {"checkpoints": checkpoints, "mib": mib, "code": code_stamp(WRITE_TRAINER, *sorted(
        p for p in sample.rglob("*") if p.is_file() and p.suffix == ".json"))}
    return cached(f"s3-latency-trainer-{checkpoints}x{mib:g}", stamp, WRITE_TRAINER, str(sample), "{out}",
                  str(checkpoints), str(mib))


LIST_OBJECTS = """
import json, sys
import s3fs
fs = s3fs.S3FileSystem(endpoint_url=sys.argv[1], key="testing", secret="testing")
print(json.dumps({p: i["size"] for p, i in sorted(fs.find(sys.argv[2], detail=True).items())}))
"""


def list_objects(moto: Service, prefix: str) -> dict[str, int]:
    """Every object under ``prefix`` and its size, listed on moto directly (not through the proxy)."""
    return json.loads(python_child(LIST_OBJECTS, moto.url, prefix).check().stdout)


def store_summary(objects: dict[str, int]) -> dict[str, Any]:
    blobs = {p: n for p, n in objects.items() if "/blobs/" in p}
    parts = [n for p, n in objects.items() if "/catalog/parts/" in p]
    return {"objects": len(objects), "blobs": len(blobs), "blob_bytes": sum(blobs.values()), "parts": len(parts),
            "part_bytes": sum(parts), "tails": sum("/catalog/tail/" in p for p in objects)}


# ---- anchor: sequential GETs -------------------------------------------------------------------

SEQUENTIAL = """
import json, statistics, sys, time
import s3fs
fs = s3fs.S3FileSystem(endpoint_url=sys.argv[1], key="testing", secret="testing")
paths = json.load(open(sys.argv[2]))
fs.cat_file(paths[0], max_concurrency=1)  # the connection is open and signed once before the loop
cpu, started, each, total = time.process_time(), time.perf_counter(), [], 0
for path in paths:  # one GET each (max_concurrency=1: no HEAD first), one after another
    t = time.perf_counter()
    total += len(fs.cat_file(path, max_concurrency=1))
    each.append(time.perf_counter() - t)
seconds = time.perf_counter() - started
each.sort()
print(json.dumps({"seconds": seconds, "cpu": time.process_time() - cpu, "objects": len(paths), "bytes": total,
                  "p50": statistics.median(each), "p90": each[int(0.9 * len(each))], "max": each[-1]}))
"""


def anchor(endpoint: str, paths: list[str], scratch: Path) -> dict[str, Any]:
    listing = scratch / f"paths-{len(paths)}.json"
    listing.write_text(json.dumps(paths))
    child = python_child(SEQUENTIAL, endpoint, str(listing), timeout=3600).check()
    return {**child.report, "process": child.wall, "process_cpu": child.user + child.system}


def proxy_overhead(moto: Service, proxy0: Service, proxy: Service, paths: list[str], scratch: Path
                   ) -> dict[str, Any]:
    """Per-GET time of the same sequential GETs: moto direct, through the proxy at latency 0, and
    through the benchmark's proxy."""
    sample = paths[:: max(1, len(paths) // 300)][:300]
    out = {"objects": len(sample)}
    for name, endpoint in (("direct", moto.url), ("proxy0", proxy0.url), ("proxy", proxy.url)):
        wait_for_idle(timeout=10)
        cpu = moto.cpu()
        result = anchor(endpoint, sample, scratch)
        out[name] = result["p50"]
        out[name + "_mean"] = result["seconds"] / result["objects"]
        out[name + "_moto_cpu"] = (moto.cpu() - cpu) / (result["objects"] + 1)  # per GET (the loop + 1 before)
    return out


# ---- the commands --------------------------------------------------------------------------------

class Measured:
    """One command's samples: wall, client CPU, requests and concurrency through the proxy,
    moto's and the proxy's CPU."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.wall, self.cpu, self.moto_cpu, self.proxy_cpu = Samples(), Samples(), Samples(), Samples()
        self.rss = Samples()
        self.proxy: list[dict[str, Any]] = []
        self.idle: list[float] = []
        self.outputs: list[str] = []

    def median_of(self, key: str) -> float:
        values = [p[key] for p in self.proxy]
        return statistics.median(values) if values else float("nan")

    def kinds(self) -> dict[str, float]:
        names = sorted({k for p in self.proxy for k in p["kinds"]})
        return {k: statistics.median(p["kinds"].get(k, 0) for p in self.proxy) for k in names}


def run_measured(measured: Measured, command: list[str], env: dict[str, str], moto: Service, proxy: Service,
                 idle_wait: float) -> ChildResult:
    if idle_wait:
        idle = wait_for_idle(0.7, idle_wait)
        if idle is not None:
            measured.idle.append(idle)
    proxy.control("reset")
    moto_cpu, proxy_cpu = moto.cpu(), proxy.cpu()
    child = run_child(command, extra_env=env, timeout=1800)
    measured.moto_cpu.add(moto.cpu() - moto_cpu)
    measured.proxy_cpu.add(proxy.cpu() - proxy_cpu)
    stats = proxy.control("stats")
    if child.returncode not in (0, 1):  # verify exits 1 when it reports findings
        child.check()
    measured.wall.add(child.wall)
    measured.cpu.add(child.user + child.system)
    measured.rss.add(child.peak_rss)
    measured.proxy.append({"requests": stats["requests"], "kinds": stats["kinds"], "bytes": stats["bytes_out"],
                           "connections": stats["connections"], "peak": stats["peak_in_flight"],
                           "mean_in_flight": stats["area"] / stats["busy"] if stats["busy"] else 0.0,
                           "busy": stats["busy"]})
    measured.outputs.append(child.stdout[-2000:] + child.stderr[-2000:])
    return child


CHECKED = re.compile(r"checked (\d+) checkpoints \((\w+)\): (\d+) finding")


def checked(child: ChildResult) -> tuple[int, str, int]:
    match = CHECKED.search(child.stdout)
    if not match:
        raise RuntimeError(f"unexpected verify output:\n{child.stdout[-2000:]}\n{child.stderr[-2000:]}")
    return int(match[1]), match[2], int(match[3])


def measure(args: argparse.Namespace, moto: Service, proxy: Service, data: dict[str, Any], scratch: Path
            ) -> dict[str, Measured]:
    env = s3_env(proxy.url)
    m = {name: Measured(name) for name in ("ls", "ls_warm", "verify", "index", "read_data", "trainer_ls",
                                           "trainer_read_data")}
    expected = data["store"]["entries"]
    for run in range(args.runs):
        home = scratch / f"home-ls-{run}"
        child = run_measured(m["ls"], [LASTGOOD, "ls", STORE], {**env, "LASTGOOD_HOME": str(home)}, moto, proxy,
                             args.idle_wait)
        if f"{expected} checkpoint(s)" not in child.stdout:
            raise RuntimeError(f"ls did not list {expected} checkpoints:\n{child.stdout[-1000:]}")
        run_measured(m["ls_warm"], [LASTGOOD, "ls", STORE], {**env, "LASTGOOD_HOME": str(home)}, moto, proxy,
                     args.idle_wait)
        child = run_measured(m["verify"], [LASTGOOD, "verify", STORE], {**env, "LASTGOOD_HOME": str(home)}, moto,
                             proxy, args.idle_wait)
        m["verify"].checked = checked(child)  # type: ignore[attr-defined]
        home = scratch / f"home-index-{run}"
        run_measured(m["index"], [LASTGOOD, "index", STORE], {**env, "LASTGOOD_HOME": str(home)}, moto, proxy,
                     args.idle_wait)
        child = run_measured(m["read_data"], [LASTGOOD, "verify", STORE, "--read-data"],
                             {**env, "LASTGOOD_HOME": str(home)}, moto, proxy, args.idle_wait)
        m["read_data"].checked = checked(child)  # type: ignore[attr-defined]
        if m["read_data"].checked[0] != expected:  # type: ignore[attr-defined]
            raise RuntimeError(f"verify --read-data checked {m['read_data'].checked}, expected {expected}")
        if "trainer" in data:
            home = scratch / f"home-trainer-{run}"
            run_measured(m["trainer_ls"], [LASTGOOD, "ls", TRAINER], {**env, "LASTGOOD_HOME": str(home)}, moto,
                         proxy, args.idle_wait)
            home = scratch / f"home-trainer-data-{run}"
            child = run_measured(m["trainer_read_data"], [LASTGOOD, "verify", TRAINER, "--read-data"],
                                 {**env, "LASTGOOD_HOME": str(home)}, moto, proxy, args.idle_wait)
            m["trainer_read_data"].checked = checked(child)  # type: ignore[attr-defined]
        print(f"run {run + 1}/{args.runs}: ls {fmt_seconds(m['ls'].wall.values[-1])}, index "
              f"{fmt_seconds(m['index'].wall.values[-1])}, verify {fmt_seconds(m['verify'].wall.values[-1])}, "
              f"--read-data {fmt_seconds(m['read_data'].wall.values[-1])}", flush=True)
    return {k: v for k, v in m.items() if len(v.wall)}


def measure_anchors(args: argparse.Namespace, moto: Service, proxy: Service, blobs: list[str],
                    trainer_files: list[str], scratch: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {"store": [], "trainer": []}
    for _ in range(args.anchor_runs):
        for key, paths in (("store", blobs), ("trainer", trainer_files)):
            if not paths:
                continue
            if args.idle_wait:
                wait_for_idle(0.7, args.idle_wait)
            proxy.control("reset")
            moto_cpu, proxy_cpu = moto.cpu(), proxy.cpu()
            result = anchor(proxy.url, paths, scratch)
            stats = proxy.control("stats")
            result.update(moto_cpu=moto.cpu() - moto_cpu, proxy_cpu=proxy.cpu() - proxy_cpu,
                          requests=stats["requests"], kinds=stats["kinds"], peak=stats["peak_in_flight"])
            out[key].append(result)
            print(f"anchor {key}: {fmt_seconds(result['seconds'])} for {result['objects']} GETs", flush=True)
    return out


# ---- diagnostics (--diagnose): what limits the figures above --------------------------------------

FETCH_ALL = """
import json, sys, time
import s3fs
endpoint, listing, pool, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing",
                       config_kwargs={"max_pool_connections": pool} if pool else {})
paths = json.load(open(listing))
fs.cat_file(paths[0], max_concurrency=1)
started, total = time.perf_counter(), 0
for i in range(0, len(paths), chunk):  # as fetch_blobs: one multi-path cat per chunk, no HEAD, nothing checked
    total += sum(len(v) for v in fs.cat(paths[i:i + chunk], max_concurrency=1, on_error="omit").values())
print(json.dumps({"seconds": time.perf_counter() - started, "objects": len(paths), "bytes": total}))
"""


def diagnose(args: argparse.Namespace, moto: Service, proxy: Service, blobs: list[str], scratch: Path
             ) -> list[dict[str, Any]]:
    """Once each: the same work with one limit changed, to see which limit a figure sits on."""
    env = s3_env(proxy.url)
    rows: list[dict[str, Any]] = []
    listing = scratch / "diagnose-paths.json"
    listing.write_text(json.dumps(blobs))

    def record(label: str, command: list[str], extra: dict[str, str], home: Path) -> None:
        m = Measured(label)
        run_measured(m, command, {**env, "LASTGOOD_HOME": str(home), **extra}, moto, proxy, args.idle_wait)
        rows.append({"label": label, "wall": m.wall.values[0], "cpu": m.cpu.values[0], "moto_cpu": m.moto_cpu.values[0],
                     "proxy_cpu": m.proxy_cpu.values[0], **m.proxy[0]})
        print(f"diagnose {label}: {fmt_seconds(rows[-1]['wall'])}", flush=True)

    record("`LASTGOOD_AUTO_DATA_BYTES=0 lastgood ls STORE` (fresh home: no automatic data check)",
           [LASTGOOD, "ls", STORE], {"LASTGOOD_AUTO_DATA_BYTES": "0"}, scratch / "diag-ls")
    home = scratch / "diag-verify"
    run_child([LASTGOOD, "index", STORE], extra_env={**env, "LASTGOOD_HOME": str(home)}, timeout=1800).check()
    for workers in (1, 4):
        record(f"`lastgood verify STORE --read-data --workers {workers}`",
               [LASTGOOD, "verify", STORE, "--read-data", "--workers", str(workers)], {}, home)
    for pool, chunk, what in ((0, 256, "s3fs defaults (10 connections), chunks of 256 as `fetch_blobs`"),
                              (64, 256, "64 connections, chunks of 256"),
                              (64, len(blobs), f"64 connections, one `cat` of all {len(blobs):,}")):
        if args.idle_wait:
            wait_for_idle(0.7, args.idle_wait)
        proxy.control("reset")
        moto_cpu, proxy_cpu = moto.cpu(), proxy.cpu()
        child = python_child(FETCH_ALL, proxy.url, str(listing), str(pool), str(chunk), timeout=1800).check()
        stats = proxy.control("stats")
        rows.append({"label": f"fetch only, one process: `fs.cat` of every blob, {what}",
                     "wall": child.report["seconds"], "cpu": child.user + child.system,
                     "moto_cpu": moto.cpu() - moto_cpu, "proxy_cpu": proxy.cpu() - proxy_cpu,
                     "requests": stats["requests"], "kinds": stats["kinds"], "peak": stats["peak_in_flight"],
                     "mean_in_flight": stats["area"] / stats["busy"] if stats["busy"] else 0.0,
                     "busy": stats["busy"], "connections": stats["connections"], "loop_only": True})
        print(f"diagnose fetch {what}: {fmt_seconds(rows[-1]['wall'])}", flush=True)
    return rows


# ---- report ------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added before each request (default 20)")
    parser.add_argument("--checkpoints", type=int, default=10_000)
    parser.add_argument("--store-runs", type=int, default=100, help="runs the checkpoints are spread over")
    parser.add_argument("--tail", type=int, default=5, help="checkpoints saved after the compaction")
    parser.add_argument("--trainer-checkpoints", type=int, default=50)
    parser.add_argument("--trainer-mb", type=float, default=4.0, help="MiB of model.safetensors per checkpoint")
    parser.add_argument("--no-trainer", action="store_true")
    parser.add_argument("--write-on-s3", action="store_true",
                        help="write the store with NativeWriter straight to s3:// through moto in this run "
                             "(slow: one PUT per checkpoint) instead of loading the cached copy into moto")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--anchor-runs", type=int, default=1)
    parser.add_argument("--idle-wait", type=float, default=10.0, help="seconds to wait for an idle machine")
    parser.add_argument("--diagnose", action="store_true",
                        help="also run, once each, the same work with one limit changed (~3 extra minutes)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    parser.add_argument("--from-last", action="store_true",
                        help="measure nothing: render the section again from benchmarks/.cache/s3-latency-last.json")
    parser.add_argument("--serve-proxy", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_proxy:
        serve_proxy(args.serve_proxy, args.upstream, args.latency_ms)
        return 0

    if args.from_last:
        text = report_from(json.loads((CACHE / "s3-latency-last.json").read_text()))
        print(text)
        if not args.no_write:
            write_section(SECTION, text)
        return 0
    cache_bytecode()
    info = machine_info(("duckdb", "pyarrow", "fsspec", "s3fs", "aiobotocore", "moto", "werkzeug"))
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="bench-s3-latency-"))
    services: list[Service] = []
    try:
        trainer = 0 if args.no_trainer else args.trainer_checkpoints
        trees, written = [], {}
        if not args.write_on_s3:
            local, written = native_store(args.checkpoints, args.store_runs, args.tail)
            trees.append([str(local), "agents"])
        if trainer:
            trees.append([str(trainer_folder(trainer, args.trainer_mb)[0]), "trainer"])
        moto = start_moto({"bucket": BUCKET, "trees": trees})
        services.append(moto)
        if args.write_on_s3:
            written = python_child(WRITE_STORE, str(ROOT), STORE, str(args.checkpoints), str(args.store_runs),
                                   str(args.tail), moto.url, timeout=3600).check().report
        proxy = start_proxy(moto.url, args.latency_ms)
        services.append(proxy)
        proxy0 = start_proxy(moto.url, 0)
        services.append(proxy0)
        objects = list_objects(moto, f"{BUCKET}/agents")
        blobs = [p for p in objects if "/blobs/" in p]
        data: dict[str, Any] = {"store": {**store_summary(objects), **written, "on_s3": args.write_on_s3},
                                "load": moto.started}
        trainer_files: list[str] = []
        if trainer:
            files = list_objects(moto, f"{BUCKET}/trainer")
            trainer_files = list(files)
            data["trainer"] = {"objects": len(files), "bytes": sum(files.values()), "checkpoints": trainer,
                               "mib": args.trainer_mb}
        print(f"data: {json.dumps(data)}", flush=True)
        overhead = proxy_overhead(moto, proxy0, proxy, blobs, scratch)
        print(f"proxy overhead: {json.dumps(overhead)}", flush=True)
        measured = measure(args, moto, proxy, data, scratch)
        anchors = measure_anchors(args, moto, proxy, blobs, trainer_files, scratch)
        diagnostics = diagnose(args, moto, proxy, blobs, scratch) if args.diagnose else []
    finally:
        for service in reversed(services):
            service.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.perf_counter() - started
    raw = {"args": vars(args), "info": info, "data": data, "overhead": overhead, "anchors": anchors,
           "diagnostics": diagnostics, "elapsed": elapsed,
           "measured": {k: {"wall": v.wall.values, "cpu": v.cpu.values, "rss": v.rss.values,
                            "moto_cpu": v.moto_cpu.values, "proxy_cpu": v.proxy_cpu.values, "proxy": v.proxy,
                            "idle": v.idle, "checked": getattr(v, "checked", None)} for k, v in measured.items()}}
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "s3-latency-last.json").write_text(json.dumps(raw, indent=1))  # every sample, for a closer look
    text = report(args, info, data, overhead, measured, anchors, diagnostics, elapsed)
    print(text)
    if not args.no_write:
        write_section(SECTION, text)
    return 0


def report_from(raw: dict[str, Any]) -> str:
    """The section from a run's saved samples (``s3-latency-last.json``)."""
    measured = {}
    for key, v in raw["measured"].items():
        mm = Measured(key)
        for name in ("wall", "cpu", "rss", "moto_cpu", "proxy_cpu"):
            for value in v[name]:
                getattr(mm, name).add(value)
        mm.proxy, mm.idle = v["proxy"], v["idle"]
        if v.get("checked"):
            mm.checked = tuple(v["checked"])  # type: ignore[attr-defined]
        measured[key] = mm
    return report(argparse.Namespace(**raw["args"]), raw["info"], raw["data"], raw["overhead"], measured,
                  raw["anchors"], raw["diagnostics"], raw["elapsed"])


def kinds_text(kinds: dict[str, float]) -> str:
    """``10,000 GET blob, 37 LIST blobs/…`` — most first."""
    items = sorted(((n, k) for k, n in kinds.items() if n), key=lambda item: (-item[0], item[1]))
    return ", ".join(f"{n:,.0f} {k}" for n, k in items) or "none"


def samples_text(values: list[float]) -> str:
    return " / ".join(fmt_seconds(v) for v in values)


def report(args: argparse.Namespace, info: dict[str, Any], data: dict[str, Any], overhead: dict[str, Any],
           measured: dict[str, Measured], anchors: dict[str, list[dict[str, Any]]],
           diagnostics: list[dict[str, Any]], elapsed: float) -> str:
    store, latency = data["store"], args.latency_ms
    n = store["blobs"]
    loop = statistics.median(a["seconds"] for a in anchors["store"])
    anchor_line = anchors["store"][0]
    per_get = statistics.median(a["p50"] for a in anchors["store"])
    runs = len(measured["ls"].wall)
    m = measured

    def ratio_row(what: str, key: str, anchor_s: float | None, anchor_what: str, target: str, met: bool | None
                  ) -> list[str]:
        wall = m[key].wall.median
        ratio = "—" if not anchor_s else (f"{anchor_s / wall:.1f}× faster" if anchor_s >= wall else
                                          f"{anchor_s / wall:.2f}× ({wall / anchor_s:.1f}× slower)")
        return [what, f"{fmt_seconds(wall)} ({samples_text(m[key].wall.values)})",
                f"{fmt_seconds(anchor_s)} {anchor_what}" if anchor_s else "—", ratio, target,
                "—" if met is None else ("yes" if met else "**no**")]

    ls_met = m["ls"].wall.median <= LS_TARGET
    verify_ratio = loop / m["read_data"].wall.median
    rows = [
        ratio_row(f"first `lastgood ls {STORE}` (never seen: fresh LASTGOOD_HOME)", "ls", None, "",
                  f"≤ {LS_TARGET:g} s", ls_met),
        ratio_row(f"`lastgood ls {STORE}` again (index warm)", "ls_warm", None, "", "—", None),
        ratio_row(f"`lastgood index {STORE}` (fresh LASTGOOD_HOME)", "index", None, "", "—", None),
        ratio_row(f"`lastgood verify {STORE}` (after the first `ls`: structure, every blob listed)", "verify",
                  None, "", "—", None),
        ratio_row(f"`lastgood verify {STORE} --read-data` (after `index`: every blob fetched, hashed, decoded)",
                  "read_data", loop, f"loop of {n:,} sequential GETs (one process, same proxy)",
                  f"≥ {VERIFY_TARGET:g}×", verify_ratio >= VERIFY_TARGET),
    ]
    trainer_loop = None
    if "trainer_read_data" in m and anchors["trainer"]:
        trainer = data["trainer"]
        trainer_loop = statistics.median(a["seconds"] for a in anchors["trainer"])
        t_ratio = trainer_loop / m["trainer_read_data"].wall.median
        rows += [
            ratio_row(f"first `lastgood ls {TRAINER}` (Trainer output folder, fresh LASTGOOD_HOME)", "trainer_ls",
                      None, "", "—", None),
            ratio_row(f"`lastgood verify {TRAINER} --read-data` (fresh LASTGOOD_HOME)", "trainer_read_data",
                      trainer_loop, f"loop of {trainer['objects']:,} sequential GETs (every file)",
                      f"≥ {VERIFY_TARGET:g}× (the same target)", t_ratio >= VERIFY_TARGET),
        ]

    def resource_row(label: str, mm: Measured) -> list[str]:
        return [label, f"{mm.median_of('requests'):,.0f}", kinds_text(mm.kinds()),
                f"{mm.median_of('mean_in_flight'):.1f} / {mm.median_of('peak'):.0f}",
                f"{mm.median_of('busy'):.1f} s", f"{mm.cpu.median:.2f} s", f"{mm.moto_cpu.median:.2f} s",
                f"{mm.proxy_cpu.median:.2f} s", fmt_bytes(mm.rss.worst)]

    labels = {"ls": "first `ls`", "ls_warm": "`ls` again", "index": "`index`", "verify": "`verify`",
              "read_data": "`verify --read-data`", "trainer_ls": "Trainer: first `ls`",
              "trainer_read_data": "Trainer: `verify --read-data`"}
    resources = [resource_row(labels[k], v) for k, v in m.items()]
    for key, label in (("store", f"anchor: {n:,} sequential GETs"), ("trainer", "Trainer anchor: sequential GETs")):
        if anchors[key]:
            a = anchors[key][0]
            resources.append([label, f"{a['requests']:,}", kinds_text(a["kinds"]), f"1.0 / {a['peak']}",
                              f"{a['seconds']:.1f} s (loop)", f"{a['process_cpu']:.2f} s (loop {a['cpu']:.2f} s)",
                              f"{a['moto_cpu']:.2f} s", f"{a['proxy_cpu']:.2f} s", "—"])

    moto_per_get = overhead["direct_moto_cpu"]
    moto_floor = n * moto_per_get
    pool_floor = n * per_get / 64
    lines = [
        f"## `verify` and `ls` on S3 behind {latency:g} ms per-request latency",
        "",
        f"Rerun: `.venv/bin/python benchmarks/bench_s3_latency.py` (`--diagnose` adds the limit rows, "
        f"`--latency-ms N` another latency). moto's S3 server runs threaded (`ThreadedMotoServer`, own process); "
        f"in front of it a small threaded proxy (stdlib `ThreadingHTTPServer` + `http.client`, keep-alive to moto, "
        f"own process) sleeps **{latency:g} ms before forwarding each request**, streams the answer back and counts "
        f"the requests. Lastgood and the anchor both use the proxy's URL as their endpoint "
        f"(`FSSPEC_S3_ENDPOINT_URL`/`AWS_ENDPOINT_URL`, dummy keys); nothing else is changed from what a user "
        f"types (default options: `--workers` = CPU count, table output, whole process).",
        "",
        markdown_table(["what a user types", f"Lastgood (median of {runs}; samples)", "anchor (same run)", "ratio",
                        "target", "met?"], rows),
        "",
        "Requests through the proxy (medians), requests in flight while any was (time-weighted mean / peak), "
        "time with a request in flight, and CPU (user+sys) of the command with its workers, of moto and of the "
        "proxy during it:",
        "",
        markdown_table(["command", "requests", "by kind", "in flight mean / peak", "busy", "client CPU",
                        "moto CPU", "proxy CPU", "peak RSS"], resources),
    ]
    if diagnostics:
        lines += ["", "Limits, once each (`--diagnose`; same store, same proxy; home after `index` for the verify "
                  "rows; single samples, so as noisy as the busiest sample above):", "",
                  markdown_table(["what", "time", "vs the loop", "requests", "in flight mean / peak", "client CPU",
                                  "moto CPU", "proxy CPU"],
                                 [[d["label"], fmt_seconds(d["wall"]) + (" (loop)" if d.get("loop_only") else ""),
                                   f"{loop / d['wall']:.1f}×" if d["kinds"].get("GET blob", 0) >= n else "—",
                                   f"{d['requests']:,} ({kinds_text(d['kinds'])})",
                                   f"{d['mean_in_flight']:.1f} / {d['peak']}", f"{d['cpu']:.2f} s",
                                   f"{d['moto_cpu']:.2f} s", f"{d['proxy_cpu']:.2f} s"] for d in diagnostics])]
    verdict_verify = (f"**met** ({verify_ratio:.1f}×)" if verify_ratio >= VERIFY_TARGET
                      else f"**missed** ({verify_ratio:.1f}×)")
    verdict_ls = f"**met** ({fmt_seconds(m['ls'].wall.median)})" if ls_met else \
        f"**missed** ({fmt_seconds(m['ls'].wall.median)})"
    lines += [
        "",
        f"`verify --read-data` ≥ {VERIFY_TARGET:g}× the sequential loop: {verdict_verify}. First `ls` of the "
        f"never-seen {store['entries']:,}-checkpoint store ≤ {LS_TARGET:g} s: {verdict_ls}.",
        "",
        f"- Store: `{STORE}`, {store['entries']:,} checkpoints in {args.store_runs} runs, written by `NativeWriter` "
        f"(`save_many` per run, then `compact()`, then {store.get('tail_entries', 0)} more saves as a tail): catalog = "
        f"{store['parts']} Parquet part ({fmt_bytes(store['part_bytes'])}) + {store['tails']} tail file; "
        f"{store['blobs']:,} blobs, {fmt_bytes(store['blob_bytes'])} in all (the tests' `agent_state`, "
        f"JSON, full every 10th), {store['objects']:,} objects. "
        + ("Written through moto in this run." if store.get("on_s3") else
           f"Written once into `benchmarks/.cache/` by the writer and put object by object into moto's in-memory "
           f"backend before it serves ({data['load']['seconds']:.1f} s; the same bytes the writer puts on S3: its "
           f"keys are relative; `--write-on-s3` writes through moto instead, one PUT per checkpoint, minutes)."),
    ]
    if "trainer" in data:
        t = data["trainer"]
        lines.append(f"- Trainer folder: `{TRAINER}`, {t['checkpoints']} `checkpoint-N` folders as "
                     f"`transformers.Trainer` writes them (the sample's files from `sample_data/training/hf_trainer`, "
                     f"a {t['mib']:g} MiB float32 `model.safetensors` each, `trainer_state.json` with its step), "
                     f"{t['objects']} objects, {fmt_bytes(t['bytes'])}.")
    lines += [
        f"- Latency: the proxy's own overhead, per GET (p50 of {overhead['objects']} sequential GETs of blobs): moto "
        f"direct {overhead['direct'] * 1000:.1f} ms, through the proxy at 0 ms {overhead['proxy0'] * 1000:.1f} ms "
        f"(overhead {(overhead['proxy0'] - overhead['direct']) * 1000:+.1f} ms), at {latency:g} ms "
        f"{overhead['proxy'] * 1000:.1f} ms; in the anchor loop p50 {per_get * 1000:.1f} ms, p90 "
        f"{anchor_line['p90'] * 1000:.1f} ms. moto's CPU per GET: {moto_per_get * 1000:.1f} ms.",
        f"- Floors of this setup for {n:,} GETs: moto answers from threads of one Python process, so at most one "
        f"core's worth: {n:,} × {moto_per_get * 1000:.1f} ms = {fmt_seconds(moto_floor)} of its CPU; one s3fs client "
        f"process holds at most 64 connections (Lastgood's default for S3; botocore's is 10): "
        f"{n:,} × {per_get * 1000:.1f} ms / 64 = {fmt_seconds(pool_floor)}. Against the loop's "
        f"{fmt_seconds(loop)}: ≤ {loop / moto_floor:.0f}× for any client on this server — on an otherwise idle "
        f"machine; moto, the proxy and the client also share its CPUs (see below).",
        f"- Anchor: a fresh process GETs every blob object one after another through the proxy "
        f"(`S3FileSystem.cat_file(path, max_concurrency=1)`: one GET, no HEAD; every request counted above), "
        f"loop timed without imports and listing (whole process {fmt_seconds(anchor_line['process'])}); "
        f"{len(anchors['store'])} loop(s) of {n:,} GETs (each GET timed: the loop is its own sample of {n:,}).",
        f"- Lastgood: each command in a fresh process; per run, home A: first `ls` → `ls` again → `verify`; "
        f"home B: `index` → `verify --read-data`; the Trainer folder in fresh homes. "
        f"`verify --read-data` checked {m['read_data'].checked[0]:,} checkpoints "  # type: ignore[attr-defined]
        f"({m['read_data'].checked[2]} findings).",  # type: ignore[attr-defined]
    ]
    idle = sorted(x for v in m.values() for x in v.idle)
    if idle:
        lines.append(f"- The machine is shared: idle CPU share just before each command was {idle[0]:.0%}–"
                     f"{idle[-1]:.0%} (median {statistics.median(idle):.0%}; each waited ≤ {args.idle_wait:g} s for "
                     f"≥ 70 %); moto, the proxy and the client share its {info.get('usable_cpus')} CPUs, so wall "
                     f"times on a busy machine run long — request counts and CPU seconds are the steadier view.")
    lines += [f"- Whole benchmark: {elapsed / 60:.1f} min{' with `--diagnose`' if diagnostics else ''}.", "", f"Machine: {machine_line(info)}.", "",
              limits_text(data, m, anchors, diagnostics, overhead)]
    return "\n".join(lines)


def limits_text(data: dict[str, Any], m: dict[str, Measured], anchors: dict[str, list[dict[str, Any]]],
                diagnostics: list[dict[str, Any]], overhead: dict[str, Any]) -> str:
    """What limits each figure: this run's numbers, and what the product does about each."""
    n = data["store"]["blobs"]
    per_get = statistics.median(a["p50"] for a in anchors["store"])
    loop = statistics.median(a["seconds"] for a in anchors["store"])
    first = anchors["store"][0]
    out = ["### What limits each figure, and what changed", ""]
    out.append(_ls_limits(m, per_get))
    out.append(_read_data_limits(n, m, loop, per_get, first, overhead))
    if "trainer_read_data" in m and anchors["trainer"]:
        out.append(_trainer_limits(data, m, anchors))
    out.append("- **`verify` (structure) and `ls` again**: a handful of requests each (table above) plus, for "
               "`verify`, the blob walk (one LIST page per 1,000 blobs, one after another); the rest of their time "
               "is the process (imports, DuckDB) and its CPU share on this machine, not S3.")
    return "\n".join(out)


def _ls_limits(m: dict[str, Measured], per_get: float) -> str:
    ls, warm = m["ls"], m["ls_warm"]
    kinds = ls.kinds()
    return (f"- **First `ls` / cold `index`** ({fmt_seconds(ls.wall.median)}, {ls.median_of('requests'):,.0f} "
            f"requests: {kinds_text(kinds)}; peak {ls.median_of('peak'):.0f} in flight). A first look at an object "
            f"store no longer reads one object per checkpoint: the automatic data check is capped at 256 pending "
            f"checkpoints there (app/stores.py `AUTO_DATA_REMOTE_CHECKPOINTS`; it used to fetch and decode all "
            f"10,000 blobs, 153 s), the automatic blob walk at 1,000 (`AUTO_WALK_REMOTE_ENTRIES`, unless "
            f"`LASTGOOD_AUTO_WALK_ENTRIES` is set: its 10 LIST pages, one after another, took ~20 s of a 28 s "
            f"first `ls` on this loaded machine), and the run heads come in with one multi-path `cat` "
            f"(readers/native/reader.py `_fetch_small`). Both checks stay pending and the output says so (\"data "
            f"check pending\", \"blob check pending … found by `lastgood verify STORE`\"). Left: "
            f"~{ls.median_of('requests') - kinds.get('GET head', 0):.0f} small requests one after another "
            f"(≈ {(ls.median_of('requests') - kinds.get('GET head', 0)) * per_get:.1f} s at this latency) and the "
            f"head batch; the rest is the process itself: CPU {ls.cpu.median:.2f} s (the warm `ls`, "
            f"{warm.median_of('requests'):.0f} requests: {warm.cpu.median:.2f} s of CPU, "
            f"{fmt_seconds(warm.wall.median)} of wall). Wall times several times the CPU time are this machine's "
            f"load (other work shares its 2 CPUs), not requests: the time with a request in flight was "
            f"{ls.median_of('busy'):.1f} s.")


def _read_data_limits(n: int, m: dict[str, Measured], loop: float, per_get: float, first: dict[str, Any],
                      overhead: dict[str, Any]) -> str:
    rd = m["read_data"]
    kinds = rd.kinds()
    requests = rd.median_of("requests")
    client_per_get = rd.cpu.median / requests
    moto_per_get = rd.moto_cpu.median / requests
    proxy_per_get = rd.proxy_cpu.median / requests
    total = client_per_get + moto_per_get + proxy_per_get
    cpus = os.cpu_count() or 1
    return (f"- **`verify --read-data`** ({fmt_seconds(rd.wall.median)}, loop {fmt_seconds(loop)}: "
            f"{loop / rd.wall.median:.1f}×; {requests:,.0f} requests: {kinds_text(kinds)}; "
            f"{rd.median_of('mean_in_flight'):.0f} in flight on average, peak {rd.median_of('peak'):.0f}). What "
            f"changed: (1) 64 connections per process to S3 (readers/common/fsutil.py `open_fs`, unless the user "
            f"set `max_pool_connections`; botocore's default is 10); (2) each worker fetches its own chunk in parts "
            f"of 64 blobs, the next part while one is hashed and decoded (app/integrity/parallel.py "
            f"`check_chunk_remote`), so the client's CPU per request (botocore's signing and parsing) is spread "
            f"over every worker; (3) the earlier checkpoints a chunk's first incremental states are rebuilt from "
            f"come in the chunk's first batch (`_Ancestors`; {kinds.get('GET range blob', 0):.0f} ranged blob "
            f"GETs, 160 one after another before); (4) the GET proves each blob's presence and size "
            f"(readers/native/reader.py `_blob_sizes`: {kinds.get('LIST blobs/…', 0):.0f} LISTs of blob folders, "
            f"138 before). Floors of this setup: CPU per request here, moto {moto_per_get * 1000:.1f} ms (one "
            f"Python process: its threads share one core), the client {client_per_get * 1000:.1f} ms (fetching "
            f"and checking, all workers), the proxy {proxy_per_get * 1000:.1f} ms (this setup's, not a "
            f"deployment's): {total * 1000:.1f} ms on {cpus} CPUs shared by all three, ≥ "
            f"{fmt_seconds(requests * total / cpus)} with the machine to themselves, and moto alone ≥ "
            f"{fmt_seconds(requests * moto_per_get)}; latency, {per_get * 1000:.0f} ms per GET over 64 connections "
            f"per worker: ≥ {fmt_seconds(n * per_get / 64 / max(1, cpus))}. Against the loop's {fmt_seconds(loop)} "
            f"that allows ≤ {loop / (requests * total / cpus):.0f}× on an idle machine; what is left between that "
            f"and the measured ratio is CPU taken by other work on this shared machine (the loop, which mostly "
            f"waits on the proxy's sleep, loses far less to it); for comparison moto spent "
            f"{rd.moto_cpu.median:.1f} s and the proxy {rd.proxy_cpu.median:.1f} s on these requests, "
            f"{first['moto_cpu']:.1f} s and {first['proxy_cpu']:.1f} s on the loop's as many. On a real object store the server's CPU is not "
            f"on the client's machine, and the client's share alone (≥ "
            f"{fmt_seconds(requests * client_per_get / cpus)} here) would be the floor.")


def _trainer_limits(data: dict[str, Any], m: dict[str, Measured], anchors: dict[str, list[dict[str, Any]]]) -> str:
    tk = m["trainer_read_data"].kinds()
    ranged = sum(v for k, v in tk.items() if k.startswith("GET range"))
    tl = statistics.median(a["seconds"] for a in anchors["trainer"])
    return (f"- **Trainer folder, `verify --read-data`** ({fmt_seconds(m['trainer_read_data'].wall.median)}, loop "
            f"{fmt_seconds(tl)}; not changed yet): every one of its "
            f"{m['trainer_read_data'].median_of('requests'):,.0f} requests waits for the one before (peak "
            f"{m['trainer_read_data'].median_of('peak'):.0f} in flight): {ranged:,.0f} ranged GETs — per checkpoint "
            f"the folder reader reads each torch zip's directory and each safetensors header with small ranged "
            f"reads for the structure checks, then streams every file in 16 MiB ranged GETs "
            f"(readers/modelfiles/fsio.py `RemoteFile.stream`), file after file; the folder readers have no "
            f"`blob-files` capability, so `fetch_blobs` never applies. The anchor makes one GET per file. To do: in "
            f"readers/modelfiles/folderreader.py `check_checkpoints` on a remote folder, fetch a checkpoint's files "
            f"(or a chunk of checkpoints') with one multi-path `fs.cat` (whole files up to a bound, `cat_ranges` in "
            f"parallel beyond) while the previous one is scanned, and scan from memory (an in-memory `RangeFile` in "
            f"fsio.py), so the header reads hit memory; for `ls`, read all the headers the listing needs with one "
            f"`fs.cat_ranges` ({m['trainer_ls'].median_of('requests'):,.0f} sequential requests for "
            f"{data['trainer']['checkpoints']} checkpoints now).")


if __name__ == "__main__":
    sys.exit(main())
