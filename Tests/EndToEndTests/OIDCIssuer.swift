import DepotTestSupport
import Foundation

/// The loopback OIDC issuer of the trusted-publishing tests (`Fixtures/oidc_issuer.py`): its own
/// keys, discovery document and JWKS, GitHub Actions' token service, and tokens minted on request.
final class OIDCIssuer {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/oidc_issuer.py").path
    let process = Process()
    let port: UInt16
    private let output = Pipe()

    init() throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", Self.script]
        process.standardOutput = output
        try process.run()
        var line = ""
        while !line.contains("\n") {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line += String(decoding: chunk, as: UTF8.self)
        }
        port = UInt16(line.split(separator: " ").last?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 0
    }

    var url: String { "http://127.0.0.1:\(port)" }

    /// Stops it at once (SIGKILL: a child may inherit a mask that blocks SIGTERM).
    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    deinit { stop() }

    @discardableResult
    func post(_ path: String, _ json: Any = [String: Any]()) throws -> [UInt8] {
        let body = Array(try JSONSerialization.data(withJSONObject: json))
        let answer = try RawHTTP.send(port: port, "POST \(path) HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n", body: body, timeout: 30)
        return answer.first?.body ?? []
    }

    /// A token with `claims` (the issuer's `iss`, `iat`, `nbf`, a 5-minute `exp` unless given),
    /// signed as `alg` asks with `key`.
    func mint(_ claims: [String: Any], alg: String = "RS256", key: String = "rsa-1", kid: String? = nil) throws -> String {
        let now = Int(Date().timeIntervalSince1970)
        let full = ["iss": url, "iat": now, "nbf": now, "exp": now + 300, "jti": UUID().uuidString].merging(claims) { $1 }
        var body: [String: Any] = ["claims": full, "alg": alg, "key": key]
        if let kid { body["kid"] = kid }
        return String(decoding: try post("/mint", body), as: UTF8.self)
    }

    /// How many times the discovery document and the JWKS were fetched, and every path asked for.
    func fetches() throws -> (discovery: Int, jwks: Int, paths: [String]) {
        let answer = try RawHTTP.send(port: port, "GET /stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first
        let object = try JSONSerialization.jsonObject(with: Data(answer?.body ?? [])) as? [String: Any] ?? [:]
        return (object["discovery"] as? Int ?? 0, object["jwks"] as? Int ?? 0, object["paths"] as? [String] ?? [])
    }
}
