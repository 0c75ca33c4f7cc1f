import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// What `TrustedPublishingTests` start and ask: an origin and an issuer side by side, calls,
/// exchanges asked again while the origin says to wait, the packs a channel serves.
extension TrustedPublishingTests {
    /// A running origin and issuer, and the data folder's path for `depot apps trust`.
    final class Setup {
        let work = TemporaryDirectory("depot-oidc")
        static let metricsToken = "metrics-token-for-the-oidc-tests"
        let issuer: OIDCIssuer
        private(set) var server: ServeProcess
        /// The publisher token the bootstrap printed (a person's, of every channel).
        let human: String
        var data: String { work.path + "/data" }
        var port: UInt16 { UInt16(server.port)! }

        /// `depot serve`'s variables besides the ones every setup sets (`DEPOT_TRUSTED_PROXIES`…).
        let environment: [String: String]

        init(environment: [String: String] = [:]) throws {
            issuer = try OIDCIssuer()
            try FileSystem.createDirectory(work.path + "/etc", mode: 0o700)
            try FileSystem.writeAtomically(Array(Self.metricsToken.utf8), to: work.path + "/etc/metrics-token", mode: 0o600)
            self.environment = Self.environment(work).merging(environment) { $1 }
            server = try ServeProcess(data: work.path + "/data", environment: self.environment)
            human = server.token
        }

        static func environment(_ work: TemporaryDirectory) -> [String: String] {
            ["DEPOT_LOG_LEVEL": "warning", "DEPOT_METRICS_TOKEN_FILE": work.path + "/etc/metrics-token"]
        }

        /// Stops the origin and starts it again on the same data folder (a deploy, a crash).
        func restart() throws {
            server.process.terminate()
            server.process.waitUntilExit()
            server = try ServeProcess(data: data, environment: environment, bootstrap: false)
        }

        deinit {
            server.process.terminate()
            server.process.waitUntilExit()
            issuer.stop()
            work.remove()
        }

        /// `depot apps trust APP …`; returns the rule id it printed.
        @discardableResult
        func trust(_ arguments: [String]) throws -> String {
            let result = try Processes.run(Processes.depotBinary, ["apps", "trust", TrustedPublishingTests.app, "--data", data] + arguments)
            #expect(result.status == 0, "depot apps trust: \(result.stderr)")
            return result.stdout.split(separator: "\t").first?.split(separator: " ").last.map(String.init) ?? ""
        }

        /// `POST …/oidc-token` with `jwt`, asked again while the issuer's keys are being fetched
        /// and when the origin's rate limit says to wait (its `Retry-After`).
        func exchange(_ jwt: String?, app: String = TrustedPublishingTests.app) throws -> RawHTTP.Response {
            let authorization = jwt.map { "Authorization: Bearer \($0)\r\n" } ?? ""
            var answer: RawHTTP.Response?
            try Eventually.wait(every: .milliseconds(50)) {
                answer = try RawHTTP.send(port: port, "POST /v1/apps/\(app)/oidc-token HTTP/1.1\r\nHost: x\r\n\(authorization)Content-Length: 0\r\nConnection: close\r\n\r\n").first
                if answer?.status == 429, let wait = answer?.header("Retry-After").flatMap(Double.init) {
                    Thread.sleep(forTimeInterval: wait)
                    return false
                }
                return answer.map(TrustedPublishingTests.code) != "oidc_keys_fetching"
            }
            return try #require(answer)
        }

        /// One `POST …/oidc-token`, never asked again; `forwardedFor` as an edge would add it.
        func attempt(_ jwt: String?, app: String = TrustedPublishingTests.app, forwardedFor: String? = nil) throws -> RawHTTP.Response {
            try #require(try Self.attempt(port: port, jwt, app: app, forwardedFor: forwardedFor))
        }

        static func attempt(port: UInt16, _ jwt: String?, app: String, forwardedFor: String?) throws -> RawHTTP.Response? {
            let authorization = jwt.map { "Authorization: Bearer \($0)\r\n" } ?? ""
            let forwarded = forwardedFor.map { "X-Forwarded-For: \($0)\r\n" } ?? ""
            return try RawHTTP.send(port: port, "POST /v1/apps/\(app)/oidc-token HTTP/1.1\r\nHost: x\r\n\(authorization)\(forwarded)Content-Length: 0\r\nConnection: close\r\n\r\n").first
        }

        /// A call with a bearer token.
        func call(_ method: String, _ path: String, token: String, body: [UInt8] = []) throws -> RawHTTP.Response {
            try #require(try RawHTTP.send(port: port, "\(method) /v1/apps/\(TrustedPublishingTests.app)\(path) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n", body: body, timeout: RawHTTP.changeWait).first)
        }

        /// The pack ids `channel` serves.
        func served(_ channel: String) throws -> [String] {
            let answer = try #require(try RawHTTP.send(port: port, "GET /v1/apps/\(TrustedPublishingTests.app)/channels/\(channel)/manifest HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").first)
            guard answer.status == 200 else { return [] }
            return try Manifest.decode(Array(try #require(Data(base64Encoded: Envelope.decode(answer.body).payload)))).packs.map(\.id)
        }

        /// `depot publish FILE --oidc …` as a CI job runs it: `environment` is the platform's.
        func publish(pack: String, channel: String, _ extra: [String], environment: [String: String]) throws -> Processes.Result {
            let file = try work.file(pack + ".bin", size: 4096, seed: UInt64(pack.utf8.count))
            return try Processes.run(Processes.depotBinary, [
                "publish", file, "--server", server.url, "--app", TrustedPublishingTests.app, "--pack", pack, "--release", "--channel", channel,
                "--quiet", "--oidc",
            ] + extra, environment: environment.merging(["DEPOT_TOKEN": "", "XDG_CACHE_HOME": work.path + "/cache"]) { $1 })
        }
    }

    /// The error code of an answer (`{"error": {"code": …, "message": …}}`).
    static func code(_ response: RawHTTP.Response) -> String {
        (((try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any])?["error"] as? [String: Any])?["code"] as? String ?? ""
    }

    struct Issued: Decodable {
        var token: String
        var tokenID: String
        var expiresAt: Date
        var rule: String
        var channels: [String]?
    }

    static func issued(_ response: RawHTTP.Response) throws -> Issued {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try decoder.decode(Issued.self, from: Data(response.body))
    }
}

/// Base64url without padding, for tokens the tests change by hand.
enum Base64URLText {
    static func encode(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }
}
