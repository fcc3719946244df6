import CLI
import Events
import Threads
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench load --data-dir DIR`: appends generated fix batches straight to DIR/log and prints
/// each acknowledged offset as it returns. The crash tests kill it at random moments and then check
/// that every acknowledged record is in the log, once.
enum LoadDriver {
    static let command = Command(
        name: "load", summary: "append generated fix batches to a log, printing each acknowledgement"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench load --data-dir DIR [--seconds 5] [--appenders 8] [--fixes 10] [--seed 1]

        Appends batches of FIXES generated fixes to DIR/log from APPENDERS threads for SECONDS, and prints
        `ack OFFSET DEVICE BATCH FIXES` after each append returns, i.e. only once the record is durable.
        Segments are small (256 KiB), so that a crash also lands on segment rolls. Used by the crash tests.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments, valued: ["data-dir", "seconds", "appenders", "fixes", "seed"], flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let directory = try options.required("data-dir", environment: "FINDMY_DATA_DIR") + "/log"
        return try load(directory, options)
    }

    /// Appends generated batches from N threads and prints `ack OFFSET DEVICE BATCH FIXES` after
    /// each append returns, i.e. only once the record is durable.
    static func load(_ directory: String, _ options: Options) throws -> Int32 {
        let seconds = try options.integer("seconds", default: 5)
        let appenders = try options.integer("appenders", default: 8)
        let fixesPerBatch = try options.integer("fixes", default: 10)
        let seed = UInt64(try options.integer("seed", default: 1))
        var logOptions = LogOptions()
        logOptions.segmentBytesMax = 256 << 10  // many segments, so that crashes also hit rolls
        let writer = try LogWriter(directory: directory, options: logOptions)
        let deadline = monotonicMicros() + Int64(seconds) * 1_000_000
        let threads = (0..<appenders).map { appender in
            spawnThread {
                var track = TrackGenerator(
                    seed: seed &* 1000 &+ UInt64(appender), startMicros: wallClockMicros())
                while monotonicMicros() < deadline {
                    let batchID = UUID128.random()
                    let device = UInt64(appender + 1)
                    let batch = FixBatch(deviceID: device, batchID: batchID, fixes: track.next(fixesPerBatch))
                    guard let offset = try? writer.append(.fixBatch(batch)) else { return }
                    printLine("ack \(offset) \(device) \(batchID) \(fixesPerBatch)")
                }
            }
        }
        for thread in threads { pthread_join(thread, nil) }
        writer.close()
        return 0
    }
}
