#if os(Linux)
@testable import DepotCore
import Testing

/// How the client's TLS (OpenSSL, Linux) checks a server's identity: never not at all.
@Suite("TLS identity")
struct TLSIdentityTests {
    @Test("IP literals as inet_pton reads them are checked as addresses; resolver-only forms as names (no certificate passes); what cannot be checked is refused (L7)", arguments: [
        ("127.0.0.1", TLSSession.HostKind.address), ("::1", .address), ("2001:db8::7", .address),
        ("10.1", .name), ("2130706433", .name), ("0x7f.1", .name), ("assets.example.com", .name),
        ("fe80::1%eth0", .unusable), ("a b", .unusable), ("", .unusable), ("host\u{0}.example.com", .unusable),
    ])
    func hostKinds(_ host: String, _ kind: TLSSession.HostKind) {
        #expect(TLSSession.kind(of: host) == kind)
    }

    @Test("A session whose identity cannot be checked is refused before any handshake")
    func refusedUnusable() throws {
        let context = try TLSClientContext(caFile: nil)
        #expect(throws: TLSError.self) { try context.connect(socket: -1, host: "fe80::1%eth0") }
    }
}
#endif
