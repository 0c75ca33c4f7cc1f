import ArgumentParser
import DepotCore
import Foundation

/// `--packs DIR` and `--pack-file ID=PATH`: the signer's own copies of the packs, as they were
/// published. They, not the origin, say what a changed pack must hold.
struct PackFilesOptions: ParsableArguments {
    @Option(
        name: .customLong("packs"),
        help: ArgumentHelp(
            "A folder of the packs' files as you published them, each named by its pack id (levels, or levels.zip): a pack that is not unchanged since the channel's last signed release is checked against its file before you sign.",
            valueName: "dir"
        )
    )
    var folder: String?
    @Option(name: .customLong("pack-file"), help: ArgumentHelp("One pack's file, named otherwise (repeatable).", valueName: "id=path"))
    var files: [String] = []

    @Flag(name: .customLong("check-all"), help: "Count no release signed before: every pack is checked against your files (after a leaked release key, or with a configuration exported long ago).")
    var checkAll = false

    var isEmpty: Bool { folder == nil && files.isEmpty }

    func validate() throws {
        if let folder, !FileSystem.isDirectory(folder) { throw ValidationError("--packs \(folder): no such folder") }
        var seen: Set<String> = []
        for entry in files {
            guard let (id, _) = Self.split(entry) else {
                throw ValidationError("--pack-file takes ID=PATH, a pack id and its file, such as levels=build/levels.bin; got \(entry)")
            }
            guard seen.insert(id).inserted else { throw ValidationError("--pack-file names pack \(id) twice") }
        }
    }

    /// `ID=PATH` split at its first `=`, when ID is a pack id and PATH is not empty.
    static func split(_ entry: String) -> (id: String, path: String)? {
        guard let equals = entry.firstIndex(of: "=") else { return nil }
        let (id, path) = (String(entry[..<equals]), String(entry[entry.index(after: equals)...]))
        return Identifier.isValidPack(id) && !path.isEmpty ? (id, path) : nil
    }

    /// Where each pack's file is, for a release whose packs have ids `ids`.
    func index(ids: Set<String>) -> PackFileIndex {
        PackFileIndex(given: Dictionary(uniqueKeysWithValues: files.compactMap(Self.split).map { ($0.id, $0.path) }), folder: folder, ids: ids)
    }
}

/// The signer's file of each pack: `--pack-file ID=PATH` first; else, in `--packs DIR`, the file
/// named by the pack id, or the id and one extension (`levels.zip`) when no other pack of the
/// release has that name as its id.
struct PackFileIndex {
    /// A pack's file, or why there is none to check.
    enum Found {
        case file(String)
        case none(String)
    }

    let given: [String: String]
    let folder: String?
    let names: [String]
    let ids: Set<String>

    init(given: [String: String], folder: String?, ids: Set<String>) {
        (self.given, self.folder, self.ids) = (given, folder, ids)
        names = folder.map(FileSystem.contents(of:)) ?? []
    }

    func file(for id: String) -> Found {
        if let path = given[id] { return .file(path) }
        guard let folder else { return .none("no file of it given (--packs DIR holding a file named \(id), or --pack-file \(id)=PATH)") }
        if names.contains(id) { return .file(folder + "/" + id) }
        let prefix = id + "."
        let named = names.filter { name in
            guard name.hasPrefix(prefix), !ids.contains(name) else { return false }
            let rest = name.dropFirst(prefix.count)
            return !rest.isEmpty && !rest.contains(".")
        }
        switch named.count {
        case 0: return .none("no file named \(id) (or \(id).EXT) in \(folder), nor --pack-file \(id)=PATH")
        case 1: return .file(folder + "/" + named[0])
        default: return .none("\(named.joined(separator: ", ")) in \(folder) could each be its file: name one with --pack-file \(id)=PATH")
        }
    }

    /// The files given that are no pack's of `ids` (a typo, or a pack the release dropped).
    func unused(ids: Set<String>) -> [String] {
        var used: Set<String> = []
        for id in ids { if case .file(let path) = file(for: id) { used.insert(path) } }
        let all = given.values.map { $0 } + names.filter { !$0.hasPrefix(".") }.map { (folder ?? "") + "/" + $0 }
        return Set(all).subtracting(used).sorted()
    }
}
