"""``lastgood report``: one self-contained HTML file — the run's timeline, its checkpoints and events,
the findings, a diff as the Diff page shows it, the journal — that loads nothing, shows secrets
redacted and every store-provided string as text (a hostile store cannot inject a script)."""

from __future__ import annotations

import json
import re
import shutil
import time
from datetime import timedelta
from pathlib import Path

import pytest

from lastgood.config import load_settings
from lastgood.errors import CheckpointNotFound
from lastgood.readers.native.writer import NativeWriter
from lastgood.report import build_report
from lastgood.report.html import PAGE_ROWS
from lastgood.stores import index_store, open_catalog
from tests.cli_inprocess import run_cli
from tests.helpers import ROOT, SAMPLE_STORE, T0, lastgood_cli

SECRET = "sk-REPORTSECRET0123456789abcdef"
HOSTILE = {
    "run": "<script>alert('run')</script>",
    "agent": '"><img src=x onerror=alert("agent")>',
    "trigger": "<svg onload=alert('trigger')>",
    "event": "</style><script>alert('event')</script>",
    "message": "<script>alert('message')</script><a href=javascript:alert(1)>click</a>",
    "reason": "<iframe src=https://evil.example/></iframe> & more",
    "metadata": "</title><script>alert('metadata')</script>",
}
TAGS = {"html", "head", "meta", "title", "style", "body", "main", "header", "h1", "h2", "h3", "p", "nav", "a",
        "section", "footer", "div", "span", "b", "code", "table", "thead", "tbody", "tr", "th", "td", "details",
        "summary", "svg", "circle", "path", "line", "text", "g", "colgroup", "col"}


def markup_problems(html: str) -> list[str]:
    """What in ``html``'s markup could run or load something: an element outside the report's own few,
    an event handler, a source, a link that leaves the page, a style that loads."""
    from html.parser import HTMLParser

    found: list[str] = []

    class Check(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list) -> None:
            if tag not in TAGS:
                found.append(f"<{tag}>")
            for name, value in attrs:
                if name.startswith("on") or name in ("src", "srcset", "action", "formaction", "xlink:href"):
                    found.append(f"{tag} {name}")
                if name == "href" and not str(value).startswith("#"):
                    found.append(f"{tag} href={value}")
                if name == "style" and re.search(r"(?i)url\(|@import|expression", str(value)):
                    found.append(f"{tag} style={value}")

    Check().feed(html)
    css = "".join(re.findall(r"<style>(.*?)</style>", html, re.S))
    return found + re.findall(r"(?i)url\(|@import", css)


