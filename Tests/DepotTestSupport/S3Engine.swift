import Foundation

/// A real S3 engine for a test: OpenStack Swift with s3api on loopback, started by
/// `Deploy/s3/swift-s3.sh` in a folder of its own, stopped by ``stop()``.
public final class S3Engine: @unchecked Sendable {
    // @unchecked: immutable after init but for the folder's removal, done once by the owner.
    public let folder: TemporaryDirectory
    public let endpoint: URL
    public let accessKey: String
    public let secretKey: String
    /// A second key pair of the same account (tempauth's test:tester2), for key rotation.
    public let accessKey2: String
    public let secretKey2: String
    public let region: String
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Deploy/s3/swift-s3.sh").path

    public init() throws {
        folder = TemporaryDirectory("depot-s3")
        let started = try Processes.run("/bin/bash", [Self.script, "start", folder.path])
        let line = started.stdout.split(separator: "\n").first { $0.hasPrefix("endpoint=") } ?? ""
        var fields: [String: String] = [:]
        for pair in line.split(separator: " ") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
        }
        guard started.status == 0, let endpoint = fields["endpoint"].flatMap(URL.init(string:)) else {
            folder.remove()
            throw POSIXError(.ECONNREFUSED)
        }
        (self.endpoint, accessKey, secretKey, region) = (endpoint, fields["access"] ?? "", fields["secret"] ?? "", fields["region"] ?? "us-east-1")
        (accessKey2, secretKey2) = (fields["access2"] ?? "", fields["secret2"] ?? "")
    }

    /// Stops every process of the engine (its data stays until ``remove()``).
    public func stop() { _ = try? Processes.run("/bin/bash", [Self.script, "stop", folder.path]) }

    /// Starts it again on the same data and ports.
    public func restart() throws {
        _ = try Processes.run("/bin/bash", [Self.script, "start", folder.path])
    }

    public func remove() {
        stop()
        folder.remove()
    }
}
