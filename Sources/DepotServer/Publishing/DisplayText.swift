/// Text a person reads in the dashboard or the CLI that a publisher or a CI rule's maker chose
/// (a pack's tags, a trust rule's claims): it may not carry Unicode's bidirectional controls,
/// which reorder what is shown around them (U+202E makes `main` read `niam`, and can make one
/// claim look like another) while the bytes compared stay the same (issue 50).
enum DisplayText {
    /// The embedding, override and isolate controls (U+202A–U+202E, U+2066–U+2069) and the
    /// marks (U+200E, U+200F, U+061C).
    static func isBidiControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x202A...0x202E, 0x2066...0x2069, 0x200E, 0x200F, 0x061C: true
        default: false
        }
    }

    /// Refuses `value` (named `what` in the 400's message) if it holds a bidirectional control.
    static func requireNoBidiControls(_ value: String, _ what: @autoclosure () -> String) throws {
        guard let found = value.unicodeScalars.first(where: isBidiControl) else { return }
        let code = "U+" + String(found.value, radix: 16, uppercase: true)
        throw DepotError.badRequest("\(what()) holds the bidirectional control \(code), which reorders what people read: remove it")
    }
}
