import ArgumentParser
import DepotCore
import DepotPKCS11
import DepotServer
import Foundation

/// `depot root`: an app's root of trust. The keys that sign it stay offline (`keygen`, `sign`
/// run on the operator's machine); the origin only stores what they signed (`add`, `show`).
struct Root: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Make, sign and add an app's root of trust: the offline keys that say which online keys sign its manifests and who signs its protected channels' releases.",
        discussion: """
            keygen and sign run where the root keys are kept (never on the origin); add and show run on the origin's data \
            folder. Builds exported after `root add` (depot keys export) pin the root and walk every later version; \
            builds exported before keep trusting the manifest keys they hold. See DepotCore's RootOfTrust article and \
            docs/Publishing.md, "Protected channels".
            """,
        subcommands: [Keygen.self, Sign.self, Add.self, Show.self]
    )

    struct Keygen: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a new Ed25519 key (a root key or a release key) in a new file of mode 0600; prints its public key (base64).",
            discussion: "File: {\"ed25519PrivateKey\": \"<base64 seed>\", \"publicKey\": \"<base64>\"}. Keep it offline; it never goes to the origin."
        )
        @Option(help: ArgumentHelp("The new key file (it must not exist), or a pkcs11: URI (RFC 7512) naming the new key's label and id in a hardware token, where it is generated and which it never leaves.", valueName: "file|pkcs11-uri")) var out: String

        func run() throws {
            if PKCS11URI.isURI(out) {
                let key = try OfflineFiles.tokenKey(out, generate: true)
                print("generated in the token: \(key.name), key \(ManifestSigningKey.keyID(for: key.publicKey)) (its private half never leaves the token)")
                print(OfflineKeyFile.publicText(key.publicKey))
                return
            }
            let (file, key) = OfflineKeyFile.generate()
            let descriptor: FileDescriptor
            do {
                descriptor = try FileDescriptor(path: out, flags: O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode: 0o600)
            } catch {
                throw CLIError("--out \(out): \(error) (it must be a new file)")
            }
            do {
                try descriptor.write(file.encoded())
                try descriptor.sync()
                try descriptor.close()
                try? FileSystem.syncDirectory(FileSystem.directory(of: out))
            } catch {
                FileSystem.remove(out)
                throw error
            }
            print("wrote \(out) (mode 0600): key \(ManifestSigningKey.keyID(for: key.publicKey))")
            print(file.publicKey)
        }
    }

    struct Add: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add a signed root document (depot root sign) as the app's next root version.",
            discussion: """
                The first must be version 1; each next one must be signed by the previous version's root keys (at its \
                threshold) and by its own. Refused, with nothing written, when it does not verify, has expired, or lists an \
                online key this origin does not hold in force. A running origin signs every channel's live manifest again \
                with the new chain within seconds. Adding the same document again changes nothing.
                """
        )
        @OptionGroup var data: DataOptions
        @Option(help: "The app.") var app: String
        @Argument(help: "The signed root document.") var file: String

        func run() throws {
            let admin = try RootAdmin(dataPath: data.data)
            let (addition, channels) = try admin.add(try FileSystem.readFile(file, limit: 1 << 20), app: app)
            let document = addition.root.document
            if addition.added {
                print("added root version \(document.version) of \(app): a running origin signs its live manifests again with it within seconds; `depot keys export --app \(app)` now pins it")
            } else {
                print("root version \(document.version) of \(app) is already added; nothing changed")
            }
            for line in Show.channelLines(channels, app: app) { print(line) }
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the app's root versions, their keys (ids), thresholds, protected channels and expiry.")
        @OptionGroup var data: DataOptions
        @Option(help: "The app.") var app: String

        func run() throws {
            let admin = try RootAdmin(dataPath: data.data)
            guard let (trust, channels) = try admin.show(app) else {
                print("\(app) has no root of trust: its builds trust the manifest signing keys they were exported with (depot root sign, then depot root add)")
                return
            }
            let format = ISO8601DateFormatter()
            let inForce = try admin.signingKeysInForce()
            for envelope in trust.envelopes {
                guard let bytes = envelope.payloadBytes, let document = try? RootDocument.decode(bytes) else { continue }
                let newest = document.version == trust.newest.document.version
                print("version \(document.version)\(newest ? " (newest)" : ""): payload sha256 \(Hex.encode(SHA256Hasher.hash(bytes))), expires \(format.string(from: document.expiresAt))")
                guard newest else { continue }
                let ids = { (keys: [Ed25519PublicKey]) in keys.map(ManifestSigningKey.keyID).joined(separator: ", ") }
                print("  root keys (\(document.rootThreshold) of \(document.rootKeys.count)): \(ids(try document.rootPublicKeys()))")
                print("  online keys: " + (try document.onlinePublicKeys()).map { key in
                    let id = ManifestSigningKey.keyID(for: key)
                    return id + (inForce.contains(id) ? " (in force here)" : " (not in force here)")
                }.joined(separator: ", "))
                print("  release keys (\(document.releaseThreshold) of \(document.releaseKeys.count)): \(document.releaseKeys.isEmpty ? "none" : ids(try document.releasePublicKeys()))")
                print("  protected channels: \(document.protectedChannels.isEmpty ? "none" : document.protectedChannels.joined(separator: ", "))")
                if document.expiresAt < WallClock.now().addingTimeInterval(30 * 86_400) {
                    print("  warning: it expires within 30 days; after that, devices that reached it refuse new manifests: sign version \(document.version + 1) (depot root sign --previous) and add it")
                }
            }
            for line in Self.channelLines(channels, app: app) { print(line) }
        }

        /// A line per protected channel: what it serves, and whether a statement binds it.
        static func channelLines(_ channels: [RootAdmin.ChannelState], app: String) -> [String] {
            channels.map { state in
                guard let serving = state.serving else { return "\(state.channel): protected, serves no release yet" }
                if let signed = state.signedRelease {
                    return "\(state.channel): protected, serves release \(serving), signed (release \(signed)'s statement, \(state.signers) signature\(state.signers == 1 ? "" : "s"))"
                }
                return "\(state.channel): protected, serves release \(serving), NOT signed: devices pinning this root refuse it until you sign it: depot channels promote --server URL --app \(app) --channel \(state.channel) --release \(serving) --sign RELEASE-KEY.json"
            }
        }
    }
}

