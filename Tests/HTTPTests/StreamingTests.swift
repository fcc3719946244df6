import Crypto
import Foundation
import HTTP
import HTTPClient
import Synchronization
import Testing

// Upload routes (a body streamed to a file) and streamed responses, over a real socket. The
// memory checks read the test process's own resident set, which holds the server: a body held in
// memory anywhere on its way would show as tens of megabytes.

/// What the streaming routes' handlers and producers saw.
final class StreamingRecord: Sendable {
    let uploadsHandled = Mutex(0)
    let uploadModes = Mutex<[Int]>([])
    /// How each producer ended: "finished", or the error its write threw.
    let producerEnds = Mutex<[String]>([])
    let producersStarted = Mutex(0)
    /// Holds `/gated` producers until the test opens it.
    let gate = Latch()
}

struct ProducerFailed: Error, CustomStringConvertible {
    var description: String { "the producer failed on purpose" }
}

final class StreamingServer: Sendable {
    let server: HTTPServer
    let directory: String
    let record = StreamingRecord()

    init(bytesMax: Int64 = 1 << 30, limits: HTTPServer.Limits = HTTPServer.Limits()) throws {
        directory = try makeTemporaryDirectory()
        server = try HTTPServer.start(
            listen: "127.0.0.1:0",
            router: Self.router(directory: directory, bytesMax: bytesMax, record: record),
            limits: limits, logSink: { _ in })
    }

    var address: String { "127.0.0.1:\(server.port)" }

    /// Files in the upload directory, by name.
    var files: [String] { (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] }

