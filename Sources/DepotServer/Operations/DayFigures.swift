import DepotCore
import Foundation

/// One day's counts of device reports for one app, as kept on disk
/// (`apps/<app>/reports/<day>.json`) and in the bucket (`apps/<app>/reports/<origin>/<day>.json`):
/// per channel the number of reports (and of attested ones among them), and per channel,
/// release, pack revision, outcome, error kind and attestation a count and the bytes. Nothing
/// names a device, a key or an address.
struct DayFigures: Codable, Hashable, Sendable {
    /// What one count is about.
    struct Key: Codable, Hashable, Sendable {
        var channel: String
        var release: Int
        var pack: String
        var revision: Int
        var outcome: DeviceReport.Outcome
        var error: String?
        /// True for the counts of attested reports (an App Attest assertion over the report's
        /// bytes checked); nil for unattested ones — never false, so that their rows, and every
        /// file written before reports could be attested, keep their bytes.
        var attested: Bool? = nil

        /// The key with `attested` false (from a file or another origin) taken as nil.
        var normalized: Key {
            var key = self
            if key.attested != true { key.attested = nil }
            return key
        }
    }

    /// One count: its key's fields, `count` and `bytes`, in one flat JSON object.
    struct Row: Codable, Hashable, Sendable {
        var key: Key
        var count: Int64
        var bytes: Int64

        private enum CodingKeys: String, CodingKey { case count, bytes }

        init(key: Key, count: Int64, bytes: Int64) { (self.key, self.count, self.bytes) = (key, count, bytes) }

        init(from decoder: any Decoder) throws {
            key = try Key(from: decoder)
            let container = try decoder.container(keyedBy: CodingKeys.self)
            (count, bytes) = (try container.decode(Int64.self, forKey: .count), try container.decode(Int64.self, forKey: .bytes))
        }

        func encode(to encoder: any Encoder) throws {
            try key.encode(to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(count, forKey: .count)
            try container.encode(bytes, forKey: .bytes)
        }
    }

    /// `YYYY-MM-DD`, UTC.
    var day: String
    /// Reports per channel (attested ones included).
    var reports: [String: Int64] = [:]
    /// Attested reports per channel (among ``reports``); absent when there were none (and in
    /// days counted before reports could be attested).
    var attestedReports: [String: Int64]?
    var rows: [Row] = []
    /// Per channel, reports per pack key ring (the ids a build holds, sorted, joined with `,`;
    /// ``KeyRingCounts/other`` past ``KeyRingCounts/ringsPerDay``); absent when none was named
    /// (and in days counted before reports named rings).
    var packKeyRings: [String: [String: Int64]]?
    /// Likewise for the manifest keys builds pin.
    var manifestKeyRings: [String: [String: Int64]]?

    /// The counts by key (memory's form).
    var byKey: [Key: (count: Int64, bytes: Int64)] {
        var out: [Key: (count: Int64, bytes: Int64)] = [:]
        for row in rows {
            let key = row.key.normalized
            let before = out[key] ?? (0, 0)
            out[key] = (ReportBook.adding(before.count, row.count), ReportBook.adding(before.bytes, row.bytes))
        }
        return out
    }

    init(day: String) { self.day = day }

    init(
        day: String, reports: [String: Int64], attestedReports: [String: Int64] = [:], counts: [Key: (count: Int64, bytes: Int64)],
        rings: [KeyRingCounts.Key: Int64] = [:]
    ) {
        self.day = day
        self.reports = reports
        self.attestedReports = attestedReports.isEmpty ? nil : attestedReports
        (packKeyRings, manifestKeyRings) = KeyRingCounts.nested(rings)
        rows = counts.map { Row(key: $0.key, count: $0.value.count, bytes: $0.value.bytes) }.sorted { a, b in
            let (x, y) = (a.key, b.key)
            if (x.channel, x.release, x.pack, x.revision, x.outcome.rawValue, x.error ?? "") != (y.channel, y.release, y.pack, y.revision, y.outcome.rawValue, y.error ?? "") {
                return (x.channel, x.release, x.pack, x.revision, x.outcome.rawValue, x.error ?? "") < (y.channel, y.release, y.pack, y.revision, y.outcome.rawValue, y.error ?? "")
            }
            return x.attested == nil && y.attested != nil
        }
    }

    /// The sum of several origins' figures for the same day.
    static func sum(_ parts: [DayFigures], day: String) -> DayFigures {
        var reports: [String: Int64] = [:]
        var attested: [String: Int64] = [:]
        var counts: [Key: (count: Int64, bytes: Int64)] = [:]
        var rings: [KeyRingCounts.Key: Int64] = [:]
        for part in parts {
            reports.merge(part.reports, uniquingKeysWith: ReportBook.adding)
            attested.merge(part.attestedReports ?? [:], uniquingKeysWith: ReportBook.adding)
            rings.merge(part.keyRings, uniquingKeysWith: ReportBook.adding)
            for (key, value) in part.byKey {
                let before = counts[key] ?? (0, 0)
                counts[key] = (ReportBook.adding(before.count, value.count), ReportBook.adding(before.bytes, value.bytes))
            }
        }
        return DayFigures(day: day, reports: reports, attestedReports: attested, counts: counts, rings: rings)
    }

    /// The key-ring counts, flat.
    var keyRings: [KeyRingCounts.Key: Int64] { KeyRingCounts.flat(pack: packKeyRings, manifest: manifestKeyRings) }

    static func day(of date: Date) -> String {
        let parts = Calendar(identifier: .gregorian).dateComponents(in: TimeZone(identifier: "UTC")!, from: date)
        return String(format: "%04d-%02d-%02d", parts.year ?? 0, parts.month ?? 0, parts.day ?? 0)
    }

    static func isDay(_ text: String) -> Bool {
        text.utf8.count == 10 && text.utf8.enumerated().allSatisfy { index, c in index == 4 || index == 7 ? c == UInt8(ascii: "-") : (48...57).contains(c) }
    }
}
