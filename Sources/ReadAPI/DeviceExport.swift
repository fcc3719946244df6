import Events
import Export
import HTTP
import Identity
import JSON
import Postgres
import ProjectionSchema
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// `GET /api/find-my/devices/{id}/export?format=gpx|geojson|csv&from=&to=` (docs/api.md, "Export"):
/// a device's history as a file, streamed while it is read. Who may export is who may read the
/// history (`.viewer`: the owner, or a user the device is shared with while the share holds), over
/// the same range as `/locations` (`from` inclusive, `to` exclusive, on `recorded_at`).
///
/// The projection is read a page at a time (`exportStatement`), the next page while one is written,
/// so memory is two pages and the stream's few chunks however long the history. The connection goes back to the pool between pages: a slow download holds a worker
/// thread, never a database connection.
extension ReadService {
    /// Rows read from PostgreSQL per page of an export.
    static let exportPageFixes = 10_000

    func export(_ request: HTTPRequest, deviceID: UInt64) throws(APIError) -> HTTPResponse {
        let values = try checkedParameters(
            request.queryItems, allowed: ["format", "from", "to", "after_offset"])
        let formats = ExportFormat.allCases.map(\.rawValue).joined(separator: ", ")
        guard let name = values["format"] else {
            throw APIError(
                status: 400, code: .unknownFormat, message: "format is required; one of: \(formats)")
        }
        guard let format = ExportFormat(rawValue: name) else {
            throw APIError(
                status: 400, code: .unknownFormat,
                message: "unknown format '\(name.prefix(32))'; use one of: \(formats)")
        }
        // The history's own parsing of from and to (limit and cursor were refused above).
        let range = try HistoryQuery.parse(
            request.queryItems.filter { $0.name != "format" }, kind: .locations, deviceID: deviceID,
            limitDefault: Self.exportPageFixes, limitMax: Self.exportPageFixes)
        try waitForProjection(request)
        let deviceName = identity.registrySnapshot.devices[deviceID]?.name ?? ""
        let fileName = Self.exportFileName(
            deviceName: deviceName, deviceID: deviceID, fromMicros: range.fromMicros,
            toMicros: range.toMicros,
            format: format)
        let headers = HTTPHeaders([
            ("Content-Type", format.contentType),
            ("Content-Disposition", "attachment; filename=\"\(fileName)\""),
        ])
        return .streamed(headers: headers) { [self] stream in
            try writeExport(deviceID: deviceID, range, format, into: stream)
        }
    }

    /// Every fix of the range, page by page, through `FixExporter`; throws (cutting the body) when
    /// the database fails midway or the client leaves. The next page is read on a thread of its own
    /// while this one is written: PostgreSQL and the writing then take about the longer of the two
    /// instead of their sum.
    func writeExport(
        deviceID: UInt64, _ range: HistoryQuery, _ format: ExportFormat, into stream: ResponseStream
    ) throws {
        let output = ExportOutput(stream)
        var exporter = FixExporter(format: format) { bytes in try output.stream.write(bytes) }
        let pageFixes = Self.exportPageFixes
        var result = try query(Self.exportStatement(deviceID: deviceID, range, after: nil, limit: pageFixes))
        while true {
            let rows = result.rowCount
            var next: PageRead?
            if rows == pageFixes {
                let last = result
                let cursor = try decoding { () throws(PostgresError) in try ExportRow(last, rows - 1).cursor }
                let statement = Self.exportStatement(
                    deviceID: deviceID, range, after: cursor, limit: pageFixes)
                next = PageRead { [self] () throws(APIError) in try query(statement) }
            }
            // A page read ahead is waited for even when writing this one fails: its thread is joined.
            defer { _ = try? next?.wait() }
            for row in 0..<rows {
                let fix = try decoding { () throws(PostgresError) in try ExportRow(result, row) }
                try exporter.write(fix.fix, receivedAtMicros: fix.receivedAtMicros)
            }
            guard let reading = next else { break }
            next = nil
            result = try reading.wait()
        }
        try exporter.finish()
        try output.stream.flush()
    }

    /// `NAME-FROM-TO.ext`: the device's name cut to letters, digits, `-` and `_` (its id when
    /// nothing is left), the range's ends as `20260501T090000Z`, `start` and `end` when open.
    static func exportFileName(
        deviceName: String, deviceID: UInt64, fromMicros: Int64?, toMicros: Int64?, format: ExportFormat
    ) -> String {
        var name = String(
            deviceName.unicodeScalars.prefix(64).map { scalar in
                scalar.isASCII
                    && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || scalar == "-")
                    ? Character(scalar) : "_"
            })
        if name.allSatisfy({ $0 == "_" }) { name = "device-\(deviceID)" }
        func end(_ micros: Int64?, _ open: String) -> String {
            guard let micros else { return open }
            // 2026-05-01T09:00:00.000000Z -> 20260501T090000Z
            let text = RFC3339.formatMicros(RFC3339.clampedMicros(micros))
            return String(text.prefix(19).filter { $0 != "-" && $0 != ":" }) + "Z"
        }
        return "\(name)-\(end(fromMicros, "start"))-\(end(toMicros, "end")).\(format.fileExtension)"
    }
}

