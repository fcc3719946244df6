import CLI
import Events
import JSON
import Synchronization
import Threads
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench codec`: fix batch payload version 1 against version 2 in one process, rounds
/// alternating the versions, so that the machine's load weighs on both alike: decode (what a
/// projector and `findmy-bench log`'s replay do per record), the registry's fold (rejections
/// only, what a start-up replay does per record) and encode (ingest), with payload bytes per fix.
enum CodecBench {
    static let command = Command(
        name: "codec",
        summary: "fix batch payload versions 1 and 2: decode, fold and encode rates, alternating"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench codec [--rounds 7] [--fixes 200000] [--log-dir DIR]

        Generates single-fix batches of 1,000 devices' own tracks and 100-fix batches of the same,
        --fixes fixes of each shape, encodes them in both payload versions, then for --rounds rounds
        (the order of the versions alternating) times decoding every batch, reading only its
        rejections (the registry's fold) and encoding every batch. Prints per shape and version the
        median fixes/s and the ratio version 2 / version 1, and payload bytes per fix (before and
        after the record's own LZ4; in a group record, single-fix payloads compress with their
        neighbours: see docs/benchmarks.md for bytes on disk).

        With --log-dir DIR (emptied first), also writes the same batches as two logs, one per
        payload version (64 appends in flight, so grouped as 64 connections group them), and
        replays them in alternating rounds: every record read and every fix decoded (what
        `findmy-bench log`'s replay and a projector do), and every record folded as the registry
        folds it (rejections only, what a start-up replay does); plus each log's bytes per fix.
        """

    struct Rates {
        var decode: [Double] = []
        var fold: [Double] = []
        var encode: [Double] = []
    }

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["rounds", "fixes", "log-dir"], flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let rounds = try options.integer("rounds", default: 7)
        let fixesPerShape = try options.integer("fixes", default: 200_000)
        var writer = JSONWriter()
        writer.beginObject()
        for fixesPerBatch in [1, 100] {
            let batches = generate(fixes: fixesPerShape, perBatch: fixesPerBatch)
            let encoded = [UInt16(1), 2].map { version in
                batches.map {
                    EventCodec.encode(.fixBatch($0), receivedAtMicros: 1, fixBatchVersion: version)
                }
            }
            let rates = try measureRates(batches, encoded, rounds: rounds, fixes: fixesPerShape)
            writer.key("fixes_per_batch_\(fixesPerBatch)")
            writer.beginObject()
            for version in 0..<2 {
                writer.key("version_\(version + 1)")
                writer.beginObject()
                writer.key("decode_fixes_per_s")
                writer.double((median(rates[version].decode) ?? 0).rounded())
                writer.key("fold_fixes_per_s")
                writer.double((median(rates[version].fold) ?? 0).rounded())
                writer.key("encode_fixes_per_s")
                writer.double((median(rates[version].encode) ?? 0).rounded())
                let raw = encoded[version].reduce(0) { $0 + Int($1.header.uncompressedBytes) }
                let stored = encoded[version].reduce(0) { $0 + $1.payload.count }
                writer.key("payload_raw_bytes_per_fix")
                writer.double((Double(raw) / Double(fixesPerShape) * 100).rounded() / 100)
                writer.key("payload_stored_bytes_per_fix")
                writer.double((Double(stored) / Double(fixesPerShape) * 100).rounded() / 100)
                writer.endObject()
            }
            for (name, pick) in [
                ("decode", \Rates.decode), ("fold", \Rates.fold), ("encode", \Rates.encode),
            ] as [(String, KeyPath<Rates, [Double]>)] {
                // Ratio of the medians, and the median of the per-round ratios (each round's two
                // timings ran back to back).
                let ratios = zip(rates[1][keyPath: pick], rates[0][keyPath: pick]).map { $0 / $1 }
                writer.key("\(name)_v2_over_v1_median_of_rounds")
                writer.double(((median(ratios) ?? 0) * 1000).rounded() / 1000)
            }
            if let logDirectory = options.value("log-dir") {
                try replay(
                    batches, fixes: fixesPerShape, rounds: rounds, directory: logDirectory, into: &writer)
            }
            writer.endObject()
        }
        writer.endObject()
        print(String(decoding: writer.bytes, as: UTF8.self))
        return 0
    }

    /// Decode, fold and encode rates of both payload versions (index 0: version 1), `rounds` of
    /// each, the versions alternating which goes first.
    private static func measureRates(
        _ batches: [FixBatch], _ encoded: [[EncodedEvent]], rounds: Int, fixes: Int
    ) throws -> [Rates] {
        var rates = [Rates(), Rates()]
        for round in 0..<rounds {
            for version in round % 2 == 0 ? [0, 1] : [1, 0] {
                rates[version].decode.append(
                    try rate(fixes) {
                        for event in encoded[version] {
                            _ = try EventCodec.decode(header: event.header, stored: event.payload)
                        }
                    })
                rates[version].fold.append(
                    try rate(fixes) {
                        for event in encoded[version] {
                            _ = try EventCodec.fixBatchRejections(
                                header: event.header, stored: event.payload)
                        }
                    })
                rates[version].encode.append(
                    try rate(fixes) {
                        for batch in batches {
                            _ = EventCodec.encode(
                                .fixBatch(batch), receivedAtMicros: 1,
                                fixBatchVersion: UInt16(version + 1))
                        }
                    })
            }
        }
        return rates
    }

    /// Both versions' logs of `batches`, then rounds of reading them back, versions alternating.
    static func replay(
        _ batches: [FixBatch], fixes: Int, rounds: Int, directory: String, into writer: inout JSONWriter
    ) throws {
        LogBench.removeTree(directory)
        try PosixFileIO().makeDirectory(directory)
        var bytesPerFix: [Double] = []
        for version: UInt16 in [1, 2] {
            let log = directory + "/v\(version)"
            LogBench.removeTree(log)
            let logWriter = try LogWriter(directory: log)
            let inFlight = Atomic<Int>(0)
            for batch in batches {
                while inFlight.load(ordering: .acquiring) >= 64 { sched_yield() }
                inFlight.add(1, ordering: .relaxed)
                logWriter.append(
                    EventCodec.encode(
                        .fixBatch(batch), receivedAtMicros: wallClockMicros(), fixBatchVersion: version)
                ) { result in
                    precondition((try? result.get()) != nil, "an append failed")
                    inFlight.subtract(1, ordering: .releasing)
                }
            }
            while inFlight.load(ordering: .acquiring) > 0 { sched_yield() }
            logWriter.close()
            bytesPerFix.append(Double(segmentBytes(log)) / Double(fixes))
        }
        var decode = [Rates(), Rates()]
        for round in 0..<rounds {
            for version in round % 2 == 0 ? [0, 1] : [1, 0] {
                let reader = LogReader(directory: directory + "/v\(version + 1)")
                var decoded = 0
                decode[version].decode.append(
                    try rate(fixes) {
                        try reader.read(from: 0) { record in
                            if case .fixBatch(let batch) = try record.event() { decoded += batch.fixes.count }
                            return true
                        }
                    })
                if decoded != fixes { printLine("replayed \(decoded) fixes of \(fixes)") }
                decode[version].fold.append(
                    try rate(fixes) {
                        try reader.read(from: 0) { record in
                            _ = try EventCodec.fixBatchRejections(
                                header: record.header, stored: record.storedPayload)
                            return true
                        }
                    })
            }
        }
        for version in 0..<2 {
            writer.key("log_version_\(version + 1)")
            writer.beginObject()
            writer.key("bytes_per_fix")
            writer.double((bytesPerFix[version] * 100).rounded() / 100)
            writer.key("replay_decode_fixes_per_s")
            writer.double((median(decode[version].decode) ?? 0).rounded())
            writer.key("replay_fold_fixes_per_s")
            writer.double((median(decode[version].fold) ?? 0).rounded())
            writer.endObject()
        }
        writer.key("replay_decode_v2_over_v1_median_of_rounds")
        writer.double(
            ((median(zip(decode[1].decode, decode[0].decode).map { $0 / $1 }) ?? 0) * 1000).rounded() / 1000)
        writer.key("replay_fold_v2_over_v1_median_of_rounds")
        writer.double(
            ((median(zip(decode[1].fold, decode[0].fold).map { $0 / $1 }) ?? 0) * 1000).rounded() / 1000)
        LogBench.removeTree(directory + "/v1")
        LogBench.removeTree(directory + "/v2")
        LogBench.removeTree(directory)
    }

    /// Bytes of the `.seg` files in `directory`.
    static func segmentBytes(_ directory: String) -> Int {
        guard let handle = opendir(directory) else { return 0 }
        defer { closedir(handle) }
        var total = 0
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard name.hasSuffix(".seg") else { continue }
            var info = stat()
            if stat(directory + "/" + name, &info) == 0 { total += Int(info.st_size) }
        }
        return total
    }

    static func generate(fixes: Int, perBatch: Int) -> [FixBatch] {
        var tracks = (0..<1_000).map {
            TrackGenerator(seed: UInt64($0) &* 7_919, startMicros: 1_764_684_000_000_000)
        }
        var random = SeededGenerator(seed: 15)
        return (0..<(fixes / perBatch)).map { index in
            let device = index % tracks.count
            return FixBatch(
                deviceID: UInt64(device + 1), batchID: UUID128.random(using: &random),
                fixes: tracks[device].next(perBatch))
        }
    }

    static func rate(_ fixes: Int, _ body: () throws -> Void) throws -> Double {
        let start = monotonicMicros()
        try body()
        return Double(fixes) / (Double(max(1, monotonicMicros() - start)) / 1_000_000)
    }

}
