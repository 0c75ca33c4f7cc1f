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
  const download = [...added, ...changed].reduce((sum, p) => sum + Number(p.size), 0);
  return { added, changed, removed, unchanged, download, before };
}
