import Events
import Export
import HTTP
import Identity
import JSON
import Postgres

/// `GET /api/find-my/devices/{id}/export?format=gpx|geojson|csv&from=&to=` (docs/api.md, "Export"):
/// a device's history as a file, streamed while it is read. Who may export is who may read the
/// history (`.viewer`: the owner, or a user the device is shared with while the share holds), over
/// the same range as `/locations` (`from` inclusive, `to` exclusive, on `recorded_at`).
///
/// The projection is read a page at a time with the history's own keyset statement, each page's
/// rows written before the next is read, so memory is one page and the stream's few chunks however
/// long the history. The connection goes back to the pool between pages: a slow download holds a
/// worker thread, never a database connection.
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
    /// the database fails midway or the client leaves.
    func writeExport(
        deviceID: UInt64, _ range: HistoryQuery, _ format: ExportFormat, into stream: ResponseStream
    ) throws {
        let output = ExportOutput(stream)
        var exporter = FixExporter(format: format) { bytes in try output.stream.write(bytes) }
        var page = HistoryQuery(
            fromMicros: range.fromMicros, toMicros: range.toMicros, limit: Self.exportPageFixes)
        while true {
            let result = try query(Self.locationsStatement(deviceID: deviceID, page))
            let rows = min(result.rowCount, page.limit)
            for row in 0..<rows {
                let fix = try decoding { () throws(PostgresError) in try FixRow(result, row, 0) }
                try exporter.write(fix.exported, receivedAtMicros: fix.receivedAt ?? 0)
            }
            guard result.rowCount > page.limit else { break }
            page.cursor = try decoding { () throws(PostgresError) in
                try HistoryCursor(locationsOf: deviceID, after: result, rows - 1)
            }
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

/// The response stream where `FixExporter`'s sink (a closure it keeps) can reach it.
private final class ExportOutput {
    var stream: ResponseStream
    init(_ stream: ResponseStream) { self.stream = stream }
}

extension ReadService.FixRow {
    /// The fix as the exporters take it: `source` copied out of the result, battery as stored.
    var exported: Fix {
        Fix(
            latitude: latitude, longitude: longitude, accuracyMeters: accuracy, altitudeMeters: altitude,
            speedMetersPerSecond: speed, headingDegrees: heading,
            batteryPercent: battery.map { UInt8(clamping: $0) }, isCharging: charging,
            source: String(decoding: source, as: UTF8.self), recordedAtMicros: recordedAt ?? 0,
            clockSuspect: clockSuspect)
    }
}
