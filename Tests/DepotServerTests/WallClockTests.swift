import DepotCore
@testable import DepotServer
import DepotTestSupport
import Foundation
import Testing

/// The clock file a test points `DEPOT_CLOCK_FILE` at is taken only as a plain file of this
/// user that no one else may write, holding a time between 2001 and 2286.
@Suite("WallClock's file")
struct WallClockTests {
    @Test("A plain file of this user with a time is read; writable by others, a link, a FIFO, not a number, not finite or out of range is not")
    func clockFile() throws {
        let work = TemporaryDirectory("depot-clock")
        defer { work.remove() }
        let path = work.path + "/clock"
        func write(_ text: String, mode: mode_t = 0o644) throws {
            try FileSystem.writeAtomically(Array(text.utf8), to: path)
            #expect(chmod(path, mode) == 0)
        }
        try write("1795929196.5\n")
        #expect(WallClock.seconds(in: path) == 1_795_929_196.5)
        try write("1795929196", mode: 0o666)
        #expect(WallClock.seconds(in: path) == nil)
        try write("1795929196", mode: 0o620)
        #expect(WallClock.seconds(in: path) == nil)
        for bad in ["nan", "inf", "-inf", "1e400", "12", "99999999999", "", "tomorrow"] {
            try write(bad)
            #expect(WallClock.seconds(in: path) == nil, "\(bad)")
        }
        try write("1795929196")
        let link = work.path + "/link"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
        #expect(WallClock.seconds(in: link) == nil)
        let fifo = work.path + "/fifo"
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(WallClock.seconds(in: fifo) == nil)
        #expect(WallClock.seconds(in: work.path + "/missing") == nil)
    }
}
