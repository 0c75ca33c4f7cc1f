import DepotCore
import Foundation

/// Localized packs in a sync: the planner picks one language of each group; an installed pack of
/// another language goes only once its group's pick is installed, so the app always has one.
extension DepotSync {
    /// Removes each installed pack the plan replaces whose replacement is installed at the
    /// manifest's revision; the others wait (their replacement failed or was deferred).
    func replaceLanguages(_ plan: Plan, manifest: Manifest, store: StateStore, report: inout SyncReport) throws {
        for (old, replacement) in plan.languageReplacements.sorted(by: { $0.key < $1.key }) {
            guard let entry = manifest[pack: replacement] else { continue }
            // The replacement's copy is checked (a walk of its tree) before the lock; under the
            // lock the record goes, then the copy is renamed aside; it is deleted after.
            guard let installed = try store.read(app: configuration.app).packs[replacement], store.isWhole(replacement, installed) else {
                report.waiting[old] = "replaced by \(replacement) once that is installed"
                continue
            }
            let (removed, aside) = try store.removePacks(app: configuration.app) { state in
                guard let now = state.packs[replacement], now.revision == entry.revision, now.sha256 == entry.sha256, now.inode == installed.inode else { return [] }
                return [old]
            }
            aside.forEach(Installer.removeTree)
            if !removed.isEmpty {
                report.removed.append(old)
                observer?(.removed(old))
            } else {
                report.waiting[old] = "replaced by \(replacement) once that is installed"
            }
        }
        report.otherLanguages = plan.otherLanguages
    }
}
