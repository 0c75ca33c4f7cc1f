// The dashboard: sign in with a token, then one app at a time — its live releases, the draft,
// uploads, history and comparisons, a channel's rollout and its figures, Info.plist keys and
// (admins) the app configuration.

import { call, appPath, release, sessions, currentSession, selectApp, signIn, forget, OriginError } from "./api.js";
import { $, el, button, alertError, clearAlert, notify, copy } from "./ui.js";
import { renderApp, renderLivePacks, renderDraft, renderComparison } from "./views.js";
import { ReleaseHistory } from "./history.js";
import { showHistory, markRollout, setUpHistory } from "./history-view.js";
import { showChannels, setUpChannels } from "./channels-view.js";
import { channelOrder } from "./order.js";
import { publish, promote, rollback, removeLive } from "./actions.js";
import { setUpUpload, resetUpload } from "./upload-view.js";
import { setUpRollout, showRollout } from "./rollout-view.js";

// `history`: the app's releases and channels (a ReleaseHistory), its older pages fetched on demand.
// `shown`: the app whose data the page shows; the app selected (what actions act on) is always it
// once a load ends — a switch that fails goes back to it.
const state = { history: null, staging: null, channel: "production", config: null, shown: null };

async function health() {
  const node = $("health");
  try {
    const response = await fetch("/healthz", { cache: "no-store" });
    node.dataset.state = response.ok ? "ok" : "down";
    node.textContent = response.ok ? "The origin is up." : `The origin answered ${response.status}.`;
  } catch {
    node.dataset.state = "down";
    node.textContent = "The origin does not answer.";
  }
}

function showSignIn(adding) {
  $("sign-in").hidden = false;
  $("sign-in-cancel").hidden = !adding;
  $("app-view").hidden = !adding || !currentSession();
  $("token").value = "";
  $("token").focus();
}

function renderNav() {
  const list = sessions();
  $("apps-nav").hidden = list.length === 0;
  const current = currentSession();
  $("app-select").replaceChildren(...list.map((s) => el("option", { value: s.app, selected: s.app === current?.app }, `${s.app} (${s.mode}, ${s.role})`)));
}

/** Loads and shows everything about the selected app. */
async function load() {
  const session = currentSession();
  renderNav();
  if (!session) return showSignIn(false);
  $("sign-in").hidden = true;
  $("app-view").hidden = false;
  try {
    const releases = appPath(session.app, "/releases");
    const [summary, list, staging] = await Promise.all([
      call(appPath(session.app)),
      call(releases).catch((error) => {
        if (error.status === 404) return { app: session.app, channels: {}, releases: [] };
        throw error;
      }),
      call(appPath(session.app, "/staging")),
    ]);
    const history = new ReleaseHistory({ ...list, app: session.app }, releases, (path) => call(path));
    Object.assign(state, { history, staging, shown: session.app });
    renderApp(summary, session);
    for (const node of document.querySelectorAll(".managed-only")) node.hidden = summary.mode !== "managed";
    const channels = channelOrder(history.channels);
    if (!channels.includes(state.channel)) state.channel = channels.includes("production") ? "production" : channels[0] ?? "production";
    const views = showChannels(history, (channel) => [
      button("Show packs", () => { state.channel = channel; showLive(); }, { ariaLabel: `Show the packs of ${channel}` }),
      button("Info.plist keys", () => { $("plist-channel").value = channel; showPlist(); }, { ariaLabel: `Info.plist keys of ${channel}` }),
    ]);
    const shown = showHistory(history, (r) => [
      button("Promote…", () => promote(session.app, r.version, channels, load), { ariaLabel: `Promote release ${r.version}` }),
      session.role === "admin" && !r.live
        ? button("Roll back to this…", () => rollback(session.app, r.version, "production", load), { ariaLabel: `Roll production back to release ${r.version}` })
        : null,
    ]);
    renderDraft(staging);
    await Promise.all([views, shown]);
    $("plist-channel").replaceChildren(...(channels.length ? channels : ["production"]).map((c) => el("option", { value: c }, c)));
    // Managed apps refuse rollouts: the system chooses what every device downloads.
    $("rollout-section").hidden = summary.mode === "managed";
    const rolloutChannel = $("rollout-channel").value;
    $("rollout-channel").replaceChildren(...(channels.length ? channels : ["production"]).map((c) => el("option", { value: c }, c)));
    $("rollout-channel").value = channels.includes(rolloutChannel) ? rolloutChannel : channels.includes("production") ? "production" : channels[0] ?? "production";
    $("plist-channel").value = state.channel;
    $("config-section").hidden = session.role !== "admin";
    $("config").hidden = true;
    $("config-copy").hidden = true;
    const rollout = summary.mode === "managed" ? null : showRollout(session.app, $("rollout-channel").value || "production")
      .then((status) => markRollout($("rollout-channel").value || "production", status));
    if (!rollout) markRollout(null, null);
    await Promise.all([showLive(), showPlist(), rollout]);
  } catch (error) {
    if (error instanceof OriginError && error.status === 401) {
      forget(session.app);
      alertError(new OriginError(401, error.code, `The token for ${session.app} is no longer accepted: ${error.message}. Sign in again.`));
      return load();
    }
    const shown = state.shown;
    if (shown && shown !== session.app && sessions().some((s) => s.app === shown)) {
      // The page still shows the other app: so do the selection and every action.
      selectApp(shown);
      renderNav();
      const why = error instanceof OriginError ? error.text : String(error.message ?? error);
      alertError(new OriginError(0, "switch_failed", `Could not open ${session.app} (${why}). The page still shows ${shown}, and its actions act on ${shown}.`));
      return;
    }
    alertError(error);
  }
}

