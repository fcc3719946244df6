import Foundation
import HTTPClient
import Testing

/// One client trickling many connections must not keep /healthz or the report from anyone else,
/// nor fill standard error with unstructured lines.
@Suite struct HTTPAbuseTests {
    @Test func healthAndReportsAreAnsweredWhileOneAddressTricklesManyConnections() throws {
        let data = ScratchDirectory("findmy-abuse")
        let alice = try addUser("alice", data: data.path)
        let server = try ServerProcess(
            data: data.path,
            extraArguments: ["--connections-max", "64", "--connections-per-address-max", "8"])
        var stopped = false
        defer { if !stopped { server.stop() } }
        let connection = HTTPConnection(address: server.address, reconnect: false)
        let device = try #require(
            try enrol(connection, userToken: alice, uuid: "0d1a5c1e-2fa1-11d2-883f-0016d3cca427")
                .string("device_token"))
        let port = try #require(Int(server.address.split(separator: ":").last ?? ""))

        // 100 connections from 127.0.0.2 (more than the whole server's 64), each starting a
        // request head it never finishes.
        var attackers: [Int32] = []
        defer { for fd in attackers { close(fd) } }
        for _ in 0..<100 {
            let fd = try connect(to: port, from: "127.0.0.2")
            _ = send(fd, "P", 1, Int32(MSG_NOSIGNAL))
            attackers.append(fd)
        }
        let refused = { attackers.filter(isClosedByServer).count }
        let deadline = Date().addingTimeInterval(30)
        while refused() < 92 && Date() < deadline { usleep(10_000) }
        #expect(refused() == 92, "one address kept more than its 8 connections")
        for fd in attackers where !isClosedByServer(fd) { _ = send(fd, "O", 1, Int32(MSG_NOSIGNAL)) }

        #expect(try connection.send("GET", "/healthz").status == 200)
        let report = try post(
            connection, "/api/find-my/report", token: device,
            body: reportBody(batchID: UUID().uuidString.lowercased(), fixes: [fixJSON()]))
        #expect(report.status == 200)
        stopped = true
        #expect(server.stop() == 0)
        // libmicrohttpd's line for each refused connection went through the structured log.
        let lines = server.process.standardError.split(separator: "\n")
        #expect(lines.allSatisfy { $0.hasPrefix("{") }, "unstructured lines on standard error")
        #expect(lines.contains { $0.contains(#""event":"http_message""#) && $0.contains("connection limit") })
    }
}

/// A TCP connection to 127.0.0.1:`port` from the loopback address `source`.
private func connect(to port: Int, from source: String) throws -> Int32 {
    func address(_ text: String, _ port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, text, &address.sin_addr)
        return address
    }
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
    var local = address(source, 0)
    var remote = address("127.0.0.1", UInt16(port))
    let size = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafePointer(to: &local) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, size) }
    }
    let connected = withUnsafePointer(to: &remote) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, size) }
    }
    guard fd >= 0, bound == 0, connected == 0 else {
        close(fd)
        throw TestFailure("cannot connect from \(source) to port \(port): errno \(errno)")
    }
    return fd
}

/// Whether the server has closed `fd`: a pending EOF or reset, seen without waiting.
private func isClosedByServer(_ fd: Int32) -> Bool {
    var byte: UInt8 = 0
    let count = recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
    return count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
}
