/// `device_locations.shown`: the twelve fields a history page shows (`FixColumns.shown` in the read
/// API), packed into one `bytea` beside the columns that hold them. The projector writes both; the
/// history page reads this alone.
///
/// Why: PostgreSQL spends most of a page on sending values (a send function, an allocation and a
/// copy each), twelve a row; one value a row took its CPU for the 30-day page (8,640 fixes) from
/// 9.4 to 3.7-4.1 ms and the page's p99 from 18-27 to 8-13 ms (docs/benchmarks.md, "The packed
/// history column"). The columns stay for everything else (the export, the panel, stays, SQL).
///
/// The layout (docs/postgres.md), little-endian, 67 bytes and the source:
///
///   0   latitude       float8
///   8   longitude      float8
///   16  recorded_at    int64, microseconds since the Unix epoch
///   24  accuracy_m     float8 (0 when NULL)
///   32  altitude_m     float8 (0 when NULL)
///   40  speed_mps      float8 (0 when NULL)
///   48  heading_deg    float8 (0 when NULL)
///   56  received_at    int64, microseconds since the Unix epoch
///   64  battery_pct    int16 (0 when NULL)
///   66  flags          bit 0-3: accuracy, altitude, speed, heading NULL; bit 4: battery NULL;
///                      bit 5: is_charging NULL; bit 6: is_charging; bit 7: clock_suspect
///   67  source         UTF-8, to the end
public enum ShownFix {
    /// The bytes before the source.
    public static let fixedBytes = 67

    /// The fields, as the projector has them; `source` as its UTF-8 bytes.
    public struct Fields: Equatable, Sendable {
        public var latitude: Double
        public var longitude: Double
        public var recordedAtMicros: Int64
        public var accuracy: Double?
        public var altitude: Double?
        public var speed: Double?
        public var heading: Double?
        public var receivedAtMicros: Int64
        public var battery: Int16?
        public var isCharging: Bool?
        public var clockSuspect: Bool

        public init(
            latitude: Double, longitude: Double, recordedAtMicros: Int64, accuracy: Double?,
            altitude: Double?,
            speed: Double?, heading: Double?, receivedAtMicros: Int64, battery: Int16?, isCharging: Bool?,
            clockSuspect: Bool
        ) {
            self.latitude = latitude
            self.longitude = longitude
            self.recordedAtMicros = recordedAtMicros
            self.accuracy = accuracy
            self.altitude = altitude
            self.speed = speed
            self.heading = heading
            self.receivedAtMicros = receivedAtMicros
            self.battery = battery
            self.isCharging = isCharging
            self.clockSuspect = clockSuspect
        }
    }

    /// The packed bytes' count for a source of `sourceBytes` UTF-8 bytes.
    public static func byteCount(sourceBytes: Int) -> Int { fixedBytes + sourceBytes }

    /// Appends the packed form of `fields` and `source` to `bytes`.
    public static func append(_ fields: Fields, source: some Collection<UInt8>, to bytes: inout [UInt8]) {
        func word(_ value: UInt64) {
            withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
        }
        var flags: UInt8 = 0
        func optional(_ value: Double?, _ bit: UInt8) {
            if let value {
                word(value.bitPattern)
            } else {
                word(0)
                flags |= bit
            }
        }
        word(fields.latitude.bitPattern)
        word(fields.longitude.bitPattern)
        word(UInt64(bitPattern: fields.recordedAtMicros))
        optional(fields.accuracy, 1 << 0)
        optional(fields.altitude, 1 << 1)
        optional(fields.speed, 1 << 2)
        optional(fields.heading, 1 << 3)
        word(UInt64(bitPattern: fields.receivedAtMicros))
        if fields.battery == nil { flags |= 1 << 4 }
        withUnsafeBytes(of: (fields.battery ?? 0).littleEndian) { bytes.append(contentsOf: $0) }
        switch fields.isCharging {
        case nil: flags |= 1 << 5
        case true?: flags |= 1 << 6
        case false?: break
        }
        if fields.clockSuspect { flags |= 1 << 7 }
        bytes.append(flags)
        bytes.append(contentsOf: source)
    }

    /// The fields of packed bytes and their source (pointing into `bytes`), nil when they are too
    /// short to be a packed fix.
    @inline(__always)
    public static func read(_ bytes: UnsafeRawBufferPointer) -> (Fields, source: UnsafeRawBufferPointer)? {
        guard bytes.count >= fixedBytes, let base = bytes.baseAddress else { return nil }
        @inline(__always) func word(_ offset: Int) -> UInt64 {
            UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        }
        let flags = base.load(fromByteOffset: 66, as: UInt8.self)
        @inline(__always) func optional(_ offset: Int, _ bit: UInt8) -> Double? {
            flags & bit == 0 ? Double(bitPattern: word(offset)) : nil
        }
        let battery = Int16(littleEndian: base.loadUnaligned(fromByteOffset: 64, as: Int16.self))
        let fields = Fields(
            latitude: Double(bitPattern: word(0)), longitude: Double(bitPattern: word(8)),
            recordedAtMicros: Int64(bitPattern: word(16)), accuracy: optional(24, 1 << 0),
            altitude: optional(32, 1 << 1), speed: optional(40, 1 << 2), heading: optional(48, 1 << 3),
            receivedAtMicros: Int64(bitPattern: word(56)), battery: flags & (1 << 4) == 0 ? battery : nil,
            isCharging: flags & (1 << 5) != 0 ? nil : flags & (1 << 6) != 0,
            clockSuspect: flags & (1 << 7) != 0)
        return (fields, UnsafeRawBufferPointer(start: base + fixedBytes, count: bytes.count - fixedBytes))
    }
}
