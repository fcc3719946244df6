import Events
import Postgres
import ProjectionSchema
import Testing
import Workload

@testable import Projector

/// The projector's binary COPY stores exactly what its former text COPY stored.
@Suite(ProjectorClusterTrait()) struct BinaryWriteTests {
    /// Fix rows with every optional both ways, awkward text, and times across many months, before
    /// 1970 and a year ahead (the default partition), through both paths into two generations.
    @Test func historyRowsEqualTheTextCopys() throws {
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        defer { client.close() }
        let connection = try PostgresConnection(client.conninfo)
        defer { connection.close() }
        try Schema.migrate(connection)
        try Schema.createGeneration("gen_binary", connection)
        try Schema.createGeneration("gen_text", connection)
        let now = wallClockMicros()
        var random = SeededGenerator(seed: 12)
        let sources = ["gps", "wifi", "it's \"quoted\"", "tab\there", "back\\slash", "😀 ünïcødé", "\\N", ""]
        let rows = (0..<5_000).map { index -> LocationRow in
            let recorded =
                index % 50 == 0
                ? Int64.random(in: -2_000_000_000_000_000...4_000_000_000_000_000, using: &random)
                : now + Int64.random(in: -(800 * 86_400_000_000)...(120 * 86_400_000_000), using: &random)
            let fix = Fix(
                latitude: Double.random(in: -90...90, using: &random),
                longitude: Double.random(in: -180...180, using: &random),
                accuracyMeters: Double.random(in: 0...5000, using: &random),
                altitudeMeters: index % 3 == 0 ? nil : Double.random(in: -400...9000, using: &random),
                speedMetersPerSecond: index % 4 == 0 ? nil : -0.0,
                headingDegrees: index % 5 == 0 ? nil : Double(index % 360),
                batteryPercent: index % 6 == 0 ? nil : UInt8(index % 101),
                isCharging: index % 7 == 0 ? nil : index % 2 == 0, source: sources[index % sources.count],
                recordedAtMicros: recorded, clockSuspect: index % 9 == 0)
            return LocationRow(
                deviceID: UInt64(index % 13 + 1), logOffset: UInt64(index / 10 * 97), fixIndex: index % 10,
                receivedAtMicros: now - Int64(index), fix: fix)
        }
        try connection.transaction { connection in
            try ProjectionStore(schema: "gen_binary").copyLocations(rows, nowMicros: now, connection)
        }
        // The text path as it was: the partitions first, then a text COPY of `values`.
        try connection.transaction { connection in
            var months = Set<Int>()
            for row in rows where months.insert(Month(micros: row.fix.recordedAtMicros).index).inserted {
                try Schema.ensurePartition(
                    "gen_text", monthOf: row.fix.recordedAtMicros, nowMicros: now, connection)
            }
            try connection.copyIn(
                table: "gen_text.device_locations", columns: ProjectionStore.historyColumns,
                rows: rows.map { ProjectionStore.values($0) + [.bytes(ProjectionStore.shown($0))] })
        }
        let columns =
            (ProjectionSchema.fixColumns.map { $0.type == .float8 ? "\($0.name)::text" : $0.name }
            + [ProjectionSchema.shownColumn])
            .joined(separator: ", ")
        let difference = """
            SELECT count(*) FROM (
                (SELECT tableoid::regclass::text, \(columns) FROM gen_binary.device_locations
                 EXCEPT ALL SELECT replace(tableoid::regclass::text, 'gen_text', 'gen_binary'), \(columns) FROM gen_text.device_locations)
                UNION ALL
                (SELECT replace(tableoid::regclass::text, 'gen_text', 'gen_binary'), \(columns) FROM gen_text.device_locations
                 EXCEPT ALL SELECT tableoid::regclass::text, \(columns) FROM gen_binary.device_locations)
            ) x
            """
        #expect(try count(connection, "SELECT count(*) FROM gen_binary.device_locations") == 5_000)
        #expect(try count(connection, difference) == 0)
        // The same month partitions were made, so each row sits in the partition it sat in.
        #expect(
            try count(
                connection,
                "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'gen_binary'"
            )
                == count(
                    connection,
                    "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'gen_text'"
                ))
    }

    /// A projected log's envelopes through the binary path equal the text COPY of the same rows.
    @Test func batchRowsEqualTheTextCopys() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 3, batches: 40, fixesPerBatch: 4)
        defer { writer.close() }
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        defer { client.close() }
        let projector = Projector(client: client, reader: LogReader(directory: log.path, writer: writer))
        try projector.prepare()
        try catchUp(projector)
        let connection = try PostgresConnection(client.conninfo)
        defer { connection.close() }
        var batch = ProjectionBatch(firstOffset: 0)
        try LogReader(directory: log.path, writer: writer).read(from: 0) { record in
            try batch.add(record)
            return true
        }
        try Schema.createGeneration("gen_text", connection)
        try connection.copyIn(
            table: "gen_text.device_batches", columns: ProjectionSchema.batchColumnNames,
            rows: batch.batches.map { row -> [PostgresValue?] in
                var values: [PostgresValue?] = [.int64(Int64(row.logOffset)), .int64(Int64(row.deviceID))]
                values.append(.text(row.batchID.description))
                values.append(.timestamp(micros: row.receivedAtMicros))
                values.append(.int64(Int64(row.fixCount)))
                values.append(.int64(Int64(row.rejectedCount)))
                values.append(row.recordedMinMicros.map { .timestamp(micros: $0) })
                values.append(row.recordedMaxMicros.map { .timestamp(micros: $0) })
                values.append(.text(row.clientProtocol.name))
                return values
            })
        let names = ProjectionSchema.batchColumnNames.joined(separator: ", ")
        #expect(try count(connection, "SELECT count(*) FROM findmy.device_batches") == 40)
        #expect(
            try count(
                connection,
                """
                SELECT count(*) FROM ((SELECT \(names) FROM findmy.device_batches EXCEPT ALL SELECT \(names) FROM gen_text.device_batches)
                UNION ALL (SELECT \(names) FROM gen_text.device_batches EXCEPT ALL SELECT \(names) FROM findmy.device_batches)) x
                """) == 0)
    }
}

