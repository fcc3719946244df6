import CArchive

/// How much an archive's entry may inflate: the defence against a zip bomb, which is small on disk
/// and enormous once inflated. Entries are never written to disk, so what a bomb would cost is the
/// time to read it and the fixes it could claim to hold; both are bounded here.
public struct ArchiveLimits: Equatable, Sendable {
    /// An entry's inflated bytes at most: 8 GiB, over the largest Takeout `Records.json` seen
    /// (a few GB for a decade of history).
    public var entryInflatedBytesMax: Int64
    /// An entry's inflated bytes per compressed byte at most, once it has inflated
    /// `ratioCheckedAfterBytes`. Location history compresses about 5 to 20 times; deflate's own
    /// ceiling is about 1030, which bombs (runs of one byte) come close to.
    public var inflationRatioMax: Int64
    /// Below this, an entry is small enough that its ratio does not matter (and the compressed
    /// bytes read for it are not yet a fair measure: libarchive reads ahead).
    public var ratioCheckedAfterBytes: Int64

    public static let entryInflatedBytesMaxDefault: Int64 = 8 << 30
    public static let inflationRatioMaxDefault: Int64 = 100
    public static let ratioCheckedAfterBytesDefault: Int64 = 16 << 20

    public init(
        entryInflatedBytesMax: Int64 = entryInflatedBytesMaxDefault,
        inflationRatioMax: Int64 = inflationRatioMaxDefault,
        ratioCheckedAfterBytes: Int64 = ratioCheckedAfterBytesDefault
    ) {
        self.entryInflatedBytesMax = entryInflatedBytesMax
        self.inflationRatioMax = inflationRatioMax
        self.ratioCheckedAfterBytes = ratioCheckedAfterBytes
    }
}

/// The entries of a .zip (a KMZ, a Google Takeout archive) in the archive's order, each read as a
/// ByteSource while it is the current one, inflated in memory a buffer at a time and never
/// extracted to disk. The archive is read as a stream (its local headers, not its central
/// directory), through libarchive. Directories and links are passed over.
public final class ZipArchive<Source: ByteSource> {
    private let handle: ArchiveHandle

    public init(_ source: Source, limits: ArchiveLimits = ArchiveLimits()) throws(ImportError) {
        handle = try ArchiveHandle(SourceInput(source), limits: limits)
    }

    /// The next file of the archive; nil after the last. The entry returned before is no longer
    /// readable.
    public func nextEntry() throws(ImportError) -> ArchiveEntry? {
        try handle.nextEntry()
    }
}

/// One file of an archive: its name (the path inside the archive), its size as the archive
/// declares it (nil when it does not), and its bytes as a ByteSource.
public struct ArchiveEntry: ByteSource {
    public let name: String
    public let declaredSize: Int64?
    let handle: ArchiveHandle
    let index: Int

    public mutating func read(into buffer: UnsafeMutableRawBufferPointer) throws(ImportError) -> Int {
        try handle.read(entry: index, into: buffer)
    }
}

/// libarchive's reader, its input and the current entry's counts.
final class ArchiveHandle {
    static let inputBufferBytes = 64 << 10

    private let archive: OpaquePointer
    let input: CallbackInput
    private let limits: ArchiveLimits
    let inputBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: inputBufferBytes, alignment: 16)
    private var entryIndex = -1
    private var entryName = ""
    private var entryDeclaredSize: Int64?
    private var entryInflatedBytes: Int64 = 0
    private var entryStartBytesRead: Int64 = 0

    init(_ input: CallbackInput, limits: ArchiveLimits) throws(ImportError) {
        self.input = input
        self.limits = limits
        // libarchive is loaded with the first archive import, not at start (CArchive's shim.h).
        if let failure = findmy_archive_load() {
            inputBuffer.deallocate()
            throw ImportError(String(cString: failure))
        }
        guard let archive = archive_read_new() else {
            inputBuffer.deallocate()
            throw ImportError("libarchive cannot start (out of memory?)")
        }
        self.archive = archive
        archive_read_support_format_zip(archive)
        let context = Unmanaged.passUnretained(self).toOpaque()
        guard archive_read_open(archive, context, nil, archiveReadFromInput, nil) == ARCHIVE_OK else {
            throw failure("cannot open the archive")
        }
    }

    deinit {
        archive_read_free(archive)
        inputBuffer.deallocate()
    }

    func nextEntry() throws(ImportError) -> ArchiveEntry? {
        while true {
            var entry: OpaquePointer?
            let result = archive_read_next_header(archive, &entry)
            if result == ARCHIVE_EOF { return nil }
            guard result == ARCHIVE_OK || result == ARCHIVE_WARN, let entry else {
                throw failure("cannot read the archive's next entry")
            }
            guard findmy_archive_entry_is_regular_file(entry) != 0 else { continue }
            entryIndex += 1
            entryName = archive_entry_pathname(entry).map { String(cString: $0) } ?? ""
            entryDeclaredSize = archive_entry_size_is_set(entry) != 0 ? archive_entry_size(entry) : nil
            entryInflatedBytes = 0
            entryStartBytesRead = input.bytesRead
            return ArchiveEntry(
                name: entryName, declaredSize: entryDeclaredSize, handle: self, index: entryIndex)
        }
    }

    func read(entry index: Int, into buffer: UnsafeMutableRawBufferPointer) throws(ImportError) -> Int {
        guard index == entryIndex else {
            throw ImportError(
                "the archive has moved past this entry: entries are read in the archive's order")
        }
        if let declared = entryDeclaredSize, declared > limits.entryInflatedBytesMax {
            throw tooLarge("declares \(declared) bytes")
        }
        guard let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
        let count = archive_read_data(archive, base, buffer.count)
        guard count >= 0 else { throw failure("cannot inflate \(entryName)", byteOffset: entryInflatedBytes) }
        entryInflatedBytes += Int64(count)
        if entryInflatedBytes > limits.entryInflatedBytesMax {
            throw tooLarge("inflates to more than \(limits.entryInflatedBytesMax) bytes")
        }
        let compressed = max(1, input.bytesRead - entryStartBytesRead)
        if entryInflatedBytes > limits.ratioCheckedAfterBytes,
            entryInflatedBytes / compressed > limits.inflationRatioMax
        {
            throw tooLarge(
                "inflates \(entryInflatedBytes / compressed) times (at most \(limits.inflationRatioMax)): a zip bomb?"
            )
        }
        return count
    }

    private func tooLarge(_ what: String) -> ImportError {
        ImportError(
            "the archive's entry \(entryName) \(what); it is not read (ArchiveLimits)",
            byteOffset: entryInflatedBytes)
    }

    private func failure(_ what: String, byteOffset: Int64? = nil) -> ImportError {
        if let sourceError = input.sourceError { return sourceError }
        let reason = archive_error_string(archive).map { String(cString: $0) } ?? "unknown error"
        return ImportError("\(what): \(reason)", byteOffset: byteOffset)
    }
}

private func archiveReadFromInput(
    _ archive: OpaquePointer?, _ context: UnsafeMutableRawPointer?,
    _ buffer: UnsafeMutablePointer<UnsafeRawPointer?>?
) -> la_ssize_t {
    guard let context, let buffer else { return -1 }
    let handle = Unmanaged<ArchiveHandle>.fromOpaque(context).takeUnretainedValue()
    buffer.pointee = UnsafeRawPointer(handle.inputBuffer.baseAddress)
    return la_ssize_t(handle.input.fillForC(handle.inputBuffer))
}
