import JSON
import Postgres
import ProjectionSchema

/// Rows to JSON: a fix, an arrival, a time. Each row is read by the positions `ReadStatements`
/// gives its columns. Stored values are written as stored, however outsized; only what JSON cannot
/// say (NaN, infinities) becomes null, and times are clamped to what RFC 3339 can write.
extension ReadService {
    /// One fix of a binary-format result, read straight from libpq's buffer: `source` points into
    /// the result, so a `FixRow` must not outlive it.
    struct FixRow {
        var latitude = 0.0, longitude = 0.0
        /// nil: accuracy unknown (an app that sent none), answered as null.
        var accuracy, altitude, speed, heading: Double?
        var battery: Int64?
        var charging: Bool?
        var source = UnsafeBufferPointer<UInt8>(start: nil, count: 0)
        var recordedAt, receivedAt: Int64?
        var clockSuspect = false

        /// The fix whose `FixColumns.shown` start at column `first`.
        init(_ result: PostgresResult, _ row: Int, _ first: Int) throws(PostgresError) {
            self = try FixReader(result, first: first).fix(row)
        }

        init() {}

        /// The fix of a binary COPY row of `locationsCopyQuery`: one field, the history's packed
        /// `shown` (`ShownFix`), its source pointing into the row.
        init(_ row: inout PostgresCopyRow) throws(PostgresError) {
            guard let bytes = row.next(), let (fields, source) = ShownFix.read(bytes) else {
                throw PostgresError(
                    .decode,
                    message: "row \(row.number) has no packed fix in \(ProjectionSchema.shownColumn)")
            }
            latitude = fields.latitude
            longitude = fields.longitude
            accuracy = fields.accuracy
            altitude = fields.altitude
            speed = fields.speed
            heading = fields.heading
            battery = fields.battery.map { Int64($0) }
            charging = fields.isCharging
            self.source = source.assumingMemoryBound(to: UInt8.self)
            recordedAt = fields.recordedAtMicros
            receivedAt = fields.receivedAtMicros
            clockSuspect = fields.clockSuspect
        }

        /// Keys and punctuation (about 170 bytes), six doubles, an integer, two times, the source.
        var bytesMax: Int {
            256 + 6 * JSONFlatObject.doubleBytesMax + 2 * JSONFlatObject.timestampBytesMax
                + JSONFlatObject.stringBytesMax(utf8Count: source.count)
        }

        /// The members (the caller writes the braces), in the order of docs/api.md.
        func write(_ object: inout JSONFlatObject) {
            var previous = PreviousFix()
            write(&object, previous: &previous)
        }

        /// The members, keys and punctuation written as fixed pieces, each double's digits guessed
        /// and each time's date kept from its column's previous value (`previous`, kept from fix
        /// to fix of a page).
        func write(_ object: inout JSONFlatObject, previous: inout PreviousFix) {
            // Stored values are shown as stored, however outsized; only what JSON cannot say
            // (NaN, infinities) becomes null.
            func double(_ value: Double?, _ guess: inout Int) {
                if let value, value.isFinite {
                    object.double(value, fractionDigitsGuess: &guess)
                } else {
                    object.null()
                }
            }
            object.raw("\"latitude\":")
            double(latitude, &previous.latitude)
            object.raw(",\"longitude\":")
            double(longitude, &previous.longitude)
            object.raw(",\"accuracy_m\":")
            double(accuracy, &previous.accuracy)
            object.raw(",\"altitude_m\":")
            double(altitude, &previous.altitude)
            object.raw(",\"speed_mps\":")
            double(speed, &previous.speed)
            object.raw(",\"heading_deg\":")
            double(heading, &previous.heading)
            object.raw(",\"battery_pct\":")
            if let battery { object.int64(battery) } else { object.null() }
            object.raw(",\"is_charging\":")
            if let charging { object.bool(charging) } else { object.null() }
            object.raw(",\"source\":")
            object.string(utf8: source)
            object.raw(",\"recorded_at\":")
            ReadService.writeTime(&object, recordedAt, days: &previous.recordedDay)
            object.raw(",\"received_at\":")
            ReadService.writeTime(&object, receivedAt, days: &previous.receivedDay)
            object.raw(",\"clock_suspect\":")
            object.bool(clockSuspect)
        }
    }

