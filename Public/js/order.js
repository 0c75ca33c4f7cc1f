// The order channels are listed in, everywhere the dashboard lists them: production first (what
// most devices get), then the channels serving the newest releases (those still in use; a channel
// left on an old release sinks), ties in natural name order (c2 before c10, build-2.4 before
// build-2.10).

const collator = new Intl.Collator("en", { numeric: true });

/** Compares names as people read them: digit runs by their value. */
export function naturalCompare(a, b) {
  return collator.compare(a, b) || (a < b ? -1 : a > b ? 1 : 0);
}

/** The channel names of `channels` ({name: release}) in the dashboard's order. */
export function channelOrder(channels) {
  return Object.keys(channels ?? {}).sort((a, b) => {
    if (a === "production" || b === "production") return a === "production" ? (b === "production" ? 0 : -1) : 1;
    return (channels[b] - channels[a]) || naturalCompare(a, b);
  });
}
