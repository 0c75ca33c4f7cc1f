@testable import DepotCore
import Foundation
import Testing

/// `readdir`'s records are as long as their names: a folder listing reads each name in place
/// (``System/entryName(_:)``), never a copy of the whole `d_name` array, which reads past a
/// short record at the end of the buffer (the origin crashed so in a year-long run).
@Suite("Directory entries")
struct DirectoryEntryTests {
    @Test("A short record that ends at a page before an unreadable page: its name is read without touching the next page")
    func shortRecordAtAPageEnd() throws {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let mapped = try #require(mmap(nil, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))
        try #require(mapped != MAP_FAILED)
        defer { munmap(mapped, 2 * page) }
        try #require(mprotect(mapped + page, page, PROT_NONE) == 0)
        let offset = try #require(MemoryLayout<dirent>.offset(of: \dirent.d_name))
        let name = Array("abcd".utf8) + [0]
        // The record aligned as readdir aligns it, its name's NUL the page's last byte.
        let start = (page - offset - name.count) & ~(MemoryLayout<dirent>.alignment - 1)
        let nameStart = mapped + start + offset
        let room = page - start - offset
        for index in 0..<room { nameStart.storeBytes(of: index < name.count - 1 ? name[index] : 0, toByteOffset: index, as: UInt8.self) }
        let entry = (mapped + start).bindMemory(to: dirent.self, capacity: 1)
        #expect(System.entryName(entry) == "abcd")
    }

    @Test("A folder's names, of every length up to 255 bytes, listed whole")
    func listing() throws {
        let folder = FileManager.default.temporaryDirectory.path + "/depot-entries-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let names = (1...255).map { String(repeating: "n", count: $0) }
        for name in names { #expect(FileManager.default.createFile(atPath: folder + "/" + name, contents: nil)) }
        #expect(System.directoryEntries(folder)?.sorted() == names.sorted())
    }

    @Test("No source reads a directory entry's d_name but System.entryName (a copy of the array reads past short records)")
    func noOtherReader() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path + "/Sources"
        let files = try #require(FileManager.default.enumerator(atPath: root)).compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") }
        #expect(files.count > 50)
        for file in files {
            let text = try String(contentsOfFile: root + "/" + file, encoding: .utf8)
            let uses = text.components(separatedBy: "\n").filter { $0.contains("d_name") && !$0.trimmingCharacters(in: .whitespaces).hasPrefix("///") }
            let allowed = file == "DepotCore/Support/System+Paths.swift" ? uses.filter { !$0.contains("offset(of: \\dirent.d_name)") } : uses
            #expect(allowed.isEmpty, "\(file): \(allowed)")
        }
    }
}
