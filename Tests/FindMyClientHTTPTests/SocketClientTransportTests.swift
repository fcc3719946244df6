import FindMyClient
import FindMyClientHTTP
import Foundation
import Synchronization
import Testing
import Threads

/// The transport against a server in this process that answers as scripted (so that framing and
/// connection reuse are seen byte for byte), and against a TLS server (python3's ssl) whose
/// certificate only a CA made for the test vouches for.
@Suite struct SocketClientTransportTests {
    @Test func aChunkedAndAContentLengthAnswerComeWholeOnOneKeptConnection() async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            connection.write(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Kind: chunked\r\n\r\n"
                    + "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\n")
            _ = connection.readRequest()
            connection.write("HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\nDone")
        }
        let transport = SocketClientTransport(timeoutSeconds: 10)
        let first = try await transport.send(ClientRequest(method: "GET", url: server.url + "/a"))
        #expect(first.status == 200)
        #expect(first.header("x-kind") == "chunked")
        #expect(String(decoding: first.body, as: UTF8.self) == "hello, world")
        let second = try await transport.send(
            ClientRequest(method: "POST", url: server.url + "/b", body: Array("{}".utf8)))
        #expect(second.status == 201)
        #expect(String(decoding: second.body, as: UTF8.self) == "Done")
        #expect(server.connections.withLock { $0 } == 1)
        let requests = server.requests.withLock { $0 }
        #expect(requests.first?.hasPrefix("GET /a HTTP/1.1\r\nHost: 127.0.0.1:") == true)
        #expect(requests.last?.contains("Content-Length: 2\r\n\r\n{}") == true)
    }

    @Test func aKeptConnectionTheServerClosedIsReplacedAndTheRequestSentOnce() async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            connection.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            // Closed without a word, as a server's idle timeout does.
        }
        let transport = SocketClientTransport(timeoutSeconds: 10)
        for _ in 0..<2 {
            let answer = try await transport.send(ClientRequest(method: "GET", url: server.url + "/"))
            #expect(answer.status == 200)
        }
        #expect(server.connections.withLock { $0 } == 2)
        #expect(server.requests.withLock { $0.count } == 2)
    }

    @Test func anAnswerCutShortIsAnErrorNotATruncatedBody() async throws {
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            connection.write("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        }
        await #expect {
            _ = try await SocketClientTransport(timeoutSeconds: 10).send(
                ClientRequest(method: "GET", url: server.url + "/"))
        } throws: { error in
            "\(error)".contains("closed the connection after 42 bytes")
        }
    }

    @Test func aStreamHandsEachPieceOverAsItComesAndEndsWhenTheTaskIsCancelled() async throws {
        let release = ConditionLock()
        let server = try ScriptedServer { connection in
            _ = connection.readRequest()
            connection.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfirst\n\r\n")
            // The stream stays open; the client ends it.
            release.withLock { release.wait() }
        }
        defer { release.broadcast() }
        let pieces = Mutex<[String]>([])
        let status = Mutex(0)
        let task = Task {
            try await SocketClientTransport(timeoutSeconds: 10, streamIdleSeconds: 60).stream(
                ClientRequest(method: "GET", url: server.url + "/stream"),
                onHead: { head in status.withLock { $0 = head.status } },
                onBytes: { bytes in pieces.withLock { $0.append(String(decoding: bytes, as: UTF8.self)) } })
        }
        let deadline = ContinuousClock.now + .seconds(60)
        while pieces.withLock({ $0 }).isEmpty && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(status.withLock { $0 } == 200)
        #expect(pieces.withLock { $0 } == ["first\n"])
        task.cancel()
        try await task.value
    }

    @Test func tlsIsCheckedAgainstTheSystemStoreAndTheHostAndTakenWithTheRightCA() async throws {
        let directory = NSTemporaryDirectory() + "findmy-transport-tls-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ca = try TLSServer.makeCertificates(in: directory)
        let server = try TLSServer(directory: directory)
        defer { server.stop() }
        let request = ClientRequest(method: "GET", url: "https://localhost:\(server.port)/")

        // Not a CA of the system's store.
        await #expect {
            _ = try await SocketClientTransport(timeoutSeconds: 10).send(request)
        } throws: { error in
            "\(error)".contains("certificate is not trusted for 'localhost'")
        }
        // The right CA, an address the certificate does not list.
        await #expect {
            _ = try await SocketClientTransport(timeoutSeconds: 10, caFile: ca).send(
                ClientRequest(method: "GET", url: "https://127.0.0.1:\(server.port)/"))
        } throws: { error in
            "\(error)".contains("IP address mismatch")
        }
        let answer = try await SocketClientTransport(timeoutSeconds: 10, caFile: ca).send(request)
        #expect(answer.status == 200)
        #expect(String(decoding: answer.body, as: UTF8.self) == "{\"tls\":true}")
    }
}

