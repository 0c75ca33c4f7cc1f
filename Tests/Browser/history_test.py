#!/usr/bin/env python3
"""The dashboard for an app that has lived for years, in real Chromium against the real origin:
800 releases and 100 channels made through the publisher HTTP API, then a rollout. The page
stays short (windows of rows, never the whole history), the newest release comes first and the
rollout's candidate is marked on the first window, the channels come in the dashboard's order
(production, then the newest releases served, ties in natural name order) through their pages,
a filter finds c100, a search finds an old release beyond the origin's first page, paging older
follows the origin's pages, and two releases pages apart compare. The release history's model
is also driven in the page against the paged answer and the whole one, counting requests.

    history_test.py --depot .build/debug/depot --public Public --artifacts DIR
"""

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from harness import main, sign_in
from history_fixture import DEV, build, channel_order, everything

RELEASES, CHANNELS = 800, 100
HISTORY_ROWS, CHANNEL_ROWS = 20, 10  # history-view.js, channels-view.js
# At 1280×900 the sections around the two tables (app, upload, rollout and its charts, draft,
# Info.plist keys, configuration) take about 2,500 px, the two windows of rows about 1,200; the
# whole history drawn at once took 51,000.
MAX_HEIGHT = 4000


def step(name):
    print(f"history: {name}", flush=True)


def rows(b, table, attribute):
    return [int(v) if v.isdigit() else v for v in (r.get_attribute(attribute) for r in b.driver.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr[{attribute}]"))]


# Installed before the page's own scripts: records the page's requests for release lists.
PAGES = """
const list = /^\\/v1\\/apps\\/[^/]+\\/releases$/, fetched = window.fetch.bind(window);
window.releasePages = [];
window.fetch = (input, init) => {
  const url = new URL(input instanceof Request ? input.url : String(input), location.origin);
  if (list.test(url.pathname)) window.releasePages.push(url.pathname + url.search);
  return fetched(input, init);
};
"""


def pages(b):
    """The release lists the page asked for since it loaded (paths with their queries)."""
    return b.driver.execute_script("return window.releasePages")


def type_into(b, css, text):
    """Replaces a field's text with keystrokes, as a person does (each fires an input event)."""
    field = b.find(css)
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.BACKSPACE)
    if text:
        field.send_keys(text)


def run(origin, b, work, args):
    step(f"build {RELEASES} releases and {CHANNELS} channels through the HTTP API, then a rollout")
    took, candidate = build(origin, RELEASES, CHANNELS)
    listed, channels, paged = everything(origin)
    versions = [r["version"] for r in listed]
    newest = versions[0]
    order = channel_order(channels)
    step(f"built in {took:.1f} s: {len(versions)} releases, {len(channels)} channels")
    assert paged, "the origin answers every release at once: GET …/releases has no total"
    b.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PAGES})

    step("sign in at 1280×900: the newest release first, the rollout's candidate marked, a short page")
    b.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    b.driver.get(origin.url + "/")
    b.wait(lambda: b.find("#sign-in").is_displayed(), message="no sign-in form")
    sign_in(b, origin.token("DEPOT_ADMIN_TOKEN"))
    b.wait(lambda: rows(b, "history", "data-release")[:1] == [newest], message="the newest release is not the first row")
    b.wait_text("#rollout-state", f"Rollout of release {candidate} on production")
    mark = b.wait_text(f'#history tr[data-release="{candidate}"] .badge', "rollout on production: running, 10 %")
    assert rows(b, "history", "data-release") == versions[:HISTORY_ROWS], rows(b, "history", "data-release")
    b.wait_text("#history-range", f"1–{HISTORY_ROWS} of {len(versions)} releases, newest first")
    height, rendered = b.driver.execute_script("return [document.body.scrollHeight, document.querySelectorAll('tbody tr').length]")
    assert height < MAX_HEIGHT, f"the page is {height} px tall"
    assert len(rows(b, "history", "data-release")) == HISTORY_ROWS and len(rows(b, "channels", "data-channel")) == CHANNEL_ROWS
    assert rendered <= HISTORY_ROWS + CHANNEL_ROWS + 4, f"{rendered} rows rendered"  # + the live release's packs
    step(f"page height {height} px, {rendered} table rows rendered; {mark!r}")
    assert pages(b) == [f"/v1/apps/{DEV}/releases"], f"the first screen asked for more than the newest page: {pages(b)}"
    b.check_console()

    step("the channels, page by page, in the dashboard's order")
    assert order[:3] == ["production", "beta", "c32"] and order.index("c5") < order.index("c37"), order[:12]
    seen = rows(b, "channels", "data-channel")
    while not b.find("#channels-next").get_attribute("disabled"):
        b.click("#channels-next")
        b.wait(lambda: rows(b, "channels", "data-channel")[:1] == [order[len(seen)]], message=f"page {len(seen) // CHANNEL_ROWS + 1} of the channels")
        seen += rows(b, "channels", "data-channel")
    assert seen == order, f"the channels' order: {seen}"
    lookups = pages(b)[1:]
    assert all("?before=" in p and "&limit=" in p for p in lookups) and len(lookups) <= len(order) // CHANNEL_ROWS, lookups
    b.click("#channels-previous")
    b.wait(lambda: rows(b, "channels", "data-channel") == order[-(len(order) % CHANNEL_ROWS or CHANNEL_ROWS) - CHANNEL_ROWS:][:CHANNEL_ROWS])
    assert [o.get_attribute("value") for o in Select(b.find("#plist-channel")).options] == order
    assert [o.get_attribute("value") for o in Select(b.find("#rollout-channel")).options] == order

    step("the filter finds c100, with its release's date")
    type_into(b, "#channel-filter", "c100")
    b.wait(lambda: rows(b, "channels", "data-channel") == ["c100"], message="the filter never showed c100 alone")
    served = next(r for r in listed if r["version"] == channels["c100"])
    b.wait_text('#channels tr[data-channel="c100"]', served["publishedAt"][:10])
    b.wait_text("#channels-range", "1 channel matching “c100”")
    type_into(b, "#channel-filter", "c1")
    b.wait(lambda: rows(b, "channels", "data-channel") == [c for c in order if "c1" in c][:CHANNEL_ROWS], message="the filter c1")
    b.screenshot("history-channels", "#channels-title")
    b.check_console()

    step("page older, past the origin's first page, and back")
    asked = len(pages(b))
    for page in range(1, 7):
        b.click("#history-older")
        b.wait(lambda: rows(b, "history", "data-release") == versions[page * HISTORY_ROWS:(page + 1) * HISTORY_ROWS], message=f"older page {page}")
    b.wait_text("#history-range", f"{6 * HISTORY_ROWS + 1}–{7 * HISTORY_ROWS} of {len(versions)} releases")
    assert pages(b)[asked:] == [f"/v1/apps/{DEV}/releases?before={versions[99]}&limit=100"], pages(b)[asked:]
    b.click("#history-newer")
    b.wait(lambda: rows(b, "history", "data-release") == versions[5 * HISTORY_ROWS:6 * HISTORY_ROWS], message="newer")
    b.click("#history-newest")
    b.wait(lambda: rows(b, "history", "data-release")[:1] == [newest], message="newest")

    step("search: an old release beyond the first page, a channel's release, the rollout's button")
    type_into(b, "#history-search", "5")
    b.wait(lambda: rows(b, "history", "data-release") == [5], message="the search for release 5")
    first = next(r for r in listed if r["version"] == 5)
    assert first["publishedAt"][:10] in b.text('#history tr[data-release="5"]')
    b.wait_text("#history-range", "1 release found for release 5")
    assert pages(b)[-1] == f"/v1/apps/{DEV}/releases?before=6&limit=1", pages(b)
    step("compare release 5 (searched) with release 800 (on the first window)")
    Select(b.find("#compare-from")).select_by_value("5")
    type_into(b, "#history-search", "c100")
    b.wait(lambda: rows(b, "history", "data-release") == [channels["c100"]], message="the search for c100")
    assert "c100" in b.text(f'#history tr[data-release="{channels["c100"]}"] td:nth-of-type(3)')
    type_into(b, "#history-search", "nothing-like-this")
    b.wait_text("#history-range", "Nothing found for channels named like “nothing-like-this”.")
    b.click("#history-rollout")
    b.wait(lambda: rows(b, "history", "data-release") == [candidate], message="the rollout's button")
    type_into(b, "#history-search", "")
    b.wait(lambda: rows(b, "history", "data-release")[:1] == [newest], message="an empty search shows the newest again")
    Select(b.find("#compare-to")).select_by_value(str(RELEASES))
    assert Select(b.find("#compare-from")).first_selected_option.get_attribute("value") == "5", "the first choice was lost while paging"
    b.click("#compare-form button[type=submit]")
    summary = b.wait_text("#comparison-summary", "0 added, 1 changed, 0 removed, 0 unchanged")
    b.wait_text("#comparison h3", f"From release 5 to release {RELEASES}")
    assert len(Select(b.find("#compare-to")).options) <= HISTORY_ROWS + 2
    b.screenshot("history-long", "#history-title")
    b.check_console()
    step(summary)

    model(b)


