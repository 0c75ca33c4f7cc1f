import DepotCore
import Foundation

/// What patch making did for each app, kept in `apps/<app>/patch-state` (``PatchMaker/State``).
extension PatchMaker {
    /// The file keeping what `app`'s patch making did.
    func statePath(_ app: String) -> String { folder.app(app) + "/patch-state" }

    /// What patch making did for one app, bounded by what its channels serve.
    struct State: Codable, Equatable {
        /// `channel app/pack@revision:sha256` tried without a patch to show (not worth it,
        /// skipped, failed, or refused at release): not tried again on that channel. A patch made
        /// is found again through the releases that name it (the app's ``ReleaseIndex``), so one
        /// swept since is made again.
        var tried: Set<String> = []
        /// Per channel, the release whose packs were all looked at and found done: a turn looks
        /// only at channels that moved since, not at every live pack again.
        var settled: [String: Int] = [:]
        /// Not yet written to the file, and when last written.
        var dirty = false
        var written = ContinuousClock.now

        enum CodingKeys: String, CodingKey { case tried, settled }
        static func == (a: State, b: State) -> Bool { a.tried == b.tried && a.settled == b.settled }
    }

    /// `app`'s state: kept in memory, read from its file once per process.
    func state(_ app: String) -> State {
        if let known = states.withLock({ $0[app] }) { return known }
        let read = (try? FileSystem.readFile(statePath(app), limit: 64 << 20)).flatMap { try? JSONDecoder().decode(State.self, from: Data($0)) }
        let state = read ?? State()
        states.withLock { $0[app] = $0[app] ?? state }
        return state
    }

    /// Changes `app`'s state; written at once with `flush` (its turns ran out), else at most
    /// every 5 seconds (a file that cannot be written, or a crash, costs at most another look at
    /// a few packs after a restart).
    func update(_ app: String, flush: Bool = false, _ change: (inout State) -> Void) {
        _ = state(app)
        let write = states.withLock { states -> State? in
            guard var state = states[app] else { return nil }
            let before = state
            change(&state)
            if state != before { state.dirty = true }
            let due = state.dirty && (flush || ContinuousClock.now - state.written > .seconds(5))
            if due {
                state.dirty = false
                state.written = .now
            }
            states[app] = state
            return due ? state : nil
        }
        if let write, let bytes = try? StoredJSON.compact.encode(write) {
            try? FileSystem.writeAtomically(Array(bytes), to: statePath(app), .ordered)
        }
    }

    /// Forgets what was tried for packs no channel of `app` serves any more, and the settled
    /// releases of channels gone: both stay bounded by what is live. Writes the state.
    func prune(_ app: String, channels: [String: Int]) {
        var live: Set<String>?
        if !state(app).tried.isEmpty || triedHere.withLock({ $0[app]?.isEmpty == false }) {
            var keys = Set<String>()
            for channel in channels.keys {
                guard let release = try? releases.current(app, channel: channel), let packs = try? release.manifest.packs else { return }
                for entry in packs { keys.insert(Self.key(app, channel, entry)) }
            }
            live = keys
        }
        update(app, flush: true) { state in
            state.settled = state.settled.filter { channels[$0.key] != nil }
            if let live { state.tried.formIntersection(live) }
        }
        if let live { triedHere.withLock { $0[app]?.formIntersection(live) } }
    }
}
