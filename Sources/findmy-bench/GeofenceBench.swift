import CLI
import Events
import Geofences
import JSON
import Postgres
import Projector
import Threads
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench geofences --dir DIR [--fixes N] [--devices N] [--fences N] [--runs N]`: the
/// geofence projector folding a log against the plain replay of the same log, in one run.
enum GeofenceBench {
    static let command = Command(
        name: "geofences",
        summary: "the geofence projector against plain replay of the same log (fixes/s and their ratio)"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench geofences --dir DIR [--fixes 1000000] [--devices 100] [--fences 100] [--runs 3]

        Writes a log in DIR/log: each device (one per user) gets --fences geofences first, drawn on its
        own track (so fixes cross their edges: transitions happen), then N realistic fixes in 100-fix
        batches. Starts a private PostgreSQL in DIR and, --runs times alternating, folds the whole log
        from offset 0 with the main projector (plain replay, a fresh schema) and then with the geofence
        projector (a fresh schema, its recomputes reading that replay's history). Prints one JSON object: the median fixes/s of each and their ratio
        (geofences over replay; the target is at least 0.5), and the transitions found. DIR is
        emptied first. Build with -c release to measure.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments, valued: ["dir", "fixes", "devices", "fences", "runs"], flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let root = try options.required("dir")
        let totalFixes = try options.integer("fixes", default: 1_000_000)
        let devices = try options.integer("devices", default: 100)
        let fences = try options.integer("fences", default: 100)
        let runs = try options.integer("runs", default: 3)
        LogBench.removeTree(root + "/log")
        if let cluster = try? EmbeddedPostgres(dataDirectory: root) { try? cluster.stop() }
        _ = system("rm -rf '\(root)/postgres'")
        try PosixFileIO().makeDirectory(root)
        let fixesPerDevice = (totalFixes + devices - 1) / devices
        try writeLog(
            root + "/log", totalFixes: totalFixes, devices: devices, fences: fences, per: fixesPerDevice)
        allowTraversal(root)
        let cluster = try EmbeddedPostgres(dataDirectory: root)
        try cluster.start()
        defer { try? cluster.stop() }
        let client = PostgresClient(conninfo: cluster.conninfo)
        defer { client.close() }
        let reader = LogReader(directory: root + "/log")

        var replay: [Double] = []
        var geofence: [Double] = []
        var transitions: Int64 = 0
        for round in 0..<runs {
            let history = "bench_replay_\(round)"
            replay.append(try fold(client, reader, projection: MainProjection(schema: history)))
            // After the replay, as in `findmy serve`: a recompute replays the main projection's history.
            let schema = "bench_geofences_\(round)"
            geofence.append(
                try fold(client, reader, projection: GeofenceProjection(schema: schema, history: history)))
            transitions = try client.withConnection {
                try $0.execute("SELECT count(*) FROM \(schema).geofence_transitions").int64(0, 0) ?? 0
            }
            try client.withConnection {
                try $0.executeScript(
                    "DROP SCHEMA bench_replay_\(round) CASCADE; DROP SCHEMA \(schema) CASCADE")
            }
        }
        let fixes = Double(totalFixes)
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("fixes")
        writer.int64(Int64(totalFixes))
        writer.key("devices")
        writer.int64(Int64(devices))
        writer.key("fences_per_device")
        writer.int64(Int64(fences))
        writer.key("runs")
        writer.int64(Int64(runs))
        writer.key("replay_fixes_per_s")
        writer.double((fixes / median(replay)!).rounded())
        writer.key("geofence_fixes_per_s")
        writer.double((fixes / median(geofence)!).rounded())
        writer.key("geofence_over_replay")
        writer.double(((median(replay)! / median(geofence)!) * 100).rounded() / 100)
        writer.key("replay_seconds")
        writer.beginArray()
        for value in replay { writer.double((value * 100).rounded() / 100) }
        writer.endArray()
        writer.key("geofence_seconds")
        writer.beginArray()
        for value in geofence { writer.double((value * 100).rounded() / 100) }
        writer.endArray()
        writer.key("transitions")
        writer.int64(transitions)
        writer.endObject()
        printLine(String(decoding: writer.bytes, as: UTF8.self))
        return 0
    }

    /// Folds the whole log into a fresh `projection` with the projector's loop; seconds.
    static func fold(_ client: PostgresClient, _ reader: LogReader, projection: some LogProjection) throws
        -> Double
    {
        let projector = Projector(client: client, reader: reader, projection: projection)
        try projector.prepare()
        let started = monotonicMicros()
        let end = reader.durableEnd()
        while try projector.step(logEnd: end) > 0 {}
        return Double(monotonicMicros() - started) / 1_000_000
    }

    /// One user per device; its fences first, centred on points of its own track (radius 150 m to
    /// 2 km), then the fixes, round-robin over the devices in 100-fix batches.
    static func writeLog(
        _ directory: String, totalFixes: Int, devices: Int, fences: Int, per fixesPerDevice: Int
    )
        throws
    {
        let log = try LogWriter(directory: directory)
        defer { log.close() }
        let start = wallClockMicros() - 30 * 86_400_000_000
        var random = SeededGenerator(seed: 16)
        var fenceID: UInt64 = 0
        for device in 0..<devices {
            let id = UInt64(device + 1)
            try log.append(
                .userCreated(
                    UserCreated(
                        userID: id, name: "user\(id)", role: .member,
                        tokenHash: Array(repeating: 1, count: 32))))
            try log.append(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: id, userID: id, deviceUUID: UUID128.random(), name: "phone",
                        platform: "ios",
                        model: "bench")))
            // The same track as the fixes below: centres where the device will be.
            var track = TrackGenerator(seed: UInt64(device) + 7, startMicros: start)
            let stride = max(1, fixesPerDevice / max(1, fences))
            var points: [Fix] = []
            for index in 0..<fixesPerDevice {
                let fix = track.next()
                if index % stride == 0 && points.count < fences { points.append(fix) }
            }
            for point in points {
                fenceID += 1
                try log.append(
                    .geofenceDefined(
                        GeofenceDefined(
                            geofenceID: fenceID, ownerUserID: id, name: "fence \(fenceID)",
                            latitude: point.latitude,
                            longitude: point.longitude,
                            radiusMeters: Double.random(in: 150...2_000, using: &random),
                            deviceIDs: [id])))
            }
        }
        var tracks = (0..<devices).map { TrackGenerator(seed: UInt64($0) + 7, startMicros: start) }
        var written = 0
        var records = 0
        while written < totalFixes {
            let device = records % devices
            let count = min(100, totalFixes - written)
            try log.append(
                .fixBatch(
                    FixBatch(
                        deviceID: UInt64(device + 1), batchID: UUID128.random(),
                        fixes: tracks[device].next(count))))
            written += count
            records += 1
        }
    }
}
