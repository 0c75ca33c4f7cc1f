// The release history: a window of rows, newest first, with Newest / Newer / Older; a search box
// (a release number, or a channel's name: the releases the channels whose name holds it serve);
// the comparison's selects over the rows shown (and the releases already chosen); the mark of
// the rollout's candidate, with a button that finds it.

import { $, el, labelCells } from "./ui.js";
import { date } from "./format.js";
import { channelOrder } from "./order.js";

/** The rows shown at once. */
export const HISTORY_ROWS = 20;
// A release served by more channels names the first ones and counts the rest.
const NAMED_CHANNELS = 6;

const view = { history: null, app: null, actions: null, offset: 0, rows: [], count: 0, matched: new Set(), rollout: null, ticket: 0 };

/** Shows `history` (a ReleaseHistory); `actions(release)` gives each row's buttons. Keeps the
 * search and the window when it is the same app again (a refresh after an action). */
export function showHistory(history, actions) {
  if (view.app !== history.app) {
    Object.assign(view, { app: history.app, offset: 0, rollout: null });
    $("history-search").value = "";
    for (const id of ["compare-from", "compare-to"]) $(id).replaceChildren();
  }
  Object.assign(view, { history, actions });
  return render();
}

/** Marks the release a channel's rollout offers (`status` from …/fleet), or clears the mark. */
export function markRollout(channel, status) {
  view.rollout = status && status.state !== "completed" ? { channel, ...status } : null;
  const button = $("history-rollout");
  button.hidden = !view.rollout;
  if (view.rollout) button.textContent = `Rollout: release ${view.rollout.release}`;
  if (view.history) draw();
}

/** What the search box asks for: the versions to show and how to say what they are. */
function search(text, history) {
  if (/^\d+$/.test(text)) {
    const version = Number(text);
    const named = channelOrder(history.channels).filter((c) => c === text);
    return { versions: [version, ...named.map((c) => history.channels[c])], what: `release ${version}`, channels: named };
  }
  const needle = text.toLowerCase();
  const channels = channelOrder(history.channels).filter((c) => c.toLowerCase().includes(needle));
  return { versions: channels.map((c) => history.channels[c]), what: `channels named like “${text}”`, channels };
}

async function render() {
  const ticket = ++view.ticket;
  const { history } = view;
  const text = $("history-search").value.trim();
  let rows, count, matched = new Set(), said;
  if (!text) {
    await history.ensure(view.offset + HISTORY_ROWS);
    // Once every page is in, the count is what came (releases may have come or gone meanwhile).
    count = history.next ? history.total : history.loaded.length;
    if (view.offset >= count) view.offset = Math.max(0, Math.ceil(count / HISTORY_ROWS) - 1) * HISTORY_ROWS;
    rows = history.loaded.slice(view.offset, view.offset + HISTORY_ROWS);
    said = count > HISTORY_ROWS ? `${view.offset + 1}–${view.offset + rows.length} of ${count} releases, newest first` : "";
  } else {
    const asked = search(text, history);
    const found = await history.summaries(asked.versions);
    const all = [...found.values()].sort((a, b) => b.version - a.version);
    count = all.length;
    rows = all.slice(view.offset, view.offset + HISTORY_ROWS);
    matched = new Set(asked.channels);
    said = !count ? `Nothing found for ${asked.what}.`
      : count > HISTORY_ROWS ? `${view.offset + 1}–${view.offset + rows.length} of ${count} releases found for ${asked.what}`
        : `${count === 1 ? "1 release" : `${count} releases`} found for ${asked.what}`;
  }
  if (ticket !== view.ticket) return; // a later search or page superseded this one
  Object.assign(view, { rows, count, matched });
  $("history-range").textContent = said;
  $("history-pager").hidden = count <= HISTORY_ROWS;
  $("history-newest").disabled = $("history-newer").disabled = view.offset === 0;
  $("history-older").disabled = view.offset + HISTORY_ROWS >= count;
  draw();
  compareChoices(history);
}

function channelsCell(release) {
  const names = channelOrder(Object.fromEntries(release.channels.map((c) => [c, release.version])));
  const first = [...names.filter((c) => view.matched.has(c)), ...names.filter((c) => !view.matched.has(c))];
  const shown = first.slice(0, NAMED_CHANNELS).join(", ") || "—";
  const more = first.length > NAMED_CHANNELS ? ` and ${first.length - NAMED_CHANNELS} more` : "";
  const rollout = view.rollout?.release === release.version
    ? el("strong", { className: "badge", dataRollout: view.rollout.state },
      `rollout on ${view.rollout.channel}: ${view.rollout.state}, ${Math.round(view.rollout.fraction * 10000) / 100} %`)
    : null;
  return el("td", { title: more ? names.join(", ") : "" }, shown + more, rollout ? " " : null, rollout);
}

function draw() {
  const body = $("history").tBodies[0];
  body.replaceChildren(...view.rows.map((release) => el("tr", { dataRelease: release.version },
    el("th", { scope: "row" }, release.version), el("td", {}, date(release.publishedAt)), el("td", { className: "num" }, release.packs),
    channelsCell(release), el("td", { className: "row-actions" }, view.actions(release)))));
  if (!view.rows.length) {
    const text = $("history-search").value.trim() ? $("history-range").textContent : "Nothing is released yet.";
    body.replaceChildren(el("tr", {}, el("td", { colSpan: 5 }, text)));
  }
  labelCells($("history"));
}

/** The selects hold the rows shown plus what each already holds, so two releases pages apart
 * can be compared: choose one, page or search, choose the other. */
function compareChoices(history) {
  const versions = new Set(view.rows.map((r) => r.version));
  const defaults = { "compare-from": history.loaded[1]?.version ?? history.newest, "compare-to": history.newest };
  for (const [id, fallback] of Object.entries(defaults)) {
    const select = $(id);
    const chosen = select.value ? Number(select.value) : fallback;
    const options = new Set([...versions, chosen].filter((v) => v !== null && v !== undefined));
    select.replaceChildren(...[...options].sort((a, b) => b - a).map((v) => el("option", { value: v }, `release ${v}`)));
    if (chosen !== null && chosen !== undefined) select.value = String(chosen);
  }
}

export function setUpHistory(alertError) {
  const rerender = () => render().catch(alertError);
  const page = (offset) => () => { view.offset = Math.max(0, offset()); rerender(); };
  $("history-newest").addEventListener("click", page(() => 0));
  $("history-newer").addEventListener("click", page(() => view.offset - HISTORY_ROWS));
  $("history-older").addEventListener("click", page(() => view.offset + HISTORY_ROWS));
  let pending = null;
  $("history-search").addEventListener("input", () => {
    clearTimeout(pending);
    // Waits for a pause in typing: each search may ask the origin for releases not loaded.
    pending = setTimeout(() => { view.offset = 0; rerender(); }, 200);
  });
  $("history-search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    clearTimeout(pending);
    view.offset = 0;
    rerender();
  });
  $("history-rollout").addEventListener("click", () => {
    $("history-search").value = String(view.rollout.release);
    view.offset = 0;
    rerender();
  });
}
