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
}
