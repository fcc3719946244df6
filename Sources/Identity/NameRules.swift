/// What a name may contain: user names, device names and models, and anything else a person or a
/// device chooses that the panel or the admin page shows (docs/api.md, "Names").
///
/// A name is shown to other people (a shared device shows its owner's name; the admin page lists
/// everyone's), so it must read as what it is. Characters that are invisible or that reorder the
/// text around them let a name impersonate another: "alice\u{202E}nimda" shows as "aliceadmin",
/// and "ali\u{200B}ce" looks exactly like "alice" but is another user. So these are refused:
///
/// | characters | why |
/// | --- | --- |
/// | U+0000-U+001F, U+007F (C0 controls, DEL) | not text; newlines and tabs break lines and columns |
/// | U+0080-U+009F (C1 controls) | not text; some terminals act on them |
/// | U+202A-U+202E (embeddings, overrides) | reverse or re-embed the text that follows |
/// | U+2066-U+2069 (isolates) | the same, in the newer form |
/// | U+200E, U+200F, U+061C (direction marks) | invisible, and change how neighbours are ordered |
/// | U+200B-U+200D, U+2060, U+FEFF (zero-width) | invisible: two names that look equal differ |
/// | U+2028, U+2029 (line and paragraph separators) | line breaks, like the C0 newline |
///
/// The zero-width joiner U+200D is also what joins emoji sequences (a family, a profession): such a
/// name must use the emoji separately. Right-to-left scripts themselves are welcome: Arabic and
/// Hebrew names are ordered by the characters' own direction, which needs none of the above.
public enum NameRules {
    /// Whether `scalar` may not appear in a name.
    public static func isForbidden(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: true
        case 0x202A...0x202E, 0x2066...0x2069: true
        case 0x200E, 0x200F, 0x061C: true
        case 0x200B...0x200D, 0x2060, 0xFEFF: true
        case 0x2028, 0x2029: true
        default: false
        }
    }

    /// The first character of `text` a name may not contain, or nil.
    public static func firstForbidden(in text: String) -> Unicode.Scalar? {
        text.unicodeScalars.first(where: isForbidden)
    }

    /// Refuses a name with a forbidden character: 400 `invalid_field`, naming the field, the
    /// character and its position, so that a client can tell its user what to remove.
    public static func check(_ text: String, field: String) throws(APIError) {
        guard let scalar = firstForbidden(in: text) else { return }
        let position =
            text.unicodeScalars.firstIndex(of: scalar).map {
                text.unicodeScalars.distance(from: text.unicodeScalars.startIndex, to: $0)
            } ?? 0
        throw .badRequest(
            .invalidField,
            "\(field) contains \(describe(scalar)) at character \(position + 1); names must not contain control, invisible (zero-width) or text-direction characters: remove it"
        )
    }

    /// Refuses a name that is only white space or that begins or ends with it (400
    /// `invalid_field`): " " reads as no name at all, and "phone " looks exactly like "phone" but
    /// is another name. For names taken as they come, such as an MQTT topic's device level, where
    /// trimming would make a name other than the one the device uses.
    public static func checkTrimmed(_ text: String, field: String) throws(APIError) {
        guard let first = text.first, let last = text.last else { return }
        if text.allSatisfy(\.isWhitespace) {
            throw .badRequest(.invalidField, "\(field) is only white space: give it a name that shows")
        }
        if first.isWhitespace || last.isWhitespace {
            throw .badRequest(
                .invalidField, "\(field) begins or ends with white space, which nobody sees: remove it")
        }
    }

    /// `text` without the characters a name may not contain: how a name is shown when it came from
    /// a log written before these rules (docs/panel.md).
    public static func displayable(_ text: String) -> String {
        guard firstForbidden(in: text) != nil else { return text }
        var scalars = String.UnicodeScalarView()
        scalars.append(contentsOf: text.unicodeScalars.lazy.filter { !isForbidden($0) })
        return String(scalars)
    }

    /// `U+202E (right-to-left override)`.
    package static func describe(_ scalar: Unicode.Scalar) -> String {
        var hex = String(scalar.value, radix: 16, uppercase: true)
        while hex.count < 4 { hex = "0" + hex }
        let name: String =
            switch scalar.value {
            case 0x202A...0x202E: "a text-direction embedding or override"
            case 0x2066...0x2069: "a text-direction isolate"
            case 0x200E, 0x200F, 0x061C: "a text-direction mark"
            case 0x200B...0x200D, 0x2060, 0xFEFF: "a zero-width character"
            case 0x2028, 0x2029: "a line separator"
            default: "a control character"
            }
        return "U+\(hex) (\(name))"
    }
}
