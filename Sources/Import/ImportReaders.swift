/// The bytes a reader was handed first (the prefix `detect` looked at), then the rest of the
/// source: detection reads a stream's start once, and the reader still sees the whole file.
public struct PrefixedByteSource<Source: ByteSource>: ByteSource {
    private let prefix: [UInt8]
    private var prefixPosition = 0
    private var rest: Source

    public init(prefix: [UInt8], rest: Source) {
        self.prefix = prefix
        self.rest = rest
    }

    public mutating func read(into buffer: UnsafeMutableRawBufferPointer) throws(ImportError) -> Int {
        guard prefixPosition < prefix.count else { return try rest.read(into: buffer) }
        let count = min(buffer.count, prefix.count - prefixPosition)
        guard count > 0, let base = buffer.baseAddress else { return 0 }
        prefix.withUnsafeBytes { base.copyMemory(from: $0.baseAddress! + prefixPosition, byteCount: count) }
        prefixPosition += count
        return count
    }
}

extension ImportFormat {
    /// Reads up to `detectionPrefixBytes` of `source` and detects its format from them; the source
    /// comes back with those bytes put in front again, for the reader.
    public static func detect<Source: ByteSource>(source: Source, fileName: String?) throws(ImportError)
        -> (format: ImportFormat?, source: PrefixedByteSource<Source>)
    {
        var rest = source
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: detectionPrefixBytes, alignment: 16)
        defer { buffer.deallocate() }
        var filled = 0
        while filled < buffer.count {
            let count = try rest.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[filled...]))
            if count == 0 { break }
            filled += count
        }
        let prefix = Array(buffer[..<filled])
        return (detect(prefix: prefix, fileName: fileName), PrefixedByteSource(prefix: prefix, rest: rest))
    }

    /// The reader of this format over `source`: the one place a format is mapped to its reader,
    /// for the command line, the API and the benchmarks alike. A `.zip` is read entry by entry
    /// (`ZipImportReader`). An OwnTracks Recorder store directory is not a byte source: its files
    /// come from `RecorderStore.files` and are read one by one with this format.
    public func reader<Source: ByteSource>(source: Source, archiveLimits: ArchiveLimits = ArchiveLimits())
        -> any FixReader
    {
        switch self {
        case .googleRecords: GoogleRecordsReader(source)
        case .googleSemantic: GoogleSemanticReader(source)
        case .googleTimeline: GoogleTimelineReader(source)
        case .gpx: GPXReader(source)
        case .kml: KMLReader(source)
        case .kmz: KMZReader(source, limits: archiveLimits)
        case .geojson: GeoJSONReader(source)
        case .csv: CSVReader(source)
        case .owntracksRecorder: OwnTracksRecorderReader(source)
        case .zip: ZipImportReader(source, limits: archiveLimits)
        }
    }
}
