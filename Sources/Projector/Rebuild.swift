import Events
import Postgres
import Threads

/// Progress of a rebuild, as `findmy replay` shows it.
public struct RebuildProgress: Sendable {
    public var recordsFolded: Int
    public var fixesFolded: Int
    public var checkpoint: UInt64
    public var target: UInt64
    public var elapsedSeconds: Double

    public var fixesPerSecond: Double { elapsedSeconds > 0 ? Double(fixesFolded) / elapsedSeconds : 0 }
    /// Seconds left at the rate so far, or nil before there is a rate.
    public var etaSeconds: Double? {
        guard checkpoint > 0, elapsedSeconds > 0 else { return nil }
        let rate = Double(checkpoint) / elapsedSeconds
        return Double(target > checkpoint ? target - checkpoint : 0) / rate
    }
}

/// Builds a fresh generation of the projection from offset 0 while the live one keeps serving,
/// then swaps it in, in one transaction.
public enum Rebuild {
    public static func run(
        client: PostgresClient, reader: LogReader, options: Projector.Options = Projector.Options(),
        progress: (RebuildProgress) -> Void
    ) throws -> RebuildProgress {
        guard let logID = try reader.logID() else {
            throw ProjectorError.logWithoutID(directory: reader.directory)
        }
        try client.withConnection { connection in
            try Schema.migrate(connection)
            try Schema.createGeneration(Schema.building, logID: logID, connection)
        }
        let projector = Projector(client: client, reader: reader, schema: Schema.building, options: options)
        let start = monotonicMicros()
        var current = RebuildProgress(
            recordsFolded: 0, fixesFolded: 0, checkpoint: 0, target: reader.durableEnd(), elapsedSeconds: 0)
        while true {
            // Catch up with what is durable now; appends that arrive meanwhile are folded by the live
            // projector after the swap, from the checkpoint this generation carries.
            let target = reader.durableEnd()
            current.target = target
            if try projector.step(logEnd: target) == 0 && projector.status.checkpoint >= target { break }
            let status = projector.status
            current.recordsFolded = status.recordsFolded
            current.fixesFolded = status.fixesFolded
            current.checkpoint = status.checkpoint
            current.elapsedSeconds = Double(monotonicMicros() - start) / 1_000_000
            progress(current)
        }
        try client.withConnection { try Schema.swapIn($0) }
        current.checkpoint = projector.status.checkpoint
        current.elapsedSeconds = Double(monotonicMicros() - start) / 1_000_000
        return current
    }
}
