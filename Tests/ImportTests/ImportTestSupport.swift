import Events
import Import

/// Fixtures/import/<format>/<name> in this checkout.
func fixturePath(_ relative: String) -> String {
    var components = #filePath.split(separator: "/", omittingEmptySubsequences: false)
    components.removeLast(3)  // Tests/ImportTests/this file
    return components.joined(separator: "/") + "/Fixtures/import/" + relative
}

/// Hands out a file's bytes `piece` at a time, as a pipe or a slow disk may: a reader must give
/// the same items whatever the pieces.
struct PieceByteSource: ByteSource {
    var bytes: [UInt8]
    var piece: Int
    var position = 0

    mutating func read(into buffer: UnsafeMutableRawBufferPointer) throws(ImportError) -> Int {
        let count = min(piece, buffer.count, bytes.count - position)
        guard count > 0 else { return 0 }
        bytes.withUnsafeBytes {
            buffer.baseAddress!.copyMemory(from: $0.baseAddress! + position, byteCount: count)
        }
        position += count
        return count
    }
}

func fixtureBytes(_ relative: String) throws -> [UInt8] {
    let source = try FileByteSource(path: fixturePath(relative))
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = try buffer.withUnsafeMutableBytes { try source.read(into: $0) }
        if count == 0 { return bytes }
        bytes += buffer[..<count]
    }
}

func readAll<Reader: FixReader>(_ reader: Reader) throws(ImportError) -> [ImportItem] {
    var reader = reader
    var items: [ImportItem] = []
    while let item = try reader.next() { items.append(item) }
    return items
}

func fixes(_ items: [ImportItem]) -> [Fix] {
    items.compactMap { if case .fix(let fix) = $0 { fix } else { nil } }
}

/// How many items of each kind that is not a fix.
func notAFixCounts(_ items: [ImportItem]) -> [String: Int] {
    var counts: [String: Int] = [:]
    for case .notAFix(let kind) in items { counts[kind, default: 0] += 1 }
    return counts
}

/// The error a reader ends with, or nil when it reads to the end.
func readError<Reader: FixReader>(_ reader: Reader) -> ImportError? {
    do {
        _ = try readAll(reader)
        return nil
    } catch {
        return error
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.ffffff]Z` to microseconds, for expected values written readably.
func micros(
    _ year: Int, _ month: Int, _ day: Int, _ hour: Int, _ minute: Int, _ second: Int, _ fraction: Int = 0
)
    -> Int64
{
    // Days from civil (Howard Hinnant's algorithm), enough for test dates.
    let y = month <= 2 ? year - 1 : year
    let era = (y >= 0 ? y : y - 399) / 400
    let yoe = y - era * 400
    let mp = (month + 9) % 12
    let doy = (153 * mp + 2) / 5 + day - 1
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
    let days = Int64(era * 146097 + doe - 719468)
    return (days * 86_400 + Int64(hour * 3600 + minute * 60 + second)) * 1_000_000 + Int64(fraction)
}