    /// What the previous fix of a page tells the writer of the next. The fraction digits of each
    /// double column's last value: the first guess for its next (`DecimalDouble`), two probes
    /// instead of a bisection when a column keeps its precision, as a phone's coordinates do. The
    /// date of each time column's last value (`RFC3339.DayCache`), which the next mostly shares.
    struct PreviousFix {
        var latitude = 7, longitude = 7, accuracy = 0, altitude = 1, speed = 2, heading = 1
        var recordedDay = RFC3339.DayCache(), receivedDay = RFC3339.DayCache()
    }

    /// Reads the fixes of a binary-format result whose `FixColumns.shown` start at column `first`,
    /// each column's type checked once (`requireBinary`), then every value read without a check
    /// per value: a history page is 100,000 values.
    struct FixReader {
        let result: PostgresResult
        let first: Int

        init(_ result: PostgresResult, first: Int) throws(PostgresError) {
            for (position, column) in FixColumns.shown.enumerated() {
                try result.requireBinary(first + position, Self.binaryType(column.type))
            }
            self.result = result
            self.first = first
        }

        static func binaryType(_ type: ProjectionSchema.ColumnType) -> PostgresBinaryType {
            switch type {
            case .bigint: .int8
            case .integer: .int4
            case .smallint: .int2
            case .timestamptz: .timestamptz
            case .float8: .float8
            case .boolean: .bool
            case .text: .text
            }
        }

        static let latitude = FixColumns.position(.latitude, in: FixColumns.shown)
        static let longitude = FixColumns.position(.longitude, in: FixColumns.shown)
        static let accuracy = FixColumns.position(.accuracy, in: FixColumns.shown)
        static let altitude = FixColumns.position(.altitude, in: FixColumns.shown)
        static let speed = FixColumns.position(.speed, in: FixColumns.shown)
        static let heading = FixColumns.position(.heading, in: FixColumns.shown)
        static let battery = FixColumns.position(.battery, in: FixColumns.shown)
        static let isCharging = FixColumns.position(.isCharging, in: FixColumns.shown)
        static let source = FixColumns.position(.source, in: FixColumns.shown)
        static let recordedAt = FixColumns.position(.recordedAt, in: FixColumns.shown)
        static let receivedAt = FixColumns.position(.receivedAt, in: FixColumns.shown)
        static let clockSuspect = FixColumns.position(.clockSuspect, in: FixColumns.shown)

        func fix(_ row: Int) throws(PostgresError) -> FixRow {
            var fix = FixRow()
            fix.latitude = try value(row, Self.latitude, PostgresBinaryType.float8) ?? 0
            fix.longitude = try value(row, Self.longitude, PostgresBinaryType.float8) ?? 0
            fix.accuracy = try value(row, Self.accuracy, PostgresBinaryType.float8)
            fix.altitude = try value(row, Self.altitude, PostgresBinaryType.float8)
            fix.speed = try value(row, Self.speed, PostgresBinaryType.float8)
            fix.heading = try value(row, Self.heading, PostgresBinaryType.float8)
            fix.battery = try value(row, Self.battery, PostgresBinaryType.int2).map { Int64($0) }
            fix.charging = try value(row, Self.isCharging, PostgresBinaryType.bool)
            if let source = result.binaryBytes(row, first + Self.source) {
                fix.source = source.assumingMemoryBound(to: UInt8.self)
            }
            fix.recordedAt = try time(row, Self.recordedAt)
            fix.receivedAt = try time(row, Self.receivedAt)
            fix.clockSuspect = try value(row, Self.clockSuspect, PostgresBinaryType.bool) ?? false
            return fix
        }

        /// The value at `position` of the fix, nil for NULL; `.decode` when its bytes are not of
        /// the type's length.
        @inline(__always)
        private func value<T>(_ row: Int, _ position: Int, _ decode: (UnsafeRawBufferPointer) -> T?)
            throws(PostgresError) -> T?
        {
            guard let bytes = result.binaryBytes(row, first + position) else { return nil }
            guard let value = decode(bytes) else { throw mismatch(row, position, bytes) }
            return value
        }

        /// A time at `position`, nil for NULL and for the infinities (shown as null, as before).
        @inline(__always)
        private func time(_ row: Int, _ position: Int) throws(PostgresError) -> Int64? {
            guard let bytes = result.binaryBytes(row, first + position) else { return nil }
            guard bytes.count == 8 else { throw mismatch(row, position, bytes) }
            return PostgresBinaryType.timestampMicros(bytes)
        }

        private func mismatch(_ row: Int, _ position: Int, _ bytes: UnsafeRawBufferPointer) -> PostgresError {
            PostgresError(
                .decode,
                message:
                    "row \(row) column \(result.columnNames[first + position]) holds \(bytes.count) bytes, not a value of its type"
            )
        }
    }

