import Events
import Postgres
import ProjectionSchema
import Projector
import Testing

/// `device_locations.shown` (`ShownFix`): the fields a history page shows, packed beside the
/// columns that hold them; the page reads it alone, so it must say what the columns say.
@Suite(ProjectorClusterTrait()) struct ShownFixTests {
    /// Every field comes back as packed, each optional one present or NULL, the source's bytes
    /// whatever they are; fewer bytes than the fixed part are not a packed fix.
    @Test func packedFieldsReadBackAsTheyWere() {
        let sources = ["", "gps", "owntracks:mqtt", "Zürich ✓"]
        for (index, source) in sources.enumerated() {
            for nulls in 0..<64 {
                func maybe<T>(_ bit: Int, _ value: T) -> T? { nulls & (1 << bit) == 0 ? value : nil }
                let fields = ShownFix.Fields(
                    latitude: -33.8688197 + Double(index), longitude: 151.2092955,
                    recordedAtMicros: -1_234_567,
                    accuracy: maybe(0, 4.5), altitude: maybe(1, -0.0), speed: maybe(2, 1e-300),
                    heading: maybe(3, 359.9), receivedAtMicros: .max - Int64(nulls),
                    battery: maybe(4, Int16(index * 30)), isCharging: maybe(5, nulls % 2 == 0),
                    clockSuspect: nulls % 3 == 0)
                var bytes: [UInt8] = [9, 9]
                ShownFix.append(fields, source: source.utf8, to: &bytes)
                #expect(bytes.count == 2 + ShownFix.byteCount(sourceBytes: source.utf8.count))
                bytes.withUnsafeBytes { raw in
                    let read = ShownFix.read(UnsafeRawBufferPointer(rebasing: raw[2...]))
                    #expect(read?.0 == fields, "source \(source), nulls \(nulls)")
                    #expect(read.map { String(decoding: $0.source, as: UTF8.self) } == source)
                    #expect(
                        ShownFix.read(UnsafeRawBufferPointer(rebasing: raw[2..<(1 + ShownFix.fixedBytes)]))
                            == nil)
                }
            }
        }
    }

    /// Both ways the projector writes the history (a COPY of the batch, and the insert that skips
    /// fixes already there, which a batch repeating fixes takes) write `shown` as the row's
    /// columns: each field of each row, NULLs and sources included.
    @Test func theHistorysPackedFieldsAreItsColumns() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 3, batches: 30, fixesPerBatch: 7)
        let now = wallClockMicros()
        var odd = [
            Fix(
                latitude: 1.5, longitude: -2.25, accuracyMeters: nil, source: "",
                recordedAtMicros: now - 5_000_000),
            Fix(
                latitude: 47.3769, longitude: 8.5417, accuracyMeters: 12, altitudeMeters: 408.5,
                speedMetersPerSecond: 0, headingDegrees: 0, batteryPercent: 100, isCharging: true,
                source: "Zürich ✓", recordedAtMicros: now - 4_000_000, clockSuspect: true),
            Fix(
                latitude: -90, longitude: 180, accuracyMeters: 0.5, batteryPercent: 0, isCharging: false,
                source: "gpx", recordedAtMicros: now - 3_000_000),
        ]
        try writer.append(.fixBatch(FixBatch(deviceID: 1, batchID: UUID128.random(), fixes: odd)))
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        let projector = Projector(client: client, reader: LogReader(directory: log.path, writer: writer))
        try projector.prepare()
        try catchUp(projector)
        // The same fixes again with one more: the COPY meets the unique key, the insert path runs.
        odd.append(
            Fix(
                latitude: 10, longitude: 20, accuracyMeters: 3, headingDegrees: 90.5, source: "again",
                recordedAtMicros: now - 2_000_000))
        try writer.append(.fixBatch(FixBatch(deviceID: 2, batchID: UUID128.random(), fixes: odd)))
        try catchUp(projector)
        let connection = try PostgresConnection(client.conninfo)
        defer { connection.close() }
        let result = try connection.execute(
            """
            SELECT latitude, longitude, recorded_at, accuracy_m, altitude_m, speed_mps, heading_deg,
                received_at, battery_pct, is_charging, clock_suspect, source, shown, source = 'again'
            FROM findmy.device_locations
            """, format: .binary)
        #expect(result.rowCount == 30 * 7 + 3 + 4)
        var byInsert = 0
        for row in 0..<result.rowCount {
            let columns = ShownFix.Fields(
                latitude: try result.binaryDouble(row, 0) ?? .nan,
                longitude: try result.binaryDouble(row, 1) ?? .nan,
                recordedAtMicros: try result.binaryTimestampMicros(row, 2) ?? 0,
                accuracy: try result.binaryDouble(row, 3), altitude: try result.binaryDouble(row, 4),
                speed: try result.binaryDouble(row, 5), heading: try result.binaryDouble(row, 6),
                receivedAtMicros: try result.binaryTimestampMicros(row, 7) ?? 0,
                battery: try result.binaryInt64(row, 8).map { Int16($0) },
                isCharging: try result.binaryBool(row, 9),
                clockSuspect: try result.binaryBool(row, 10) ?? false)
            let source = try result.withBinaryText(row, 11) { Array($0) } ?? []
            let shown = try #require(result.binaryBytes(row, 12))
            let read = try #require(ShownFix.read(shown), "row \(row): \(shown.count) bytes")
            #expect(read.0 == columns, "row \(row)")
            #expect(Array(read.source.bindMemory(to: UInt8.self)) == source, "row \(row)")
            if try result.binaryBool(row, 13) == true { byInsert += 1 }
        }
        #expect(byInsert == 1)
        writer.close()
    }
}
