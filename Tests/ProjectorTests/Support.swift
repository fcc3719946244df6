import Events
import Foundation
import Postgres
import Projector
import Testing
import Workload

/// One embedded cluster for the suite (initdb takes seconds); each test gets a database of its own.
struct ProjectorClusterTrait: SuiteTrait, TestScoping {
    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let dataDirectory = NSTemporaryDirectory() + "findmy-projtests-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        let cluster = try EmbeddedPostgres(dataDirectory: dataDirectory)
        try cluster.start()
        do {
            try await TestCluster.$current.withValue(cluster) { try await function() }
        } catch {
            try? cluster.destroy()
            try? FileManager.default.removeItem(atPath: dataDirectory)
            throw error
        }
        // Also removes the OS user made for the cluster when the tests run as root.
        try cluster.destroy()
        try? FileManager.default.removeItem(atPath: dataDirectory)
    }
}

enum TestCluster {
    @TaskLocal static var current: EmbeddedPostgres?

    /// A fresh, empty database on the suite's cluster; returns its conninfo.
    static func freshDatabase() throws -> String {
        guard let cluster = current else { preconditionFailure("outside ProjectorClusterTrait") }
        let name = "t_\(UInt32.random(in: 0...UInt32.max))"
        let admin = try PostgresConnection(cluster.conninfo)
        defer { admin.close() }
        // The name is made here of digits, never input.
        try admin.executeScript("CREATE DATABASE \(name)")
        let conninfo = cluster.conninfo.replacingOccurrences(of: "dbname='findmy'", with: "dbname=\(name)")
        precondition(conninfo != cluster.conninfo, "the cluster's conninfo has no dbname='findmy' to replace")
        return conninfo
    }
}

final class TemporaryLog: @unchecked Sendable {
    let path = NSTemporaryDirectory() + "findmy-projlog-\(UUID().uuidString.prefix(8))"
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A log with users, devices and realistic fix batches (some with clock-suspect fixes).
func writeLog(_ directory: String, devices: Int, batches: Int, fixesPerBatch: Int, seed: UInt64 = 1) throws
    -> LogWriter
{
    var options = LogOptions()
    options.diagnostics = { _ in }
    options.segmentBytesMax = 256 << 10
    let writer = try LogWriter(directory: directory, options: options)
    try writer.append(
        .userCreated(
            UserCreated(userID: 1, name: "ada", role: .admin, tokenHash: Array(repeating: 1, count: 32))))
    var tracks: [TrackGenerator] = []
    for device in 1...devices {
        try writer.append(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: UInt64(device), userID: 1, deviceUUID: UUID128.random(),
                    name: "device \(device)",
                    platform: "ios", model: "test")))
        tracks.append(
            TrackGenerator(seed: seed &+ UInt64(device), startMicros: wallClockMicros() - 86_400_000_000))
    }
    var random = SeededGenerator(seed: seed)
    for index in 0..<batches {
        let device = index % devices
        var fixes = tracks[device].next(fixesPerBatch)
        if Int.random(in: 0..<10, using: &random) == 0, !fixes.isEmpty {
            fixes[0].recordedAtMicros += 86_400_000_000 * 400  // a device clock a year ahead
            fixes[0].clockSuspect = true
        }
        try writer.append(
            .fixBatch(FixBatch(deviceID: UInt64(device + 1), batchID: UUID128.random(), fixes: fixes)))
    }
    return writer
}

/// Folds the main projection (the history a geofence recompute replays) and then the geofence
/// projection of `fences` up to the log's durable end, as `findmy serve` runs them.
func catchUpWithHistory(_ fences: Projector) throws {
    var options = Projector.Options()
    options.log = { _ in }
    let main = Projector(client: fences.client, reader: fences.reader, options: options)
    try main.prepare()
    try catchUp(main)
    try catchUp(fences)
}

/// Folds until the projection has reached the log's durable end.
func catchUp(_ projector: Projector) throws {
    while try projector.step(logEnd: projector.reader.durableEnd()) > 0 {}
}

func count(_ connection: PostgresConnection, _ sql: String) throws -> Int64 {
    try connection.execute(sql).int64(0, 0) ?? -1
}

/// Everything a projection holds that a reader could notice, as sorted text lines.
func projectionTables(_ connection: PostgresConnection) throws -> [String: [String]] {
    let queries = [
        "history": """
        SELECT device_id || ' ' || recorded_at || ' ' || latitude || ' ' || longitude || ' ' || log_offset
            || ' ' || fix_index || ' ' || received_at || ' ' || coalesce(battery_pct::text, '-')
        FROM findmy.device_locations
        """,
        "latest": "SELECT device_id || ' ' || log_offset || ' ' || fix_index FROM findmy.device_latest",
        "batches": "SELECT log_offset || ' ' || device_id || ' ' || fix_count FROM findmy.device_batches",
        "devices": "SELECT id || ' ' || coalesce(last_seen_at::text, '-') FROM findmy.devices",
        "checkpoint": "SELECT next_offset::text FROM findmy.projector_checkpoints",
    ]
    var tables: [String: [String]] = [:]
    for (name, sql) in queries {
        let result = try connection.execute(sql)
        tables[name] = (0..<result.rowCount).compactMap { result.string($0, 0) }.sorted()
    }
    return tables
}

/// The records of `log` from `start` folded into one batch.
func foldedBatch(_ log: String, from start: UInt64 = 0, upTo end: UInt64? = nil) throws
    -> ProjectionBatch
{
    var batch = ProjectionBatch(firstOffset: start)
    try LogReader(directory: log).read(from: start, upTo: end) { record in
        try batch.add(record)
        return true
    }
    return batch
}

/// A fresh database with the projection's tables (checkpoint 0): a connection to it, and a
/// second one for the helper.
func freshProjection() throws -> (PostgresConnection, helper: PostgresConnection) {
    let conninfo = try TestCluster.freshDatabase()
    let connection = try PostgresConnection(conninfo)
    try Schema.migrate(connection)
    try Schema.createGeneration(Schema.live, connection)
    return (connection, try PostgresConnection(conninfo))
}
