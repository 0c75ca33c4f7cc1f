import ArgumentParser
import DepotCore
import DepotServer
import Foundation

#if canImport(Glibc)
import Glibc
#endif

struct Init: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Initialise a data folder for production: its folders, its format version and the manifest signing key; no app, no token, nothing secret printed.",
        discussion: """
            Run it as the user the origin runs as (the package does, as assetdepot). Then create apps with \\
            `depot apps create` and tokens with `depot tokens create --out FILE`. On a folder already initialised \\
            it changes nothing.
            """
    )
    @OptionGroup var data: DataOptions

    func run() throws {
        let folder = DataFolder(data.data)
        if folder.exists {
            let apps = AppStore(folder: folder).list()
            print("\(data.data) is already a data folder (format \(try folder.currentFormat()), \(apps.count) apps); nothing changed")
            return
        }
        try folder.makeFolders()
        _ = try AppStore(folder: folder).signingKeys()
        print("initialised \(data.data) (data-folder format \(try folder.currentFormat()), depot \(AssetDepotVersion.current)): no apps yet; next: depot apps create APP --data \(data.data)")
    }
}

/// A `depot` run by root on a data folder another user owns (the service user): the command
/// continues as that user, so that every file it writes is one the origin can read, whatever
/// `sudo` was typed. Before, `sudo depot tokens create` rewrote `tokens.json` as `root:root 0600`
/// and the origin then answered every token 401.
enum DataFolderOwner {
    /// Becomes the owner of `path` when this process is root and the folder (or, when it does not
    /// exist yet, its parent) belongs to someone else; returns that user id, or nil when nothing changed.
    @discardableResult
    static func adopt(_ path: String) throws -> uid_t? {
        guard geteuid() == 0 else { return nil }
        var info = stat()
        let existing = stat(path, &info) == 0 ? path : nil
        if existing == nil {
            var parent = stat()
            guard stat(FileSystem.directory(of: path), &parent) == 0 else { return nil }
            info = parent
        }
        guard info.st_uid != 0 else { return nil }
        let (uid, gid) = (info.st_uid, info.st_gid)
        // The user's own groups when it has a passwd entry (as `sudo -u` gives), else none.
        let groups = getpwuid(uid).map { initgroups($0.pointee.pw_name, gid) } ?? setgroups(0, nil)
        guard groups == 0, setgid(gid) == 0, setuid(uid) == 0, getuid() == uid, geteuid() == uid else {
            throw CLIError("\(path) belongs to uid \(uid) and this depot runs as root but cannot become that user (\(String(cString: strerror(errno)))): run it as the folder's owner, e.g. sudo -u assetdepot depot …")
        }
        return uid
    }

    /// The `--data` of a parsed command, if it has one.
    static func dataPath(of command: any ParsableCommand) -> String? {
        for child in Mirror(reflecting: command).children {
            if let group = child.value as? OptionGroup<DataOptions> { return group.wrappedValue.data }
        }
        return nil
    }
}
