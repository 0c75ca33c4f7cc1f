// Fuzz target: the Apple Archive walker (DepotCore/Archive), which reads managed apps' uploads.
// The input is written to a file and walked as an uncompressed archive: it must either be
// accepted with at least one entry and no more file bytes than the file has, or be refused with
// an ArchiveError; never another error, a crash, or a read past the end.
import Foundation

let scratch = "/tmp/depot-fuzz-archive-\(getpid())"

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzArchive(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: count))
    _ = AppleArchive.kind(ofPrefix: bytes)
    try! FileSystem.writeAtomically(bytes, to: scratch)
    let file = try! FileDescriptor.openForReading(scratch)
    defer { try? file.close() }
    do {
        let contents = try AppleArchive.inspect(file, size: Int64(count))
        precondition(contents.entries >= 1 && contents.fileBytes <= Int64(count), "accepted an impossible archive: \(contents)")
    } catch is AppleArchive.ArchiveError {
    } catch {
        preconditionFailure("a refusal that is not an ArchiveError: \(error)")
    }
    return 0
}
