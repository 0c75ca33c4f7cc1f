import DepotCore
import DepotPKCS11
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// Issue 61: root and release keys in a PKCS#11 token (SoftHSM2, Debian's `softhsm2`, in a token
/// folder the test makes), named by RFC 7512 URIs wherever a key file is taken. Real `depot
/// serve`, real CLI, a real device sync.
@Suite("End to end: root and release keys in a hardware token (PKCS#11, SoftHSM2)")
struct HardwareKeyTests {
    typealias Rig = PackKeyLifeTests.Rig
    static let app = PackKeyLifeTests.app
    static let module = "/usr/lib/softhsm/libsofthsm2.so"

    /// A SoftHSM2 token labelled `depot` (PIN 1234) in `folder`; the environment that finds it.
    static func token(in folder: String) throws -> [String: String] {
        try FileSystem.createDirectory(folder + "/tokens")
        try FileSystem.writeAtomically(Array("directories.tokendir = \(folder)/tokens\nobjectstore.backend = file\nlog.level = ERROR\n".utf8), to: folder + "/softhsm2.conf")
        let environment = ["SOFTHSM2_CONF": folder + "/softhsm2.conf"]
        let made = try Processes.run("/usr/bin/softhsm2-util", ["--init-token", "--free", "--label", "depot", "--pin", "1234", "--so-pin", "5678"], environment: environment)
        #expect(made.status == 0, "softhsm2-util (Debian's softhsm2, which Deploy/setup.sh installs): \(made.stderr)")
        return environment
    }

    /// The URI of key `label` (id `id`) in the test's token, the PIN from `pin`.
    static func uri(_ label: String, id: String, pin: String = "pin-value=1234") -> String {
        "pkcs11:token=depot;object=\(label);id=%\(id)?module-path=\(module)&\(pin)"
    }

