// Fix batch payload, event version 2. docs/log-format.md ("Fix batch payload (event version 2)")
// is the specification; this is its code.
//
//   varint N                        fixes; equals the record header's fixCount
//   varint R, R × (varint index, varint length + UTF-8 reason)      the request's rejections
//   when N > 0:
//   N × u8 presence                 bit 0 altitude, 1 speed, 2 heading, 3 battery, 4 charging known,
//                                   5 is charging, 6 clock suspect, 7 accuracy known
//   u8 e, N × varint                recorded_at in units of 10^e µs from the header's recordedMin:
//                                   zigzag(first), then zigzag(delta - previous delta)
//   column latitude                 N values
//   column longitude                N values
//   column accuracy_m               the values of the fixes with bit 7
//   u8 per fix with bit 3           battery percent
//   column altitude_m, speed_mps, heading_deg      the values of the fixes with bits 0, 1, 2
//   varint S, S × (varint length + UTF-8)           the source table
//   when S > 1: N × varint          source index
//
//   column of C > 0 values = u8 form, then
//     form 0x00 | k (k = 0...15): decimal, value = v / 10^k exactly: first v as i32, rest zigzag(v - previous v)
//     form 0x10 | k:              the same, first v as i64
//     form 0x20:                  IEEE-754 bits: first as u64, then 8 planes × (C - 1) of bits XOR previous
//
// Why: clients send coordinates with a few decimals (7 for the apps we know, 1 or 2 for altitude,
// speed, heading) and JSON parses such a literal as the correctly rounded `Double(v) / 10^k`, so
// the integer `v` gives back the same double bit for bit; a v1 double spends 6 incompressible bytes
// where `v` spends 3. The decoder divides exactly as the JSON parser does, and the encoder keeps the
// decimal form only when that division gives back every value's exact bits; anything else (more
// decimals than fit, -0.0, NaN) keeps its IEEE bits. Fixed-width first values keep the same field of
// single-fix reports at the same byte position, so a group record's interleaving lines them up;
// varint deltas make a track's later fixes a byte or two each.

enum FixCodecV2 {
    enum Presence {
        static let altitude: UInt8 = 1 << 0
        static let speed: UInt8 = 1 << 1
        static let heading: UInt8 = 1 << 2
        static let battery: UInt8 = 1 << 3
        static let chargingKnown: UInt8 = 1 << 4
        static let charging: UInt8 = 1 << 5
        static let clockSuspect: UInt8 = 1 << 6
        static let accuracy: UInt8 = 1 << 7
    }

    enum Form {
        static let decimalNarrow: UInt8 = 0x00
        static let decimalWide: UInt8 = 0x10
        static let ieee: UInt8 = 0x20
    }

    /// Decimal places a column may use: 10^15 is exact, and a coordinate at 15 places would pass
    /// 2^53 anyway.
    static let decimalScaleMax = 15
    static let timeUnitExponentMax = 6
    static let powersOfTen: [Double] = (0...decimalScaleMax).map { exponent in
        (0..<exponent).reduce(1.0) { value, _ in value * 10 }
    }
    static let integerPowersOfTen: [Int64] = (0...timeUnitExponentMax).map { exponent in
        (0..<exponent).reduce(1) { value, _ in value * 10 }
    }

    // MARK: encoding

