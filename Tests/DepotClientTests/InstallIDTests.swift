import DepotClient
import DepotCore
import DepotTestSupport
import Foundation
import Testing

@Suite("The install id")
struct InstallIDTests {
    @Test("Made once per state folder: eight openers at once (the app and its extension each with its own descriptor) all get the same 128 bits, kept across later opens; another folder gets another")
    func once() throws {
        let dir = TemporaryDirectory("depot-install-id")
        defer { dir.remove() }
        let ids = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            if let id = try? StateStore(destination: dir.path + "/shared").installID(app: "com.example.game") { ids.withLock { $0.append(id) } }
        }
        let seen = ids.withLock { $0 }
        #expect(seen.count == 8 && Set(seen).count == 1)
        let id = try #require(seen.first)
        #expect(id.utf8.count == 32 && Hex.decode(id)?.count == 16)
        #expect(try StateStore(destination: dir.path + "/shared").read(app: "com.example.game").installID == id)
        #expect(try StateStore(destination: dir.path + "/other").installID(app: "com.example.game") != id)
        // Changes of the state made later keep it.
        try StateStore(destination: dir.path + "/shared").withExclusiveControl(app: "com.example.game") { $0.raiseFloor(channel: "production", to: 9) }
        #expect(try StateStore(destination: dir.path + "/shared").installID(app: "com.example.game") == id)
    }
}
