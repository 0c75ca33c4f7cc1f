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
}
