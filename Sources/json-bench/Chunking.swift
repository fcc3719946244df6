import Foundation
import Import
import JSON

/// An import's two passes over the same generated Records.json as `records`: the file's SHA-256
/// (ImportFileDigest), then the reader cut into chunks with their derived batch ids
/// (ImportChunker, with the summary). Prints one JSON object: medians of `runs`, with the load
/// average.
func runChunkerBenchmark(block: [UInt8], repeats: Int, fixCount: Int, runs: Int) {
    let totalBytes = Double(repeats * block.count + 20)
    var digestSeconds: [Double] = []
    var chunkerSeconds: [Double] = []
    var chunkerCPUSeconds: [Double] = []
    var digest: [UInt8] = []
    for _ in 0..<runs {
        digestSeconds.append(
            seconds {
                digest = try! ImportFileDigest.sha256(RecordsStream(block: block, repeats: repeats)).digest
            }
            .wall)
        let chunking = seconds {
            var chunker = ImportChunker(
                reader: GoogleRecordsReader(RecordsStream(block: block, repeats: repeats)),
                fileSHA256: digest,
                format: .googleRecords)
            var chunks = 0
            while let chunk = try! chunker.next() { chunks += chunk.fixes.count > 0 ? 1 : 0 }
            precondition(
                chunker.summary.fixes == fixCount, "the chunker lost fixes: \(chunker.summary.fixes)")
            precondition(chunks == (fixCount + 999) / 1000)
        }
        chunkerSeconds.append(chunking.wall)
        chunkerCPUSeconds.append(chunking.cpu)
    }
    let median = { (values: [Double]) in values.sorted()[values.count / 2] }
    var writer = JSONWriter()
    writer.beginObject()
    writer.key("benchmark")
    writer.string("import-chunker")
    writer.key("digest_mb_per_s")
    writer.double((totalBytes / median(digestSeconds) / 1e6).rounded())
    writer.key("chunker_fixes_per_s")
    writer.int64(Int64(Double(fixCount) / median(chunkerSeconds)))
    writer.key("chunker_fixes_per_cpu_s")
    writer.int64(Int64(Double(fixCount) / median(chunkerCPUSeconds)))
    writer.key("both_passes_seconds")
    writer.double(((median(digestSeconds) + median(chunkerSeconds)) * 100).rounded() / 100)
    writer.key("load_average")
    writer.string(loadAverage())
    writer.endObject()
    print(String(decoding: writer.bytes, as: UTF8.self))
}

func loadAverage() -> String {
    (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").prefix(3)
        .joined(separator: " ") ?? ""
}
