import Foundation
import HTTP
import HTTPClient
import Synchronization
import Testing

/// Both kinds of listen address the server supports.
let listenAddresses = ["127.0.0.1:0", "unix"]

func startServer(_ listen: String, limits: HTTPServer.Limits = HTTPServer.Limits()) throws -> TestServer {
    try TestServer(listen: listen == "unix" ? "unix:\(uniqueSocketPath())" : listen, limits: limits)
}

@Test(arguments: listenAddresses)
func routesWithPathParametersQueryAndHeaders(listen: String) throws {
    let test = try startServer(listen)
    defer { test.server.stop() }
    let response = try test.connection().send(
        "GET", "/api/find-my/devices/ab%20c/locations?since=2024-01-01T00%3A00%3A00Z&q=a+b%2Bc",
        headers: [("X-Device-Token", "t1")])
    #expect(response.status == 200)
    #expect(response.header("content-type") == "application/json")
    #expect(
        response.bodyText == #"{"id": "ab c", "since": "2024-01-01T00:00:00Z", "q": "a b+c", "token": "t1"}"#)
}

@Test(arguments: listenAddresses)
func unknownPathIs404AndWrongMethodIs405WithAllow(listen: String) throws {
    let test = try startServer(listen)
    defer { test.server.stop() }
    let connection = test.connection()
    let missing = try connection.send("GET", "/nope")
    #expect(missing.status == 404)
    #expect(missing.header("Content-Type") == "application/json")
    #expect(missing.bodyText.hasPrefix(#"{"error": {"code": "not_found", "message": "#))
    let wrongMethod = try connection.send("DELETE", "/echo")
    #expect(wrongMethod.status == 405)
    #expect(wrongMethod.header("Allow") == "POST")
    #expect(wrongMethod.bodyText.hasPrefix(#"{"error": {"code": "method_not_allowed", "#))
}

@Test func bodyAtTheLimitIsServedAndOneByteMoreIs413() throws {
    let test = try startServer("127.0.0.1:0", limits: HTTPServer.Limits(bodyBytesMax: 1024))
    defer { test.server.stop() }
    let atLimit = try test.connection().send("POST", "/echo", body: [UInt8](repeating: 7, count: 1024))
    #expect(atLimit.status == 200 && atLimit.body.count == 1024)
    let over = try test.connection().send("POST", "/echo", body: [UInt8](repeating: 7, count: 1025))
    #expect(over.status == 413)
    #expect(over.bodyText.contains(#""code": "body_too_large""#))
    #expect(over.bodyText.contains("1024 bytes"))
    #expect(test.echoCalls.withLock { $0 } == 1)
}

@Test func declaredContentLengthOverTheLimitIs413BeforeTheBody() throws {
    let test = try startServer("127.0.0.1:0", limits: HTTPServer.Limits(bodyBytesMax: 1024))
    defer { test.server.stop() }
    let client = try RawClient(port: test.server.port)
    client.write("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n\r\n")
    let response = try #require(client.readResponse())
    #expect(response.status == 413)
    #expect(response.bodyText.contains("1024 bytes"))
    #expect(test.echoCalls.withLock { $0 } == 0)
}

@Test(arguments: listenAddresses)
func chunkedBodyOverTheLimitIs413(listen: String) throws {
    let test = try startServer(listen, limits: HTTPServer.Limits(bodyBytesMax: 1024))
    defer { test.server.stop() }
    let request = HTTPClientRequest(
        method: "POST", target: "/echo", body: [UInt8](repeating: 1, count: 2000), chunkBytes: 300)
    let response = try test.connection().send(request)
    #expect(response.status == 413)
    #expect(response.bodyText.contains("1024 bytes"))
    // Past twice the limit the server stops draining and closes without an answer.
    let huge = HTTPClientRequest(
        method: "POST", target: "/echo", body: [UInt8](repeating: 1, count: 10_000), chunkBytes: 300)
    #expect(throws: HTTPClientError.self) { try test.connection().send(huge) }
    let small = HTTPClientRequest(method: "POST", target: "/echo", body: Array("hello".utf8), chunkBytes: 2)
    #expect(try test.connection().send(small).bodyText == "hello")
    #expect(test.echoCalls.withLock { $0 } == 1)
}

@Test func truncatedBodyNeverReachesTheHandlerAndTheServerGoesOn() throws {
    let test = try startServer("127.0.0.1:0", limits: HTTPServer.Limits(requestTimeoutSeconds: 1))
    defer { test.server.stop() }
    let head = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789"

    let closing = try RawClient(port: test.server.port)
    closing.write(head)
    closing.close()

    // The server, not the client's read timeout (far longer than the server's), ends the stalled
    // request: the connection closes with no answer.
    let stalling = try RawClient(port: test.server.port, timeoutSeconds: 120)
    stalling.write("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789")
    let ending = stalling.readToClose()
    #expect(ending.closed, "the idle timeout closes the stalled connection")
    #expect(ending.text == "")

    #expect(try test.connection().send("POST", "/echo", body: Array("ok".utf8)).bodyText == "ok")
    #expect(test.echoCalls.withLock { $0 } == 1)
}

