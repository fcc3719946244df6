import Events

/// The formats a device's fixes are exported in (docs/import-export.md, "Export"). `rawValue` is
/// the name the API's `format=` and the command line use.
public enum ExportFormat: String, CaseIterable, Sendable {
    case gpx
    case geojson
    case csv

    public var contentType: String {
        switch self {
        case .gpx: "application/gpx+xml"
        case .geojson: "application/geo+json"
        case .csv: "text/csv; charset=utf-8"
        }
    }

    public var fileExtension: String { rawValue }
}

/// Writes fixes in one format as a stream: the format's opening, one fix at a time, its closing.
/// Output collects in a buffer of about `flushBytes` and goes to `sink` whenever it is full, so
/// memory stays constant whatever the number of fixes; the sink (an HTTP response's chunks, a file)
/// sees the bytes in order and may throw to stop the export.
///
/// Each fix carries both clocks: `recorded_at` (the fix's) and `received_at` (when findmy received
/// it). `clockSuspect` is not written: an import decides it again against its own `received_at`.
public struct FixExporter {
    public static let flushBytesDefault = 64 << 10

    public let format: ExportFormat
    private let flushBytes: Int
    private let sink: (UnsafeRawBufferPointer) throws -> Void
    private var buffer: [UInt8]
    private var encoder: Encoder
    private var started = false
    private var finished = false
    public private(set) var fixesWritten = 0

    private enum Encoder {
        case gpx(GPXEncoder)
        case geojson(GeoJSONEncoder)
        case csv(CSVEncoder)
    }

    public init(
        format: ExportFormat, flushBytes: Int = flushBytesDefault,
        sink: @escaping (UnsafeRawBufferPointer) throws -> Void
    ) {
        precondition(flushBytes > 0, "flushBytes must be positive")
        self.format = format
        self.flushBytes = flushBytes
        self.sink = sink
        buffer = []
        buffer.reserveCapacity(flushBytes + 4096)
        switch format {
        case .gpx: encoder = .gpx(GPXEncoder())
        case .geojson: encoder = .geojson(GeoJSONEncoder())
        case .csv: encoder = .csv(CSVEncoder())
        }
    }

    public mutating func write(_ fix: Fix, receivedAtMicros: Int64) throws {
        precondition(!finished, "FixExporter.write after finish")
        if !started { writeHeader() }
        switch encoder {
        case .gpx(var gpx):
            gpx.fix(fix, receivedAtMicros: receivedAtMicros, into: &buffer)
            encoder = .gpx(gpx)
        case .geojson(var geojson):
            geojson.fix(fix, receivedAtMicros: receivedAtMicros, into: &buffer)
            encoder = .geojson(geojson)
        case .csv(var csv):
            csv.fix(fix, receivedAtMicros: receivedAtMicros, into: &buffer)
            encoder = .csv(csv)
        }
        fixesWritten += 1
        if buffer.count >= flushBytes { try flush() }
    }

    /// Closes the document and hands the rest to the sink. An export of no fixes is a complete,
    /// empty document of its format.
    public mutating func finish() throws {
        precondition(!finished, "FixExporter.finish twice")
        if !started { writeHeader() }
        finished = true
        switch encoder {
        case .gpx: GPXEncoder.footer(into: &buffer)
        case .geojson: GeoJSONEncoder.footer(into: &buffer)
        case .csv: break
        }
        try flush()
    }

    private mutating func writeHeader() {
        started = true
        switch encoder {
        case .gpx: GPXEncoder.header(into: &buffer)
        case .geojson: GeoJSONEncoder.header(into: &buffer)
        case .csv: CSVEncoder.header(into: &buffer)
        }
    }

    private mutating func flush() throws {
        guard !buffer.isEmpty else { return }
        try buffer.withUnsafeBytes { try sink($0) }
        buffer.removeAll(keepingCapacity: true)
    }
}
