import Foundation
import HTTP
import HTTPClient
import Synchronization
import Testing

// What one hostile or careless client must not be able to do to the server:
// hold its connections, slots or memory, or fill its log.

// MARK: Response headers

@Test func everyAnswerIsNosniffAndNotStoredUnlessTheHandlerSetsItsOwnCaching() throws {
    let test = try startServer("127.0.0.1:0", limits: HTTPServer.Limits(bodyBytesMax: 1024))
    defer { test.server.stop() }
    let connection = test.connection()
    let answers = [
        ("handler", try connection.send("GET", "/api/find-my/devices/d1/locations")),
        ("404", try connection.send("GET", "/nope")),
        ("405", try connection.send("DELETE", "/echo")),
        ("deferred", try connection.send("POST", "/deferred/later?ms=1", body: Array("b".utf8))),
        ("413", try test.connection().send("POST", "/echo", body: [UInt8](repeating: 1, count: 2000))),
    ]
    for (name, answer) in answers {
        #expect(answer.values("X-Content-Type-Options") == ["nosniff"], "\(name)")
        #expect(answer.values("Cache-Control") == ["no-store"], "\(name)")
    }
    let cached = try connection.send("GET", "/cached")
    #expect(cached.values("Cache-Control") == ["public, max-age=3600"])
    #expect(cached.values("X-Content-Type-Options") == ["nosniff"])
}

// MARK: Request smuggling

