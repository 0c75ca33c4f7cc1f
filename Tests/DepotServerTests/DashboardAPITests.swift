import DepotCore
import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// What the dashboard calls besides the publishing API, and the headers its page is served with.
@Suite("Origin: the dashboard's API")
struct DashboardAPITests {
    @Test("A token says whose it is; a wrong, revoked or missing one is refused")
    func session() async throws {
        try await withServer { origin in
            let who = try request(origin, "GET", "/v1/session", headers: ["Authorization: Bearer \(origin.token)"])
            #expect(who.status == 200 && who.header("Cache-Control") == "private, no-store")
            let body = try JSONSerialization.jsonObject(with: Data(who.body)) as? [String: Any]
            #expect(body?["app"] as? String == origin.app && body?["role"] as? String == "publisher" && body?["appExists"] as? Bool == true)
            #expect(body?["mode"] as? String == "unmanaged")
            #expect(!String(decoding: who.body, as: UTF8.self).contains(origin.token))
            #expect(try request(origin, "GET", "/v1/session").status == 401)
            #expect(try request(origin, "GET", "/v1/session", headers: ["Authorization: Bearer dpt_nope"]).status == 401)
            let tokens = TokenStore(folder: DataFolder(origin.data.path))
            let record = try #require(try tokens.list().first)
            try tokens.revoke(id: record.id)
            let revoked = try request(origin, "GET", "/v1/session", headers: ["Authorization: Bearer \(origin.token)"])
            #expect(revoked.status == 401 && String(decoding: revoked.body, as: UTF8.self).contains("token_revoked"))
        }
    }

    @Test("An app's settings for its publishers; its client configuration for its admins only")
    func appAndConfiguration() async throws {
        try await withServer { origin in
            let folder = DataFolder(origin.data.path)
            let apps = AppStore(folder: folder)
            try apps.setAllowances(origin.app, BuildAllowances(downloadAllowance: 1000))
            _ = try apps.setDownloadCredentials(origin.app, enabled: true)
            let summary = try request(origin, "GET", "/v1/apps/\(origin.app)", headers: ["Authorization: Bearer \(origin.token)"])
            #expect(summary.status == 200)
            let text = String(decoding: summary.body, as: UTF8.self)
            #expect(text.contains("\"downloadAllowance\" : 1000") && text.contains("\"downloadCredentials\" : true"))
            #expect(text.contains("\"currentPackKey\" : \"\(try apps.packKeys(origin.app).current)\"") && !text.contains("password"))

            let path = "/v1/apps/\(origin.app)/client-configuration"
            #expect(try request(origin, "GET", path, headers: ["Authorization: Bearer \(origin.token)"]).status == 403)
            #expect(try request(origin, "GET", path).status == 401)
            let admin = try TokenStore(folder: folder).create(app: origin.app, role: .admin).token
            let configuration = try request(origin, "GET", path, headers: ["Authorization: Bearer \(admin)"])
            #expect(configuration.status == 200 && configuration.header("Cache-Control") == "no-store")
            #expect(configuration.body == (try apps.clientConfiguration(origin.app).encoded()))

            let other = try TokenStore(folder: folder).create(app: "com.example.other", role: .admin).token
            #expect(try request(origin, "GET", path, headers: ["Authorization: Bearer \(other)"]).status == 403)
            #expect(try request(origin, "GET", "/v1/apps/\(origin.app)", headers: ["Authorization: Bearer \(other)"]).status == 403)
        }
    }

    @Test("With download credentials on, the app's own bearer token reads too; another app's does not")
    func bearerReads() async throws {
        try await withServer { origin in
            _ = try AppStore(folder: DataFolder(origin.data.path)).setDownloadCredentials(origin.app, enabled: true)
            let path = "/v1/apps/\(origin.app)/releases"
            #expect(try request(origin, "GET", path).status == 401)
            let read = try request(origin, "GET", path, headers: ["Authorization: Bearer \(origin.token)"])
            #expect(read.status == 200 && read.header("Cache-Control")?.hasPrefix("private") == true)
            #expect(try request(origin, "GET", path, headers: ["Authorization: Bearer dpt_wrong"]).status == 401)
            let other = try TokenStore(folder: DataFolder(origin.data.path)).create(app: "com.example.other", role: .admin).token
            #expect(try request(origin, "GET", path, headers: ["Authorization: Bearer \(other)"]).status == 403)
        }
    }

