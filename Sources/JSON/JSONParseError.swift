/// Why a document was rejected, and where: the byte offset, plus line and column (both 1-based,
/// column counted in bytes), computed only when an error is raised.
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable {
        case unexpectedEnd
        case unexpectedByte
        case trailingGarbage
        case depthExceeded
        case invalidNumber
        case numberOutOfRange
        case controlCharacter
        case invalidEscape
        case invalidUTF8
        case loneSurrogate
        case duplicateKey
    }

    public let code: Code
    public let byteOffset: Int
    public let line: Int
    public let column: Int
    /// What was wrong, phrased for the client that sent it, without the position.
    public let message: String

    public init(code: Code, byteOffset: Int, line: Int, column: Int, message: String) {
        self.code = code
        self.byteOffset = byteOffset
        self.line = line
        self.column = column
        self.message = message
    }

    public var description: String {
        "\(message) at byte \(byteOffset) (line \(line), column \(column))"
    }
}
