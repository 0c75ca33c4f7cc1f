@testable import DepotServer
import DepotTestSupport
import Testing

@Suite("CBOR: the App Attest decoder")
struct CBORTests {
    func refused(_ bytes: [UInt8]) -> String? {
        do {
            _ = try CBORDecoder.decode(bytes)
            return nil
        } catch {
            return error.reason
        }
    }

    @Test("Apple's sample attestation decodes to fmt, attStmt {x5c, receipt} and authData, and encodes back to the same bytes")
    func appleSample() throws {
        let bytes = AppleAttestationSample.object
        let value = try CBORDecoder.decode(bytes)
        #expect(value["fmt"] == .text("apple-appattest"))
        guard case .array(let x5c)? = value["attStmt"]?["x5c"] else {
            Issue.record("no x5c")
            return
        }
        #expect(x5c.map { $0.byteString?.count } == [1057, 583])
        #expect(value["authData"]?.byteString?.count == 226)
        #expect(value["attStmt"]?["receipt"]?.byteString?.isEmpty == false)
        #expect(value.encoded == bytes)
    }

    @Test("Every proper prefix of Apple's sample is refused as truncated, never read past its end")
    func truncated() {
        let bytes = AppleAttestationSample.object
        for count in 0..<bytes.count {
            #expect(refused(Array(bytes.prefix(count))) != nil, "prefix \(count)")
        }
    }

    @Test("Nesting: 16 levels are read, 17 are refused")
    func depth() throws {
        #expect(refused([UInt8](repeating: 0x81, count: 15) + [0x80]) == nil)
        #expect(refused([UInt8](repeating: 0x81, count: 16) + [0x80])?.contains("nested deeper than 16") == true)
        #expect(refused([UInt8](repeating: 0xa1, count: 10_000)) != nil)
        #expect(refused([UInt8](repeating: 0x81, count: 100_000)) != nil)
    }

    @Test("Declared lengths beyond the bytes left are refused before anything is allocated")
    func hugeLengths() {
        for head: [UInt8] in [[0x5b], [0x7b], [0x9b], [0xbb]] {
            let reason = refused(head + [UInt8](repeating: 0xff, count: 8) + [0, 0, 0])
            #expect(reason?.contains("declared length of 18446744073709551615 with 3 bytes left") == true, "\(head)")
        }
        #expect(refused([0x5a, 0x00, 0x01, 0x00, 0x00] + [UInt8](repeating: 0, count: 100))?.contains("declared length of 65536") == true)
        // A map of n entries needs at least 2n bytes.
        #expect(refused([0xa2, 0x01, 0x02, 0x03]) != nil)
        #expect(refused([0x19, 0x01]) == "truncated: an argument of 2 bytes, 1 left")
    }

    @Test("Indefinite lengths, tags, floats, reserved values, bad UTF-8 and duplicate map keys are refused")
    func refusals() {
        #expect(refused([0x5f, 0x41, 0x00, 0xff])?.contains("indefinite") == true)
        #expect(refused([0x7f, 0x61, 0x61, 0xff])?.contains("indefinite") == true)
        #expect(refused([0x9f, 0x01, 0xff])?.contains("indefinite") == true)
        #expect(refused([0xbf, 0x01, 0x02, 0xff])?.contains("indefinite") == true)
        #expect(refused([0xc2, 0x41, 0x01])?.contains("tags") == true)
        #expect(refused([0xf9, 0x3c, 0x00])?.contains("floating-point") == true)
        #expect(refused([0x1c])?.contains("reserved") == true)
        #expect(refused([0xf8, 0x10])?.contains("simple value below 32") == true)
        #expect(refused([0x62, 0xc3, 0x28])?.contains("UTF-8") == true)
        #expect(refused([0xa2, 0x61, 0x61, 0x01, 0x61, 0x61, 0x02])?.contains("appears twice") == true)
        #expect(refused([0x01, 0x02])?.contains("1 bytes after the item") == true)
    }

    @Test("A prefix decode reports how many bytes the item used and leaves the rest")
    func prefix() throws {
        let (value, used) = try CBORDecoder.decodePrefix([0xa1, 0x01, 0x42, 0xaa, 0xbb, 0xde, 0xad])
        #expect(value[integer: 1] == .bytes([0xaa, 0xbb]))
        #expect(used == 5)
        let simple = try CBORDecoder.decode([0x84, 0xf4, 0xf5, 0xf6, 0x38, 0x63])
        #expect(simple == .array([.bool(false), .bool(true), .null, .negative(99)]))
    }
}
