import Events
import Import
import Testing

@Suite struct ByteSourceTests {
    @Test func aMemorySourceHandsOutItsBytesInPiecesAndThenNothing() throws {
        var source = MemoryByteSource(Array("abcdefg".utf8))
        var buffer = [UInt8](repeating: 0, count: 3)
        var seen: [UInt8] = []
        while true {
            let count = try buffer.withUnsafeMutableBytes { try source.read(into: $0) }
            if count == 0 { break }
            seen += buffer[..<count]
        }
        #expect(String(decoding: seen, as: UTF8.self) == "abcdefg")
    }

    @Test func aMissingFileIsAnErrorNamingIt() {
        #expect(throws: ImportError("cannot open /nonexistent/x.gpx: No such file or directory")) {
            _ = try FileByteSource(path: "/nonexistent/x.gpx")
        }
    }

    @Test func anErrorSaysWhereInTheFile() {
        #expect(ImportError("bad", byteOffset: 12, line: 3).description == "line 3, byte 12: bad")
        #expect(ImportError("bad").description == "bad")
        #expect(
            ImportItem.notAFix(kind: "activity")
                != .fix(
                    Fix(latitude: 0, longitude: 0, accuracyMeters: nil, source: "gps", recordedAtMicros: 0)))
    }
}