    @Test("The page is served under a strict Content-Security-Policy, unframeable, with no referrer")
    func pageHeaders() async throws {
        let publicDir = TemporaryDirectory("depot-public")
        defer { publicDir.remove() }
        _ = try publicDir.file("index.html", size: 10)
        try await withServer(configure: { $0.publicDirectory = publicDir.path }) { origin in
            for target in ["/", "/index.html"] {
                let page = try request(origin, "GET", target)
                #expect(page.status == 200)
                let policy = try #require(page.header("Content-Security-Policy"))
                #expect(policy.contains("default-src 'none'") && policy.contains("script-src 'self'") && policy.contains("frame-ancestors 'none'"))
                #expect(!policy.contains("unsafe"))
                #expect(page.header("X-Content-Type-Options") == "nosniff" && page.header("Referrer-Policy") == "no-referrer")
            }
        }
    }

    @Test("Every answer carries X-Content-Type-Options: nosniff (issue 50); every answer but the dashboard's files carries Content-Security-Policy: default-src 'none'; sandbox — blobs kept in memory or as a descriptor, ranges, HEAD, 304, manifests, releases, JSON, errors; the page keeps its own policy, once")
    func everyAnswerHeaders() async throws {
        let publicDir = TemporaryDirectory("depot-public")
        defer { publicDir.remove() }
        _ = try publicDir.file("index.html", size: 10)
        try await withServer(configure: { $0.publicDirectory = publicDir.path }) { origin in
            let (small, _) = try BlobAnswerTests.publish(origin, "level", size: 2_000, seed: 3)
            let (large, _) = try BlobAnswerTests.publish(origin, "world", size: 300_000, seed: 4)
            let auth = "Authorization: Bearer \(origin.token)"
            let answers: [(String, RawHTTP.Response)] = [
                ("small blob", try request(origin, "GET", small)), ("small blob again (kept)", try request(origin, "GET", small)),
                ("large blob", try request(origin, "GET", large)), ("large blob again (kept)", try request(origin, "GET", large)),
                ("range", try request(origin, "GET", small, headers: ["Range: bytes=0-9"])),
                ("HEAD", try request(origin, "HEAD", large)),
                ("304", try request(origin, "GET", small, headers: ["If-None-Match: \"\(small.split(separator: "/").last!)\""])),
                ("manifest", try request(origin, "GET", "/v1/apps/\(origin.app)/manifest")),
                ("release", try request(origin, "GET", "/v1/apps/\(origin.app)/releases/1", headers: [auth])),
                ("JSON", try request(origin, "GET", "/v1/apps/\(origin.app)/staging", headers: [auth])),
                ("404", try request(origin, "GET", "/v1/apps/\(origin.app)/blobs/" + String(repeating: "0", count: 64))),
                ("401", try request(origin, "GET", "/v1/session")),
                ("healthz", try request(origin, "GET", "/healthz")),
            ]
            for (name, answer) in answers {
                #expect(answer.headers.filter { $0.0.lowercased() == "x-content-type-options" }.map(\.1) == ["nosniff"], "\(name): \(answer.status) \(answer.headers)")
                #expect(answer.headers.filter { $0.0.lowercased() == "content-security-policy" }.map(\.1) == ["default-src 'none'; sandbox"], "\(name): \(answer.status) \(answer.headers)")
            }
            #expect(answers[0].1.status == 200 && answers[4].1.status == 206 && answers[6].1.status == 304 && answers[9].1.status == 200)
            let page = try request(origin, "GET", "/")
            #expect(page.headers.filter { $0.0.lowercased() == "x-content-type-options" }.map(\.1) == ["nosniff"])
            let policies = page.headers.filter { $0.0.lowercased() == "content-security-policy" }.map(\.1)
            #expect(policies.count == 1 && policies.first?.contains("script-src 'self'") == true, "\(policies)")
        }
    }
}
