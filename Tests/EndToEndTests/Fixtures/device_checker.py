#!/usr/bin/env python3
"""The device invariant, checked from outside the client (DeviceModelTests drives it).

It reads what the client wrote (DEST/.depot/state.json, DEST/packs, DEST/.depot/arrived) and what
the test published (a JSON file: for each pack and revision, a file's SHA-256 or each entry of a
tree with its SHA-256; and the live revision of each pack), and trusts nothing the client says
about its own copies: every copy is hashed here. A pack's record is the one its reader sees: the
state's record, or the switch in progress whose copy is at packs/<id> (by inode).

  device_checker.py state     DEST PUBLISHED [--quiescent]
  device_checker.py event     DEST PUBLISHED SCHEDULED_FILE IN_FLIGHT_FILE [WAITING_FILE]
  device_checker.py converged DEST PUBLISHED

Exit 0 when the invariant holds, 1 with one line per violation on stdout. `state` and `event`
print (on stderr, as JSON) the packs whose copies are damaged in a way a `stat` shows.
"""
import hashlib, json, os, re, sys

OWNER = re.compile(r"-p(\d+)-[0-9a-f]{12}(?:\.|$)")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree(root):
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            out[os.path.relpath(path, root)] = path
    return out


def load(dest, published_path):
    with open(published_path) as f:
        published = json.load(f)
    state_path = os.path.join(dest, ".depot", "state.json")
    state = {"packs": {}}
    if os.path.exists(state_path):
        with open(state_path) as f:
            state = json.load(f)
    return published, state


def exact(path, content):
    """Whether the copy at `path` is, byte for byte, the published content."""
    if content["kind"] == "file":
        return os.path.isfile(path) and not os.path.islink(path) and sha256(path) == content["sha256"]
    if not os.path.isdir(path) or os.path.islink(path):
        return False
    files = tree(path)
    if set(files) != set(content["files"]):
        return False
    return all(sha256(files[p]) == content["files"][p] for p in files)


def effective(dest, state):
    """The record of each pack as the client reads it (StateStore): a switch in progress
    (`switches`, written before the staged copy is exchanged in) whose copy is now at
    packs/<id>, the same inode, is that pack's record; any other switch is not."""
    packs = dict(state.get("packs", {}))
    for switch in state.get("switches", []):
        try:
            inode = os.lstat(os.path.join(dest, "packs", switch["pack"])).st_ino
        except FileNotFoundError:
            continue
        if inode == switch["record"].get("inode"):
            packs[switch["pack"]] = switch["record"]
    return packs


