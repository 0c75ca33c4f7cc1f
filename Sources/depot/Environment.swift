import Foundation

/// `DEPOT_*` environment variables as option defaults: a flag on the command line wins.
enum Environment {
    static func string(_ name: String) -> String? {
        ProcessInfo.processInfo.environment[name].flatMap { $0.isEmpty ? nil : $0 }
    }

    static func string(_ name: String, _ fallback: String) -> String { string(name) ?? fallback }

    static func int<T: FixedWidthInteger>(_ name: String, _ fallback: T) -> T { string(name).flatMap { T($0) } ?? fallback }
}
