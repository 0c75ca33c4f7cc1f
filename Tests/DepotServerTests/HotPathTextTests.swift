import DepotHTTP
@testable import DepotServer
import Testing

/// The text the origin writes on every request, byte for byte: access-log lines, blob paths,
/// entity tags (built in one buffer, see `TextAssembler`).
@Suite("Per-request text: access-log lines, blob paths, entity tags")
struct HotPathTextTests {
    @Test("An access-log line has every field, in a fixed order, the duration in milliseconds with three decimals", arguments: [
        (Duration.zero, "0.000"), (.microseconds(7), "0.007"), (.microseconds(1_005), "1.005"),
        (.microseconds(45_120), "45.120"), (.seconds(1633) + .microseconds(403), "1633000.403"),
    ])
    func accessLine(duration: Duration, text: String) {
        let record = HTTPExchangeRecord(
            method: "GET", path: "/v1/apps/com.example.dev/blobs/ab%20c", status: 206, bodyBytes: 50_332_475,
            duration: duration, route: "blob", clientAddress: "10.0.0.12", completedNormally: true
        )
        #expect(AccessLog.line(record) == "access bytes=50332475 client=10.0.0.12 complete=true duration_ms=\(text) "
            + "method=GET path=/v1/apps/com.example.dev/blobs/ab%20c route=blob status=206")
    }

    @Test("An exchange cut short, with no known client and no body, says so")
    func accessLineCut() {
        let record = HTTPExchangeRecord(
            method: "PUT", path: "/", status: 0, bodyBytes: 0, duration: .milliseconds(2), route: "other", clientAddress: nil, completedNormally: false
        )
        #expect(AccessLog.line(record) == "access bytes=0 client=- complete=false duration_ms=2.000 method=PUT path=/ route=other status=0")
    }

    @Test("A query, when there is one, follows the path: what a device adds to the download manifest's URL is kept")
    func accessLineQuery() {
        let record = HTTPExchangeRecord(
            method: "GET", path: "/v1/apps/com.example.game/download-manifest", status: 200, bodyBytes: 412, duration: .milliseconds(1),
            route: "download-manifest", clientAddress: "10.0.0.3", completedNormally: true, query: "platform=iOS"
        )
        #expect(AccessLog.line(record) == "access bytes=412 client=10.0.0.3 complete=true duration_ms=1.000 method=GET "
            + "path=/v1/apps/com.example.game/download-manifest query=platform=iOS route=download-manifest status=200")
    }

    @Test("Blob paths and entity tags")
    func pathsAndTags() {
        let sha = String(repeating: "ab", count: 32)
        #expect(DataFolder("/srv/depot/").blob(sha) == "/srv/depot/blobs/ab/" + sha)
        #expect(TextAssembler.quoted(sha) == "\"" + sha + "\"")
        #expect(TextAssembler.text(capacity: 32) { $0.append(Int64.min) } == "-9223372036854775808")
        #expect(TextAssembler.text(capacity: 9) { $0.append(Int64(0)); $0.append(" "); $0.append(Int64(1_000_000)) } == "0 1000000")
    }

    @Test("Pieces that do not fit are dropped, never written past the end")
    func overflow() {
        #expect(TextAssembler.text(capacity: 5) { $0.append("abc"); $0.append("defg"); $0.append("h") } == "abch")
        #expect(TextAssembler.text(capacity: 8) { $0.append(Int64(0)); $0.append(" "); $0.append(Int64(1_000_000)) } == "0 ")
        #expect(TextAssembler.text(capacity: 3) { $0.append(Int64(-42)); $0.append(Int64(-1)) } == "-42")
    }
}

@Suite("tus Upload-Metadata")
struct TusMetadataTests {
    @Test("Pairs, keys alone, spaces around; split as bytes, so a comma before a combining mark still separates pairs")
    func parse() throws {
        #expect(try TusMetadata.parse(" pack bGV2ZWw= ,release, sha256  YWJj") == ["pack": "level", "release": "", "sha256": "abc"])
        // Found by Deploy/fuzz (metadata): split by Character, ",\u{301}" was one grapheme and two pairs ran together.
        #expect(try TusMetadata.parse("pack bGV2ZWw=,\u{301}x ZXNz") == ["pack": "level", "\u{301}x": "ess"])
        #expect(throws: TusMetadata.Failure.notBase64(key: "pack")) { try TusMetadata.parse("pack %%%") }
        #expect(throws: TusMetadata.Failure.duplicate(key: "a")) { try TusMetadata.parse("a,a") }
        let pairs = ["pack": "level", "tags": "a, b", "release": ""]
        #expect(try TusMetadata.parse(TusMetadata.encode(pairs)) == pairs)
    }
}
