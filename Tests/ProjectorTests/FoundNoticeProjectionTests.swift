import Events
import Geofences
import Postgres
import Projector
import Testing

/// "Notify when found" in the geofence projection against a real PostgreSQL: the first batch with a
/// fix after the arming fires one notice with its newest fix, a batch before it or an empty one does
/// not, disarming and removal stop it; and a replay, in one transaction or one per record, or
/// restarted midway with a cold cache, finds the same notices.
@Suite(ProjectorClusterTrait()) struct FoundNoticeProjectionTests {
    static let t0: Int64 = 1_780_000_000_000_000
    static let minute: Int64 = 60_000_000

    static func batch(device: UInt64 = 1, minutes: [Int64], rejected: Int = 0) -> Event {
        .fixBatch(
            FixBatch(
                deviceID: device, batchID: .random(),
                fixes: minutes.map { m in
                    Fix(
                        latitude: 52.52 + Double(m) / 1000, longitude: 13.405,
                        accuracyMeters: m == 7 ? nil : 20,
                        source: "significant", recordedAtMicros: t0 + m * minute)
                },
                rejections: (0..<rejected).map { Rejection(index: UInt32($0), reason: "out_of_range") }))
    }

    static func arm(_ armed: Bool, device: UInt64 = 1) -> Event {
        .foundNoticeSet(FoundNoticeSet(deviceID: device, userID: 1, armed: armed))
    }

    /// The story, in log order, with what it is about.
    static let story: [Event] = [
        batch(minutes: [0]),  // before the arming: fires nothing
        arm(true),
        batch(minutes: [], rejected: 2),  // every fix refused: not a report
        batch(minutes: [12, 15, 9]),  // fires: newest fix minute 15
        batch(minutes: [20]),  // disarmed by the one before
        arm(true), arm(false), batch(minutes: [30]),  // disarmed by its owner
        arm(true, device: 2), .deviceRemoved(DeviceRemoved(deviceID: 2)), batch(device: 2, minutes: [40]),
        arm(true), batch(minutes: [7]),  // fires: a fix without accuracy is still a report
    ]

    func notices(_ client: PostgresClient) throws -> [String] {
        try client.withConnection { connection in
            let result = try connection.execute(
                """
                SELECT device_id || ' ' || user_id || ' armed@' || armed_offset || ' fired@' || log_offset || ' minute '
                    || ((extract(epoch FROM recorded_at) * 1000000)::bigint - $1) / 60000000 || ' ' || round(latitude::numeric, 3)
                    || ' ' || coalesce(accuracy_m::text, 'unknown')
                FROM findmy_geofences.found_notices ORDER BY id
                """, [.int64(Self.t0)])
            return (0..<result.rowCount).compactMap { result.string($0, 0) }
        }
    }

    func armed(_ client: PostgresClient) throws -> Int64 {
        try client.withConnection {
            try count($0, "SELECT count(*) FROM findmy_geofences.found_notice_armed")
        }
    }

    func projector(_ log: TemporaryLog, _ writer: LogWriter, _ client: PostgresClient, perTransaction: Int)
        throws -> Projector
    {
        var options = Projector.Options()
        options.recordsPerTransactionMax = perTransaction
        let projector = Projector(
            client: client, reader: LogReader(directory: log.path, writer: writer),
            projection: GeofenceProjection(), options: options)
        try projector.prepare()
        return projector
    }

    @Test func theFirstReportAfterTheArmingFiresOnceAndAReplayDecidesTheSame() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 2, batches: 0, fixesPerBatch: 0)
        defer { writer.close() }
        let base = writer.durableEnd
        for (index, event) in Self.story.enumerated() {
            try writer.append(event, receivedAtMicros: Self.t0 + Int64(index) * Self.minute)
        }
        let expected = [
            "1 1 armed@\(base + 1) fired@\(base + 3) minute 15 52.535 20",
            "1 1 armed@\(base + 11) fired@\(base + 12) minute 7 52.527 unknown",
        ]
        for perTransaction in [5_000, 1] {
            let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
            defer { client.close() }
            try catchUpWithHistory(try projector(log, writer, client, perTransaction: perTransaction))
            #expect(try notices(client) == expected, "\(perTransaction) records per transaction")
            #expect(try armed(client) == 0)
        }
    }

    /// A projector that starts midway (a restart: no cache) reads the armed notices from the table.
    @Test func aRestartedProjectorKeepsTheArmedNotice() throws {
        let log = TemporaryLog()
        let writer = try writeLog(log.path, devices: 2, batches: 0, fixesPerBatch: 0)
        defer { writer.close() }
        let client = PostgresClient(conninfo: try TestCluster.freshDatabase())
        defer { client.close() }
        let armedAt = try writer.append(Self.arm(true), receivedAtMicros: Self.t0)
        try catchUpWithHistory(try projector(log, writer, client, perTransaction: 100))
        #expect(try armed(client) == 1)
        let fired = try writer.append(Self.batch(minutes: [3]), receivedAtMicros: Self.t0 + Self.minute)
        try catchUpWithHistory(try projector(log, writer, client, perTransaction: 100))
        #expect(try notices(client) == ["1 1 armed@\(armedAt) fired@\(fired) minute 3 52.523 20"])
        #expect(try armed(client) == 0)
    }
}
