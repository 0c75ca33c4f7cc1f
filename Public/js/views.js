// Renders what the origin reports about an app: its settings, the packs of a channel's release,
// the draft, a comparison (the channels and the history have their own views).

import { $, el, button, labelCells } from "./ui.js";
import { human, exact, date, protection, difference, patchLines } from "./format.js";

const size = (bytes) => el("span", { title: exact(bytes) }, human(bytes), el("span", { className: "exact" }, exact(bytes)));
/** A value someone else chose (a tag, a claim), isolated in a <bdi>: whatever direction its
 * characters take, it cannot reorder the text around it (the origin refuses bidirectional
 * controls in new values; a release made before may still hold some). */
const isolated = (value) => el("bdi", {}, value);
const tags = (list) => (list?.length ? list.flatMap((tag, i) => (i ? [", ", isolated(tag)] : [isolated(tag)])) : "—");

export function renderApp(summary, session) {
  $("app-title").textContent = summary.app;
  const facts = [
    ["Mode", summary.mode === "managed" ? `managed (iOS 26+, app group ${summary.appGroup})` : "unmanaged (DepotClient or a Background Assets extension)"],
    ["Your role", session.expiresAt ? `${session.role} (the token expires ${date(session.expiresAt)})` : `${session.role} (the token does not expire)`],
    ["Packs encrypted with", summary.currentPackKey ? `key ${summary.currentPackKey}` : "not encrypted: Apple Archives as uploaded"],
    ["Download credentials", summary.downloadCredentials ? "required" : "none (open downloads)"],
  ];
  const keys = {
    essentialDownloadAllowance: "BAEssentialDownloadAllowance", downloadAllowance: "BADownloadAllowance",
    essentialMaxInstallSize: "BAEssentialMaxInstallSize", maxInstallSize: "BAMaxInstallSize",
  };
  for (const [key, value] of Object.entries(summary.allowances ?? {})) {
    facts.push([`Shipped builds' ${keys[key] ?? key}`, `${human(value)} (${exact(value)}); larger releases are refused`]);
  }
  // Trusted publishing's rules, read-only (`depot apps trust` makes and removes them).
  const rules = summary.trustRules ?? [];
  if (!rules.length) facts.push(["Trusted CI publishers", "none (depot apps trust)"]);
  for (const rule of rules) {
    const claims = Object.entries(rule.claims ?? {}).sort(([a], [b]) => a.localeCompare(b))
      .flatMap(([name, value], i) => [...(i ? [", "] : []), isolated(name), "=", isolated(value)]);
    facts.push([`Trusted CI publisher ${rule.id}`, el("span", { className: "trust-rule" },
      isolated(rule.issuer), ", audience ", isolated(rule.audience), ", ", ...claims,
      `: ${rule.role} tokens of at most 15 minutes on ${rule.channels ? rule.channels.join(", ") : "every channel"}`)]);
  }
  $("app-facts").replaceChildren(...facts.flatMap(([term, value]) => [el("dt", {}, term), el("dd", {}, value)]));
}

/** The packs of the release a channel serves. */
export function renderLivePacks(channel, manifest, remove) {
  $("live-title").textContent = manifest ? `Packs of release ${manifest.version} (${channel})` : "Packs";
  const body = $("live-packs").tBodies[0];
  if (!manifest) return body.replaceChildren(el("tr", {}, el("td", { colSpan: 8 }, "No release.")));
  body.replaceChildren(...manifest.packs.map((pack) => el("tr", { dataPack: pack.id },
    el("th", { scope: "row" }, pack.id), el("td", { className: "num" }, size(pack.size)), el("td", {}, pack.policy),
    el("td", {}, pack.language ?? "all"), el("td", {}, tags(pack.tags)), el("td", { className: "num" }, pack.revision), el("td", {}, protection(pack)),
    el("td", { className: "row-actions" }, remove ? button("Remove…", () => remove(pack), { ariaLabel: `Remove ${pack.id}` }) : null))));
  labelCells($("live-packs"));
}

export function renderDraft(staging) {
  const changed = new Set(staging.changed), removed = staging.removed;
  const rows = staging.next.filter((p) => changed.has(p.id)).map((pack) => el("tr", { dataPack: pack.id },
    el("th", { scope: "row" }, pack.id), el("td", {}, "new or changed"), el("td", { className: "num" }, size(pack.size)),
    el("td", {}, pack.policy), el("td", {}, pack.language ?? "all"), el("td", {}, tags(pack.tags))));
  for (const id of removed) {
    rows.push(el("tr", { dataPack: id }, el("th", { scope: "row" }, id), el("td", {}, "removed: devices will delete it"), el("td", {}, "—"), el("td", {}, "—"), el("td", {}, "—"), el("td", {}, "—")));
  }
  $("draft-packs").tBodies[0].replaceChildren(...rows);
  labelCells($("draft-packs"));
  const base = staging.base ? `release ${staging.base}` : "nothing released yet";
  $("draft-summary").textContent = rows.length
    ? `${staging.changed.length} pack(s) staged, ${removed.length} removal(s), on top of ${base}; the next release lists ${staging.next.length} pack(s).`
    : `Nothing staged (on top of ${base}). Upload a pack to stage it.`;
  $("publish").disabled = rows.length === 0;
}

export function renderComparison(from, to) {
  const diff = difference(from, to);
  const line = (pack, change, detail) => el("tr", { dataPack: pack.id, dataChange: change },
    el("th", { scope: "row" }, pack.id), el("td", {}, change), el("td", {}, detail));
  const rows = [
    ...diff.added.map((p) => line(p, "added", `${human(p.size)} (${exact(p.size)}) to download`)),
    ...diff.changed.map((p) => {
      const patch = diff.patches.get(p.id);
      const download = patch
        ? `${human(patch.size)} (${exact(patch.size)}) to download as a patch instead of ${human(p.size)}`
        : `${human(p.size)} (${exact(p.size)}) to download`;
      const others = patchLines(p);
      return line(p, "changed", `revision ${diff.before.get(p.id).revision} → ${p.revision}, ${download}` + (others.length ? `; ${others.join("; ")}` : ""));
    }),
    ...diff.removed.map((p) => line(p, "removed", "devices delete it")),
  ];
  $("comparison").replaceChildren(
    el("h3", {}, `From release ${from.version} to release ${to.version}`),
    el("p", { id: "comparison-summary" },
      `${diff.added.length} added, ${diff.changed.length} changed, ${diff.removed.length} removed, ${diff.unchanged.length} unchanged. `
      + `A device that holds release ${from.version} downloads ${human(diff.download)} (${exact(diff.download)}).`),
    rows.length
      ? el("div", { className: "scroll" }, el("table", { id: "comparison-table" },
        el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Pack"), el("th", { scope: "col" }, "Change"), el("th", { scope: "col" }, "Devices"))),
        el("tbody", {}, rows)))
      : el("p", {}, "The two releases list the same packs."));
  if (rows.length) labelCells($("comparison-table"));
}
