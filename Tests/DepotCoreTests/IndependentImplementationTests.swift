import DepotCore
import Foundation
import Testing

/// The PackContainer article must be enough to build a decryptor: a Python implementation
/// written from it alone (Fixtures/independent_pack.py) must decrypt what PackEncryptor writes.
@Suite("Independent implementation of the documented format")
struct IndependentImplementationTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/independent_pack.py").path

    /// A Python 3 with the `cryptography` package (Deploy/setup.sh installs one).
    static func python() -> String? {
        for candidate in ["/usr/bin/python3", "/usr/local/bin/python3"] + (ProcessInfo.processInfo.environment["PATH"] ?? "")
            .split(separator: ":").map({ "\($0)/python3" }) where FileManager.default.isExecutableFile(atPath: candidate) {
            let probe = Process()
            probe.executableURL = URL(fileURLWithPath: candidate)
            probe.arguments = ["-c", "import cryptography"]
            probe.standardError = FileHandle.nullDevice
            guard (try? probe.run()) != nil else { continue }
            probe.waitUntilExit()
            if probe.terminationStatus == 0 { return candidate }
        }
        return nil
    }

    @Test("Python decrypts packs written by PackEncryptor", arguments: [0, 1, 64, 1000])
    func pythonDecrypts(size: Int) throws {
        let python = try #require(Self.python(), "no python3 with the cryptography package: run Deploy/setup.sh")
        let key = SecureRandom.bytes(32)
        let plaintext = SecureRandom.bytes(size)
        let container = try PackEncryptor.encrypt(plaintext, header: PackHeader(keyID: "k-test", segmentSize: 64), masterKey: key)
        let path = FileManager.default.temporaryDirectory.path + "/independent-\(Hex.encode(SecureRandom.bytes(4))).pack"
        try FileSystem.writeAtomically(container, to: path)
        defer { FileSystem.remove(path) }

        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [Self.script, "decrypt", path, "k-test", Hex.encode(key)]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        #expect(Array(data) == plaintext)
    }

    @Test("Python reproduces the worked example byte for byte")
    func pythonExample() throws {
        let python = try #require(Self.python(), "no python3 with the cryptography package: run Deploy/setup.sh")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [Self.script, "example"]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(text.contains("dataKey \(WorkedExample.dataKey)"))
        #expect(text.contains("container \(WorkedExample.container)"))
    }
}
