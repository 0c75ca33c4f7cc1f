#!/usr/bin/env python3
"""The dashboard in real Chromium against the real origin (issue 16's acceptance test):
sign in (a wrong token refused), upload 20 MiB to 100 % with a pause, an upload interrupted by
killing the origin and resumed from the page after a restart and a reload, publish, see the
new version, compare two releases, roll back, an allowance refusal shown with its numbers, a
live pack's removal, the Info.plist keys and the app configuration copied, a managed app, a
publisher's narrower view, keyboard use; screenshots at 1280×800 and 390×844; no console error.

    dashboard_test.py --depot .build/debug/depot --public Public --artifacts DIR --archive FILE
"""

import base64
import json
import os
import time

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from harness import main, choose_file, live_version, progress, sha256_hex, sign_in

MIB = 1024 * 1024
DEV, MANAGED = "com.example.dev", "com.example.managed"
NETWORK = r"Failed to load resource|net::ERR_"


def step(name):
    print(f"dashboard: {name}", flush=True)


def run(origin, b, work, args):
    admin, publisher = origin.token("DEPOT_ADMIN_TOKEN"), origin.token("DEPOT_TOKEN")
    first, second = (os.path.join(work, n) for n in ("level-1.bin", "level-2.bin"))
    for path, size in ((first, 20 * MIB), (second, 20 * MIB)):
        with open(path, "wb") as f:
            f.write(os.urandom(size))

    step("the page's security headers")
    status, headers, _ = origin.request("GET", "/")
    assert status == 200 and "script-src 'self'" in headers["Content-Security-Policy"], headers
    assert "unsafe-inline" not in headers["Content-Security-Policy"]

    step("a wrong token is refused")
    b.driver.get(origin.url + "/")
    b.wait(lambda: b.find("#sign-in").is_displayed(), message="no sign-in form")
    b.wait_text("#health", "The origin is up.")
    b.screenshot("sign-in")
    sign_in(b, "dpt_" + "0" * 48)
    error = b.wait_text("#sign-in-error", "refused")
    assert "unauthorized" in error, error
    assert not b.find("#app-view").is_displayed()
    b.check_console(allowed=[r"401"])

    step("sign in with the keyboard")
    sign_in(b, admin, keyboard=True)
    b.wait_text("#app-title", DEV)
    b.wait_text("#notice", f"Signed in to {DEV} as admin")
    assert admin not in b.driver.current_url
    assert b.driver.execute_script("return sessionStorage.getItem('depot.tokens')").count(admin) == 1
    assert admin not in json.dumps(b.driver.execute_script("return {...localStorage}"))
    b.check_console()

    step("upload 20 MiB with a pause, watching the progress")
    b.throttle(8 * MIB)
    choose_file(b, first, "level-1", "essential")
    b.click("#upload-start")
    seen, figures = set(), set()

    def watch():
        seen.add(progress(b))
        figures.add(b.text("#upload-figures"))

    b.wait(lambda: watch() or progress(b) >= 25, 30, "the progress never passed 25 %")
    b.click("#upload-pause")
    b.wait_text("#upload-state", "Paused at")
    paused = progress(b)
    b.screenshot("upload-paused", "#upload-title")
    time.sleep(0.5)
    assert progress(b) == paused, "the upload went on while paused"
    assert b.text("#upload-retry") == "Resume"
    b.click("#upload-retry")
    b.wait(lambda: watch() or "Done:" in b.text("#upload-state"), 60, "the upload never finished")
    assert progress(b) == 100 and b.text("#upload-percent") == "100 %"
    assert any(0 < v < 100 for v in seen), f"no intermediate progress was shown: {sorted(seen)}"
    assert any("MiB/s" in f and " left" in f for f in figures), f"no speed and time left were shown: {figures}"
    assert "level-1" in b.text("#upload-state") and "staged" in b.text("#upload-state")
    b.wait(lambda: b.driver.find_elements(By.CSS_SELECTOR, '#draft-packs tr[data-pack="level-1"]'), message="level-1 not in the draft")
    b.check_console(allowed=[NETWORK])  # the aborted PATCH of the pause

    step("publish: the new version")
    b.click("#publish")
    said = b.confirm("Devices download 20.0 MiB")
    b.wait_text("#notice", "Published release 1 to production.")
    b.wait(lambda: live_version(b) == 1, message="production never showed release 1")
    row = b.text('#live-packs tr[data-pack="level-1"]')
    status, _, body = origin.request("GET", f"/v1/apps/{DEV}/releases/1")
    staged = json.loads(base64.b64decode(json.loads(body)["payload"]))["packs"][0]
    assert f"{staged['size']:,} bytes" in row and "essential" in row and f"key {staged['keyID']}" in row, row
    assert staged["plaintextSHA256"] == sha256_hex(first)
    b.screenshot("live-release", "#channels-title")
    b.check_console()

    step("interrupt an upload by killing the origin, restart it, resume after a reload")
    b.throttle(4 * MIB)
    choose_file(b, second, "level-2")
    b.click("#upload-start")
    b.wait(lambda: progress(b) >= 40, 30, "the second upload never passed 40 %")
    origin.kill()
    b.wait_text("#upload-state", "Stopped:", 30)
    assert "does not answer" in b.text("#alert-text") or "lost" in b.text("#alert-text"), b.text("#alert-text")
    b.screenshot("upload-interrupted", "#upload-title")
    origin.start()
    b.throttle(0)
    b.driver.refresh()
    b.wait_text("#app-title", DEV)
    b.find("#file").send_keys(second)
    b.wait_text("#upload-state", "An unfinished upload of level-2.bin as level-2 was found")
    assert b.text("#upload-start") == "Resume upload" and b.find("#pack-id").get_attribute("value") == "level-2"
    b.click("#upload-start")
    resumed = b.wait_text("#upload-state", "Resuming at")
    at = int(resumed.split("(")[1].split(" bytes")[0].replace(",", ""))
    assert 0 < at < 20 * MIB, resumed
    b.wait_text("#upload-state", "Done:", 60)
    status, _, body = origin.request("GET", f"/v1/apps/{DEV}/staging", admin)
    next_packs = {p["id"]: p for p in json.loads(body)["next"]}
    assert next_packs["level-2"]["plaintextSHA256"] == sha256_hex(second), "the resumed upload's bytes differ from the file"
    b.check_console(allowed=[NETWORK])
    step(f"resumed at {at} bytes of {20 * MIB}")

    step("publish release 2 and compare it with release 1")
    b.click("#publish")
    b.confirm()
    b.wait(lambda: live_version(b) == 2, message="production never showed release 2")
    Select(b.find("#compare-from")).select_by_value("1")
    Select(b.find("#compare-to")).select_by_value("2")
    b.click("#compare-form button[type=submit]")
    summary = b.wait_text("#comparison-summary", "1 added")
    size2 = next_packs["level-2"]["size"]
    assert "0 changed, 0 removed, 1 unchanged" in summary and f"({size2:,} bytes)" in summary, summary
    assert b.find('#comparison-table tr[data-pack="level-2"]').get_attribute("data-change") == "added"
    b.screenshot("comparison", "#history-title")
    # A changed pack with patches: the page's own module says what a device on each revision takes.
    shown = b.driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        import('/js/format.js').then((f) => {
          const old = {id: 'w', revision: 3, sha256: 'a', plaintextSHA256: 'p3', size: 1181116006};
          const now = {id: 'w', revision: 5, sha256: 'b', plaintextSHA256: 'p5', size: 1181116006, patches: [
            {fromRevision: 3, fromPlaintextSHA256: 'p3', size: 13002342, sha256: 'c', url: 'x'},
            {fromRevision: 4, fromPlaintextSHA256: 'p4', size: 2097152, sha256: 'd', url: 'y'}]};
          const d = f.difference({version: 1, packs: [old]}, {version: 2, packs: [now]});
          done({download: d.download, lines: f.patchLines(now)});
        }, (e) => done({error: String(e)}));
    """)
    assert shown.get("download") == 13002342, shown
    assert shown.get("lines") == ["from revision 4: 2.0 MiB instead of 1.1 GiB", "from revision 3: 12.4 MiB instead of 1.1 GiB"], shown
    b.check_console()

    step("roll back to release 1")
    b.click('#history tr[data-release="1"] button[aria-label="Roll production back to release 1"]')
    b.confirm("delete those release 1 lacks")
    b.wait_text("#notice", "Rolled production back to release 1's packs as release 3.")
    b.wait(lambda: live_version(b) == 3, message="production never showed release 3")
    assert not b.driver.find_elements(By.CSS_SELECTOR, '#live-packs tr[data-pack="level-2"]')
    b.check_console()

    step("promote release 2 to a beta channel; a promotion backwards is refused verbatim")
    b.click('#history button[aria-label="Promote release 2"]')
    b.find("#confirm-input").clear()
    b.find("#confirm-input").send_keys("beta")
    b.confirm()
    b.wait_text("#notice", "beta now serves release 2.")
    b.wait(lambda: live_version(b, "beta") == 2, message="beta never showed release 2")
    b.click('#history button[aria-label="Promote release 1"]')
    b.find("#confirm-input").clear()
    b.find("#confirm-input").send_keys("beta")
    b.confirm()
    b.wait_text("#alert-text", "409 channel_backwards")
    assert live_version(b, "beta") == 2
    b.check_console(allowed=[r"409"])

    step("an allowance refusal shows the numbers")
    origin.cli("apps", "allowances", DEV, "--download", str(MIB))  # a prefetch pack of 1 MiB encrypts to a little more
    b.driver.execute_script("""
        const bytes = new Uint8Array(1024 * 1024).map((_, i) => i % 251);
        const transfer = new DataTransfer();
        transfer.items.add(new File([bytes], "extra.bin", { type: "application/octet-stream" }));
        document.getElementById("drop").dispatchEvent(new DragEvent("drop", { dataTransfer: transfer, bubbles: true, cancelable: true }));""")
    assert b.find("#pack-id").get_attribute("value") == "extra", "a dropped file was not taken"
    b.click("#upload-start")
    b.wait_text("#upload-state", "Done:", 30)
    b.click("#publish")
    b.confirm()
    refusal = b.wait_text("#alert-text", "allowance_exceeded")
    assert f"BADownloadAllowance: the release needs" in refusal and f"the shipped builds allow {MIB}" in refusal and "409" in refusal, refusal
    b.screenshot("allowance-refusal", "#alert")
    assert live_version(b) == 3
    b.check_console(allowed=[r"409"])
    b.click("#alert-actions button")
    b.confirm("may not download this release")
    b.wait_text("#notice", "Published release 4 to production.")
    b.check_console()

    step("removing a live pack says devices delete it")
    b.click('#live-packs button[aria-label="Remove extra"]')
    b.confirm("devices that installed it will delete it")
    b.wait_text("#draft-packs", "removed: devices will delete it")
    b.check_console()

    step("Escape cancels a confirmation")
    b.click("#publish")
    b.wait(lambda: b.find("#confirm").get_attribute("open") is not None)
    b.find("#confirm").send_keys(Keys.ESCAPE)
    b.wait(lambda: b.find("#confirm").get_attribute("open") is None, message="Escape left the dialog open")
    time.sleep(0.3)
    assert live_version(b) == 4

    step("someone else publishes meanwhile: the page's publish is refused, Refresh shows theirs")
    status, _, body = origin.request("PUT", f"/v1/apps/{DEV}/packs/other?release=true", admin, b"from the command line")
    assert status == 201 and json.loads(body)["release"] == 5, body
    b.click("#publish")
    b.confirm()
    b.wait_text("#alert-text", "409 conflict")
    assert live_version(b) == 4
    b.check_console(allowed=[r"409"])
    b.click("#refresh")
    b.wait(lambda: live_version(b) == 5, message="Refresh never showed release 5")
    b.wait_text('#live-packs tr[data-pack="other"]', "other")
    assert not b.driver.find_elements(By.CSS_SELECTOR, '#live-packs tr[data-pack="extra"]'), "the staged removal was not in release 5"

    step("a localized pack: the form's language, normalised, in the draft and the live release")
    origin.cli("apps", "language", DEV, "--primary", "en")
    voice = os.path.join(work, "voice.bin")
    with open(voice, "wb") as f:
        f.write(os.urandom(64 * 1024))
    choose_file(b, voice, "voice-fr-CA")
    b.find("#language").clear()
    b.find("#language").send_keys("fr_ca")
    b.click("#upload-start")
    b.wait_text('#draft-packs tr[data-pack="voice-fr-CA"]', "fr-CA", 60)
    b.click("#publish")
    b.confirm()
    b.wait(lambda: live_version(b) == 6, message="production never showed release 6")
    row = b.wait_text('#live-packs tr[data-pack="voice-fr-CA"]', "fr-CA")
    assert "all" in b.text('#live-packs tr[data-pack="other"]'), "a pack without a language is for all"
    status, _, body = origin.request("GET", f"/v1/apps/{DEV}/releases/6")
    packs = {p["id"]: p for p in json.loads(base64.b64decode(json.loads(body)["payload"]))["packs"]}
    assert packs["voice-fr-CA"].get("language") == "fr-CA" and "language" not in packs["other"], row
    b.check_console()

    step("Info.plist keys and the app configuration, copied")
    b.driver.execute_cdp_cmd("Browser.grantPermissions", {"origin": origin.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    b.wait_text("#plist", "BADownloadAllowance")
    status, _, expected = origin.request("GET", f"/v1/apps/{DEV}/info-plist?channel=production")
    assert b.find("#plist").get_attribute("textContent") == expected.decode(), "the page shows other keys than the origin serves"
    b.click("#plist-copy")
    b.wait_text("#notice", "Info.plist keys copied to the clipboard.")
    clip = b.driver.execute_async_script("navigator.clipboard.readText().then(arguments[0], e => arguments[0]('ERR ' + e))")
    assert clip == expected.decode(), clip[:200]
    b.click("#config-show")
    config = json.loads(b.wait_text("#config", "packKeys"))
    assert config == json.loads(origin.cli("keys", "export", "--app", DEV))
    b.screenshot("info-plist-and-configuration", "#plist-title")
    b.check_console()

    managed(origin, b, args)
    narrower(origin, b, publisher)
    accessible(b)
    log = origin.log()
    for token in (admin, publisher):
        assert token not in log.split("depot sync")[-1], "a token reached the origin's log"


def managed(origin, b, args):
    step("a managed app beside the unmanaged one")
    origin.cli("apps", "trust", DEV, "--issuer", "https://token.actions.githubusercontent.com", "--audience", "assets.example.com",
               "--claim", "repository=studio/levels", "--claim", "ref=refs/heads/main", "--channel", "beta")
    token = origin.cli("apps", "create", MANAGED, "--mode", "managed", "--app-group", "group." + MANAGED) and \
        origin.cli("tokens", "create", "--app", MANAGED, "--role", "admin").strip().split()[-1]
    b.click("#add-app")
    sign_in(b, token)
    b.wait_text("#app-title", MANAGED)
    assert b.find("#install-size").is_displayed(), "a managed app's upload asks no install size"
    choose_file(b, args.archive, "world", "essential")
    b.click("#upload-start")
    b.wait_text("#upload-state", "as uploaded) is staged in the draft", 30)
    b.click("#publish")
    b.confirm()
    b.wait_text("#notice", "Published release 1 to production.")
    options = [o.text for o in Select(b.find("#app-select")).options]
    assert any(DEV in o and "unmanaged" in o for o in options) and any(MANAGED in o and "(managed" in o for o in options), options
    assert "managed (iOS 26+, app group group." + MANAGED in b.text("#app-facts")
    assert "none (depot apps trust)" in b.text("#app-facts"), "the managed app trusts no CI publisher"
    b.wait_text('#live-packs tr[data-pack="world"]', "Apple Archive")
    b.wait_text("#plist", "BAHasManagedAssetPacks")
    b.screenshot("managed-app")
    Select(b.find("#app-select")).select_by_value(DEV)
    b.wait_text("#app-title", DEV)
    assert not b.find("#install-size").is_displayed()
    b.wait_text("#app-facts", "repository=studio/levels: publisher tokens of at most 15 minutes on beta")
    b.check_console()


def narrower(origin, b, publisher):
    step("a publisher token: no rollback, no configuration")
    b.click("#sign-out")
    b.wait(lambda: b.find("#sign-in").is_displayed())
    assert b.driver.execute_script("return sessionStorage.length") == 0
    sign_in(b, publisher)
    b.wait_text("#app-title", DEV)
    assert not b.find("#config-section").is_displayed()
    assert not b.driver.find_elements(By.CSS_SELECTOR, '#history button[aria-label^="Roll production back"]')
    status, _, _ = origin.request("GET", f"/v1/apps/{DEV}/client-configuration", publisher)
    assert status == 403
    b.check_console()


def accessible(b):
    step("every control is named; the keyboard reaches them")
    unnamed = b.driver.execute_script("""
        return [...document.querySelectorAll('input, select, button, progress, textarea')]
          .filter(e => e.offsetParent !== null)
          .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !(e.textContent || '').trim())
          .map(e => e.outerHTML.slice(0, 80));""")
    assert not unnamed, f"controls without a name: {unnamed}"
    reached = set()
    b.driver.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
    for _ in range(60):
        ActionChains(b.driver).send_keys(Keys.TAB).perform()
        reached.add(b.driver.execute_script("return document.activeElement.id || document.activeElement.textContent.trim()"))
    for control in ("file", "pack-id", "policy", "upload-start", "publish-channel", "compare-from", "plist-copy", "refresh"):
        assert control in reached, f"Tab never reached #{control}: {sorted(reached)}"
    b.check_console()


if __name__ == "__main__":
    main("dashboard", run, [("--archive", "an Apple Archive to publish to a managed app")])
