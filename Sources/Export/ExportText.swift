import JSON

/// Numbers and times as the text formats (GPX, CSV) write them.
enum ExportText {
    /// A plain decimal that reads back as the same double: Swift's shortest round-trip digits,
    /// without an exponent (xsd:decimal, which GPX's coordinates are, has none; nor do most
    /// spreadsheets expect one). A value whose plain form would exceed `plainBytesMax` (5e-324)
    /// keeps its exponent, which xsd:double and our readers accept.
    static let plainBytesMax = 40
    /// DecimalDouble writes at most 22 bytes.
    static let fastPathBytesMax = 32

    static func appendDecimal(_ value: Double, to bytes: inout [UInt8]) {
        precondition(value.isFinite, "an exported number is finite (\(value))")
        // Most values (1e-3 to 1e15, coordinates and measurements) take JSON's fast path, which
        // writes `description`'s digits, always plain there, without making a String.
        let written = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: fastPathBytesMax) { buffer in
            DecimalDouble.write(value, into: buffer.baseAddress!).map { count in
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[..<count]))
                return count
            }
        }
        if written != nil { return }
        let text = value.description
        guard let exponentIndex = text.firstIndex(where: { $0 == "e" || $0 == "E" }),
            let exponent = Int(text[text.index(after: exponentIndex)...])
        else {
            bytes.append(contentsOf: text.utf8)
            return
        }
        var mantissa = text[..<exponentIndex]
        let negative = mantissa.hasPrefix("-")
        if negative { mantissa = mantissa.dropFirst() }
        let parts = mantissa.split(separator: ".", omittingEmptySubsequences: false)
        let integerDigits = parts[0]
        let digits = Array((integerDigits + (parts.count > 1 ? parts[1] : "")).utf8)
        let point = integerDigits.count + exponent
        guard abs(point) + digits.count <= plainBytesMax else {
            bytes.append(contentsOf: text.utf8)
            return
        }
        if negative { bytes.append(UInt8(ascii: "-")) }
        let zero = UInt8(ascii: "0")
        if point <= 0 {
            bytes.append(contentsOf: [zero, UInt8(ascii: ".")])
            bytes.append(contentsOf: repeatElement(zero, count: -point))
            bytes.append(contentsOf: digits)
        } else if point >= digits.count {
            bytes.append(contentsOf: digits)
            bytes.append(contentsOf: repeatElement(zero, count: point - digits.count))
        } else {
            bytes.append(contentsOf: digits[..<point])
            bytes.append(UInt8(ascii: "."))
            bytes.append(contentsOf: digits[point...])
        }
    }

    static func appendInteger(_ value: some BinaryInteger, to bytes: inout [UInt8]) {
        bytes.append(contentsOf: String(value).utf8)
    }

    /// RFC 3339 in UTC with microseconds, as every findmy time is written.
    static func appendTime(_ micros: Int64, to bytes: inout [UInt8]) {
        RFC3339.append(micros, fractionDigits: 6, to: &bytes)
    }

    static func appendXMLEscaped(_ text: String, to bytes: inout [UInt8]) {
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "&"): bytes.append(contentsOf: "&amp;".utf8)
            case UInt8(ascii: "<"): bytes.append(contentsOf: "&lt;".utf8)
            case UInt8(ascii: ">"): bytes.append(contentsOf: "&gt;".utf8)
            case UInt8(ascii: "\""): bytes.append(contentsOf: "&quot;".utf8)
            default: bytes.append(byte)
            }
        }
    }
}
