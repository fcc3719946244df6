import HTTP
import Identity
import JSON
import Postgres
import ProjectionSchema

// `GET /api/find-my/devices/{id}/imports` (the device's owner; docs/api.md, "Imports"): the
// device's completed imports, newest first, one object per `device_imports` row. No coordinate is
// in it; the file's name is the owner's own. Not paged: a row lives as long as the batches'
// envelopes (the arrivals window), and an import is a person's deliberate act.

extension ReadService {
    /// The columns of a `device_imports` row (text format) and the JSON member each one is; the
    /// raw value is the position.
    enum ImportColumn: Int, CaseIterable {
        case importID, receivedAt, logOffset, format, fileName, sha256, fileBytes, userID, fixesRead
        case fixesAccepted, fixesRejected, fixesDuplicate, notAFix, recordedMin, recordedMax

        var name: String {
            switch self {
            case .importID: "import_id"
            case .receivedAt: "received_at"
            case .logOffset: "log_offset"
            case .format: "format"
            case .fileName: "file_name"
            case .sha256: "sha256"
            case .fileBytes: "file_bytes"
            case .userID: "user_id"
            case .fixesRead: "fixes_read"
            case .fixesAccepted: "fixes_accepted"
            case .fixesRejected: "fixes_rejected"
            case .fixesDuplicate: "fixes_duplicate"
            case .notAFix: "not_a_fix"
            case .recordedMin: "recorded_min"
            case .recordedMax: "recorded_max"
            }
        }

        var expression: String { self == .importID ? "import_id::text" : name }

        enum Kind { case text, integer, time }
        var kind: Kind {
            switch self {
            case .importID, .format, .fileName, .sha256: .text
            case .receivedAt, .recordedMin, .recordedMax: .time
            default: .integer
            }
        }
    }

    static func importsStatement(deviceID: UInt64) -> Statement {
        Statement(
            sql: """
                SELECT \(ImportColumn.allCases.map(\.expression).joined(separator: ", "))
                FROM \(ProjectionSchema.Table.deviceImports.live)
                WHERE device_id = $1
                ORDER BY received_at DESC, log_offset DESC
                """,
            parameters: [.int64(Int64(deviceID))], format: .text)
    }

    func imports(_ request: HTTPRequest, deviceID: UInt64) throws(APIError) -> HTTPResponse {
        _ = try checkedParameters(request.queryItems, allowed: ["after_offset"])
        try waitForProjection(request)
        let result = try query(Self.importsStatement(deviceID: deviceID))
        var writer = JSONWriter(capacity: 256 + result.rowCount * 640)
        writer.beginObject()
        writer.key("imports")
        writer.beginArray()
        try decoding { () throws(PostgresError) in
            for row in 0..<result.rowCount { try writeImport(&writer, result, row) }
        }
        writer.endArray()
        writer.endObject()
        return .json(writer.bytes)
    }

    private func writeImport(_ writer: inout JSONWriter, _ result: PostgresResult, _ row: Int)
        throws(PostgresError)
    {
        writer.beginObject()
        for column in ImportColumn.allCases {
            writer.key(column.name)
            switch column.kind {
            case .text:
                writer.string(result.string(row, column.rawValue) ?? "")
            case .integer:
                writer.int64(try result.int64(row, column.rawValue) ?? 0)
            case .time:
                if let micros = try result.timestampMicros(row, column.rawValue) {
                    writer.timestamp(micros: RFC3339.clampedMicros(micros))
                } else {
                    writer.null()
                }
            }
        }
        writer.endObject()
    }
}
