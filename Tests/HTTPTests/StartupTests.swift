import Foundation
import HTTP
import HTTPClient
import Testing

@Test func aPortInUseIsATypedError() throws {
    let first = try TestServer()
    defer { first.server.stop() }
    let address = "127.0.0.1:\(first.server.port)"
    #expect(throws: HTTPServerError.addressInUse(address)) {
        try HTTPServer.start(listen: address, router: Router())
    }
}

@Test(arguments: ["nonsense", "127.0.0.1:99999", "example.com:80", "unix:relative.sock"])
func badListenAddressesAreTypedErrors(address: String) {
    #expect {
        try HTTPServer.start(listen: address, router: Router())
    } throws: { error in
        guard case .badListenAddress(let given, _) = error as? HTTPServerError else { return false }
        return given == address && "\(error)".contains("use e.g. 127.0.0.1:8080")
    }
}

@Test func unixSocketIsOwnerOnlyAndRemovedOnStop() throws {
    let path = uniqueSocketPath()
    let test = try TestServer(listen: "unix:\(path)")
    let attributes = try FileManager.default.attributesOfItem(atPath: path)
    #expect((attributes[.posixPermissions] as? Int) == 0o600)
    #expect(try test.connection().send("GET", "/whoami").bodyText.hasSuffix(" unix"))
    test.server.stop()
    #expect(!FileManager.default.fileExists(atPath: path))
}

@Test func aStaleUnixSocketIsReplacedButALiveOneOrAFileIsNot() throws {
    let path = uniqueSocketPath()
    let live = try TestServer(listen: "unix:\(path)")
    #expect(throws: HTTPServerError.addressInUse("unix:\(path)")) {
        try HTTPServer.start(listen: "unix:\(path)", router: Router())
    }
    // Simulate a crash: close the daemon but leave the socket file behind.
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    live.server.stop()
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path.utf8) }
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
        }
    }
    close(fd)
    #expect(bound == 0 && FileManager.default.fileExists(atPath: path))
    let restarted = try TestServer(listen: "unix:\(path)")
    #expect(try restarted.connection().send("GET", "/whoami").status == 200)
    restarted.server.stop()

    #expect(FileManager.default.createFile(atPath: path, contents: Data("keep me".utf8)))
    defer { unlink(path) }
    #expect(throws: HTTPServerError.self) { try HTTPServer.start(listen: "unix:\(path)", router: Router()) }
    #expect(FileManager.default.contents(atPath: path) == Data("keep me".utf8))
}