/// One page read on a thread of its own; `wait` joins it and gives its result, once.
private final class PageRead: @unchecked Sendable {
    private var outcome: Result<PostgresResult, APIError>?
    private var thread: pthread_t?

    init(_ read: @escaping @Sendable () throws(APIError) -> PostgresResult) {
        thread = spawnThread { [self] in
            do throws(APIError) {
                outcome = .success(try read())
            } catch {
                outcome = .failure(error)
            }
        }
    }

    /// The join orders the thread's write of `outcome` before this read of it.
    func wait() throws(APIError) -> PostgresResult {
        guard let thread else { preconditionFailure("PageRead.wait twice") }
        pthread_join(thread, nil)
        self.thread = nil
        return try outcome!.get()
    }
}

/// The response stream where `FixExporter`'s sink (a closure it keeps) can reach it.
private final class ExportOutput {
    var stream: ResponseStream
    init(_ stream: ResponseStream) { self.stream = stream }
}

extension ReadService {
    /// What an export reads of a fix, in this order: what `FixExporter` writes and nothing more.
    /// Each value PostgreSQL sends costs it a call of the type's send function and an allocation,
    /// which is most of its time in an export; `clock_suspect` (not exported) and the history's
    /// keyset (log_offset, fix_index) are left out.
    static let exportColumns: [ProjectionSchema.FixColumn] = [
        .latitude, .longitude, .accuracy, .altitude, .speed, .heading, .battery, .isCharging, .source,
        .recordedAt, .receivedAt,
    ]

    /// A page of a device's fixes in `range` after `keyset`, at most `limit` of them, in the order
    /// of the history's index (`historyStatement`): the exported columns only.
    static func exportStatement(
        deviceID: UInt64, _ range: HistoryQuery, after keyset: FixKeyset?, limit: Int
    ) -> Statement {
        historyStatement(
            FixColumns.select(exportColumns), deviceID: deviceID, range, after: keyset, limit: limit)
    }

    /// One row of an `exportStatement` result (binary), each value at its position in
    /// `exportColumns`: the fix as the exporters take it, and its keyset.
    struct ExportRow {
        var fix: Fix
        var receivedAtMicros: Int64

        /// Positions in `exportColumns`.
        static let latitude = FixColumns.position(.latitude, in: exportColumns)
        static let longitude = FixColumns.position(.longitude, in: exportColumns)
        static let accuracy = FixColumns.position(.accuracy, in: exportColumns)
        static let altitude = FixColumns.position(.altitude, in: exportColumns)
        static let speed = FixColumns.position(.speed, in: exportColumns)
        static let heading = FixColumns.position(.heading, in: exportColumns)
        static let battery = FixColumns.position(.battery, in: exportColumns)
        static let isCharging = FixColumns.position(.isCharging, in: exportColumns)
        static let source = FixColumns.position(.source, in: exportColumns)
        static let recordedAt = FixColumns.position(.recordedAt, in: exportColumns)
        static let receivedAt = FixColumns.position(.receivedAt, in: exportColumns)

        /// Throws `.decode` for a value of another type, and for a time that is infinite or out of
        /// range: a cursor must carry the row's own recorded_at, or the next page would repeat or
        /// skip fixes.
        init(_ result: PostgresResult, _ row: Int) throws(PostgresError) {
            guard let recordedAt = try result.binaryTimestampMicros(row, Self.recordedAt) else {
                throw PostgresError(.decode, message: "row \(row) has a recorded_at no export can write")
            }
            let source = try result.withBinaryText(row, Self.source) { String(decoding: $0, as: UTF8.self) }
            fix = Fix(
                latitude: try result.binaryDouble(row, Self.latitude) ?? 0,
                longitude: try result.binaryDouble(row, Self.longitude) ?? 0,
                accuracyMeters: try result.binaryDouble(row, Self.accuracy),
                altitudeMeters: try result.binaryDouble(row, Self.altitude),
                speedMetersPerSecond: try result.binaryDouble(row, Self.speed),
                headingDegrees: try result.binaryDouble(row, Self.heading),
                batteryPercent: try result.binaryInt64(row, Self.battery).map { UInt8(clamping: $0) },
                isCharging: try result.binaryBool(row, Self.isCharging), source: source ?? "",
                recordedAtMicros: recordedAt)
            receivedAtMicros = try result.binaryTimestampMicros(row, Self.receivedAt) ?? 0
        }

        var cursor: FixKeyset {
            FixKeyset(
                recordedAtMicros: fix.recordedAtMicros, latitude: fix.latitude, longitude: fix.longitude)
        }
    }
}