async function showLive() {
  const session = currentSession();
  const version = state.history?.channels?.[state.channel];
  const manifest = version ? await release(session.app, version) : null;
  renderLivePacks(state.channel, manifest, (pack) => removeLive(session.app, pack, load));
}

async function showPlist() {
  const session = currentSession();
  const channel = $("plist-channel").value || "production";
  if (!state.history?.channels?.[channel]) {
    $("plist").textContent = `Nothing is released on ${channel} yet: the keys follow from a release.`;
    return;
  }
  try {
    $("plist").textContent = await call(appPath(session.app, "/info-plist"), { query: { channel }, accept: "text" });
  } catch (error) {
    $("plist").textContent = error.text;
  }
}

function wire() {
  $("sign-in-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("sign-in-error").textContent = "";
    clearAlert();
    try {
      const session = await signIn($("token").value);
      $("token").value = "";
      resetUpload();
      notify(`Signed in to ${session.app} as ${session.role}.`);
      await load();
      $("main").focus();
    } catch (error) {
      $("sign-in-error").textContent = error.status === 401 || error.status === 403
        ? `The origin refused this token (${error.code}): ${error.message}`
        : (error.text ?? String(error));
    }
  });
  $("sign-in-cancel").addEventListener("click", () => { $("sign-in").hidden = true; $("app-view").hidden = false; });
  $("add-app").addEventListener("click", () => showSignIn(true));
  $("refresh").addEventListener("click", async () => { clearAlert(); await load(); notify("Refreshed."); });
  $("sign-out").addEventListener("click", () => {
    sessionStorage.clear();
    $("app-view").hidden = true;
    notify("Signed out: this tab holds no token now.");
    load();
  });
  $("app-select").addEventListener("change", async () => {
    selectApp($("app-select").value);
    clearAlert();
    resetUpload();
    // Nothing on the page can be used while it still shows the app it is leaving.
    $("app-view").inert = true;
    try {
      await load();
    } finally {
      $("app-view").inert = false;
    }
  });
  $("publish-form").addEventListener("submit", (event) => {
    event.preventDefault();
    publish(currentSession().app, $("publish-channel").value.trim() || "production", state.staging, state.history?.channels ?? {}, load);
  });
  $("compare-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const app = currentSession().app;
    try {
      const [from, to] = await Promise.all([release(app, $("compare-from").value), release(app, $("compare-to").value)]);
      renderComparison(from, to);
    } catch (error) {
      alertError(error);
    }
  });
  $("plist-channel").addEventListener("change", showPlist);
  $("plist-copy").addEventListener("click", () => copy($("plist").textContent, "Info.plist keys"));
  $("config-show").addEventListener("click", async () => {
    try {
      state.config = await call(appPath(currentSession().app, "/client-configuration"), { accept: "text" });
      $("config").textContent = state.config;
      $("config").hidden = false;
      $("config-copy").hidden = false;
    } catch (error) {
      alertError(error);
    }
  });
  $("config-copy").addEventListener("click", () => copy(state.config ?? "", "App configuration"));
  setUpUpload(currentSession, load);
  setUpChannels(alertError);
  setUpHistory(alertError);
  setUpRollout(() => currentSession().app, () => $("rollout-channel").value || "production", load);
}

wire();
health();
load();
