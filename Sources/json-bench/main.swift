// Prints one JSON object: our parser's and Foundation's JSONSerialization throughput on the same
// realistic 100-fix report batch, measured in the same run, and their ratio.
// Build and run: swift run -c release json-bench
// `json-bench records [megabytes]`: the streaming tokenizer, the Records.json reader and the import's
// chunker instead; `json-bench export [fixes]`: the export writers.
import Foundation
import JSON

if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "records" {
    let megabytes = CommandLine.arguments.count > 2 ? Int(CommandLine.arguments[2]) ?? 256 : 256
    runRecordsBenchmark(megabytes: megabytes, runs: 3)
    exit(0)
}
if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "export" {
    let fixes = CommandLine.arguments.count > 2 ? Int(CommandLine.arguments[2]) ?? 1_000_000 : 1_000_000
    runExportBenchmark(fixCount: fixes, runs: 5)
    exit(0)
}

let fixesPerBatch = 100
let runCount = 7
let iterationsPerRun = 2_000

let batch = makeBatch(fixCount: fixesPerBatch)

/// Median seconds per parse over `runCount` runs of `iterationsPerRun` parses each.
func medianSecondsPerParse(_ parse: () -> Int) -> Double {
    var checksum = 0
    var perParse: [Double] = []
    for _ in 0..<runCount {
        let start = ContinuousClock.now
        for _ in 0..<iterationsPerRun { checksum &+= parse() }
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
        perParse.append(seconds / Double(iterationsPerRun))
    }
    precondition(checksum != 0, "parsers produced nothing")
    return perParse.sorted()[runCount / 2]
}

let ours = medianSecondsPerParse {
    guard case .object(let root) = try! JSONParser.parse(batch), case .array(let fixes)? = root["fixes"]
    else {
        fatalError("batch did not parse as expected")
    }
    return fixes.count
}
let batchData = Data(batch)
let foundation = medianSecondsPerParse {
    let root = try! JSONSerialization.jsonObject(with: batchData) as! [String: Any]
    return (root["fixes"] as! [Any]).count
}

var writer = JSONWriter()
writer.beginObject()
writer.key("benchmark")
writer.string("json-parse-100-fix-batch")
writer.key("batch_bytes")
writer.int64(Int64(batch.count))
writer.key("runs")
writer.int64(Int64(runCount))
writer.key("iterations_per_run")
writer.int64(Int64(iterationsPerRun))
for (name, seconds) in [("findmy", ours), ("foundation", foundation)] {
    writer.key(name)
    writer.beginObject()
    writer.key("median_micros_per_batch")
    writer.double((seconds * 1e7).rounded() / 10)
    writer.key("mb_per_s")
    writer.double((Double(batch.count) / seconds / 1e6 * 10).rounded() / 10)
    writer.key("fixes_per_s")
    writer.int64(Int64(Double(fixesPerBatch) / seconds))
    writer.endObject()
}
writer.key("speedup_vs_foundation")
writer.double((foundation / ours * 100).rounded() / 100)
writer.endObject()
print(String(decoding: writer.bytes, as: UTF8.self))
