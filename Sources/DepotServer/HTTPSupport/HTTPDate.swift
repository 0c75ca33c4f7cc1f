import Foundation
import Synchronization

/// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), formatted and parsed.
enum HTTPDate {
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    /// The last few dates formatted (a blob's Last-Modified repeats on every request for it).
    private static let recent = Mutex<[Int: String]>([:])

    static func format(_ date: Date) -> String {
        let second = Int(date.timeIntervalSince1970.rounded(.down))
        if let hit = recent.withLock({ $0[second] }) { return hit }
        let text = formatUncached(date)
        recent.withLock { cache in
            if cache.count >= 64 { cache.removeAll(keepingCapacity: true) }
            cache[second] = text
        }
        return text
    }

    private static func formatUncached(_ date: Date) -> String {
        var time = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&time, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }

    /// Parses IMF-fixdate; nil for anything else (such a condition is then ignored, as RFC 9110 says).
    static func parse(_ text: String) -> Date? {
        let fields = text.trimmingWhitespace.split(separator: " ")
        guard fields.count == 6, fields[5] == "GMT", let day = Int32(fields[1]), let month = months.firstIndex(of: String(fields[2])),
              let year = Int32(fields[3]) else { return nil }
        let clock = fields[4].split(separator: ":").compactMap { Int32($0) }
        guard clock.count == 3 else { return nil }
        var parts = tm()
        parts.tm_year = year - 1900
        parts.tm_mon = Int32(month)
        parts.tm_mday = day
        parts.tm_hour = clock[0]
        parts.tm_min = clock[1]
        parts.tm_sec = clock[2]
        return Date(timeIntervalSince1970: TimeInterval(timegm(&parts)))
    }
}
