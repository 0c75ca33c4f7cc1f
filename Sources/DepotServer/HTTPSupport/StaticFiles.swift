import DepotCore
import DepotHTTP

/// Serves the dashboard folder (Public/) at `/`, from file descriptors, with the same
/// validators and range handling as everything else.
struct StaticFiles: Sendable {
    let root: String

    private static let types = [
        "html": "text/html; charset=utf-8", "css": "text/css; charset=utf-8", "js": "text/javascript; charset=utf-8",
        "json": "application/json", "svg": "image/svg+xml", "png": "image/png", "ico": "image/x-icon", "txt": "text/plain; charset=utf-8",
    ]

    /// The response for a path already checked by ``RequestTarget`` (no dot segments, no `%2f`, no NUL).
    func response(for segments: [String], request: HTTPRequest) -> HTTPResponse? {
        let relative = segments.isEmpty ? "index.html" : segments.joined(separator: "/")
        guard !segments.contains(where: { $0.hasPrefix(".") }) else { return nil }
        let path = root + "/" + relative
        guard !FileSystem.isDirectory(path), let file = try? FileDescriptor.openForReading(path),
              let (size, modified) = try? file.sizeAndModification() else { return nil }
        let ext = relative.split(separator: ".").last.map(String.init) ?? ""
        let etag = "\"\(size)-\(Int64(modified.timeIntervalSince1970))\""
        var response = Representation(
            source: .file(file), size: size, etag: etag, lastModified: modified, contentType: Self.types[ext] ?? "application/octet-stream",
            cacheControl: "no-cache"
        ).response(to: request)
        for (name, value) in Self.securityHeaders { response.headers.add(name, value) }
        return response
    }

    /// The dashboard runs only its own files: no inline script or style, no other origin, no
    /// framing; the token it holds never leaves in a Referer. (`X-Content-Type-Options: nosniff`
    /// is on every answer, added by DepotHTTP.)
    static let securityHeaders = [
        ("Content-Security-Policy",
         "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            + "form-action 'none'; frame-ancestors 'none'; base-uri 'none'"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
    ]
}
