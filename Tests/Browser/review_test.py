#!/usr/bin/env python3
"""Issue 50's dashboard findings in real Chromium against the real origin, each as a person
meets it: the token field is no password field a browser offers to save; a rollout the guard
halted while the admin's dialog was open is refused (409) and the page then shows the halt, and
keeps it visible after a resumption; a Complete names the release it completes; a draft
changed underneath is not published unseen (409); tags and trust-rule claims are isolated
(<bdi>) and bidirectional controls refused; a publisher's bytes that are valid JavaScript do
not run as a script on the dashboard's origin; a failed app switch leaves page, selection and
actions on the same app. No console error but those each step expects.

    review_test.py --depot .build/debug/depot --public Public --artifacts DIR

DEPOT_REVIEW_STEPS=rollout,draft (for instance) runs only those steps (of token, rollout, draft,
bidi, script, switch).
"""

import json
import os
import urllib.parse

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from harness import main, sign_in

DEV, MANAGED = "com.example.dev", "com.example.managed"


def step(name):
    print(f"review: {name}", flush=True)


def put(origin, token, app, pack, body, query=""):
    return origin.request("PUT", f"/v1/apps/{app}/packs/{pack}{query}", token, body, {"Content-Type": "application/octet-stream"})


def published(origin, token, app, pack, body, query="?release=true", expect=201):
    status, _, answer = put(origin, token, app, pack, body, query)
    assert status == expect, (status, answer)
    return json.loads(answer)


def api(origin, token, method, path, expect=200):
    status, _, answer = origin.request(method, path, token)
    assert status == expect, (method, path, status, answer)
    return json.loads(answer) if answer else None


def dialog(b):
    """Waits for the confirmation dialog and returns its text (left open)."""
    b.wait(lambda: b.find("#confirm").get_attribute("open") is not None, 10, "no confirmation was asked")
    return b.text("#confirm-text")


def close_dialog(b, button="#confirm-ok"):
    b.click(button)
    b.wait(lambda: b.find("#confirm").get_attribute("open") is None, 10, "the dialog stayed open")


def token_field(origin, b, admin):
    step("the token field is masked but no password field: nothing for the browser to offer to save")
    b.driver.get(origin.url + "/")
    b.wait(lambda: b.find("#sign-in").is_displayed(), message="no sign-in form")
    field = b.find("#token")
    assert field.get_attribute("type") == "text", field.get_attribute("outerHTML")
    assert field.get_attribute("autocomplete") == "off", field.get_attribute("outerHTML")
    assert b.driver.execute_script("return document.querySelectorAll('input[type=password]').length") == 0
    assert b.driver.execute_script("return getComputedStyle(arguments[0]).webkitTextSecurity", field) == "disc", "the token is not shown as dots"
    sign_in(b, admin, keyboard=True)
    b.wait_text("#app-title", DEV)
    assert b.find("#token").get_attribute("value") == "", "the field keeps the token"
    b.check_console()


