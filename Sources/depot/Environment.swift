import Foundation

/// `DEPOT_*` environment variables as option defaults: a flag on the command line wins.
enum Environment {
    static func string(_ name: String) -> String? {
        ProcessInfo.processInfo.environment[name].flatMap { $0.isEmpty ? nil : $0 }
    }

    static func string(_ name: String, _ fallback: String) -> String { string(name) ?? fallback }

    static func int<T: FixedWidthInteger>(_ name: String, _ fallback: T) -> T { string(name).flatMap { T($0) } ?? fallback }
    /// An integer, nil when the variable is unset or not a number: an option whose default is computed.
    static func optionalInt<T: FixedWidthInteger>(_ name: String) -> T? { string(name).flatMap { T($0) } }

    /// A list, its items separated by commas or spaces (`10.0.0.0/8, 127.0.0.1`); empty when unset.
    static func list(_ name: String) -> [String] {
        (string(name) ?? "").split { $0 == "," || $0 == " " || $0 == "\t" }.map(String.init)
    }
}
