import CLI
import Events
import HTTP
import HTTPClient
import JSON

#if canImport(Glibc)
    import Glibc
#endif

/// The CLI's one way to change what a server owns: through the running server's admin socket
/// (DIR/admin.sock) when one answers, otherwise on the log opened here, which then has exactly one
/// writer. `user`, `retention` and `compact` all go through it.
enum AdminCall {
    /// The server's answer on the admin socket; nil when no server answers (no socket, or one left
    /// by a killed server). The body goes as JSON; a nil body sends no Content-Type.
    static func socket(data: String, _ method: String, _ path: String, body: [UInt8]?) throws -> (
        status: Int, body: [UInt8]
    )? {
        let socket = data + "/admin.sock"
        var info = stat()
        guard stat(socket, &info) == 0 else { return nil }
        let connection = HTTPConnection(address: "unix:" + socket, reconnect: false)
        do {
            let response = try connection.send(
                method, path, headers: body == nil ? [] : [("Content-Type", "application/json")],
                body: body ?? [])
            return (response.status, response.body)
        } catch {
            if case .connectFailed = error { return nil }
            throw error
        }
    }

    /// The log of DIR opened for writing, for when no server answers on the socket. `creating`
    /// makes DIR (and an empty log) when missing, as `user add` on a new directory needs; without it
    /// a missing log is a usage error.
    static func openLog(data: String, creating: Bool) throws -> LogWriter {
        if creating {
            try PosixFileIO().makeDirectory(data)
        } else {
            try LogCommand.requireLog(data + "/log")
        }
        do {
            return try LogWriter(directory: data + "/log")
        } catch LogError.locked {
            throw UsageError(
                "a server holds the log in \(data) but its admin socket \(data)/admin.sock does not answer; "
                    + "wait for it to start, or stop it")
        }
    }

    /// An admin request through the socket, or served in this process by the same routes over the
    /// log opened here.
    static func send(
        data: String, _ method: String, _ path: String, body: [UInt8],
        offline: (LogWriter) throws -> (Router, () -> Void)
    ) throws -> (status: Int, body: [UInt8]) {
        if let answer = try socket(data: data, method, path, body: body) { return answer }
        let log = try openLog(data: data, creating: false)
        defer { log.close() }
        let (router, close) = try offline(log)
        defer { close() }
        let response = router.respond(to: HTTPRequest(method: method, target: path, body: body)).response
        return (response.status, response.body)
    }

    /// The body of a successful answer, or the server's error message as a usage error.
    static func check(_ answer: (status: Int, body: [UInt8])) throws -> JSONValue {
        let document = try? JSONParser.parse(answer.body)
        guard answer.status == 200 || answer.status == 201, let document else {
            let message =
                (try? document?["error"]?["message"]?.stringValue)
                ?? String(decoding: answer.body, as: UTF8.self)
            throw UsageError(message)
        }
        return document
    }
}
