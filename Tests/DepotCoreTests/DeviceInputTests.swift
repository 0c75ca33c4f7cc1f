import DepotCore
import Foundation
import Testing

/// What a device turns into file names: the owner of a temporary name, and a signed manifest's
/// ids and digests, which are checked when it is decoded.
@Suite("Names and values a device uses on disk")
struct DeviceInputTests {
    @Test("A temporary name's owner is the process id its writer put last, whatever the pack's own name holds")
    func temporaryOwner() {
        #expect(FileSystem.temporaryOwner(".tmp-movie-p1080-p4242-0123456789ab") == 4242)
        #expect(FileSystem.temporaryOwner(".tmp-movie-p1080-p4242-0123456789ab.plain") == 4242)
        #expect(FileSystem.temporaryOwner(".tmp-movie-p1080-p4242-0123456789ab.delta") == 4242)
        #expect(FileSystem.temporaryOwner(".tmp-.tmp-zm-p999999-p17-aaaaaaaaaaaa-p23-bbbbbbbbbbbb") == 23)
        #expect(FileSystem.temporaryOwner(".tmp-x-p1-aaaaaaaaaaaa-p77-cccccccccccc.old") == 77)
        // Names no writer of this build makes: no owner.
        #expect(FileSystem.temporaryOwner(".tmp-movie-p1080") == nil)
        #expect(FileSystem.temporaryOwner(".tmp-levels-0123456789ab") == nil)
        #expect(FileSystem.temporaryOwner(".tmp-levels-p12-0123456789AB") == nil)
        #expect(FileSystem.temporaryOwner("movie-p12-0123456789ab") == nil)
        let made = FileSystem.lastComponent(of: FileSystem.temporaryPath(besides: "/x/movie-p1080", suffix: ".plain"))
        #expect(FileSystem.temporaryOwner(made) == getpid(), "\(made)")
    }

    static func manifest(_ change: (inout PackEntry) -> Void) -> [UInt8] { build(change).encoded() }

    static func build(_ change: (inout PackEntry) -> Void) -> Manifest {
        var entry = PackEntry(
            id: "levels", revision: 2, url: "https://cdn.example/levels", size: 10, sha256: String(repeating: "a", count: 64), installSize: 5,
            plaintextSHA256: String(repeating: "b", count: 64), policy: .essential, tags: [], keyID: "k1", contentType: "application/octet-stream",
            patches: [PackPatch(fromRevision: 1, fromPlaintextSHA256: String(repeating: "c", count: 64), url: "https://cdn.example/p", size: 3, sha256: String(repeating: "d", count: 64))]
        )
        change(&entry)
        let now = Date()
        return Manifest(app: "com.example.game", version: 1, publishedAt: now, expiresAt: now.addingTimeInterval(60), packs: [entry])
    }

    @Test("A signed manifest whose pack ids, digests, sizes or patch bases a device could not safely use is refused when decoded")
    func manifestValues() throws {
        _ = try Manifest.decode(Self.manifest { _ in })
        let hostile: [(String, (inout PackEntry) -> Void)] = [
            ("id with a path", { $0.id = "../../Library/x" }),
            ("id with a slash", { $0.id = "a/b" }),
            ("digest with a path", { $0.sha256 = "../" + String(repeating: "a", count: 61) }),
            ("upper-case digest", { $0.plaintextSHA256 = String(repeating: "B", count: 64) }),
            ("short digest", { $0.sha256 = "abc" }),
            ("negative size", { $0.size = -1 }),
            ("negative install size", { $0.installSize = -5 }),
            ("patch digest with a path", { $0.patches![0].sha256 = "/etc/passwd" }),
            ("patch from the future", { $0.patches![0].fromRevision = 2 }),
            ("patch base digest", { $0.patches![0].fromPlaintextSHA256 = "zz" }),
        ]
        for (what, change) in hostile {
            #expect(throws: ManifestError.self, "\(what)") { try Manifest.decode(Self.manifest(change)) }
        }
    }

    @Test("The refusal reaches the client through the envelope with its reason")
    func envelopeRefusal() throws {
        let key = Ed25519PrivateKey()
        let envelope = try Envelope.sign(Self.build { $0.id = "../escape" }, with: [key])
        #expect {
            try envelope.verifiedManifest(trusting: [key.publicKey])
        } throws: { error in
            (error as? EnvelopeError)?.description.contains("pack id") == true
        }
    }
}