    /// RFC 3339 with microseconds, or null: the one way the read API writes a time. Ingest accepts
    /// only years 0001-9999, but an older log or PostgreSQL may hold any time, so it is clamped first.
    static func writeTime(_ object: inout JSONFlatObject, _ micros: Int64?) {
        guard let micros else { return object.null() }
        object.timestamp(micros: RFC3339.clampedMicros(micros))
    }

    /// `writeTime`, the date kept in `days` from the column's previous time.
    static func writeTime(_ object: inout JSONFlatObject, _ micros: Int64?, days: inout RFC3339.DayCache) {
        guard let micros else { return object.null() }
        object.timestamp(micros: RFC3339.clampedMicros(micros), days: &days)
    }

    /// One arrival (a batch as it arrived) of a text-format `arrivalsStatement` result, as one
    /// object written at once, like a fix.
    func writeArrival(_ writer: inout JSONWriter, _ result: PostgresResult, _ row: Int) throws(PostgresError)
    {
        typealias Column = ArrivalColumn
        let receivedAt = try result.timestampMicros(row, Column.receivedAt.rawValue)
        var batchID = result.string(row, Column.batchID.rawValue) ?? ""
        let fixCount = try result.int64(row, Column.fixCount.rawValue) ?? 0
        let rejectedCount = try result.int64(row, Column.rejectedCount.rawValue) ?? 0
        let recordedMin = try result.timestampMicros(row, Column.recordedMin.rawValue)
        let recordedMax = try result.timestampMicros(row, Column.recordedMax.rawValue)
        let offset = try result.int64(row, Column.logOffset.rawValue) ?? 0
        var clientProtocol = result.string(row, Column.clientProtocol.rawValue) ?? "native"
        let importMember = importJSON(result, row)
        // Keys and punctuation (about 120 bytes), three times, three integers, the batch id, the
        // protocol, the import (or null).
        let bytesMax =
            176 + 3 * JSONFlatObject.timestampBytesMax + 3 * JSONFlatObject.integerBytesMax
            + JSONFlatObject.stringBytesMax(utf8Count: batchID.utf8.count)
            + JSONFlatObject.stringBytesMax(utf8Count: clientProtocol.utf8.count) + 16
            + (importMember?.count ?? 4)
        batchID.withUTF8 { batchIDUTF8 in
            clientProtocol.withUTF8 { protocolUTF8 in
                writer.flatObject(bytesMax: bytesMax) { object in
                    object.key("received_at")
                    Self.writeTime(&object, receivedAt)
                    object.key("batch_id")
                    object.string(utf8: batchIDUTF8)
                    object.key("fix_count")
                    object.int64(fixCount)
                    object.key("rejected_count")
                    object.int64(rejectedCount)
                    object.key("recorded_min")
                    Self.writeTime(&object, recordedMin)
                    object.key("recorded_max")
                    Self.writeTime(&object, recordedMax)
                    object.key("offset")
                    object.int64(offset)
                    object.key("protocol")
                    object.string(utf8: protocolUTF8)
                    object.key("import")
                    if let importMember {
                        importMember.withUnsafeBufferPointer { object.raw($0) }
                    } else {
                        object.null()
                    }
                }
            }
        }
    }
}

extension ReadService {
    /// The arrival's `import` member as JSON (`{"import_id", "file_name", "sha256", "format"}`), or
    /// nil for a batch that came from no import. Few arrivals have one: written apart, then copied.
    func importJSON(_ result: PostgresResult, _ row: Int) -> [UInt8]? {
        typealias Column = ArrivalColumn
        guard let importID = result.string(row, Column.importID.rawValue) else { return nil }
        var writer = JSONWriter(capacity: 256)
        writer.beginObject()
        writer.key("import_id")
        writer.string(importID)
        writer.key("file_name")
        writer.string(result.string(row, Column.importFileName.rawValue) ?? "")
        writer.key("sha256")
        writer.string(result.string(row, Column.importSHA256.rawValue) ?? "")
        writer.key("format")
        writer.string(result.string(row, Column.importFormat.rawValue) ?? "")
        writer.endObject()
        return writer.bytes
    }
}

extension String? {
    /// The UTF-8 of the string, or nil, for the duration of `body`.
    mutating func withUTF8Optional<R>(_ body: (UnsafeBufferPointer<UInt8>?) -> R) -> R {
        guard var text = self else { return body(nil) }
        return text.withUTF8 { body($0) }
    }
}