def hostile_state(step: int) -> dict:
    messages = [{"role": "system", "content": "be brief"}]
    for i in range(step):
        messages += [{"role": "user", "content": f"{HOSTILE['message']} #{i}"},
                     {"role": "assistant", "content": f"answer {i} with key {SECRET}"}]
    return {"messages": messages, "tools": {"api_key": SECRET}, "turn": step}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A store whose every string is an injection attempt, indexed, with a quarantine journaled."""
    base = tmp_path_factory.mktemp("report")
    root, home = base / "store", base / "home"
    writer = NativeWriter(str(root), full_every=4)
    saved = [writer.save(HOSTILE["run"], hostile_state(step), agent=HOSTILE["agent"], step=step,
                         trigger=HOSTILE["trigger"] if step == 3 else "periodic",
                         metadata={"note": HOSTILE["metadata"], "token": SECRET},
                         created_at=T0 + timedelta(minutes=step),
                         event={"kind": "error", "message": f"{HOSTILE['event']} {SECRET}"} if step == 2 else None)
             for step in range(8)]
    catalog = open_catalog(load_settings(home))
    index_store(catalog, str(root))
    catalog.close()
    done = lastgood_cli("quarantine", str(root), saved[5].checkpoint_id, "--reason", HOSTILE["reason"], "--yes",
                        home=home)
    assert done.returncode == 0, done.stderr
    return {"root": root, "home": home, "saved": saved}


@pytest.fixture(scope="module")
def hostile_report(hostile: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("out") / "report.html"
    a, b = hostile["saved"][1].checkpoint_id, hostile["saved"][7].checkpoint_id
    done = lastgood_cli("report", str(hostile["root"]), "--run", HOSTILE["run"], "--diff", a, b, "-o", str(out),
                        "--format", "json", home=hostile["home"])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["output"] == str(out) and result["bytes"] == out.stat().st_size
    return out


def test_the_report_holds_every_section_and_loads_nothing(hostile_report: Path) -> None:
    html = hostile_report.read_text()
    assert html.startswith("<!DOCTYPE html>")
    for anchor in ("summary", "timeline", "findings", "diff", "journal"):
        assert f'<section id="{anchor}">' in html
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert markup_problems(html) == []
    assert markup_problems('<p onclick="x"><script></script><a href="https://x">') == ["p onclick", "<script>",
                                                                                        "a href=https://x"]
    assert html.count('class="ckpt"') == 8  # every checkpoint of the run on the timeline
    assert html.count('class="event"') == 1
    assert "quarantined" in html  # the journaled action's mark, and its row
    assert html.count('class="mark m-added"') == 12  # 6 turns of 2 messages between step 1 and step 7


def test_every_store_string_is_text_and_every_secret_is_redacted(hostile_report: Path) -> None:
    html = hostile_report.read_text()
    assert SECRET not in html and "[redacted]" in html
    for name, text in HOSTILE.items():
        if name == "run":  # a run id is an id: shown, escaped
            assert "&lt;script&gt;alert(&#x27;run&#x27;)&lt;/script&gt;" in html
        escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;") \
            .replace("'", "&#x27;")
        assert text not in html, name
        if name in ("agent", "event", "message", "reason"):
            assert escaped in html, name


def test_build_report_is_what_the_pages_call(hostile: dict) -> None:
    catalog = open_catalog(load_settings(hostile["home"]))
    try:
        store = index_store(catalog, str(hostile["root"]), check="none").store
        whole = build_report(catalog, store)
        assert 'id="timeline"' not in whole and "Runs" in whole and 'id="journal"' in whole
        bare = build_report(catalog, store, run=HOSTILE["run"], findings=False)
        assert 'id="findings"' not in bare and 'id="diff"' not in bare and 'id="timeline"' in bare
        with pytest.raises(CheckpointNotFound):
            build_report(catalog, store, run="no-such-run")
    finally:
        catalog.close()


def test_the_command_says_what_it_wrote_and_refuses_what_it_cannot(hostile: dict, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    done = run_cli("report", str(hostile["root"]), "-o", str(out), home=hostile["home"])
    assert done.returncode == 0 and done.stdout.startswith(f"wrote {out} (") and out.exists()
    done = run_cli("report", str(hostile["root"]), "--run", "nope", "-o", str(tmp_path / "x.html"),
                   home=hostile["home"])
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and not (tmp_path / "x.html").exists()
    done = run_cli("report", str(hostile["root"]), "--diff", "ffffffff", "eeeeeeee", "-o", "-", home=hostile["home"])
    assert done.returncode == 2 and "no checkpoint matches" in done.stderr


def test_a_sample_store_report(tmp_path: Path) -> None:
    """The sample store copied: a damaged run with events, findings and a diff whose conversation grew."""
    store, home, out = tmp_path / "agents", tmp_path / "home", tmp_path / "sample.html"
    shutil.copytree(SAMPLE_STORE, store)
    done = run_cli("report", str(store), "--run", "trading-003", "--diff", "trading-003/01a198b7-35",
                   "trading-003/01a198b9-d9", "-o", str(out), home=home)
    assert done.returncode == 0, done.stderr
    html = out.read_text()
    assert "sha256-mismatch" in html and html.count('class="ckpt"') == 188 and 'data-status="corrupt"' in html
    assert "/llm/messages" in html and html.count('class="mark m-added"') == 8
    assert markup_problems(html) == []


def test_a_langgraph_database_report(tmp_path: Path) -> None:
    """The sample LangGraph SqliteSaver DB: a thread's timeline with its pending-write events, its
    interrupt and error, a diff of two of its checkpoints, the tools' api_key redacted."""
    db, home, out = tmp_path / "langgraph.sqlite", tmp_path / "home", tmp_path / "lg.html"
    shutil.copy(ROOT / "sample_data" / "langgraph.sqlite", db)
    ids = run_cli("sql", str(db), "SELECT checkpoint_id FROM checkpoints WHERE run_id = 'research-002' AND "
                                  "namespace = '' AND step IN (-1, 21) ORDER BY step", "--format", "csv", home=home)
    a, b = ids.stdout.split()[1:]
    done = run_cli("report", str(db), "--diff", a, b, "-o", str(out), "--format", "json", home=home)
    assert done.returncode == 0, done.stderr
    html = out.read_text()
    for anchor in ("summary", "timeline", "findings", "diff", "journal"):
        assert f'<section id="{anchor}">' in html
    assert "research-002" in html and "/messages" in html and "/tools" in html  # the input step's diff
    assert "api_key&quot;: &quot;[redacted]" in html and markup_problems(html) == []
    whole = run_cli("report", str(db), "-o", str(tmp_path / "all.html"), home=home)
    assert whole.returncode == 0 and "pending-error" in (tmp_path / "all.html").read_text()