def model(b):
    """The model in the page against a paged origin and an origin that lists all: requests made
    only when a person pages past what is loaded or looks a release up."""
    step("the history model against both answers")
    result = b.driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        import('/js/history.js').then(async ({ ReleaseHistory }) => {
          const all = [];
          for (let v = 1; v <= 1000; v++) if (v % 97) all.push({ version: v, channels: [] });
          const path = '/v1/apps/x/releases', asked = [];
          const paged = async (url) => {
            asked.push(url);
            const query = new URL(url, location.origin).searchParams;
            const before = Number(query.get('before') ?? Infinity), limit = Number(query.get('limit') ?? 100);
            const below = all.filter((r) => r.version < before), page = below.slice(-limit);
            const answer = { app: 'x', live: 1000, channels: {}, releases: page, total: all.length };
            if (below.length > page.length) answer.next = `${path}?before=${page[0].version}&limit=${limit}`;
            return answer;
          };
          const h = new ReleaseHistory(await paged(path), path, paged);
          const first = [h.loaded.length, h.total, asked.length];
          await h.ensure(100);
          const noFetch = asked.length;
          await h.ensure(140);
          const found = await h.summaries([5, 7, 97, 401, 999]);
          const whole = new ReleaseHistory({ app: 'x', channels: {}, releases: all }, path, () => { throw new Error('fetched'); });
          await whole.ensure(5000);
          const wholeFound = await whole.summaries([5, 97]);
          done({ first, noFetch, asked: asked.slice(1), loaded: h.loaded.length, found: [...found.keys()],
                 whole: [whole.loaded.length, whole.total, whole.newest, [...wholeFound.keys()]] });
        }, (e) => done({ error: String(e) }));
    """)
    assert result.get("first") == [100, 990, 1], result
    assert result["noFetch"] == 1 and result["loaded"] == 200, result
    assert result["asked"] == ["/v1/apps/x/releases?before=900&limit=100", "/v1/apps/x/releases?before=402&limit=1",
                               "/v1/apps/x/releases?before=98&limit=1", "/v1/apps/x/releases?before=8&limit=3"], result
    assert result["found"] == [5, 7, 401, 999], result
    assert result["whole"] == [990, 990, 1000, [5]], result
    b.check_console()


if __name__ == "__main__":
    main("history", run, ())