@Test func oversizedHeadersAreRefusedWith431() throws {
    let test = try startServer("127.0.0.1:0", limits: HTTPServer.Limits(headerBytesMax: 8192))
    defer { test.server.stop() }
    let response = try test.connection().send(
        "GET", "/whoami", headers: [("X-Padding", String(repeating: "p", count: 20_000))])
    #expect(response.status == 431)
    #expect(try test.connection().send("GET", "/whoami").status == 200)
}

@Test(arguments: listenAddresses)
func keepAliveServesSeveralRequestsOnOneConnection(listen: String) throws {
    let test = try startServer(listen)
    defer { test.server.stop() }
    let connection = test.connection()
    let ids = try (0..<5).map { _ in try connection.send("GET", "/whoami").bodyText.split(separator: " ")[0] }
    #expect(connection.connectsCount == 1)
    #expect(Set(ids).count == 1)
    let other = try test.connection().send("GET", "/whoami").bodyText.split(separator: " ")[0]
    #expect(other != ids[0])
}

@Test func remoteAddressNamesThePeer() throws {
    let test = try startServer("127.0.0.1:0")
    defer { test.server.stop() }
    let whoami = try test.connection().send("GET", "/whoami").bodyText
    #expect(whoami.split(separator: " ")[1].hasPrefix("127.0.0.1:"))
}

