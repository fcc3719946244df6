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
    /// How long one call on the admin socket waits for its answer. A step that may take longer
    /// (a compaction) is started by one call and followed by others (`CompactRun.follow`).
    /// FINDMY_ADMIN_CALL_TIMEOUT_SECONDS changes it, for tests and very slow machines.
    static let timeoutSeconds: Int = {
        let text = getenv("FINDMY_ADMIN_CALL_TIMEOUT_SECONDS").map { String(cString: $0) }
        return text.flatMap { Int($0) }.map { max(1, $0) } ?? 30
    }()

    /// One admin request: method, path (with its query), JSON body; the answer's status and body.
    typealias Call = (_ method: String, _ path: String, _ body: [UInt8]) throws -> (
        status: Int, body: [UInt8]
    )

    /// The server answered the first call of a session on its socket, and no longer does.
    enum ServerGone: Error { case gone }

    /// The server's answer on the admin socket; nil when no server answers (no socket, or one left
    /// by a killed server). The body goes as JSON; a nil body sends no Content-Type.
    static func socket(data: String, _ method: String, _ path: String, body: [UInt8]?) throws -> (
        status: Int, body: [UInt8]
    )? {
        let socket = data + "/admin.sock"
        var info = stat()
        guard stat(socket, &info) == 0 else { return nil }
        let connection = HTTPConnection(
            address: "unix:" + socket, reconnect: false, timeoutSeconds: timeoutSeconds)
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
            try LogInspection.requireLog(data + "/log")
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
        try session(data: data, offline: offline) { call in try call(method, path, body) }
    }

    /// Several admin requests to one place, for a step that one call starts and later calls
    /// follow: the running server's socket when one answers, otherwise the same routes served in
    /// this process over the log opened here, kept open until `body` returns (what the first call
    /// started runs in this process meanwhile). On the socket, a later call that finds no server
    /// throws `ServerGone.gone`.
    static func session<R>(
        data: String, offline: (LogWriter) throws -> (Router, () -> Void), _ body: (Call) throws -> R
    ) throws -> R {
        var info = stat()
        if stat(data + "/admin.sock", &info) == 0 {
            var answered = false
            let remote: Call = { method, path, request in
                guard let answer = try socket(data: data, method, path, body: request) else {
                    throw ServerGone.gone
                }
                answered = true
                return answer
            }
            do {
                return try body(remote)
            } catch ServerGone.gone where !answered {
                // A socket left by a killed server: nobody answers, so this process serves itself.
            }
        }
        let log = try openLog(data: data, creating: false)
        defer { log.close() }
        let (router, close) = try offline(log)
        defer { close() }
        return try body { method, path, request in
            let response = router.respond(to: HTTPRequest(method: method, target: path, body: request))
                .response
            return (response.status, response.body)
        }
    }

    /// The body of a successful answer, or the server's error message as a usage error.
    static func check(_ answer: (status: Int, body: [UInt8])) throws -> JSONValue {
        let document = try? JSONParser.parse(answer.body)
        guard (200..<300).contains(answer.status), let document else {
            let message =
                (try? document?["error"]?["message"]?.stringValue)
                ?? String(decoding: answer.body, as: UTF8.self)
            throw UsageError(message)
        }
        return document
    }
}
