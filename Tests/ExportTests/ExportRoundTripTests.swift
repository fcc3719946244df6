import Events
import Export
import Import
import Testing

/// Each writer's output read back by Import's reader of the format gives the same fixes: an
/// export imported into a new device is the history it came from.
@Suite struct ExportRoundTripTests {
    static let receivedAt: Int64 = 1_735_787_047_000_001

    /// Fixes with every field known, none known, and the awkward numbers (tiny, huge, negative,
    /// many digits) between.
    static let sample: [Fix] = [
        Fix(
            latitude: 40.7128, longitude: -74.006, accuracyMeters: 12.5, altitudeMeters: 10.5,
            speedMetersPerSecond: 3.25, headingDegrees: 359.9, batteryPercent: 87, isCharging: true,
            source: "significant", recordedAtMicros: 1_735_787_045_123_456),
        Fix(
            latitude: -33.868820000000007, longitude: 151.20929, accuracyMeters: nil,
            source: "visit", recordedAtMicros: 1_735_787_046_000_000),
        Fix(
            latitude: 0.00001, longitude: -1e-7, accuracyMeters: 0.01, altitudeMeters: -12_000,
            speedMetersPerSecond: 0, headingDegrees: 0, batteryPercent: 1, isCharging: false,
            source: "gps", recordedAtMicros: 0),
        Fix(
            latitude: 89.999999999999, longitude: 179.99999999999997, accuracyMeters: 1_000_000,
            altitudeMeters: 100_000, speedMetersPerSecond: 2000, headingDegrees: 1e-5, batteryPercent: 100,
            source: "wifi.scan_2", recordedAtMicros: 253_402_300_799_999_999),
        Fix(
            latitude: 52.5, longitude: 13.4, accuracyMeters: 5, batteryPercent: 0, source: "track",
            recordedAtMicros: -1),
    ]

    static func export(_ format: ExportFormat, _ fixes: [Fix], flushBytes: Int = 1 << 20) throws -> [UInt8] {
        var output: [UInt8] = []
        var exporter = FixExporter(format: format, flushBytes: flushBytes) { output += $0 }
        for fix in fixes { try exporter.write(fix, receivedAtMicros: receivedAt) }
        try exporter.finish()
        #expect(exporter.fixesWritten == fixes.count)
        return output
    }

    static func importFormat(_ format: ExportFormat) -> ImportFormat {
        switch format {
        case .gpx: .gpx
        case .geojson: .geojson
        case .csv: .csv
        }
    }

    @Test(arguments: ExportFormat.allCases)
    func anExportReadBackByOurReaderIsTheSameFixes(format: ExportFormat) throws {
        let bytes = try Self.export(format, Self.sample)
        let detected = ImportFormat.detect(prefix: bytes, fileName: nil)
        #expect(detected == Self.importFormat(format))
        let items = try readAll(Self.importFormat(format).reader(source: MemoryByteSource(bytes)))
        #expect(notAFixCounts(items).isEmpty)
        let read = fixes(items)
        #expect(read.count == Self.sample.count)
        for (written, back) in zip(Self.sample, read) { #expect(back == written) }
    }

    @Test(arguments: ExportFormat.allCases)
    func everyFixCarriesItsReceivedAt(format: ExportFormat) throws {
        let text = String(decoding: try Self.export(format, Self.sample), as: UTF8.self)
        let occurrences = text.split(
            separator: "2025-01-02T03:04:07.000001Z", omittingEmptySubsequences: false)
        #expect(occurrences.count - 1 == Self.sample.count)
    }

    @Test(arguments: ExportFormat.allCases)
    func anEmptyExportIsAWholeDocumentWithNoFixes(format: ExportFormat) throws {
        let bytes = try Self.export(format, [])
        #expect(try readAll(Self.importFormat(format).reader(source: MemoryByteSource(bytes))).isEmpty)
    }

    @Test(arguments: ExportFormat.allCases)
    func theSinkGetsTheSameBytesInPiecesOfAboutTheFlushSize(format: ExportFormat) throws {
        let many = (0..<2000).map { index in
            var fix = Self.sample[index % Self.sample.count]
            fix.recordedAtMicros = Int64(index) * 1_000_000
            return fix
        }
        let whole = try Self.export(format, many)
        var pieces: [Int] = []
        var joined: [UInt8] = []
        var exporter = FixExporter(format: format, flushBytes: 4096) { piece in
            pieces.append(piece.count)
            joined += piece
        }
        for fix in many { try exporter.write(fix, receivedAtMicros: Self.receivedAt) }
        try exporter.finish()
        #expect(joined == whole)
        #expect(pieces.count > 10)
        // A piece is at most the flush size and one fix's text: memory does not grow with the export.
        #expect(pieces.allSatisfy { $0 < 4096 + 1024 }, "\(pieces.max() ?? 0)")
    }

    @Test func aSinkThatThrowsStopsTheExport() throws {
        struct Closed: Error {}
        var exporter = FixExporter(format: .geojson, flushBytes: 100) { _ in throw Closed() }
        #expect(throws: Closed.self) {
            for fix in Self.sample { try exporter.write(fix, receivedAtMicros: Self.receivedAt) }
        }
    }
}

func readAll(_ reader: any FixReader) throws(ImportError) -> [ImportItem] {
    var reader = reader
    var items: [ImportItem] = []
    while let item = try reader.next() { items.append(item) }
    return items
}

func fixes(_ items: [ImportItem]) -> [Fix] {
    items.compactMap { if case .fix(let fix) = $0 { fix } else { nil } }
}

func notAFixCounts(_ items: [ImportItem]) -> [String: Int] {
    var counts: [String: Int] = [:]
    for case .notAFix(let kind) in items { counts[kind, default: 0] += 1 }
    return counts
}
