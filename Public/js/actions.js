// Publish, promote, roll back, remove a live pack: each confirmed first; a refusal is shown as
// the origin wrote it, with the way past it (force, confirm a removal) as a further confirmed step.

import { call, appPath, OriginError } from "./api.js";
import { alertError, clearAlert, confirmAction, notify } from "./ui.js";
import { human, exact } from "./format.js";

/** Refusals that mean the page showed something that changed since: it reads everything again. */
const STALE = ["rollout_changed", "draft_changed"];

/** Runs a write; on a refusal the origin lets a person override, offers that as a second step. */
export async function perform(path, query, method, describe, reload) {
  clearAlert();
  try {
    const result = await call(path, { method, query });
    notify(describe(result));
    await reload();
    return result;
  } catch (error) {
    if (!(error instanceof OriginError)) throw error;
    const overrides = {
      allowance_exceeded: ["Publish past the allowances…", "force",
        "Devices with builds whose Info.plist allows less may not download this release. Publish anyway?"],
      live_pack_removed: ["Remove those packs…", "removeLive",
        "Devices that installed those packs will delete them. Go on?"],
      retired_pack_key: ["Use the retired key…", "acceptRetiredKeys",
        "Builds exported since the key was retired may not hold it, and could not read those packs. Every build in the field holds it?"],
    };
    const override = overrides[error.code];
    alertError(error, override ? [[override[0], async () => {
      if (await confirmAction("Override", override[2], "Go on")) await perform(path, { ...query, [override[1]]: "true" }, method, describe, reload);
    }]] : []);
    // What the action was confirmed against changed: the page shows what is there now (the
    // refusal stays up, saying what changed).
    if (STALE.includes(error.code)) await reload();
    return null;
  }
}

/** `channels`: the release each channel serves now, sent as `base` so a publish made meanwhile by
 * someone else is refused (409 conflict) instead of being overwritten unseen. */
export async function publish(app, channel, staging, channels, reload) {
  const bytes = staging.next.filter((p) => staging.changed.includes(p.id)).reduce((sum, p) => sum + Number(p.size), 0);
  const removals = staging.removed.length ? ` Devices will delete ${staging.removed.join(", ")}.` : "";
  const ok = await confirmAction(
    "Publish the draft",
    `Publish ${staging.changed.length} new or changed pack(s) to ${channel}? Devices download ${human(bytes)} (${exact(bytes)}).${removals}`,
    "Publish");
  if (!ok) return null;
  // `draft`: the draft as shown (its fingerprint); one changed since is refused (409 draft_changed).
  return perform(appPath(app, "/releases"), { channel, base: channels[channel], draft: staging.fingerprint }, "POST",
    (r) => (r.changed ? `Published release ${r.release} to ${r.channel}.` : `Nothing changed: ${r.channel} keeps release ${r.release}.`), reload);
}

/** `channels`: the app's channel names in the dashboard's order; the first few are named. */
export async function promote(app, version, channels, reload) {
  const named = channels.length > 8 ? `${channels.slice(0, 8).join(", ")} and ${channels.length - 8} more` : channels.join(", ") || "none";
  const channel = await confirmAction(
    `Promote release ${version}`,
    `The channel you name serves release ${version} from now on (a new channel is created). Known channels: ${named}.`,
    "Promote", { label: "Channel", value: channels.find((c) => c !== "production") ?? "beta" });
  if (!channel) return null;
  return perform(appPath(app, `/channels/${encodeURIComponent(channel)}`), { release: version }, "POST",
    (r) => (r.changed ? `${r.channel} now serves release ${r.release}.` : `${r.channel} already served release ${r.release}.`), reload);
}

export async function rollback(app, version, channel, reload) {
  const ok = await confirmAction(
    `Roll ${channel} back to release ${version}`,
    `A new release with release ${version}'s packs goes out on ${channel} (versions only go up). Devices replace the packs that differ and delete those release ${version} lacks.`,
    "Roll back");
  if (!ok) return null;
  return perform(appPath(app, "/rollback"), { to: version, channel }, "POST",
    (r) => (r.changed ? `Rolled ${r.channel} back to release ${r.rolledBackTo}'s packs as release ${r.release}.` : `${r.channel} already had release ${r.rolledBackTo}'s packs.`), reload);
}

export async function removeLive(app, pack, reload) {
  const ok = await confirmAction(
    `Remove ${pack.id}`,
    `This stages the removal of ${pack.id} (${human(pack.size)}). When the next release goes out, devices that installed it will delete it.`,
    "Stage the removal");
  if (!ok) return null;
  return perform(appPath(app, `/packs/${encodeURIComponent(pack.id)}`), { removeLive: "true" }, "DELETE",
    () => `The removal of ${pack.id} is staged: publish the draft to remove it from devices.`, reload);
}
