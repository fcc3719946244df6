import CLI
import Events
import Export
import JSON
import Threads
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy-bench import --dir DIR`: `findmy import` into a fresh data directory, timed as a user
/// runs it (the process from start to exit: both passes, every chunk durable, the audit record),
/// on a generated Google Takeout `Records.json` and on GPX and CSV files (docs/benchmarks.md,
/// "History import").
enum ImportBench {
    static let command = Command(
        name: "import", summary: "findmy import of a generated Records.json, GPX and CSV: time and peak RSS"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy-bench import --dir DIR [--records-mb 1024] [--other-fixes 1000000] [--runs 3]
                                   [--formats records,gpx,csv]

        Writes DIR/Records.json (about RECORDS-MB MB of Takeout-shaped locations from Workload's track
        generator, pretty-printed as Takeout writes it, ending before now; some with an
        activity list) and DIR/track.gpx and DIR/track.csv (OTHER-FIXES fixes each, by the Export
        module's writers), once (existing files are reused). Then RUNS rounds, the formats alternating
        within each: `findmy user add` and `findmy import --new-device --retention-days 36500` into a
        fresh data directory (no server: the command opens the log itself), timed from start to exit;
        the peak resident size is the import process's (wait4's ru_maxrss: its VmHWM when it exits).
        Prints one JSON object per format: medians of the runs, and the load average. Build with
        -c release to measure.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(
            arguments, valued: ["dir", "records-mb", "other-fixes", "runs", "formats"], flags: [])
        if options.flag("help") {
            print(help)
            return 0
        }
        let directory = try options.required("dir")
        let recordsBytes = Int64(try options.integer("records-mb", default: 1024)) << 20
        let otherFixes = try options.integer("other-fixes", default: 1_000_000)
        let runs = try options.integer("runs", default: 3)
        let formats = (options.value("formats") ?? "records,gpx,csv").split(separator: ",").map(String.init)
        precondition(recordsBytes > 0 && otherFixes > 0 && runs > 0)
        try PosixFileIO().makeDirectory(directory)
        var files: [(format: String, path: String)] = []
        for format in formats {
            switch format {
            case "records":
                files.append(
                    (format, try ImportBenchFiles.records(directory + "/Records.json", bytes: recordsBytes)))
            case "gpx", "csv":
                files.append(
                    (format, try ImportBenchFiles.exported(directory + "/track.\(format)", fixes: otherFixes))
                )
            default:
                throw UsageError("--formats takes records, gpx and csv, got '\(format)'")
            }
        }
        var measured: [String: [Measurement]] = [:]
        for round in 0..<runs {
            for file in files {
                let result = try importOnce(
                    file.path, dataDirectory: directory + "/data-\(round)-\(file.format)")
                measured[file.format, default: []].append(result)
                writeStandardError(
                    "findmy-bench import: round \(round + 1) \(file.format): \(result.seconds) s, "
                        + "\(result.fixes) fixes, peak RSS \(result.peakResidentBytes >> 20) MiB")
            }
        }
        for file in files { printSummary(file.format, file.path, measured[file.format] ?? []) }
        return 0
    }

    struct Measurement {
        var seconds: Double
        var fixes: Int64
        var peakResidentBytes: Int64
    }

    /// One `findmy import` into a new data directory, removed afterwards.
    static func importOnce(_ path: String, dataDirectory: String) throws -> Measurement {
        _ = try addUser(dataDirectory, name: "bench")
        defer { _ = try? runCapturing("/bin/rm", ["rm", "-rf", dataDirectory]) }
        let started = monotonicMicros()
        let child = try spawn(
            try findmyExecutable(),
            [
                "findmy", "import", "--user", "bench", "--new-device", "phone", "--retention-days", "36500",
                "--json", "--data-dir", dataDirectory, path,
            ])
        let output = readToEnd(child.output)
        var status: Int32 = 0
        var usage = rusage()
        wait4(child.pid, &status, 0, &usage)
        let seconds = Double(monotonicMicros() - started) / 1e6
        let text = String(decoding: output, as: UTF8.self)
        guard status == 0, let line = text.split(separator: "\n").last else {
            throw UsageError("findmy import failed (status \(status)): \(text)")
        }
        let result = try JSONParser.parse(Array(line.utf8))
        return Measurement(
            seconds: (seconds * 100).rounded() / 100, fixes: try result["accepted"]?.int64Value ?? 0,
            peakResidentBytes: Int64(usage.ru_maxrss) * 1024)
    }

    static func printSummary(_ format: String, _ path: String, _ runs: [Measurement]) {
        guard let seconds = median(runs.map(\.seconds)), let fixes = runs.first?.fixes else { return }
        var info = stat()
        stat(path, &info)
        var writer = JSONWriter(capacity: 256)
        writer.beginObject()
        writer.key("benchmark")
        writer.string("import-\(format)")
        writer.key("file_mb")
        writer.int64(Int64(info.st_size) >> 20)
        writer.key("fixes")
        writer.int64(fixes)
        writer.key("runs")
        writer.int64(Int64(runs.count))
        writer.key("median_seconds")
        writer.double(seconds)
        writer.key("mb_per_s")
        writer.double((Double(info.st_size) / seconds / 1e6 * 10).rounded() / 10)
        writer.key("fixes_per_s")
        writer.int64(Int64(Double(fixes) / seconds))
        writer.key("peak_rss_mb")
        writer.int64((median(runs.map(\.peakResidentBytes)) ?? 0) >> 20)
        writer.key("load_average")
        writer.string(
            (try? readText("/proc/loadavg"))?.split(separator: " ").prefix(3).joined(separator: " ") ?? "")
        writer.endObject()
        printLine(String(decoding: writer.bytes, as: UTF8.self))
    }

    static func readText(_ path: String) throws -> String {
        guard let file = fopen(path, "r") else { throw UsageError("cannot read \(path)") }
        defer { fclose(file) }
        var buffer = [CChar](repeating: 0, count: 256)
        guard fgets(&buffer, 256, file) != nil else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// The files the import benchmark reads, written once with a buffered stdio stream.
enum ImportBenchFiles {
    /// A little above the track generator's mean time between fixes (300, 60, 60 and 5 s by its
    /// modes, 106 s on average): a track started this many intervals ago ends before now.
    static let fixIntervalMicros: Int64 = 110_000_000

    /// A Takeout-shaped `Records.json` of about `bytes` bytes; its path.
    static func records(_ path: String, bytes: Int64) throws -> String {
        if fileBytes(path) >= bytes * 9 / 10 { return path }
        // About 200 bytes a location as written here (a twentieth with an activity list): the fix
        // count that fills `bytes`.
        let count = Int(bytes / 200)
        var track = TrackGenerator(
            seed: 28, startMicros: wallClockMicros() - Int64(count) * fixIntervalMicros)
        try writeFile(path) { file in
            file.write("{\n  \"locations\": [")
            for index in 0..<count {
                file.write(index == 0 ? "{\n" : ", {\n")
                file.write(location(track.next(), index: index))
                file.write("  }")
            }
            file.write("]\n}\n")
        }
        return path
    }

    /// One location as Takeout pretty-prints it (two spaces a level); every 20th with an activity.
    static func location(_ fix: Fix, index: Int) -> String {
        let time = RFC3339.formatMillis(fix.recordedAtMicros)
        var text = """
                "latitudeE7": \(Int64((fix.latitude * 1e7).rounded())),
                "longitudeE7": \(Int64((fix.longitude * 1e7).rounded())),
                "accuracy": \(Int(fix.accuracyMeters ?? 20)),
                "altitude": \(Int(fix.altitudeMeters ?? 0)),
                "source": "\(index % 3 == 0 ? "GPS" : "WIFI")",
                "deviceTag": 1234567890,
                "timestamp": "\(time)"
            """
        if index % 20 == 0 {
            text += """
                ,
                    "activity": [{
                      "activity": [{
                        "type": "STILL",
                        "confidence": 100
                      }],
                      "timestamp": "\(time)"
                    }]
                """
        }
        return text + "\n"
    }

    /// GPX or CSV (by the path's extension) of `fixes` fixes, by the export's writer; its path.
    static func exported(_ path: String, fixes: Int) throws -> String {
        if fileBytes(path) > 0 { return path }
        let format: ExportFormat = path.hasSuffix(".gpx") ? .gpx : .csv
        let start = wallClockMicros() - Int64(fixes) * fixIntervalMicros
        var track = TrackGenerator(seed: 29, startMicros: start)
        try writeFile(path) { file in
            var exporter = FixExporter(format: format) { bytes in file.write(bytes) }
            for _ in 0..<fixes { try exporter.write(track.next(), receivedAtMicros: start) }
            try exporter.finish()
        }
        return path
    }

    static func fileBytes(_ path: String) -> Int64 {
        var info = stat()
        return stat(path, &info) == 0 ? Int64(info.st_size) : 0
    }

    /// Writes through one stdio stream (its buffer, not a write(2) per piece), to a temporary name
    /// renamed once whole: an interrupted run leaves no half file to be reused.
    static func writeFile(_ path: String, _ body: (_ file: BenchFile) throws -> Void) throws {
        guard let stream = fopen(path + ".part", "w") else { throw UsageError("cannot write \(path)") }
        setvbuf(stream, nil, _IOFBF, 1 << 20)
        try body(BenchFile(stream))
        guard fclose(stream) == 0, rename(path + ".part", path) == 0 else {
            throw UsageError("cannot write \(path): \(String(cString: strerror(errno)))")
        }
    }
}

/// A stdio stream being written, for the writers' escaping sinks.
final class BenchFile {
    private let stream: UnsafeMutablePointer<FILE>
    init(_ stream: UnsafeMutablePointer<FILE>) { self.stream = stream }
    func write(_ text: String) { _ = text.withCString { fputs($0, stream) } }
    func write(_ bytes: UnsafeRawBufferPointer) { _ = fwrite(bytes.baseAddress, 1, bytes.count, stream) }
}
