import ArgumentParser
import DepotCore
import Foundation

struct Inspect: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Describe a pack container's header, or a manifest envelope (signatures are not checked)."
    )

    @Argument(help: "Pack files or manifest envelopes; several get a heading each.") var files: [String]

    func validate() throws {
        guard !files.isEmpty else { throw ValidationError("name a pack file or a manifest envelope") }
    }

    func run() throws {
        for (index, file) in files.enumerated() {
            if files.count > 1 { print((index == 0 ? "" : "\n") + "== \(file)") }
            try describe(file)
        }
    }

    private func describe(_ file: String) throws {
        let fd = try FileDescriptor.openForReading(file)
        var head = [UInt8](repeating: 0, count: 512)
        let n = try head.withUnsafeMutableBytes { try fd.read(into: $0, at: 0) }
        if n >= 4 && Array(head[0..<4]) == PackHeader.magic {
            let (header, size) = try PackHeader.parse(head[0..<n])
            let total = try fd.size()
            let layout = try header.layout(containerSize: total)
            print("pack container v1 (AES-256-GCM, HKDF-SHA256)")
            print("key id:        \(header.keyID)")
            print("segment size:  \(header.segmentSize)")
            print("header bytes:  \(size)")
            print("container:     \(total) bytes, \(layout.segments) segments")
            print("plaintext:     \(layout.plaintextSize) bytes")
            print("salt:          \(Hex.encode(header.salt))")
            print("nonce prefix:  \(Hex.encode(header.noncePrefix))")
            return
        }
        let envelope = try Envelope.decode(FileSystem.readFile(file))
        guard let payload = Data(base64Encoded: envelope.payload) else { throw EnvelopeError.malformed }
        print("DSSE envelope, payload type \(envelope.payloadType), signed by \(envelope.signatures.map(\.keyid).joined(separator: ", "))")
        print("(signatures not checked; `depot sync` checks them against the app's configuration)")
        print(String(decoding: payload, as: UTF8.self))
    }
}
