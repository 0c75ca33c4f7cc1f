#!/usr/bin/env python3
"""A guarded rollout from the dashboard in real Chromium against the real origin (issue 34):
start a rollout from the page (confirmed), devices sync and report (`depot sync --report`),
their reports appear in the adoption chart and the keys their builds hold in the keys list
(issue 52), a refusal is shown verbatim, halt it (confirmed);
screenshots at 1280×800 and 390×844; no console error.

    rollout_test.py --depot .build/debug/depot --public Public --artifacts DIR
"""

import json
import os
import subprocess

from selenium.webdriver.common.by import By

from harness import main, sign_in

DEV = "com.example.dev"


def step(name):
    print(f"rollout: {name}", flush=True)


def publish(origin, token, pack, body, channel):
    status, _, answer = origin.request("PUT", f"/v1/apps/{DEV}/packs/{pack}?release=true&channel={channel}", token, body,
                                       {"Content-Type": "application/octet-stream"})
    assert status == 201, (status, answer)


def run(origin, b, work, args):
    publisher = origin.token("DEPOT_TOKEN")
    publish(origin, publisher, "level", os.urandom(20_000), "production")
    publish(origin, publisher, "level", os.urandom(21_000), "beta")
    config = os.path.join(work, "client.json")
    with open(config, "w") as f:
        f.write(origin.cli("keys", "export", "--app", DEV))

    def devices(first, count, report=True):
        taken = 0
        for n in range(first, first + count):
            result = subprocess.run([args.depot, "sync", "--server", origin.url, "--app", DEV, "--config", config, "--dest",
                                     os.path.join(work, f"device-{n}"), "--quiet", "--report"], capture_output=True, text=True, timeout=60)
            assert result.returncode == 0 and (not report or "reported 1 packs" in result.stderr), result.stdout + result.stderr
            taken += os.path.getsize(os.path.join(work, f"device-{n}", "packs", "level")) == 21_000
        return taken

    step("sign in; no rollout yet")
    b.driver.get(origin.url + "/")
    b.wait(lambda: b.find("#sign-in").is_displayed(), message="no sign-in form")
    sign_in(b, publisher)
    b.wait_text("#app-title", DEV)
    b.wait_text("#rollout-state", "No rollout on production")
    b.wait(lambda: "No reports yet" in b.text("#adoption-chart"), message="the empty chart")

    step("start a rollout of release 2 to 50 % from the page, confirmed")
    release, percent = b.find("#rollout-release"), b.find("#rollout-percent")
    release.clear()
    release.send_keys("2")
    percent.clear()
    percent.send_keys("50")
    b.find("#rollout-rate").send_keys("30")
    b.find("#rollout-min").send_keys("5")
    b.click("#rollout-start")
    said = b.confirm("Offer release 2 to 50 % of production's devices")
    assert "halts itself if more than 30 % of the candidate's reports are failures, once 5 are in" in said, said
    b.wait_text("#rollout-state", "running, 50 % of devices")
    b.wait_text("#notice", "Rollout of release 2 started")
    assert "halts itself above 30 % failures once 5 reports are in" in b.text("#rollout-facts")

    step("devices sync and report; the chart shows them")
    taken = devices(0, 12)
    b.click("#refresh")
    b.wait(lambda: b.driver.find_elements(By.CSS_SELECTOR, "#adoption-chart polyline"), message="no line in the adoption chart")
    totals = {line.get_attribute("data-name"): int(line.get_attribute("data-total")) for line in b.driver.find_elements(By.CSS_SELECTOR, "#adoption-chart polyline")}
    assert sum(totals.values()) == 12 and totals.get("level r2", 0) == taken, totals
    b.wait_text("#rollout-facts", f"Reports about the candidate\n{taken}, failures 0")
    assert "No failures reported" in b.text("#failure-chart")
    # The keys the reporting builds hold (issue 52): every device has the current pack key and the
    # manifest key; a staged key, which none of them was exported with, is lacking in all 12.
    with open(config) as f:
        current = next(iter(json.load(f)["packKeys"]))
    staged = origin.cli("keys", "rotate", "--app", DEV).split()[2]
    b.click("#refresh")
    b.wait(lambda: f"key {staged} (staged): 12 of 12 reports in 14 days come from builds without it" in b.text("#fleet-keys"),
           message="the staged key's line")
    keys = b.text("#fleet-keys")
    assert f"key {current} (current): 0 of 12 reports in 14 days come from builds without it" in keys, keys
    assert "(newest): 0 of 12 reports in 14 days come from builds that do not pin it" in keys, keys
    assert b.find(f'#fleet-keys li[data-key="{staged}"]').get_attribute("data-without") == "12"
    b.screenshot("rollout-reports", "#rollout-title")
    b.check_console()

    step("a refusal is shown as the origin wrote it")
    field = b.find("#rollout-advance-to")
    field.clear()
    field.send_keys("20")
    b.click("#rollout-advance")
    b.confirm("release 2 (running, 50 % of devices) to 20 % of production's devices")
    alert = b.wait_text("#alert-text", "409 fraction_not_raised")
    assert "advancing only raises it" in alert, alert
    b.check_console(allowed=[r"409"])

    step("halt it, confirmed")
    b.click("#rollout-halt")
    b.confirm("go back to the current release at their next event")
    b.wait_text("#rollout-state", "halted, 0 % of devices")
    assert b.find("#rollout-state").get_attribute("data-state") == "halted"
    assert "Halted by\ntoken " in b.text("#rollout-facts"), b.text("#rollout-facts")
    assert b.find("#rollout-halt").get_attribute("disabled") is not None
    b.screenshot("rollout-halted", "#rollout-title")
    # Devices that took the candidate go back at their next sync.
    assert devices(0, 12, report=False) == 0
    b.check_console()


if __name__ == "__main__":
    main("rollout", run, ())
