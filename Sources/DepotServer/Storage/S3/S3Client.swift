import DepotTransport
import DepotCore
import Foundation

/// Where an S3 bucket is and how to sign for it.
public struct S3Location: Sendable {
    /// `http(s)://host[:port]`, without a path.
    public var endpoint: URL
    public var bucket: String
    public var region: String
    /// Path-style URLs (`endpoint/bucket/key`, what most self-hosted engines want) or
    /// virtual-host URLs (`bucket.endpoint/key`, AWS's default).
    public var pathStyle: Bool
    /// Prepended to every object key (`assetdepot/`), so that a bucket can be shared.
    public var prefix: String
    /// The keys requests are signed with, fetched and refreshed from their source.
    public var credentials: CredentialProvider

    public init(endpoint: URL, bucket: String, region: String = "us-east-1", pathStyle: Bool = true, prefix: String = "", credentials: CredentialProvider) {
        (self.endpoint, self.bucket, self.region, self.pathStyle, self.prefix) = (endpoint, bucket, region, pathStyle, prefix)
        self.credentials = credentials
    }

    /// With a static key pair.
    public init(endpoint: URL, bucket: String, region: String = "us-east-1", pathStyle: Bool = true, prefix: String = "", accessKey: String, secretKey: String) {
        self.init(endpoint: endpoint, bucket: bucket, region: region, pathStyle: pathStyle, prefix: prefix,
                  credentials: CredentialProvider(.fixed(AWSCredentials(accessKey: accessKey, secretKey: secretKey), from: "a key pair")))
    }
}

/// A failure talking to the store: its status (0 when it could not be reached) and what it said.
struct S3Error: Error, CustomStringConvertible {
    let status: Int
    let description: String
}

/// The S3 calls the origin makes, over HTTP/1.1 with SigV4-signed payloads (the store checks
/// each request's body against its signed SHA-256), one connection per call, blocking.
final class S3Client: Sendable {
    let location: S3Location
    let timeout: TimeInterval
    private let signer: SigV4
    private let trust: TLSClientContext?

    init(_ location: S3Location, timeout: TimeInterval = 30) throws {
        self.location = location
        self.timeout = timeout
        signer = SigV4(region: location.region)
        trust = location.endpoint.scheme == "https" ? try TLSClientContext(caFile: nil) : nil
    }

    static let emptySHA256 = Hex.encode(SHA256Hasher.hash([UInt8]()))

    enum Body {
        case none
        case bytes([UInt8])
        /// `count` bytes of an open file from `offset`.
        case file(FileDescriptor, offset: Int64, count: Int64)
    }

    struct Response {
        var status: Int
        var head: HTTPTransport.Response
        var body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    /// One call. `key` nil addresses the bucket; `sink`, when given, takes a 2xx body instead
    /// of collecting it (at most `limit` bytes are collected).
    func call(
        _ method: String, key: String?, query: [(String, String)] = [], headers: [String: String] = [:], body: Body = .none,
        payloadSHA256: String = S3Client.emptySHA256, limit: Int64 = 1 << 20, sink: ((UnsafeRawBufferPointer) throws -> Void)? = nil,
        keepOpen: Bool = false, opened: ((HTTPConnection) -> Void)? = nil
    ) throws -> Response {
        let objectPath = key.map { "/" + SigV4.encode(location.prefix + $0, keepSlash: true) } ?? "/"
        let path: String
        var host = location.endpoint.host ?? ""
        if location.pathStyle {
            path = "/" + location.bucket + (key == nil ? "" : objectPath)
        } else {
            host = location.bucket + "." + host
            path = objectPath
        }
        let authority = host + (location.endpoint.port.map { ":\($0)" } ?? "")
        let canonicalQuery = query.map { (SigV4.encode($0.0), SigV4.encode($0.1)) }.sorted { $0 < $1 }.map { "\($0.0)=\($0.1)" }
        let target = path + (canonicalQuery.isEmpty ? "" : "?" + canonicalQuery.joined(separator: "&"))
        guard let url = URL(string: "\(location.endpoint.scheme ?? "http")://\(authority)\(target)") else {
            throw S3Error(status: 0, description: "cannot form a URL for \(target)")
        }
        var fields = headers
        fields["host"] = authority
        let length: Int64 = switch body {
        case .none: 0
        case .bytes(let bytes): Int64(bytes.count)
        case .file(_, _, let count): count
        }
        if method == "PUT" || method == "POST" || length > 0 { fields["content-length"] = String(length) }
        let credentials: AWSCredentials
        do { credentials = try location.credentials.current() } catch {
            throw S3Error(status: 0, description: "no valid keys to sign \(method) \(target) for the object store: \(error)")
        }
        for (name, value) in signer.sign(method: method, path: path, query: query, headers: fields, payloadSHA256: payloadSHA256, credentials: credentials) {
            fields[name] = value
        }
        fields["host"] = nil
        let connection: HTTPConnection
        do {
            connection = try HTTPConnection(url: url, timeout: timeout, trust: trust, options: TransportOptions())
        } catch {
            throw S3Error(status: 0, description: "the object store at \(location.endpoint.absoluteString) cannot be reached: \(error)")
        }
        defer { if !keepOpen { connection.close() } }
        do {
            try connection.sendHead(method: method, headers: fields.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
            switch body {
            case .none: break
            case .bytes(let bytes): try connection.sendBytes(bytes)
            case .file(let file, let offset, let count): try connection.sendFile(file, offset: offset, count: count)
            }
            let head = try connection.readHead()
            if keepOpen {
                // The caller reads the body (a streamed blob) and closes the connection.
                opened?(connection)
                return Response(status: head.status, head: head, body: [])
            }
            var collected: [UInt8] = []
            if let sink, (200..<300).contains(head.status) {
                try connection.readBody(head, method: method, sink: sink)
            } else {
                try connection.readBody(head, method: method, limit: limit) { collected += $0 }
            }
            return Response(status: head.status, head: head, body: collected)
        } catch let error as S3Error {
            throw error
        } catch {
            throw S3Error(status: 0, description: "\(method) \(target) on the object store failed: \(error)")
        }
    }

    /// Throws unless the answer is 2xx, with the store's own code and message.
    @discardableResult
    static func check(_ response: Response, _ what: String) throws -> Response {
        guard (200..<300).contains(response.status) else {
            let code = XMLText.first("Code", in: response.text) ?? "HTTP \(response.status)"
            let message = XMLText.first("Message", in: response.text) ?? ""
            throw S3Error(status: response.status, description: "\(what): \(code)\(message.isEmpty ? "" : ": " + message)")
        }
        return response
    }
}

/// The few values the origin reads from S3's XML answers (object keys are hex names here).
enum XMLText {
    /// Every text of `<tag>…</tag>` in `xml`, unescaped.
    static func all(_ tag: String, in xml: String) -> [String] {
        var out: [String] = []
        var rest = xml[...]
        while let open = rest.range(of: "<\(tag)>"), let close = rest.range(of: "</\(tag)>", range: open.upperBound..<rest.endIndex) {
            out.append(unescape(String(rest[open.upperBound..<close.lowerBound])))
            rest = rest[close.upperBound...]
        }
        return out
    }

    static func first(_ tag: String, in xml: String) -> String? { all(tag, in: xml).first }

    static func unescape(_ text: String) -> String {
        text.replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">").replacingOccurrences(of: "&quot;", with: "\"")
            .replacingOccurrences(of: "&apos;", with: "'").replacingOccurrences(of: "&amp;", with: "&")
    }
}
