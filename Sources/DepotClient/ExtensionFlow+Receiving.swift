import DepotCore
import Foundation

/// What the system delivers: taken in by the extension (or the app's download manager
/// delegate) in constant time, waiting for the install step.
extension ExtensionFlow {
    /// The deliveries waiting for ``installArrived(languages:now:)``, by identifier.
    public func arrivedIdentifiers() -> Set<String> {
        Set(FileSystem.contents(of: store.arrived).filter(Self.isIdentifier))
    }

    /// A finished download (`identifier` as scheduled; the system deletes the file once its
    /// callback returns): renamed into the App Group folder (`.depot/arrived/`), where
    /// ``installArrived(languages:now:)`` finds it. One rename, whatever the size; nothing is read. A
    /// second delivery of the same identifier replaces the first.
    public func receive(identifier: String, file path: String) throws {
        guard Self.isIdentifier(identifier) else { throw ClientError.integrity(identifier, "not an identifier this module schedules (pack@revision)") }
        forgetScheduled(identifier)
        let target = store.arrived + "/" + identifier
        do {
            // One drive flush, on the App Group's folder; the system's folder, which it empties
            // when this returns, is not synced.
            try FileSystem.durableRename(path, to: target, syncingSource: false)
        } catch let error where error.errno == EXDEV {
            // Another volume (not the App Group container): a copy, which takes the pack's time.
            do {
                let temporary = FileSystem.temporaryPath(besides: target)
                try FileManager.default.copyItem(atPath: path, toPath: temporary)
                try FileDescriptor.openForReading(temporary).sync(.ordered)
                try FileSystem.durableRename(temporary, to: target)
            } catch {
                throw ClientError.install(identifier, error)
            }
        } catch {
            throw error.isNoSpace ? ClientError.noSpace(store.arrived) : ClientError.install(identifier, error)
        }
    }

    /// `pack@revision` or `pack@revision-from-base`, with a valid pack id and revision numbers.
    static func isIdentifier(_ name: String) -> Bool {
        let parts = name.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, Identifier.isValidPack(String(parts[0])) else { return false }
        let numbers = parts[1].components(separatedBy: "-from-")
        return (1...2).contains(numbers.count) && numbers.allSatisfy { !$0.isEmpty && $0.utf8.allSatisfy { $0 >= 48 && $0 <= 57 } && $0.count <= 18 }
    }

    /// The pack id, its revision and (for a patch) the base revision of a valid identifier.
    static func parse(_ identifier: String) -> (id: String, revision: Int, base: Int?) {
        let parts = identifier.split(separator: "@")
        let numbers = parts[1].components(separatedBy: "-from-")
        return (String(parts[0]), Int(numbers[0]) ?? -1, numbers.count == 2 ? Int(numbers[1]) : nil)
    }
}
