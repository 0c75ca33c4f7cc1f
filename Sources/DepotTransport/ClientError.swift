import DepotCore
import Foundation

/// Why a sync (or a publish) failed, in one sentence.
public struct ClientError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The kinds of failure, for callers that branch on them.
    public enum Kind: Hashable, Sendable {
        case http, transport, manifest, rollback, expired, wrongApp, integrity, install, state, cancelled, tooLarge, noSpace
        /// The manifest was signed for another channel than the one asked for.
        case wrongChannel
        /// TLS refused: an untrusted or mismatched certificate, a failed handshake. Not retried.
        case tls
        /// The delivered file was gone before it was installed: the system purges finished
        /// downloads and `Library/Caches` under low storage. The device's condition, not the
        /// release's: not reported, and downloaded again at the next event.
        case purged
    }
    /// What failed.
    public let kind: Kind
    public let description: String
    /// The HTTP status, for ``Kind/http`` failures that had one.
    public let status: Int?

    package init(_ kind: Kind, _ description: String, status: Int? = nil) {
        self.kind = kind
        self.description = description
        self.status = status
    }

    package static func http(_ status: Int, _ url: String, _ body: String) -> ClientError {
        ClientError(.http, "HTTP \(status) from \(url)\(body.isEmpty ? "" : ": " + body)", status: status)
    }
    package static func transport(_ url: String, _ error: any Error) -> ClientError { ClientError(.transport, "cannot reach \(url): \(explain(error))") }
    package static func tls(_ url: String, _ why: String) -> ClientError { ClientError(.tls, "TLS with \(url) failed: \(why)") }

    /// A sentence for a transport error (Foundation on Linux describes URLError as a bare code).
    package static func explain(_ error: any Error) -> String {
        if let error = error as? URLError {
            switch error.code {
            case .timedOut: return "timed out"
            case .networkConnectionLost: return "the connection was lost"
            case .cannotFindHost: return "unknown host"
            case .cannotConnectToHost: return "connection refused"
            case .badServerResponse: return "malformed response"
            case .unsupportedURL: return "unsupported URL"
            case .cancelled: return "cancelled"
            default: return "URL error \(error.code.rawValue)"
            }
        }
        if let error = error as? POSIXError { return System.describe(error.code.rawValue).lowercased() }
        return "\(error)"
    }
    package static func manifest(_ why: String) -> ClientError { ClientError(.manifest, "manifest refused: \(why)") }
    package static func rollback(offered: Int, floor: Int) -> ClientError {
        ClientError(.rollback, "manifest refused: version \(offered) is lower than version \(floor) already accepted (rollback)")
    }
    package static func expired(_ version: Int) -> ClientError { ClientError(.expired, "manifest refused: version \(version) has expired") }
    package static func wrongApp(_ app: String) -> ClientError { ClientError(.wrongApp, "manifest refused: it is for app \(app)") }
    package static func unsendableField(_ name: String, url: String) -> ClientError {
        ClientError(.transport, "not sent to \(url): header field \(name.prefix(40)) has a CR, LF or NUL in its value, or a name that is not a token")
    }
    package static func wrongChannel(_ signed: String?, asked: String) -> ClientError {
        ClientError(.wrongChannel, "manifest refused: it was signed for channel \(signed ?? "production (it names none)"), not \(asked)")
    }
    package static func integrity(_ pack: String, _ why: String) -> ClientError { ClientError(.integrity, "pack \(pack) refused: \(why)") }
    package static func install(_ pack: String, _ error: any Error) -> ClientError { ClientError(.install, "pack \(pack) not installed: \(error)") }
    package static func state(_ why: String) -> ClientError { ClientError(.state, "install state: \(why)") }
    package static let cancelled = ClientError(.cancelled, "cancelled")
    package static func noSpace(_ destination: String) -> ClientError {
        ClientError(.noSpace, "no space left on the device of \(destination); nothing installed was changed")
    }
    package static func sizeMismatch(_ pack: String, expected: Int64, got: Int64) -> ClientError {
        ClientError(.integrity, "pack \(pack) refused: the manifest says \(expected) bytes, the server sent \(got)")
    }
    package static func purged(_ pack: String, _ file: String) -> ClientError {
        ClientError(.purged, "pack \(pack) not installed: its delivered file \(file) is gone (the system purges finished downloads under low storage); it is downloaded again at the next event")
    }
    package static func tooLarge(_ url: String, _ limit: Int64) -> ClientError { ClientError(.tooLarge, "the response from \(url) is larger than \(limit) bytes") }
}
