// swift-tools-version:6.1
import PackageDescription

// Swift 6 language mode (below) brings complete strict concurrency checking.
let strict: [SwiftSetting] = [.enableUpcomingFeature("ExistentialAny")]

let package = Package(
    name: "AssetDepot",
    // The client's floor: iOS 16.4 and macOS 13.3 are the first with Background Assets' essential
    // downloads. (The server modules are built for Linux only.)
    platforms: [.macOS("13.3"), .iOS("16.4")],
    products: [
        .library(name: "DepotCore", targets: ["DepotCore"]),
        .library(name: "DepotClient", targets: ["DepotClient"]),
        .library(name: "DepotTransport", targets: ["DepotTransport"]),
        .library(name: "DepotHTTP", targets: ["DepotHTTP"]),
        .library(name: "DepotServer", targets: ["DepotServer"]),
        .executable(name: "depot", targets: ["depot"]),
    ],
    // The server and the command-line tool need packages an app does not: they sit behind the
    // "Server" trait, on by default. An app's package turns it off (`traits: []`), and then
    // fetches nothing but ZIPFoundation.
    traits: [.default(enabledTraits: ["Server"]), "Server"],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/weichsel/ZIPFoundation", from: "0.9.20"),
        // Only for the test-only target that compiles the CryptoKit backend on Linux.
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        // `swift package generate-documentation`: CI builds the DocC catalogs, warnings failing it.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CMicroHTTPD",
            pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]
        ),
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),
        // PKCS#11's declarations (p11-kit's header): the offline keys in a hardware token. Nothing is
        // linked; the token's module is loaded at run time. Only DepotPKCS11 imports it.
        .systemLibrary(
            name: "CPKCS11",
            providers: [.apt(["libp11-kit-dev"])]
        ),
        .target(name: "DepotPKCS11", dependencies: ["CPKCS11", "DepotCore"], swiftSettings: strict),
        // OpenSSL on Linux; CryptoKit on Apple platforms, where there is no system OpenSSL.
        .target(
            name: "DepotCore",
            dependencies: [.target(name: "COpenSSL", condition: .when(platforms: [.linux])), "ZIPFoundation"],
            // Each module an app links ships its privacy manifest (Apple's required-reason APIs
            // it calls, with their reasons; checked against the sources by PrivacyManifestTests).
            resources: [.copy("PrivacyInfo.xcprivacy")],
            swiftSettings: strict
        ),
        .target(name: "DepotHTTP", dependencies: ["CMicroHTTPD"], swiftSettings: strict),
        .target(
            name: "DepotServer",
            dependencies: [
                "DepotCore", "DepotHTTP", "DepotTransport",
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Server"])),
                .product(name: "Metrics", package: "swift-metrics", condition: .when(traits: ["Server"])),
                .product(name: "Prometheus", package: "swift-prometheus", condition: .when(traits: ["Server"])),
            ],
            swiftSettings: strict
        ),
        // The HTTP/1.1 client (raw sockets and OpenSSL on Linux, URLSession on Apple platforms):
        // the app's client and the server's S3 store both speak through it, so the server does
        // not depend on the app's module. DepotClient re-exports it.
        .target(name: "DepotTransport", dependencies: ["DepotCore"], resources: [.copy("PrivacyInfo.xcprivacy")], swiftSettings: strict),
        .target(name: "DepotClient", dependencies: ["DepotCore", "DepotTransport"], resources: [.copy("PrivacyInfo.xcprivacy")], swiftSettings: strict),
        .executableTarget(
            name: "depot",
            dependencies: [
                "DepotServer", "DepotClient", "DepotCore", "DepotPKCS11",
                .product(name: "ArgumentParser", package: "swift-argument-parser", condition: .when(traits: ["Server"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Server"])),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "DepotTestSupport",
            dependencies: ["DepotServer", "DepotCore", "DepotHTTP", .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Server"]))],
            path: "Tests/DepotTestSupport",
            swiftSettings: strict
        ),
        .testTarget(name: "DepotCoreTests", dependencies: ["DepotCore"], exclude: ["Fixtures"], swiftSettings: strict),
        // DepotCore's own sources (a symlink) built with the CryptoKit backend against
        // swift-crypto's Crypto, which has CryptoKit's API: the Apple platforms' crypto, tested here.
        .target(
            name: "DepotCoreCryptoKit",
            dependencies: [.product(name: "Crypto", package: "swift-crypto"), "ZIPFoundation"],
            path: "Tests/DepotCoreCryptoKit",
            exclude: ["Core/Crypto/OpenSSL", "Core/DepotCore.docc", "Core/PrivacyInfo.xcprivacy"],
            swiftSettings: strict + [.define("DEPOT_CRYPTOKIT")]
        ),
        .testTarget(
            name: "CryptoKitBackendTests",
            dependencies: ["DepotCore", "DepotCoreCryptoKit"],
            swiftSettings: strict + [.define("DEPOT_CRYPTOKIT")]
        ),
        .testTarget(name: "DepotHTTPTests", dependencies: ["DepotHTTP", "DepotTestSupport"], swiftSettings: strict),
        .testTarget(name: "DepotServerTests", dependencies: ["DepotServer", "DepotCore", "DepotTestSupport"], swiftSettings: strict),
        .testTarget(name: "DepotClientTests", dependencies: ["DepotClient", "DepotTransport", "DepotCore", "DepotTestSupport"], swiftSettings: strict),
        // A stand-in for Apple's BackgroundAssets framework (Linux has none), declared as Apple's
        // pages declare it, so that the integration guide's code compiles and runs in tests.
        .target(name: "BackgroundAssets", path: "Tests/BackgroundAssets", swiftSettings: strict),
        // The same for DeviceCheck (App Attest), which the guide's reporting block uses.
        .target(name: "DeviceCheck", path: "Tests/DeviceCheck", swiftSettings: strict),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "DepotServer", "DepotClient", "DepotCore", "DepotPKCS11", "DepotTestSupport", "depot",
                .target(name: "BackgroundAssets", condition: .when(platforms: [.linux])),
                .target(name: "DeviceCheck", condition: .when(platforms: [.linux])),
            ],
            exclude: ["Fixtures"],
            swiftSettings: strict
        ),
    ],
    swiftLanguageModes: [.v6]
)
