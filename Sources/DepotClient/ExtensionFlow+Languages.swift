import DepotCore
import Foundation

/// Localized packs in the install step: an installed pack of a language the device no longer
/// picks goes once its group's pick is installed, so the app always has one.
extension ExtensionFlow {
    /// Removes each installed localized pack the device's languages no longer pick whose group's
    /// pick is installed at the manifest's revision; returns their ids.
    func removeReplacedLanguages(manifest: Manifest, languages: [String]) throws -> [String] {
        let picks = LanguageSelection.picks(manifest.packs, preferred: LanguageTag.list(languages), primary: manifest.primaryLanguageTag)
        // Which picks are installed whole is looked at first (a walk of each tree), without the
        // lock; under it the records go, then the copies are renamed aside; deleted after it.
        let before = try store.read(app: configuration.app)
        let wanted = Set(manifest.packs.compactMap { entry in before.packs[entry.id] != nil ? picks[entry.id].flatMap { $0 == entry.id ? nil : $0 } : nil })
        let whole = Set(wanted.filter { id in before.packs[id].map { store.isWhole(id, $0) } ?? false })
        let (removed, aside) = try store.removePacks(app: configuration.app) { state in
            manifest.packs.compactMap { entry -> String? in
                guard state.packs[entry.id] != nil, let pickID = picks[entry.id], pickID != entry.id, let pick = manifest[pack: pickID],
                      let installed = state.packs[pick.id], installed.revision == pick.revision, installed.sha256 == pick.sha256,
                      whole.contains(pick.id), installed.inode == before.packs[pick.id]?.inode else { return nil }
                return entry.id
            }
        }
        aside.forEach(Installer.removeTree)
        return removed
    }
}
