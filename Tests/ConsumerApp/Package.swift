// swift-tools-version:6.1
// An app's view of AssetDepot: a package that depends on it by path and uses only the
// DepotClient product, as an iOS app and its extension do. GuideCompileTests' sibling,
// ConsumerPackageTests, builds it and checks what it pulls in.
import Foundation
import PackageDescription

// A path dependency's identity is its folder's name, whatever the clone is called.
let depot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

let package = Package(
    name: "ConsumerApp",
    platforms: [.macOS("13.3"), .iOS("16.4")],
    dependencies: [.package(path: depot.path, traits: [])],
    targets: [
        .executableTarget(
            name: "ConsumerApp",
            dependencies: [.product(name: "DepotClient", package: depot.lastPathComponent)],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
