/// The rule for a zip entry's path before it is unpacked: relative, no `..` or `.` component, no
/// backslash or NUL, not a link, so that every entry lands inside the pack's folder. On its own
/// (no ZIPFoundation) so that `Deploy/fuzz` can attack it.
///
/// Checked over the path's UTF-8 bytes, as the file system sees it: split by `Character`, a
/// `/` followed by a combining mark is one grapheme, so `../\u{301}x` had no `..` component
/// and landed outside the folder (found by the fuzz target).
enum ZipEntryPath {
    /// Why a path is refused, or nil when it is safe.
    static func refusal(_ path: String, isLink: Bool) -> String? {
        if isLink { return "links are not allowed" }
        let bytes = Array(path.utf8)
        if bytes.isEmpty || bytes[0] == UInt8(ascii: "/") || bytes.contains(UInt8(ascii: "\\")) || bytes.contains(0) {
            return "the path must be relative"
        }
        let parts = bytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        if parts.contains(where: { $0.elementsEqual("..".utf8) }) {
            return "the path leaves the pack's folder"
        }
        // `./x` is `x` on disk: two entries would land on one file, and a device would refuse the pack.
        if parts.contains(where: { $0.elementsEqual(".".utf8) }) {
            return "the path has a . component"
        }
        return nil
    }
}
