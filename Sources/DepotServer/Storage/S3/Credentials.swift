import DepotCore
import DepotTransport
import Foundation

/// Keys S3 requests are signed with: a static pair, or temporary keys with a session token and
/// an expiry (from STS, a container endpoint or the instance metadata service).
public struct AWSCredentials: Sendable, Hashable {
    public var accessKey: String
    public var secretKey: String
    public var sessionToken: String?
    /// When temporary keys stop working; nil for a static pair.
    public var expiration: Date?

    public init(accessKey: String, secretKey: String, sessionToken: String? = nil, expiration: Date? = nil) {
        (self.accessKey, self.secretKey, self.sessionToken, self.expiration) = (accessKey, secretKey, sessionToken, expiration)
    }
}

/// Where the origin's S3 keys come from, in the order AWS's SDKs look (``resolve(environment:file:region:)``).
public enum CredentialSource: Sendable, Hashable, CustomStringConvertible {
    /// A pair given on the command line (a file) or in the environment, maybe with a session token.
    case fixed(AWSCredentials, from: String)
    /// EKS and other OIDC: the token in `tokenFile` exchanged at STS (`AssumeRoleWithWebIdentity`).
    case webIdentity(tokenFile: String, roleARN: String, sessionName: String, sts: URL)
    /// ECS and other container hosts: `url` answers JSON, with an `Authorization` value when set.
    case container(url: URL, authorization: String?, authorizationFile: String?)
    /// EC2's instance metadata service, version 2 (a session token first, then the role's keys).
    case instanceMetadata(endpoint: URL)

    /// For the log: where, never a secret.
    public var description: String {
        switch self {
        case .fixed(let credentials, let origin): "\(origin)\(credentials.sessionToken == nil ? "" : " with a session token")"
        case .webIdentity(let file, let role, _, let sts): "web identity (token file \(file), role \(role), STS \(sts.absoluteString))"
        case .container(let url, _, _): "the container credentials endpoint \(url.absoluteString)"
        case .instanceMetadata(let endpoint): "the instance metadata service (IMDSv2) at \(endpoint.absoluteString)"
        }
    }

