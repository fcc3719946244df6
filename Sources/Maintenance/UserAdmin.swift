import CLI
import Events
import HTTP
import Identity
import Ingest
import JSON

#if canImport(Glibc)
    import Glibc
#endif

/// `findmy user add|passwd|role|token|list` once parsed: through the running server's admin socket
/// when it answers, otherwise by opening the log directly (the log has exactly one writer).
package enum UserAdmin {
    /// `passwd`: sets NAME's password, read from standard input or prompted for on a terminal.
    package static func passwd(data: String, name: String) throws -> Int32 {
        let password = try readPassword()
        try mutate(
            data, path: "/admin/users/\(percentEncoded(name))/password", body: ["password": password]
        ) {
            service throws(APIError) in
            _ = try service.identity.setPassword(name: name, password: password)
        }
        printLine("password set for '\(name)'")
        return 0
    }

    /// `role`: makes NAME an administrator or a member.
    package static func role(data: String, name: String, role: Role) throws -> Int32 {
        try mutate(data, path: "/admin/users/\(percentEncoded(name))/role", body: ["role": role.name]) {
            service throws(APIError) in _ = try service.identity.changeRole(name: name, role: role)
        }
        printLine("'\(name)' is now \(role == .admin ? "an admin" : "a member")")
        return 0
    }

    /// `list`: the users, as JSON or one line each.
    package static func list(data: String, json: Bool) throws -> Int32 {
        let document: JSONValue
        if let answer = try AdminCall.socket(data: data, "GET", "/admin/users", body: nil) {
            document = (try? JSONParser.parse(answer.body)) ?? .null
        } else {
            let service = try offlineService(data)
            defer { service.log.close() }
            document = try JSONParser.parse(service.identity.usersJSON())
        }
        if json {
            var writer = JSONWriter(capacity: 256)
            writer.value(document)
            printLine(String(decoding: writer.bytes, as: UTF8.self))
        } else {
            for user in try document["users"]!.arrayValue {
                let role = try user["role"]!.stringValue
                let password = user["has_password"] == .bool(true) ? "password set" : "no password"
                printLine(
                    "\(try user["id"]!.int64Value)  \(try user["name"]!.stringValue)  \(role)  \(password)  "
                        + "\(try user["devices"]!.int64Value) devices")
            }
        }
        return 0
    }

    /// `add`: creates NAME and prints its API token once.
    package static func add(data: String, name: String, admin: Bool, json: Bool) throws -> Int32 {
        let created = try viaSocket(data, name: name, admin: admin) ?? offline(data, name: name, admin: admin)
        if json {
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

    /// `token`: with `rotate`, gives NAME a new API token and ends the earlier ones.
    package static func token(data: String, name: String, rotate: Bool, json: Bool) throws -> Int32 {
        guard rotate else {
            throw UsageError(
                "a user's API token is stored only as its SHA-256 hash and cannot be shown again; "
                    + "`findmy user token \(name) --rotate` gives '\(name)' a new one and ends the old one")
        }
        let userID: Int64
        let token: String
        if let answer = try AdminCall.socket(
            data: data, "POST", "/admin/users/\(percentEncoded(name))/token", body: nil)
        {
            let document = try AdminCall.check(answer)
            userID = try document["user_id"]!.int64Value
            token = try document["token"]!.stringValue
        } else {
            let service = try offlineService(data)
            defer { service.log.close() }
            do {
                let rotated = try service.identity.rotateUserToken(name: name, via: "cli")
                (userID, token) = (Int64(rotated.userID), rotated.token)
            } catch {
                throw UsageError(error.message)
            }
        }
        if json {
            var writer = JSONWriter(capacity: 128)
            writer.beginObject()
            writer.key("user_id")
            writer.int64(userID)
            writer.key("token")
            writer.string(token)
            writer.endObject()
            printLine(String(decoding: writer.bytes, as: UTF8.self))
        } else {
            printLine("new API token for user \(userID) '\(name)'; its earlier tokens no longer work")
            printLine("API token (shown once, keep it): \(token)")
        }
        return 0
    }

    /// The password from standard input: all of it (one trailing newline dropped) when it is not a
    /// terminal; on a terminal, prompted twice with echo off.
    static func readPassword() throws -> String {
        guard isatty(STDIN_FILENO) == 1 else {
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(STDIN_FILENO, &buffer, buffer.count)
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { break }
                bytes += buffer[0..<count]
            }
            if bytes.last == 0x0A { bytes.removeLast() }
            if bytes.last == 0x0D { bytes.removeLast() }
            return String(decoding: bytes, as: UTF8.self)
        }
        let first = try promptWithoutEcho("new password: ")
        let second = try promptWithoutEcho("again: ")
        guard first == second else { throw UsageError("the two passwords differ; nothing was changed") }
        return first
    }

    static func promptWithoutEcho(_ prompt: String) throws -> String {
        var saved = termios()
        tcgetattr(STDIN_FILENO, &saved)
        var quiet = saved
        quiet.c_lflag &= ~tcflag_t(ECHO)
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet)
        defer {
            tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved)
            writeStandardError("")
        }
        writeStandardErrorRaw(prompt)
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while read(STDIN_FILENO, &byte, 1) == 1, byte != 0x0A { bytes.append(byte) }
        return String(decoding: bytes, as: UTF8.self)
    }

    static func writeStandardErrorRaw(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }

    /// Through the admin socket when a server answers, otherwise on the log directly.
    static func mutate(
        _ data: String, path: String, body: [String: String],
        offline: (IngestService) throws(APIError) -> Void
    ) throws {
        var writer = JSONWriter(capacity: 128)
        writer.beginObject()
        for (key, value) in body.sorted(by: { $0.key < $1.key }) {
            writer.key(key)
            writer.string(value)
        }
        writer.endObject()
        if let answer = try AdminCall.socket(data: data, "POST", path, body: writer.bytes) {
            _ = try AdminCall.check(answer)
            return
        }
        let service = try offlineService(data)
        defer { service.log.close() }
        do {
            try offline(service)
        } catch {
            throw UsageError(error.message)
        }
    }

    static func offlineService(_ data: String) throws -> IngestService {
        let log = try AdminCall.openLog(data: data, creating: true)
        do {
            return try IngestService(log: log)
        } catch {
            log.close()
            throw error
        }
    }

    /// nil when no server answers on the socket.
    static func viaSocket(_ data: String, name: String, admin: Bool) throws -> (
        userID: UInt64, token: String
    )? {
        var writer = JSONWriter(capacity: 96)
        writer.beginObject()
        writer.key("name")
        writer.string(name)
        writer.key("admin")
        writer.bool(admin)
        writer.endObject()
        guard let answer = try AdminCall.socket(data: data, "POST", "/admin/users", body: writer.bytes) else {
            return nil
        }
        let document = try AdminCall.check(answer)
        return (UInt64(try document["user_id"]!.int64Value), try document["token"]!.stringValue)
    }

    static func offline(_ data: String, name: String, admin: Bool) throws -> (userID: UInt64, token: String) {
        let service = try offlineService(data)
        defer { service.log.close() }
        do {
            let created = try service.identity.createUser(name: name, role: admin ? .admin : .member)
            return (created.userID, created.token)
        } catch {
            throw UsageError(error.message)
        }
    }
}