/// Reading the operator's offline files.
enum OfflineFiles {
    /// The key a `--key`/`--sign` names: a key file (depot root keygen), or a pkcs11: URI (RFC
    /// 7512) naming a key in a hardware token, which signs there.
    static func key(_ path: String) throws -> any Ed25519Signer {
        if PKCS11URI.isURI(path) { return try tokenKey(path, generate: false) }
        return try OfflineKeyFile.load(try FileSystem.readFile(path, limit: 1 << 16), path: path)
    }

    /// The token key `uri` names (or a new one generated there).
    static func tokenKey(_ uri: String, generate: Bool) throws -> PKCS11Key {
        do {
            let parsed = try PKCS11URI(uri)
            if parsed.pinValue != nil {
                FileHandle.standardError.write(Data("note: pin-value= puts the token's PIN on the command line (ps, shell history): prefer pin-source=file:PATH or DEPOT_PKCS11_PIN\n".utf8))
            }
            return try generate ? PKCS11Key.generate(parsed) : PKCS11Key.open(parsed)
        } catch {
            throw CLIError("\(error)")
        }
    }

    /// A signed document (a root, a statement) in a file.
    static func envelope(_ path: String, what: String) throws -> Envelope {
        guard let envelope = try? Envelope.decode(try FileSystem.readFile(path, limit: 16 << 20)) else {
            throw CLIError("\(path) is not \(what) (a signed envelope's JSON)")
        }
        return envelope
    }

    /// A base64 Ed25519 public key given on the command line.
    static func publicKey(_ text: String, option: String) throws -> Ed25519PublicKey {
        guard let data = Data(base64Encoded: text), let key = try? Ed25519PublicKey(rawRepresentation: Array(data)) else {
            throw ValidationError("\(option) \(text.prefix(60)) is not a base64 Ed25519 public key (depot root keygen prints one)")
        }
        return key
    }

    /// Writes a document's JSON (replacing the file: what a signer passes on).
    static func write(_ envelope: Envelope, to path: String) throws {
        try FileSystem.writeAtomically(envelope.encoded() + [10], to: path)
    }
}
