// The wall clock and random UUIDs, from the C library and the standard library's random generator:
// FindMyClient needs no Foundation (an agent that links it stays small; an app converts its
// `Date` with `timeIntervalSince1970`).
#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

public enum ClientClock {
    /// The device's clock: microseconds since 1970-01-01T00:00:00Z.
    public static func nowMicros() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
    }

    /// A random (version 4) UUID in lower case, `1b4e28ba-2fa1-41d2-883f-0016d3cca427`.
    public static func randomUUID() -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        bytes[6] = bytes[6] & 0x0F | 0x40
        bytes[8] = bytes[8] & 0x3F | 0x80
        let hex = bytes.map { byte in
            String(byte >> 4, radix: 16) + String(byte & 0x0F, radix: 16)
        }
        return [0..<4, 4..<6, 6..<8, 8..<10, 10..<16].map { hex[$0].joined() }.joined(separator: "-")
    }
}
