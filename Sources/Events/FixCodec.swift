/// The columnar encoding of a batch of fixes (fix batch payload, event version 1).
///
/// Columns rather than rows, XOR with the previous value, and byte planes rather than whole
/// values: a track's consecutive coordinates share their high bytes, so after the transform the
/// high planes are runs of zeros that LZ4 removes. See docs/log-format.md, "Fix batch payload".
enum FixCodec {
    static let doubleColumns = 6

    private enum Presence {
        static let altitude: UInt8 = 1 << 0
        static let speed: UInt8 = 1 << 1
        static let heading: UInt8 = 1 << 2
        static let battery: UInt8 = 1 << 3
        static let chargingKnown: UInt8 = 1 << 4
        static let charging: UInt8 = 1 << 5
        static let clockSuspect: UInt8 = 1 << 6
    }

    static func encode(_ fixes: [Fix]) -> [UInt8] {
        let count = fixes.count
        var sources: [String] = []
        var sourceIndex: [String: Int] = [:]
        for fix in fixes where sourceIndex[fix.source] == nil {
            sourceIndex[fix.source] = sources.count
            sources.append(fix.source)
        }
        precondition(sources.count <= Int(UInt16.max), "more than 65535 distinct sources in one batch")
        let indexWidth = sources.count <= 256 ? 1 : 2

        var writer = ByteWriter(capacity: 8 + count * (3 + indexWidth + 8 * 7))
        writer.u32(UInt32(count))
        writer.u16(UInt16(sources.count))
        for source in sources { writer.string(source) }

        for fix in fixes { writer.u8(presence(of: fix)) }
        for fix in fixes {
            let index = sourceIndex[fix.source]!
            if indexWidth == 1 { writer.u8(UInt8(index)) } else { writer.u16(UInt16(index)) }
        }
        for fix in fixes { writer.u8(fix.batteryPercent ?? 0) }

        var times = [UInt64](repeating: 0, count: count)
        var previous: Int64 = 0
        var previousDelta: Int64 = 0
        for (index, fix) in fixes.enumerated() {
            let delta = fix.recordedAtMicros &- previous
            let deltaOfDelta = delta &- previousDelta
            times[index] = UInt64(bitPattern: (deltaOfDelta << 1) ^ (deltaOfDelta >> 63))
            previous = fix.recordedAtMicros
            previousDelta = delta
        }
        appendPlanes(times, to: &writer)

        let columns: [(Fix) -> Double?] = [
            // Unknown accuracy is stored as 0 (never nil, which would repeat the previous value).
            { $0.latitude }, { $0.longitude }, { $0.accuracyMeters ?? 0 },
            { $0.altitudeMeters }, { $0.speedMetersPerSecond }, { $0.headingDegrees },
        ]
        var values = [UInt64](repeating: 0, count: count)
        for column in columns {
            var previousBits: UInt64 = 0
            for (index, fix) in fixes.enumerated() {
                let bits = column(fix)?.bitPattern ?? previousBits
                values[index] = bits ^ previousBits
                previousBits = bits
            }
            appendPlanes(values, to: &writer)
        }
        return writer.bytes
    }

    /// Moves `reader` past a batch's fix columns without decoding them, with `decode`'s checks of
    /// the count and of the columns' size: for a reader that needs what follows the fixes only.
    static func skip(_ reader: inout ByteReader, expectedCount: Int) throws {
        let count = Int(try reader.u32())
        guard count == expectedCount else {
            throw DecodeError.invalid("fix batch holds \(count) fixes, its header says \(expectedCount)")
        }
        let sourceCount = Int(try reader.u16())
        for _ in 0..<sourceCount { _ = try reader.raw(Int(try reader.u16())) }
        let indexWidth = sourceCount <= 256 ? 1 : 2
        let columnsBytes = count * (2 + indexWidth) + count * 8 * (1 + doubleColumns)
        guard reader.remaining >= columnsBytes else {
            throw DecodeError.invalid("fix columns are \(reader.remaining) bytes, expected \(columnsBytes)")
        }
        _ = try reader.raw(columnsBytes)
    }

