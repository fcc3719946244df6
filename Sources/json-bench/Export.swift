import Events
import Export
import Foundation
import JSON

/// `json-bench export [fixes]`: each export format's writer over `fixes` generated fixes into a
/// sink that only counts bytes (what the writer costs, not a disk's or a socket's). Prints one JSON
/// object: fixes/s and MB/s per format, medians of `runs` alternating runs, with the load average.
func runExportBenchmark(fixCount: Int, runs: Int) {
    var fixes: [Fix] = []
    fixes.reserveCapacity(4096)
    var state: UInt64 = 11
    func random() -> Double {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return Double(state >> 11) / Double(1 << 53)
    }
    // 4,096 distinct fixes, written round and round: the writer's cost, not the generator's.
    for index in 0..<4096 {
        fixes.append(
            Fix(
                latitude: 52.5 + random() / 10, longitude: 13.3 + random() / 10,
                accuracyMeters: 3 + random() * 40,
                altitudeMeters: index % 3 == 0 ? nil : 30 + random() * 20,
                speedMetersPerSecond: index % 4 == 0 ? random() * 30 : nil, headingDegrees: nil,
                batteryPercent: UInt8(index % 101), isCharging: index % 5 == 0, source: "gps",
                recordedAtMicros: 1_500_000_000_000_000 + Int64(index) * 30_000_000))
    }
    var wall: [ExportFormat: [Double]] = [:]
    var bytes: [ExportFormat: Int] = [:]
    for _ in 0..<runs {
        for format in ExportFormat.allCases {
            var written = 0
            wall[format, default: []].append(
                seconds {
                    var exporter = FixExporter(format: format) { written += $0.count }
                    for index in 0..<fixCount {
                        try! exporter.write(fixes[index & 4095], receivedAtMicros: 1_700_000_000_000_000)
                    }
                    try! exporter.finish()
                }.wall)
            bytes[format] = written
        }
    }
    var writer = JSONWriter()
    writer.beginObject()
    writer.key("benchmark")
    writer.string("export-writers")
    writer.key("fixes")
    writer.int64(Int64(fixCount))
    for format in ExportFormat.allCases {
        let median = wall[format]!.sorted()[runs / 2]
        writer.key("\(format.rawValue)_fixes_per_s")
        writer.int64(Int64(Double(fixCount) / median))
        writer.key("\(format.rawValue)_mb_per_s")
        writer.double((Double(bytes[format]!) / median / 1e6).rounded())
    }
    writer.key("load_average")
    writer.string(loadAverage())
    writer.endObject()
    print(String(decoding: writer.bytes, as: UTF8.self))
}
