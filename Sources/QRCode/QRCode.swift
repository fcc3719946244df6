import CQRencode

#if canImport(Glibc)
    import Glibc
#endif

/// A QR code as its matrix of modules, made by libqrencode (`QRcode_encodeString`). The one module
/// that calls libqrencode; drawing the matrix (the web panel's inline SVG) is the caller's.
///
/// Error correction is level M (15 % of the symbol may be lost): the codes are scanned from a
/// screen, where glare and moiré cost a few modules, and M keeps a setup link of some 300 bytes
/// within version 13 (69 modules), which phones read from a laptop screen at arm's length.
public struct QRCode: Sendable, Equatable {
    /// The symbol's version, 1 to 40: its size is `17 + 4 * version` modules.
    public let version: Int
    /// Modules per side.
    public let size: Int
    /// Row by row, `true` for a dark module.
    public let modules: [Bool]

    /// The bytes of a text a QR code can hold at level M in byte mode (version 40).
    public static let textBytesMax = 2331

    /// Encodes `text` (a URL, say) in the smallest version that holds it.
    public init(encoding text: String) throws(QRCodeError) {
        guard text.utf8.count <= Self.textBytesMax else { throw .tooLong(bytes: text.utf8.count) }
        guard !text.utf8.contains(0) else { throw .containsNUL }
        errno = 0
        guard let symbol = QRcode_encodeString(text, 0, QR_ECLEVEL_M, QR_MODE_8, 1) else {
            // ERANGE: too long for version 40 (a text of mixed modes can exceed what byte mode
            // alone would take); anything else is out of memory or a bug of ours.
            if errno == ERANGE { throw .tooLong(bytes: text.utf8.count) }
            throw .failed(errno: errno)
        }
        defer { QRcode_free(symbol) }
        let width = Int(symbol.pointee.width)
        precondition(width >= 21 && width <= 177, "libqrencode returned a symbol of width \(width)")
        version = Int(symbol.pointee.version)
        size = width
        // Bit 0 of each byte is the module's colour; the other bits say what kind of module it is.
        let data = UnsafeBufferPointer(start: symbol.pointee.data, count: width * width)
        modules = data.map { $0 & 1 == 1 }
    }

    /// Whether the module in column `x` and row `y` is dark.
    public subscript(x: Int, y: Int) -> Bool {
        precondition(x >= 0 && x < size && y >= 0 && y < size)
        return modules[y * size + x]
    }
}

public enum QRCodeError: Error, Equatable, Sendable, CustomStringConvertible {
    case tooLong(bytes: Int)
    case containsNUL
    case failed(errno: Int32)

    public var description: String {
        switch self {
        case .tooLong(let bytes):
            "\(bytes) bytes do not fit in a QR code at error correction level M (\(QRCode.textBytesMax) at most)"
        case .containsNUL: "a QR code text cannot contain a NUL byte here"
        case .failed(let errno): "libqrencode failed (errno \(errno))"
        }
    }
}
