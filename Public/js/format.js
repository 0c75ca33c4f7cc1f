// Sizes, dates and the difference between two releases, as the dashboard shows them.

const UNITS = ["bytes", "KiB", "MiB", "GiB", "TiB"];

/** "20.0 MiB" for 20971520; exact numbers stay beside it wherever a size is shown. */
export function human(bytes) {
  let value = Number(bytes);
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} bytes` : `${value.toFixed(1)} ${UNITS[unit]}`;
}

/** "20,971,520 bytes". */
export function exact(bytes) {
  return `${Number(bytes).toLocaleString("en-US")} bytes`;
}

export function date(text) {
  if (!text) return "—";
  const value = new Date(text);
  return Number.isNaN(value.getTime()) ? text : value.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

export function duration(seconds) {
  if (!Number.isFinite(seconds)) return "—";
  if (seconds < 60) return `${Math.ceil(seconds)} s`;
  const minutes = Math.floor(seconds / 60);
  return minutes < 60 ? `${minutes} min ${Math.ceil(seconds % 60)} s` : `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/** What the packs are encrypted with: the key id, or an Apple Archive for managed apps. */
export function protection(pack) {
  return pack.keyID ? `key ${pack.keyID}` : "Apple Archive";
}

/**
 * What changes from release `from` to release `to`: packs added, changed (other bytes),
 * removed, and the bytes a device holding every pack of `from` downloads to reach `to`.
 */
export function difference(from, to) {
  const before = new Map(from.packs.map((p) => [p.id, p]));
  const after = new Map(to.packs.map((p) => [p.id, p]));
  const added = to.packs.filter((p) => !before.has(p.id));
  const changed = to.packs.filter((p) => before.has(p.id) && before.get(p.id).sha256 !== p.sha256);
  const removed = from.packs.filter((p) => !after.has(p.id));
  const unchanged = to.packs.filter((p) => before.has(p.id) && before.get(p.id).sha256 === p.sha256);
  // A device on the earlier release takes a changed pack's patch from its revision, if listed.
  const patches = new Map(changed.map((p) => {
    const b = before.get(p.id);
    return [p.id, (p.patches ?? []).find((x) => x.fromRevision === b.revision && x.fromPlaintextSHA256 === b.plaintextSHA256)];
  }).filter(([, patch]) => patch));
  const download = added.reduce((sum, p) => sum + Number(p.size), 0)
    + changed.reduce((sum, p) => sum + Number(patches.get(p.id)?.size ?? p.size), 0);
  return { added, changed, removed, unchanged, download, before, patches };
}

/** "from revision 3: 12.4 MiB instead of 1.1 GiB", per patch a pack lists, newest base first. */
export function patchLines(pack) {
  return [...(pack.patches ?? [])].sort((a, b) => b.fromRevision - a.fromRevision)
    .map((patch) => `from revision ${patch.fromRevision}: ${human(patch.size)} instead of ${human(pack.size)}`);
}