    /// The first source the environment names: `file` (the `--s3-credentials` file: access key
    /// id, secret and optionally a session token, one a line), then `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY` (with `AWS_SESSION_TOKEN`), then `AWS_WEB_IDENTITY_TOKEN_FILE`
    /// with `AWS_ROLE_ARN` (STS at `AWS_ENDPOINT_URL_STS`, or the region's), then
    /// `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or `…_FULL_URI` (with
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` or `…_TOKEN`), and last the instance metadata
    /// service (`AWS_EC2_METADATA_SERVICE_ENDPOINT`, unless `AWS_EC2_METADATA_DISABLED=true`).
    public static func resolve(environment: [String: String], file: String?, region: String) throws -> CredentialSource {
        func value(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        if let file, !file.isEmpty {
            let lines = String(decoding: try FileSystem.readFile(file, limit: 8192), as: UTF8.self)
                .split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            guard lines.count >= 2 else { throw S3Error(status: 0, description: "\(file) must hold the access key id and the secret on two lines (and optionally a session token on a third)") }
            return .fixed(AWSCredentials(accessKey: lines[0], secretKey: lines[1], sessionToken: lines.count > 2 ? lines[2] : nil), from: "the file \(file)")
        }
        if let id = value("AWS_ACCESS_KEY_ID"), let secret = value("AWS_SECRET_ACCESS_KEY") {
            return .fixed(AWSCredentials(accessKey: id, secretKey: secret, sessionToken: value("AWS_SESSION_TOKEN")), from: "the environment (AWS_ACCESS_KEY_ID)")
        }
        if let tokenFile = value("AWS_WEB_IDENTITY_TOKEN_FILE"), let role = value("AWS_ROLE_ARN") {
            let sts = value("AWS_ENDPOINT_URL_STS") ?? "https://sts.\(value("AWS_REGION") ?? region).amazonaws.com"
            guard let url = URL(string: sts), url.scheme == "https" || url.scheme == "http" else { throw S3Error(status: 0, description: "AWS_ENDPOINT_URL_STS is not a URL: \(sts)") }
            let session = value("AWS_ROLE_SESSION_NAME") ?? "assetdepot-\(ProcessInfo.processInfo.processIdentifier)"
            return .webIdentity(tokenFile: tokenFile, roleARN: role, sessionName: session, sts: url)
        }
        if let relative = value("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
            guard let url = URL(string: "http://169.254.170.2" + relative) else { throw S3Error(status: 0, description: "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI is not a path: \(relative)") }
            return .container(url: url, authorization: value("AWS_CONTAINER_AUTHORIZATION_TOKEN"), authorizationFile: value("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"))
        }
        if let full = value("AWS_CONTAINER_CREDENTIALS_FULL_URI") {
            // As the SDKs: plain http only to the container agent or this host, anything over https.
            guard let url = URL(string: full), let host = url.host,
                  url.scheme == "https" || (url.scheme == "http" && Self.containerHosts(host)) else {
                throw S3Error(status: 0, description: "AWS_CONTAINER_CREDENTIALS_FULL_URI must be https, or http to loopback or the container agent: \(full)")
            }
            return .container(url: url, authorization: value("AWS_CONTAINER_AUTHORIZATION_TOKEN"), authorizationFile: value("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"))
        }
        if value("AWS_EC2_METADATA_DISABLED")?.lowercased() == "true" {
            throw S3Error(status: 0, description: "--storage s3 found no credentials: no --s3-credentials file, no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, no AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, no AWS_CONTAINER_CREDENTIALS_*_URI, and AWS_EC2_METADATA_DISABLED=true")
        }
        let endpoint = value("AWS_EC2_METADATA_SERVICE_ENDPOINT") ?? "http://169.254.169.254"
        guard let url = URL(string: endpoint), url.host != nil else { throw S3Error(status: 0, description: "AWS_EC2_METADATA_SERVICE_ENDPOINT is not a URL: \(endpoint)") }
        return .instanceMetadata(endpoint: url)
    }

    static func containerHosts(_ host: String) -> Bool {
        let bare = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return bare == "localhost" || bare.hasPrefix("127.") || bare == "::1" || bare == "169.254.170.2" || bare == "169.254.170.23" || bare.lowercased() == "fd00:ec2::23"
    }
}

/// The keys to sign with now: fetched from the source when first needed and again before they
/// expire (inside `refreshWindow`, 5 minutes by default), one fetch at a time. A request is
/// never signed with keys that expire within `minimumValidity` (a minute): if a refresh fails
/// and the keys held expire sooner, the request fails with the refresh's error instead.
public final class CredentialProvider: Sendable {
    public let source: CredentialSource
    let refreshWindow: TimeInterval
    let minimumValidity: TimeInterval
    let timeout: TimeInterval
    private let held = Locked<Held>(Held())

    private struct Held {
        var credentials: AWSCredentials?
        var metadataToken: (value: String, expires: Date)?
        var fetches = 0
    }

    public init(_ source: CredentialSource, refreshWindow: TimeInterval = 300, minimumValidity: TimeInterval = 60, timeout: TimeInterval = 5) {
        (self.source, self.refreshWindow, self.minimumValidity, self.timeout) = (source, refreshWindow, minimumValidity, timeout)
        if case .fixed(let credentials, _) = source { held.withLock { $0.credentials = credentials } }
    }

    /// How many times keys were fetched from the source (for tests and the log).
    public var fetches: Int { held.withLock { $0.fetches } }

    /// Keys valid for at least `minimumValidity` more seconds.
    public func current(now: Date = Date()) throws -> AWSCredentials {
        try held.withLock { held in
            if let credentials = held.credentials, credentials.expiration.map({ $0.timeIntervalSince(now) > refreshWindow }) ?? true {
                return credentials
            }
            do {
                let fresh = try fetch(&held)
                held.fetches += 1
                guard let expiration = fresh.expiration, expiration.timeIntervalSince(now) > minimumValidity else {
                    throw S3Error(status: 0, description: "\(source) handed out keys that expire \(fresh.expiration.map { "at \(Self.iso8601($0))" } ?? "with no date")")
                }
                held.credentials = fresh
                return fresh
            } catch {
                // A failed refresh: keys still good for a while serve until the next try.
                if let credentials = held.credentials, let expiration = credentials.expiration, expiration.timeIntervalSince(now) > minimumValidity {
                    return credentials
                }
                throw error
            }
        }
    }

    private func fetch(_ held: inout Held) throws -> AWSCredentials {
        switch source {
        case .fixed(let credentials, _):
            return credentials
        case .webIdentity(let tokenFile, let role, let session, let sts):
            let token = String(decoding: try FileSystem.readFile(tokenFile, limit: 64 << 10), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            let form = [("Action", "AssumeRoleWithWebIdentity"), ("Version", "2011-06-15"), ("RoleArn", role), ("RoleSessionName", session), ("WebIdentityToken", token)]
                .map { "\($0.0)=\(SigV4.encode($0.1))" }.joined(separator: "&")
            let answer = try request("POST", sts, headers: [("Content-Type", "application/x-www-form-urlencoded")], body: Array(form.utf8))
            guard answer.status == 200 else {
                throw S3Error(status: answer.status, description: "STS refused AssumeRoleWithWebIdentity for \(role): \(XMLText.first("Code", in: answer.text) ?? "HTTP \(answer.status)") \(XMLText.first("Message", in: answer.text) ?? "")")
            }
            guard let id = XMLText.first("AccessKeyId", in: answer.text), let secret = XMLText.first("SecretAccessKey", in: answer.text),
                  let sessionToken = XMLText.first("SessionToken", in: answer.text), let expiration = XMLText.first("Expiration", in: answer.text).flatMap(Self.date) else {
                throw S3Error(status: 0, description: "STS's answer for \(role) has no complete Credentials")
            }
            return AWSCredentials(accessKey: id, secretKey: secret, sessionToken: sessionToken, expiration: expiration)
        case .container(let url, let authorization, let authorizationFile):
            var headers: [(String, String)] = []
            if let authorizationFile {
                headers.append(("Authorization", String(decoding: try FileSystem.readFile(authorizationFile, limit: 16 << 10), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)))
            } else if let authorization {
                headers.append(("Authorization", authorization))
            }
            let answer = try request("GET", url, headers: headers)
            guard answer.status == 200 else { throw S3Error(status: answer.status, description: "\(source) answered HTTP \(answer.status)") }
            return try Self.json(answer.body, from: "\(source)")
        case .instanceMetadata(let endpoint):
            let now = Date()
            if held.metadataToken.map({ $0.expires <= now.addingTimeInterval(60) }) ?? true {
                let answer = try request("PUT", endpoint.appendingPathComponent("latest/api/token"), headers: [("X-aws-ec2-metadata-token-ttl-seconds", "21600")])
                guard answer.status == 200, !answer.text.isEmpty else { throw S3Error(status: answer.status, description: "\(source) gave no session token (HTTP \(answer.status))") }
                held.metadataToken = (answer.text.trimmingCharacters(in: .whitespacesAndNewlines), now.addingTimeInterval(21600))
            }
            let token = [("X-aws-ec2-metadata-token", held.metadataToken!.value)]
            let base = endpoint.appendingPathComponent("latest/meta-data/iam/security-credentials/")
            let roles = try request("GET", base, headers: token)
            guard roles.status == 200, let role = roles.text.split(whereSeparator: \.isNewline).first.map(String.init) else {
                if roles.status == 401 { held.metadataToken = nil }
                throw S3Error(status: roles.status, description: "\(source) names no role for this instance (HTTP \(roles.status))")
            }
            let answer = try request("GET", base.appendingPathComponent(role), headers: token)
            guard answer.status == 200 else {
                if answer.status == 401 { held.metadataToken = nil }
                throw S3Error(status: answer.status, description: "\(source) answered HTTP \(answer.status) for role \(role)")
            }
            return try Self.json(answer.body, from: "\(source) for role \(role)")
        }
    }

    /// The container endpoint's and the metadata service's JSON.
    static func json(_ body: [UInt8], from origin: String) throws -> AWSCredentials {
        struct Answer: Decodable {
            var AccessKeyId: String
            var SecretAccessKey: String
            var Token: String?
            var Expiration: String?
            var Code: String?
        }
        guard let answer = try? JSONDecoder().decode(Answer.self, from: Data(body)), answer.Code.map({ $0 == "Success" }) ?? true else {
            throw S3Error(status: 0, description: "\(origin) answered no usable keys")
        }
        guard let expiration = answer.Expiration.flatMap(date) else { throw S3Error(status: 0, description: "\(origin) answered keys without a valid Expiration") }
        return AWSCredentials(accessKey: answer.AccessKeyId, secretKey: answer.SecretAccessKey, sessionToken: answer.Token, expiration: expiration)
    }

    static func date(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: text)
    }

    static func iso8601(_ date: Date) -> String { ISO8601DateFormatter().string(from: date) }

    private struct Answer {
        var status: Int
        var body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    /// One small request to a credentials endpoint (answers up to 64 KiB).
    private func request(_ method: String, _ url: URL, headers: [(String, String)], body: [UInt8] = []) throws -> Answer {
        do {
            let trust = url.scheme == "https" ? try TLSClientContext(caFile: nil) : nil
            let connection = try HTTPConnection(url: url, timeout: timeout, trust: trust, options: TransportOptions())
            defer { connection.close() }
            try connection.sendHead(method: method, headers: (method == "GET" ? [] : [("Content-Length", String(body.count))]) + headers)
            if !body.isEmpty { try connection.sendBytes(body) }
            let head = try connection.readHead()
            var collected: [UInt8] = []
            try connection.readBody(head, method: method, limit: 64 << 10) { collected += $0 }
            return Answer(status: head.status, body: collected)
        } catch let error as S3Error {
            throw error
        } catch {
            throw S3Error(status: 0, description: "\(source) cannot be reached: \(error)")
        }
    }
}
