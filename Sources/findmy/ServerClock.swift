import Events
import Glibc

/// The clock `findmy serve` runs on: the wall clock, plus, when the environment names a file in
/// `FINDMY_TEST_CLOCK_OFFSET_FILE`, the whole seconds that file holds (docs/configuration.md, "Test
/// hooks"). End-to-end tests move it forward to let a share's `until` pass without waiting. The
/// file is read at every call, so a test can move time while the server runs; a file that is
/// missing or not a number counts as 0.
enum ServerClock {
    static let offsetFileEnvironment = "FINDMY_TEST_CLOCK_OFFSET_FILE"
    /// Bytes read of the offset file: a number of seconds, with room for a sign and a newline.
    static let offsetFileBytesMax = 32
    /// A hundred years: far enough for any test, and µs of it stay far from Int64's end.
    static let offsetSecondsMax: Int64 = 100 * 366 * 86_400

    /// The wall clock, or the wall clock plus the offset file's seconds.
    static func fromEnvironment() -> @Sendable () -> Int64 {
        guard let raw = getenv(offsetFileEnvironment), raw.pointee != 0 else { return wallClockMicros }
        let path = String(cString: raw)
        return { wallClockMicros() + offsetSeconds(path) * 1_000_000 }
    }

    static func offsetSeconds(_ path: String) -> Int64 {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return 0 }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: offsetFileBytesMax)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, offsetFileBytesMax) }
        guard count > 0 else { return 0 }
        let text = String(decoding: buffer[..<count], as: UTF8.self)
        let seconds = Int64(text.filter { !$0.isWhitespace }) ?? 0
        return min(max(seconds, -offsetSecondsMax), offsetSecondsMax)
    }
}