    func stop() {
        server.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    static func router(directory: String, bytesMax: Int64, record: StreamingRecord) -> Router {
        var router = Router()
        let admit: @Sendable (HTTPRequest) -> HTTPResponse? = { request in
            request.headers["X-Refuse"] == nil
                ? nil : .error(status: 403, code: "refused", message: "this test refuses the upload")
        }
        let handler: Router.Handler = { request in
            record.uploadsHandled.withLock { $0 += 1 }
            guard let file = request.bodyFile else { return .text("no body file", status: 500) }
            var status = stat()
            stat(file.path, &status)
            record.uploadModes.withLock { $0.append(Int(status.st_mode & 0o777)) }
            if request.query("keep") == "1" { rename(file.path, directory + "/kept") }
            return .json("{\"bytes\": \(file.bytes)}")
        }
        router.addUpload("POST", "/upload", directory: directory, bytesMax: bytesMax, admit: admit, handler)
        router.add("GET", "/stream") { request in
            let blocks = request.query("blocks").flatMap { Int($0) } ?? 1
            let failAfter = request.query("fail_after").flatMap { Int($0) }
            return .streamed(headers: HTTPHeaders([("Content-Type", "application/octet-stream")])) { stream in
                for index in 0..<blocks {
                    if index == failAfter { throw ProducerFailed() }
                    try stream.write(testBlock(index))
                }
            }
        }
        router.add("GET", "/endless") { _ in
            .streamed { stream in
                record.producersStarted.withLock { $0 += 1 }
                do {
                    while true { try stream.write(testBlock(0)) }
                } catch {
                    record.producerEnds.withLock { $0.append("\(error)") }
                    throw error
                }
            }
        }
        router.add("GET", "/gated") { _ in
            .streamed { stream in
                record.producersStarted.withLock { $0 += 1 }
                record.gate.wait()
                do {
                    try stream.write(testBlock(0))
                    try stream.flush()
                    record.producerEnds.withLock { $0.append("finished") }
                } catch {
                    record.producerEnds.withLock { $0.append("\(error)") }
                    throw error
                }
            }
        }
        return router
    }
}

func makeTemporaryDirectory() throws -> String {
    let path = NSTemporaryDirectory() + "findmy-http-upload-\(getpid())-\(UUID().uuidString.prefix(8))"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
    return path
}

/// 64 KiB, the same for every index but its first eight bytes (the index): cheap to make again on
/// both sides, and a block out of place changes the digest.
let testBlockBytes = 64 << 10
private let testBlockBase: [UInt8] = {
    var state: UInt32 = 0x1234_5678
    return (0..<testBlockBytes).map { _ in
        state = state &* 1_664_525 &+ 1_013_904_223
        return UInt8(truncatingIfNeeded: state >> 24)
    }
}()

func testBlock(_ index: Int) -> [UInt8] {
    var block = testBlockBase
    withUnsafeBytes(of: UInt64(index).littleEndian) { block.replaceSubrange(0..<8, with: $0) }
    return block
}

func digestOfTestBlocks(_ count: Int) -> [UInt8] {
    let stream = SHA256.Stream()
    for index in 0..<count { testBlock(index).withUnsafeBytes { stream.update($0) } }
    return stream.finish()
}

func fileDigest(_ path: String) throws -> [UInt8] {
    let handle = try #require(FileHandle(forReadingAtPath: path))
    defer { try? handle.close() }
    let stream = SHA256.Stream()
    while let piece = try handle.read(upToCount: 256 << 10), !piece.isEmpty {
        piece.withUnsafeBytes { stream.update($0) }
    }
    return stream.finish()
}

/// This process's resident set (VmRSS), in bytes.
func residentBytes() -> Int {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
    return (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
}

/// A chunked answer read off a RawClient in small pieces: its head, the digest and length of its
/// body, and whether the terminating chunk arrived.
struct ChunkedRead {
    var head = ""
    var digest: [UInt8] = []
    var bodyBytes = 0
    var complete = false

    /// Reads until the last chunk, the connection's end, or `onProgress` (told the body bytes read
    /// so far) returning false.
    static func read(
        _ client: RawClient, pieceBytes: Int, onProgress: ((Int) -> Bool)? = nil
    ) -> ChunkedRead {
        var result = ChunkedRead()
        var reader = SocketReader(fd: client.fd, pieceBytes: pieceBytes)
        let stream = SHA256.Stream()
        guard let head = reader.line(through: "\r\n\r\n") else { return result }
        result.head = head
        readChunks(&reader, stream, &result, onProgress)
        result.digest = stream.finish()
        return result
    }

    private static func readChunks(
        _ reader: inout SocketReader, _ stream: SHA256.Stream, _ result: inout ChunkedRead,
        _ onProgress: ((Int) -> Bool)?
    ) {
        while let sizeLine = reader.line(through: "\r\n"),
            let size = Int(String(sizeLine.prefix { $0.isHexDigit }), radix: 16)
        {
            if size == 0 {
                result.complete = reader.line(through: "\r\n") == "\r\n"
                return
            }
            var left = size
            while left > 0 {
                guard let piece = reader.bytes(upTo: left) else { return }
                piece.withUnsafeBytes { stream.update($0) }
                left -= piece.count
                result.bodyBytes += piece.count
                if let onProgress, !onProgress(result.bodyBytes) { return }
            }
            guard reader.line(through: "\r\n") == "\r\n" else { return }
        }
    }
}

/// Buffered reads of a socket, `pieceBytes` a recv.
struct SocketReader {
    let fd: Int32
    let pieceBytes: Int
    private var buffer: [UInt8] = []
    private var start = 0

    init(fd: Int32, pieceBytes: Int) {
        self.fd = fd
        self.pieceBytes = pieceBytes
    }

    private mutating func fill() -> Bool {
        if start > 0 {
            buffer.removeFirst(start)
            start = 0
        }
        var piece = [UInt8](repeating: 0, count: pieceBytes)
        let count = recv(fd, &piece, pieceBytes, 0)
        guard count > 0 else { return false }
        buffer += piece[..<count]
        return true
    }

    mutating func line(through marker: String) -> String? {
        let mark = Array(marker.utf8)
        while true {
            if let end = firstIndex(of: mark) {
                let text = String(decoding: buffer[start..<end + mark.count], as: UTF8.self)
                start = end + mark.count
                return text
            }
            guard fill() else { return nil }
        }
    }

    mutating func bytes(upTo count: Int) -> [UInt8]? {
        if start == buffer.count { guard fill() else { return nil } }
        let end = min(buffer.count, start + count)
        defer { start = end }
        return Array(buffer[start..<end])
    }

    private func firstIndex(of mark: [UInt8]) -> Int? {
        guard buffer.count - start >= mark.count else { return nil }
        return (start...(buffer.count - mark.count)).first {
            buffer[$0..<$0 + mark.count].elementsEqual(mark)
        }
    }
}

func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

@Suite(.serialized) struct StreamingTests {
    @Test func aFiftyMegabyteUploadLandsInItsFileByteForByteWithMemoryFlat() throws {
        let test = try StreamingServer()
        defer { test.stop() }
        let blocks = 800  // 50 MiB
        let before = residentBytes()
        var peak = before
        let client = try RawClient(address: test.address, timeoutSeconds: 60)
        client.write(
            "POST /upload?keep=1 HTTP/1.1\r\nHost: x\r\nContent-Length: \(blocks * testBlockBytes)\r\n\r\n")
        // Sampled as the body goes: memory freed after a peak may be returned before the end.
        for index in 0..<blocks {
            #expect(testBlock(index).withUnsafeBytes { client.write(bytes: $0) })
            if index % 16 == 0 { peak = max(peak, residentBytes()) }
        }
        let response = try #require(client.readResponse())
        let grownBytes = max(peak, residentBytes()) - before
        #expect(response.status == 200)
        #expect(response.bodyText == "{\"bytes\": \(blocks * testBlockBytes)}")
        #expect(grownBytes < 16 << 20, "resident set grew by \(grownBytes) bytes for a 50 MiB upload")
        #expect(test.record.uploadModes.withLock { $0 } == [0o600])
        #expect(test.files == ["kept"], "the renamed file stays, nothing else")
        #expect(hex(try fileDigest(test.directory + "/kept")) == hex(digestOfTestBlocks(blocks)))
    }

    @Test func theFileIsRemovedOnceTheHandlerReturnsAndAChunkedBodyLandsToo() throws {
        let test = try StreamingServer()
        defer { test.stop() }
        let body = Array(repeating: testBlock(3), count: 3).flatMap { $0 }
        let request = HTTPClientRequest(method: "POST", target: "/upload", body: body, chunkBytes: 5000)
        let response = try HTTPConnection(address: test.address).send(request)
        #expect(response.status == 200)
        #expect(response.bodyText == "{\"bytes\": \(body.count)}")
        #expect(test.files == [])
    }

    @Test func admitRefusingAnswersBeforeTheBodyAndStoresNothing() throws {
        let test = try StreamingServer()
        defer { test.stop() }
        let client = try RawClient(address: test.address)
        // The body is never sent: the answer must come without it.
        client.write("POST /upload HTTP/1.1\r\nHost: x\r\nX-Refuse: 1\r\nContent-Length: 1000000\r\n\r\n")
        let response = try #require(client.readResponse())
        #expect(response.status == 403)
        #expect(response.bodyText.contains("\"refused\""))
        #expect(client.readToClose().closed, "the connection closes: the body is not read")
        #expect(test.files == [])
        #expect(test.record.uploadsHandled.withLock { $0 } == 0)
    }

    @Test func anUploadOverItsBytesMaxIs413TooLargeAndLeavesNoFile() throws {
        let test = try StreamingServer(bytesMax: 100_000, limits: HTTPServer.Limits(bodyBytesMax: 1024))
        defer { test.stop() }
        // Over the server's bodyBytesMax but within the route's own limit: accepted.
        let within = try HTTPConnection(address: test.address).send(
            "POST", "/upload", body: [UInt8](repeating: 1, count: 100_000))
        #expect(within.status == 200)

        let declared = try RawClient(address: test.address)
        declared.write("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100001\r\n\r\n")
        let early = try #require(declared.readResponse())
        #expect(early.status == 413)
        #expect(early.bodyText.contains("\"too_large\"") && early.bodyText.contains("100000 bytes"))

        let chunked = HTTPClientRequest(
            method: "POST", target: "/upload", body: [UInt8](repeating: 2, count: 100_500), chunkBytes: 10_000
        )
        let late = try HTTPConnection(address: test.address).send(chunked)
        #expect(late.status == 413)
        #expect(late.bodyText.contains("\"too_large\""))
        #expect(test.files == [])
        #expect(test.record.uploadsHandled.withLock { $0 } == 1)
    }

    @Test func anAbortedUploadLeavesNoFile() throws {
        let test = try StreamingServer()
        defer { test.stop() }
        let client = try RawClient(address: test.address)
        client.write("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
        testBlock(0).withUnsafeBytes { _ = client.write(bytes: $0) }
        try waitUntil("the upload's file to appear") { test.files.count == 1 }
        client.close()
        try waitUntil("the aborted upload's file to be removed") { test.files.isEmpty }
        #expect(test.record.uploadsHandled.withLock { $0 } == 0)
    }

    @Test func a100MegabyteStreamReachesASlowClientWholeWithMemoryFlat() throws {
        let test = try StreamingServer()
        defer { test.stop() }
        let blocks = 1600  // 100 MiB
        let before = residentBytes()
        var peak = before
        var sampledAt = 0
        let client = try RawClient(address: test.address, timeoutSeconds: 60)
        client.write("GET /stream?blocks=\(blocks) HTTP/1.1\r\nHost: x\r\n\r\n")
        // Small reads keep the client behind the producer; the resident set is sampled every
        // megabyte, since memory freed after a peak may be returned before the end.
        let read = ChunkedRead.read(client, pieceBytes: 1024) { received in
            if received - sampledAt >= 1 << 20 {
                sampledAt = received
                peak = max(peak, residentBytes())
            }
            return true
        }
        #expect(read.head.hasPrefix("HTTP/1.1 200 "))
        #expect(read.head.lowercased().contains("transfer-encoding: chunked"))
        #expect(read.head.contains("Content-Type: application/octet-stream"))
        #expect(read.complete)
        #expect(read.bodyBytes == blocks * testBlockBytes)
        #expect(hex(read.digest) == hex(digestOfTestBlocks(blocks)))
        #expect(peak - before < 16 << 20, "resident set grew by \(peak - before) bytes for a 100 MiB answer")
    }

    @Test func aProducerThatThrowsMidwayCutsTheBody() throws {
        let test = try StreamingServer()
        defer { test.stop() }
        let client = try RawClient(address: test.address)
        client.write("GET /stream?blocks=64&fail_after=16 HTTP/1.1\r\nHost: x\r\n\r\n")
        let read = ChunkedRead.read(client, pieceBytes: 65536)
        #expect(read.head.hasPrefix("HTTP/1.1 200 "))
        #expect(!read.complete, "no terminating chunk: the client sees the body was cut")
        #expect(read.bodyBytes < 64 * testBlockBytes)
        #expect(client.isClosedByServer)
    }

    @Test func aClientLeavingMidStreamMakesWriteThrowAndTheProducerStop() throws {
        let test = try StreamingServer()
        defer { test.stop() }
        let client = try RawClient(address: test.address)
        client.write("GET /endless HTTP/1.1\r\nHost: x\r\n\r\n")
        let read = ChunkedRead.read(client, pieceBytes: 65536) { $0 < 1 << 20 }
        #expect(read.bodyBytes >= 1 << 20)
        client.close()
        try waitUntil("the producer to stop") { !test.record.producerEnds.withLock { $0 }.isEmpty }
        #expect(test.record.producerEnds.withLock { $0 } == ["\(ResponseStreamError.closed)"])
    }

    @Test func stopCutsAStreamWaitingForItsProducer() throws {
        let test = try StreamingServer()
        let client = try RawClient(address: test.address)
        client.write("GET /gated HTTP/1.1\r\nHost: x\r\n\r\n")
        try waitUntil("the producer to start") { test.record.producersStarted.withLock { $0 } == 1 }
        let stopping = Background { test.server.stop(gracePeriodSeconds: 0) }
        try waitUntil("stop() to return") { stopping.isFinished }
        test.record.gate.open()
        try waitUntil("the producer to end") { !test.record.producerEnds.withLock { $0 }.isEmpty }
        #expect(test.record.producerEnds.withLock { $0 } == ["\(ResponseStreamError.closed)"])
        #expect(client.readToClose().closed)
        test.stop()
    }

    @Test func routerRespondProducesAStreamIntoTheBodyAndWritesAnUploadToAFile() throws {
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let record = StreamingRecord()
        let router = StreamingServer.router(directory: directory, bytesMax: 1 << 20, record: record)
        let streamed = router.respond(to: HTTPRequest(method: "GET", target: "/stream?blocks=3")).response
        #expect(streamed.status == 200 && !streamed.isStreamed)
        #expect(streamed.body == (0..<3).flatMap { testBlock($0) })
        let failed = router.respond(to: HTTPRequest(method: "GET", target: "/stream?blocks=3&fail_after=1"))
        #expect(failed.response.status == 500)
        #expect(failed.response.bodyText.contains("stream_failed"))
        let upload = router.respond(to: HTTPRequest(method: "POST", target: "/upload", body: testBlock(1)))
        #expect(upload.response.bodyText == "{\"bytes\": \(testBlockBytes)}")
        #expect(record.uploadModes.withLock { $0 } == [0o600])
        #expect((try FileManager.default.contentsOfDirectory(atPath: directory)) == [])
    }
}

extension HTTPResponse {
    var bodyText: String { String(decoding: body, as: UTF8.self) }
}
