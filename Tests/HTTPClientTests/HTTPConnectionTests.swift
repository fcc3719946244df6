import HTTPClient
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The blocking client against a scripted server: what it sends, how it reads each framing of an
/// answer, when it keeps, closes and reopens its connection, and the typed error of each failure.
@Suite struct HTTPConnectionTests {
    static func answer(_ body: String, status: String = "200 OK", headers: [String] = []) -> String {
        "HTTP/1.1 \(status)\r\n" + headers.map { $0 + "\r\n" }.joined()
            + "Content-Length: \(body.utf8.count)\r\n\r\n"
            + body
    }

    @Test func keptAliveRequestsShareOneConnection() throws {
        let server = try ScriptedServer([
            .reply(Self.answer("one")), .reply(Self.answer("two")), .reply(Self.answer("3")),
        ])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        #expect(try connection.send("GET", "/a").bodyText == "one")
        #expect(try connection.send("GET", "/b?x=1").bodyText == "two")
        #expect(try connection.send("DELETE", "/c").bodyText == "3")
        #expect(connection.connectsCount == 1 && server.connections == 1)
        let requests = server.requests
        #expect(
            requests.map(\.requestLine) == ["GET /a HTTP/1.1", "GET /b?x=1 HTTP/1.1", "DELETE /c HTTP/1.1"])
        #expect(requests.allSatisfy { $0.header("Host") == server.address })
        // No body, no framing header on a GET or DELETE.
        #expect(
            requests.allSatisfy {
                $0.header("Content-Length") == nil && $0.header("Transfer-Encoding") == nil
            })
    }

    @Test func requestBodiesGoWithContentLengthOrInChunks() throws {
        let server = try ScriptedServer([
            .reply(Self.answer("")), .reply(Self.answer("")), .reply(Self.answer("")),
        ])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let body = Array("a body of some thirty-odd bytes".utf8)
        _ = try connection.send("POST", "/length", headers: [("Host", "example.test")], body: body)
        _ = try connection.send(
            HTTPClientRequest(method: "PUT", target: "/chunks", body: body, chunkBytes: 4))
        _ = try connection.send("POST", "/empty")
        let requests = server.requests
        #expect(requests.count == 3)
        #expect(requests[0].header("Content-Length") == "\(body.count)" && requests[0].body == body)
        #expect(requests[0].header("Host") == "example.test", "a Host of the caller's replaces the address")
        #expect(
            requests[1].header("Transfer-Encoding") == "chunked"
                && requests[1].header("Content-Length") == nil)
        #expect(requests[1].body == body)
        #expect(requests[2].header("Content-Length") == "0" && requests[2].body.isEmpty)
    }

    @Test func answersAreReadByContentLengthChunksOrToTheClose() throws {
        let chunked =
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;name=value\r\nhello\r\n7\r\n, world\r\n0\r\nTrailer: x\r\n\r\n"
        let server = try ScriptedServer([
            .reply(Self.answer("by length", headers: ["X-Kind: length"])), .reply(chunked),
            .replyThenClose("HTTP/1.1 200 OK\r\n\r\nuntil the close"), .reply(Self.answer("again")),
        ])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let byLength = try connection.send("GET", "/1")
        #expect(
            byLength.status == 200 && byLength.bodyText == "by length"
                && byLength.header("x-kind") == "length")
        #expect(try connection.send("GET", "/2").bodyText == "hello, world")
        #expect(try connection.send("GET", "/3").bodyText == "until the close")
        #expect(!connection.isConnected, "a body read to the close leaves no connection")
        #expect(try connection.send("GET", "/4").bodyText == "again")
        #expect(connection.connectsCount == 2 && server.connections == 2)
    }

    @Test func noBodyIsReadForHeadAnd204And304() throws {
        let server = try ScriptedServer([
            .reply("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"),
            .reply("HTTP/1.1 204 No Content\r\n\r\n"),
            .reply("HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n"), .reply(Self.answer("after")),
        ])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        let head = try connection.send("HEAD", "/")
        #expect(head.status == 200 && head.body.isEmpty)
        #expect(try connection.send("GET", "/").status == 204)
        #expect(try connection.send("GET", "/").status == 304)
        // Had any of them waited for a body, this answer would have been read as one.
        #expect(try connection.send("GET", "/").bodyText == "after")
        #expect(connection.connectsCount == 1)
    }

    @Test func connectionCloseIsHonouredAndTheNextRequestReconnects() throws {
        let server = try ScriptedServer([
            .reply(Self.answer("bye", headers: ["Connection: close"])), .reply(Self.answer("hello again")),
        ])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        #expect(try connection.send("GET", "/").bodyText == "bye")
        #expect(!connection.isConnected)
        #expect(try connection.send("GET", "/").bodyText == "hello again")
        #expect(connection.connectsCount == 2)
    }

    @Test func aKeptAliveConnectionClosedWhileIdleIsReopenedOnceWhenAllowed() throws {
        let server = try ScriptedServer([
            .replyThenClose(Self.answer("first")), .reply(Self.answer("resent")),
            .reply(Self.answer("third")), .reply(Self.answer("fourth")),
        ])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address)
        #expect(try connection.send("GET", "/first").bodyText == "first")
        #expect(try connection.send("GET", "/second").bodyText == "resent")
        #expect(connection.connectsCount == 2)
        #expect(server.requests.map(\.requestLine) == ["GET /first HTTP/1.1", "GET /second HTTP/1.1"])

        connection.close()  // the server serves one connection at a time

        // Without reconnect, every request goes on a connection of its own, so none can be sent twice.
        let strict = HTTPConnection(address: server.address, reconnect: false)
        #expect(try strict.send("GET", "/third").bodyText == "third")
        #expect(!strict.isConnected)
        #expect(try strict.send("GET", "/fourth").bodyText == "fourth")
        #expect(strict.connectsCount == 2 && server.connections == 4)
    }

    @Test func anAnswerCutShortOrMalformedIsATypedError() throws {
        let cut = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n1234"
        let server = try ScriptedServer([
            .replyThenClose(cut), .replyThenClose("SPDY/3 200 OK\r\n\r\n"),
            .replyThenClose("HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"),
            .replyThenClose("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
            .replyThenClose(""),
        ])
        defer { server.stop() }
        func error(_ target: String) -> HTTPClientError? {
            do {
                _ = try HTTPConnection(address: server.address, reconnect: false).send("GET", target)
                return nil
            } catch {
                return error
            }
        }
        func malformed(_ target: String) -> String? {
            guard case .malformedResponse(let reason) = error(target) else { return nil }
            return reason
        }
        #expect(error("/cut") == .connectionClosed(bytesRead: cut.utf8.count))
        // The reasons are libcurl's words.
        #expect(malformed("/status")?.contains("HTTP/0.9") == true)
        #expect(malformed("/header")?.contains("Header without colon") == true)
        #expect(malformed("/chunk")?.contains("chunked") == true)
        #expect(error("/nothing") == .connectionClosed(bytesRead: 0))
    }

    @Test func aServerThatNeverAnswersIsATimeout() throws {
        let server = try ScriptedServer([.hold])
        defer { server.stop() }
        let connection = HTTPConnection(address: server.address, reconnect: false, timeoutSeconds: 1)
        #expect(throws: HTTPClientError.timedOut(seconds: 1)) { try connection.send("GET", "/") }
        #expect(!connection.isConnected)
    }

    @Test func unreachableAndMalformedAddressesAreTypedErrors() throws {
        // A port nobody listens on: bound, then closed.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var size = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, size) == 0 && getsockname(fd, $0, &size) == 0
            }
        }
        let port = UInt16(bigEndian: address.sin_port)
        close(fd)
        let refused = "127.0.0.1:\(port)"
        #expect(throws: HTTPClientError.connectFailed(refused, errno: ECONNREFUSED)) {
            try HTTPConnection(address: refused).send("GET", "/")
        }
        let missingSocket = "unix:/nonexistent/findmy-client-test.sock"
        #expect(throws: HTTPClientError.connectFailed(missingSocket, errno: ENOENT)) {
            try HTTPConnection(address: missingSocket).send("GET", "/")
        }
        for bad in [
            "no-port", "127.0.0.1:http", "example.com:80", "127.0.0.1:70000",
            "unix:/" + String(repeating: "x", count: 200),
        ] {
            #expect(throws: HTTPClientError.badAddress(bad)) {
                try HTTPConnection(address: bad).send("GET", "/")
            }
        }
    }

    @Test func aServersURLIsAnAddress() throws {
        let server = try ScriptedServer([.reply(Self.answer("{}"))])
        defer { server.stop() }
        let answer = try HTTPConnection(address: "http://\(server.address)/").send("GET", "/healthz")
        #expect(answer.status == 200)
        #expect(server.requests.first?.requestLine == "GET /healthz HTTP/1.1")
    }
}
