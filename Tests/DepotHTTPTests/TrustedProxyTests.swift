import DepotHTTP
import DepotTestSupport
import Foundation
import Synchronization
import Testing

/// `X-Forwarded-For` believed from trusted proxies only: the client a request is counted and
/// logged as.
@Suite("Trusted proxies and X-Forwarded-For")
struct TrustedProxyTests {
    /// Answers `client peer`; keeps the exchange records' client addresses.
    final class EchoHandler: HTTPHandler {
        let records = Mutex<[String]>([])
        func handle(_ request: HTTPRequest) -> HTTPDisposition {
            .respond(.bytes(Array("\(request.clientAddress ?? "-") \(request.peerAddress ?? "-")".utf8), contentType: "text/plain"))
        }
        func completed(_ record: HTTPExchangeRecord) { records.withLock { $0.append(record.clientAddress ?? "-") } }
    }

    static func proxies(_ networks: String...) -> TrustedProxies { TrustedProxies(networks.map { IPNetwork($0)! }) }

    @Test("Networks: IPv4 and IPv6 prefixes, single addresses, IPv4-mapped peers; malformed ones refused")
    func networks() {
        #expect(IPNetwork("10.0.0.0/8")!.contains(IPAddress("10.200.1.2")!))
        #expect(!IPNetwork("10.0.0.0/8")!.contains(IPAddress("11.0.0.1")!))
        #expect(IPNetwork("10.0.0.0/8")!.contains(IPAddress("::ffff:10.0.0.1")!), "an IPv4 peer on an IPv6 listener")
        #expect(IPNetwork("127.0.0.1")!.contains(IPAddress("127.0.0.1")!) && !IPNetwork("127.0.0.1")!.contains(IPAddress("127.0.0.2")!))
        #expect(IPNetwork("2001:db8::/32")!.contains(IPAddress("2001:db8:ffff::1")!))
        #expect(!IPNetwork("2001:db8::/32")!.contains(IPAddress("2001:db9::1")!))
        #expect(IPNetwork("::/0")!.contains(IPAddress("2001:db9::1")!))
        #expect(IPNetwork("0.0.0.0/0")!.contains(IPAddress("203.0.113.9")!) && !IPNetwork("0.0.0.0/0")!.contains(IPAddress("2001:db8::1")!))
        #expect(IPNetwork("fd00::/8")!.contains(IPAddress("fdab::1")!))
        for bad in ["", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/-1", "::/129", "example.com", "10.0.0.0/8/8", "10.0.0", "10.0.0.0 /8", "1.2.3.4\u{0}"] {
            #expect(IPNetwork(bad) == nil, "\(bad)")
        }
        #expect(IPNetwork("10.0.0.0/8")!.description == "10.0.0.0/8" && IPNetwork("2001:db8::/32")!.description == "2001:db8::/32")
    }

    @Test("The client is the right-most forwarded address that is not a trusted proxy; an untrusted peer is itself, whatever it sends")
    func resolution() {
        let edge = Self.proxies("127.0.0.1", "10.0.0.0/8")
        func client(_ peer: String, _ values: [String], _ proxies: TrustedProxies = edge) -> String {
            proxies.client(peer: IPAddress(peer)!, forwardedFor: values).description
        }
        #expect(client("127.0.0.1", ["203.0.113.7"]) == "203.0.113.7")
        // What the client sent itself stays to the left of what the edge appended.
        #expect(client("127.0.0.1", ["198.51.100.1, 203.0.113.7"]) == "203.0.113.7")
        #expect(client("127.0.0.1", ["198.51.100.1", "203.0.113.7"]) == "203.0.113.7", "two fields are one list, in order")
        // A chain of trusted hops is walked through.
        #expect(client("127.0.0.1", ["198.51.100.1, 203.0.113.7, 10.1.2.3"]) == "203.0.113.7")
        #expect(client("127.0.0.1", ["10.9.9.9, 10.1.2.3"]) == "10.9.9.9", "all trusted: the left-most")
        // Garbage where an address should be stops at the last trusted hop.
        #expect(client("127.0.0.1", ["203.0.113.7, unknown"]) == "127.0.0.1")
        #expect(client("127.0.0.1", ["203.0.113.7, 10.1.2.3, ,"]) == "127.0.0.1")
        #expect(client("127.0.0.1", ["garbage, 10.1.2.3"]) == "10.1.2.3")
        // Forms proxies write: ports, brackets, IPv6, IPv4-mapped.
        #expect(client("127.0.0.1", ["203.0.113.7:4711"]) == "203.0.113.7")
        #expect(client("127.0.0.1", ["[2001:db8::7]:443"]) == "2001:db8::7")
        #expect(client("127.0.0.1", [" 2001:DB8:0:0::7 "]) == "2001:db8::7")
        #expect(client("127.0.0.1", ["::ffff:203.0.113.7"]) == "203.0.113.7")
        #expect(client("127.0.0.1", ["[2001:db8::7"]) == "127.0.0.1")
        // Not a trusted peer: its header means nothing.
        #expect(client("192.0.2.50", ["203.0.113.7"]) == "192.0.2.50")
        #expect(client("127.0.0.1", ["203.0.113.7"], .none) == "127.0.0.1")
        // A long header is walked 64 hops at most.
        #expect(client("127.0.0.1", [Array(repeating: "10.0.0.1", count: 100).joined(separator: ",")]) == "10.0.0.1")
    }

    @Test("A live server: from a trusted peer the handler and the exchange record see the forwarded client, the peer kept apart; from another peer the header is ignored")
    func liveServer() async throws {
        for (trusted, expected) in [(Self.proxies("127.0.0.1/32"), "203.0.113.7"), (Self.proxies("10.0.0.0/8", "::1"), "127.0.0.1")] {
            let handler = EchoHandler()
            var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 2)
            configuration.trustedProxies = trusted
            let server = try HTTPServer(configuration: configuration, handler: handler)
            defer { server.stop() }
            let answers = try RawHTTP.send(port: server.port,
                "GET /a HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.1, 203.0.113.7\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            #expect(answers.map(\.bodyText) == ["\(expected) 127.0.0.1", "127.0.0.1 127.0.0.1"])
            Eventually.wait { handler.records.withLock { $0.count } == 2 }
            #expect(handler.records.withLock { $0 } == [expected, "127.0.0.1"])
        }
    }
}