def stat_shows_damage(path, record):
    """Whether a stat-only look (what the client may afford at each event) tells the copy is not
    the one recorded: missing, another inode, another kind, other file count or bytes."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    if record.get("inode") is not None and st.st_ino != record["inode"]:
        return True
    is_tree = os.path.isdir(path)
    if is_tree != bool(record.get("unpacked")):
        return True
    if is_tree:
        files = tree(path)
        count, size = len(files), sum(os.path.getsize(p) for p in files.values())
    else:
        count, size = 1, st.st_size
    if record.get("files") is not None and count != record["files"]:
        return True
    return size != record.get("bytes", record.get("installSize"))


def check_state(dest, published, state, problems):
    """Every recorded pack is exactly what was published for its revision, or damaged in a way a
    stat shows (a purge: files gone or cut short). Returns (damaged, current)."""
    damaged, current = set(), set()
    for pid, record in state["packs"].items():
        revisions = published["packs"].get(pid, {})
        content = revisions.get(str(record["revision"]))
        path = os.path.join(dest, "packs", pid)
        if content is None:
            problems.append(f"state records {pid}@{record['revision']}, which was never published")
            continue
        # A purge removes files or cuts them short; it never puts another copy there. Another
        # inode than the record's is a copy switched in and not recorded (or recorded and not
        # switched in): the record and the disk disagree, whatever the bytes.
        if record.get("inode") is not None and os.path.lexists(path) and os.lstat(path).st_ino != record["inode"]:
            problems.append(f"state records {pid}@{record['revision']} (inode {record['inode']}) while packs/{pid} is another copy (inode {os.lstat(path).st_ino})")
            continue
        if exact(path, content):
            current.add(pid)
            if stat_shows_damage(path, record):
                damaged.add(pid)
        elif stat_shows_damage(path, record):
            damaged.add(pid)
        else:
            problems.append(f"state records {pid}@{record['revision']} whose copy differs from what was published, and no stat shows it")
    return damaged, current


def owner_alive(name):
    found = OWNER.findall(name)
    if not found:
        return False
    return os.path.exists(f"/proc/{found[-1]}")


def needs(published, state, dest, current):
    """Live packs a device must plan: not recorded at the live revision with an exact copy."""
    out = set()
    for pid, revision in published["live"].items():
        record = state.get("packs", {}).get(pid)
        if record is None or record["revision"] != revision or pid not in current:
            out.add(pid)
    return out


def main():
    mode, dest, published_path = sys.argv[1], sys.argv[2], sys.argv[3]
    published, state = load(dest, published_path)
    state["packs"] = effective(dest, state)
    problems = []
    damaged, current = check_state(dest, published, state, problems)
    packs = os.path.join(dest, "packs")
    arrived = os.path.join(dest, ".depot", "arrived")

    if mode == "state" and "--quiescent" in sys.argv:
        # An install step ran alone to its end: nothing staged survives it, nor any delivery.
        for folder in (packs, arrived):
            for name in os.listdir(folder) if os.path.isdir(folder) else []:
                if name.startswith(".tmp-"):
                    problems.append(f"{os.path.relpath(os.path.join(folder, name), dest)} survived a finished install step")
        for name in os.listdir(arrived) if os.path.isdir(arrived) else []:
            if not name.startswith(".tmp-"):
                problems.append(f"delivery {name} survived a finished install step")
        # Every switch it began it completed or undid, and what a killed one began before it.
        for switch in state.get("switches", []):
            problems.append(f"a switch of {switch['pack']} to revision {switch['record']['revision']} survived a finished install step")
        # It starts by dropping the records of copies that are gone.
        for pid, record in state["packs"].items():
            if not os.path.lexists(os.path.join(packs, pid)):
                problems.append(f"state records {pid}@{record['revision']} after a finished install step, and no copy is there")

    if mode == "event":
        with open(sys.argv[4]) as f:
            scheduled = [line.split()[0] for line in f.read().splitlines() if line.strip()]
        with open(sys.argv[5]) as f:
            held = set(line.strip() for line in f if line.strip())
        held |= set(n for n in (os.listdir(arrived) if os.path.isdir(arrived) else []) if not n.startswith(".tmp-"))
        # Deliveries that waited when the scheduling began (an install step beside it may have
        # dropped one since): planned at this event all the same; the next one must plan again.
        waiting = set()
        if len(sys.argv) >= 7:
            with open(sys.argv[6]) as f:
                waiting = set(line.strip() for line in f if line.strip())
        need = needs(published, state, dest, current)
        live = published["live"]
        def pack_of(identifier):
            pid, numbers = identifier.split("@", 1)
            return pid, int(numbers.split("-from-")[0])
        covered = set()
        for identifier in held | waiting | set(scheduled):
            pid, revision = pack_of(identifier)
            if live.get(pid) == revision:
                covered.add(pid)
        for pid in sorted(need - covered):
            problems.append(f"live pack {pid}@{live[pid]} is not installed whole, yet the event planned nothing for it")
        for identifier in scheduled:
            pid, revision = pack_of(identifier)
            if pid not in need and pid not in damaged:
                record = state.get("packs", {}).get(pid, {})
                path = os.path.join(dest, "packs", pid)
                seen = {"inode": os.lstat(path).st_ino} if os.path.lexists(path) else {}
                if os.path.isdir(path):
                    files = tree(path)
                    seen.update(files=len(files), bytes=sum(os.path.getsize(p) for p in files.values()))
                problems.append(f"scheduled {identifier}, but {pid} is installed and current: a download not needed (recorded {json.dumps(record)}, on disk {json.dumps(seen)})")
            elif live.get(pid) != revision:
                problems.append(f"scheduled {identifier}, not the live revision {live.get(pid)}")
            if identifier in held:
                problems.append(f"scheduled {identifier} again, which the system already holds")

    if mode == "converged":
        need = needs(published, state, dest, current)
        for pid in sorted(need):
            problems.append(f"after the faults stopped, {pid} is still not at the live revision {published['live'][pid]} whole")
        for pid in state.get("packs", {}):
            if pid not in published["live"]:
                problems.append(f"state still records {pid}, which the live release does not list")
        for name in os.listdir(packs):
            if name not in published["live"] and not (name.startswith(".tmp-") and owner_alive(name)):
                problems.append(f"packs/{name} is left over")

    print(json.dumps({"damaged": sorted(damaged), "current": sorted(current)}), file=sys.stderr)
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
