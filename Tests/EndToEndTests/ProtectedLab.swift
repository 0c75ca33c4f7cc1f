import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// An in-process origin whose app has root version 1 protecting production (live once the
/// running origin re-signed with it), one release key in `release-key.json` and the app's
/// configuration in `config.json`, in a working folder where `depot` runs.
struct ProtectedLab {
    let origin: TestOrigin
    let work: TemporaryDirectory
    let trust: TrustFixture
    let root: Envelope

    /// `pack` published to production first (the release from before the root).
    init(_ origin: TestOrigin, label: String, pack: String, bytes first: [UInt8]) throws {
        self.origin = origin
        work = TemporaryDirectory(label)
        try put(origin, pack, first)
        trust = TrustFixture(app: origin.app)
        root = try trust.addRoot(dataPath: origin.data.path)
        let root = root
        #expect(try Eventually.wait { try ProtectedChannelTests.served(origin).envelope.roots == [root] })
        try FileSystem.writeAtomically(TrustFixture.keyFile(trust.releaseKeys[0]), to: work.path + "/release-key.json")
        try FileSystem.writeAtomically(origin.clientConfiguration().encoded(), to: work.path + "/config.json")
    }

    var common: [String] { ["--server", origin.baseURL.absoluteString, "--app", origin.app] }

    /// `depot ARGS` in the working folder, with the origin's token.
    func depot(_ arguments: [String]) throws -> Processes.Result {
        try Processes.run(Processes.depotBinary, arguments, environment: ["DEPOT_TOKEN": origin.token, "XDG_CACHE_HOME": work.path + "/cache"], cwd: work.path)
    }

    /// `depot channels promote --channel production --release N --sign release-key.json …` with every file of the folder.
    func promote(_ release: Int) throws -> Processes.Result {
        try depot(["channels", "promote", "--channel", "production", "--release", "\(release)", "--sign", "release-key.json", "--config", "config.json", "--packs", "."] + common)
    }
}
