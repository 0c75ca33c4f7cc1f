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
            ("size past 1 TiB (sums of them would overflow)", { $0.size = Int64.max / 2 }),
            ("patch size past 1 TiB", { $0.patches![0].size = Int64.max }),
            ("empty URL", { $0.url = "" }),
            ("URL that is not http(s)", { $0.url = "file:///etc/passwd" }),
            ("patch URL without a host", { $0.patches![0].url = "https://" }),
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

    @Test("Text two readers could read two ways is refused: an escaped or repeated top-level key, in the envelope and in the manifest")
    func ambiguousKeys() throws {
        let key = Ed25519PrivateKey()
        let genuine = try Envelope.sign(Self.build { _ in }, with: [key])
        let other = try Envelope.sign(Self.build { $0.revision = 9 }, with: [key])
        let signatures = String(decoding: try JSONEncoder().encode(genuine.signatures), as: UTF8.self)
        let type = "\"payloadType\":\"\(Envelope.manifestPayloadType)\""
        for text in [
            "{\"pay\\u006coad\":\"\(other.payload)\",\"payload\":\"\(genuine.payload)\",\(type),\"signatures\":\(signatures)}",
            "{\"payload\":\"\(genuine.payload)\",\"payload\":\"\(other.payload)\",\(type),\"signatures\":\(signatures)}",
        ] {
            #expect(throws: EnvelopeError.self) { try Envelope.verifiedManifest(envelope: Array(text.utf8), trusting: [key.publicKey]) }
            #expect(throws: EnvelopeError.self) { try Envelope.decode(Array(text.utf8)) }
        }
        // The plain envelope verifies on both paths, to the same manifest.
        let bytes = genuine.encoded()
        #expect(try Envelope.verifiedManifest(envelope: bytes, trusting: [key.publicKey]) == Envelope.decode(bytes).verifiedManifest(trusting: [key.publicKey]))
        // A manifest whose packs key is escaped or repeated.
        let manifest = String(decoding: Self.manifest { _ in }, as: UTF8.self)
        let escaped = manifest.replacingOccurrences(of: "\"packs\":", with: "\"pack\\u0073\":[],\"packs\":")
        let repeated = manifest.replacingOccurrences(of: "\"packs\":", with: "\"packs\":[],\"packs\":")
        for text in [escaped, repeated] {
            #expect(throws: (any Error).self) { try Manifest.decode(Array(text.utf8)) }
        }
    }

    @Test("A zip whose entries would unpack to fewer bytes than it counts is refused: a file twice, twice but for letter case, a file where a folder goes")
    func zipLayouts() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("depot-zip-layout-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileSystem.createDirectory(dir)
        let script = """
            import sys, warnings, zipfile
            warnings.simplefilter("ignore")
            d = sys.argv[1]
            for name, entries in [("twice", ["a/x.bin", "a/x.bin"]), ("case", ["Readme.txt", "README.txt"]),
                                  ("file-folder", ["a", "a/b.bin"]), ("folder-file", ["a/b.bin", "a"]), ("fine", ["a/b.bin", "a/c.bin", "b"])]:
                with zipfile.ZipFile(d + "/" + name + ".zip", "w") as z:
                    for e in entries: z.writestr(e, b"12345")
            """
        let made = Process()
        made.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        made.arguments = ["-c", script, dir]
        try made.run()
        made.waitUntilExit()
        #expect(made.terminationStatus == 0)
        for name in ["twice", "case", "file-folder", "folder-file"] {
            #expect(throws: ZipPackError.self, "\(name)") { try ZipPack.inspect(dir + "/\(name).zip") }
            #expect(throws: ZipPackError.self, "\(name)") { try ZipPack.extract(dir + "/\(name).zip", into: dir + "/out-\(name)") }
        }
        let fine = try ZipPack.inspect(dir + "/fine.zip")
        #expect(fine.installSize == 15 && fine.files == 3)
    }
}
