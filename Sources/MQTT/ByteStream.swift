#if canImport(Glibc)
    import Glibc
#endif

/// The bytes of one connection to the broker, over a socket the client connected: the socket
/// itself (`mqtt://`) or TLS over it (`mqtts://`, a stream from the module that owns OpenSSL, so
/// that MQTT never imports it). The client polls the socket and then calls `receive`.
public protocol ByteStream: AnyObject {
    /// Bytes the stream holds already: a poll of the socket would not see them.
    var hasBufferedBytes: Bool { get }
    /// Reads what is there. nil: nothing yet (poll again); 0: the broker closed the connection.
    func receive(into buffer: UnsafeMutableRawBufferPointer) throws -> Int?
    /// Writes every byte, blocking at most the socket's send timeout.
    func send(_ bytes: [UInt8]) throws
    /// Ends the stream; the client closes the socket after.
    func close()
}

/// Makes the stream of a connected socket to `host`: TLS for `mqtts://`. It may block for the
/// handshake (the socket has send and receive timeouts) and throws when the connection cannot be
/// used (an untrusted certificate), with words for the owner's log.
public typealias ByteStreamOpener = @Sendable (_ socket: Int32, _ host: String) throws -> any ByteStream

/// The socket as it is (`mqtt://`).
final class SocketStream: ByteStream {
    let socket: Int32

    init(socket: Int32) { self.socket = socket }

    var hasBufferedBytes: Bool { false }

    func receive(into buffer: UnsafeMutableRawBufferPointer) throws -> Int? {
        let count = recv(socket, buffer.baseAddress, buffer.count, 0)
        if count >= 0 { return count }
        if errno == EINTR || errno == EAGAIN { return nil }
        throw StreamError(description: "receiving: \(String(cString: strerror(errno)))")
    }

    func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let count = bytes.withUnsafeBytes {
                Glibc.send(socket, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL))
            }
            if count < 0 {
                if errno == EINTR { continue }
                throw StreamError(description: String(cString: strerror(errno)))
            }
            sent += count
        }
    }

    func close() {}
}

struct StreamError: Error, CustomStringConvertible {
    var description: String
}
