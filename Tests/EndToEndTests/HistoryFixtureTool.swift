import DepotTestSupport
import Foundation
import Testing

/// Writes ``HistoryFixture`` into a folder for the benchmarks (`Deploy/bench/history.sh`):
/// `DEPOT_HISTORY_FIXTURE=DIR DEPOT_HISTORY_SCALE=1|10|100 swift test --filter HistoryFixtureTool`.
/// Not a test of its own: it runs only when asked.
@Suite("History fixture tool", .enabled(if: ProcessInfo.processInfo.environment["DEPOT_HISTORY_FIXTURE"] != nil, "writes a fixture when DEPOT_HISTORY_FIXTURE names a folder"))
struct HistoryFixtureTool {
    @Test("Writes the history fixture into DEPOT_HISTORY_FIXTURE at DEPOT_HISTORY_SCALE")
    func write() throws {
        let environment = ProcessInfo.processInfo.environment
        let data = try #require(environment["DEPOT_HISTORY_FIXTURE"])
        let factor = Int(environment["DEPOT_HISTORY_SCALE"] ?? "") ?? 100
        #expect(!FileManager.default.fileExists(atPath: data), "\(data) exists: the fixture is written into a new folder")
        let shape = HistoryFixture.Shape.scaled(factor)
        try HistoryFixture.build(data: data, shape: shape)
        print("history fixture: \(shape) in \(data)")
    }
}