/// A TCP server on 127.0.0.1 running `script` on a thread of its own for each connection.
final class ScriptedServer: Sendable {
    let url: String
    let connections = Mutex(0)
    let requests = Mutex<[String]>([])
    private let listener: Int32

    init(_ script: @escaping @Sendable (ScriptedConnection) -> Void) throws {
        let listening = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(listening, pointer, length) == 0 && listen(listening, 8) == 0
                    && getsockname(listening, pointer, &length) == 0
            }
        }
        guard bound else { throw POSIXError(.EADDRINUSE) }
        listener = listening
        url = "http://127.0.0.1:\(UInt16(bigEndian: address.sin_port))"
        pthread_detach(
            spawnThread { [self] in
                while true {
                    let fd = accept(listening, nil, nil)
                    guard fd >= 0 else { return }
                    connections.withLock { $0 += 1 }
                    pthread_detach(
                        spawnThread {
                            let connection = ScriptedConnection(fd: fd, server: self)
                            script(connection)
                            close(fd)
                        })
                }
            })
    }

    deinit { shutdown(listener, Int32(SHUT_RDWR)) }
}

final class ScriptedConnection: Sendable {
    let fd: Int32
    let server: ScriptedServer
    init(fd: Int32, server: ScriptedServer) {
        self.fd = fd
        self.server = server
    }

    /// One request: its head and a body of its Content-Length; nil when the client closed.
    func readRequest() -> String? {
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while !bytes.suffix(4).elementsEqual(Array("\r\n\r\n".utf8)) {
            guard read(fd, &byte, 1) == 1 else { return nil }
            bytes.append(byte)
        }
        let head = String(decoding: bytes, as: UTF8.self)
        let length =
            head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
            .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
        for _ in 0..<length where read(fd, &byte, 1) == 1 { bytes.append(byte) }
        let request = String(decoding: bytes, as: UTF8.self)
        server.requests.withLock { $0.append(request) }
        return request
    }

    func write(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }
}

/// python3's TLS server on a free port of 127.0.0.1, with a certificate for DNS:localhost.
final class TLSServer: Sendable {
    let process: Process
    let port: Int

    /// A CA and a certificate for localhost it signed; the CA's file.
    static func makeCertificates(in directory: String) throws -> String {
        func openssl(_ arguments: [String]) throws {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            process.arguments = arguments
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else { throw POSIXError(.EINVAL) }
        }
        let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try openssl(
            ["req", "-x509"] + key + [
                "-keyout", "\(directory)/ca.key", "-out", "\(directory)/ca.pem", "-days", "2", "-subj",
                "/CN=findmy transport test CA",
            ])
        try openssl(
            ["req"] + key + [
                "-keyout", "\(directory)/server.key", "-out", "\(directory)/server.csr", "-subj",
                "/CN=localhost",
            ])
        try "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n".write(
            toFile: "\(directory)/server.ext", atomically: true, encoding: .utf8)
        try openssl([
            "x509", "-req", "-in", "\(directory)/server.csr", "-CA", "\(directory)/ca.pem", "-CAkey",
            "\(directory)/ca.key", "-CAcreateserial", "-out", "\(directory)/server.pem", "-days", "2",
            "-extfile", "\(directory)/server.ext",
        ])
        return "\(directory)/ca.pem"
    }

    init(directory: String) throws {
        let script = """
            import http.server, ssl, sys
            class Handler(http.server.BaseHTTPRequestHandler):
                protocol_version = "HTTP/1.1"
                def do_GET(self):
                    body = b'{"tls":true}'
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                def log_message(self, *args):
                    pass
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(sys.argv[1] + "/server.pem", sys.argv[1] + "/server.key")
            server.socket = context.wrap_socket(server.socket, server_side=True)
            print(server.server_address[1], flush=True)
            server.serve_forever()
            """
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, directory]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        var line: [UInt8] = []
        while true {
            let byte = output.fileHandleForReading.readData(ofLength: 1)
            guard let first = byte.first, first != UInt8(ascii: "\n") else { break }
            line.append(first)
        }
        guard let port = Int(String(decoding: line, as: UTF8.self)) else {
            kill(process.processIdentifier, SIGKILL)
            throw POSIXError(.ECONNREFUSED)
        }
        self.port = port
    }

    /// SIGKILL: the test process may hold SIGTERM blocked, and a child inherits that.
    func stop() {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}