@Test func blockingHandlersRunConcurrentlyAcross64Connections() throws {
    let test = try startServer("127.0.0.1:0")
    defer { test.server.stop() }
    let failures = Mutex<[String]>([])
    onThreads(64) { index in
        let connection = test.connection()
        for _ in 0..<4 {
            do {
                let response = try connection.send("GET", "/together?n=16")
                if response.status != 200 { failures.withLock { $0.append("status \(response.status)") } }
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        if connection.connectsCount != 1 { failures.withLock { $0.append("client \(index) reconnected") } }
    }
    #expect(failures.withLock { $0 } == [])
    let peak = test.handlersRunning.withLock { $0.max }
    #expect(peak >= 16, "handlers ran at most \(peak) at once; blocking handlers are being serialized")
    #expect(!test.gaveUp.withLock { $0 })
}

@Test(arguments: listenAddresses)
func stopWaitsForTheRequestInFlight(listen: String) throws {
    let test = try startServer(listen)
    defer { test.blockedRelease.open() }
    let result = Mutex<String?>(nil)
    let client = Thread {
        let text = (try? test.connection().send("GET", "/blocked"))?.bodyText ?? "failed"
        result.withLock { $0 = text }
    }
    client.start()
    #expect(waitUntil(timeoutSeconds: 30) { test.handlersRunning.withLock { $0.now } == 1 })
    // The handler is held until the stop has begun (new connections are refused), so the stop
    // cannot have ended before it.
    let stop = Background { test.server.stop() }
    #expect(
        waitUntil(timeoutSeconds: 30) {
            (try? test.connection(reconnect: false).send("GET", "/whoami")) == nil
        })
    #expect(!stop.isFinished)
    test.blockedRelease.open()
    #expect(waitUntil(timeoutSeconds: 30) { stop.isFinished && result.withLock { $0 } != nil })
    #expect(result.withLock { $0 } == "released")
    #expect(throws: HTTPClientError.self) { try test.connection(reconnect: false).send("GET", "/whoami") }
}

@Test func observerSeesRouteNameMethodStatusAndDuration() throws {
    let test = try startServer("127.0.0.1:0")
    let connection = test.connection()
    _ = try connection.send("GET", "/api/find-my/devices/d1/locations")
    _ = try connection.send("GET", "/nope")
    _ = try connection.send("PUT", "/echo")
    test.server.stop()
    let seen = test.observations.withLock { $0 }.map { "\($0.routeName) \($0.method) \($0.status)" }
    #expect(seen == ["/api/find-my/devices/{id}/locations GET 200", "unmatched GET 404", "/echo PUT 405"])
    #expect(test.observations.withLock { $0 }.allSatisfy { $0.durationMicros >= 0 })
}

@Test(arguments: listenAddresses)
func deferredHandlersAnswerFromAnotherThreadOnAKeptAliveConnection(listen: String) throws {
    let test = try startServer(listen)
    defer { test.server.stop() }
    let connection = test.connection()
    for index in 0..<5 {
        let response = try connection.send(
            "POST", "/deferred/later?ms=\(index * 5)", body: Array("b\(index)".utf8))
        #expect(response.status == 202)
        #expect(response.bodyText == "b\(index)")
        #expect(try connection.send("GET", "/deferred/now").bodyText == "at once")
    }
    #expect(connection.connectsCount == 1)
    let seen = test.observations.withLock { $0 }.map { "\($0.routeName) \($0.status)" }
    #expect(seen.prefix(2) == ["/deferred/later 202", "/deferred/now 200"])
}

@Test func aSlowBlockingHandlerDoesNotDelayDeferredAnswersOnOtherConnections() throws {
    let test = try startServer("127.0.0.1:0")
    defer { test.server.stop() }
    // Opened before the stop (defers run in reverse): a failing test must not leave it held.
    defer { test.blockedRelease.open() }
    let slowAnswer = Mutex<String?>(nil)
    let slow = Thread {
        let text = (try? test.connection().send("GET", "/blocked"))?.bodyText ?? "failed"
        slowAnswer.withLock { $0 = text }
    }
    slow.start()
    #expect(waitUntil(timeoutSeconds: 30) { test.handlersRunning.withLock { $0.now } == 1 })
    // Every other request is answered while the slow handler is still held: it is released
    // only afterwards.
    let connection = test.connection()
    for _ in 0..<20 {
        #expect(try connection.send("POST", "/deferred/later?ms=1").status == 202)
        #expect(try connection.send("GET", "/whoami").status == 200)
    }
    #expect(test.handlersRunning.withLock { $0.now } == 1)
    #expect(slowAnswer.withLock { $0 } == nil, "the slow handler was still held")
    test.blockedRelease.open()
    #expect(waitUntil(timeoutSeconds: 30) { slowAnswer.withLock { $0 } != nil })
    #expect(slowAnswer.withLock { $0 } == "released")
}

@Test func manyDeferredRequestsInFlightAcross64Connections() throws {
    let test = try startServer("127.0.0.1:0")
    defer { test.server.stop() }
    let failures = Mutex<[String]>([])
    onThreads(64) { index in
        let connection = test.connection()
        for round in 0..<20 {
            let body = Array("\(index)-\(round)".utf8)
            do {
                let response = try connection.send("POST", "/deferred/later?ms=2", body: body)
                if response.status != 202 || response.body != body {
                    failures.withLock { $0.append("\(index): \(response.status) \(response.bodyText)") }
                }
            } catch {
                failures.withLock { $0.append("\(index): \(error)") }
            }
        }
    }
    #expect(failures.withLock { $0 } == [])
}

@Test func stopAnswers503ToADeferredRequestNeverAnsweredAndIgnoresALateAnswer() throws {
    let test = try startServer("127.0.0.1:0")
    let result = Mutex<Int?>(nil)
    let client = Thread {
        let status = (try? test.connection(reconnect: false).send("GET", "/deferred/held"))?.status ?? -1
        result.withLock { $0 = status }
    }
    client.start()
    #expect(waitUntil(timeoutSeconds: 30) { test.heldReplies.withLock { $0.count } == 1 })
    // The handler never answers: the stop must still end once its grace period is over.
    let stop = Background { test.server.stop(gracePeriodSeconds: 0.3) }
    #expect(
        waitUntil(timeoutSeconds: 30) { stop.isFinished },
        "the stop waited past its grace period for an answer")
    #expect(waitUntil(timeoutSeconds: 30) { result.withLock { $0 } != nil })
    // Either the 503 went out before the connection closed, or the close came first.
    #expect([503, -1].contains(result.withLock { $0 }))
    // The handler's answer after the stop must touch nothing (the connection is gone).
    test.heldReplies.withLock { $0 }.first?(.text("too late"))
}

@Test func stopWaitsForADeferredRequestInFlight() throws {
    let test = try startServer("127.0.0.1:0")
    let result = Mutex<String?>(nil)
    let client = Thread {
        let text = (try? test.connection().send("GET", "/deferred/held"))?.bodyText ?? "failed"
        result.withLock { $0 = text }
    }
    client.start()
    #expect(waitUntil(timeoutSeconds: 30) { test.heldReplies.withLock { $0.count } == 1 })
    // Answered only once the stop has begun (new connections are refused).
    let stop = Background { test.server.stop() }
    #expect(
        waitUntil(timeoutSeconds: 30) {
            (try? test.connection(reconnect: false).send("GET", "/whoami")) == nil
        })
    #expect(!stop.isFinished)
    test.heldReplies.withLock { $0 }.first?(.text("kept"))
    #expect(waitUntil(timeoutSeconds: 30) { stop.isFinished && result.withLock { $0 } != nil })
    #expect(result.withLock { $0 } == "kept")
}
