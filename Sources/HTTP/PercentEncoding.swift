/// `text` with everything but unreserved characters (RFC 3986) percent-encoded as `%XX`
/// (uppercase): safe as a query value or as one path segment. The one encoder of findmy, for the
/// login redirect's `next` and the CLI's paths under `/admin/users/NAME`.
public func percentEncoded(_ text: String) -> String {
    let digits = Array("0123456789ABCDEF".utf8)
    var output: [UInt8] = []
    output.reserveCapacity(text.utf8.count)
    for byte in text.utf8 {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
            UInt8(ascii: "~"):
            output.append(byte)
        default:
            output += [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 0xF)]]
        }
    }
    return String(decoding: output, as: UTF8.self)
}

/// Decodes `%XX` escapes (either case). A malformed escape is kept as written rather than rejected:
/// a query typo should reach the handler, which can say what is wrong with the value.
public func percentDecoded(_ text: Substring, plusAsSpace: Bool) -> String {
    let input = Array(text.utf8)
    var output: [UInt8] = []
    output.reserveCapacity(input.count)
    var index = 0
    while index < input.count {
        let byte = input[index]
        if byte == UInt8(ascii: "%"), index + 2 < input.count,
            let high = hexValue(input[index + 1]), let low = hexValue(input[index + 2])
        {
            output.append(high << 4 | low)
            index += 3
            continue
        }
        output.append(plusAsSpace && byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
        index += 1
    }
    return String(decoding: output, as: UTF8.self)
}

private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
}
