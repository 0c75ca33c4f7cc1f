import DepotCore
import Foundation

/// Small stand-ins for AWS's credential endpoints on loopback, handing out the keys a test
/// gives (the S3 test engine's), in turn, each with `Expiration` = now + `lifetime`:
///
/// - STS: `POST /` with `Action=AssumeRoleWithWebIdentity`, the expected role and web identity
///   token, answered in STS's XML;
/// - a container endpoint: `GET /creds`, answered in JSON only with the expected `Authorization`;
/// - IMDSv2: `PUT /latest/api/token` (with a TTL header) gives a session token; the role list and
///   the role's keys answer only with that token (IMDSv1, without it, gets 401).
///
/// Every answer it gives is recorded (``issued``) so a test can count refreshes.
public final class FakeAWSCredentials: Sendable {
    public struct Keys: Sendable, Hashable {
        public let access: String
        public let secret: String
        public init(_ access: String, _ secret: String) { (self.access, self.secret) = (access, secret) }
    }

    public static let role = "arn:aws:iam::123456789012:role/assetdepot"
    public static let webToken = "eyJ.fake-oidc-token.sig"
    public static let containerAuthorization = "Bearer container-secret"
    static let metadataToken = "imds-session-token-1"

    private let server: HostileServer
    private let state: Locked<(next: Int, issued: [String])>
    /// While set, every request is held unanswered until ``releaseAnswers()``.
    private let gate: Locked<(semaphore: DispatchSemaphore?, held: Int)>
    /// How many requests were held by ``stallAnswers()`` so far.
    public var heldRequests: Int { gate.withLock { $0.held } }
    public var url: URL { server.url }
    /// `kind access-key` for every set of keys handed out, in order (kind: sts, container, imds).
    public var issued: [String] { state.withLock { $0.issued } }
    /// Requests the metadata service refused for want of a session token.
    public var refusedWithoutToken: Int {
        server.requests.filter { $0.head.hasPrefix("GET /latest/meta-data") && !$0.head.lowercased().contains("x-aws-ec2-metadata-token: \(Self.metadataToken)") }.count
    }

