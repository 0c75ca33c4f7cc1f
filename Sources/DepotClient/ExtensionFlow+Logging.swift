import DepotCore
import Foundation

/// What the flow tells ``DepotLog`` about each event and each install step: enough to answer
/// "why does this device not have pack X" from the device's log alone.
extension ExtensionFlow {
    static func log(_ plan: Plan, kind: RequestKind, manifest: Manifest, channel: String) {
        let category = "schedule"
        DepotLog.info("\(kind) event, channel \(channel), manifest version \(manifest.version): scheduling \(list(plan.downloads.map(\.identifier)))", category: category)
        for download in plan.deferred {
            let over = plan.overAllowance[download.entry.id].map { " by \($0) bytes" } ?? ""
            DepotLog.notice("\(download.identifier) deferred: over the \(download.essential ? "essential " : "")download allowance\(over); asked for at a later event", category: category)
        }
        if !plan.alreadyScheduled.isEmpty {
            DepotLog.info("already with the system or waiting for the install step: \(list(plan.alreadyScheduled))", category: category)
        }
        if !plan.notRequested.isEmpty { DepotLog.info("on demand, not asked for: \(list(plan.notRequested))", category: category) }
        if !plan.otherLanguages.isEmpty { DepotLog.info("other languages than this device's: \(list(plan.otherLanguages))", category: category) }
    }

    static func log(_ report: ArrivedReport) {
        let category = "install"
        for id in report.installed { DepotLog.info("\(id) installed", category: category) }
        for (identifier, why) in report.kept.sorted(by: { $0.key < $1.key }) {
            DepotLog.notice("\(identifier) kept for the next install step: \(why)", category: category)
        }
        for (identifier, why) in report.discarded.sorted(by: { $0.key < $1.key }) {
            DepotLog.error("\(identifier) dropped, planned again at the next event: \(why)", category: category)
        }
        for id in report.removed { DepotLog.info("\(id) removed: the device's language no longer takes it", category: category) }
    }

    private static func list(_ items: [String]) -> String { items.isEmpty ? "nothing" : items.joined(separator: ", ") }
}