def rollout(origin, b, publisher, admin):
    step("rollout: the guard halts it while the admin's Advance dialog is open; the Advance is refused (409) and the page shows the halt")
    published(origin, publisher, DEV, "level", os.urandom(20_000))
    published(origin, publisher, DEV, "level", os.urandom(21_000), "?release=true&channel=beta")
    rollouts = f"/v1/apps/{DEV}/rollouts/production"
    api(origin, publisher, "POST", rollouts + "/start?release=2&fraction=0.1&haltOnFailureRate=0.3&minReports=3", 201)
    b.click("#refresh")
    b.wait_text("#rollout-state", "running, 10 % of devices")
    field = b.find("#rollout-advance-to")
    field.clear()
    field.send_keys("50")
    b.click("#rollout-advance")
    said = dialog(b)
    assert "release 2 (running, 10 % of devices" in said, said
    # Underneath: anonymous failure reports about the candidate trip the guard.
    status = api(origin, admin, "GET", rollouts)
    report = json.dumps({"channel": "production", "release": status["manifest"],
                         "packs": [{"id": "level", "revision": status["candidates"][0]["revision"], "outcome": "failed", "error": "integrity", "bytes": 0}]}).encode()
    for _ in range(3):
        code, _, answer = origin.request("POST", f"/v1/apps/{DEV}/reports", None, report, {"Content-Type": "application/json"})
        assert code == 202, (code, answer)
    b.wait(lambda: api(origin, admin, "GET", rollouts)["state"] == "halted", 20, "the guard never halted the rollout")
    close_dialog(b)
    alert = b.wait_text("#alert-text", "409 rollout_changed")
    assert "automatic" in alert and "3 failures in 3 reports" in alert, alert
    b.wait_text("#rollout-state", "halted, 0 % of devices")
    facts = b.wait_text("#rollout-facts", "Halted by\nautomatic: 3 failures in 3 reports (100 %)")
    assert "halt, 0 %, by automatic: 3 failures in 3 reports" in facts, facts
    after = api(origin, admin, "GET", rollouts)
    assert after["state"] == "halted" and after["fraction"] == 0, after
    b.screenshot("review-rollout-refused", "#rollout-title")
    b.check_console(allowed=[r"409"])

    step("rollout: the Advance dialog names the halt; resumed, the page keeps it visible")
    b.click("#refresh")
    field = b.find("#rollout-advance-to")
    field.clear()
    field.send_keys("50")
    b.click("#rollout-advance")
    said = dialog(b)
    assert "release 2 (halted, 0 % of devices; halted by automatic: 3 failures in 3 reports (100 %))" in said and "This resumes it." in said, said
    close_dialog(b)
    b.wait_text("#rollout-state", "running, 50 % of devices")
    facts = b.wait_text("#rollout-facts", "Resumed after a halt\nhalted by automatic: 3 failures in 3 reports (100 %)")
    assert "advance, 50 %, by token " in facts, facts
    b.check_console()

    step("rollout: the guard halts it again under the page; Halt says there is nothing to halt, with who halted it")
    status = api(origin, admin, "GET", rollouts)
    report = json.dumps({"channel": "production", "release": status["manifest"],
                         "packs": [{"id": "level", "revision": status["candidates"][0]["revision"], "outcome": "failed", "error": "integrity", "bytes": 0}]}).encode()
    for _ in range(3):
        code, _, answer = origin.request("POST", f"/v1/apps/{DEV}/reports", None, report, {"Content-Type": "application/json"})
        assert code == 202, (code, answer)
    b.wait(lambda: api(origin, admin, "GET", rollouts)["state"] == "halted", 20, "the guard never halted the rollout again")
    assert "running, 50 %" in b.text("#rollout-state"), "the page was not to know yet"
    b.click("#rollout-halt")
    notice = b.wait_text("#notice", "Nothing to halt")
    assert "halted by automatic: 3 failures in 3 reports" in notice, notice
    assert b.find("#confirm").get_attribute("open") is None, "a dialog asked to halt a halted rollout"
    b.wait_text("#rollout-state", "halted, 0 % of devices")
    b.check_console()

    step("rollout: a publisher starts another release over the halted one; the admin's Complete names that release")
    third = published(origin, publisher, DEV, "level", os.urandom(22_000), "?release=true&channel=gamma")["release"]
    api(origin, publisher, "POST", rollouts + f"/start?release={third}&fraction=0.2", 201)
    assert "release 2 on production: halted" in b.text("#rollout-state"), "the page was not to know yet"
    b.click("#rollout-complete")
    said = dialog(b)
    assert f"release {third} (running, 20 % of devices" in said and f"Release {third}'s candidate" in said, said
    b.wait_text("#rollout-state", f"Rollout of release {third} on production: running, 20 %")
    close_dialog(b)
    b.wait_text("#notice", f"Completed: production serves release {third}'s packs")
    b.check_console()


def draft(origin, b, publisher):
    step("draft: a removal staged after the page loaded is not published unseen (409 draft_changed)")
    if "production" not in api(origin, publisher, "GET", f"/v1/apps/{DEV}/releases")["channels"]:
        published(origin, publisher, DEV, "level", os.urandom(20_000))
    live = api(origin, publisher, "GET", f"/v1/apps/{DEV}/releases")["channels"]["production"]
    published(origin, publisher, DEV, "extra", os.urandom(3_000), "", expect=202)
    b.click("#refresh")
    b.wait_text('#draft-packs tr[data-pack="extra"]', "new or changed")
    api(origin, publisher, "DELETE", f"/v1/apps/{DEV}/packs/level?removeLive=true")
    b.click("#publish")
    said = dialog(b)
    assert "delete" not in said, said
    close_dialog(b)
    b.wait_text("#alert-text", "409 draft_changed")
    assert api(origin, publisher, "GET", f"/v1/apps/{DEV}/releases")["channels"]["production"] == live, "something was published"
    b.wait_text('#draft-packs tr[data-pack="level"]', "removed")
    b.check_console(allowed=[r"409"])
    b.click("#publish")
    said = dialog(b)
    assert "Devices will delete level" in said, said
    close_dialog(b)
    b.wait_text("#notice", "Published release")
    b.check_console()


