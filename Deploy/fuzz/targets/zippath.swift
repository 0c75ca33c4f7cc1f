import Foundation

// Fuzz target: the zip entry path rule (DepotCore/Zip/ZipEntryPath.swift), compiled with it.
// Input: one flag byte (bit 0: the entry is a link), then the path. A path the rule accepts,
// joined to a folder and normalised, stays inside that folder; a link is never accepted.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzZipPath(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: count)
    guard let flags = bytes.first else { return 0 }
    let path = String(decoding: bytes.dropFirst(), as: UTF8.self)
    guard ZipEntryPath.refusal(path, isLink: flags & 1 == 1) == nil else { return 0 }
    precondition(flags & 1 == 0, "a link was accepted: \(path.debugDescription)")
    let folder = "/pack"
    let resolved = URL(fileURLWithPath: folder).appendingPathComponent(path).standardized.path
    // Compared as bytes: hasPrefix compares Characters, and "/" plus a combining mark is one.
    precondition(resolved == folder || resolved.utf8.starts(with: (folder + "/").utf8), "\(path.debugDescription) lands at \(resolved)")
    return 0
}
