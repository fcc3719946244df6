/// A `.zip` as it comes (a Google Takeout archive): each entry's format is detected from its
/// content and name, and the entry is read with that format's reader, in the archive's order.
///
/// An entry of no known format (Takeout's `Settings.json`, a README, an image) is no error: it is
/// counted, as an item `.notAFix(kind: ZipImportReader.unknownEntryKind)`. A zip or a KMZ inside
/// the zip is counted the same way: archives are not read recursively, so ArchiveLimits bound the
/// inflation a crafted file can ask for once, not once per level. An error inside an entry names
/// the entry.
public final class ZipImportReader<Source: ByteSource>: FixReader {
    public static var unknownEntryKind: String { "entry_of_unknown_format" }

    private var source: Source?
    private let limits: ArchiveLimits
    private var archive: ZipArchive<Source>?
    private var current: (any FixReader)?

    /// The name and format of the entry being read.
    public private(set) var entryName: String?
    public private(set) var entryFormat: ImportFormat?
    /// How many entries were read with a format's reader, and how many were passed over.
    public private(set) var entriesRead = 0
    public private(set) var entriesOfUnknownFormat = 0

    public init(_ source: Source, limits: ArchiveLimits = ArchiveLimits()) {
        self.source = source
        self.limits = limits
    }

    public func next() throws(ImportError) -> ImportItem? {
        let archive = try opened()
        while true {
            if var reader = current {
                let item: ImportItem?
                do { item = try reader.next() } catch { throw named(error) }
                current = reader
                if let item { return item }
                current = nil
            }
            guard let entry = try archive.nextEntry() else { return nil }
            entryName = entry.name
            let (format, source): (ImportFormat?, PrefixedByteSource<ArchiveEntry>)
            do { (format, source) = try ImportFormat.detect(source: entry, fileName: entry.name) } catch {
                throw named(error)
            }
            entryFormat = format
            guard let format, format != .zip, format != .kmz else {
                entriesOfUnknownFormat += 1
                return .notAFix(kind: Self.unknownEntryKind)
            }
            entriesRead += 1
            current = format.reader(source: source, archiveLimits: limits)
        }
    }

    private func opened() throws(ImportError) -> ZipArchive<Source> {
        if let archive { return archive }
        guard let source else { preconditionFailure("the source is kept until the reader opens") }
        self.source = nil
        let opened = try ZipArchive(source, limits: limits)
        archive = opened
        return opened
    }

    private func named(_ error: ImportError) -> ImportError {
        var named = error
        if let entryName { named.message = "in the archive's entry \(entryName): \(error.message)" }
        return named
    }
}