    @Test("A root key and one release key generated in the token (sensitive, never extractable), one release key in a file: the root signed by the token, a release signed 2 of 2 (the file's signature, then the token's added), promoted, and a device that pins the root installs it; the next signed by two token keys in one command; a wrong PIN, an unknown key and a second key of one label are refused, nothing written")
    func rootAndReleaseKeysInAToken() throws {
        let rig = try Rig("depot-hsm")
        defer {
            rig.server.process.terminate()
            rig.work.remove()
        }
        let environment = try Self.token(in: rig.work.path + "/hsm")
        func depot(_ arguments: [String]) throws -> Processes.Result {
            try Processes.run(Processes.depotBinary, arguments, environment: environment, cwd: rig.work.path)
        }
        let rootURI = Self.uri("root", id: "01"), releaseURI = Self.uri("release", id: "02")
        let rootKey = try depot(["root", "keygen", "--out", rootURI])
        #expect(rootKey.status == 0 && rootKey.stdout.contains("generated in the token"), "\(rootKey.stdout)\(rootKey.stderr)")
        let tokenRelease = try depot(["root", "keygen", "--out", releaseURI])
        #expect(tokenRelease.status == 0, "\(tokenRelease.stderr)")
        let secondRelease = try depot(["root", "keygen", "--out", Self.uri("release-2", id: "04")])
        #expect(secondRelease.status == 0, "\(secondRelease.stderr)")
        let again = try depot(["root", "keygen", "--out", Self.uri("release", id: "03")])
        #expect(again.status != 0 && again.stderr.contains("already holds an object labelled \"release\""), "\(again.stderr)")
        #expect(try depot(["root", "keygen", "--out", "alice.json"]).status == 0)
        let alicePublic = try OfflineKeyFile.publicText(OfflineKeyFile.load(FileSystem.readFile(rig.work.path + "/alice.json"), path: "alice.json").publicKey)
        let tokenPublic = try #require(tokenRelease.stdout.split(separator: "\n").last.map(String.init))
        let secondPublic = try #require(secondRelease.stdout.split(separator: "\n").last.map(String.init))
        // The private halves never leave it: the token says so of both.
        let listed = try Processes.run("/usr/bin/pkcs11-tool", ["--module", Self.module, "--login", "--pin", "1234", "--list-objects", "--type", "privkey"], environment: environment)
        #expect(listed.stdout.components(separatedBy: "never extractable").count - 1 == 3 && listed.stdout.components(separatedBy: "sensitive, always sensitive").count - 1 == 3, "\(listed.stdout)")

        _ = try rig.export("online.json")
        let signedRoot = try depot([
            "root", "sign", "--app", Self.app, "--key", rootURI, "--online-keys-from", "online.json", "--release-key", alicePublic, "--release-key", tokenPublic,
            "--release-key", secondPublic, "--release-threshold", "2", "--out", "root-1.json",
        ])
        #expect(signedRoot.status == 0, "\(signedRoot.stderr)")
        let root = try Envelope.decode(FileSystem.readFile(rig.work.path + "/root-1.json"))
        let document = try RootDocument.decode(root.payloadBytes ?? [])
        #expect(document.rootKeys == [rootKey.stdout.split(separator: "\n").last.map(String.init)] && document.releaseThreshold == 2)
        #expect(try rig.admin(["root", "add", "--app", Self.app, rig.work.path + "/root-1.json"]).status == 0)
        let exported = try depot(["keys", "export", "--app", Self.app, "--data", rig.data, "--root", "root-1.json"])
        #expect(exported.status == 0, "\(exported.stderr)")
        try FileSystem.writeAtomically(Array(exported.stdout.utf8), to: rig.work.path + "/rooted.json")

        let release = try CompromisedOriginTests.publish(rig, "levels", Array("levels v1".utf8), channel: "beta")
        try ReleaseSignerTests.signerFiles(rig, "files", ["levels": "levels v1"])
        let common = ["release", "sign", "--server", rig.server.url, "--app", Self.app, "--release", "\(release)", "--config", "rooted.json", "--root", "root-1.json", "--packs", "files"]
        let alice = try depot(common + ["--key", "alice.json", "--out", "statement.json"])
        #expect(alice.status == 0, "\(alice.stderr)")
        let one = try depot(["channels", "promote", "--server", rig.server.url, "--app", Self.app, "--token", rig.token, "--channel", "production", "--release", "\(release)", "--statement", "statement.json"])
        #expect(one.status != 0, "one signature of the two needed is refused: \(one.stdout)")
        // The token's holder checks the same way and adds theirs; the wrong PIN or key first.
        let wrongPIN = try depot(common + ["--key", Self.uri("release", id: "02", pin: "pin-value=0000"), "--add-to", "statement.json", "--out", "both.json"])
        #expect(wrongPIN.status != 0 && wrongPIN.stderr.contains("the token refused the PIN"), "\(wrongPIN.stderr)")
        let unknown = try depot(common + ["--key", Self.uri("nobody", id: "09"), "--add-to", "statement.json", "--out", "both.json"])
        #expect(unknown.status != 0 && unknown.stderr.contains("no Ed25519 private key on the token matches"), "\(unknown.stderr)")
        #expect(!FileSystem.exists(rig.work.path + "/both.json"))
        try FileSystem.writeAtomically(Array("1234\n".utf8), to: rig.work.path + "/pin")
        let token = try depot(common + ["--key", Self.uri("release", id: "02", pin: "pin-source=file:\(rig.work.path)/pin"), "--add-to", "statement.json", "--out", "both.json"])
        #expect(token.status == 0, "\(token.stderr)")
        #expect(try Envelope.decode(FileSystem.readFile(rig.work.path + "/both.json")).signatures.count == 2)
        let promoted = try depot(["channels", "promote", "--server", rig.server.url, "--app", Self.app, "--token", rig.token, "--channel", "production", "--release", "\(release)", "--statement", "both.json"])
        #expect(promoted.status == 0 && promoted.stdout.contains("(2 of 2 release keys)"), "\(promoted.stdout)\(promoted.stderr)")
        let synced = try rig.sync("rooted.json", device: "device")
        #expect(synced.status == 0, "\(synced.stderr)")
        #expect(try rig.installed("device", "levels") == Array("levels v1".utf8))
        // Two token keys of one module in one command (the module loaded and initialised once,
        // finalised after both): the next release, signed by both at once.
        let next = try CompromisedOriginTests.publish(rig, "levels", Array("levels v2".utf8), channel: "beta")
        try ReleaseSignerTests.signerFiles(rig, "files", ["levels": "levels v2"])
        let both = try depot([
            "channels", "promote", "--server", rig.server.url, "--app", Self.app, "--token", rig.token, "--channel", "production", "--release", "\(next)",
            "--sign", releaseURI, "--sign", Self.uri("release-2", id: "04"), "--config", "rooted.json", "--root", "root-1.json", "--packs", "files",
        ])
        #expect(both.status == 0 && both.stdout.contains("(2 of 2 release keys)"), "\(both.stdout)\(both.stderr)")
        #expect(try rig.sync("rooted.json", device: "device").status == 0)
        #expect(try rig.installed("device", "levels") == Array("levels v2".utf8))
    }

    @Test("pkcs11: URIs as RFC 7512 writes them: percent-encoded values, the module and PIN in the query; a selector twice, an unknown one, a public key's type or no key named are refused")
    func uris() throws {
        let uri = try PKCS11URI("pkcs11:token=My%20Token;object=rel;id=%01%a0?module-path=/m.so&pin-source=file:/p")
        #expect(uri.token == "My Token" && uri.object == "rel" && uri.id == [0x01, 0xa0] && uri.modulePath == "/m.so" && uri.pinSource == "file:/p")
        for bad in ["pkcs11:object=a;object=b", "pkcs11:object=a;slot-id=1", "pkcs11:object=a;type=public", "pkcs11:token=t", "pkcs11:object=a?pin-value=1&x=2", "pkcs11:object=%zz"] {
            #expect(throws: (any Error).self, "\(bad)") { try PKCS11URI(bad) }
        }
        // A malformed value is never echoed (it may be the PIN), nor is the PIN in the URI's description.
        #expect { try PKCS11URI("pkcs11:object=a?pin-value=9876%zz") } throws: { !"\($0)".contains("9876") }
        let withPIN = try PKCS11URI("pkcs11:object=a?pin-value=9876")
        #expect(!"\(withPIN)".contains("9876") && !String(reflecting: withPIN).contains("9876"))
    }
}
