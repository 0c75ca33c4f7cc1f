import DepotCore
import DepotTestSupport
import Foundation
import Testing

/// What an app pulls in: `Tests/ConsumerApp`, a package that depends on this one by path with its
/// default trait off (as docs/Integrating.md tells an app to) and uses only `DepotClient`, resolves and
/// builds with nothing but DepotCore, DepotClient and ZIPFoundation, and fetches no server package.
@Suite("What an app pulls in")
struct ConsumerPackageTests {
    @Test("The consumer package builds DepotCore, DepotTransport, DepotClient and ZIPFoundation only, fetches ZIPFoundation only, and runs")
    func appDependencies() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        let scratch = TemporaryDirectory("depot-consumer")
        defer { scratch.remove() }
        let built = try Processes.run("/usr/bin/env", ["swift", "build", "--package-path", root + "/Tests/ConsumerApp", "--scratch-path", scratch.path])
        #expect(built.status == 0, "\(built.stdout.suffix(2000))\(built.stderr.suffix(2000))")
        let fetched = FileSystem.contents(of: scratch.path + "/checkouts")
        #expect(fetched == ["ZIPFoundation"], "packages fetched for an app: \(fetched)")
        let modules = Set(FileSystem.contents(of: scratch.path + "/debug/Modules").compactMap { $0.split(separator: ".").first.map(String.init) })
        #expect(modules == ["ConsumerApp", "DepotClient", "DepotCore", "DepotTransport", "ZIPFoundation"], "modules built for an app: \(modules.sorted())")
        // Each module's privacy manifest goes into the app as a resource of its bundle.
        let products = FileSystem.contents(of: scratch.path + "/debug")
        for module in ["DepotCore", "DepotTransport", "DepotClient"] {
            let bundle = products.first { $0.hasSuffix("_\(module).resources") || $0.hasSuffix("_\(module).bundle") }
            #expect(bundle.map { FileSystem.exists(scratch.path + "/debug/" + $0 + "/PrivacyInfo.xcprivacy") } == true, "\(module)'s privacy manifest in \(products)")
        }

        let work = TemporaryDirectory("depot-consumer-run")
        defer { work.remove() }
        let configuration = ClientConfiguration(app: "com.example.game", manifestPublicKeys: [], keyRing: try KeyRing([String: [UInt8]]()))
        try FileSystem.writeAtomically(configuration.encoded(), to: work.path + "/client.json")
        let ran = try Processes.run(scratch.path + "/debug/ConsumerApp", [work.path + "/client.json", work.path + "/group"])
        #expect(ran.status == 0 && ran.stdout == "0 packs installed, 0 waiting\n", "\(ran.stdout)\(ran.stderr)")
    }
}