/// The partition month by arithmetic against the month the former code parsed from the timestamp's text.
@Test func theArithmeticMonthIsTheFormattedOnesMonth() {
    var random = SeededGenerator(seed: 99)
    let edges: [Int64] = [
        0, -1, 1, 951_782_400_000_000, 951_868_799_999_999, 1_767_225_599_999_999, 1_767_225_600_000_000,
        -62_135_596_800_000_000, 253_402_300_799_999_999, -2_208_988_800_000_000,
    ]
    var times = edges
    for index in 0..<200_000 {
        times.append(
            index % 2 == 0
                ? Int64.random(in: -62_135_596_800_000_000...253_402_300_799_999_999, using: &random)
                : 1_767_225_600_000_000
                    + Int64.random(in: -(3 * 365 * 86_400_000_000)...(365 * 86_400_000_000), using: &random))
    }
    for micros in times {
        // The former Month(micros:): year and month parsed from the text form (years 1 and later).
        let text = Array(PostgresTimestamp.text(micros: micros).utf8)
        let dash = text.firstIndex(of: UInt8(ascii: "-"))!
        let year = Int(String(decoding: text[..<dash], as: UTF8.self))!
        let month = Int(String(decoding: text[(dash + 1)..<(dash + 3)], as: UTF8.self))!
        let expected = year * 12 + (month - 1)
        #expect(Month(micros: micros).index == expected, "\(micros)")
        if Month(micros: micros).index != expected { break }
    }
}

