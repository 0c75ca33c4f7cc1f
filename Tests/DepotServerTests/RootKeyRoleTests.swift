import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// What keeps the offline keys offline and a root's devices served (issue 52's outside review):
/// no key plays two roles, and no root lists only keys due to retire.
@Suite("Roots of trust: key roles and retirement dates")
struct RootKeyRoleTests {
    static let app = "com.example.game"

    /// A data folder with the app, and its signing keys.
    static func folder(_ work: TemporaryDirectory) throws -> (path: String, apps: AppStore) {
        let path = work.path + "/data"
        for arguments in [["init", "--data", path], ["apps", "create", app, "--data", path]] {
            let result = try Processes.run(Processes.depotBinary, arguments)
            #expect(result.status == 0, "\(result.stderr)")
        }
        return (path, AppStore(folder: DataFolder(path)))
    }

    @Test("A root listing an online key as a root or release key is refused by devices and by the origin; so is one listing any of the origin's signing keys, retired ones too, as a root or release key")
    func rolesDoNotMix() throws {
        let work = TemporaryDirectory("depot-root-roles")
        defer { work.remove() }
        let (path, apps) = try Self.folder(work)
        let online = try apps.signingKeys()[0]
        let rootKey = Ed25519PrivateKey()
        // The online key as a release key: the document is not a root at all, for a device too.
        let mixed = RootDocument(
            app: Self.app, version: 1, expiresAt: Date().addingTimeInterval(86_400 * 365), rootKeys: [rootKey.publicKey], rootThreshold: 1,
            onlineKeys: [online.publicKey], releaseKeys: [online.publicKey], releaseThreshold: 1, protectedChannels: ["production"]
        )
        #expect(mixed.problem == "an online key is also a root or release key")
        #expect(throws: TrustError.self) { try RootChain.selfSigned(mixed.signed(with: [rootKey]), app: Self.app) }
        #expect(throws: (any Error).self) { try RootAdmin(dataPath: path).add(mixed.signed(with: [rootKey]).encoded(), app: Self.app) }

        // A retired signing key (it sat on the origin) as the release key: refused, nothing written.
        try apps.rotateSigningKey()
        let retired = online
        try apps.retireSigningKey(ManifestSigningKey.keyID(for: retired.publicKey))
        let current = try apps.signingKeys()[0]
        let sneaky = try RootDocument(
            app: Self.app, version: 1, expiresAt: Date().addingTimeInterval(86_400 * 365), rootKeys: [rootKey.publicKey], rootThreshold: 1,
            onlineKeys: [current.publicKey], releaseKeys: [retired.publicKey], releaseThreshold: 1, protectedChannels: ["production"]
        ).signed(with: [rootKey])
        do {
            _ = try RootAdmin(dataPath: path).add(sneaky.encoded(), app: Self.app)
            Issue.record("a root whose release key the origin holds was added")
        } catch let error as DepotError {
            #expect(error.code == "root_offline_key_online", "\(error)")
        }
        #expect(FileSystem.contents(of: DataFolder(path).roots(Self.app)).isEmpty)
    }

    @Test("`rotate-signing --grace-days` is refused once an app has a root (the root lists the keys it would retire on a date); a root listing only keys due to retire is refused")
    func noRetirementDateStrandsARoot() throws {
        let work = TemporaryDirectory("depot-root-retiring")
        defer { work.remove() }
        let (path, apps) = try Self.folder(work)
        // Before any root: a dated rotation is the operator's choice.
        try apps.rotateSigningKey(grace: 30 * 86_400)
        let keys = try apps.signingKeyInfo()
        let dated = try #require(keys.first { $0.retireAt != nil })
        let undated = try #require(keys.first { $0.retireAt == nil })
        let trust = TrustFixture(app: Self.app)
        func root(online: String) throws -> Envelope {
            try trust.root(online: [Ed25519PublicKey(rawRepresentation: Array(Data(base64Encoded: online)!))], protect: [])
        }
        do {
            _ = try RootAdmin(dataPath: path).add(root(online: dated.publicKey).encoded(), app: Self.app)
            Issue.record("a root listing only a key due to retire was added")
        } catch let error as DepotError {
            #expect(error.code == "root_online_key_retiring", "\(error)")
        }
        _ = try RootAdmin(dataPath: path).add(root(online: undated.publicKey).encoded(), app: Self.app)
        // With a root, a dated rotation is refused; an undated one is not.
        do {
            try apps.rotateSigningKey(grace: 30 * 86_400)
            Issue.record("a dated rotation was accepted with a root")
        } catch let error as DepotError {
            #expect(error.code == "root_needs_key", "\(error)")
        }
        #expect(try apps.signingKeyInfo().count == 2, "nothing changed")
        try apps.rotateSigningKey()
        #expect(try apps.signingKeyInfo().count == 3)
    }
}
