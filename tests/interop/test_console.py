"""The console in a real headless browser (Debian's chromium driven by Playwright) against a
real broker process, while librdkafka consumers grow a KIP-848 group and a classic group
forms. The pages must show what ConsumerGroupDescribe says (epochs, each member's
partitions), update live through server-sent events without a reload, and raise no
JavaScript error. Screenshots go to test-artifacts/console/."""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cluster.etcd_process import free_port
from tests.polling import wait_until

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
TIMEOUT = 30
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def console_broker(tmp_path_factory):
    from tests.conftest import BrokerProcess

    port = free_port()
    props = ["console.enable=true", f"console.listener=127.0.0.1:{port}",
             "group.consumer.heartbeat.interval.ms=500", "group.consumer.min.heartbeat.interval.ms=100",
             "group.initial.rebalance.delay.ms=0"]
    b = BrokerProcess(tmp_path_factory.mktemp("console") / "data", [a for p in props for a in ("-o", p)]).start()
    yield b, f"http://127.0.0.1:{port}"
    if b.alive():
        assert b.stop() == 0


@pytest.fixture
def page():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"chromium not installed at {CHROMIUM} (make test installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        pg = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        pg.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
        pg.on("console", lambda msg: errors.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None)
        pg.js_errors = errors
        yield pg
        browser.close()
    assert errors == [], errors  # any JavaScript error fails the test


def _describe(admin: AdminClient, group: str):
    return admin.describe_consumer_groups([group])[group].result(TIMEOUT)


def _api(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # 404 until the console has seen the group
        return json.loads(exc.read())


def _dom_members(page) -> dict[str, dict]:
    """Member id -> {epoch, owned partitions} as the page shows them now."""
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('#members tr.member')].map(tr => [
        tr.dataset.member,
        {epoch: tr.dataset.epoch, reconciliation: tr.dataset.reconciliation,
         owned: [...tr.querySelectorAll('.tp.owned')].map(s => s.dataset.tp).sort()}]))""")


def _shows(page, admin, group) -> bool:
    """The page's members, epochs and owned partitions equal ConsumerGroupDescribe's."""
    d = _describe(admin, group)
    want = {m.member_id: sorted(f"{tp.topic}-{tp.partition}" for tp in m.assignment.topic_partitions)
            for m in d.members}
    shown = _dom_members(page)
    return ({k: v["owned"] for k, v in shown.items()} == want
            and all(v["reconciliation"] == "stable" for v in shown.values()))


def test_console_pages_follow_a_kip848_group_live(console_broker, page):
    broker, url = console_broker
    topic, group = "watched", "watched-group"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(TIMEOUT)
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest"}
    c1 = Consumer(conf)
    c1.subscribe([topic])
    consumers = [c1]
    try:
        def poll_all():
            for c in consumers:
                c.poll(0.05)

        def group_settled(n: int):
            poll_all()
            d = _describe(admin, group)
            return len(d.members) == n and all(len(m.assignment.topic_partitions) == 4 // n for m in d.members)

        wait_until(lambda: group_settled(1), TIMEOUT, what="one member owning four partitions")
        # The console sees it within a refresh.
        wait_until(lambda: (_api(f"{url}/api/groups/{group}").get("group") or {}).get("members"), TIMEOUT,
                   what="console snapshot")

        page.goto(f"{url}/groups/{group}")
        wait_until(lambda: (poll_all(), _shows(page, admin, group))[1], TIMEOUT, what="page shows one member")
        epoch = _describe_epochs(broker.bootstrap, group)
        assert page.inner_text("#group-epoch") == str(epoch[0])
        assert page.inner_text("#target-epoch") == str(epoch[1])
        assert page.inner_text("#assignor") == "uniform"
        page.wait_for_function("document.getElementById('lag-chart').dataset.points > 1", timeout=TIMEOUT * 1000)
        page.screenshot(path=str(ARTIFACTS / "group-one-member.png"), full_page=True)

        # A second member joins; the page updates through the event stream, with no reload.
        page.evaluate("window.notReloaded = true")
        c2 = Consumer(conf)
        c2.subscribe([topic])
        consumers.append(c2)
        wait_until(lambda: group_settled(2), TIMEOUT, what="two members with two partitions each")
        wait_until(lambda: (poll_all(), _shows(page, admin, group))[1], TIMEOUT, what="page shows two members")
        assert page.evaluate("window.notReloaded") is True
        epoch = _describe_epochs(broker.bootstrap, group)
        wait_until(lambda: page.inner_text("#group-epoch") == str(epoch[0]), TIMEOUT, what="group epoch shown")
        assert page.inner_text("#member-count") == "2"
        for member in _dom_members(page).values():
            assert member["epoch"] == str(epoch[1])  # every member reconciled to the target epoch
        history = page.inner_text("#history")
        assert "joined" in history and "group-epoch" in history
        page.screenshot(path=str(ARTIFACTS / "group-two-members.png"), full_page=True)

        # The overview lists the broker, the topic's partitions with leader and ISR, and the group.
        page.goto(f"{url}/")
        page.wait_for_selector(f"#groups tr[data-group='{group}']")
        row = page.locator(f"#groups tr[data-group='{group}']")
        assert row.locator(".state").inner_text() == "Stable"
        wait_until(lambda: row.locator(".members").inner_text() == "2", TIMEOUT, what="overview member count")
        assert page.locator("#brokers tr[data-broker]").count() == 1
        assert page.locator(f"#topics tr[data-topic='{topic}']").count() == 4
        assert page.locator(f"#topics tr[data-topic='{topic}'] .isr").all_inner_texts() == ["1"] * 4
        page.screenshot(path=str(ARTIFACTS / "overview.png"), full_page=True)
    finally:
        for c in consumers:
            c.close()


def test_console_shows_a_classic_group_with_its_generation(console_broker, page):
    broker, url = console_broker
    topic, group = "classic-watched", "classic-watched-group"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(TIMEOUT)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        def stable():
            c.poll(0.1)
            d = _describe(admin, group)
            return str(d.state).endswith("STABLE") and len(d.members) == 1 and \
                len(d.members[0].assignment.topic_partitions) == 2
        wait_until(stable, TIMEOUT, what="classic group stable")
        page.goto(f"{url}/groups/{group}")
        wait_until(lambda: (c.poll(0.05), page.locator("#generation").count() == 1
                            and page.inner_text("#generation").isdigit())[1], TIMEOUT, what="generation shown")
        assert int(page.inner_text("#generation")) >= 1
        member = next(iter(_describe(admin, group).members))
        assert page.inner_text("#leader") == member.member_id
        owned = page.locator("#members .tp.owned").all_inner_texts()
        assert sorted(owned) == [f"{topic}-0", f"{topic}-1"]
        page.screenshot(path=str(ARTIFACTS / "classic-group.png"), full_page=True)
    finally:
        c.close()


def _describe_epochs(bootstrap: str, group: str) -> tuple[int, int]:
    from odradek.client import Admin

    with Admin(bootstrap) as admin:
        d = admin.describe_groups([group])[group]
        return d.epoch, d.assignment_epoch


def test_console_page_of_an_unknown_group_and_static_files(console_broker, page):
    _, url = console_broker
    page.goto(f"{url}/groups/no-such-group")
    assert "not known" in page.inner_text("#group-body")
    with urllib.request.urlopen(f"{url}/static/plotly.min.js", timeout=10) as resp:
        assert resp.status == 200 and len(resp.read()) > 1_000_000
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and page.inner_text("#live") != "live":
        time.sleep(0.1)
    assert page.inner_text("#live") == "live"  # the event stream connected