/// Each field the projector's encoder writes has the width of the type `ProjectionSchema` declares
/// for that column (binary COPY refuses any other), NULL only where the column is nullable; the
/// packed `shown` comes last, whole (`ShownFix`).
@Test func theHistoryEncoderFollowsTheSchemasColumnTypes() throws {
    let full = Fix(
        latitude: 1, longitude: 2, accuracyMeters: 3, altitudeMeters: 4, speedMetersPerSecond: 5,
        headingDegrees: 6,
        batteryPercent: 7, isCharging: true, source: "gps", recordedAtMicros: 8, clockSuspect: false)
    var empty = full
    empty.altitudeMeters = nil
    empty.speedMetersPerSecond = nil
    empty.headingDegrees = nil
    empty.batteryPercent = nil
    empty.isCharging = nil
    for fix in [full, empty] {
        var out = BinaryCopyRows(writeHeader: false)
        try ProjectionStore.encode(
            LocationRow(deviceID: 1, logOffset: 2, fixIndex: 3, receivedAtMicros: 4, fix: fix), &out)
        let bytes = out.bytes
        var position = 2
        #expect(Int(bytes[0]) << 8 | Int(bytes[1]) == ProjectionSchema.fixColumns.count + 1)
        for column in ProjectionSchema.fixColumns {
            let length = bytes[position..<position + 4].reduce(Int32(0)) { $0 << 8 | Int32($1) }
            position += 4
            let width: Int32? =
                switch column.type {
                case .bigint, .timestamptz, .float8: 8
                case .integer: 4
                case .smallint: 2
                case .boolean: 1
                case .text: nil
                }
            if length == -1 {
                #expect(column.nullable, "\(column.name) written as NULL")
                #expect(fix == empty, "\(column.name) NULL in a full fix")
            } else {
                if let width { #expect(length == width, "\(column.name)") }
                position += Int(length)
            }
        }
        let length = Int(bytes[position..<position + 4].reduce(Int32(0)) { $0 << 8 | Int32($1) })
        #expect(length == ShownFix.byteCount(sourceBytes: 3))
        let shown = bytes[(position + 4)...].withUnsafeBytes { ShownFix.read($0)?.0 }
        #expect(shown?.altitude == fix.altitudeMeters && shown?.isCharging == fix.isCharging)
        #expect(shown?.battery == fix.batteryPercent.map { Int16($0) } && shown?.receivedAtMicros == 4)
        #expect(position + 4 + length == bytes.count)
    }
}

/// The fix columns' DDL from `ProjectionSchema` is the layout of projection version 9, column for
/// column: a change here is a new table layout, which needs a new `projectionVersion`.
/// (4: `accuracy_m` nullable, for fixes whose app sent no accuracy; 5 added the commands tables,
/// 6 dropped the history's second index, 7 added the imports, 8 gave the arrivals one index and 9
/// added the history's packed `shown` after these columns, all leaving the fix columns as they were.)
@Test func theFixColumnsAreProjectionVersion9sLayout() {
    #expect(Schema.projectionVersion == 9)
    let version4 = """
        log_offset bigint NOT NULL, fix_index integer NOT NULL, recorded_at timestamptz NOT NULL,
        received_at timestamptz NOT NULL, latitude double precision NOT NULL, longitude double precision NOT NULL,
        accuracy_m double precision, altitude_m double precision, speed_mps double precision,
        heading_deg double precision, battery_pct smallint, is_charging boolean, source text NOT NULL,
        clock_suspect boolean NOT NULL
        """
    func columns(_ ddl: String) -> [String] {
        ddl.split(separator: ",").map { $0.split(whereSeparator: \.isWhitespace).joined(separator: " ") }
    }
    #expect(columns(Schema.fixColumns) == columns(version4))
    #expect(ProjectionSchema.fixColumns.first?.definition == "device_id bigint NOT NULL")
}

/// What a device sends (Events.FixField) and what the projection stores (ProjectionSchema.FixColumn)
/// are spelled the same: the API's field names are the column names, so neither list may drift.
@Test func everyFixFieldIsAColumnOfTheSameName() {
    let columns = Set(ProjectionSchema.FixColumn.allCases.map(\.rawValue))
    let envelope: Set<String> = ["device_id", "log_offset", "fix_index"]
    #expect(Set(FixField.allCases.map(\.rawValue)) == columns.subtracting(envelope))
}