    static func encode(_ batch: FixBatch, recordedMinMicros: Int64) -> [UInt8] {
        let fixes = batch.fixes
        var writer = ByteWriter(capacity: 16 + fixes.count * 24)
        writer.varint(UInt64(fixes.count))
        writer.varint(UInt64(batch.rejections.count))
        for rejection in batch.rejections {
            writer.varint(UInt64(rejection.index))
            writer.varintString(rejection.reason)
        }
        guard !fixes.isEmpty else { return writer.bytes }
        var presences: [UInt8] = []
        presences.reserveCapacity(fixes.count)
        for fix in fixes {
            let flags = presence(of: fix)
            presences.append(flags)
            writer.u8(flags)
        }
        appendTimes(fixes.map(\.recordedAtMicros), base: recordedMinMicros, to: &writer)
        appendColumn(fixes.map(\.latitude), to: &writer)
        appendColumn(fixes.map(\.longitude), to: &writer)
        appendColumn(
            zip(fixes, presences).compactMap { $1 & Presence.accuracy != 0 ? $0.accuracyMeters : nil },
            to: &writer)
        for fix in fixes { if let battery = fix.batteryPercent { writer.u8(battery) } }
        appendColumn(fixes.compactMap(\.altitudeMeters), to: &writer)
        appendColumn(fixes.compactMap(\.speedMetersPerSecond), to: &writer)
        appendColumn(fixes.compactMap(\.headingDegrees), to: &writer)

        var sources: [String] = []
        var sourceIndex: [String: Int] = [:]
        for fix in fixes where sourceIndex[fix.source] == nil {
            sourceIndex[fix.source] = sources.count
            sources.append(fix.source)
        }
        writer.varint(UInt64(sources.count))
        for source in sources { writer.varintString(source) }
        if sources.count > 1 {
            for fix in fixes { writer.varint(UInt64(sourceIndex[fix.source]!)) }
        }
        return writer.bytes
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
        // +0.0 is "unknown", as in version 1 (ingest never accepts 0 as an accuracy).
        if let accuracy = fix.accuracyMeters, accuracy.bitPattern != 0 { flags |= Presence.accuracy }
        return flags
    }

    /// The coarsest unit (10^e µs) in which every time is a whole number from `base`: apps send
    /// milliseconds or seconds, so the deltas shrink by a byte or two.
    private static func appendTimes(_ times: [Int64], base: Int64, to writer: inout ByteWriter) {
        var exponent = timeUnitExponentMax
        for time in times {
            let offset = time &- base
            while exponent > 0 && offset % integerPowersOfTen[exponent] != 0 { exponent -= 1 }
            if exponent == 0 { break }
        }
        let unit = integerPowersOfTen[exponent]
        writer.u8(UInt8(exponent))
        var previous: Int64 = 0
        var previousDelta: Int64 = 0
        for (index, time) in times.enumerated() {
            let units = (time &- base) / unit
            if index == 0 {
                writer.varint(zigzag(units))
            } else {
                let delta = units &- previous
                writer.varint(zigzag(delta &- previousDelta))
                previousDelta = delta
            }
            previous = units
        }
    }

    /// `value` as `v / 10^scale` when that division gives back its exact bits.
    @inline(__always) static func decimal(_ value: Double, scale: Int) -> Int64? {
        let scaled = (value * powersOfTen[scale]).rounded()
        // Below 2^53 every integer is exact; NaN fails the comparison.
        guard abs(scaled) < 9_007_199_254_740_992 else { return nil }
        let integer = Int64(scaled)
        guard (Double(integer) / powersOfTen[scale]).bitPattern == value.bitPattern else { return nil }
        return integer
    }

    private static func appendColumn(_ values: [Double], to writer: inout ByteWriter) {
        guard !values.isEmpty else { return }
        // A value exact at k places is exact at every larger k (same rational, below 2^53), so the
        // column's scale only ever grows while scanning.
        var scale = 0
        scan: for value in values {
            while decimal(value, scale: scale) == nil {
                scale += 1
                if scale > decimalScaleMax { break scan }
            }
        }
        var integers: [Int64] = []
        if scale <= decimalScaleMax {
            integers.reserveCapacity(values.count)
            for value in values {
                guard let integer = decimal(value, scale: scale) else { break }
                integers.append(integer)
            }
        }
        guard integers.count == values.count else {
            writer.u8(Form.ieee)
            writer.u64(values[0].bitPattern)
            var previous = values[0].bitPattern
            var xors: [UInt64] = []
            xors.reserveCapacity(values.count - 1)
            for value in values.dropFirst() {
                xors.append(value.bitPattern ^ previous)
                previous = value.bitPattern
            }
            FixCodec.appendPlanes(xors, to: &writer)
            return
        }
        let narrow = integers.allSatisfy { Int64(Int32.min)...Int64(Int32.max) ~= $0 }
        writer.u8((narrow ? Form.decimalNarrow : Form.decimalWide) | UInt8(scale))
        if narrow { writer.u32(UInt32(bitPattern: Int32(integers[0]))) } else { writer.i64(integers[0]) }
        var previous = integers[0]
        for integer in integers.dropFirst() {
            writer.varint(zigzag(integer &- previous))
            previous = integer
        }
    }

