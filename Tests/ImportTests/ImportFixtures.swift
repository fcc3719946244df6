import Events
import Foundation
import Import

/// The files under Fixtures/import, and reading a reader to its end.
enum ImportFixtures {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fixtures/import")
        .path

    static func path(_ name: String) -> String { root + "/" + name }

    static func bytes(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: URL(fileURLWithPath: path(name))))
    }

    /// Every item up to the end, or the error that stopped the reader (and the items before it).
    static func readAll<Reader: FixReader>(_ reader: inout Reader) -> (
        items: [ImportItem], error: ImportError?
    ) {
        var items: [ImportItem] = []
        do {
            while let item = try reader.next() { items.append(item) }
            return (items, nil)
        } catch {
            return (items, error)
        }
    }

    static func fixes(_ items: [ImportItem]) -> [Fix] {
        items.compactMap { item in
            if case .fix(let fix) = item { return fix }
            return nil
        }
    }

    /// A ByteSource that hands out one byte per read: every reader must give the same result.
    struct OneByteAtATime: ByteSource {
        var inner: MemoryByteSource

        init(_ bytes: [UInt8]) { inner = MemoryByteSource(bytes) }

        mutating func read(into buffer: UnsafeMutableRawBufferPointer) throws(ImportError) -> Int {
            try inner.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<min(1, buffer.count)]))
        }
    }
}