def offline_page(browser):  # noqa: ANN001, ANN201 - playwright's types
    """An offline Chromium page recording every request, dialog and script error."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
    page = context.new_page()
    requests: list[str] = []
    dialogs: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: errors.append(str(e)))
    return context, page, requests, dialogs, errors


@pytest.mark.browser
def test_it_opens_offline_in_chromium_and_runs_nothing(hostile_report: Path, chromium_browser) -> None:
    context, page, requests, dialogs, errors = offline_page(chromium_browser)
    started = time.monotonic()
    page.goto(hostile_report.as_uri(), wait_until="load")
    loaded = time.monotonic() - started
    try:
        assert requests == [hostile_report.as_uri()]  # the file itself, nothing else
        assert dialogs == [] and errors == []
        assert page.evaluate("document.scripts.length") == 0
        assert page.evaluate("document.querySelectorAll('img, iframe, object, embed').length") == 0
        headings = page.locator("h2").all_inner_texts()
        assert headings == ["Summary", "Timeline", "Findings", "Diff", "Actions taken"]
        assert page.locator("svg.timeline circle.ckpt").count() == 8
        assert page.locator("svg.timeline circle.ckpt[data-status='quarantined']").count() == 1
        text = page.evaluate("document.body.innerText")
        assert HOSTILE["message"] in text and HOSTILE["event"] in text and HOSTILE["reason"] in text
        assert SECRET not in page.content()
        assert page.locator("#diff tbody tr").count() >= 12 and page.locator("#journal tbody tr").count() == 1
        assert loaded < 10
    finally:
        context.close()


LONG = 2 * PAGE_ROWS + 345  # messages added between the two checkpoints of the long run


@pytest.fixture(scope="module")
def long_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose conversation grows from nothing to LONG messages (hostile text, a secret in
    some), reported with its diff: the conversation comes in three pages."""
    base = tmp_path_factory.mktemp("long")
    root, home, out = base / "store", base / "home", base / "long.html"
    writer = NativeWriter(str(root))
    messages = [{"id": f"m{i}", "role": "user" if i % 2 else "assistant",
                 "content": f"{HOSTILE['event']} #{i}" + (f" key {SECRET}" if i % 100 == 7 else "")}
                for i in range(LONG)]
    first, last = (writer.save("long", {"messages": messages[:n]}, step=step, created_at=T0 + timedelta(minutes=step))
                   for step, n in enumerate((0, LONG)))
    done = run_cli("report", str(root), "--diff", first.checkpoint_id, last.checkpoint_id, "-o", str(out), home=home)
    assert done.returncode == 0, done.stderr
    return out


def test_a_long_conversation_comes_in_closed_pages_that_hold_every_message(long_report: Path) -> None:
    html = long_report.read_text()
    assert html.count('<details class="page">') == 3 and "<details class=\"page\" open" not in html
    assert f"<summary>messages #0–#{PAGE_ROWS - 1} · {PAGE_ROWS:,} added</summary>" in html
    assert f"<summary>messages #{2 * PAGE_ROWS}–#{LONG - 1} · 345 added</summary>" in html
    indices = [int(i) for i in re.findall(r'<td class="mark m-added">added</td><td class="num">(\d+)</td>', html)]
    assert indices == list(range(LONG))  # every message, once, in B's order
    assert SECRET not in html and "[redacted]" in html and markup_problems(html) == []
    escaped = HOSTILE["event"].replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#x27;")
    assert html.count(escaped) == LONG and HOSTILE["event"] not in html


def test_any_long_table_comes_in_pages_of_its_rows() -> None:
    from lastgood.report.html import table

    rows = [[str(i), f"&lt;b&gt;{i}"] for i in range(PAGE_ROWS + 1)]
    paged = table(["n", "text"], rows, label="events")
    assert paged.count('<details class="page">') == 2 and paged.count("<tr><td") == PAGE_ROWS + 1
    assert f"<summary>events 1–{PAGE_ROWS:,} of {PAGE_ROWS + 1:,}</summary>" in paged
    assert f"<summary>events {PAGE_ROWS + 1:,}–{PAGE_ROWS + 1:,} of {PAGE_ROWS + 1:,}</summary>" in paged
    assert "<details" not in table(["n", "text"], rows[:PAGE_ROWS])


@pytest.mark.browser
def test_a_long_conversation_opens_offline_and_every_page_opens(long_report: Path, chromium_browser) -> None:
    context, page, requests, dialogs, errors = offline_page(chromium_browser)
    try:
        page.goto(long_report.as_uri(), wait_until="load")
        rows = page.locator("#diff details.page tbody tr")
        assert rows.count() == LONG and not rows.first.is_visible() and not rows.last.is_visible()
        summaries = page.locator("#diff details.page > summary")
        for i in range(summaries.count()):
            summaries.nth(i).click()
        page.wait_for_function("document.querySelectorAll('#diff details.page[open]').length === 3")
        assert rows.first.is_visible() and rows.last.is_visible()
        text = page.locator("#diff").inner_text()
        assert f"{HOSTILE['event']} #0" in text and f"{HOSTILE['event']} #{LONG - 1}" in text
        assert requests == [long_report.as_uri()] and dialogs == [] and errors == []
        assert page.evaluate("document.scripts.length") == 0 and SECRET not in page.content()
    finally:
        context.close()
