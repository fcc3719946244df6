import Events
import HTTPClient
import Ingest
import JSON

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy user add NAME [--admin] [--json]`: through the running server's admin socket when it
/// answers, otherwise by opening the log directly (the log has exactly one writer).
enum UserCommand {
    static let command = Command(
        name: "user", summary: "create users (works with or without the server running)"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy user add NAME [--admin] [--json] --data-dir DIR

        Creates a user and prints its API token once; only the token's SHA-256 is stored, so a lost
        token cannot be shown again. The user token enrols devices (POST /api/find-my/devices).

        When a server runs on DIR, the command goes through its admin socket DIR/admin.sock (owner
        only); otherwise it opens the event log itself.

        options:
          --data-dir DIR   the server's data directory; or set FINDMY_DATA_DIR
          --admin          the user administers users and devices (it still sees only its own locations)
          --json           print {"user_id": ..., "token": "..."}
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["data-dir"], flags: ["admin", "json"])
        if options.flag("help") || options.positional.isEmpty {
            print(help)
            return options.flag("help") ? 0 : 2
        }
        guard options.positional[0] == "add" else {
            throw UsageError("unknown subcommand '\(options.positional[0])'")
        }
        guard options.positional.count == 2 else { throw UsageError("user add takes exactly one NAME") }
        let name = options.positional[1]
        let data = try options.required("data-dir", environment: "FINDMY_DATA_DIR")
        let admin = options.flag("admin")
        let created = try viaSocket(data, name: name, admin: admin) ?? offline(data, name: name, admin: admin)
        if options.flag("json") {
            var writer = JSONWriter(capacity: 128)
            writer.beginObject()
            writer.key("user_id")
            writer.int64(Int64(created.userID))
            writer.key("token")
            writer.string(created.token)
            writer.endObject()
            printLine(String(decoding: writer.bytes, as: UTF8.self))
        } else {
            printLine("created user \(created.userID) '\(name)'\(admin ? " (admin)" : "")")
            printLine("API token (shown once, keep it): \(created.token)")
        }
        return 0
    }

    /// nil when no server answers on the socket.
    static func viaSocket(_ data: String, name: String, admin: Bool) throws -> (
        userID: UInt64, token: String
    )? {
        let path = data + "/admin.sock"
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        let connection = HTTPConnection(address: "unix:" + path, reconnect: false)
        var writer = JSONWriter(capacity: 96)
        writer.beginObject()
        writer.key("name")
        writer.string(name)
        writer.key("admin")
        writer.bool(admin)
        writer.endObject()
        let response: HTTPClientResponse
        do {
            response = try connection.send(
                "POST", "/admin/users", headers: [("Content-Type", "application/json")], body: writer.bytes)
        } catch {
            // A socket file left by a killed server: nobody answers.
            if case .connectFailed = error { return nil }
            throw error
        }
        let document = try JSONParser.parse(response.body)
        guard response.status == 201 else {
            let message = (try? document["error"]?["message"]?.stringValue) ?? response.bodyText
            throw UsageError(message)
        }
        return (UInt64(try document["user_id"]!.int64Value), try document["token"]!.stringValue)
    }

    static func offline(_ data: String, name: String, admin: Bool) throws -> (userID: UInt64, token: String) {
        try PosixFileIO().makeDirectory(data)
        let log: LogWriter
        do {
            log = try LogWriter(directory: data + "/log")
        } catch LogError.locked {
            throw UsageError(
                "a server holds the log in \(data) but its admin socket \(data)/admin.sock does not answer; "
                    + "wait for it to start, or stop it")
        }
        defer { log.close() }
        let service = try IngestService(log: log)
        do {
            let created = try service.createUser(name: name, role: admin ? .admin : .member)
            return (created.userID, created.token)
        } catch {
            throw UsageError(error.message)
        }
    }
}
