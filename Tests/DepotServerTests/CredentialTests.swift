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
        // 56 minutes on, the keys are inside the 5-minute window: fetched again.
        let later = try provider.current(now: Date().addingTimeInterval(56 * 60))
        #expect(later.accessKey == "AKIDSECOND" && provider.fetches == 2 && fake.issued == ["sts AKIDFIRST", "sts AKIDSECOND"])
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
        #expect(try provider.current(now: Date().addingTimeInterval(58 * 60)).accessKey == "AKIDSECOND")
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
        #expect(throws: S3Error.self) { try provider.current(now: Date().addingTimeInterval(59.5 * 60)) }
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
