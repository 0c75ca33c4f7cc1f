import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// Secrets stay where they belong: tokens in the hands of who got them (and as hashes in
/// tokens.json), keys under keys/.
@Suite("Secrets", .serialized)
struct SecretsTests {
    @Test("No token, credential or key shows in the server's output (trace level) after its first-start banner, in any answer, in /metrics, or in any file outside keys/ and tokens.json")
    func noLeaks() throws {
        let work = TemporaryDirectory("depot-secrets")
        defer { work.remove() }
        let data = work.path + "/data"
        let metricsToken = "metrics-" + String(repeating: "m", count: 24)
        try FileSystem.createDirectory(work.path)
        try FileSystem.writeAtomically(Array(metricsToken.utf8), to: work.path + "/metrics-token")
        let server = try ServeProcess(data: data, environment: ["DEPOT_LOG_LEVEL": "trace", "DEPOT_METRICS_TOKEN_FILE": work.path + "/metrics-token"])
        let port = UInt16(server.port)!
        let app = "com.example.dev"
        let token = server.token, admin = server.adminToken
        #expect(!token.isEmpty && !admin.isEmpty)

        // Download credentials, as an operator turns them on.
        let credentials = try Processes.run(Processes.depotBinary, ["apps", "credentials", app, "--enable", "--data", data])
        let pair = try #require(credentials.stdout.split(separator: "\n").last.map(String.init))
        let password = String(pair.split(separator: ":", maxSplits: 1).last ?? "")
        #expect(password.count >= 16, "\(credentials.stdout)")
        let basic = Data(pair.utf8).base64EncodedString()
        let wrongBasic = Data("\(pair.split(separator: ":").first ?? ""):\(password.dropLast())x".utf8).base64EncodedString()
        let nearMiss = String(token.dropLast()) + (token.last == "A" ? "B" : "A")

        var answers: [RawHTTP.Response] = []
        func send(_ head: String, body: [UInt8] = []) throws -> Int {
            let response = try #require(try RawHTTP.send(port: port, head + "Connection: close\r\n\r\n", body: body, timeout: 10).first)
            answers.append(response)
            return response.status
        }
        let pack = [UInt8](repeating: 7, count: 100_000)
        #expect(try send("PUT /v1/apps/\(app)/packs/level?release=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nContent-Length: \(pack.count)\r\n", body: pack) == 201)
        #expect(try send("PUT /v1/apps/\(app)/packs/level HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(nearMiss)\r\nContent-Length: 3\r\n", body: [1, 2, 3]) == 401)
        let adminStatus = try send("PUT /v1/apps/\(app)/packs/other HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(admin)\r\nContent-Length: 3\r\n", body: [1, 2, 3])
        #expect(adminStatus == 202, "\(answers.last?.bodyText ?? "")")
        #expect(try send("POST /v1/apps/\(app)/uploads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(nearMiss)\r\nTus-Resumable: 1.0.0\r\nUpload-Length: 10\r\nUpload-Metadata: pack bGV2ZWw=\r\nContent-Length: 0\r\n") == 401)
        #expect(try send("GET /v1/apps/\(app)/manifest HTTP/1.1\r\nHost: x\r\nAuthorization: Basic \(wrongBasic)\r\n") == 401)
        #expect(try send("GET /v1/apps/\(app)/manifest HTTP/1.1\r\nHost: x\r\nAuthorization: Basic \(basic)\r\n") == 200)
        #expect(try send("GET /v1/apps/\(app)/manifest HTTP/1.1\r\nHost: x\r\n") == 401)
        #expect(try send("GET /metrics HTTP/1.1\r\nHost: x\r\n") == 401)
        #expect(try send("GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(metricsToken)\r\n") == 200)
        server.process.terminate()
        server.process.waitUntilExit()
        let output = server.remainingOutput() + server.errorOutput()
        #expect(output.contains("access") || output.contains("status=201"), "the trace-level log was captured")

        // What must not appear anywhere but where it belongs.
        var secrets = [token, admin, nearMiss, password, basic, wrongBasic]
        for file in FileSystem.contents(of: data + "/keys") {
            // A lock file (`LockedFile`) is empty: it holds nothing, not even a key.
            if file.hasSuffix(".lock") {
                #expect(FileSystem.fileSize(data + "/keys/" + file) == 0, "keys/\(file) must be empty")
                continue
            }
            let text = String(decoding: try FileSystem.readFile(data + "/keys/" + file), as: UTF8.self)
            let values = text.split(separator: "\"").map(String.init).filter { $0.count >= 40 && Data(base64Encoded: $0) != nil }
            #expect(!values.isEmpty, "keys/\(file) holds keys")
            secrets += values + values.compactMap { Data(base64Encoded: $0).map { Hex.encode(Array($0)) } }
        }
        func check(_ text: String, _ place: String) {
            for secret in secrets where text.contains(secret) {
                Issue.record("a secret (\(secret.prefix(6))…) appears in \(place)")
            }
        }
        check(output, "the server's output")
        for answer in answers { check(answer.bodyText + answer.headers.map { "\($0.0): \($0.1)" }.joined(separator: "\n"), "an answer (\(answer.status))") }
        let everything = FileManager.default.enumerator(atPath: data)
        var scanned = 0
        while let relative = everything?.nextObject() as? String {
            let path = data + "/" + relative
            guard !FileSystem.isDirectory(path), !relative.hasPrefix("keys/"), relative != "tokens.json" else { continue }
            check(String(decoding: try FileSystem.readFile(path), as: UTF8.self), relative)
            scanned += 1
        }
        #expect(scanned >= 5, "files scanned: \(scanned)")
    }
}