    // MARK: decoding

    /// The rejections, which come first so that a fold that keeps batch results (the registry)
    /// reads them without touching a fix.
    static func rejections(_ reader: inout ByteReader, expectedCount: Int) throws -> [Rejection] {
        let count = try reader.varint()
        guard count == UInt64(expectedCount) else {
            throw DecodeError.invalid("fix batch holds \(count) fixes, its header says \(expectedCount)")
        }
        let rejectionCount = try reader.varint()
        guard rejectionCount <= UInt64(reader.remaining / 2) else {
            throw DecodeError.invalid("rejection count \(rejectionCount) too large")
        }
        var rejections: [Rejection] = []
        rejections.reserveCapacity(Int(rejectionCount))
        for _ in 0..<rejectionCount {
            let index = try reader.varint()
            guard index <= UInt64(UInt32.max) else {
                throw DecodeError.invalid("rejected index \(index) out of range")
            }
            rejections.append(Rejection(index: UInt32(index), reason: try reader.varintString()))
        }
        return rejections
    }

    static func decode(_ payload: [UInt8], expectedCount: Int, recordedMinMicros: Int64) throws -> (
        fixes: [Fix], rejections: [Rejection]
    ) {
        var reader = ByteReader(payload)
        let rejections = try rejections(&reader, expectedCount: expectedCount)
        let count = expectedCount
        guard count > 0 else {
            guard reader.remaining == 0 else {
                throw DecodeError.invalid("\(reader.remaining) unexpected bytes after a fix batch")
            }
            return ([], rejections)
        }
        // Every fix takes at least its presence byte, a time and two coordinates.
        guard count <= reader.remaining / 4 else {
            throw DecodeError.invalid("fix batch of \(count) fixes in \(reader.remaining) bytes")
        }
        let presence = Array(try reader.raw(count))
        let times = try decodeTimes(&reader, count: count, base: recordedMinMicros)
        let latitudes = try decodeColumn(&reader, count: count)
        let longitudes = try decodeColumn(&reader, count: count)
        let accuracies = try decodeColumn(
            &reader, count: presence.count(where: { $0 & Presence.accuracy != 0 }))
        let batteries = try reader.raw(presence.count(where: { $0 & Presence.battery != 0 }))
        let altitudes = try decodeColumn(
            &reader, count: presence.count(where: { $0 & Presence.altitude != 0 }))
        let speeds = try decodeColumn(&reader, count: presence.count(where: { $0 & Presence.speed != 0 }))
        let headings = try decodeColumn(&reader, count: presence.count(where: { $0 & Presence.heading != 0 }))
        let (sources, sourceIndexes) = try decodeSources(&reader, count: count)
        guard reader.remaining == 0 else {
            throw DecodeError.invalid("\(reader.remaining) unexpected bytes after a fix batch")
        }

        var fixes: [Fix] = []
        fixes.reserveCapacity(count)
        var next = (accuracy: 0, battery: batteries.startIndex, altitude: 0, speed: 0, heading: 0)
        for index in 0..<count {
            let flags = presence[index]
            var fix = Fix(
                latitude: latitudes[index], longitude: longitudes[index], accuracyMeters: nil,
                source: sources[sourceIndexes.isEmpty ? 0 : sourceIndexes[index]],
                recordedAtMicros: times[index], clockSuspect: flags & Presence.clockSuspect != 0)
            if flags & Presence.accuracy != 0 {
                fix.accuracyMeters = accuracies[next.accuracy]
                next.accuracy += 1
            }
            if flags & Presence.battery != 0 {
                fix.batteryPercent = batteries[next.battery]
                next.battery += 1
            }
            if flags & Presence.altitude != 0 {
                fix.altitudeMeters = altitudes[next.altitude]
                next.altitude += 1
            }
            if flags & Presence.speed != 0 {
                fix.speedMetersPerSecond = speeds[next.speed]
                next.speed += 1
            }
            if flags & Presence.heading != 0 {
                fix.headingDegrees = headings[next.heading]
                next.heading += 1
            }
            if flags & Presence.chargingKnown != 0 { fix.isCharging = flags & Presence.charging != 0 }
            fixes.append(fix)
        }
        return (fixes, rejections)
    }

