import Foundation
import HTTP
import HTTPClient
import Synchronization
import Testing

/// Pushed responses (`HTTPResponse.pushed`): bodies written later from any thread, which hold no
/// worker thread while they stay open. Over a real socket.
final class PushedRecord: Sendable {
    let open = Mutex<[PushedStream]>([])
    let closed = Mutex(0)
}

final class PushedStreams: Sendable {
    let record = PushedRecord()
    let server: HTTPServer

    init(limits: HTTPServer.Limits, bufferedBytesMax: Int = 64 << 10) throws {
        let record = self.record
        var router = Router()
        router.add("GET", "/events") { _ in
            .pushed(
                headers: HTTPHeaders([("Content-Type", "text/event-stream")]),
                bufferedBytesMax: bufferedBytesMax,
                unacknowledgedSecondsMax: 5
            ) { stream in
                stream.send(Array("event: hello\n\n".utf8))
                stream.onClose { record.closed.withLock { $0 += 1 } }
                record.open.withLock { $0.append(stream) }
            }
        }
        router.add("GET", "/plain") { _ in .text("plain") }
        server = try HTTPServer.start(
            listen: "127.0.0.1:0", router: router, limits: limits, logSink: { _ in })
    }

    var address: String { "127.0.0.1:\(server.port)" }
    var streams: [PushedStream] { record.open.withLock { $0 } }
    var closedCount: Int { record.closed.withLock { $0 } }
}

@Suite(.serialized) struct PushedStreamTests {
    static func connect(_ test: PushedStreams) throws -> EventStreamClient {
        try EventStreamClient(
            address: test.address, target: "/events", requestHeaders: [], timeoutSeconds: 30)
    }

    @Test func streamsOutnumberingTheWorkersHoldNoneOfThemAndAreWrittenFromAnyThread() throws {
        let test = try PushedStreams(limits: HTTPServer.Limits(blockingThreadsMax: 2))
        defer { test.server.stop() }
        let clients = try (0..<6).map { _ in try Self.connect(test) }
        for client in clients {
            #expect(client.status == 200 && client.next()?.event == "hello")
        }
        try waitUntil("every stream handed over") { test.streams.count == clients.count }
        // Six streams open, two workers: an ordinary request is answered all the same.
        let plain = try HTTPConnection(address: test.address).send("GET", "/plain")
        #expect(plain.status == 200 && String(decoding: plain.body, as: UTF8.self) == "plain")
        // Written from this thread, long after the handlers returned.
        for (index, stream) in test.streams.enumerated() {
            #expect(stream.send(Array("data: \(index)\n\n".utf8)))
        }
        let received = Set(clients.compactMap { $0.next()?.data })
        #expect(received == Set((0..<6).map(String.init)))
    }

    @Test func aClientThatLeftIsFoundOutByALookAtTheSocket() throws {
        let test = try PushedStreams(limits: HTTPServer.Limits())
        defer { test.server.stop() }
        let client = try Self.connect(test)
        #expect(client.next()?.event == "hello")
        try waitUntil("the stream handed over") { test.streams.count == 1 }
        let stream = test.streams[0]
        #expect(!stream.peerHasLeft())
        client.client.close()
        // The client's FIN reaches the socket within loopback's round trip; the look sees it.
        try waitUntil("the look at the socket sees the client gone") { stream.peerHasLeft() }
        #expect(stream.isClosed && !stream.send(Array("data: late\n\n".utf8)))
        try waitUntil("the close handler ran") { test.closedCount == 1 }
    }

    @Test func aWriterFasterThanItsClientIsCutAtTheBufferLimit() throws {
        let test = try PushedStreams(limits: HTTPServer.Limits(), bufferedBytesMax: 4096)
        defer { test.server.stop() }
        let client = try Self.connect(test)
        #expect(client.next()?.event == "hello")
        try waitUntil("the stream handed over") { test.streams.count == 1 }
        let stream = test.streams[0]
        // The client reads nothing more while the writer goes on: past 4 KiB buffered, the cut.
        let line = Array(("data: " + String(repeating: "x", count: 1000) + "\n\n").utf8)
        var sent = 0
        while stream.send(line) {
            sent += 1
            #expect(sent < 100_000, "a client that reads nothing must be cut")
            if sent >= 100_000 { break }
        }
        #expect(stream.isClosed)
        #expect(client.readsToEnd(), "the connection was closed")
    }

    @Test func stopCutsOpenStreamsWithoutWaitingOutItsGracePeriod() throws {
        let test = try PushedStreams(limits: HTTPServer.Limits())
        let client = try Self.connect(test)
        #expect(client.next()?.event == "hello")
        try waitUntil("the stream handed over") { test.streams.count == 1 }
        // A stream never ends by itself: a stop that waited for it would take the whole hour.
        let stopped = PushedRecord()
        let server = test.server
        Thread {
            server.stop(gracePeriodSeconds: 3_600)
            stopped.closed.withLock { $0 = 1 }
        }.start()
        try waitUntil("stop returned, its grace period not waited out") {
            stopped.closed.withLock { $0 } == 1
        }
        #expect(client.readsToEnd())
        #expect(test.closedCount == 1)
    }

    @Test func inProcessTheBodyIsWhatOpenedWrote() {
        var router = Router()
        let record = PushedRecord()
        router.add("GET", "/events") { _ in
            .pushed { stream in
                stream.send(Array("event: hello\n\n".utf8))
                stream.onClose { record.closed.withLock { $0 += 1 } }
            }
        }
        let answer = router.respond(to: HTTPRequest(method: "GET", target: "/events")).response
        #expect(answer.status == 200 && String(decoding: answer.body, as: UTF8.self) == "event: hello\n\n")
        #expect(record.closed.withLock { $0 } == 1)
    }
}
