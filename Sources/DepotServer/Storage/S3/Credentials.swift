import DepotCore
import DepotTransport
import Foundation
import Synchronization

/// The keys to sign with now, fetched from the source when first needed and refreshed before
/// they expire, so that a slow or failing credentials endpoint never stalls a request while the
/// keys held are still good:
///
/// - Keys with more than `refreshWindow` (5 minutes) left are used as they are.
/// - Inside the window, while they have more than `minimumValidity` (a minute) left, they keep
///   signing; the first call there starts one refresh in the background, and no other starts
///   while it runs.
/// - Without usable keys (none yet, or all but expired) a call waits for the fetch in flight,
///   or makes one itself: one fetch at a time, whoever asks.
/// - A failed fetch backs off (1 s, doubling to 60 s): until then no new fetch starts, and a
///   call that has no usable keys fails at once with the last fetch's error. A request is never
///   signed with keys that expire within `minimumValidity`.
public final class CredentialProvider: Sendable {
    public let source: CredentialSource
    let refreshWindow: TimeInterval
    let minimumValidity: TimeInterval
    let timeout: TimeInterval
    /// Guards `held`; signalled when a fetch ends.
    private let condition = NSCondition()
    nonisolated(unsafe) private var held = Held()
    /// IMDSv2's session token, used only by the one fetch in flight.
    private let metadataToken = Mutex<(value: String, expires: Date)?>(nil)

    private struct Held {
        var credentials: AWSCredentials?
        var fetches = 0
        /// A fetch is running (in the background, or for a caller that waits on it).
        var fetching = false
        /// After a failure: no new fetch before this, and the failure to report meanwhile.
        var backOff: (until: Date, error: S3Error)?
        var failures = 0
    }

    public init(_ source: CredentialSource, refreshWindow: TimeInterval = 300, minimumValidity: TimeInterval = 60, timeout: TimeInterval = 5) {
        (self.source, self.refreshWindow, self.minimumValidity, self.timeout) = (source, refreshWindow, minimumValidity, timeout)
        if case .fixed(let credentials, _) = source { held.credentials = credentials }
    }

    private func locked<T>(_ body: (inout Held) throws -> T) rethrows -> T {
        condition.lock()
        defer { condition.unlock() }
        return try body(&held)
    }

    /// How many times keys were fetched from the source (for tests and the log).
    public var fetches: Int { locked { $0.fetches } }

    /// Waits until no fetch is in flight (tests).
    func waitForRefresh() {
        condition.lock()
        while held.fetching { condition.wait() }
        condition.unlock()
    }

    /// Keys valid for at least `minimumValidity` more seconds.
    public func current(now: Date = Date()) throws -> AWSCredentials {
        enum Next { case use(AWSCredentials), refreshInBackground(AWSCredentials), fetchHere }
        condition.lock()
        let next: Next
        while true {
            let credentials = held.credentials
            let left = credentials?.expiration.map { $0.timeIntervalSince(now) } ?? .infinity
            if let credentials, left > refreshWindow {
                next = .use(credentials)
                break
            }
            let mayStart = !held.fetching && (held.backOff.map { now >= $0.until } ?? true)
            if let credentials, left > minimumValidity {
                if mayStart {
                    held.fetching = true
                    next = .refreshInBackground(credentials)
                } else {
                    next = .use(credentials)
                }
                break
            }
            if held.fetching {
                condition.wait()
                continue
            }
            if !mayStart, let backOff = held.backOff {
                condition.unlock()
                throw backOff.error
            }
            held.fetching = true
            next = .fetchHere
            break
        }
        condition.unlock()
        switch next {
        case .use(let credentials):
            return credentials
        case .refreshInBackground(let credentials):
            DispatchQueue.global().async { _ = try? self.refresh(now: now) }
            return credentials
        case .fetchHere:
            return try refresh(now: now)
        }
    }

    /// The one fetch in flight (`fetching` was set by the caller); its outcome is recorded and
    /// every waiting caller woken.
    private func refresh(now: Date) throws -> AWSCredentials {
        let outcome: Result<AWSCredentials, S3Error>
        do {
            let fresh = try fetch()
            guard let expiration = fresh.expiration, expiration.timeIntervalSince(now) > minimumValidity else {
                throw S3Error(status: 0, description: "\(source) handed out keys that expire \(fresh.expiration.map { "at \(Self.iso8601($0))" } ?? "with no date")")
            }
            outcome = .success(fresh)
        } catch let error as S3Error {
            outcome = .failure(error)
        } catch {
            outcome = .failure(S3Error(status: 0, description: "\(source): \(error)"))
        }
        condition.lock()
        defer {
            held.fetching = false
            condition.broadcast()
            condition.unlock()
        }
        switch outcome {
        case .success(let fresh):
            held.credentials = fresh
            held.fetches += 1
            (held.failures, held.backOff) = (0, nil)
            return fresh
        case .failure(let error):
            held.failures += 1
            // From when the fetch ended (it may have waited out its timeout), not when it began.
            held.backOff = (max(now, Date()).addingTimeInterval(min(60, Double(1 << min(held.failures - 1, 6)))), error)
            // Keys still good for a while serve until the next try.
            if let credentials = held.credentials, let expiration = credentials.expiration, expiration.timeIntervalSince(now) > minimumValidity {
                return credentials
            }
            throw error
        }
    }

    private func fetch() throws -> AWSCredentials {
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
            var session = metadataToken.withLock { $0 }
            if session.map({ $0.expires <= now.addingTimeInterval(60) }) ?? true {
                let answer = try request("PUT", endpoint.appendingPathComponent("latest/api/token"), headers: [("X-aws-ec2-metadata-token-ttl-seconds", "21600")])
                guard answer.status == 200, !answer.text.isEmpty else { throw S3Error(status: answer.status, description: "\(source) gave no session token (HTTP \(answer.status))") }
                session = (answer.text.trimmingCharacters(in: .whitespacesAndNewlines), now.addingTimeInterval(21600))
                metadataToken.withLock { $0 = session }
            }
            let token = [("X-aws-ec2-metadata-token", session!.value)]
            let base = endpoint.appendingPathComponent("latest/meta-data/iam/security-credentials/")
            let roles = try request("GET", base, headers: token)
            guard roles.status == 200, let role = roles.text.split(whereSeparator: \.isNewline).first.map(String.init) else {
                if roles.status == 401 { metadataToken.withLock { $0 = nil } }
                throw S3Error(status: roles.status, description: "\(source) names no role for this instance (HTTP \(roles.status))")
            }
            let answer = try request("GET", base.appendingPathComponent(role), headers: token)
            guard answer.status == 200 else {
                if answer.status == 401 { metadataToken.withLock { $0 = nil } }
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
