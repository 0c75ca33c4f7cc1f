import Foundation

/// How the client reaches servers, beyond the URL: what it trusts and where it connects.
public struct TransportOptions: Sendable, Hashable {
    /// A PEM file of CA certificates to trust for https instead of the system's store (a
    /// private CA; the tests'). Honoured by the Linux engine; on Apple platforms the system's
    /// trust settings apply (install a private CA with a configuration profile).
    public var caFile: String?
    /// Where to connect for a `host:port`, instead of looking the host up: `["assets.example.com:443":
    /// "192.0.2.7"]` reaches one edge of several behind one name, as curl's `--resolve` does. The
    /// name still goes in `Host`, SNI and the certificate check. Linux engine only.
    public var resolve: [String: String]
    /// Seconds a response may take, from the request sent to its head and, for a body held in
    /// memory (a manifest, an API answer), to its last byte: beside the per-read timeout, so a
    /// server that trickles a byte at a time cannot hold a call open.
    public var responseDeadline: TimeInterval
    /// Bytes a second a streamed body (a pack) must average over each window of the per-read
    /// timeout, or the download fails (and is retried from where it stopped).
    public var minimumRate: Int64

    public init(caFile: String? = nil, resolve: [String: String] = [:], responseDeadline: TimeInterval = 120, minimumRate: Int64 = 1024) {
        self.caFile = caFile
        self.resolve = resolve
        self.responseDeadline = responseDeadline
        self.minimumRate = minimumRate
    }
}
