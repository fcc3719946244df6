extension JSONParser {
    /// Parses the string whose opening quote is at `index`. Strings without escapes (nearly all of
    /// them) are validated in place and become a String straight from the input bytes.
    mutating func parseString() throws(JSONParseError) -> String {
        let quoteOffset = index
        index += 1
        let start = index
        while true {
            guard index < count else { throw unterminated(quoteOffset) }
            let byte = base[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return String(
                    decoding: UnsafeBufferPointer(start: base + start, count: index - 1 - start),
                    as: UTF8.self)
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw controlCharacter() }
            index = byte < 0x80 ? index + 1 : try endOfUTF8Sequence()
        }
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: UnsafeBufferPointer(start: base + start, count: index - start))
        while true {
            guard index < count else { throw unterminated(quoteOffset) }
            let byte = base[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return String(decoding: scratch, as: UTF8.self)
            }
            if byte == UInt8(ascii: "\\") {
                try appendEscape()
            } else if byte < 0x20 {
                throw controlCharacter()
            } else if byte < 0x80 {
                scratch.append(byte)
                index += 1
            } else {
                let end = try endOfUTF8Sequence()
                scratch.append(contentsOf: UnsafeBufferPointer(start: base + index, count: end - index))
                index = end
            }
        }
    }

    /// Decodes the escape whose backslash is at `index` into `scratch`.
    private mutating func appendEscape() throws(JSONParseError) {
        guard index + 1 < count else { throw fail(.unexpectedEnd, "unexpected end of input in an escape") }
        let escaped: UInt8
        switch base[index + 1] {
        case UInt8(ascii: "\""): escaped = UInt8(ascii: "\"")
        case UInt8(ascii: "\\"): escaped = UInt8(ascii: "\\")
        case UInt8(ascii: "/"): escaped = UInt8(ascii: "/")
        case UInt8(ascii: "b"): escaped = 0x08
        case UInt8(ascii: "f"): escaped = 0x0C
        case UInt8(ascii: "n"): escaped = 0x0A
        case UInt8(ascii: "r"): escaped = 0x0D
        case UInt8(ascii: "t"): escaped = 0x09
        case UInt8(ascii: "u"):
            try appendUnicodeEscape()
            return
        default:
            throw fail(
                .invalidEscape,
                "invalid escape \\\(describeByte(at: index + 1)): use one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX"
            )
        }
        scratch.append(escaped)
        index += 2
    }

    /// `\uXXXX`, or a surrogate pair `\uD8xx\uDCxx` for scalars above U+FFFF; a surrogate on its own
    /// names no character and would not survive conversion to UTF-8, so it is rejected.
    private mutating func appendUnicodeEscape() throws(JSONParseError) {
        let escapeOffset = index
        var scalar = try hexQuad(at: index + 2)
        index += 6
        if scalar >= 0xDC00 && scalar <= 0xDFFF {
            throw fail(.loneSurrogate, "lone low surrogate in \\u escape", at: escapeOffset)
        }
        if scalar >= 0xD800 && scalar <= 0xDBFF {
            guard index + 1 < count, base[index] == UInt8(ascii: "\\"), base[index + 1] == UInt8(ascii: "u")
            else {
                throw fail(
                    .loneSurrogate, "high surrogate in \\u escape not followed by a low surrogate",
                    at: escapeOffset)
            }
            let low = try hexQuad(at: index + 2)
            guard low >= 0xDC00 && low <= 0xDFFF else {
                throw fail(
                    .loneSurrogate, "high surrogate in \\u escape not followed by a low surrogate",
                    at: escapeOffset)
            }
            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            index += 6
        }
        scratch.append(contentsOf: UTF8.encode(Unicode.Scalar(scalar)!)!)
    }

    private func hexQuad(at offset: Int) throws(JSONParseError) -> UInt32 {
        var value: UInt32 = 0
        for position in offset..<offset + 4 {
            guard position < count else {
                throw fail(.unexpectedEnd, "unexpected end of input in a \\u escape")
            }
            guard let digit = UTF8Rules.hexDigit(base[position]) else {
                throw fail(.invalidEscape, "\\u must be followed by four hex digits", at: position)
            }
            value = value << 4 | UInt32(digit)
        }
        return value
    }

    /// Validates the multi-byte UTF-8 sequence starting at `index` (RFC 3629: no overlong forms, no
    /// surrogates, nothing above U+10FFFF) and returns the offset just past it.
    private func endOfUTF8Sequence() throws(JSONParseError) -> Int {
        guard let (length, secondRange) = UTF8Rules.sequence(lead: base[index]) else { throw invalidUTF8() }
        guard index + length <= count else { throw invalidUTF8() }
        let second = base[index + 1]
        guard secondRange.contains(second) else { throw invalidUTF8() }
        for offset in 2..<length where base[index + offset] & 0xC0 != 0x80 {
            throw invalidUTF8()
        }
        return index + length
    }

    @inline(never)
    private func invalidUTF8() -> JSONParseError {
        fail(.invalidUTF8, "invalid UTF-8 in string: send text encoded as UTF-8")
    }

    @inline(never)
    private func controlCharacter() -> JSONParseError {
        fail(
            .controlCharacter,
            "unescaped control character \(describeByte(at: index)) in string: escape it as \\u00XX")
    }

    @inline(never)
    private func unterminated(_ quoteOffset: Int) -> JSONParseError {
        fail(.unexpectedEnd, "unterminated string starting at byte \(quoteOffset): expected '\"'")
    }
}