    /// The source table and, when it holds more than one source, each fix's index into it (else
    /// empty: every fix has the one source).
    private static func decodeSources(_ reader: inout ByteReader, count: Int) throws -> (
        sources: [String], indexes: [Int]
    ) {
        let sourceCount = try reader.varint()
        guard sourceCount >= 1, sourceCount <= UInt64(reader.remaining) else {
            throw DecodeError.invalid("fix batch has \(sourceCount) sources")
        }
        var sources: [String] = []
        sources.reserveCapacity(Int(sourceCount))
        for _ in 0..<sourceCount { sources.append(try reader.varintString()) }
        var sourceIndexes: [Int] = []
        if sourceCount > 1 {
            sourceIndexes.reserveCapacity(count)
            for index in 0..<count {
                let number = try reader.varint()
                guard number < sourceCount else {
                    throw DecodeError.invalid("fix \(index) names source \(number) of \(sourceCount)")
                }
                sourceIndexes.append(Int(number))
            }
        }
        return (sources, sourceIndexes)
    }

    private static func decodeTimes(_ reader: inout ByteReader, count: Int, base: Int64) throws -> [Int64] {
        let exponent = Int(try reader.u8())
        guard exponent <= timeUnitExponentMax else {
            throw DecodeError.invalid(
                "time unit 10^\(exponent) µs is not one of 10^0...10^\(timeUnitExponentMax)")
        }
        let unit = integerPowersOfTen[exponent]
        var times: [Int64] = []
        times.reserveCapacity(count)
        var previous: Int64 = 0
        var previousDelta: Int64 = 0
        var smallest = Int64.max
        for index in 0..<count {
            let value = unzigzag(try reader.varint())
            let units: Int64
            if index == 0 {
                units = value
            } else {
                previousDelta = previousDelta &+ value
                units = previous &+ previousDelta
            }
            previous = units
            let time = base &+ units &* unit
            smallest = min(smallest, time)
            times.append(time)
        }
        // An encoder stores the times from their own minimum (the header's recordedMin), so the
        // smallest offset is 0; any other is damage. (A header whose recordedMin was changed
        // without re-encoding the payload would shift every time: whatever rewrites one, the
        // compactor's shrunk batches included, re-encodes both through EventCodec.)
        guard smallest == base else {
            throw DecodeError.invalid(
                "fix batch's earliest recorded_at \(smallest) is not its header's \(base)")
        }
        return times
    }

    private static func decodeColumn(_ reader: inout ByteReader, count: Int) throws -> [Double] {
        guard count > 0 else { return [] }
        let form = try reader.u8()
        var values: [Double] = []
        values.reserveCapacity(count)
        if form == Form.ieee {
            var bits = try reader.u64()
            values.append(Double(bitPattern: bits))
            let xors = FixCodec.planes(try reader.raw(8 * (count - 1)), count: count - 1)
            for xor in xors {
                bits ^= xor
                values.append(Double(bitPattern: bits))
            }
            return values
        }
        let scale = Int(form & 0x0f)
        guard form & 0xe0 == 0 else { throw DecodeError.invalid("unknown fix column form \(form)") }
        let divisor = powersOfTen[scale]
        var integer =
            form & Form.decimalWide != 0
            ? Int64(bitPattern: try reader.u64()) : Int64(Int32(bitPattern: try reader.u32()))
        values.append(Double(integer) / divisor)
        for _ in 1..<count {
            integer = integer &+ unzigzag(try reader.varint())
            values.append(Double(integer) / divisor)
        }
        return values
    }

    @inline(__always) static func zigzag(_ value: Int64) -> UInt64 {
        UInt64(bitPattern: (value << 1) ^ (value >> 63))
    }

    @inline(__always) static func unzigzag(_ value: UInt64) -> Int64 {
        Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1)
    }
}
