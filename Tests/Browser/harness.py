"""What the dashboard's browser test starts and drives: the real `depot serve` (stopped and
restarted on the same port and data folder), real Chromium through chromedriver, the browser's
console, and screenshots at the two sizes the dashboard is laid out for."""

import argparse
import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

SIZES = {"desktop": (1280, 800, False), "phone": (390, 844, True)}


def main(name, run, extra_arguments=()):
    """Parses --depot, --public, --artifacts (and `extra_arguments`, (flag, help) pairs), starts
    the origin and Chromium, runs `run(origin, browser, work, args)`, and on a failure keeps a
    screenshot, the page and the origin's log; prints "NAME: passed" at the end."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--depot", required=True)
    parser.add_argument("--public", required=True)
    parser.add_argument("--artifacts", required=True)
    for flag, text in extra_arguments:
        parser.add_argument(flag, required=True, help=text)
    args = parser.parse_args()
    os.makedirs(args.artifacts, exist_ok=True)
    work = tempfile.mkdtemp(prefix=f"depot-{name}-")
    origin = Origin(args.depot, os.path.join(work, "data"), os.path.abspath(args.public), work).start()
    browser = None
    try:
        browser = Browser(args.artifacts)
        run(origin, browser, work, args)
    except Exception:
        if browser:
            failure = "failure" if name == "dashboard" else f"{name}-failure"
            browser.driver.save_screenshot(os.path.join(args.artifacts, f"{failure}.png"))
            with open(os.path.join(args.artifacts, f"{failure}.html"), "w") as f:
                f.write(browser.driver.page_source)
        print(origin.log()[-4000:], file=sys.stderr)
        raise
    finally:
        if browser:
            browser.quit()
        origin.stop()
    print(f"{name}: passed; screenshots in {args.artifacts}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Origin:
    """The real server on a fixed port, so that the page survives a restart."""

    def __init__(self, depot, data, public, work):
        self.depot, self.data, self.public, self.work = depot, data, public, work
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = None
        self.starts = 0
        self.banner = ""

    def start(self):
        self.starts += 1
        log = open(os.path.join(self.work, f"origin-{self.starts}.log"), "w")
        # Patch releases (made in the background) would move the release numbers the test counts.
        env = dict(os.environ, DEPOT_DATA=self.data, DEPOT_LISTEN=f"127.0.0.1:{self.port}", DEPOT_PUBLIC_DIR=self.public, DEPOT_PATCH_DEPTH="0")
        self.process = subprocess.Popen([self.depot, "serve"], stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError("the origin did not start: " + self.log())
        time.sleep(0.2)
        if self.starts == 1:
            self.banner = self.log()
        return self

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self):
        text = ""
        for n in range(1, self.starts + 1):
            with open(os.path.join(self.work, f"origin-{n}.log")) as f:
                text += f.read()
        return text

    def token(self, name):
        match = re.search(rf"export {name}=(\S+)", self.banner)
        assert match, f"no {name} in the banner: {self.banner}"
        return match.group(1)

    def cli(self, *args):
        result = subprocess.run([self.depot, *args, "--data", self.data], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"depot {' '.join(args)} failed: {result.stderr}"
        return result.stdout

    def request(self, method, path, token=None, body=None, headers=None):
        request = urllib.request.Request(self.url + path, data=body, method=method, headers=dict(headers or {}))
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()


class Browser:
    """Chromium with its console recorded; every SEVERE entry fails the test unless the step
    that provoked it said which ones to expect."""

    def __init__(self, artifacts):
        self.artifacts = artifacts
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800", "--disable-gpu"]:
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        self.driver.set_script_timeout(30)
        self.console = []
        self.size("desktop")

    def size(self, name):
        width, height, mobile = SIZES[name]
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})

    def throttle(self, bytes_per_second):
        self.driver.execute_cdp_cmd("Network.enable", {})
        self.driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
            "offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": bytes_per_second or -1})

    def check_console(self, allowed=()):
        """Fails on console errors other than the allowed patterns; returns those seen."""
        entries = self.driver.get_log("browser")
        self.console += entries
        severe = [e["message"] for e in entries if e["level"] == "SEVERE"]
        unexpected = [m for m in severe if not any(re.search(p, m) for p in allowed)]
        assert not unexpected, f"console errors: {unexpected}"
        return severe

    def screenshot(self, name, scroll_to=None):
        """The screen at both sizes, scrolled to an element; the page must not scroll sideways."""
        for size in SIZES:
            self.size(size)
            if scroll_to:
                self.driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", self.find(scroll_to))
            time.sleep(0.2)
            width = SIZES[size][0]
            laid_out = self.driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth, window.visualViewport.scale]")
            assert laid_out[0] <= width and laid_out[1:] == [width, 1], f"{name} at {size}: laid out {laid_out[0]}px wide in {laid_out[1]}px at scale {laid_out[2]}, not {width}px"

            self.driver.save_screenshot(os.path.join(self.artifacts, f"{name}-{size}.png"))
        self.size("desktop")

    def find(self, css):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def text(self, css):
        return self.find(css).text

    def wait(self, condition, timeout=20, message=""):
        # The page re-renders tables as data arrives: an element found a moment ago may be gone.
        ignored = (NoSuchElementException, StaleElementReferenceException)
        return WebDriverWait(self.driver, timeout, poll_frequency=0.05, ignored_exceptions=ignored).until(lambda d: condition(), message)

    def wait_text(self, css, needle, timeout=20):
        """Waits for an element (which may not exist yet) to show `needle`; returns its text."""
        try:
            self.wait(lambda: needle in self.text(css), timeout)
        except Exception:
            shown = [e.text for e in self.driver.find_elements(By.CSS_SELECTOR, css)]
            raise AssertionError(f"{css} never showed {needle!r}; it shows {shown!r}") from None
        return self.text(css)

    def click(self, css):
        self.find(css).click()

    def confirm(self, expect=None):
        """Accepts the confirmation dialog (checking what it says) and returns its text."""
        self.wait(lambda: self.find("#confirm").get_attribute("open") is not None, 10, "no confirmation was asked")
        text = self.text("#confirm-text")
        if expect:
            assert expect in text, f"the confirmation says {text!r}, not {expect!r}"
        self.click("#confirm-ok")
        self.wait(lambda: self.find("#confirm").get_attribute("open") is None, 10, "the dialog stayed open")
        return text

    def quit(self):
        self.driver.quit()


# The dashboard's controls, as a person uses them.

def sign_in(b, token, keyboard=False):
    field = b.find("#token")
    field.clear()
    field.send_keys(token)
    if keyboard:
        field.send_keys(Keys.ENTER)
    else:
        b.click("#sign-in-form button[type=submit]")


def choose_file(b, path, pack=None, policy="prefetch"):
    b.find("#file").send_keys(path)
    if pack is not None:
        b.find("#pack-id").clear()
        b.find("#pack-id").send_keys(pack)
        Select(b.find("#policy")).select_by_value(policy)


def progress(b):
    return int(b.find("#upload-progress").get_attribute("value"))


def live_version(b, channel="production"):
    cells = b.driver.find_elements(By.CSS_SELECTOR, f'#channels tr[data-channel="{channel}"] td')
    return int(cells[0].text) if cells else None


def sha256_hex(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()

