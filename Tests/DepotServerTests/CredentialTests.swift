import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// AWS's credential chain for the S3 store: which source the environment names, and keys
/// fetched from fake STS, container and metadata endpoints on loopback, refreshed before they
/// expire, never used once expired.
@Suite("S3 credentials: the AWS chain")
struct CredentialTests {
    static let keys = [FakeAWSCredentials.Keys("AKIDFIRST", "first-secret"), FakeAWSCredentials.Keys("AKIDSECOND", "second-secret")]

    @Test("The chain's order: a file, the environment's keys (with a session token), web identity, the container endpoint, then IMDSv2 unless disabled")
    func order() throws {
        let work = TemporaryDirectory("depot-credentials")
        defer { work.remove() }
        try FileSystem.writeAtomically(Array("AKIDFILE\nfile-secret\nfile-token\n".utf8), to: work.path + "/keys")
        let everything = [
            "AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "env-secret", "AWS_SESSION_TOKEN": "env-token",
            "AWS_WEB_IDENTITY_TOKEN_FILE": work.path + "/token", "AWS_ROLE_ARN": FakeAWSCredentials.role,
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/abc", "AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:9",
        ]
        #expect(try CredentialSource.resolve(environment: everything, file: work.path + "/keys", region: "eu-west-1")
            == .fixed(AWSCredentials(accessKey: "AKIDFILE", secretKey: "file-secret", sessionToken: "file-token"), from: "the file \(work.path)/keys"))
        var environment = everything
        #expect(try CredentialSource.resolve(environment: environment, file: nil, region: "eu-west-1")
            == .fixed(AWSCredentials(accessKey: "AKIDENV", secretKey: "env-secret", sessionToken: "env-token"), from: "the environment (AWS_ACCESS_KEY_ID)"))
        environment["AWS_SECRET_ACCESS_KEY"] = nil
        guard case .webIdentity(_, let role, _, let sts) = try CredentialSource.resolve(environment: environment, file: nil, region: "eu-west-1") else {
            Issue.record("web identity expected"); return
        }
        #expect(role == FakeAWSCredentials.role && sts.absoluteString == "https://sts.eu-west-1.amazonaws.com")
        environment["AWS_ROLE_ARN"] = nil
        #expect(try CredentialSource.resolve(environment: environment, file: nil, region: "eu-west-1")
            == .container(url: URL(string: "http://169.254.170.2/v2/credentials/abc")!, authorization: nil, authorizationFile: nil))
        environment["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"] = nil
        #expect(try CredentialSource.resolve(environment: environment, file: nil, region: "eu-west-1") == .instanceMetadata(endpoint: URL(string: "http://127.0.0.1:9")!))
        environment["AWS_EC2_METADATA_DISABLED"] = "true"
        #expect(throws: S3Error.self) { try CredentialSource.resolve(environment: environment, file: nil, region: "eu-west-1") }
        // A full URI in plain http is for the container agent or this host only.
        #expect(throws: S3Error.self) { try CredentialSource.resolve(environment: ["AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://203.0.113.9/creds"], file: nil, region: "us-east-1") }
        // The log line names the source, never a secret.
        let logged = "\(CredentialSource.fixed(AWSCredentials(accessKey: "AKIDENV", secretKey: "env-secret", sessionToken: "env-token"), from: "the environment"))"
        #expect(!logged.contains("env-secret") && !logged.contains("env-token"))
    }

    @Test("Web identity: the token file's token goes to STS with the role; keys come back and are refreshed inside the window, in turn")
    func webIdentity() throws {
        let fake = try FakeAWSCredentials(keys: Self.keys, lifetime: 3600)
        defer { fake.stop() }
        let work = TemporaryDirectory("depot-credentials")
        defer { work.remove() }
        try FileSystem.writeAtomically(Array("\(FakeAWSCredentials.webToken)\n".utf8), to: work.path + "/token")
        let source = try CredentialSource.resolve(environment: fake.environment(for: "sts", tokenFile: work.path + "/token"), file: nil, region: "us-east-1")
        let provider = CredentialProvider(source)
        let first = try provider.current()
        #expect(first.accessKey == "AKIDFIRST" && first.sessionToken == "sts-session-token")
        #expect(try provider.current().accessKey == "AKIDFIRST", "held while far from expiry")
        // 56 minutes on, the keys are inside the 5-minute window: they still sign, while one
        // refresh runs in the background.
        let later = try provider.current(now: Date().addingTimeInterval(56 * 60))
        #expect(later.accessKey == "AKIDFIRST")
        provider.waitForRefresh()
        #expect(try provider.current().accessKey == "AKIDSECOND" && provider.fetches == 2 && fake.issued == ["sts AKIDFIRST", "sts AKIDSECOND"])
    }

    @Test("The container endpoint: the Authorization token (from its file) is sent; without it the endpoint refuses and nothing is signed")
    func container() throws {
        let fake = try FakeAWSCredentials(keys: Self.keys, lifetime: 3600)
        defer { fake.stop() }
        let work = TemporaryDirectory("depot-credentials")
        defer { work.remove() }
        try FileSystem.writeAtomically(Array("\(FakeAWSCredentials.containerAuthorization)\n".utf8), to: work.path + "/auth")
        let url = fake.url.appendingPathComponent("creds")
        let provider = CredentialProvider(.container(url: url, authorization: nil, authorizationFile: work.path + "/auth"))
        #expect(try provider.current() == AWSCredentials(accessKey: "AKIDFIRST", secretKey: "first-secret", sessionToken: "container-session-token", expiration: provider.current().expiration))
        let refused = CredentialProvider(.container(url: url, authorization: "Bearer wrong", authorizationFile: nil))
        #expect(throws: S3Error.self) { try refused.current() }
    }

    @Test("IMDSv2: a session token first, then the role and its keys with it; the token is reused across refreshes")
    func instanceMetadata() throws {
        let fake = try FakeAWSCredentials(keys: Self.keys, lifetime: 3600)
        defer { fake.stop() }
        let provider = CredentialProvider(.instanceMetadata(endpoint: fake.url))
        #expect(try provider.current().accessKey == "AKIDFIRST")
        #expect(try provider.current(now: Date().addingTimeInterval(58 * 60)).accessKey == "AKIDFIRST", "still 2 minutes left: signs while the refresh runs")
        provider.waitForRefresh()
        #expect(try provider.current().accessKey == "AKIDSECOND")
        let heads = fake.issued
        #expect(heads == ["imds AKIDFIRST", "imds AKIDSECOND"])
        #expect(fake.refusedWithoutToken == 0, "every metadata read carried the session token")
    }

    @Test("Keys that come back already expired are never used: the S3 call fails naming the expiry, and the store sees no request")
    func expiredNeverSigned() throws {
        let fake = try FakeAWSCredentials(keys: Self.keys, lifetime: -10)
        defer { fake.stop() }
        let store = try HostileServer { connection in
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        }
        defer { store.stop() }
        let location = S3Location(endpoint: store.url, bucket: "b", credentials: CredentialProvider(.instanceMetadata(endpoint: fake.url)))
        let client = try S3Client(location, timeout: 10)
        #expect {
            try client.call("GET", key: "blobs/x")
        } throws: { error in
            "\(error)".contains("expire")
        }
        #expect(store.requests.isEmpty, "nothing was signed with expired keys")
    }

    @Test("A failed refresh keeps keys that are still valid for more than a minute; past that, the call fails")
    func failedRefresh() throws {
        let fake = try FakeAWSCredentials(keys: Self.keys, lifetime: 3600)
        let provider = CredentialProvider(.instanceMetadata(endpoint: fake.url))
        let held = try provider.current()
        fake.stop()
        #expect(try provider.current(now: Date().addingTimeInterval(57 * 60)) == held, "the endpoint is gone, the keys have 3 minutes left")
        provider.waitForRefresh()
        #expect(throws: S3Error.self) { try provider.current(now: Date().addingTimeInterval(59.5 * 60)) }
    }

    @Test("A credentials endpoint that accepts and never answers, while the keys expire in four minutes: 20 concurrent blob GETs from the bucket all complete before it is released, and it sees one fetch, not one per GET")
    func stalledEndpointNeverStallsReads() throws {
        let fake = try FakeAWSCredentials(keys: Self.keys, lifetime: 240)
        defer { fake.stop() }
        let bucket = try HostileServer { connection in
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nbytes")
        }
        defer { bucket.stop() }
        // A fetch timeout far beyond the test's life: the fetch ends when the endpoint answers.
        let provider = CredentialProvider(.instanceMetadata(endpoint: fake.url), timeout: 3600)
        #expect(try provider.current().accessKey == "AKIDFIRST")
        fake.stallAnswers()
        let client = try S3Client(S3Location(endpoint: bucket.url, bucket: "b", credentials: provider), timeout: 30)
        let events = Locked<[String]>([])
        // Only a broken provider gets here: it would otherwise hold every GET for the hour.
        let watchdog = DispatchWorkItem {
            events.withLock { $0.append("released by the watchdog") }
            fake.releaseAnswers()
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + 120, execute: watchdog)
        defer { watchdog.cancel() }
        // The first call inside the window starts the refresh, which the endpoint now holds.
        #expect(try provider.current().accessKey == "AKIDFIRST")
        #expect(Eventually.wait { fake.heldRequests == 1 })
        DispatchQueue.concurrentPerform(iterations: 20) { index in
            let status = (try? client.call("GET", key: "blobs/\(index)").status) ?? -1
            events.withLock { $0.append("GET \(status)") }
        }
        events.withLock { $0.append("released") }
        let heldWhileReading = fake.heldRequests
        fake.releaseAnswers()
        provider.waitForRefresh()
        let order = events.withLock { $0 }
        #expect(order == Array(repeating: "GET 200", count: 20) + ["released"], "\(order)")
        #expect(heldWhileReading == 1, "one fetch in flight, however many signed: \(heldWhileReading)")
        #expect(bucket.requests.count == 20)
        #expect(try provider.current().accessKey == "AKIDSECOND", "the refresh landed once released")
    }

    @Test("A failing endpoint backs off: a call without usable keys fails at once with the last error, without a new request, until the back-off ends")
    func failureBacksOff() throws {
        let endpoint = try HostileServer { connection in
            connection.send("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        }
        defer { endpoint.stop() }
        let provider = CredentialProvider(.container(url: endpoint.url.appendingPathComponent("creds"), authorization: nil, authorizationFile: nil))
        let now = Date()
        for _ in 0..<5 {
            #expect { try provider.current(now: now) } throws: { "\($0)".contains("HTTP 500") }
        }
        #expect(endpoint.requests.count == 1, "one request, then the back-off: \(endpoint.requests.count)")
        #expect(throws: S3Error.self) { try provider.current(now: now.addingTimeInterval(1.5)) }
        #expect(endpoint.requests.count == 2, "after the first back-off (1 s), one more try")
        #expect(throws: S3Error.self) { try provider.current(now: now.addingTimeInterval(2.5)) }
        #expect(endpoint.requests.count == 2, "the second back-off is 2 s")
    }

    @Test("Container endpoint hosts as the AWS SDKs check them: the URL is built, then its parsed host checked")
    func containerHosts() throws {
        func resolve(_ name: String, _ value: String) throws -> URL? {
            guard case .container(let url, _, _) = try CredentialSource.resolve(environment: [name: value], file: nil, region: "us-east-1") else { return nil }
            return url
        }
        let relative = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", full = "AWS_CONTAINER_CREDENTIALS_FULL_URI"
        #expect(try resolve(relative, "/v2/credentials/abc")?.absoluteString == "http://169.254.170.2/v2/credentials/abc")
        for hostile in ["@evil.example/creds", ".evil.example/creds", ":8080@evil.example/", "evil", "/x@evil.example", "//evil.example/creds"] {
            let url = try? resolve(relative, hostile)
            #expect(url == nil || url?.host == "169.254.170.2" && url?.port == nil, "\(hostile) → \(url?.absoluteString ?? "refused")")
        }
        for allowed in ["http://127.0.0.1:9/creds", "http://127.9.8.7/creds", "http://[::1]:80/creds", "http://169.254.170.2/v2", "http://169.254.170.23/v1/credentials",
                        "http://[fd00:ec2::23]/creds", "http://localhost:8080/creds", "https://creds.example.com/v1"] {
            #expect(try resolve(full, allowed)?.absoluteString == allowed)
        }
        for refused in ["http://127.attacker.example/creds", "http://127.0.0.1.evil.example/creds", "http://127.0.0.1@evil.example/creds",
                        "http://user:pass@127.0.0.1/creds", "http://169.254.170.3/creds", "http://203.0.113.9/creds", "http://[fd00:ec2::24]/creds",
                        "http://localhost.evil.example/creds", "http://[::ffff:8.8.8.8]/creds", "ftp://127.0.0.1/creds", "http:///creds", "not a url"] {
            #expect(throws: S3Error.self, "\(refused)") { try resolve(full, refused) }
        }
    }

    @Test("SigV4 with temporary keys signs and sends x-amz-security-token")
    func sessionToken() {
        let headers = SigV4(region: "us-east-1").sign(
            method: "GET", path: "/b/k", query: [], headers: ["host": "s3.example"], payloadSHA256: S3Client.emptySHA256,
            credentials: AWSCredentials(accessKey: "AKID", secretKey: "s", sessionToken: "tok"), date: Date(timeIntervalSince1970: 1_700_000_000)
        )
        #expect(headers["x-amz-security-token"] == "tok")
        #expect(headers["Authorization"]?.contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,") == true, "\(headers)")
    }
}
