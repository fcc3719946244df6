import Events
import JSON

extension EventJSON {
    /// An import's audit record: the file (name, SHA-256, size), its counts and its batches.
    static func writeHistoryImported(_ imported: HistoryImported, to writer: inout JSONWriter) {
        writer.key("device")
        writer.int64(Int64(bitPattern: imported.deviceID))
        writer.key("import_id")
        writer.string(imported.importID.description)
        writer.key("format")
        writer.string(imported.format)
        writer.key("file_name")
        writer.string(imported.fileName)
        writer.key("sha256")
        writer.string(imported.fileSHA256.map { hexDigit($0 >> 4) + hexDigit($0 & 15) }.joined())
        writer.key("file_bytes")
        writer.int64(Int64(bitPattern: imported.fileBytes))
        writer.key("user")
        writer.int64(Int64(bitPattern: imported.userID))
        let counts: [(String, UInt64)] = [
            ("fixes_read", imported.fixesRead), ("fixes_accepted", imported.fixesAccepted),
            ("fixes_rejected", imported.fixesRejected), ("fixes_duplicate", imported.fixesDuplicate),
            ("not_a_fix", imported.notAFix),
        ]
        for (key, count) in counts {
            writer.key(key)
            writer.int64(Int64(bitPattern: count))
        }
        writer.key("recorded_min")
        if let span = imported.recordedSpanMicros {
            writer.string(time(span.lowerBound))
        } else {
            writer.null()
        }
        writer.key("recorded_max")
        if let span = imported.recordedSpanMicros {
            writer.string(time(span.upperBound))
        } else {
            writer.null()
        }
        writer.key("batch_ids")
        writer.beginArray()
        for id in imported.batchIDs { writer.string(id.description) }
        writer.endArray()
    }

    private static func hexDigit(_ nibble: UInt8) -> String {
        String(UnicodeScalar(nibble < 10 ? 48 + nibble : 87 + nibble))
    }
}
