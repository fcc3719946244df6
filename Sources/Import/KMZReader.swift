/// A KMZ: a zip whose first `.kml` entry (by the KML specification, usually `doc.kml` at the
/// root) is the document; the rest (images, models, other KML it links to) is not read. The entry
/// is inflated as it is read, never extracted, within `ArchiveLimits`.
public final class KMZReader<Source: ByteSource>: FixReader {
    private var source: Source?
    private let limits: ArchiveLimits
    private var archive: ZipArchive<Source>?
    private var document: KMLReader<ArchiveEntry>?

    public init(_ source: Source) {
        self.source = source
        limits = ArchiveLimits()
    }

    public init(_ source: Source, limits: ArchiveLimits) {
        self.source = source
        self.limits = limits
    }

    /// The name of the entry being read, once the first item has been asked for.
    public private(set) var documentName: String?

    public func next() throws(ImportError) -> ImportItem? {
        try opened().next()
    }

    private func opened() throws(ImportError) -> KMLReader<ArchiveEntry> {
        if let document { return document }
        guard let source else { preconditionFailure("the source is kept until the reader opens") }
        self.source = nil
        let archive = try ZipArchive(source, limits: limits)
        self.archive = archive
        while let entry = try archive.nextEntry() {
            if entry.name.lowercased().hasSuffix(".kml") {
                documentName = entry.name
                let reader = KMLReader(entry)
                document = reader
                return reader
            }
        }
        throw ImportError("the KMZ holds no .kml file")
    }
}
