import Compactor
import Events
import Foundation
import Postgres
import Projector
import Testing

/// `history_imported` in the projection: a row of `device_imports` per import, its id on the
/// batches it names (folded in the same transaction or in earlier ones), the first import's id kept
/// when the same file comes again, and everything of it gone with the device.
@Suite(ProjectorClusterTrait()) struct ImportProjectionTests {
    static let gpx = ClientProtocol.imported(format: "gpx")!
    static let sha = (0..<32).map { UInt8($0 * 7 % 256) }
    static let shaHex = sha.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    static let recorded: Int64 = 1_560_000_000_000_000  // 2019: an old history brought in today

    static func chunkID(_ index: Int) -> UUID128 { UUID128(high: 0xC0FFEE, low: UInt64(index)) }

    static func imported(_ importID: UUID128, device: UInt64 = 1, duplicate: UInt64 = 0) -> HistoryImported {
        HistoryImported(
            deviceID: device, importID: importID, format: "gpx", fileName: "tour 2019.gpx", fileSHA256: sha,
            fileBytes: 81_234, userID: 1, fixesRead: 6, fixesAccepted: 6 - duplicate, fixesRejected: 0,
            fixesDuplicate: duplicate, notAFix: 3, recordedSpanMicros: recorded...(recorded + 5_000_000),
            batchIDs: (0..<3).map(chunkID))
    }

    /// A user, two devices, an import of three chunks into device 1 among a native batch, its
    /// record, then the same file again (its chunks answered as duplicates, so no batch, only a
    /// second record).
    static func writeImportLog(_ directory: String) throws -> LogWriter {
        var options = LogOptions()
        options.diagnostics = { _ in }
        let writer = try LogWriter(directory: directory, options: options)
        try writer.append(
            .userCreated(
                UserCreated(userID: 1, name: "ada", role: .member, tokenHash: Array(repeating: 1, count: 32)))
        )
        for device: UInt64 in [1, 2] {
            try writer.append(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: device, userID: 1, deviceUUID: UUID128(high: 9, low: device),
                        name: "d\(device)",
                        platform: "linux", model: "")))
        }
        for index in 0..<3 {
            let fixes = (0..<2).map { n in
                Fix(
                    latitude: 48.1 + Double(index * 2 + n) / 1000, longitude: 11.5, accuracyMeters: nil,
                    source: "significant", recordedAtMicros: recorded + Int64(index * 2 + n) * 1_000_000)
            }
            try writer.append(
                .fixBatch(
                    FixBatch(deviceID: 1, batchID: chunkID(index), fixes: fixes, clientProtocol: gpx)))
            if index == 1 {
                let fix = Fix(
                    latitude: 52.5, longitude: 13.4, accuracyMeters: 9, source: "significant",
                    recordedAtMicros: wallClockMicros())
                try writer.append(.fixBatch(FixBatch(deviceID: 1, batchID: UUID128.random(), fixes: [fix])))
            }
        }
        try writer.append(.historyImported(imported(UUID128(high: 1, low: 1))))
        try writer.append(.historyImported(imported(UUID128(high: 1, low: 2), duplicate: 6)))
        return writer
    }

    func check(_ connection: PostgresConnection) throws {
        let rows = try connection.execute(
            """
            SELECT import_id::text, device_id, format, file_name, sha256, file_bytes, user_id, fixes_read,
                fixes_accepted, fixes_duplicate, not_a_fix, recorded_min = to_timestamp(\(Self.recorded) / 1e6),
                recorded_max = to_timestamp(\(Self.recorded + 5_000_000) / 1e6)
            FROM findmy.device_imports ORDER BY log_offset
            """)
        #expect(rows.rowCount == 2)
        let first = (0..<13).map { rows.string(0, $0) ?? "null" }
        #expect(
            first == [
                UUID128(high: 1, low: 1).description, "1", "gpx", "tour 2019.gpx", Self.shaHex, "81234", "1",
                "6",
                "6", "0", "3", "t", "t",
            ])
        #expect(rows.string(1, 9) == "6")
        // The chunks name the first import; the native batch names none.
        let batches = try connection.execute(
            "SELECT protocol, import_id::text FROM findmy.device_batches ORDER BY log_offset")
        let pairs = (0..<batches.rowCount).map { "\(batches.string($0, 0)!) \(batches.string($0, 1) ?? "-")" }
        let named = "import:gpx \(UUID128(high: 1, low: 1))"
        #expect(pairs == [named, named, "native -", named])
    }

    @Test func anImportIsARowAndItsBatchesNameIt() throws {
        let log = TemporaryLog()
        let writer = try Self.writeImportLog(log.path)
        defer { writer.close() }
        let (connection, helper) = try freshProjection()
        defer {
            connection.close()
            helper.close()
        }
        try ProjectionStore().apply(try foldedBatch(log.path), nowMicros: wallClockMicros(), connection)
        try check(connection)
    }

    /// The record in a later transaction than its batches: the batches are updated in place.
    @Test func theBatchesOfEarlierTransactionsAreNamedToo() throws {
        let log = TemporaryLog()
        let writer = try Self.writeImportLog(log.path)
        defer { writer.close() }
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        var options = Projector.Options()
        options.recordsPerTransactionMax = 2
        let projector = Projector(
            client: client, reader: LogReader(directory: log.path, writer: writer), options: options)
        try projector.prepare()
        try catchUp(projector)
        let connection = try PostgresConnection(client.conninfo)
        defer { connection.close() }
        try check(connection)
    }

    @Test func removingTheDeviceRemovesItsImports() throws {
        let log = TemporaryLog()
        let writer = try Self.writeImportLog(log.path)
        defer { writer.close() }
        let (connection, helper) = try freshProjection()
        defer {
            connection.close()
            helper.close()
        }
        let store = ProjectionStore()
        let folded = try foldedBatch(log.path)
        try store.apply(folded, nowMicros: wallClockMicros(), connection)
        // Device 2 imports a file, then device 1 is removed and device 2's import comes after the
        // removal of device 2 in one transaction: nothing of either is left.
        let end = writer.durableEnd
        try writer.append(.historyImported(Self.imported(UUID128(high: 2, low: 1), device: 2)))
        try writer.append(.deviceRemoved(DeviceRemoved(deviceID: 1)))
        try writer.append(.deviceRemoved(DeviceRemoved(deviceID: 2)))
        try writer.append(.historyImported(Self.imported(UUID128(high: 2, low: 2), device: 2)))
        try store.apply(try foldedBatch(log.path, from: end), nowMicros: wallClockMicros(), connection)
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_imports") == 0)
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_batches") == 0)
    }

    /// The compactor's database half: an import's row goes past the arrivals window, as its
    /// batches' rows do, and with a removal the projector has not folded yet; a projection of
    /// another version (which lacks the table) is left alone until the projector rebuilds it.
    @Test func theCompactorDeletesImportRowsAsEnvelopes() throws {
        let log = TemporaryLog()
        let writer = try Self.writeImportLog(log.path)
        defer { writer.close() }
        let conninfo = try TestCluster.freshDatabase()
        let reader = LogReader(directory: log.path, writer: writer)
        let projector = Projector(client: PostgresClient(conninfo: conninfo), reader: reader)
        try projector.prepare()
        try catchUp(projector)
        let connection = try PostgresConnection(conninfo)
        defer { connection.close() }
        func compact(nowMicros: Int64) throws -> DatabaseCompactionReport {
            let policy = try RetentionPolicy.fold(
                reader, upTo: writer.durableEnd, settings: RetentionSettings())
            return try DatabaseCompaction(
                policy: policy, nowMicros: nowMicros, rowsPerStatementMax: 1, logID: writer.logID
            ).run(connection, dryRun: false)
        }
        // 89 days on, within the arrivals window (90): everything stays.
        let now = wallClockMicros()
        #expect(try compact(nowMicros: now + 89 * RetentionPolicy.microsPerDay).importRowsDeleted == 0)
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_imports") == 2)
        // Removed in the log, not yet folded: the compactor deletes what the projector inserted.
        try writer.append(.deviceRemoved(DeviceRemoved(deviceID: 1)))
        let version = Schema.projectionVersion
        _ = try connection.execute(
            "UPDATE findmy_meta.generations SET projection_version = $1", [.int64(Int64(version - 1))])
        let otherVersion = try compact(nowMicros: now)
        #expect(
            otherVersion.skipped?.contains("version \(version - 1), not \(version)") == true,
            "\(otherVersion)")
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_imports") == 2)
        _ = try connection.execute(
            "UPDATE findmy_meta.generations SET projection_version = $1", [.int64(Int64(version))])
        let removed = try compact(nowMicros: now)
        #expect(removed.importRowsDeleted == 2 && removed.batchRowsDeleted == 4)
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_imports") == 0)
    }

    @Test func theCompactorDeletesImportRowsPastTheArrivalsWindow() throws {
        let log = TemporaryLog()
        let writer = try Self.writeImportLog(log.path)
        defer { writer.close() }
        let conninfo = try TestCluster.freshDatabase()
        let reader = LogReader(directory: log.path, writer: writer)
        let projector = Projector(client: PostgresClient(conninfo: conninfo), reader: reader)
        try projector.prepare()
        try catchUp(projector)
        let connection = try PostgresConnection(conninfo)
        defer { connection.close() }
        let policy = try RetentionPolicy.fold(reader, upTo: writer.durableEnd, settings: RetentionSettings())
        let later = wallClockMicros() + 91 * RetentionPolicy.microsPerDay
        let dry = try DatabaseCompaction(
            policy: policy, nowMicros: later, rowsPerStatementMax: 1, logID: writer.logID
        ).run(connection, dryRun: true)
        #expect(dry.importRowsDeleted == 2)
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_imports") == 2)
        let report = try DatabaseCompaction(
            policy: policy, nowMicros: later, rowsPerStatementMax: 1, logID: writer.logID
        ).run(connection, dryRun: false)
        #expect(report.importRowsDeleted == 2 && report.batchRowsDeleted == 4)
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_imports") == 0)
    }

    /// The fold alone: an import folded before its device's removal in one transaction is dropped
    /// with the device's other rows.
    @Test func theFoldDropsAnImportWithItsDevice() throws {
        var batch = ProjectionBatch(firstOffset: 0)
        func add(_ event: Event, at offset: UInt64) throws {
            var encoded = EventCodec.encode(event, receivedAtMicros: 5)
            encoded.header.offset = offset
            try batch.add(
                LogRecord(
                    header: encoded.header, storedPayload: encoded.payload, segmentPath: "", position: 0))
        }
        try add(.historyImported(Self.imported(UUID128(high: 3, low: 1), device: 1)), at: 0)
        try add(.historyImported(Self.imported(UUID128(high: 3, low: 2), device: 2)), at: 1)
        #expect(batch.imports.map(\.logOffset) == [0, 1])
        #expect(batch.imports.first?.imported.fileSHA256 == Self.sha)
        try add(.deviceRemoved(DeviceRemoved(deviceID: 1)), at: 2)
        #expect(batch.imports.map(\.imported.deviceID) == [2])
    }
}
