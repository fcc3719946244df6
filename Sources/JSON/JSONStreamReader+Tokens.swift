/// Strings and numbers of `JSONStreamReader` (its core), by the rules of `JSONParser`'s. A token that runs
/// past the buffered bytes is read again from its start once more input is in (tokens are short;
/// a long one makes the buffer grow, within `tokenBytesMax`).
extension JSONStreamCore {
    /// Reads the string whose opening quote is at `index`.
    mutating func readString() throws(JSONStreamError) {
        while true {
            let quote = index
            if try scanString(quote: quote) { return }
            if atInputEnd {
                throw fail(
                    .unexpectedEnd,
                    "unterminated string starting at byte \(bufferOffset + Int64(quote)): expected '\"'",
                    at: bufferOffset + Int64(filled))
            }
            index = quote
            try fill(keepingFrom: quote)
        }
    }

    /// True when the whole string was in the buffer (then `index` is past it); false when more
    /// input is needed.
    private mutating func scanString(quote: Int) throws(JSONStreamError) -> Bool {
        var position = quote + 1
        while position < filled {
            let byte = buffer[position]
            if byte >= 0x20 && byte < 0x80 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\") {
                position += 1
                continue
            }
            if byte == UInt8(ascii: "\"") {
                stringStart = quote + 1
                stringCount = position - stringStart
                stringInScratch = false
                index = position + 1
                return true
            }
            if byte == UInt8(ascii: "\\") {
                return try scanEscapedString(quote: quote, from: position)
            }
            if byte < 0x20 { throw controlCharacter(at: position) }
            guard let end = try endOfUTF8Sequence(at: position) else { return false }
            position = end
        }
        return false
    }

    /// The rest of a string that holds an escape, decoded into `scratch`.
    private mutating func scanEscapedString(quote: Int, from escape: Int) throws(JSONStreamError) -> Bool {
        scratchCount = 0
        appendToScratch(UnsafeBufferPointer(start: buffer + quote + 1, count: escape - quote - 1))
        var position = escape
        while position < filled {
            let byte = buffer[position]
            if byte == UInt8(ascii: "\"") {
                stringInScratch = true
                index = position + 1
                return true
            }
            if byte == UInt8(ascii: "\\") {
                guard let end = try appendEscape(at: position) else { return false }
                position = end
            } else if byte < 0x20 {
                throw controlCharacter(at: position)
            } else if byte < 0x80 {
                appendToScratch(byte)
                position += 1
            } else {
                guard let end = try endOfUTF8Sequence(at: position) else { return false }
                appendToScratch(UnsafeBufferPointer(start: buffer + position, count: end - position))
                position = end
            }
        }
        return false
    }

    /// Decodes the escape at `position` into `scratch` and answers the offset past it; nil when
    /// the escape runs past the buffered bytes.
    private mutating func appendEscape(at position: Int) throws(JSONStreamError) -> Int? {
        guard position + 1 < filled else {
            if atInputEnd {
                throw fail(.unexpectedEnd, "unexpected end of input in an escape", at: offset(position))
            }
            return nil
        }
        let escaped: UInt8
        switch buffer[position + 1] {
        case UInt8(ascii: "\""): escaped = UInt8(ascii: "\"")
        case UInt8(ascii: "\\"): escaped = UInt8(ascii: "\\")
        case UInt8(ascii: "/"): escaped = UInt8(ascii: "/")
        case UInt8(ascii: "b"): escaped = 0x08
        case UInt8(ascii: "f"): escaped = 0x0C
        case UInt8(ascii: "n"): escaped = 0x0A
        case UInt8(ascii: "r"): escaped = 0x0D
        case UInt8(ascii: "t"): escaped = 0x09
        case UInt8(ascii: "u"): return try appendUnicodeEscape(at: position)
        default:
            throw fail(
                .invalidEscape,
                "invalid escape \\\(describe(buffer[position + 1])): use one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX",
                at: offset(position))
        }
        appendToScratch(escaped)
        return position + 2
    }

    private mutating func appendUnicodeEscape(at position: Int) throws(JSONStreamError) -> Int? {
        guard let first = try hexQuad(at: position + 2) else { return nil }
        var scalar = first
        var end = position + 6
        if scalar >= 0xDC00 && scalar <= 0xDFFF {
            throw fail(.loneSurrogate, "lone low surrogate in \\u escape", at: offset(position))
        }
        if scalar >= 0xD800 && scalar <= 0xDBFF {
            if end + 6 > filled && !atInputEnd { return nil }
            guard end + 1 < filled, buffer[end] == UInt8(ascii: "\\"), buffer[end + 1] == UInt8(ascii: "u"),
                let low = try hexQuad(at: end + 2), low >= 0xDC00 && low <= 0xDFFF
            else {
                throw fail(
                    .loneSurrogate, "high surrogate in \\u escape not followed by a low surrogate",
                    at: offset(position))
            }
            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            end += 6
        }
        for byte in UTF8.encode(Unicode.Scalar(scalar)!)! { appendToScratch(byte) }
        return end
    }

    private func hexQuad(at start: Int) throws(JSONStreamError) -> UInt32? {
        var value: UInt32 = 0
        for position in start..<start + 4 {
            guard position < filled else {
                if atInputEnd {
                    throw fail(
                        .unexpectedEnd, "unexpected end of input in a \\u escape", at: offset(position))
                }
                return nil
            }
            guard let digit = UTF8Rules.hexDigit(buffer[position]) else {
                throw fail(.invalidEscape, "\\u must be followed by four hex digits", at: offset(position))
            }
            value = value << 4 | UInt32(digit)
        }
        return value
    }

    /// The offset past the UTF-8 sequence at `position` (RFC 3629: no overlong forms, no
    /// surrogates, nothing above U+10FFFF); nil when it runs past the buffered bytes.
    private func endOfUTF8Sequence(at position: Int) throws(JSONStreamError) -> Int? {
        guard let (length, secondRange) = UTF8Rules.sequence(lead: buffer[position]) else {
            throw invalidUTF8(at: position)
        }
        guard position + length <= filled else {
            if atInputEnd { throw invalidUTF8(at: position) }
            return nil
        }
        let second = buffer[position + 1]
        guard secondRange.contains(second) else { throw invalidUTF8(at: position) }
        for index in 2..<length where buffer[position + index] & 0xC0 != 0x80 {
            throw invalidUTF8(at: position)
        }
        return position + length
    }

    private mutating func appendToScratch(_ bytes: UnsafeBufferPointer<UInt8>) {
        reserveScratch(bytes.count)
        if let base = bytes.baseAddress { (scratch + scratchCount).update(from: base, count: bytes.count) }
        scratchCount += bytes.count
    }

    @inline(__always)
    private mutating func appendToScratch(_ byte: UInt8) {
        reserveScratch(1)
        scratch[scratchCount] = byte
        scratchCount += 1
    }

    /// A decoded string is never longer than its token, which `tokenBytesMax` bounds.
    private mutating func reserveScratch(_ more: Int) {
        guard scratchCount + more > scratchCapacity else { return }
        let grown = max(scratchCapacity * 2, scratchCount + more)
        let larger = UnsafeMutablePointer<UInt8>.allocate(capacity: grown)
        larger.update(from: scratch, count: scratchCount)
        scratch.deallocate()
        scratch = larger
        scratchCapacity = grown
    }

    // MARK: Numbers

    /// Reads `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?` at `index` into `number`.
    mutating func readNumber() throws(JSONStreamError) {
        var end = index
        while true {
            while end < filled, isNumberByte(buffer[end]) { end += 1 }
            if end < filled || atInputEnd { break }
            let start = index
            try fill(keepingFrom: start)
            end -= start
        }
        try checkNumberGrammar(end: end)
        numberIsInteger = true
        for position in index..<end
        where buffer[position] == UInt8(ascii: ".") || buffer[position] | 0x20 == UInt8(ascii: "e") {
            numberIsInteger = false
        }
        var at = index
        if let value = JSONNumber.shortDecimal(UnsafePointer(buffer), count: end, at: &at), at == end {
            number = value
        } else {
            let literal = String(
                decoding: UnsafeBufferPointer(start: buffer + index, count: end - index), as: UTF8.self)
            guard let value = Double(literal) else {
                preconditionFailure("a literal the JSON grammar accepted was refused by strtod: \(literal)")
            }
            guard value.isFinite else {
                throw fail(
                    .numberOutOfRange, "number \(literal) is outside the range of a double", at: offset(index)
                )
            }
            number = value
        }
        index = end
    }

    @inline(__always)
    private func isNumberByte(_ byte: UInt8) -> Bool {
        byte &- UInt8(ascii: "0") < 10 || byte == UInt8(ascii: ".") || byte | 0x20 == UInt8(ascii: "e")
            || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "+")
    }

    private func checkNumberGrammar(end: Int) throws(JSONStreamError) {
        @inline(__always) func isDigit(_ position: Int) -> Bool {
            position < end && buffer[position] &- UInt8(ascii: "0") < 10
        }
        func expectDigit(_ position: Int, _ what: String) throws(JSONStreamError) {
            guard isDigit(position) else {
                throw fail(
                    position < filled ? .unexpectedByte : .unexpectedEnd, "expected \(what) in number",
                    at: offset(position))
            }
        }
        var position = index
        if buffer[position] == UInt8(ascii: "-") { position += 1 }
        try expectDigit(position, "a digit after '-'")
        if buffer[position] == UInt8(ascii: "0") {
            position += 1
            if isDigit(position) {
                throw fail(.invalidNumber, "leading zeros are not allowed in numbers", at: offset(index))
            }
        } else {
            while isDigit(position) { position += 1 }
        }
        if position < end, buffer[position] == UInt8(ascii: ".") {
            position += 1
            try expectDigit(position, "a digit after '.'")
            while isDigit(position) { position += 1 }
        }
        if position < end, buffer[position] | 0x20 == UInt8(ascii: "e") {
            position += 1
            if position < end, buffer[position] == UInt8(ascii: "+") || buffer[position] == UInt8(ascii: "-")
            {
                position += 1
            }
            try expectDigit(position, "a digit in the exponent")
            while isDigit(position) { position += 1 }
        }
        guard position == end else {
            throw fail(
                .invalidNumber, "unexpected \(describe(buffer[position])) in number", at: offset(position))
        }
    }

    // MARK: Errors (cold path)

    func offset(_ position: Int) -> Int64 { bufferOffset + Int64(position) }

    @inline(never)
    private func invalidUTF8(at position: Int) -> JSONStreamError {
        fail(.invalidUTF8, "invalid UTF-8 in string: send text encoded as UTF-8", at: offset(position))
    }

    @inline(never)
    private func controlCharacter(at position: Int) -> JSONStreamError {
        fail(
            .controlCharacter,
            "unescaped control character \(describe(buffer[position])) in string: escape it as \\u00XX",
            at: offset(position))
    }
}
