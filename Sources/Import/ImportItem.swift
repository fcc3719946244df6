import Events

/// What a reader finds next in a file: a fix, or something the file holds that is not a fix (an
/// activity type, a place's name or address), which the import counts and does not store.
public enum ImportItem: Equatable, Sendable {
    case fix(Fix)
    /// `kind` names what was passed over, e.g. "activity", "place_name"; the summary counts by kind.
    case notAFix(kind: String)
}

/// A file the import cannot read, with where: a byte offset into the file (or the archive entry),
/// and a line number for the line-oriented formats (CSV, OwnTracks Recorder).
public struct ImportError: Error, Equatable, Sendable, CustomStringConvertible {
    public var message: String
    public var byteOffset: Int64?
    public var line: Int?

    public init(_ message: String, byteOffset: Int64? = nil, line: Int? = nil) {
        self.message = message
        self.byteOffset = byteOffset
        self.line = line
    }

    public var description: String {
        var place: [String] = []
        if let line { place.append("line \(line)") }
        if let byteOffset { place.append("byte \(byteOffset)") }
        return place.isEmpty ? message : "\(place.joined(separator: ", ")): \(message)"
    }
}

/// A reader of one format: pulls bytes from its source and hands out items in the file's order.
/// `nil` once the file is read to its end.
public protocol FixReader {
    mutating func next() throws(ImportError) -> ImportItem?
}
