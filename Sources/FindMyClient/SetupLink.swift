// The panel's setup link for a device that speaks the native report API (docs/client-library.md):
//
//     findmy://setup?url=URL&device_id=ID&device_uuid=UUID&token=TOKEN
//
// Each value is percent-encoded (RFC 3986); the order of the four is free; all four are required,
// once each. `url` is the server's URL (http or https). The link carries a device token already
// issued by the panel's enrolment, so whoever holds it can report as the device: it is shown once.

public struct SetupLink: Sendable, Equatable {
    public var serverURL: String
    public var deviceID: UInt64
    public var deviceUUID: String
    public var deviceToken: String

    public enum Failure: Error, Equatable, CustomStringConvertible {
        case notASetupLink
        case missing(String)
        case repeated(String)
        case invalid(String, String)

        public var description: String {
            switch self {
            case .notASetupLink:
                "not a findmy setup link: it must begin with findmy://setup? (copy it from the panel's Add a device)"
            case .missing(let name): "the setup link has no \(name); copy the whole link from the panel"
            case .repeated(let name): "the setup link gives \(name) twice"
            case .invalid(let name, let why): "the setup link's \(name) is not valid: \(why)"
            }
        }
    }

    public init(serverURL: String, deviceID: UInt64, deviceUUID: String, deviceToken: String) {
        self.serverURL = serverURL
        self.deviceID = deviceID
        self.deviceUUID = deviceUUID
        self.deviceToken = deviceToken
    }

    /// Reads a link; surrounding white space (a pasted line) is ignored.
    public static func parse(_ text: String) throws(Failure) -> SetupLink {
        let link = text.trimmingWhiteSpace()
        let prefix = "findmy://setup?"
        guard link.lowercased().hasPrefix(prefix) else { throw .notASetupLink }
        var values: [String: String] = [:]
        for pair in link.dropFirst(prefix.count).split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = percentDecoded(parts[0]) else {
                throw .invalid(String(parts[0]), "bad % escape")
            }
            guard let value = percentDecoded(parts.count > 1 ? parts[1] : "") else {
                throw .invalid(name, "bad % escape")
            }
            guard values[name] == nil else { throw .repeated(name) }
            values[name] = value
        }
        func required(_ name: String) throws(Failure) -> String {
            guard let value = values[name], !value.isEmpty else { throw .missing(name) }
            return value
        }
        let url = try required("url")
        guard url.hasPrefix("http://") || url.hasPrefix("https://") else {
            throw .invalid("url", "must begin with http:// or https://")
        }
        guard let deviceID = UInt64(try required("device_id")) else {
            throw .invalid("device_id", "must be a whole number")
        }
        let uuid = try required("device_uuid")
        guard isUUID(uuid) else { throw .invalid("device_uuid", "must be a UUID") }
        let token = try required("token")
        guard token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw .invalid("token", "has characters a token never has")
        }
        var server = Substring(url)
        while server.hasSuffix("/") { server = server.dropLast() }
        return SetupLink(
            serverURL: String(server), deviceID: deviceID, deviceUUID: uuid.lowercased(), deviceToken: token)
    }

    /// The link for these values, each percent-encoded (what the panel shows and the QR code holds).
    public var text: String {
        "findmy://setup?url=\(Self.percentEncoded(serverURL))&device_id=\(deviceID)"
            + "&device_uuid=\(Self.percentEncoded(deviceUUID))&token=\(Self.percentEncoded(deviceToken))"
    }

    /// RFC 3986's unreserved characters stay; every other byte is `%XX`.
    public static func percentEncoded(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
                UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = String(byte, radix: 16, uppercase: true)
                out += "%" + (hex.count == 1 ? "0" : "") + hex
            }
        }
        return out
    }

    static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var index = text.utf8.startIndex
        let utf8 = text.utf8
        while index != utf8.endIndex {
            let byte = utf8[index]
            if byte == UInt8(ascii: "%") {
                let high = utf8.index(after: index)
                guard high != utf8.endIndex else { return nil }
                let low = utf8.index(after: high)
                guard low != utf8.endIndex, let h = hexValue(utf8[high]), let l = hexValue(utf8[low]) else {
                    return nil
                }
                bytes.append(h << 4 | l)
                index = utf8.index(after: low)
            } else {
                bytes.append(byte)
                index = utf8.index(after: index)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// 8-4-4-4-12 hexadecimal digits.
func isUUID(_ text: String) -> Bool {
    let groups = text.split(separator: "-", omittingEmptySubsequences: false)
    return groups.map(\.count) == [8, 4, 4, 4, 12]
        && groups.allSatisfy {
            $0.utf8.allSatisfy { byte in byte < 0x80 && Character(Unicode.Scalar(byte)).isHexDigit }
        }
}

extension String {
    func trimmingWhiteSpace() -> String {
        var slice = self[...]
        while let first = slice.first, first.isWhitespace { slice = slice.dropFirst() }
        while let last = slice.last, last.isWhitespace { slice = slice.dropLast() }
        return String(slice)
    }
}
