import JSON
import Postgres

/// Rows to JSON: a fix, an arrival, a time. Each row is read by the positions `ReadStatements`
/// gives its columns. Stored values are written as stored, however outsized; only what JSON cannot
/// say (NaN, infinities) becomes null, and times are clamped to what RFC 3339 can write.
extension ReadService {
    /// The fix whose `FixColumns.shown` start at column `first` of a binary-format result, as an object.
    func writeFix(_ writer: inout JSONWriter, _ result: PostgresResult, _ row: Int, _ first: Int)
        throws(PostgresError)
    {
        let fix = try FixRow(result, row, first)
        writer.flatObject(bytesMax: fix.bytesMax) { object in fix.write(&object) }
    }

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

        /// The fix whose `FixColumns.shown` start at column `first`: each field from its column's
        /// position in that list.
        init(_ result: PostgresResult, _ row: Int, _ first: Int) throws(PostgresError) {
            for (position, column) in FixColumns.shown.enumerated() {
                let at = first + position
                switch column {
                case .latitude: latitude = try result.binaryDouble(row, at) ?? 0
                case .longitude: longitude = try result.binaryDouble(row, at) ?? 0
                case .accuracy: accuracy = try result.binaryDouble(row, at)
                case .altitude: altitude = try result.binaryDouble(row, at)
                case .speed: speed = try result.binaryDouble(row, at)
                case .heading: heading = try result.binaryDouble(row, at)
                case .battery: battery = try result.binaryInt64(row, at)
                case .isCharging: charging = try result.binaryBool(row, at)
                case .source: source = try result.binaryText(row, at)
                case .recordedAt: recordedAt = try result.binaryTimestampMicros(row, at)
                case .receivedAt: receivedAt = try result.binaryTimestampMicros(row, at)
                case .clockSuspect: clockSuspect = try result.binaryBool(row, at) ?? false
                // The keyset, not shown: a cursor reads it (`Paging`).
                case .deviceID, .logOffset, .fixIndex: break
                }
            }
        }

        /// Keys and punctuation (about 170 bytes), six doubles, an integer, two times, the source.
        var bytesMax: Int {
            256 + 6 * JSONFlatObject.doubleBytesMax + 2 * JSONFlatObject.timestampBytesMax
                + JSONFlatObject.stringBytesMax(utf8Count: source.count)
        }

        /// The members (the caller writes the braces), in the order of docs/api.md.
        func write(_ object: inout JSONFlatObject) {
            // Stored values are shown as stored, however outsized; only what JSON cannot say
            // (NaN, infinities) becomes null.
            object.key("latitude")
            object.finiteDouble(latitude)
            object.key("longitude")
            object.finiteDouble(longitude)
            object.key("accuracy_m")
            if let accuracy { object.finiteDouble(accuracy) } else { object.null() }
            object.key("altitude_m")
            if let altitude { object.finiteDouble(altitude) } else { object.null() }
            object.key("speed_mps")
            if let speed { object.finiteDouble(speed) } else { object.null() }
            object.key("heading_deg")
            if let heading { object.finiteDouble(heading) } else { object.null() }
            object.key("battery_pct")
            if let battery { object.int64(battery) } else { object.null() }
            object.key("is_charging")
            if let charging { object.bool(charging) } else { object.null() }
            object.key("source")
            object.string(utf8: source)
            object.key("recorded_at")
            ReadService.writeTime(&object, recordedAt)
            object.key("received_at")
            ReadService.writeTime(&object, receivedAt)
            object.key("clock_suspect")
            object.bool(clockSuspect)
        }
    }

    /// RFC 3339 with microseconds, or null: the one way the read API writes a time. Ingest accepts
    /// only years 0001-9999, but an older log or PostgreSQL may hold any time, so it is clamped first.
    static func writeTime(_ object: inout JSONFlatObject, _ micros: Int64?) {
        guard let micros else { return object.null() }
        object.timestamp(micros: RFC3339.clampedMicros(micros))
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
