"""An app that has lived for years, made through the publisher HTTP API as a content team makes
it: a tiny pack staged (PUT …/packs/level) and published (POST …/releases) once per release,
channels c1…cN promoted to releases spread over the history (POST …/channels/cK?release=V,
several channels to a release so that ties are ordered by name), then a rollout on production
of a release published to beta. Every answer is checked."""

import json
import os
import re
import time

DEV = "com.example.dev"
RELEASES = "/v1/apps/" + DEV + "/releases"


def expect(answer, *statuses):
    status, _, body = answer
    assert status in statuses, f"{status}: {body[:300]!r}"
    return json.loads(body) if body else None


def channel_release(k, releases):
    """The release channel cK serves: 32 releases spread from the newest to the oldest, each
    served by three or four channels (c5 and c37 share one: name order decides between them)."""
    step = max(1, releases // 32)
    return releases - step * ((k * 7) % 32)


def build(origin, releases, channels):
    """Publishes `releases` releases and `channels` channels; returns the seconds it took and
    the rollout's candidate."""
    admin = origin.token("DEPOT_ADMIN_TOKEN")
    started = time.monotonic()
    for n in range(1, releases + 1):
        body = f"level {n} ".encode() + os.urandom(32)
        expect(origin.request("PUT", f"/v1/apps/{DEV}/packs/level", admin, body, {"Content-Type": "application/octet-stream"}), 202)
        answer = expect(origin.request("POST", f"{RELEASES}?base={n - 1}" if n > 1 else RELEASES, admin), 201)
        assert answer["release"] == n, answer
    for k in range(1, channels + 1):
        expect(origin.request("POST", f"/v1/apps/{DEV}/channels/c{k}?release={channel_release(k, releases)}", admin), 201)
    # A candidate on beta, offered to a tenth of production's devices: production's next release.
    expect(origin.request("PUT", f"/v1/apps/{DEV}/packs/level", admin, b"the candidate " + os.urandom(32)), 202)
    candidate = expect(origin.request("POST", f"{RELEASES}?channel=beta", admin), 201)["release"]
    expect(origin.request("POST", f"/v1/apps/{DEV}/rollouts/production/start?release={candidate}&fraction=0.1", admin), 201)
    return time.monotonic() - started, candidate


def everything(origin):
    """Every release summary (newest first) and the channels, as the origin lists them: one
    answer from an origin that lists all, or its pages followed by `next`."""
    answer = expect(origin.request("GET", RELEASES + "?limit=500"), 200)
    listed, paged = list(answer["releases"]), "total" in answer
    while answer.get("next"):
        answer = expect(origin.request("GET", answer["next"]), 200)
        listed += answer["releases"]
    listed.sort(key=lambda r: -r["version"])
    assert not paged or answer["total"] == len(listed), (answer["total"], len(listed))
    return listed, answer["channels"], paged


def natural(name):
    """c2 before c10: digit runs compare by value."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


def channel_order(channels):
    """Production, then the channels serving the newest releases, ties in natural name order."""
    return sorted(channels, key=lambda c: (c != "production", -channels[c], natural(c), c))

