import CLI
import Events
import JSON
import Threads
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench log --dir DIR [--seconds S]`: the log's figures on this machine, each with the
/// physical baseline it should be compared to, measured in the same run.
enum LogBench {
    static let command = Command(
        name: "log", summary: "the event log alone: fdatasync, appends, replay, bytes per fix"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench log --dir DIR [--seconds 2]

        Measures the log on this machine in DIR (a scratch directory): raw fdatasync rate, group-commit
        appends (1, 10, 100 fixes per batch from 1, 16, 64 threads, S seconds each), replay against LZ4
        decompression alone, and bytes per fix on disk against the JSON a phone sends. Prints one JSON
        object. Build with -c release to measure.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["dir", "seconds"], flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let root = try options.required("dir")
        let seconds = Double(try options.integer("seconds", default: 2))
        try PosixFileIO().makeDirectory(root)
        var writer = JSONWriter()
        writer.beginObject()

        let fsyncRate = try rawFdatasyncRate(root + "/bench-fsync", seconds: seconds)
        writer.key("fdatasync_per_s")
        writer.double(fsyncRate.rounded())

        writer.key("append")
        writer.beginArray()
        var replayDirectory = ""
        for fixes in [1, 10, 100] {
            for appenders in [1, 16, 64] {
                let directory = root + "/bench-append-\(fixes)-\(appenders)"
                let result = try appendRate(
                    directory, fixesPerBatch: fixes, appenders: appenders, seconds: seconds)
                writer.beginObject()
                writer.key("fixes_per_batch")
                writer.int64(Int64(fixes))
                writer.key("appenders")
                writer.int64(Int64(appenders))
                writer.key("batches_per_s")
                writer.double(result.batchesPerSecond.rounded())
                writer.key("fixes_per_s")
                writer.double(result.fixesPerSecond.rounded())
                writer.key("batches_per_fdatasync")
                writer.double((result.batchesPerSync * 10).rounded() / 10)
                writer.endObject()
                if fixes == 100 && appenders == 16 {
                    replayDirectory = directory
                } else {
                    removeTree(directory)
                }
            }
        }
        writer.endArray()

        let replay = try replayRate(replayDirectory)
        writer.key("replay_fixes_per_s")
        writer.double(replay.fixesPerSecond.rounded())
        writer.key("replay_fixes")
        writer.int64(Int64(replay.fixes))
        writer.key("lz4_decompress_mb_per_s")
        writer.double(replay.lz4MegabytesPerSecond.rounded())
        writer.key("replay_over_lz4_time_ratio")
        writer.double((replay.decodeOverLZ4 * 100).rounded() / 100)
        removeTree(replayDirectory)

        writer.key("bytes_per_fix")
        writer.beginObject()
        for fixes in [1, 10, 100] {
            let bytes = try bytesPerFix(root + "/bench-size", fixesPerBatch: fixes)
            writer.key("batch_\(fixes)")
            writer.beginObject()
            writer.key("log")
            writer.double((bytes.log * 10).rounded() / 10)
            writer.key("json_body_lz4")
            writer.double((bytes.jsonBodyCompressed * 10).rounded() / 10)
            writer.key("json_body_raw")
            writer.double((bytes.jsonBody * 10).rounded() / 10)
            writer.endObject()
        }
        writer.endObject()

        writer.key("peak_rss_bytes")
        writer.int64(peakResidentBytes())
        writer.endObject()
        removeTree(root + "/bench-fsync")
        printLine(String(decoding: writer.bytes, as: UTF8.self))
        return 0
    }

    /// 4 KiB appends, each followed by fdatasync: what the disk gives a single synchronous writer.
    static func rawFdatasyncRate(_ path: String, seconds: Double) throws -> Double {
        let io = PosixFileIO()
        let fd = try io.open(path, flags: O_CREAT | O_TRUNC | O_WRONLY, mode: 0o600)
        defer {
            io.close(fd)
            try? io.unlink(path)
        }
        let block = [UInt8](repeating: 0x5A, count: 4096)
        var position = 0
        var count = 0
        let start = monotonicMicros()
        let end = start + Int64(seconds * 1_000_000)
        while monotonicMicros() < end {
            try io.writeAll(fd, block, at: position, path: path)
            try io.fdatasync(fd, path: path)
            position += block.count
            count += 1
        }
        return Double(count) / (Double(monotonicMicros() - start) / 1_000_000)
    }

    struct AppendResult {
        var batchesPerSecond: Double
        var fixesPerSecond: Double
        var batchesPerSync: Double
    }

    static func appendRate(_ directory: String, fixesPerBatch: Int, appenders: Int, seconds: Double) throws
        -> AppendResult
    {
        removeTree(directory)
        let log = try LogWriter(directory: directory)
        // Tracks are generated before the clock starts: the benchmark measures the log, not the generator.
        let pools: [[Event]] = (0..<appenders).map { appender in
            var track = TrackGenerator(seed: UInt64(appender), startMicros: 1_750_000_000_000_000)
            return (0..<32).map { _ in
                .fixBatch(
                    FixBatch(
                        deviceID: UInt64(appender + 1), batchID: UUID128.random(),
                        fixes: track.next(fixesPerBatch)))
            }
        }
        let before = log.statistics
        let start = monotonicMicros()
        let end = start + Int64(seconds * 1_000_000)
        let threads = (0..<appenders).map { appender in
            spawnThread {
                var index = 0
                while monotonicMicros() < end {
                    _ = try? log.append(pools[appender][index % 32])
                    index += 1
                }
            }
        }
        for thread in threads { pthread_join(thread, nil) }
        let elapsed = Double(monotonicMicros() - start) / 1_000_000
        let after = log.statistics
        log.close()
        let batches = Double(after.recordsAppended - before.recordsAppended)
        let syncs = Double(max(1, after.groupCommits - before.groupCommits))
        return AppendResult(
            batchesPerSecond: batches / elapsed, fixesPerSecond: batches * Double(fixesPerBatch) / elapsed,
            batchesPerSync: batches / syncs)
    }

    struct ReplayResult {
        var fixes: Int
        var fixesPerSecond: Double
        var lz4MegabytesPerSecond: Double
        var decodeOverLZ4: Double
    }

    /// Reads and decodes every fix of a log; then decompresses the same payloads alone, the floor
    /// that replay cannot beat.
    static func replayRate(_ directory: String) throws -> ReplayResult {
        let reader = LogReader(directory: directory)
        var fixes = 0
        var checksum = 0.0
        var payloads: [(RecordHeader, [UInt8])] = []
        let start = monotonicMicros()
        try reader.read(from: 0) { record in
            if case .fixBatch(let batch) = try record.event() {
                fixes += batch.fixes.count
                checksum += batch.fixes.last?.latitude ?? 0
            }
            return true
        }
        let replaySeconds = Double(monotonicMicros() - start) / 1_000_000
        try reader.read(from: 0) { record in
            payloads.append((record.header, record.storedPayload))
            return true
        }
        var decompressedBytes = 0
        let lz4Start = monotonicMicros()
        for (header, payload) in payloads where header.codec == Codec.lz4.rawValue {
            decompressedBytes += try LZ4.decompress(payload, uncompressedBytes: Int(header.uncompressedBytes))
                .count
        }
        let lz4Seconds = Double(monotonicMicros() - lz4Start) / 1_000_000
        precondition(checksum.isFinite)
        return ReplayResult(
            fixes: fixes, fixesPerSecond: Double(fixes) / replaySeconds,
            lz4MegabytesPerSecond: Double(decompressedBytes) / 1_000_000 / lz4Seconds,
            decodeOverLZ4: replaySeconds / max(lz4Seconds, 1e-9))
    }

    struct SizeResult {
        var log: Double
        var jsonBody: Double
        var jsonBodyCompressed: Double
    }

    /// Bytes on disk per fix for 20 devices' realistic tracks, and what keeping the request body
    /// (the JSON a phone sends, LZ4-compressed) would cost instead.
    static func bytesPerFix(_ directory: String, fixesPerBatch: Int) throws -> SizeResult {
        removeTree(directory)
        var options = LogOptions()
        options.segmentBytesMax = 1 << 30
        let log = try LogWriter(directory: directory, options: options)
        let totalFixes = 20_000
        var bodyBytes = 0
        var bodyCompressed = 0
        var devices = (0..<20).map {
            TrackGenerator(seed: UInt64($0) + 100, startMicros: 1_750_000_000_000_000)
        }
        var written = 0
        while written < totalFixes {
            let device = (written / fixesPerBatch) % devices.count
            let fixes = devices[device].next(fixesPerBatch)
            let batchID = UUID128.random()
            try log.append(.fixBatch(FixBatch(deviceID: UInt64(device + 1), batchID: batchID, fixes: fixes)))
            let body = requestBody(batchID, fixes)
            bodyBytes += body.count
            bodyCompressed += LZ4.compress(body)?.count ?? body.count
            written += fixesPerBatch
        }
        log.close()
        var diskBytes = 0
        for file in try PosixFileIO().list(directory) where LogFormat.baseOffset(fileName: file) != nil {
            var info = stat()
            if stat(directory + "/" + file, &info) == 0 { diskBytes += Int(info.st_size) }
        }
        removeTree(directory)
        let count = Double(written)
        return SizeResult(
            log: Double(diskBytes) / count, jsonBody: Double(bodyBytes) / count,
            jsonBodyCompressed: Double(bodyCompressed) / count)
    }

    /// The report body a phone would send for these fixes (docs: the report API).
    static func requestBody(_ batchID: UUID128, _ fixes: [Fix]) -> [UInt8] {
        var writer = JSONWriter(capacity: 200 * fixes.count)
        writer.beginObject()
        writer.key("batch_id")
        writer.string(batchID.description)
        writer.key("fixes")
        writer.beginArray()
        for fix in fixes { EventJSON.write(fix, to: &writer) }
        writer.endArray()
        writer.endObject()
        return writer.bytes
    }

    static func peakResidentBytes() -> Int64 {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Int64(usage.ru_maxrss) * 1024
    }

    static func removeTree(_ path: String) {
        guard !path.isEmpty else { return }
        let io = PosixFileIO()
        for name in (try? io.list(path)) ?? [] { try? io.unlink(path + "/" + name) }
        rmdir(path)
    }
}
