import Foundation
import Import
import JSON

/// The streaming tokenizer and the Records.json reader over a generated `Records.json` of
/// `megabytes` (elements shaped like Takeout's: E7 coordinates, accuracy, a third of them with
/// activity recognitions, RFC 3339 timestamps), served from one block repeated so that the file is
/// never in memory. Prints MB/s and fixes/s per pass (medians of alternating runs) with the load
/// average. Run: swift build -c release --product json-bench && .build/release/json-bench records 512
func runRecordsBenchmark(megabytes: Int, runs: Int) {
    let block = makeRecordsBlock(elementCount: 20_000)
    let elementsPerBlock = 20_000
    let repeats = max(1, megabytes * 1_000_000 / block.count)
    let totalBytes = Int64(repeats * block.count + 20)
    var tokenizerSeconds: [(wall: Double, cpu: Double)] = []
    var readerSeconds: [(wall: Double, cpu: Double)] = []
    var checksum = 0
    for _ in 0..<runs {
        tokenizerSeconds.append(
            seconds {
                let reader = JSONStreamReader(refill: RecordsStream(block: block, repeats: repeats).refill)
                var tokens = 0
                while try! reader.next() != .end { tokens += 1 }
                checksum &+= tokens
            })
        readerSeconds.append(
            seconds {
                var reader = GoogleRecordsReader(RecordsStream(block: block, repeats: repeats))
                var fixes = 0
                while let item = try! reader.next() {
                    if case .fix = item { fixes += 1 }
                }
                precondition(fixes == repeats * elementsPerBlock, "the reader lost fixes: \(fixes)")
                checksum &+= fixes
            })
    }
    precondition(checksum != 0)
    let tokenizer = tokenizerSeconds.map(\.wall).sorted()[runs / 2]
    let reader = readerSeconds.map(\.wall).sorted()[runs / 2]
    let tokenizerCPU = tokenizerSeconds.map(\.cpu).sorted()[runs / 2]
    let readerCPU = readerSeconds.map(\.cpu).sorted()[runs / 2]
    let fixCount = Double(repeats * elementsPerBlock)
    var writer = JSONWriter()
    writer.beginObject()
    writer.key("benchmark")
    writer.string("records-json-stream")
    writer.key("bytes")
    writer.int64(totalBytes)
    writer.key("fixes")
    writer.int64(Int64(fixCount))
    writer.key("runs")
    writer.int64(Int64(runs))
    writer.key("tokenizer_mb_per_s")
    writer.double((Double(totalBytes) / tokenizer / 1e6).rounded())
    writer.key("records_reader_mb_per_s")
    writer.double((Double(totalBytes) / reader / 1e6).rounded())
    writer.key("records_reader_fixes_per_s")
    writer.int64(Int64(fixCount / reader))
    writer.key("tokenizer_mb_per_cpu_s")
    writer.double((Double(totalBytes) / tokenizerCPU / 1e6).rounded())
    writer.key("records_reader_fixes_per_cpu_s")
    writer.int64(Int64(fixCount / readerCPU))
    // The file is never held: the peak resident size stays that of a small program.
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    writer.key("max_rss_mb")
    writer.int64(Int64(usage.ru_maxrss / 1024))
    writer.key("load_average")
    writer.string(
        (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").prefix(3)
            .joined(separator: " ") ?? "")
    writer.endObject()
    print(String(decoding: writer.bytes, as: UTF8.self))
    runChunkerBenchmark(block: block, repeats: repeats, fixCount: repeats * elementsPerBlock, runs: runs)
}

/// Wall seconds and this thread's CPU seconds (which a loaded machine blurs less).
func seconds(_ body: () -> Void) -> (wall: Double, cpu: Double) {
    func cpuNow() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) * 1e-9
    }
    let start = ContinuousClock.now
    let cpuStart = cpuNow()
    body()
    let cpu = cpuNow() - cpuStart
    let elapsed = ContinuousClock.now - start
    return (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18, cpu)
}

/// `{"locations": [` + the block `repeats` times, comma-separated + `]}`.
final class RecordsStream: ByteSource {
    /// The header, the first block, the block after a comma, the trailer.
    let parts: [[UInt8]]
    let repeats: Int
    var served = 0
    var position = 0

    init(block: [UInt8], repeats: Int) {
        parts = [Array("{\"locations\": [".utf8), block, Array(",\n".utf8) + block, Array("]}\n".utf8)]
        self.repeats = repeats
    }

    /// The part served `index`-th: header, first block, `repeats - 1` later blocks, trailer.
    private func part(_ index: Int) -> [UInt8]? {
        if index <= 1 { return parts[index] }
        if index <= repeats { return parts[2] }
        return index == repeats + 1 ? parts[3] : nil
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws(ImportError) -> Int {
        guard let current = part(served) else { return 0 }
        let count = min(buffer.count, current.count - position)
        current.withUnsafeBytes {
            buffer.baseAddress!.copyMemory(from: $0.baseAddress! + position, byteCount: count)
        }
        position += count
        if position == current.count {
            served += 1
            position = 0
        }
        return count
    }

    func refill(_ buffer: UnsafeMutableRawBufferPointer) throws(JSONStreamError) -> Int {
        do {
            return try read(into: buffer)
        } catch {
            throw JSONStreamError(code: .inputFailed, byteOffset: 0, message: error.message)
        }
    }
}

/// `elementCount` comma-separated Records.json elements, deterministic.
func makeRecordsBlock(elementCount: Int) -> [UInt8] {
    var state: UInt64 = 7
    func random() -> Double {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return Double(state >> 11) / Double(1 << 53)
    }
    var text = ""
    var micros: Int64 = 1_500_000_000_000_000
    let sources = ["WIFI", "GPS", "CELL"]
    for index in 0..<elementCount {
        micros += Int64(30_000_000 + random() * 60_000_000)
        if index > 0 { text += ",\n" }
        text += "{\n    \"latitudeE7\": \(525_000_000 + Int(random() * 1_000_000)),\n"
        text += "    \"longitudeE7\": \(133_000_000 + Int(random() * 1_000_000)),\n"
        text += "    \"accuracy\": \(Int(3 + random() * 40)),\n"
        if random() < 0.6 {
            text += "    \"altitude\": \(Int(30 + random() * 20)),\n    \"verticalAccuracy\": 3,\n"
        }
        if random() < 0.3 {
            text += "    \"velocity\": \(Int(random() * 30)),\n    \"heading\": \(Int(random() * 360)),\n"
        }
        if random() < 0.35 {
            text +=
                "    \"activity\": [{\n      \"activity\": [{\n        \"type\": \"STILL\",\n        \"confidence\": 100\n"
            text +=
                "      }],\n      \"timestamp\": \"\(RFC3339.formatMillis(micros + 2_000_000))\"\n    }],\n"
        }
        text += "    \"source\": \"\(sources[index % 3])\",\n    \"deviceTag\": -1234567890,\n"
        text +=
            "    \"platformType\": \"ANDROID\",\n    \"timestamp\": \"\(RFC3339.formatMillis(micros))\"\n  }"
    }
    return Array(text.utf8)
}
