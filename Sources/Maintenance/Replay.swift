import CLI
import Events
import Geofences
import Postgres
import Projector
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy replay` once parsed: both projections rebuilt from offset 0 of the event log, safe while
/// the server runs.
package enum Replay {
    /// Rebuilds the main projection (a new generation swapped in) and then the geofence one, with
    /// progress lines.
    package static func run(dataDirectory data: String, url: String?) throws -> Int32 {
        let database = try Database.open(dataDirectory: data, url: url)
        defer { database.close() }
        let terminal = isatty(1) != 0
        var lastLine = monotonicMicros()
        let result = try Rebuild.run(client: database.client, reader: LogReader(directory: data + "/log")) {
            progress in
            let now = monotonicMicros()
            guard terminal || now - lastLine >= 2_000_000 else { return }
            lastLine = now
            let line = describe(progress)
            if terminal {
                print("\r" + line + "   ", terminator: "")
                fflush(nil)
            } else {
                printLine(line)
            }
        }
        if terminal { print("") }
        printLine(
            "rebuilt: \(result.recordsFolded) records, \(result.fixesFolded) fixes up to offset \(result.checkpoint) "
                + "in \(String(format1: result.elapsedSeconds)) s; the new tables are live")
        let fences = try replayGeofences(database.client, reader: LogReader(directory: data + "/log"))
        printLine(
            "geofences: rebuilt, \(fences.recordsFolded) records, \(fences.fixesFolded) fixes up to offset \(fences.checkpoint)"
        )
        return 0
    }

    /// The geofence projection dropped and folded again from offset 0 up to the log's durable end
    /// as it is now (records appended meanwhile are the running server's projector's to fold).
    static func replayGeofences(_ client: PostgresClient, reader: LogReader) throws -> ProjectorStatus {
        guard let logID = try reader.logID() else {
            throw ProjectorError.logWithoutID(directory: reader.directory)
        }
        let projection = GeofenceProjection()
        try client.withConnection { try projection.dropAndRecreate(logID: logID, $0) }
        let projector = Projector(client: client, reader: reader, projection: projection)
        try projector.prepare()
        let target = reader.durableEnd()
        var lastLine = monotonicMicros()
        while projector.status.checkpoint < target, try projector.step(logEnd: target) > 0 {
            let now = monotonicMicros()
            guard now - lastLine >= 2_000_000 else { continue }
            lastLine = now
            printLine("geofences: offset \(projector.status.checkpoint)/\(target)")
        }
        return projector.status
    }

    static func describe(_ progress: RebuildProgress) -> String {
        let percent = progress.target > 0 ? Double(progress.checkpoint) * 100 / Double(progress.target) : 100
        var line =
            "replay: offset \(progress.checkpoint)/\(progress.target) (\(String(format1: percent))%), "
            + "\(progress.recordsFolded) records, \(Int64(saturating: progress.fixesPerSecond) ?? 0) fixes/s"
        if let eta = progress.etaSeconds.flatMap({ Int64(saturating: $0.rounded()) }) {
            line += ", ETA \(eta) s"
        }
        return line
    }
}
