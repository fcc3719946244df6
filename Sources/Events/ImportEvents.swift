/// A file of location history imported into a device (docs/log-format.md, type 40;
/// docs/import-export.md). Appended once, after the last of the import's fix batches is durable: the
/// audit's answer to "where did these batches come from". The fixes themselves are the fix batches
/// (type 1) with protocol `import:<format>` and the batch ids listed here.
///
/// Payload of type 40, version 1: u64 device id, 16 bytes import id, string format (the import
/// format's name: `gpx`, `google-records`, ...), string file name (as the user gave it, without a
/// directory), 32 bytes the file's SHA-256, u64 the file's size in bytes, u64 user id of who
/// imported it, u64 fixes read, u64 fixes accepted, u64 fixes rejected, u64 fixes in batches
/// already stored (a re-import), u64 items that are not fixes, i64 earliest and i64 latest
/// `recorded_at` read (microseconds; both 0 when no fix was read), u32 N, N × 16 bytes the batch
/// ids in chunk order. No coordinate is in it.
public struct HistoryImported: Equatable, Sendable {
    public var deviceID: UInt64
    /// The import's id, as `GET .../imports/{id}` names it.
    public var importID: UUID128
    public var format: String
    public var fileName: String
    public var fileSHA256: [UInt8]
    public var fileBytes: UInt64
    public var userID: UInt64
    public var fixesRead: UInt64
    public var fixesAccepted: UInt64
    public var fixesRejected: UInt64
    /// Fixes of chunks whose batch id was stored before: answered as duplicates, stored nothing.
    public var fixesDuplicate: UInt64
    public var notAFix: UInt64
    /// nil when the file held no fix.
    public var recordedSpanMicros: ClosedRange<Int64>?
    public var batchIDs: [UUID128]

    public init(
        deviceID: UInt64, importID: UUID128, format: String, fileName: String, fileSHA256: [UInt8],
        fileBytes: UInt64, userID: UInt64, fixesRead: UInt64, fixesAccepted: UInt64, fixesRejected: UInt64,
        fixesDuplicate: UInt64, notAFix: UInt64, recordedSpanMicros: ClosedRange<Int64>?, batchIDs: [UUID128]
    ) {
        precondition(fileSHA256.count == 32, "a SHA-256 is 32 bytes")
        self.deviceID = deviceID
        self.importID = importID
        self.format = format
        self.fileName = fileName
        self.fileSHA256 = fileSHA256
        self.fileBytes = fileBytes
        self.userID = userID
        self.fixesRead = fixesRead
        self.fixesAccepted = fixesAccepted
        self.fixesRejected = fixesRejected
        self.fixesDuplicate = fixesDuplicate
        self.notAFix = notAFix
        self.recordedSpanMicros = recordedSpanMicros
        self.batchIDs = batchIDs
    }
}

extension ClientProtocol {
    /// The import formats' protocol numbers, 5 to 14, in the order of `importFormatNames`: a fix
    /// batch of an import shows in the arrivals audit as `import:<format>`.
    public static let importFormatNames = [
        "google-records", "google-semantic", "google-timeline", "gpx", "kml", "kmz", "geojson", "csv",
        "owntracks-recorder", "zip",
    ]
    static let importRawValueFirst: UInt8 = 5

    /// The protocol of a fix batch imported from a file of `format` (an ImportFormat's name); nil
    /// for a name that is not an import format.
    public static func imported(format: String) -> ClientProtocol? {
        guard let index = importFormatNames.firstIndex(of: format) else { return nil }
        return ClientProtocol(rawValue: importRawValueFirst + UInt8(index))
    }

    /// The import format's name when this is an import protocol.
    public var importFormat: String? {
        guard rawValue >= Self.importRawValueFirst,
            Int(rawValue - Self.importRawValueFirst) < Self.importFormatNames.count
        else { return nil }
        return Self.importFormatNames[Int(rawValue - Self.importRawValueFirst)]
    }
}

extension EventCodec {
    static func encodeHistoryImported(_ h: HistoryImported, into w: inout ByteWriter) -> (
        type: UInt8, deviceKey: UInt64
    ) {
        w.u64(h.deviceID)
        w.uuid(h.importID)
        w.string(h.format)
        w.string(h.fileName)
        w.raw(h.fileSHA256)
        w.u64(h.fileBytes)
        w.u64(h.userID)
        for count in [h.fixesRead, h.fixesAccepted, h.fixesRejected, h.fixesDuplicate, h.notAFix] {
            w.u64(count)
        }
        w.i64(h.recordedSpanMicros?.lowerBound ?? 0)
        w.i64(h.recordedSpanMicros?.upperBound ?? 0)
        precondition(h.batchIDs.count <= Int(UInt32.max))
        w.u32(UInt32(h.batchIDs.count))
        for id in h.batchIDs { w.uuid(id) }
        return (EventType.historyImported.rawValue, h.deviceID)
    }

    static func decodeHistoryImported(_ r: inout ByteReader) throws -> Event {
        let deviceID = try r.u64()
        let importID = try r.uuid()
        let format = try r.string()
        let fileName = try r.string()
        let sha = Array(try r.raw(32))
        let fileBytes = try r.u64()
        let userID = try r.u64()
        let (read, accepted, rejected, duplicate, notAFix) = (
            try r.u64(), try r.u64(), try r.u64(), try r.u64(), try r.u64()
        )
        let (earliest, latest) = (try r.i64(), try r.i64())
        guard earliest <= latest else {
            throw DecodeError.invalid("history_imported: earliest recorded_at after the latest")
        }
        let count = Int(try r.u32())
        guard count <= r.remaining / 16 else {
            throw DecodeError.invalid("history_imported: \(count) batch ids in \(r.remaining) bytes")
        }
        var batchIDs: [UUID128] = []
        batchIDs.reserveCapacity(count)
        for _ in 0..<count { batchIDs.append(try r.uuid()) }
        return .historyImported(
            HistoryImported(
                deviceID: deviceID, importID: importID, format: format, fileName: fileName, fileSHA256: sha,
                fileBytes: fileBytes, userID: userID, fixesRead: read, fixesAccepted: accepted,
                fixesRejected: rejected, fixesDuplicate: duplicate, notAFix: notAFix,
                recordedSpanMicros: read == 0 ? nil : earliest...latest, batchIDs: batchIDs))
    }
}
