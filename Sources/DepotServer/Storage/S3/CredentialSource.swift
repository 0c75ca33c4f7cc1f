import DepotCore
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
            // The agent's address and a path: the URL is built, then its host checked, so that
            // no value (`@evil.example/`, `:80@…`, `.evil/`) can move it elsewhere.
            guard relative.hasPrefix("/"), let url = URL(string: "http://169.254.170.2" + relative), url.scheme == "http",
                  url.host == "169.254.170.2", url.port == nil, url.user == nil, url.password == nil else {
                throw S3Error(status: 0, description: "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI must be a path on the container agent (169.254.170.2): \(relative)")
            }
            return .container(url: url, authorization: value("AWS_CONTAINER_AUTHORIZATION_TOKEN"), authorizationFile: value("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"))
        }
        if let full = value("AWS_CONTAINER_CREDENTIALS_FULL_URI") {
            // As the SDKs: https anywhere; plain http only to a loopback address or the container
            // agent's (169.254.170.2, 169.254.170.23, fd00:ec2::23), checked on the parsed URL.
            guard let url = URL(string: full), let host = url.host, !host.isEmpty, url.user == nil, url.password == nil,
                  url.scheme == "https" || (url.scheme == "http" && Self.isContainerHost(host)) else {
                throw S3Error(status: 0, description: "AWS_CONTAINER_CREDENTIALS_FULL_URI must be https, or http to a loopback address or the container agent (169.254.170.2, 169.254.170.23, fd00:ec2::23): \(full)")
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

    /// Whether plain http may go to `host`: an address, parsed (never a name's prefix): IPv4 in
    /// 127.0.0.0/8, `::1`, or the container agent's 169.254.170.2, 169.254.170.23 and
    /// fd00:ec2::23; or `localhost`, which resolves to loopback only.
    static func isContainerHost(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare.lowercased() == "localhost" { return true }
        var v4 = in_addr()
        if inet_pton(AF_INET, bare, &v4) == 1 {
            let octets = withUnsafeBytes(of: v4) { Array($0) }
            return octets[0] == 127 || octets == [169, 254, 170, 2] || octets == [169, 254, 170, 23]
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, bare, &v6) == 1 {
            let bytes = withUnsafeBytes(of: v6) { Array($0) }
            return bytes == [UInt8](repeating: 0, count: 15) + [1] || bytes == [0xfd, 0, 0x0e, 0xc2] + [UInt8](repeating: 0, count: 11) + [0x23]
        }
        return false
    }
}