/// Requests whose end two parsers could place differently; each is followed on the same connection
/// by a second request that a confused front end might take for the start of the next one.
let ambiguousFraming: [(name: String, head: String, body: String)] = [
    ("two different Content-Length", "Content-Length: 5\r\nContent-Length: 6\r\n", "hello!"),
    ("Content-Length then chunked", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"),
    ("chunked then Content-Length", "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n"),
    ("chunked twice", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"),
    ("a coding other than chunked", "Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n"),
    ("a Content-Length list", "Content-Length: 5, 6\r\n", "hello!"),
]

@Test(arguments: ambiguousFraming.indices)
func ambiguousBodyFramingIs400AndTheConnectionIsClosed(index: Int) throws {
    let (name, head, body) = ambiguousFraming[index]
    let test = try startServer("127.0.0.1:0")
    defer { test.server.stop() }
    let client = try RawClient(port: test.server.port)
    client.write(
        "POST /echo HTTP/1.1\r\nHost: x\r\n\(head)\r\n\(body)GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n")
    let (answer, closed) = client.readToClose()
    #expect(answer.hasPrefix("HTTP/1.1 400 "), "\(name): \(answer)")
    #expect(closed, "\(name): the connection stayed open after the 400")
    #expect(!answer.contains("HTTP/1.1 200"), "\(name): the request after it was answered")
    #expect(test.echoCalls.withLock { $0 } == 0)
}

@Test func ourOwn400SaysWhatIsAmbiguousInJSON() throws {
    let test = try startServer("127.0.0.1:0")
    defer { test.server.stop() }
    let client = try RawClient(port: test.server.port)
    client.write(
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    let (answer, _) = client.readToClose()
    #expect(answer.contains(#"{"error": {"code": "ambiguous_body_length", "message": "#))
    #expect(answer.contains("Content-Length"))
}

@Test func aRepeatedIdenticalContentLengthIsStillServed() throws {
    let test = try startServer("127.0.0.1:0")
    defer { test.server.stop() }
    let client = try RawClient(port: test.server.port)
    client.write("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello")
    #expect(client.readResponse()?.bodyText == "hello")
}

/// The framing check runs on every request and trims blanks itself: fields that differ only in
/// blanks around the value, or in the coding's case, are one framing, not an ambiguous one. (Not a
/// coding with a blank after it: libmicrohttpd 0.9.75 does not take "chunked " for chunked.)
@Test func framingThatDiffersOnlyInBlanksOrCaseIsStillServed() throws {
    let test = try startServer("127.0.0.1:0")
    defer { test.server.stop() }
    let client = try RawClient(port: test.server.port)
    client.write("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length:\t5 \r\n\r\nhello")
    #expect(client.readResponse()?.bodyText == "hello")
    client.write(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    #expect(client.readResponse()?.bodyText == "hello")
}

/// libmicrohttpd keeps the blank after `chunked` in the field's value and then does not read the
/// body as chunked (it waited for the connection to close); a coding it would not take is refused.
@Test func aTransferCodingWithATrailingBlankIsRefusedNotLeftHanging() throws {
    let test = try startServer("127.0.0.1:0")
    defer { test.server.stop() }
    let client = try RawClient(port: test.server.port)
    client.write(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked \r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    let answer = try #require(client.readResponse())
    #expect(
        answer.status == 400 && answer.bodyText.contains("unsupported_transfer_encoding"),
        "\(answer.bodyText)")
}

// MARK: One client must not deny service

@Test func oneAddressCannotTakeEveryConnectionAndOthersAreStillAnswered() throws {
    let test = try startServer(
        "127.0.0.1:0", limits: HTTPServer.Limits(connectionsMax: 32, connectionsPerAddressMax: 8))
    defer { test.server.stop() }
    // 48 connections from 127.0.0.2, each sending a request head a byte at a time that it never
    // finishes (a slow-headers attack): more than the whole server's connection limit.
    var attackers: [RawClient] = []
    for _ in 0..<48 {
        let attacker = try RawClient(port: test.server.port, sourceAddress: "127.0.0.2")
        attacker.write("P")
        attackers.append(attacker)
    }
    #expect(
        waitUntil(timeoutSeconds: 20) { attackers.filter(\.isClosedByServer).count >= 40 },
        "the server did not refuse the connections past 8 from one address")
    for attacker in attackers where !attacker.isClosedByServer { attacker.write("O") }

    // Another address is still answered, on a blocking route (like /healthz) and a deferred one
    // (like the report).
    let connection = test.connection(reconnect: false)
    #expect(try connection.send("GET", "/whoami").status == 200)
    let report = try connection.send("POST", "/deferred/later?ms=1", body: Array("fix".utf8))
    #expect(report.status == 202 && report.bodyText == "fix")
    #expect(attackers.filter(\.isClosedByServer).count == 40)
}

@Test func aBodyTricklingBelowTheMinimumRateIsCutOff() throws {
    let clock = ManualClock()
    let test = try TestServer(
        limits: HTTPServer.Limits(bodyBytesPerSecondMin: 100, bodyRateGraceSeconds: 5), nowMicros: clock.now)
    defer { test.server.stop() }
    let head = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n"

    let slow = try RawClient(port: test.server.port)
    slow.write(head)
    // The interim answer shows the server has the head, so the body's clock has started.
    #expect(slow.read(through: "\r\n\r\n").hasPrefix("HTTP/1.1 100"))
    slow.write("0123456789")
    // 10 bytes allow 5 s of grace plus 0.1 s; a minute later the next byte finds it too slow.
    clock.advance(seconds: 60)
    slow.write("x")
    let (answer, closed) = slow.readToClose()
    #expect(closed && answer.isEmpty, "a body slower than 100 bytes a second was kept: \(answer)")

    // A body at the minimum rate is served, however its bytes are split.
    let steady = try RawClient(port: test.server.port)
    steady.write(head)
    #expect(steady.read(through: "\r\n\r\n").hasPrefix("HTTP/1.1 100"))
    steady.write(String(repeating: "a", count: 500))
    clock.advance(seconds: 9)  // 500 bytes allow 5 + 5 s
    steady.write(String(repeating: "b", count: 500))
    let served = steady.read(through: String(repeating: "b", count: 500))
    #expect(served.hasPrefix("HTTP/1.1 200"))
    #expect(test.echoCalls.withLock { $0 } == 1)
}

@Test func aRequestHeadNotCompleteInTimeIsCutOffAndARequestInProgressIsNot() throws {
    let clock = ManualClock()
    let test = try TestServer(limits: HTTPServer.Limits(requestHeadSecondsMax: 5), nowMicros: clock.now)
    defer { test.server.stop() }
    // A request whose head is in and whose handler holds it.
    let held = Mutex<Int?>(nil)
    let holder = Thread {
        let status =
            (try? test.connection(reconnect: false, timeoutSeconds: 60).send("GET", "/deferred/held"))?.status
        held.withLock { $0 = status ?? -1 }
    }
    holder.start()
    #expect(waitUntil(timeoutSeconds: 30) { test.heldReplies.withLock { $0.count } == 1 })

    let slow = try RawClient(port: test.server.port, sourceAddress: "127.0.0.3")
    slow.write("GET /whoami HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    // The test cannot see when the server noted the connection, so the server's clock keeps
    // moving until the head's time is up.
    #expect(
        waitUntil(timeoutSeconds: 30) {
            clock.advance(seconds: 6)
            slow.write("s")
            return slow.isClosedByServer
        }, "a head trickled for minutes of the server's clock was kept")
    // Logged just after the socket is shut down, so possibly after the client saw the end.
    let logged = LogLine.message(
        "request head from 127.0.0.3:\(slow.localPort) not complete within 5 s (requestHeadSecondsMax); "
            + "connection closed")
    #expect(waitUntil(timeoutSeconds: 30) { test.logLines.withLock { $0.contains(logged) } })

    test.heldReplies.withLock { $0 }.first?(.text("answered"))
    #expect(waitUntil(timeoutSeconds: 30) { held.withLock { $0 } != nil })
    #expect(held.withLock { $0 } == 200)
    // A keep-alive connection that sends its next request in time is served again.
    let connection = test.connection()
    #expect(try connection.send("GET", "/whoami").status == 200)
    #expect(try connection.send("GET", "/whoami").status == 200)
    #expect(connection.connectsCount == 1)
}

// MARK: libmicrohttpd's own messages

@Test func theLogLimiterPassesLinesPerMinuteThenCountsWhatItDropped() {
    var limiter = LogRateLimiter(linesPerMinuteMax: 2)
    let second: Int64 = 1_000_000
    #expect(limiter.admit("a", nowMicros: 0) == [.message("a")])
    #expect(limiter.admit("b", nowMicros: 10 * second) == [.message("b")])
    #expect(limiter.admit("c", nowMicros: 20 * second) == [])
    #expect(limiter.admit("d", nowMicros: 59 * second) == [])
    // The first line of a later minute says how many were left out before it.
    #expect(limiter.admit("e", nowMicros: 60 * second) == [.dropped(2), .message("e")])
    #expect(limiter.admit("f", nowMicros: 61 * second) == [.message("f")])
    #expect(limiter.admit("g", nowMicros: 62 * second) == [])
    // Stopping reports a count nobody else will.
    #expect(limiter.finish() == [.dropped(1)])
    #expect(limiter.finish() == [])
    // A quiet minute drops nothing and reports nothing.
    #expect(limiter.admit("h", nowMicros: 500 * second) == [.message("h")])
}

@Test func anAbortedConnectionIsReportedToTheSinkNotStandardError() async throws {
    let result = try await #require(
        processExitsWith: .success, observing: [\.standardErrorContent]
    ) {
        let test = try! TestServer()
        let client = try! RawClient(port: test.server.port)
        client.write("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n")
        // Leave once the server has the head: libmicrohttpd 0.9.75 (epoll) may not notice an end
        // of stream that arrives together with the last bytes it read, until the idle timeout.
        _ = client.read(through: "\r\n\r\n")
        client.close()
        let seen = waitUntil(timeoutSeconds: 20) {
            test.logLines.withLock { lines in
                lines.contains {
                    if case .message(let text) = $0 { text.contains("incomplete") } else { false }
                }
            }
        }
        test.server.stop()
        exit(seen ? 0 : 1)
    }
    let standardError = String(decoding: result.standardErrorContent, as: UTF8.self)
    #expect(!standardError.contains("incomplete"), "libmicrohttpd wrote to standard error: \(standardError)")
}
