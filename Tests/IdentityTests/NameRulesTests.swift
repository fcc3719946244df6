import Identity
import Testing

/// Names refuse control, invisible and text-direction characters (docs/api.md, "Names"), and
/// names already stored are shown without them.
@Suite struct NameRulesTests {
    static let forbidden: [UInt32] =
        Array(0x00...0x1F) + Array(0x7F...0x9F) + Array(0x202A...0x202E) + Array(0x2066...0x2069)
        + [0x200E, 0x200F, 0x061C, 0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x2028, 0x2029]

    @Test func everyForbiddenCharacterIsRefusedAnywhereInAName() {
        for value in Self.forbidden {
            let scalar = Unicode.Scalar(value)!
            for name in ["\(scalar)alice", "ali\(scalar)ce", "alice\(scalar)"] {
                #expect(NameRules.firstForbidden(in: name) == scalar, "U+\(String(value, radix: 16))")
                #expect(throws: APIError.self) { try NameRules.check(name, field: "name") }
                #expect(NameRules.displayable(name) == "alice", "U+\(String(value, radix: 16))")
            }
        }
    }

    @Test func theirNeighboursAndOrdinaryNamesAreAccepted() throws {
        // Just outside each forbidden range, and names in scripts of either direction.
        let allowed: [UInt32] = [
            0x20, 0x7E, 0xA0, 0x061B, 0x061D, 0x200A, 0x2010, 0x2027, 0x202F, 0x205F, 0x2061,
            0x2065, 0x206A, 0xFEFE, 0xFF00,
        ]
        for value in allowed {
            let name = "ali\(Unicode.Scalar(value)!)ce"
            #expect(NameRules.firstForbidden(in: name) == nil, "U+\(String(value, radix: 16))")
            #expect(NameRules.displayable(name) == name)
        }
        for name in ["Alice's iPhone", "محمد", "דוד's tablet", "Zoë 🐱", "東京の電話", "👩🏽"] {
            try NameRules.check(name, field: "name")
            #expect(NameRules.displayable(name) == name)
        }
    }

    @Test func theErrorNamesTheFieldTheCharacterAndWhere() {
        do {
            try NameRules.check("alice\u{202E}nimda", field: "model")
            Issue.record("accepted")
        } catch {
            #expect(error.status == 400 && error.code == .invalidField)
            #expect(
                error.message.hasPrefix(
                    "model contains U+202E (a text-direction embedding or override) at character 6"))
        }
        do {
            try NameRules.check("ali\u{200B}ce", field: "name")
            Issue.record("accepted")
        } catch {
            #expect(error.message.hasPrefix("name contains U+200B (a zero-width character) at character 4"))
        }
    }

    @Test func aBlankOrPaddedNameIsRefusedByTheTrimmedRule() throws {
        for name in [" ", "   ", "\u{3000}", "\u{00A0}", " phone", "phone ", "phone\u{2003}"] {
            #expect(throws: APIError.self, "'\(name)'") {
                try NameRules.checkTrimmed(name, field: "device name")
            }
        }
        for name in ["phone", "my phone", "Zoë 🐱", "東京 の電話", ""] {
            try NameRules.checkTrimmed(name, field: "device name")
        }
    }
}
