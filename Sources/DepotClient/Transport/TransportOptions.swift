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

    public init(caFile: String? = nil, resolve: [String: String] = [:]) {
        self.caFile = caFile
        self.resolve = resolve
    }
}
