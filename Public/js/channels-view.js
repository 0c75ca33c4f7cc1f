// The channels' table: production first, then the channels serving the newest releases, ties in
// natural name order (order.js); a window of rows with Previous / Next and a filter by name. The
// dates and pack counts of the releases shown come from the history (fetched when not loaded).

import { $, el, labelCells } from "./ui.js";
import { date } from "./format.js";
import { channelOrder } from "./order.js";

/** The rows shown at once. */
export const CHANNEL_ROWS = 10;

const view = { history: null, app: null, actions: null, offset: 0, ticket: 0 };

/** Shows the channels of `history` (a ReleaseHistory); `actions(channel, version)` gives each
 * row's buttons. Keeps the filter and the window when it is the same app again. */
export function showChannels(history, actions) {
  if (view.app !== history.app) {
    Object.assign(view, { app: history.app, offset: 0 });
    $("channel-filter").value = "";
  }
  Object.assign(view, { history, actions });
  return render();
}

// Filters at each key: the rows are drawn at once from the releases already seen, then again
// once the others have come.
async function render() {
  const ticket = ++view.ticket;
  const { history } = view;
  const needle = $("channel-filter").value.trim().toLowerCase();
  const names = channelOrder(history.channels).filter((c) => c.toLowerCase().includes(needle));
  if (view.offset >= names.length) view.offset = 0;
  const shown = names.slice(view.offset, view.offset + CHANNEL_ROWS);
  draw(names, shown, history.known);
  const versions = shown.map((c) => history.channels[c]);
  if (versions.every((v) => history.known.has(v) || !history.mayExist(v))) return;
  const releases = await history.summaries(versions);
  if (ticket === view.ticket) draw(names, shown, releases);
}

function draw(names, shown, releases) {
  const { history } = view;
  const body = $("channels").tBodies[0];
  body.replaceChildren(...shown.map((channel) => {
    const version = history.channels[channel];
    const release = releases.get(version);
    return el("tr", { dataChannel: channel },
      el("th", { scope: "row" }, channel), el("td", { className: "num" }, version),
      el("td", {}, date(release?.publishedAt)), el("td", {}, date(release?.expiresAt)), el("td", { className: "num" }, release?.packs ?? "—"),
      el("td", { className: "row-actions" }, view.actions(channel, version)));
  }));
  const all = Object.keys(history.channels).length;
  const filter = $("channel-filter").value.trim();
  if (!shown.length) {
    const text = all ? `No channel's name contains “${filter}”.` : "Nothing is released yet: upload a pack and publish the draft.";
    body.replaceChildren(el("tr", {}, el("td", { colSpan: 6 }, text)));
  }
  labelCells($("channels"));
  const matching = filter ? ` matching “${filter}”` : "";
  $("channels-range").textContent = names.length > CHANNEL_ROWS
    ? `${view.offset + 1}–${view.offset + shown.length} of ${names.length} channels${matching}${filter ? ` (${all} in all)` : ""}`
    : filter && shown.length ? `${names.length === 1 ? "1 channel" : `${names.length} channels`}${matching}` : "";
  $("channels-pager").hidden = names.length <= CHANNEL_ROWS;
  $("channels-previous").disabled = view.offset === 0;
  $("channels-next").disabled = view.offset + CHANNEL_ROWS >= names.length;
}

export function setUpChannels(alertError) {
  const rerender = () => render().catch(alertError);
  $("channels-previous").addEventListener("click", () => { view.offset = Math.max(0, view.offset - CHANNEL_ROWS); rerender(); });
  $("channels-next").addEventListener("click", () => { view.offset += CHANNEL_ROWS; rerender(); });
  $("channel-filter").addEventListener("input", () => { view.offset = 0; rerender(); });
  $("channels-tools").addEventListener("submit", (event) => event.preventDefault());
}