    /// `lifetime`: seconds from each answer to its keys' `Expiration` (may be negative).
    public init(keys: [Keys], lifetime: TimeInterval) throws {
        let state = Locked<(next: Int, issued: [String])>((0, []))
        self.state = state
        let gate = Locked<(semaphore: DispatchSemaphore?, held: Int)>((nil, 0))
        self.gate = gate
        server = try HostileServer { connection in
            // Stalled: the connection is accepted and read, then held without a byte of answer.
            if let semaphore = gate.withLock({ gate -> DispatchSemaphore? in
                if gate.semaphore != nil { gate.held += 1 }
                return gate.semaphore
            }) {
                semaphore.wait()
                semaphore.signal()
            }
            let head = connection.request.head
            let lines = head.split(separator: "\r\n").map(String.init)
            let requestLine = lines.first ?? ""
            func field(_ name: String) -> String? {
                lines.dropFirst().first { $0.lowercased().hasPrefix(name.lowercased() + ":") }.map { String($0.dropFirst(name.count + 1)).trimmingCharacters(in: .whitespaces) }
            }
            func answer(_ status: String, _ type: String, _ body: String) {
                connection.send("HTTP/1.1 \(status)\r\nContent-Type: \(type)\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)")
            }
            func hand(_ kind: String) -> (Keys, String) {
                let keys = state.withLock { state in
                    let keys = keys[state.next % keys.count]
                    state.next += 1
                    state.issued.append("\(kind) \(keys.access)")
                    return keys
                }
                let formatter = ISO8601DateFormatter()
                return (keys, formatter.string(from: Date().addingTimeInterval(lifetime)))
            }
            if requestLine.hasPrefix("POST / ") {
                let form = Dictionary(String(decoding: connection.request.body, as: UTF8.self).split(separator: "&").compactMap { pair -> (String, String)? in
                    let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? String($0) }
                    return parts.count == 2 ? (parts[0], parts[1]) : nil
                }, uniquingKeysWith: { a, _ in a })
                guard form["Action"] == "AssumeRoleWithWebIdentity", form["RoleArn"] == Self.role, form["WebIdentityToken"] == Self.webToken,
                      form["RoleSessionName"].map({ !$0.isEmpty }) == true else {
                    answer("403 Forbidden", "text/xml", "<ErrorResponse><Error><Code>AccessDenied</Code><Message>bad request \(form)</Message></Error></ErrorResponse>")
                    return
                }
                let (keys, expiration) = hand("sts")
                answer("200 OK", "text/xml", """
                    <AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleWithWebIdentityResult>\
                    <Credentials><AccessKeyId>\(keys.access)</AccessKeyId><SecretAccessKey>\(keys.secret)</SecretAccessKey>\
                    <SessionToken>sts-session-token</SessionToken><Expiration>\(expiration)</Expiration></Credentials>\
                    </AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>
                    """)
            } else if requestLine.hasPrefix("GET /creds ") {
                guard field("Authorization") == Self.containerAuthorization else { answer("401 Unauthorized", "text/plain", "no"); return }
                let (keys, expiration) = hand("container")
                answer("200 OK", "application/json", #"{"AccessKeyId":"\#(keys.access)","SecretAccessKey":"\#(keys.secret)","Token":"container-session-token","Expiration":"\#(expiration)"}"#)
            } else if requestLine.hasPrefix("PUT /latest/api/token ") {
                guard field("X-aws-ec2-metadata-token-ttl-seconds") != nil else { answer("400 Bad Request", "text/plain", "ttl"); return }
                answer("200 OK", "text/plain", Self.metadataToken)
            } else if requestLine.hasPrefix("GET /latest/meta-data/iam/security-credentials/") {
                guard field("X-aws-ec2-metadata-token") == Self.metadataToken else { answer("401 Unauthorized", "text/plain", ""); return }
                if requestLine.hasPrefix("GET /latest/meta-data/iam/security-credentials/ ") {
                    answer("200 OK", "text/plain", "assetdepot-role")
                } else if requestLine.hasPrefix("GET /latest/meta-data/iam/security-credentials/assetdepot-role ") {
                    let (keys, expiration) = hand("imds")
                    answer("200 OK", "text/plain", #"{"Code":"Success","Type":"AWS-HMAC","AccessKeyId":"\#(keys.access)","SecretAccessKey":"\#(keys.secret)","Token":"imds-session-token","Expiration":"\#(expiration)"}"#)
                } else {
                    answer("404 Not Found", "text/plain", "")
                }
            } else {
                answer("404 Not Found", "text/plain", "")
            }
        }
    }

    /// The environment a process needs to find each source here.
    public func environment(for kind: String, tokenFile: String) -> [String: String] {
        switch kind {
        case "sts": ["AWS_WEB_IDENTITY_TOKEN_FILE": tokenFile, "AWS_ROLE_ARN": Self.role, "AWS_ENDPOINT_URL_STS": url.absoluteString + "/"]
        case "container": ["AWS_CONTAINER_CREDENTIALS_FULL_URI": url.absoluteString + "/creds", "AWS_CONTAINER_AUTHORIZATION_TOKEN": Self.containerAuthorization]
        default: ["AWS_EC2_METADATA_SERVICE_ENDPOINT": url.absoluteString]
        }
    }

    /// From now on, requests are accepted and held unanswered.
    public func stallAnswers() { gate.withLock { $0.semaphore = DispatchSemaphore(value: 0) } }

    /// Answers every held request, and those to come.
    public func releaseAnswers() {
        gate.withLock { gate in
            gate.semaphore?.signal()
            gate.semaphore = nil
        }
    }

    public func stop() {
        releaseAnswers()
        server.stop()
    }
}
