// An app's releases as the origin pages them (GET …/releases): the newest page first, older pages
// only when someone pages past what is loaded (by following `next`), and releases beyond that
// looked up by number (`?before=N+1&limit=…`). An origin that answers every release at once (no
// `total`, no `next`) works the same: everything is then loaded from the start.

// Lookups of releases close together share one request (at most SPAN releases, none further
// than GAP from the previous one), so a window of channels costs a request or two, not one each.
const SPAN = 500, GAP = 50;

export class ReleaseHistory {
  /**
   * `answer`: the first GET …/releases, made at `path`; `fetch(pathAndQuery)` gets another page.
   * `loaded` holds the newest releases with none missing, newest first.
   */
  constructor(answer, path, fetch) {
    this.app = answer.app;
    this.live = answer.live ?? null;
    this.channels = answer.channels ?? {};
    this.path = path;
    this.fetch = fetch;
    this.known = new Map();
    this.loaded = [];
    this.next = null;
    this.total = 0;
    this.take(answer, true);
  }

  /** Records an answer; a page reached from the first one (or a whole list) extends `loaded`. */
  take(answer, inSequence) {
    const releases = [...(answer.releases ?? [])].sort((a, b) => b.version - a.version);
    for (const release of releases) this.known.set(release.version, release);
    const whole = answer.total === undefined;
    if (whole) {
      this.loaded = releases;
      this.next = null;
      this.total = releases.length;
      return;
    }
    this.total = answer.total;
    if (!inSequence) return;
    const oldest = this.oldestLoaded ?? Infinity;
    this.loaded.push(...releases.filter((r) => r.version < oldest));
    // Followed only as a path of this app's release list (it is fetched with the token).
    this.next = typeof answer.next === "string" && answer.next.startsWith("/v1/apps/") && answer.next.includes("/releases?") ? answer.next : null;
  }

  get newest() {
    return this.loaded[0]?.version ?? null;
  }

  get oldestLoaded() {
    return this.loaded.length ? this.loaded[this.loaded.length - 1].version : null;
  }

  /** Loads older pages until `count` releases (or all of them) are loaded. */
  async ensure(count) {
    while (this.loaded.length < count && this.next) {
      const before = this.loaded.length;
      this.take(await this.fetch(this.next), true);
      if (this.loaded.length === before) this.next = null; // a page that adds nothing ends the walk
    }
  }

  /** Whether release `version` may exist without being loaded: older than every loaded one. */
  mayExist(version) {
    return this.next !== null && version < this.oldestLoaded;
  }

  /** The summaries of `versions` that exist ({version → summary}), fetching those not yet seen. */
  async summaries(versions) {
    const missing = [...new Set(versions)].filter((v) => Number.isInteger(v) && v > 0 && !this.known.has(v) && this.mayExist(v))
      .sort((a, b) => b - a);
    const groups = [];
    for (const version of missing) {
      const group = groups[groups.length - 1];
      if (group && group[0] - version < SPAN && group[group.length - 1] - version <= GAP) group.push(version);
      else groups.push([version]);
    }
    await Promise.all(groups.map(async (group) => {
      const query = new URLSearchParams({ before: group[0] + 1, limit: group[0] - group[group.length - 1] + 1 });
      this.take(await this.fetch(`${this.path}?${query}`), false);
    }));
    return new Map(versions.filter((v) => this.known.has(v)).map((v) => [v, this.known.get(v)]));
  }
}