def bidi(origin, b, publisher):
    step("bidi: a tag with a bidirectional control is refused; right-to-left tags and claims are isolated in <bdi>")
    status, _, answer = put(origin, publisher, DEV, "notes", b"n" * 500, "?release=true&tag=" + urllib.parse.quote("ma\u202ein"))
    assert status == 400 and b"U+202E" in answer, (status, answer)
    published(origin, publisher, DEV, "notes", b"n" * 500, "?release=true&tag=intro&tag=" + urllib.parse.quote("مقدمة"))
    origin.cli("apps", "trust", DEV, "--issuer", "https://token.actions.githubusercontent.com", "--audience", "assets.example.com",
               "--claim", "repository=studio/مستوى", "--claim", "ref=refs/heads/main")
    b.click("#refresh")
    b.wait(lambda: b.driver.find_elements(By.CSS_SELECTOR, '#live-packs tr[data-pack="notes"]'), message="no notes pack")
    isolated = [e.text for e in b.driver.find_elements(By.CSS_SELECTOR, '#live-packs tr[data-pack="notes"] bdi')]
    assert isolated == ["intro", "مقدمة"], isolated
    claims = [e.text for e in b.driver.find_elements(By.CSS_SELECTOR, "#app-facts bdi")]
    assert "studio/مستوى" in claims and "refs/heads/main" in claims, claims
    b.check_console()


def script_blob(origin, b):
    step("a publisher's bytes that are valid JavaScript do not run as a script on the dashboard's origin")
    origin.cli("apps", "create", MANAGED, "--mode", "managed", "--app-group", "group." + MANAGED)
    managed = origin.cli("tokens", "create", "--app", MANAGED, "--role", "admin").strip().split()[-1]
    # A compressed Apple Archive's magic (`pbze`) is all the origin checks; the rest runs as JavaScript.
    payload = b"pbze=1; window.__depotRan = (window.__depotRan || 0) + 1;\n"
    sha = published(origin, managed, MANAGED, "evil", payload, "?release=true&installSize=100")["pack"]["sha256"]
    blob = f"/v1/apps/{MANAGED}/blobs/{sha}"
    status, headers, body = origin.request("GET", blob)
    assert status == 200 and body == payload, (status, body)
    ran = b.driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const script = document.createElement("script");
        script.src = arguments[0];
        script.onload = () => done(["load", window.__depotRan ?? null]);
        script.onerror = () => done(["error", window.__depotRan ?? null]);
        document.head.append(script);""", blob)
    assert ran == ["error", None], f"the blob ran as a script: {ran}"
    b.check_console(allowed=[r"Refused to execute script .* MIME type"])
    return managed


def app_switch(origin, b, managed):
    step("a failed app switch leaves the page, the selection and the actions on the app shown")
    b.click("#add-app")
    sign_in(b, managed)
    b.wait_text("#app-title", MANAGED)
    Select(b.find("#app-select")).select_by_value(DEV)
    b.wait_text("#app-title", DEV)
    origin.kill()
    try:
        Select(b.find("#app-select")).select_by_value(MANAGED)
        alert = b.wait_text("#alert-text", f"Could not open {MANAGED}")
        assert f"still shows {DEV}" in alert, alert
        assert Select(b.find("#app-select")).first_selected_option.get_attribute("value") == DEV
        assert b.driver.execute_script("return sessionStorage.getItem('depot.current')") == DEV
        assert b.text("#app-title") == DEV
        assert b.driver.execute_script("return document.getElementById('app-view').inert") is False, "the page stayed unusable"
    finally:
        origin.start()
    b.click("#refresh")
    b.wait_text("#notice", "Refreshed.")
    assert b.text("#app-title") == DEV
    b.check_console(allowed=[r"ERR_CONNECTION_REFUSED", r"Failed to (load|fetch)"])


def run(origin, b, work, args):
    admin, publisher = origin.token("DEPOT_ADMIN_TOKEN"), origin.token("DEPOT_TOKEN")
    only = [s for s in os.environ.get("DEPOT_REVIEW_STEPS", "").split(",") if s]
    wanted = lambda name: not only or name in only
    if wanted("token"):
        token_field(origin, b, admin)
    else:
        b.driver.get(origin.url + "/")
        b.wait(lambda: b.find("#sign-in").is_displayed(), message="no sign-in form")
        sign_in(b, admin, keyboard=True)
        b.wait_text("#app-title", DEV)
    if wanted("rollout"):
        rollout(origin, b, publisher, admin)
    if wanted("draft"):
        draft(origin, b, publisher)
    if wanted("bidi"):
        bidi(origin, b, publisher)
    if wanted("script") or wanted("switch"):
        managed = script_blob(origin, b) if wanted("script") else None
        if wanted("switch"):
            if managed is None:
                origin.cli("apps", "create", MANAGED, "--mode", "managed", "--app-group", "group." + MANAGED)
                managed = origin.cli("tokens", "create", "--app", MANAGED, "--role", "admin").strip().split()[-1]
            app_switch(origin, b, managed)


if __name__ == "__main__":
    main("review", run, ())