    static func decode(_ reader: inout ByteReader, expectedCount: Int) throws -> [Fix] {
        let count = Int(try reader.u32())
        guard count == expectedCount else {
            throw DecodeError.invalid("fix batch holds \(count) fixes, its header says \(expectedCount)")
        }
        let sourceCount = Int(try reader.u16())
        var sources: [String] = []
        sources.reserveCapacity(sourceCount)
        for _ in 0..<sourceCount { sources.append(try reader.string()) }
        let indexWidth = sourceCount <= 256 ? 1 : 2
        let columnsBytes = count * (2 + indexWidth) + count * 8 * (1 + doubleColumns)
        guard reader.remaining >= columnsBytes else {
            throw DecodeError.invalid("fix columns are \(reader.remaining) bytes, expected \(columnsBytes)")
        }
        if count == 0 { return [] }
        let presence = try reader.raw(count)
        let indexes = try reader.raw(count * indexWidth)
        let battery = try reader.raw(count)
        let times = planes(try reader.raw(count * 8), count: count)
        var doubles: [[UInt64]] = []
        for _ in 0..<doubleColumns { doubles.append(planes(try reader.raw(count * 8), count: count)) }

        var fixes: [Fix] = []
        fixes.reserveCapacity(count)
        var previousTime: Int64 = 0
        var previousDelta: Int64 = 0
        var previousBits = [UInt64](repeating: 0, count: doubleColumns)
        for index in 0..<count {
            let zigzag = times[index]
            let deltaOfDelta = Int64(bitPattern: zigzag >> 1) ^ -Int64(bitPattern: zigzag & 1)
            let delta = previousDelta &+ deltaOfDelta
            let time = previousTime &+ delta
            previousTime = time
            previousDelta = delta
            for column in 0..<doubleColumns {
                previousBits[column] ^= doubles[column][index]
            }
            let sourceNumber =
                indexWidth == 1
                ? Int(indexes[indexes.startIndex + index])
                : Int(indexes[indexes.startIndex + 2 * index]) | Int(
                    indexes[indexes.startIndex + 2 * index + 1]) << 8
            guard sourceNumber < sources.count else {
                throw DecodeError.invalid("fix \(index) names source \(sourceNumber) of \(sources.count)")
            }
            let flags = presence[presence.startIndex + index]
            fixes.append(
                Fix(
                    latitude: Double(bitPattern: previousBits[0]),
                    longitude: Double(bitPattern: previousBits[1]),
                    // Bits 0 (+0.0) is "unknown": ingest never accepts 0 as an accuracy.
                    accuracyMeters: previousBits[2] == 0 ? nil : Double(bitPattern: previousBits[2]),
                    altitudeMeters: flags & Presence.altitude != 0
                        ? Double(bitPattern: previousBits[3]) : nil,
                    speedMetersPerSecond: flags & Presence.speed != 0
                        ? Double(bitPattern: previousBits[4]) : nil,
                    headingDegrees: flags & Presence.heading != 0 ? Double(bitPattern: previousBits[5]) : nil,
                    batteryPercent: flags & Presence.battery != 0 ? battery[battery.startIndex + index] : nil,
                    isCharging: flags & Presence.chargingKnown != 0 ? flags & Presence.charging != 0 : nil,
                    source: sources[sourceNumber],
                    recordedAtMicros: time,
                    clockSuspect: flags & Presence.clockSuspect != 0))
        }
        return fixes
    }

    private static func presence(of fix: Fix) -> UInt8 {
        var flags: UInt8 = 0
        if fix.altitudeMeters != nil { flags |= Presence.altitude }
        if fix.speedMetersPerSecond != nil { flags |= Presence.speed }
        if fix.headingDegrees != nil { flags |= Presence.heading }
        if fix.batteryPercent != nil { flags |= Presence.battery }
        if let charging = fix.isCharging {
            flags |= Presence.chargingKnown
            if charging { flags |= Presence.charging }
        }
        if fix.clockSuspect { flags |= Presence.clockSuspect }
        return flags
    }

    /// Writes byte `j` of every value into plane `j`, planes in order 0...7.
    static func appendPlanes(_ values: [UInt64], to writer: inout ByteWriter) {
        let count = values.count
        let start = writer.bytes.count
        writer.bytes.append(contentsOf: repeatElement(0, count: count * 8))
        writer.bytes.withUnsafeMutableBufferPointer { output in
            values.withUnsafeBufferPointer { input in
                for index in 0..<count {
                    var value = input[index]
                    for plane in 0..<8 {
                        output[start + plane * count + index] = UInt8(truncatingIfNeeded: value)
                        value >>= 8
                    }
                }
            }
        }
    }

    static func planes(_ bytes: ArraySlice<UInt8>, count: Int) -> [UInt64] {
        var values = [UInt64](repeating: 0, count: count)
        bytes.withUnsafeBufferPointer { input in
            values.withUnsafeMutableBufferPointer { output in
                for plane in 0..<8 {
                    let shift = UInt64(plane * 8)
                    let base = plane * count
                    for index in 0..<count {
                        output[index] |= UInt64(input[base + index]) << shift
                    }
                }
            }
        }
        return values
    }
}
