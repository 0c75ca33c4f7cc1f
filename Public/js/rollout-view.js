// The rollout of one channel: its state and figures, its controls (each step confirmed, each
// refusal shown as the origin wrote it), and two charts drawn here as SVG — installs per
// revision over the days, failures by kind — from the fleet figures (GET …/fleet).

import { call, appPath, OriginError } from "./api.js";
import { $, el, alertError, confirmAction, labelCells, notify } from "./ui.js";
import { perform } from "./actions.js";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#0a58ca", "#b3261e", "#1a7f37", "#8a4baf", "#b35c00", "#00798c", "#57575c"];

function svg(tag, attributes = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

const percent = (fraction) => `${Math.round(fraction * 10000) / 100} %`;

/** Cumulative installs per pack revision, one line each, over the days. */
export function adoptionChart(fleet) {
  const width = 480, height = 220, left = 40, bottom = 30, top = 10, right = 110;
  const series = fleet.revisions.filter((r) => r.daily.some((n) => n > 0)).map((r) => {
    let total = 0;
    return { name: `${r.pack} r${r.revision}`, points: r.daily.map((n) => (total += n)) };
  });
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, "data-series": series.length });
  if (!series.length) {
    root.append(svg("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "empty" }, "No reports yet"));
    return root;
  }
  const max = Math.max(1, ...series.flatMap((s) => s.points));
  const days = fleet.days.length;
  const x = (i) => left + (days === 1 ? (width - left - right) / 2 : (i * (width - left - right)) / (days - 1));
  const y = (v) => height - bottom - (v * (height - bottom - top)) / max;
  root.append(svg("line", { x1: left, y1: height - bottom, x2: width - right, y2: height - bottom, class: "axis" }));
  root.append(svg("line", { x1: left, y1: top, x2: left, y2: height - bottom, class: "axis" }));
  root.append(svg("text", { x: left - 4, y: top + 8, "text-anchor": "end" }, max));
  root.append(svg("text", { x: left - 4, y: height - bottom, "text-anchor": "end" }, 0));
  root.append(svg("text", { x: left, y: height - 8 }, fleet.days[0]));
  if (days > 1) root.append(svg("text", { x: width - right, y: height - 8, "text-anchor": "end" }, fleet.days[days - 1]));
  series.forEach((s, index) => {
    const color = COLORS[index % COLORS.length];
    const points = s.points.map((v, i) => `${x(i)},${y(v)}`).join(" ");
    const line = svg("polyline", { points, fill: "none", stroke: color, "stroke-width": 2, "data-name": s.name, "data-total": s.points[s.points.length - 1] });
    line.append(svg("title", {}, `${s.name}: ${s.points[s.points.length - 1]} installs`));
    root.append(line);
    for (const [i, v] of s.points.entries()) root.append(svg("circle", { cx: x(i), cy: y(v), r: 3, fill: color }));
    root.append(svg("text", { x: width - right + 6, y: 16 + index * 16, fill: color }, `${s.name}: ${s.points[s.points.length - 1]}`));
  });
  return root;
}

/** One bar per failure kind. */
export function failureChart(fleet) {
  const kinds = Object.entries(fleet.failuresByKind ?? {}).sort((a, b) => b[1] - a[1]);
  const width = 480, row = 24, left = 90;
  const height = Math.max(60, 12 + kinds.length * row);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, "data-kinds": kinds.length });
  if (!kinds.length) {
    root.append(svg("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "empty" }, "No failures reported"));
    return root;
  }
  const max = Math.max(...kinds.map(([, n]) => n));
  kinds.forEach(([kind, count], i) => {
    const y = 6 + i * row;
    const bar = svg("rect", { x: left, y, width: Math.max(2, ((width - left - 60) * count) / max), height: row - 8, fill: "#b3261e", "data-kind": kind, "data-count": count });
    bar.append(svg("title", {}, `${kind}: ${count}`));
    root.append(svg("text", { x: left - 6, y: y + row / 2, "text-anchor": "end" }, kind), bar,
      svg("text", { x: left + Math.max(2, ((width - left - 60) * count) / max) + 6, y: y + row / 2 }, count));
  });
  return root;
}

/** The fleet's keys section as lines: per current or staged pack key and manifest signing key
 * in force, how many reports come from builds without it (`depot fleet` prints the same). */
export function keyLines(fleet) {
  const keys = fleet.keys;
  if (!keys) return [];
  const days = fleet.days.length;
  const lines = [];
  for (const [kind, label, absent] of [[keys.pack, "key", "without it"], [keys.manifest, "manifest key", "that do not pin it"]]) {
    for (const key of kind?.keys ?? []) {
      const named = key.with + key.without;
      lines.push({ id: key.id, without: key.without, text: named === 0
        ? `${label} ${key.id} (${key.state}): no report in ${days} days names its builds' keys`
        : `${label} ${key.id} (${key.state}): ${count(key.without)} of ${count(named)} reports in ${days} days come from builds ${absent}` });
    }
    if (kind && kind.unnamed > 0 && kind.keys.length) {
      lines.push({ text: `and ${count(kind.unnamed)} reports name no ${label === "key" ? "pack" : "manifest"} key ring (builds from before reports named their keys${label === "key" ? "" : ", or that pin none"}, or past the rings kept a day)` });
    }
  }
  return lines;
}

const count = (n) => Number(n).toLocaleString("en-US");

/** The channel's reports over the days and the attested ones among them (`depot fleet`'s first line). */
export function reportsLine(fleet) {
  const sum = (list) => (list ?? []).reduce((a, b) => a + b, 0);
  return `${count(sum(fleet.reports))} reports in ${fleet.days.length} days, ${count(sum(fleet.attestedReports))} of them attested (App Attest).`;
}

/** One row per pack revision: every report's outcomes, then the attested reports' among them. */
export function revisionRows(fleet) {
  return fleet.revisions.map((r) => {
    const attested = r.attested ?? { installed: 0, patched: 0, failed: 0, deferred: 0 };
    return el("tr", { dataRevision: `${r.pack}@${r.revision}` }, el("th", { scope: "row" }, r.pack), el("td", { className: "num" }, r.revision),
      ...[r.installed, r.patched, r.failed, r.deferred, attested.installed, attested.patched, attested.failed, attested.deferred]
        .map((n) => el("td", { className: "num" }, count(n))));
  });
}

const figures = (trigger) => (trigger ? `: ${trigger.failures} failures in ${trigger.reports} reports (${percent(trigger.failureRate)})` : "");
const when = (at) => {
  const date = new Date(at);
  return Number.isNaN(date.getTime()) ? String(at) : date.toISOString().replace("T", " ").slice(0, 16) + " UTC";
};
const lastHalt = (status) => [...(status.steps ?? [])].reverse().find((s) => s.action === "halt");

function facts(status) {
  const rows = [
    ["Candidate", `release ${status.release}: ` + [...status.candidates.map((c) => `${c.pack} revision ${c.revision}`), ...status.removed.map((p) => `${p} removed`)].join(", ")],
    ["Current release", `${status.baseRelease} (manifest version now ${status.manifest})`],
    ["Reports about the candidate", `${status.reports}, failures ${status.failures}` + (status.failureRate !== undefined && status.failureRate !== null ? ` (${percent(status.failureRate)})` : "")],
  ];
  if (status.attestedReports !== undefined) {
    rows.push(["Attested reports about the candidate", `${status.attestedReports}, failures ${status.attestedFailures}` +
      (status.attestedFailureRate !== undefined && status.attestedFailureRate !== null ? ` (${percent(status.attestedFailureRate)})` : "")]);
  }
  if (status.haltOnFailureRate !== undefined && status.haltOnFailureRate !== null) {
    rows.push(["Guard", status.attestedOnly
      ? `halts itself above ${percent(status.haltOnFailureRate)} failures once ${status.minReports} attested reports are in (it counts only attested reports)`
      : `halts itself above ${percent(status.haltOnFailureRate)} failures once ${status.minReports} reports are in`]);
  }
  const steps = status.steps ?? [];
  const halt = lastHalt(status);
  if (status.state === "halted") {
    rows.push(["Halted by", (status.haltedBy ?? halt?.by ?? "unknown") + figures(status.trigger ?? halt?.trigger) + (halt ? ` at ${when(halt.at)}` : "")]);
  } else if (halt) {
    // A resumption does not hide the halt before it.
    const resumed = steps[steps.lastIndexOf(halt) + 1];
    rows.push(["Resumed after a halt", `halted by ${halt.by}${figures(halt.trigger)} at ${when(halt.at)}` + (resumed ? `; resumed by ${resumed.by} at ${when(resumed.at)}` : "")]);
  }
  if (steps.length) {
    rows.push(["History", el("ol", { className: "rollout-history" }, ...steps.map((s) =>
      el("li", {}, `${when(s.at)}: ${s.action}, ${percent(s.fraction)}, by ${s.by}${figures(s.trigger)} (manifest ${s.manifest})`)))]);
  }
  return rows.flatMap(([term, value]) => [el("dt", {}, term), el("dd", {}, value)]);
}

/** Shows a rollout's state and facts (what the controls act on); returns it. */
function render(status, channel) {
  const node = $("rollout-state");
  node.dataset.state = status?.state ?? "none";
  node.textContent = status
    ? `Rollout of release ${status.release} on ${channel}: ${status.state}, ${percent(status.fraction)} of devices.`
    : `No rollout on ${channel}. Publish a release on another channel (beta), then start one here.`;
  $("rollout-facts").replaceChildren(...(status ? facts(status) : []));
  const live = status && status.state !== "completed";
  $("rollout-controls").hidden = !live;
  $("rollout-halt").disabled = status?.state !== "running";
  $("rollout-start-form").hidden = status?.state === "running";
  return status;
}

/** Shows the channel's rollout and figures; returns the rollout's status (null for none). */
export async function showRollout(app, channel) {
  let fleet;
  try {
    fleet = await call(appPath(app, "/fleet"), { query: { channel, days: 14 } });
  } catch (error) {
    alertError(error);
    return null;
  }
  const status = render(fleet.rollout ?? null, channel);
  $("adoption-chart").replaceChildren(adoptionChart(fleet));
  $("failure-chart").replaceChildren(failureChart(fleet));
  $("fleet-reports").textContent = reportsLine(fleet);
  $("fleet-revisions").tBodies[0].replaceChildren(...revisionRows(fleet));
  labelCells($("fleet-revisions"));
  $("fleet-keys").replaceChildren(...keyLines(fleet).map((line) => el("li", line.id ? { dataKey: line.id, dataWithout: line.without } : {}, line.text)));
  return status;
}

/** Reads the channel's rollout again and shows it: an action is confirmed against what the
 * origin has now, not what the page showed when it loaded. Null if there is none to act on. */
async function reread(app, channel) {
  try {
    const status = render(await call(appPath(app, `/rollouts/${encodeURIComponent(channel)}`)), channel);
    return status && status.state !== "completed" ? status : null;
  } catch (error) {
    if (error instanceof OriginError && error.status === 404) render(null, channel);
    alertError(error);
    return null;
  }
}

/** The rollout, as a dialog names it: its release, state and share, and a halt (now or before). */
function described(status) {
  const halt = lastHalt(status);
  let text = `the rollout of release ${status.release} (${status.state}, ${percent(status.fraction)} of devices`;
  if (status.state === "halted") text += `; halted by ${status.haltedBy ?? halt?.by ?? "unknown"}${figures(status.trigger ?? halt?.trigger)}`;
  else if (halt) text += `; halted before by ${halt.by}${figures(halt.trigger)}, then resumed`;
  return text + ")";
}

/** What the step was confirmed against: the origin refuses it (409 rollout_changed) if the rollout is no longer that. */
const expecting = (status) => ({ release: status.release, state: status.state, steps: (status.steps ?? []).length });

function fraction(text) {
  const value = Number(String(text).replace(",", "."));
  return Number.isFinite(value) ? value / 100 : NaN;
}

export function setUpRollout(currentApp, channel, reload) {
  const path = (step) => appPath(currentApp(), `/rollouts/${encodeURIComponent(channel())}/${step}`);
  $("rollout-channel").addEventListener("change", reload);
  $("rollout-start-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const release = $("rollout-release").value.trim();
    const share = fraction($("rollout-percent").value);
    const rate = $("rollout-rate").value.trim() ? fraction($("rollout-rate").value) : null;
    const min = $("rollout-min").value.trim();
    const attestedOnly = $("rollout-attested").checked;
    const which = attestedOnly ? "attested reports" : "reports";
    const guard = rate === null ? "" : ` It halts itself if more than ${percent(rate)} of the candidate's ${which} are failures, once ${min || 20} are in.`;
    if (!(await confirmAction("Start a rollout", `Offer release ${release} to ${percent(share)} of ${channel()}'s devices? Each device decides from its own install id; the rest keep the current release.${guard}`, "Start"))) return;
    await perform(path("start"), { release, fraction: share, haltOnFailureRate: rate ?? undefined, minReports: rate === null ? undefined : min || undefined,
      attestedOnly: attestedOnly ? "true" : undefined }, "POST",
      (s) => `Rollout of release ${s.release} started: ${percent(s.fraction)} of ${s.channel}'s devices (manifest version ${s.manifest}).`, reload);
  });
  // Each step reads the rollout again first, its dialog names that rollout, and the step names
  // it to the origin, which refuses it (409 rollout_changed) if it changed before the click.
  $("rollout-controls").addEventListener("submit", async (event) => {
    event.preventDefault();
    const share = fraction($("rollout-advance-to").value);
    const status = await reread(currentApp(), channel());
    if (!status) return;
    const resume = status.state === "halted" ? " This resumes it." : "";
    if (!(await confirmAction("Advance the rollout", `Offer ${described(status)} to ${percent(share)} of ${channel()}'s devices? Every device that has the candidate keeps it.${resume}`, "Advance"))) return;
    await perform(path("advance"), { fraction: share, ...expecting(status) }, "POST", (s) => `The rollout of release ${s.release} now reaches ${percent(s.fraction)} of devices.`, reload);
  });
  $("rollout-halt").addEventListener("click", async () => {
    const status = await reread(currentApp(), channel());
    if (!status) return;
    // Halted meanwhile (the guard, someone else): the page now shows it, nothing to confirm.
    if (status.state !== "running") return notify(`Nothing to halt: ${described(status)}.`);
    if (!(await confirmAction("Halt the rollout", `Halt ${described(status)}? Devices on ${channel()} that took the candidate go back to the current release at their next event.`, "Halt"))) return;
    await perform(path("halt"), expecting(status), "POST", (s) => `The rollout of release ${s.release} is halted.`, reload);
  });
  $("rollout-complete").addEventListener("click", async () => {
    const status = await reread(currentApp(), channel());
    if (!status) return;
    if (!(await confirmAction("Complete the rollout", `Complete ${described(status)}? Release ${status.release}'s candidate becomes ${channel()}'s release for every device.`, "Complete"))) return;
    await perform(path("complete"), expecting(status), "POST", (s) => `Completed: ${s.channel} serves release ${s.release}'s packs to every device (manifest version ${s.manifest}).`, reload);
  });
}
